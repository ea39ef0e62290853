"""A counter: the fixture course's teaching file."""

from .lab import LabNotImplemented


# ## Lab 1.1
class Counter:
    """Counts up from zero."""

    def __init__(self) -> None:
        """Start at zero."""
        self.count = 0

    def add(self) -> int:
        """Count one more and return the new count."""
        raise LabNotImplemented("1.1", "Counter.add")

    # ## Lab 1.2
    def reset(self) -> None:
        """Go back to zero."""
        raise LabNotImplemented("1.2", "Counter.reset")
