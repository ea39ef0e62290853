"""Fixture package, checkpoint a1."""

from .counter import Counter
from .lab import LabNotImplemented

__all__ = ["Counter", "LabNotImplemented"]
