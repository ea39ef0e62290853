"""Checkpoints 07 and 09: the agent loop asks the model, runs the tools it calls, and asks again.

One run keeps its own transcript: a deep copy of the caller's messages that only grows. Each turn
appends one complete assistant message; when that message ends in `toolUse` with calls, every call
is answered by a paired tool result before the model is asked again. Every other ending answers
the calls it saw with skipped results, and the run ends with exactly one `turn_end`.

Checkpoint 09 hardens the seams a stateful Agent runs across: a model that raises still ends the
run with its transcript kept, every result that leaves the loop is plain data, a text stop honours
a cancellation the model ignored, and steering and follow-up messages enter at fixed boundaries.

Checkpoint 15 makes the transcript say which tools the model sees: before each request the loop
compares the tools its system messages declare with the registry's declared set and, only when they
differ, appends one system message patch that records the difference (`tools_added` / `tools_removed`).

Checkpoint 18 asks a `prepare_request` hook before each request, right after that patch: the hook is
told why the request is made (`user`, `continuation` or `retry`) and may put the physical model and the
thinking level of that one request in place of the configured model. It cannot rewrite the transcript,
and a hook that raises ends the request with an error reply. Without a hook the loop is 15's.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import time
import types
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, TypeVar, cast

from .messages import (
    AbortSignal,
    AgentContext,
    AgentMessage,
    AssistantMessage,
    Model,
    ModelEvent,
    ModelStream,
    SystemMessage,
    TextContent,
    ThinkingLevel,
    ThinkingModel,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    current_tools,
    now_ms,
    text,
    tool_state_changes,
)
from .tool import ToolRegistry
from .tool import execute_tool_call as execute_core_tool_call

RunReason: TypeAlias = Literal["stop", "length", "error", "aborted", "maxSteps"]
SkipReason: TypeAlias = Literal["length", "error", "aborted", "unexpected-stop"]
#: Why a request is made (checkpoint 18): a user wrote since the last reply, the loop goes on after tool
#: results, or the transcript ends with a failed reply that a caller hands back as it is.
RequestReason: TypeAlias = Literal["user", "continuation", "retry"]
T = TypeVar("T")


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


# ## The request hook's shapes (given, checkpoint 18)


@dataclass
class RequestCause:
    """What `request_reason` reads off the transcript: the reason, and on a retry the failed reply."""

    reason: RequestReason
    failed: AssistantMessage | None = None


@dataclass
class AgentRequest:
    """What the hook is shown before one request: the request itself, the configured model, and why."""

    #: The very context this request sends (the loop's own copy; snapshot it to keep it).
    context: AgentContext
    #: The model the loop was given; the hook may put a physical model in its place for this request.
    model: Model
    reason: RequestReason
    #: On a retry: the failed reply the transcript ends with.
    failed: AssistantMessage | None = None


@dataclass
class PreparedRequest:
    """The hook's answer: the model and thinking level of this one request (None keeps the default).

    It has no context: the hook chooses who answers, it cannot rewrite what is sent.
    """

    model: Model | None = None
    thinking_level: ThinkingLevel | None = None


class PrepareRequestHook(Protocol):
    """Called before every model request with the loop's signal; it may answer now or later.

    Raising (or an awaitable that raises) ends that request with an error reply, as a failing model does.
    """

    def __call__(
        self, request: AgentRequest, /, *, signal: AbortSignal | None = None
    ) -> PreparedRequest | Awaitable[PreparedRequest | None] | None: ...


def open_model_stream(
    model: Model, context: AgentContext, *, signal: AbortSignal | None, thinking_level: ThinkingLevel | None
) -> ModelStream:
    """Send one request; `thinking_level` goes along only when one was chosen (a plain `Model` has none)."""
    if thinking_level is None:
        return model.stream(context, signal=signal)
    return cast(ThinkingModel, model).stream(context, signal=signal, thinking_level=thinking_level)


def tool_calls(message: AssistantMessage) -> list[ToolCall]:
    """The message's tool calls, in the order the model wrote them."""
    return [block for block in message.content if isinstance(block, ToolCall)]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ## From 7.1 (given since 09) · one model turn, one ending


class LoopRun:
    """The state of one run: its own transcript, its observer, and whether it has ended."""

    messages: list[AgentMessage]
    on_event: Callable[[LoopEvent], object] | None
    ended: bool

    def __init__(self, context: AgentContext, on_event: Callable[[LoopEvent], object] | None) -> None:
        """Start the transcript as a deep copy of the caller's messages; the caller's stay untouched."""
        # A copy of every message, not just of the list: the run may hand its messages to anyone.
        self.messages = copy.deepcopy(context.messages)
        self.on_event = on_event
        self.ended = False

    def emit(self, event: LoopEvent) -> None:
        """Tell the observer, if there is one."""
        if self.on_event is not None:
            self.on_event(event)

    def finish(self, reason: RunReason, steps: int) -> AgentRunResult:
        """End the run: the first call emits the one `turn_end`; every call returns the result."""
        if not self.ended:
            self.ended = True
            self.emit(LoopTurnEnd(reason=reason))
        return AgentRunResult(reason=reason, messages=self.messages, steps=steps)


