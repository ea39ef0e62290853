"""pi_course at checkpoint 00: the prologue's offline trace, to observe (nothing to implement)."""

from .demo.prologue import (
    PrologueOwner,
    PrologueTraceEvent,
    PrologueTraceType,
    assert_valid_prologue_trace,
    format_prologue_trace,
    run_prologue_demo,
)
from .lab import LabNotImplemented

__all__ = [
    "LabNotImplemented",
    "PrologueOwner",
    "PrologueTraceEvent",
    "PrologueTraceType",
    "assert_valid_prologue_trace",
    "format_prologue_trace",
    "run_prologue_demo",
]
