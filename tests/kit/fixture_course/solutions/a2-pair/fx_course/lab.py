"""The error an unfinished lab raises."""


class LabNotImplemented(NotImplementedError):
    """A lab piece the learner has not written yet."""

    def __init__(self, lab: str, target: str) -> None:
        super().__init__(f"Lab {lab} not implemented: {target}")
        self.lab, self.target = lab, target