async def collect_model_turn(
    run: LoopRun,
    model: Model,
    tools: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    prepare_request: PrepareRequestHook | None = None,
    cause: RequestCause | None = None,
) -> AssistantMessage:
    """Ask the model once; pass each event on, then append and announce the final assistant message.

    With a `prepare_request` hook (checkpoint 18), the hook is asked first, with `cause` as the reason,
    and its model and thinking level serve this one request.
    """
    # The request is the transcript (system messages stay where they are: folding them is the
    # adapter's job) and the registry's definitions of now, never the caller's stale context.tools.
    # The model gets its own copy, so nothing it does with it can reach the transcript.
    request = AgentContext(messages=copy.deepcopy(run.messages), tools=tools.definitions())
    chosen: Model = model
    thinking_level: ThinkingLevel | None = None
    if prepare_request is not None and cause is not None:
        # No hook, no extra step: the loop without one runs exactly as before.
        asked = AgentRequest(context=request, model=model, reason=cause.reason, failed=cause.failed)
        prepared = await ask_prepare_request(prepare_request, asked, signal=signal)
        chosen = model if prepared.model is None else prepared.model
        thinking_level = prepared.thinking_level
    stream = open_model_stream(chosen, request, signal=signal, thinking_level=thinking_level)
    async for event in stream:
        run.emit(LoopModelEvent(event=event))
    # The loop owns its copy: whatever the model keeps doing with its own object stays out of the run.
    assistant = copy.deepcopy(await stream.result())
    # Deltas were for display; only the complete message enters the transcript, once.
    run.messages.append(assistant)
    run.emit(LoopAssistantMessage(message=assistant))
    return assistant


# ## From 7.2 (given since 09) · one tool round trip, inside the batch it belongs to


