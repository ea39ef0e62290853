"""Checkpoint 07: the agent loop asks the model, runs the tools it calls, and asks again.

One run keeps its own transcript: a deep copy of the caller's messages that only grows. Each turn
appends one complete assistant message; when that message ends in `toolUse` with calls, every call
is answered by a paired tool result before the model is asked again. Every other ending answers
the calls it saw with skipped results, and the run ends with exactly one `turn_end`.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from .messages import (
    AbortSignal,
    AgentContext,
    AgentMessage,
    AssistantMessage,
    Model,
    ModelEvent,
    TextContent,
    ToolCall,
    ToolResultMessage,
    text,
)
from .tool import ToolRegistry
from .tool import execute_tool_call as execute_core_tool_call

RunReason: TypeAlias = Literal["stop", "length", "error", "aborted", "maxSteps"]
SkipReason: TypeAlias = Literal["length", "error", "aborted", "unexpected-stop"]


# ## What a run reports (given): its events and its result


@dataclass
class LoopModelEvent:
    """One event of the model's stream, passed on as it arrives (for live display only)."""

    event: ModelEvent
    type: Literal["model_event"] = "model_event"


@dataclass
class LoopAssistantMessage:
    """A complete assistant message has just been appended to the transcript."""

    message: AssistantMessage
    type: Literal["assistant_message"] = "assistant_message"


@dataclass
class LoopToolStart:
    """A call of the batch is about to run."""

    call: ToolCall
    type: Literal["tool_start"] = "tool_start"


@dataclass
class LoopToolProgress:
    """A running tool reported progress; `call_id` says which call it belongs to."""

    call_id: str
    content: list[TextContent]
    type: Literal["tool_progress"] = "tool_progress"


@dataclass
class LoopToolEnd:
    """A call has finished (in completion order, which need not be call order)."""

    result: ToolResultMessage
    type: Literal["tool_end"] = "tool_end"


@dataclass
class LoopToolSkipped:
    """A call was answered without running: the turn ended in a way that runs no tool."""

    result: ToolResultMessage
    type: Literal["tool_skipped"] = "tool_skipped"


@dataclass
class LoopTurnEnd:
    """The run is over; emitted exactly once, carrying the run's reason."""

    reason: RunReason
    type: Literal["turn_end"] = "turn_end"


LoopEvent: TypeAlias = (
    LoopModelEvent
    | LoopAssistantMessage
    | LoopToolStart
    | LoopToolProgress
    | LoopToolEnd
    | LoopToolSkipped
    | LoopTurnEnd
)


@dataclass
class AgentRunResult:
    """How a run ended, its whole transcript, and how many model requests it completed."""

    reason: RunReason
    messages: list[AgentMessage]
    steps: int


class ToolExecutor(Protocol):
    """Answers one call with a paired result, as 06's `execute_tool_call` does for a registry."""

    def __call__(
        self,
        call: ToolCall,
        /,
        *,
        signal: AbortSignal | None = None,
        report_progress: Callable[[list[TextContent]], None] | None = None,
    ) -> Awaitable[ToolResultMessage]: ...


def registry_executor(tools: ToolRegistry) -> ToolExecutor:
    """The default executor: 06's lookup → parse → execute → result against this run's registry."""

    def execute(
        call: ToolCall,
        *,
        signal: AbortSignal | None = None,
        report_progress: Callable[[list[TextContent]], None] | None = None,
    ) -> Awaitable[ToolResultMessage]:
        return execute_core_tool_call(call, tools, signal=signal, report_progress=report_progress)

    return execute


def tool_calls(message: AssistantMessage) -> list[ToolCall]:
    """The message's tool calls, in the order the model wrote them."""
    return [block for block in message.content if isinstance(block, ToolCall)]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ## Lab 7.1 · one model turn, one ending


class LoopRun:
    """The state of one run: its own transcript, its observer, and whether it has ended."""

    messages: list[AgentMessage]
    on_event: Callable[[LoopEvent], object] | None
    ended: bool

    def __init__(self, context: AgentContext, on_event: Callable[[LoopEvent], object] | None) -> None:
        """Start the transcript as a deep copy of the caller's messages; the caller's stay untouched."""
        # BEGIN LAB 7.1 LoopRun
        # A copy of every message, not just of the list: the run may hand its messages to anyone.
        self.messages = copy.deepcopy(context.messages)
        self.on_event = on_event
        self.ended = False
        # END LAB 7.1

    def emit(self, event: LoopEvent) -> None:
        """Tell the observer, if there is one."""
        if self.on_event is not None:
            self.on_event(event)

    def finish(self, reason: RunReason, steps: int) -> AgentRunResult:
        """End the run: the first call emits the one `turn_end`; every call returns the result."""
        # BEGIN LAB 7.1
        if not self.ended:
            self.ended = True
            self.emit(LoopTurnEnd(reason=reason))
        return AgentRunResult(reason=reason, messages=self.messages, steps=steps)
        # END LAB 7.1


async def collect_model_turn(
    run: LoopRun, model: Model, tools: ToolRegistry, *, signal: AbortSignal | None = None
) -> AssistantMessage:
    """Ask the model once; pass each event on, then append and announce the final assistant message."""
    # BEGIN LAB 7.1
    # The request is the transcript (system messages stay where they are: folding them is the
    # adapter's job) and the registry's definitions of now, never the caller's stale context.tools.
    # The model gets its own copy, so nothing it does with it can reach the transcript.
    request = AgentContext(messages=copy.deepcopy(run.messages), tools=tools.definitions())
    stream = model.stream(request, signal=signal)
    async for event in stream:
        run.emit(LoopModelEvent(event=event))
    assistant = await stream.result()
    # Deltas were for display; only the complete message enters the transcript, once.
    run.messages.append(assistant)
    run.emit(LoopAssistantMessage(message=assistant))
    return assistant
    # END LAB 7.1


