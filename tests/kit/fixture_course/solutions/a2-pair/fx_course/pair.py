"""Two counters side by side."""

from .counter import Counter


# ## Lab 2.1
class Pair:
    """A left and a right counter."""

    def __init__(self) -> None:
        """Make both counters."""
        # BEGIN LAB 2.1
        self.left = Counter()
        self.right = Counter()
        # END LAB 2.1

    # ## Lab 2.2
    def total(self) -> int:
        """Both counts added."""
        # BEGIN LAB 2.2
        return self.left.count + self.right.count
        # END LAB 2.2