async def run_tool_call(
    run: LoopRun, call: ToolCall, executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> ToolResultMessage:
    """Run one call with the run's signal and a progress reporter bound to its id; announce its end."""

    def report_progress(content: list[TextContent]) -> None:
        run.emit(LoopToolProgress(call_id=call.id, content=content))

    try:
        result = canonical_tool_result(
            call, await executor(call, signal=signal, report_progress=report_progress)
        )
    except Exception as error:
        # An injected executor need not answer like 06's does: the call still gets its result.
        result = failed_execution(call, error)
    run.emit(LoopToolEnd(result=result))
    return result


async def run_tool_batch(
    run: LoopRun, calls: Sequence[ToolCall], executor: ToolExecutor, *, signal: AbortSignal | None = None
) -> list[ToolResultMessage]:
    """Start every call of the batch at once; append the results in call order once all have ended."""
    for call in calls:
        run.emit(LoopToolStart(call=call))
    # gather runs the calls concurrently and hands back their results in the order of `calls`,
    # whatever order they finished in (tool_end has already told the observer that order).
    results = await asyncio.gather(*(run_tool_call(run, call, executor, signal=signal) for call in calls))
    run.messages.extend(results)
    return list(results)


# ## From 7.3 (given since 09) · turns that run no tool


def skipped_result(call: ToolCall, reason: SkipReason) -> ToolResultMessage:
    """Answer a call that was never run, saying why; it keeps the call's id and name."""
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


def end_without_tools(
    run: LoopRun, assistant: AssistantMessage, calls: Sequence[ToolCall], steps: int
) -> AgentRunResult:
    """End a turn that must run no tool: answer each call it holds as skipped, then finish."""
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


# ## From 7.4 (given since 09) · a batch whose executor fails


def failed_execution(call: ToolCall, error: Exception) -> ToolResultMessage:
    """Answer a call whose executor raised: the message only, never the exception or its traceback."""
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


# ## From 7.5 (given since 09) · cancellation and the step limit


def end_cancelled(run: LoopRun, steps: int) -> AgentRunResult:
    """Stop before any new work starts; what the run has written so far stays."""
    return run.finish("aborted", steps)


def end_at_step_limit(run: LoopRun, max_steps: int) -> AgentRunResult:
    """Stop after the last allowed request: its batch's results stay, no further request is made."""
    return run.finish("maxSteps", max_steps)


# ## What may leave the loop (given): plain data only


class DataCloneError(TypeError):
    """A value holds something that is not data (a function, a class, a module, a coroutine, ...)."""


def _check_cloneable(value: object, seen: set[int]) -> None:
    """Walk a value as structuredClone would, refusing what it cannot copy; cycles are fine."""
    if value is None or isinstance(value, str | bytes | bool | int | float | complex):
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _check_cloneable(item, seen)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_cloneable(key, seen)
            _check_cloneable(item, seen)
        return
    if callable(value) or isinstance(value, types.ModuleType | types.GeneratorType | types.CoroutineType):
        raise DataCloneError(f"{type(value).__name__} object could not be cloned")
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            _check_cloneable(getattr(value, field.name), seen)
        return
    for item in getattr(value, "__dict__", {}).values():
        _check_cloneable(item, seen)


def structured_clone(value: T) -> T:
    """A deep copy of plain data, like the platform's structuredClone; `DataCloneError` for anything else.

    `copy.deepcopy` alone would hand a function back by reference, so a copy "succeeds" yet still
    shares live behaviour with whoever made it: the walk refuses such values first.
    """
    _check_cloneable(value, set())
    try:
        return copy.deepcopy(value)
    except Exception as error:  # a lock, a socket, ...: deepcopy's own refusals are clone errors too
        raise DataCloneError(str(error) or type(error).__name__) from None


def canonical_tool_result(call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
    """The loop's own copy of an executor's result; one that is not plain data becomes an error result."""
    try:
        return structured_clone(result)
    except DataCloneError:
        return uncloneable_tool_result(call)


def queued_messages(take: Callable[[], list[UserMessage]] | None) -> list[UserMessage]:
    """Everything a queue holds right now (the taker empties it); nothing when there is no queue."""
    return take() if take is not None else []


# ## From 9.2 (given since 15) · a model that raises still ends the run


def end_after_model_failure(run: LoopRun, error: Exception, *, aborted: bool, steps: int) -> AgentRunResult:
    """End the run on a model that raised: what is already written stays, one failed reply is added."""
    # The tool results written before the failure are facts (files may have changed): keep them, and
    # close the transcript with an assistant message that says what went wrong, never a traceback.
    reason: Literal["error", "aborted"] = "aborted" if aborted else "error"
    failed = assistant_message([], reason, error_message=str(error) or type(error).__name__)
    run.messages.append(failed)
    run.emit(LoopAssistantMessage(message=failed))
    return run.finish(reason, steps)


# ## From 9.3 (given since 15) · a result that is not plain data


def uncloneable_tool_result(call: ToolCall) -> ToolResultMessage:
    """Answer a call whose executor returned something that cannot be copied as data."""
    # The call still needs its paired result; an error result built here is plain data by construction.
    return failed_execution(call, DataCloneError("tool result is not structured-cloneable"))


# ## From 9.4 (given since 15) · a text stop after a cancellation


def end_aborted_text_stop(run: LoopRun, steps: int) -> AgentRunResult:
    """A model that ignored the signal still stopped with text: the run ends as aborted, not stop."""
    # The reply is written (it arrived), but the cancellation decides the ending, and no queue is read.
    return run.finish("aborted", steps)


# ## From 9.5 (given since 15) · steering and follow-up messages enter at a boundary


def append_queued(run: LoopRun, queued: Sequence[UserMessage]) -> None:
    """Write a batch taken from a queue into the transcript, first in first out, as copies."""
    # Copies: the queue's owner keeps its objects, the transcript keeps its own.
    run.messages.extend(copy.deepcopy(list(queued)))


# ## From 15.3 (given since 18) · a declaration patch before each request


def declares_tools(messages: Sequence[AgentMessage]) -> bool:
    """Whether any system message of the transcript declares or withdraws a tool (given)."""
    return any(
        isinstance(message, SystemMessage) and bool(message.tools_added or message.tools_removed)
        for message in messages
    )


def tracks_tool_declarations(messages: Sequence[AgentMessage], registry: ToolRegistry) -> bool:
    """Whether the loop compares declarations before a request at all (given).

    A registry of `direct` tools only, with a transcript that has never declared a tool, is the world of
    checkpoints 07–14: no comparison, no patch, their transcripts stay exactly as they were. Once the
    registry uses exposure, or a restored transcript declares tools, every request is compared.
    """
    return registry.uses_exposure() or declares_tools(messages)


def declare_tool_changes(messages: Sequence[AgentMessage], registry: ToolRegistry) -> SystemMessage | None:
    """The system message patch that makes the transcript declare the registry's declared set; None when
    the tools the transcript declares already are that set.

    The replayed tools are compared with `registry.definitions()`; only a difference gives a patch:
    `content=""`, and an empty side left out (None), never written as `[]`.
    """
    changes = tool_state_changes(current_tools(messages), registry.definitions())
    if not changes.tools_added and not changes.tools_removed:
        return None
    return SystemMessage(
        content="",
        timestamp=now_ms(),
        tools_added=changes.tools_added or None,
        tools_removed=changes.tools_removed or None,
    )


# ## Lab 18.2 · ask the hook before every request


def request_reason(messages: Sequence[AgentMessage]) -> RequestCause:
    """Why the next request is made, read off the transcript's tail after its last assistant message."""
    # BEGIN LAB 18.2
    replies = [index for index, message in enumerate(messages) if isinstance(message, AssistantMessage)]
    last = replies[-1] if replies else None
    tail = messages if last is None else messages[last + 1 :]
    if any(isinstance(message, UserMessage) for message in tail):
        return RequestCause(reason="user")
    reply = None if last is None else messages[last]
    if not tail and isinstance(reply, AssistantMessage) and reply.stop_reason in ("error", "aborted"):
        # Nothing after a failed reply: a caller is handing the same transcript back.
        return RequestCause(reason="retry", failed=reply)
    return RequestCause(reason="continuation")
    # END LAB 18.2


async def ask_prepare_request(
    prepare_request: PrepareRequestHook, request: AgentRequest, *, signal: AbortSignal | None = None
) -> PreparedRequest:
    """Ask the hook about one request; what it leaves out (or a None answer) keeps the configured model."""
    # BEGIN LAB 18.2
    answer = prepare_request(request, signal=signal)
    if inspect.isawaitable(answer):
        answer = await answer
    if answer is None:
        return PreparedRequest(model=request.model)
    model = request.model if answer.model is None else answer.model
    return PreparedRequest(model=model, thinking_level=answer.thinking_level)
    # END LAB 18.2


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
    take_steering_messages: Callable[[], list[UserMessage]] | None = None,
    take_follow_up_messages: Callable[[], list[UserMessage]] | None = None,
    prepare_request: PrepareRequestHook | None = None,
) -> AgentRunResult:
    """Ask the model, run the batch it calls, and ask again, until a turn ends the run.

    `max_steps` bounds the model requests (a course safeguard against a script that never stops).
    Steering messages are read after a complete tool batch and at a text stop; follow-ups only at a
    natural text stop, when no steering is waiting. A taker returns and empties its queue.
    `prepare_request` (checkpoint 18) is asked before every request which model and thinking level
    serve it; a hook that raises ends the run like a failing model.
    """
    run = LoopRun(context, on_event)
    executor = execute_tool_call if execute_tool_call is not None else registry_executor(tools)
    for steps in range(1, max_steps + 1):
        # Request number `steps` has not started yet: steps - 1 requests are complete.
        if signal is not None and signal.aborted:
            return end_cancelled(run, steps - 1)
        # The transcript first says which tools this request declares: appended after what is already
        # there (the user message, or the last batch's results), right before the request, never earlier.
        if tracks_tool_declarations(run.messages, tools) and (
            declaration := declare_tool_changes(run.messages, tools)
        ):
            run.messages.append(declaration)
        # Why this request is made, read off the transcript as it now stands (after the declaration
        # patch); only when there is a hook to tell.
        cause = request_reason(run.messages) if prepare_request is not None else None
        try:
            assistant = await collect_model_turn(
                run, model, tools, signal=signal, prepare_request=prepare_request, cause=cause
            )
        except Exception as error:
            # Exception, not BaseException: a task cancellation still passes through the loop.
            aborted = signal is not None and signal.aborted
            return end_after_model_failure(run, error, aborted=aborted, steps=steps)
        calls = tool_calls(assistant)
        if assistant.stop_reason == "stop" and not calls:
            if signal is not None and signal.aborted:
                return end_aborted_text_stop(run, steps)
            if steering := queued_messages(take_steering_messages):
                append_queued(run, steering)
                continue
            if follow_ups := queued_messages(take_follow_up_messages):
                append_queued(run, follow_ups)
                continue
            return run.finish("stop", steps)
        # Only toolUse with calls runs tools; every other turn ends here.
        if assistant.stop_reason != "toolUse" or not calls:
            return end_without_tools(run, assistant, calls, steps)
        await run_tool_batch(run, calls, executor, signal=signal)
        # The batch's results are written; a cancellation now only prevents the next request.
        if signal is not None and signal.aborted:
            return end_cancelled(run, steps)
        # A complete, paired batch is the other boundary where steering may enter (follow-ups wait).
        if steering := queued_messages(take_steering_messages):
            append_queued(run, steering)
    return end_at_step_limit(run, max_steps)