# ## Lab 7.2 · one tool round trip, inside the batch it belongs to


async def run_tool_call(
    run: LoopRun, call: ToolCall, executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> ToolResultMessage:
    """Run one call with the run's signal and a progress reporter bound to its id; announce its end."""
    # BEGIN LAB 7.2

    def report_progress(content: list[TextContent]) -> None:
        run.emit(LoopToolProgress(call_id=call.id, content=content))

    try:
        result = await executor(call, signal=signal, report_progress=report_progress)
    except Exception as error:
        # An injected executor need not answer like 06's does: the call still gets its result.
        result = failed_execution(call, error)
    run.emit(LoopToolEnd(result=result))
    return result
    # END LAB 7.2


async def run_tool_batch(
    run: LoopRun, calls: Sequence[ToolCall], executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> list[ToolResultMessage]:
    """Start every call of the batch at once; append the results in call order once all have ended."""
    # BEGIN LAB 7.2
    for call in calls:
        run.emit(LoopToolStart(call=call))
    # gather runs the calls concurrently and hands back their results in the order of `calls`,
    # whatever order they finished in (tool_end has already told the observer that order).
    results = await asyncio.gather(*(run_tool_call(run, call, executor, signal=signal) for call in calls))
    run.messages.extend(results)
    return list(results)
    # END LAB 7.2


# ## Lab 7.3 · turns that run no tool


def skipped_result(call: ToolCall, reason: SkipReason) -> ToolResultMessage:
    """Answer a call that was never run, saying why; it keeps the call's id and name."""
    # BEGIN LAB 7.3
    if reason == "length":
        explanation = "the model response was truncated"
    elif reason == "unexpected-stop":
        explanation = "the model returned stop with a tool call"
    else:
        explanation = f"the model turn ended with {reason}"
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool call was not executed because {explanation}.")],
        details={"skipped": True, "reason": reason},
        is_error=True,
        timestamp=_now_ms(),
    )
    # END LAB 7.3


def end_without_tools(
    run: LoopRun, assistant: AssistantMessage, calls: Sequence[ToolCall], steps: int
) -> AgentRunResult:
    """End a turn that must run no tool: answer each call it holds as skipped, then finish."""
    # BEGIN LAB 7.3
    reason: SkipReason
    ending: RunReason
    if assistant.stop_reason in ("length", "error", "aborted"):
        # A cut-off reply may hold half-written arguments; a failed one was never meant to act.
        reason = ending = assistant.stop_reason
    elif assistant.stop_reason == "stop":
        # The model said it was done, yet asked for a tool: a protocol error, not a request.
        reason, ending = "unexpected-stop", "error"
    else:
        # toolUse without a single call: nothing to run and nothing to answer.
        return run.finish("error", steps)
    for call in calls:
        result = skipped_result(call, reason)
        run.messages.append(result)
        run.emit(LoopToolSkipped(result=result))
    return run.finish(ending, steps)
    # END LAB 7.3


# ## Lab 7.4 · a batch whose executor fails


def failed_execution(call: ToolCall, error: Exception) -> ToolResultMessage:
    """Answer a call whose executor raised: the message only, never the exception or its traceback."""
    # BEGIN LAB 7.4
    # The exception object stays out of the transcript: a traceback can carry paths or secrets.
    message = str(error) or type(error).__name__
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool {call.name} failed: {message}")],
        details={"error": message},
        is_error=True,
        timestamp=_now_ms(),
    )
    # END LAB 7.4


# ## Lab 7.5 · cancellation and the step limit


def end_cancelled(run: LoopRun, steps: int) -> AgentRunResult:
    """Stop before any new work starts; what the run has written so far stays."""
    # BEGIN LAB 7.5
    return run.finish("aborted", steps)
    # END LAB 7.5


def end_at_step_limit(run: LoopRun, max_steps: int) -> AgentRunResult:
    """Stop after the last allowed request: its batch's results stay, no further request is made."""
    # BEGIN LAB 7.5
    return run.finish("maxSteps", max_steps)
    # END LAB 7.5


# ## The loop (given): it calls each lab's piece where the chapter places it


async def run_agent_loop(
    *,
    model: Model,
    tools: ToolRegistry,
    context: AgentContext,
    signal: AbortSignal | None = None,
    on_event: Callable[[LoopEvent], object] | None = None,
    execute_tool_call: ToolExecutor | None = None,
    max_steps: int = 32,
) -> AgentRunResult:
    """Ask the model, run the batch it calls, and ask again, until a turn ends the run.

    `max_steps` bounds the model requests (a course safeguard against a script that never stops).
    """
    run = LoopRun(context, on_event)
    executor = execute_tool_call if execute_tool_call is not None else registry_executor(tools)
    for steps in range(1, max_steps + 1):
        # Request number `steps` has not started yet: steps - 1 requests are complete.
        if signal is not None and signal.aborted:
            return end_cancelled(run, steps - 1)
        assistant = await collect_model_turn(run, model, tools, signal=signal)
        calls = tool_calls(assistant)
        if assistant.stop_reason == "stop" and not calls:
            return run.finish("stop", steps)
        # Only toolUse with calls runs tools; every other turn ends here.
        if assistant.stop_reason != "toolUse" or not calls:
            return end_without_tools(run, assistant, calls, steps)
        await run_tool_batch(run, calls, executor, signal=signal)
        # The batch's results are written; a cancellation now only prevents the next request.
        if signal is not None and signal.aborted:
            return end_cancelled(run, steps)
    return end_at_step_limit(run, max_steps)
