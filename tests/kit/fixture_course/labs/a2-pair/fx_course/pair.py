"""Two counters side by side."""

from .counter import Counter
from .lab import LabNotImplemented


# ## Lab 2.1
class Pair:
    """A left and a right counter."""

    def __init__(self) -> None:
        """Make both counters."""
        raise LabNotImplemented("2.1", "Pair")

    # ## Lab 2.2
    def total(self) -> int:
        """Both counts added."""
        raise LabNotImplemented("2.2", "Pair.total")
