"""Checkpoint 09: a stateful Agent keeps one transcript across runs and tells its subscribers what happens.

The Agent owns the state; everything else sees copies. Each run is `run_start`, the loop's events,
then exactly one `run_end`, and the state is updated by a pure reducer before any subscriber hears
of an event. One run at a time: a second `prompt` while one is active is refused. A run has its own
cancellation controller and its own steering and follow-up queues, all discarded when it ends.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .agent_loop import AgentRunResult, LoopEvent, RunReason, ToolExecutor, run_agent_loop
from .lab import LabNotImplemented
from .messages import (
    AbortController,
    AgentContext,
    AgentMessage,
    Model,
    SystemMessage,
    UserMessage,
    assistant_message,
    current_system_prompt,
    now_ms,
    user_message,
)
from .tool import ToolRegistry

AgentStatus: TypeAlias = Literal["idle", "running"]

BUSY = "Agent is busy"
STEER_OUTSIDE_RUN = "steering 只在当前 run 尚未结束时有意义"
FOLLOW_UP_OUTSIDE_RUN = "follow-up 只在当前 run 尚未结束时排队"


# ## What an Agent publishes (given): its state, its events, a prompt's system patch


@dataclass
class PromptSystem:
    """A system patch sent with one prompt: appended just before that prompt's user message.

    The prompt only changes by appending system messages: `content` is added to the prompt in force
    (when not empty), each section replaces the one of its name, and a section set to None is deleted.
    """

    content: str | None = None
    sections: dict[str, str | None] | None = None


@dataclass
class AgentState:
    """What a renderer needs: the transcript, whether a run is active, and what is streaming now."""

    status: AgentStatus
    messages: list[AgentMessage]
    active_run_id: int | None = None
    last_reason: RunReason | None = None
    streaming_text: str = ""
    pending_tool_call_ids: list[str] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)


@dataclass
class AgentRunStart:
    """A run has begun; its system patch (if any) and user message are the run's first new messages."""

    run_id: int
    message: UserMessage
    system: SystemMessage | None = None
    type: Literal["run_start"] = "run_start"


@dataclass
class AgentLoop:
    """One event of the loop, tagged with the run it belongs to."""

    run_id: int
    event: LoopEvent
    type: Literal["loop"] = "loop"


@dataclass
class AgentRunEnd:
    """A run is over; emitted exactly once per run, carrying the loop's result."""

    run_id: int
    result: AgentRunResult
    type: Literal["run_end"] = "run_end"


AgentEvent: TypeAlias = AgentRunStart | AgentLoop | AgentRunEnd

AgentListener: TypeAlias = Callable[[AgentEvent], object]


@dataclass
class ActiveRun:
    """The private bookkeeping of the one run in progress: its id, controller and two queues."""

    id: int
    controller: AbortController
    steering: list[UserMessage] = field(default_factory=list)
    follow_ups: list[UserMessage] = field(default_factory=list)
    # False from the run's turn_end on: a message queued then could never be read by this run.
    accepting_input: bool = True


def take_all(queue: list[UserMessage]) -> list[UserMessage]:
    """Empty a queue and return what it held, oldest first."""
    taken = list(queue)
    queue.clear()
    return taken


# ## Lab 9.1 · the reducer: a new state from an old one and an event


def reduce_agent_state(state: AgentState, event: AgentEvent) -> AgentState:
    """Derive the next state; the input state and event are never changed, and late events are ignored."""
    raise LabNotImplemented("9.1", "reduce_agent_state")


class Agent:
    """Runs prompts one at a time over a transcript it keeps, publishing state and events."""

    _model: Model
    _tools: ToolRegistry
    _tool_executor: ToolExecutor | None
    _max_steps: int
    _state: AgentState
    _subscribers: dict[AgentListener, None]
    _pending_events: list[AgentEvent]
    _dispatching: bool
    _active_run: ActiveRun | None
    _next_run_id: int

    # ## Lab 9.2 · one run's lifecycle over a shared transcript

    def __init__(
        self,
        *,
        model: Model,
        tools: ToolRegistry,
        tool_executor: ToolExecutor | None = None,
        system_prompt: str | None = None,
        max_steps: int = 32,
    ) -> None:
        """Start idle; a non-empty `system_prompt` becomes the transcript's first message."""
        raise LabNotImplemented("9.2", "Agent")

    def get_state(self) -> AgentState:
        """A snapshot: a deep copy, so changing it changes nothing inside the Agent."""
        raise LabNotImplemented("9.2", "Agent.get_state")

    @property
    def system_prompt(self) -> str | None:
        """The prompt in force: every system message of the transcript replayed in order (read-only)."""
        raise LabNotImplemented("9.2", "Agent.system_prompt")

    def subscribe(self, listener: AgentListener) -> Callable[[], bool]:
        """Hear every later event; call the returned function to stop (it says whether it removed one)."""
        raise LabNotImplemented("9.2", "Agent.subscribe")

    def _emit(self, event: AgentEvent) -> None:
        """Reduce, then notify; an event emitted by a listener waits until this one has reached everyone."""
        raise LabNotImplemented("9.2", "Agent._emit")

    async def prompt(self, value: str, *, system: PromptSystem | None = None) -> AgentRunResult:
        """Run the loop once for `value` (after `system`'s patch, if given); raise when a run is active."""
        raise LabNotImplemented("9.2", "Agent.prompt")

    # ## Lab 9.3 · each subscriber gets its own copy, and a failing one harms nobody

    def _deliver(self, listener: AgentListener, event: AgentEvent) -> None:
        """Hand one listener its own copy of the event; a failure becomes a diagnostic line."""
        raise LabNotImplemented("9.3", "Agent._deliver")

    # ## Lab 9.4 · cancelling the run in progress

    def abort(self) -> None:
        """Cancel the active run (only it: the next prompt gets a fresh controller); idle, do nothing."""
        raise LabNotImplemented("9.4", "Agent.abort")

    # ## Lab 9.5 · steering and follow-up queues

    def steer(self, value: str) -> None:
        """Queue a message for the active run's next boundary (after a batch, or at a text stop)."""
        raise LabNotImplemented("9.5", "Agent.steer")

    def follow_up(self, value: str) -> None:
        """Queue a message for after the active run's natural stop."""
        raise LabNotImplemented("9.5", "Agent.follow_up")
