"""Checkpoint 09: a stateful Agent keeps one transcript across runs and tells its subscribers what happens.

The Agent owns the state; everything else sees copies. Each run is `run_start`, the loop's events,
then exactly one `run_end`, and the state is updated by a pure reducer before any subscriber hears
of an event. One run at a time: a second `prompt` while one is active is refused. A run has its own
cancellation controller and its own steering and follow-up queues, all discarded when it ends.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .agent_loop import (
    AgentRunResult,
    LoopEvent,
    PrepareRequestHook,
    RunReason,
    ToolExecutor,
    run_agent_loop,
)
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


# ## the reducer: a new state from an old one and an event


def reduce_agent_state(state: AgentState, event: AgentEvent) -> AgentState:
    """Derive the next state; the input state and event are never changed, and late events are ignored."""
    if isinstance(event, AgentRunStart):
        patch = [copy.deepcopy(event.system)] if event.system is not None else []
        return dataclasses.replace(
            state,
            status="running",
            active_run_id=event.run_id,
            last_reason=None,
            # Copies all the way down: whoever holds the event's message can go on changing it.
            messages=[*copy.deepcopy(state.messages), *patch, copy.deepcopy(event.message)],
            streaming_text="",
            pending_tool_call_ids=[],
            diagnostics=list(state.diagnostics),
        )
    # An event of a run that is not the active one arrived late: the very same state comes back.
    if state.status != "running" or state.active_run_id != event.run_id:
        return state
    if isinstance(event, AgentLoop):
        loop = event.event
        if loop.type == "model_event" and loop.event.type == "text_delta":
            return dataclasses.replace(state, streaming_text=state.streaming_text + loop.event.delta)
        if loop.type == "tool_start":
            return dataclasses.replace(
                state, pending_tool_call_ids=[*state.pending_tool_call_ids, loop.call.id]
            )
        if loop.type == "tool_end" or loop.type == "tool_skipped":
            done = loop.result.tool_call_id
            return dataclasses.replace(
                state, pending_tool_call_ids=[i for i in state.pending_tool_call_ids if i != done]
            )
        if loop.type == "assistant_message":
            # The complete message replaces the deltas: nothing is streaming any more.
            return dataclasses.replace(state, streaming_text="")
        return state
    # run_end: the loop's transcript is the truth now, copied so the result's owner cannot reach it.
    return AgentState(
        status="idle",
        messages=copy.deepcopy(event.result.messages),
        last_reason=event.result.reason,
        streaming_text="",
        pending_tool_call_ids=[],
        diagnostics=list(state.diagnostics),
    )


# ## Lab 13.1 · an Agent resumed from a transcript


def restored_transcript(
    initial_messages: Sequence[AgentMessage], system_prompt: str | None
) -> list[AgentMessage]:
    """The opening transcript of an Agent resumed from `initial_messages`: a deep copy, with
    `system_prompt` put in front only when the restored history does not open with a system message."""
    # BEGIN LAB 13.1
    # Copies all the way down: the store's objects (content blocks, arguments, details) stay the store's.
    messages = copy.deepcopy(list(initial_messages))
    if (not messages or messages[0].role != "system") and system_prompt:
        messages.insert(0, SystemMessage(content=system_prompt, timestamp=0))
    return messages
    # END LAB 13.1


class Agent:
    """Runs prompts one at a time over a transcript it keeps, publishing state and events."""

    _model: Model
    _tools: ToolRegistry
    _tool_executor: ToolExecutor | None
    _max_steps: int
    _prepare_request: PrepareRequestHook | None
    _state: AgentState
    _subscribers: dict[AgentListener, None]
    _pending_events: list[AgentEvent]
    _dispatching: bool
    _active_run: ActiveRun | None
    _next_run_id: int

    # ## one run's lifecycle over a shared transcript

    def __init__(
        self,
        *,
        model: Model,
        tools: ToolRegistry,
        tool_executor: ToolExecutor | None = None,
        initial_messages: Sequence[AgentMessage] | None = None,
        system_prompt: str | None = None,
        max_steps: int = 32,
        prepare_request: PrepareRequestHook | None = None,
    ) -> None:
        """Start idle; a non-empty `system_prompt` becomes the transcript's first message.

        `initial_messages` is a restored transcript, deep-copied; when it already opens with a system
        message, that one stays the base prompt and `system_prompt` is not put in front of it.
        `prepare_request` (checkpoint 18) is handed to the loop of every run as it is.
        """
        self._model = model
        self._tools = tools
        self._tool_executor = tool_executor
        self._max_steps = max_steps
        self._prepare_request = prepare_request
        # The base prompt is not a request field: it is the first system message of the transcript.
        messages: list[AgentMessage] = (
            [SystemMessage(content=system_prompt, timestamp=0)] if system_prompt else []
        )
        if initial_messages is not None:
            # A resumed transcript replaces the fresh one (checkpoint 13).
            messages = restored_transcript(initial_messages, system_prompt)
        self._state = AgentState(status="idle", messages=messages)
        # A dict keeps insertion order and holds each listener once, like a set would not promise to.
        self._subscribers = {}
        self._pending_events = []
        self._dispatching = False
        self._active_run = None
        self._next_run_id = 1

    def get_state(self) -> AgentState:
        """A snapshot: a deep copy, so changing it changes nothing inside the Agent."""
        return copy.deepcopy(self._state)

    @property
    def system_prompt(self) -> str | None:
        """The prompt in force: every system message of the transcript replayed in order (read-only)."""
        return current_system_prompt(self._state.messages)

    def subscribe(self, listener: AgentListener) -> Callable[[], bool]:
        """Hear every later event; call the returned function to stop (it says whether it removed one)."""

        def unsubscribe() -> bool:
            return self._subscribers.pop(listener, False) is None

        self._subscribers[listener] = None
        return unsubscribe

    def _emit(self, event: AgentEvent) -> None:
        """Reduce, then notify; an event emitted by a listener waits until this one has reached everyone."""
        self._pending_events.append(event)
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending_events:
                current = self._pending_events.pop(0)
                # State first: a listener that reads get_state() already sees this event applied.
                self._state = reduce_agent_state(self._state, current)
                # A snapshot of the listeners: one that unsubscribes meanwhile does not shift the rest.
                for listener in list(self._subscribers):
                    self._deliver(listener, current)
        finally:
            self._dispatching = False

    async def prompt(self, value: str, *, system: PromptSystem | None = None) -> AgentRunResult:
        """Run the loop once for `value` (after `system`'s patch, if given); raise when a run is active."""
        if self._active_run is not None:
            raise RuntimeError(BUSY)
        patch = None
        if system is not None:
            sections = copy.deepcopy(system.sections) if system.sections is not None else None
            patch = SystemMessage(content=system.content or "", timestamp=now_ms(), sections=sections)
        message = user_message(value)
        context_messages: list[AgentMessage] = [
            *copy.deepcopy(self._state.messages),
            *([copy.deepcopy(patch)] if patch is not None else []),
            copy.deepcopy(message),
        ]
        # A fresh controller and fresh queues per run: nothing of an earlier run can reach this one.
        run = ActiveRun(id=self._next_run_id, controller=AbortController())
        self._next_run_id += 1
        self._active_run = run
        self._emit(AgentRunStart(run_id=run.id, message=message, system=patch))

        def on_event(event: LoopEvent) -> None:
            if event.type == "turn_end":
                run.accepting_input = False
            self._emit(AgentLoop(run_id=run.id, event=event))

        try:
            result = await run_agent_loop(
                model=self._model,
                tools=self._tools,
                context=AgentContext(messages=context_messages),
                signal=run.controller.signal,
                on_event=on_event,
                execute_tool_call=self._tool_executor,
                max_steps=self._max_steps,
                prepare_request=self._prepare_request,
                take_steering_messages=lambda: take_all(run.steering),
                take_follow_up_messages=lambda: take_all(run.follow_ups),
            )
        except Exception as error:
            # Whatever the loop could not settle still ends this run with a result, never a stuck Agent.
            failed = assistant_message([], "error", error_message=str(error) or type(error).__name__)
            result = AgentRunResult(reason="error", messages=[*context_messages, failed], steps=0)
        finally:
            # Only this run's own slot: a listener may already have started the next run.
            if self._active_run is run:
                self._active_run = None
            run.steering.clear()
            run.follow_ups.clear()
        self._emit(AgentRunEnd(run_id=run.id, result=result))
        return copy.deepcopy(result)

    # ## each subscriber gets its own copy, and a failing one harms nobody

    def _deliver(self, listener: AgentListener, event: AgentEvent) -> None:
        """Hand one listener its own copy of the event; a failure becomes a diagnostic line."""
        try:
            listener(copy.deepcopy(event))
        except Exception as error:
            # A broken renderer must not stop the run or the other listeners: remember it and go on.
            line = f"subscriber: {str(error) or type(error).__name__}"
            self._state = dataclasses.replace(self._state, diagnostics=[*self._state.diagnostics, line])

    # ## cancelling the run in progress

    def abort(self) -> None:
        """Cancel the active run (only it: the next prompt gets a fresh controller); idle, do nothing."""
        if self._active_run is not None:
            self._active_run.controller.abort()

    # ## steering and follow-up queues

    def steer(self, value: str) -> None:
        """Queue a message for the active run's next boundary (after a batch, or at a text stop)."""
        if self._active_run is None or not self._active_run.accepting_input:
            raise RuntimeError(STEER_OUTSIDE_RUN)
        self._active_run.steering.append(user_message(value))

    def follow_up(self, value: str) -> None:
        """Queue a message for after the active run's natural stop."""
        if self._active_run is None or not self._active_run.accepting_input:
            raise RuntimeError(FOLLOW_UP_OUTSIDE_RUN)
        self._active_run.follow_ups.append(user_message(value))
