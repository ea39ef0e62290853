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

from .lab import LabNotImplemented
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
        raise LabNotImplemented("7.1", "LoopRun")

    def emit(self, event: LoopEvent) -> None:
        """Tell the observer, if there is one."""
        if self.on_event is not None:
            self.on_event(event)

    def finish(self, reason: RunReason, steps: int) -> AgentRunResult:
        """End the run: the first call emits the one `turn_end`; every call returns the result."""
        raise LabNotImplemented("7.1", "LoopRun.finish")


async def collect_model_turn(
    run: LoopRun, model: Model, tools: ToolRegistry, *, signal: AbortSignal | None = None
) -> AssistantMessage:
    """Ask the model once; pass each event on, then append and announce the final assistant message."""
    raise LabNotImplemented("7.1", "collect_model_turn")


# ## Lab 7.2 · one tool round trip, inside the batch it belongs to


async def run_tool_call(
    run: LoopRun, call: ToolCall, executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> ToolResultMessage:
    """Run one call with the run's signal and a progress reporter bound to its id; announce its end."""
    raise LabNotImplemented("7.2", "run_tool_call")


async def run_tool_batch(
    run: LoopRun, calls: Sequence[ToolCall], executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> list[ToolResultMessage]:
    """Start every call of the batch at once; append the results in call order once all have ended."""
    raise LabNotImplemented("7.2", "run_tool_batch")


# ## Lab 7.3 · turns that run no tool


def skipped_result(call: ToolCall, reason: SkipReason) -> ToolResultMessage:
    """Answer a call that was never run, saying why; it keeps the call's id and name."""
    raise LabNotImplemented("7.3", "skipped_result")


def end_without_tools(
    run: LoopRun, assistant: AssistantMessage, calls: Sequence[ToolCall], steps: int
) -> AgentRunResult:
    """End a turn that must run no tool: answer each call it holds as skipped, then finish."""
    raise LabNotImplemented("7.3", "end_without_tools")


# ## Lab 7.4 · a batch whose executor fails


def failed_execution(call: ToolCall, error: Exception) -> ToolResultMessage:
    """Answer a call whose executor raised: the message only, never the exception or its traceback."""
    raise LabNotImplemented("7.4", "failed_execution")


# ## Lab 7.5 · cancellation and the step limit


def end_cancelled(run: LoopRun, steps: int) -> AgentRunResult:
    """Stop before any new work starts; what the run has written so far stays."""
    raise LabNotImplemented("7.5", "end_cancelled")


def end_at_step_limit(run: LoopRun, max_steps: int) -> AgentRunResult:
    """Stop after the last allowed request: its batch's results stay, no further request is made."""
    raise LabNotImplemented("7.5", "end_at_step_limit")


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
