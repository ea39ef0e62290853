"""pi_course at checkpoint 02: model time as an EventStream that is pushed, read and resolved."""

from .demo.prologue import (
    PrologueOwner,
    PrologueTraceEvent,
    PrologueTraceType,
    assert_valid_prologue_trace,
    format_prologue_trace,
    run_prologue_demo,
)
from .event_stream import EventStream
from .lab import LabNotImplemented
from .survival.events import (
    INVALID_DELTA,
    DemoAborted,
    DemoDelta,
    DemoEvent,
    DemoFinished,
    DemoStarted,
    format_event,
    read_delta,
)

__all__ = [
    "INVALID_DELTA",
    "DemoAborted",
    "DemoDelta",
    "DemoEvent",
    "DemoFinished",
    "DemoStarted",
    "EventStream",
    "LabNotImplemented",
    "PrologueOwner",
    "PrologueTraceEvent",
    "PrologueTraceType",
    "assert_valid_prologue_trace",
    "format_event",
    "format_prologue_trace",
    "read_delta",
    "run_prologue_demo",
]
