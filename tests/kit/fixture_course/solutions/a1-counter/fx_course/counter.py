"""A counter: the fixture course's teaching file."""


# ## Lab 1.1
class Counter:
    """Counts up from zero."""

    def __init__(self) -> None:
        """Start at zero."""
        self.count = 0

    def add(self) -> int:
        """Count one more and return the new count."""
        # BEGIN LAB 1.1
        self.count += 1
        return self.count
        # END LAB 1.1

    # ## Lab 1.2
    def reset(self) -> None:
        """Go back to zero."""
        # BEGIN LAB 1.2
        self.count = 0
        # END LAB 1.2
