"""Four demo events as a tagged union, formatted exhaustively, and one runtime boundary for outside data.

Two ideas carry the rest of the course:

- a **tagged union**: one dataclass per variant, each with a literal `type` tag. Checking the tag tells
  the type checker which variant it holds, and `typing.assert_never` makes it prove every variant is
  handled (run `mypy` on this file: a variant added to `DemoEvent` but not to `format_event` is an error);
- a **runtime boundary**: data from outside (JSON, the network) arrives as a plain `object`. Nothing
  about it is trusted until `read_delta` has checked every field it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, assert_never


@dataclass
class DemoStarted:
    """A request has started."""

    request_id: str
    type: Literal["started"] = "started"

    def to_dict(self) -> dict[str, Any]:
        """The course's form: `{"type": "started", "requestId": …}`."""
        return {"type": self.type, "requestId": self.request_id}


@dataclass
class DemoDelta:
    """A piece of text has arrived for a request."""

    request_id: str
    text: str
    type: Literal["delta"] = "delta"

    def to_dict(self) -> dict[str, Any]:
        """The course's form: `{"type": "delta", "requestId": …, "text": …}`."""
        return {"type": self.type, "requestId": self.request_id, "text": self.text}


@dataclass
class DemoFinished:
    """A request has finished, because the model stopped or ran out of length."""

    request_id: str
    reason: Literal["stop", "length"]
    type: Literal["finished"] = "finished"

    def to_dict(self) -> dict[str, Any]:
        """The course's form: `{"type": "finished", "requestId": …, "reason": …}`."""
        return {"type": self.type, "requestId": self.request_id, "reason": self.reason}


@dataclass
class DemoAborted:
    """A request was cancelled before it finished."""

    request_id: str
    type: Literal["aborted"] = "aborted"

    def to_dict(self) -> dict[str, Any]:
        """The course's form: `{"type": "aborted", "requestId": …}`."""
        return {"type": self.type, "requestId": self.request_id}


#: Exactly one of the four at a time: only a delta has `text`, only a finished event has `reason`.
DemoEvent = DemoStarted | DemoDelta | DemoFinished | DemoAborted

#: The one message of the boundary, whatever was wrong with the value.
INVALID_DELTA = "invalid delta event"


# ## Lab 1.1 · format the four events, and let the type checker prove none is missing
def format_event(event: DemoEvent) -> str:
    """One line per event: `start r1`, `delta r1 Pi`, `finish r1 stop`, `abort r2`."""
    # BEGIN LAB 1.1
    # Matching the tag narrows `event`: inside each case only that variant's fields exist.
    match event.type:
        case "started":
            return f"start {event.request_id}"
        case "delta":
            return f"delta {event.request_id} {event.text}"
        case "finished":
            return f"finish {event.request_id} {event.reason}"
        case "aborted":
            return f"abort {event.request_id}"
        case _:
            # No variant is left here, so mypy types `event` as Never. A variant added to DemoEvent
            # and forgotten above makes this line a type error; at run time it raises AssertionError.
            assert_never(event)
    # END LAB 1.1


# ## Lab 1.2 · check a delta that comes from outside before trusting it
def read_delta(value: object) -> DemoEvent:
    """A new DemoDelta built from `value` once every field it needs has been checked.

    `value` is whatever arrived from outside (e.g. `json.loads`): a dict with `type == "delta"` and string
    `requestId` and `text`. Anything else raises ValueError(`invalid delta event`).
    """
    # BEGIN LAB 1.2
    # `object` allows no field access: each check below adds one piece of evidence about `value`.
    if isinstance(value, dict):
        request_id, text = value.get("requestId"), value.get("text")
        if value.get("type") == "delta" and isinstance(request_id, str) and isinstance(text, str):
            # Build a new event from the checked fields only: other keys of `value` stay outside.
            return DemoDelta(request_id=request_id, text=text)
    raise ValueError(INVALID_DELTA)
    # END LAB 1.2
