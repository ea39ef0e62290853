"""The prologue's offline trace: one README request goes round the whole agent loop in seven milestones.

Nothing here calls a model or reads a file. The seven events are a fixed fixture, so every run shows
the same trace: the user's goal, the model asking for the `read` tool, the loop starting it, the tool's
result, and the model's final answer. Checkpoint 00 observes this file; there is nothing to implement.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# ## Lab 0.1 · seven milestones and their owners (observation step: nothing to implement)

#: Whose fact an event records. The loop starts every model call, yet `model_start` belongs to the model.
PrologueOwner = Literal["user", "model", "loop", "tool"]

#: The five kinds of milestone. Only user_message, assistant_message and tool_result will later become
#: messages of the transcript; model_start and tool_start only show progress.
PrologueTraceType = Literal["user_message", "model_start", "assistant_message", "tool_start", "tool_result"]


@dataclass
class PrologueTraceEvent:
    """One milestone of the trace: its position (from 1), owner, kind, a short detail, and a tool call's
    id."""

    step: int
    owner: PrologueOwner
    type: PrologueTraceType
    detail: str
    #: The id that ties a tool request to its result; None where no tool call is involved.
    tool_call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The course's form of the event: camelCase keys, without `toolCallId` when there is none."""
        data: dict[str, Any] = {
            "step": self.step,
            "owner": self.owner,
            "type": self.type,
            "detail": self.detail,
        }
        if self.tool_call_id is not None:
            data["toolCallId"] = self.tool_call_id
        return data


# The fixture. A real run would reach the file system at step 5; this one only replays what it returned.
_TRACE: tuple[PrologueTraceEvent, ...] = (
    PrologueTraceEvent(1, "user", "user_message", "读取 README.md，并概括项目"),
    PrologueTraceEvent(2, "model", "model_start", "turn=1"),
    PrologueTraceEvent(3, "model", "assistant_message", "stopReason=toolUse name=read", "call_1"),
    PrologueTraceEvent(4, "loop", "tool_start", "name=read", "call_1"),
    PrologueTraceEvent(5, "tool", "tool_result", "README fixture", "call_1"),
    PrologueTraceEvent(6, "model", "model_start", "turn=2"),
    PrologueTraceEvent(7, "model", "assistant_message", "stopReason=stop"),
)


def run_prologue_demo() -> list[PrologueTraceEvent]:
    """Replay the offline trace: a fresh copy each time, checked before anyone sees it."""
    # A deep copy: whatever a caller does to the events it gets, the next run starts from the fixture.
    trace = copy.deepcopy(list(_TRACE))
    assert_valid_prologue_trace(trace)
    return trace


def format_prologue_trace(events: Sequence[PrologueTraceEvent]) -> str:
    """One line per event: the step on two digits, the kind padded to 17 columns, the owner, the detail."""
    return "\n".join(
        f"{str(event.step).rjust(2, '0')} {event.type.ljust(17)} owner={event.owner} {event.detail}"
        for event in events
    )


# ## Lab 0.2 · every tool call is answered by its result (observation step: nothing to implement)
def assert_valid_prologue_trace(events: Sequence[PrologueTraceEvent]) -> None:
    """Refuse a trace whose steps do not count 1, 2, 3…, or whose tool calls and results do not pair up.

    Raises ValueError with the course's message: `trace step 应为 N`, `tool result 先于对应的 tool call`,
    or `tool call <id> 缺少配对结果`.
    """
    # A dict keeps the calls in the order they were made, so the first unanswered one is reported.
    calls: dict[str, None] = {}
    results: set[str] = set()
    for index, event in enumerate(events):
        if event.step != index + 1:
            raise ValueError(f"trace step 应为 {index + 1}")
        # A tool call is opened by the model's assistant message, not by the loop's tool_start.
        if event.type == "assistant_message" and event.tool_call_id:
            calls[event.tool_call_id] = None
        if event.type == "tool_result":
            if not event.tool_call_id or event.tool_call_id not in calls:
                raise ValueError("tool result 先于对应的 tool call")
            results.add(event.tool_call_id)
    # Checked after the whole trace: a final answer cannot stand in for a result that never came.
    for call_id in calls:
        if call_id not in results:
            raise ValueError(f"tool call {call_id} 缺少配对结果")
