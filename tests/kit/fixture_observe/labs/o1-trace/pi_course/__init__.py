"""Fixture package, checkpoint o1."""

from .lab import LabNotImplemented
from .trace import steps

__all__ = ["LabNotImplemented", "steps"]
