"""The numbered error that every unfinished lab raises (given, parent state)."""

from __future__ import annotations


class LabNotImplemented(NotImplementedError):
    """Raised by a starter piece that a lab asks you to write."""

    def __init__(self, lab: str, target: str) -> None:
        super().__init__(f"Lab {lab} not implemented: {target}")
        self.lab = lab
        self.target = target
