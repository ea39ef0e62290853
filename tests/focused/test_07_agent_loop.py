"""Focused tests of checkpoint 07: the agent loop asks the model, runs its tool calls, asks again.

Sections follow the labs, and each course test (`07-agent-loop.test.ts`, by position) has a kit test
that carries all of its assertions; deeper tests follow it. On the starter each test stops on the
LabNotImplemented of its own lab or of an earlier one it builds on. Concurrency is ordered by gates
the test opens (asyncio.Event), never by sleeping; a timeout only turns a hang into a red.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pi_course import (
    AbortController,
    AbortSignal,
    AgentContext,
    AgentMessage,
    AgentRunResult,
    AssistantContent,
    AssistantMessage,
    LoopAssistantMessage,
    LoopEvent,
    LoopModelEvent,
    LoopRun,
    LoopToolEnd,
    LoopToolProgress,
    LoopToolSkipped,
    LoopToolStart,
    LoopTurnEnd,
    ModelDone,
    RunReason,
    ScriptedErrorTurn,
    ScriptedModel,
    StopReason,
    SystemMessage,
    TextContent,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    current_system_prompt,
    now_ms,
    object_schema,
    run_agent_loop,
    string_value,
    text,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time: on the starter every lab error
# must surface inside a test, never while collecting.

#: How long a gated test waits for something the loop should do at once, before it calls it a hang.
HANG = 2.0

T = TypeVar("T")


def call(call_id: str, name: str, arguments: object) -> ToolCall:
    """A tool call as the model would write it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


def result_for(current: ToolCall, value: str, is_error: bool = False) -> ToolResultMessage:
    """A result an injected executor builds by hand for `current`."""
    return ToolResultMessage(
        tool_call_id=current.id,
        tool_name=current.name,
        content=[text(value)],
        details=None,
        is_error=is_error,
        timestamp=now_ms(),
    )


def tool_results(messages: Sequence[AgentMessage]) -> list[ToolResultMessage]:
    """The tool results of a transcript, in order."""
    return [message for message in messages if isinstance(message, ToolResultMessage)]


def roles(messages: Sequence[AgentMessage]) -> list[str]:
    """The role of each message, in order."""
    return [message.role for message in messages]


def of_type(events: Sequence[LoopEvent], kind: str) -> list[LoopEvent]:
    """The events of one `type`, in order."""
    return [event for event in events if event.type == kind]


def assert_single_end(events: Sequence[LoopEvent], reason: RunReason) -> None:
    """Exactly one turn_end in the run, carrying `reason`."""
    assert of_type(events, "turn_end") == [LoopTurnEnd(reason=reason)]


def run(
    model: ScriptedModel | Any,
    registry: ToolRegistry,
    context: AgentContext,
    events: list[LoopEvent] | None = None,
    **options: Any,
) -> AgentRunResult:
    """Run the loop to its end, collecting its events into `events` when given."""
    on_event = events.append if events is not None else None
    return asyncio.run(
        run_agent_loop(model=model, tools=registry, context=context, on_event=on_event, **options)
    )


class Echo:
    """The echo tool of the course's tests, counting its executions."""

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.executions = 0

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        """Return the value it was given."""
        self.executions += 1
        return ToolOutput([text(params["value"])])

    def tool(self) -> Tool[dict[str, Any], None]:
        """The tool to register."""
        return Tool(self.name, self.name, object_schema({"value": string_value}), self.execute)


def echo_registry() -> tuple[ToolRegistry, Echo]:
    """A registry holding one counting echo tool."""
    echo = Echo()
    return ToolRegistry([echo.tool()]), echo


def context_of(*messages: AgentMessage) -> AgentContext:
    """A context with these messages and no tools of its own."""
    return AgentContext(messages=list(messages))


def user_run() -> AgentContext:
    """The course's one-message context: `run`."""
    return context_of(user_message("run"))


class Gate:
    """An asyncio.Event opened by the test; created inside the running loop."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def open(self) -> None:
        """Let whoever waits go on."""
        self.event.set()

    async def passed(self, what: str, pending: asyncio.Future[Any]) -> None:
        """Wait until the gate opens (see `arrival`)."""
        await arrival(self.event.wait(), what, pending)


async def arrival(waiter: Awaitable[T], what: str, pending: asyncio.Future[Any]) -> T:
    """Wait for `waiter`, unless the run under test ends first: then its error surfaces here.

    A hang becomes a failure that says what never happened.
    """
    arrived = asyncio.ensure_future(waiter)
    done, _ = await asyncio.wait({arrived, pending}, timeout=HANG, return_when=asyncio.FIRST_COMPLETED)
    if arrived in done:
        return arrived.result()
    arrived.cancel()
    if pending in done:
        pending.result()  # an unfinished lab raises its LabNotImplemented here
        pytest.fail(f"the run ended before this happened: {what}")
    pytest.fail(what)


class EditingModel:
    """A model that keeps the request it was given and then changes it, as careless code might."""

    def __init__(self, turns: Sequence[AssistantMessage]) -> None:
        self.inner = ScriptedModel(turns)
        self.seen: list[AgentContext] = []

    def stream(self, context: AgentContext, *, signal: AbortSignal | None = None) -> Any:
        """Record, play the scripted turn, then vandalise the request it was handed."""
        self.seen.append(context)
        stream = self.inner.stream(context, signal=signal)
        context.messages.append(user_message("injected by the model"))
        first = context.messages[0]
        if not isinstance(first, SystemMessage):
            first.content[0] = text("edited by the model")
        return stream


# ## Lab 7.1 · one model turn, one ending


@pytest.mark.lab7_1
@pytest.mark.edits("LoopRun")
def test_a_plain_stop_keeps_the_input_and_sends_the_whole_context() -> None:
    """纯文本 stop：调用方的 context 原样不动，模型收到的请求只有 messages 与 registry 的定义吗？"""
    registry, _ = echo_registry()
    context = AgentContext(
        messages=[SystemMessage(content="You are Pi.", timestamp=0), user_message("explain the loop")],
        tools=[ToolDefinition("stale-definition", "must not reach the model", {"type": "object"})],
    )
    before = copy.deepcopy(context)
    events: list[LoopEvent] = []
    model = ScriptedModel([assistant_message([text("A loop closes over evidence.")], "stop")])

    result = run(model, registry, context, events)

    assert context == before
    assert result.messages is not context.messages
    assert roles(result.messages) == ["system", "user", "assistant"]
    assert len(model.requests) == 1
    request = model.requests[0]
    assert current_system_prompt(request.messages) == "You are Pi."
    assert not hasattr(request, "system_prompt") and not hasattr(request, "systemPrompt")
    assert request.messages == before.messages
    assert request.tools == registry.definitions()
    assert result.reason == "stop"
    assert result.steps == 1
    assert_single_end(events, "stop")


@pytest.mark.lab7_1
@pytest.mark.edits("collect_model_turn")
def test_the_model_events_come_first_then_the_assistant_message_then_turn_end() -> None:
    """一轮纯文本：先转发模型的每个事件，再宣布完整的 assistant，最后一个 turn_end 吗？"""
    registry, _ = echo_registry()
    reply = assistant_message([text("hello")], "stop")
    events: list[LoopEvent] = []

    result = run(ScriptedModel([reply]), registry, user_run(), events)

    assert [event.type for event in events] == [
        "model_event",
        "model_event",
        "model_event",
        "assistant_message",
        "turn_end",
    ]
    model_events = [event.event.type for event in events if isinstance(event, LoopModelEvent)]
    assert model_events == ["start", "text_delta", "done"]
    done = events[2]
    assert isinstance(done, LoopModelEvent) and isinstance(done.event, ModelDone)
    announced = events[3]
    assert isinstance(announced, LoopAssistantMessage)
    # The message announced is the very one the transcript holds, appended once.
    assert announced.message is result.messages[-1]
    assert announced.message == done.event.message
    assert roles(result.messages) == ["user", "assistant"]


@pytest.mark.lab7_1
@pytest.mark.edits("LoopRun")
def test_the_transcript_shares_no_message_with_the_caller() -> None:
    """run 的 messages 是深拷贝吗？改动结果里的消息不会改到调用方的消息。"""
    registry, _ = echo_registry()
    context = context_of(user_message("mine"))
    before = copy.deepcopy(context)

    result = run(ScriptedModel([assistant_message([text("ok")], "stop")]), registry, context)

    first = result.messages[0]
    assert first == context.messages[0]
    assert first is not context.messages[0]
    assert isinstance(first, UserMessage)
    first.content[0] = text("changed afterwards")
    assert context == before


@pytest.mark.lab7_1
@pytest.mark.edits("collect_model_turn")
def test_a_model_that_edits_its_request_changes_nothing_in_the_transcript() -> None:
    """模型拿到的是自己的副本吗？它往请求里追加或改写消息，run 的 transcript 都不受影响。"""
    registry, _ = echo_registry()
    model = EditingModel([assistant_message([text("ok")], "stop")])

    result = run(model, registry, context_of(user_message("original")))

    assert roles(result.messages) == ["user", "assistant"]
    first = result.messages[0]
    assert not isinstance(first, SystemMessage)
    assert first.content == [text("original")]


@pytest.mark.lab7_1
@pytest.mark.edits("collect_model_turn")
def test_a_run_without_an_observer_still_ends() -> None:
    """不传 on_event 时，一轮纯文本 stop 照样正常结束吗？"""
    registry, _ = echo_registry()
    result = run(ScriptedModel([assistant_message([text("ok")], "stop")]), registry, user_run())
    assert (result.reason, result.steps, roles(result.messages)) == ("stop", 1, ["user", "assistant"])


@pytest.mark.lab7_1
@pytest.mark.edits("LoopRun.finish")
def test_finish_emits_turn_end_only_the_first_time() -> None:
    """finish 被调用两次时，turn_end 仍然只发一次吗？每次都返回同一份 messages。"""
    events: list[LoopEvent] = []
    loop_run = LoopRun(user_run(), events.append)

    first = loop_run.finish("stop", 1)
    second = loop_run.finish("error", 1)

    assert events == [LoopTurnEnd(reason="stop")]
    assert (first.reason, first.steps) == ("stop", 1)
    assert second.messages is first.messages is loop_run.messages


# ## Lab 7.2 · one tool round trip


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_call")
def test_the_loop_never_writes_a_system_message_and_the_caller_s_messages_prefix_every_request() -> None:
    """loop 从不写 system message 吗？调用方的 messages（含 system）是每次请求与结果的不变前缀。"""
    registry, _ = echo_registry()
    context = context_of(
        SystemMessage(content="BASE", sections={"rules": "RULE v1"}, timestamp=0),
        user_message("first"),
        assistant_message([text("ok")], "stop"),
        SystemMessage(content="", sections={"rules": "RULE v2"}, timestamp=2),
        user_message("second"),
    )
    before = copy.deepcopy(context)
    prefix = len(before.messages)
    model = ScriptedModel(
        [
            assistant_message([call("echo-1", "echo", {"value": "hi"})], "toolUse"),
            assistant_message([text("done")], "stop"),
        ]
    )

    result = run(model, registry, context)

    assert result.reason == "stop"
    assert result.messages[:prefix] == before.messages, "调用方给的 messages（含 system message）是不变前缀"
    assert roles(result.messages[prefix:]) == ["assistant", "toolResult", "assistant"], (
        "loop 只追加 assistant 与 toolResult"
    )
    assert len(model.requests) == 2
    for request in model.requests:
        assert request.messages[:prefix] == before.messages
        assert len([m for m in request.messages if m.role == "system"]) == 2, (
            "system message 留在 transcript 原位，折叠是第 05 章 adapter 的事"
        )
        assert current_system_prompt(request.messages) == "BASE\n\nRULE v2"
    assert context == before


class Probe:
    """The course's probe tool: records what its context held and reports progress once."""

    def __init__(self, progress: list[TextContent]) -> None:
        self.progress = progress
        self.contexts: list[ToolContext] = []

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        """Observe the context, report progress, answer."""
        self.contexts.append(context)
        if context.report_progress is not None:
            context.report_progress(self.progress)
        return ToolOutput([text(f"observed:{params['value']}")], {"source": "probe"})


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_call")
def test_one_tool_round_trip_passes_signal_and_progress_and_feeds_the_next_request() -> None:
    """单工具往返：signal 和 progress 到达工具，配对结果进入第二次请求，事件顺序对吗？"""
    controller = AbortController()
    progress = [text("halfway")]
    probe = Probe(progress)
    registry = ToolRegistry(
        [Tool("probe", "observe tool context", object_schema({"value": string_value}), probe.execute)]
    )
    context = context_of(user_message("inspect"))
    before = copy.deepcopy(context)
    tool_call = call("probe-1", "probe", {"value": "signal"})
    model = ScriptedModel(
        [assistant_message([tool_call], "toolUse"), assistant_message([text("done")], "stop")]
    )
    events: list[LoopEvent] = []

    result = run(model, registry, context, events, signal=controller.signal)

    assert len(probe.contexts) == 1
    assert probe.contexts[0].call_id == "probe-1"
    assert probe.contexts[0].signal is controller.signal
    assert context == before
    assert len(model.requests) == 2
    assert roles(model.requests[1].messages) == ["user", "assistant", "toolResult"]
    assert model.requests[1].tools == registry.definitions()
    assert roles(result.messages) == ["user", "assistant", "toolResult", "assistant"]
    announced = [event.message.stop_reason for event in events if isinstance(event, LoopAssistantMessage)]
    assert announced == ["toolUse", "stop"]
    paired = tool_results(result.messages)
    assert len(paired) == 1
    assert paired[0].tool_call_id == tool_call.id
    assert paired[0].tool_name == tool_call.name
    assert paired[0].content == [text("observed:signal")]
    assert paired[0].details == {"source": "probe"}
    assert of_type(events, "tool_progress") == [LoopToolProgress(call_id="probe-1", content=progress)]
    tool_events = [e.type for e in events if e.type in ("tool_start", "tool_progress", "tool_end")]
    assert tool_events == ["tool_start", "tool_progress", "tool_end"]
    assert len(of_type(events, "tool_start")) == 1
    assert len(of_type(events, "tool_end")) == 1
    assert result.reason == "stop"
    assert result.steps == 2
    assert_single_end(events, "stop")


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_batch")
def test_the_events_of_a_round_trip_come_in_the_chapter_s_order() -> None:
    """一次往返的事件顺序是 模型事件 → assistant → tool_start → tool_end → 模型事件 → assistant → turn_end
    吗？"""
    registry, _ = echo_registry()
    echo_call = call("call-1", "echo", {"value": "README"})
    model = ScriptedModel(
        [
            assistant_message([text("let me read"), echo_call], "toolUse"),
            assistant_message([text("tiny-pi")], "stop"),
        ]
    )
    events: list[LoopEvent] = []

    run(model, registry, user_run(), events)

    described = [event.event.type if isinstance(event, LoopModelEvent) else event.type for event in events]
    assert described == [
        "start",
        "text_delta",
        "toolcall_delta",
        "toolcall_end",
        "done",
        "assistant_message",
        "tool_start",
        "tool_end",
        "start",
        "text_delta",
        "done",
        "assistant_message",
        "turn_end",
    ]
    start = events[6]
    end = events[7]
    assert isinstance(start, LoopToolStart) and start.call == echo_call
    assert isinstance(end, LoopToolEnd) and end.result.tool_call_id == "call-1"


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_batch")
def test_every_request_carries_the_registry_s_definitions_of_that_moment() -> None:
    """每次请求都重新取 registry.definitions() 吗？工具运行中注册的新工具，下一次请求就能看到。"""
    registry, _ = echo_registry()
    late = Echo("late")

    async def register_late(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        registry.register(late.tool())
        return ToolOutput([text("registered")])

    registry.register(Tool("install", "install", object_schema({}), register_late))
    model = ScriptedModel(
        [assistant_message([call("c1", "install", {})], "toolUse"), assistant_message([text("ok")], "stop")]
    )

    run(model, registry, user_run())

    names = [[tool.name for tool in request.tools or []] for request in model.requests]
    assert names == [["echo", "install"], ["echo", "install", "late"]]


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_call")
def test_an_unknown_tool_is_answered_by_06_s_executor_and_the_loop_goes_on() -> None:
    """没有注入 executor 时用 06 的 execute_tool_call：未知工具得到 06 的失败结果，loop 继续请求模型吗？"""
    registry, echo = echo_registry()
    model = ScriptedModel(
        [assistant_message([call("m1", "missing", {})], "toolUse"), assistant_message([text("ok")], "stop")]
    )

    result = run(model, registry, user_run())

    [answer] = tool_results(result.messages)
    assert (answer.tool_call_id, answer.tool_name, answer.is_error) == ("m1", "missing", True)
    assert answer.content == [text("Tool missing failed: 未知工具")]
    assert answer.details == {"error": "未知工具"}
    assert echo.executions == 0
    assert (result.reason, len(model.requests)) == ("stop", 2)


@pytest.mark.lab7_2
@pytest.mark.edits("run_tool_call")
def test_an_injected_executor_replaces_the_registry_and_gets_signal_and_progress() -> None:
    """注入的 execute_tool_call 取代 registry 执行，并收到同一个 signal 和绑定了 call id 的 progress 吗？"""
    registry, echo = echo_registry()
    controller = AbortController()
    seen: list[tuple[str, AbortSignal | None]] = []

    async def executor(
        current: ToolCall,
        *,
        signal: AbortSignal | None = None,
        report_progress: Callable[[list[TextContent]], None] | None = None,
    ) -> ToolResultMessage:
        seen.append((current.id, signal))
        assert report_progress is not None
        report_progress([text("working")])
        return result_for(current, "injected")

    model = ScriptedModel(
        [
            assistant_message([call("e1", "echo", {"value": "x"})], "toolUse"),
            assistant_message([text("ok")], "stop"),
        ]
    )
    events: list[LoopEvent] = []

    result = run(model, registry, user_run(), events, signal=controller.signal, execute_tool_call=executor)

    assert seen == [("e1", controller.signal)]
    assert echo.executions == 0
    assert [r.content for r in tool_results(result.messages)] == [[text("injected")]]
    assert of_type(events, "tool_progress") == [LoopToolProgress(call_id="e1", content=[text("working")])]


# ## Lab 7.3 · turns that run no tool

STOP_REASONS: dict[str, StopReason] = {"length": "length", "error": "error", "aborted": "aborted"}

SKIPPED_TEXTS = {
    "length": "Tool call was not executed because the model response was truncated.",
    "error": "Tool call was not executed because the model turn ended with error.",
    "aborted": "Tool call was not executed because the model turn ended with aborted.",
    "unexpected-stop": "Tool call was not executed because the model returned stop with a tool call.",
}


@pytest.mark.lab7_3
@pytest.mark.edits("skipped_result", "end_without_tools")
@pytest.mark.parametrize("reason", ["length", "error", "aborted"])
def test_length_error_and_aborted_run_no_tool_and_answer_every_call_as_skipped(
    reason: Literal["length", "error", "aborted"],
) -> None:
    """length、error、aborted 时一个工具都不执行，每个 call 都得到 skipped 结果并配对吗？"""
    registry, echo = echo_registry()
    calls = [
        call(f"{reason}-1", "echo", {"value": "first"}),
        call(f"{reason}-2", "echo", {"value": "second"}),
    ]
    error_message = "provider failed" if reason == "error" else None
    reply = assistant_message(list(calls), reason, error_message=error_message)
    events: list[LoopEvent] = []

    result = run(ScriptedModel([reply]), registry, user_run(), events)

    assert echo.executions == 0, f"{reason} must never execute tools"
    assert result.reason == reason
    answered = [
        {"id": r.tool_call_id, "name": r.tool_name, "error": r.is_error, "details": r.details}
        for r in tool_results(result.messages)
    ]
    assert answered == [
        {"id": c.id, "name": c.name, "error": True, "details": {"skipped": True, "reason": reason}}
        for c in calls
    ]
    assert len(of_type(events, "tool_start")) == 0
    assert len(of_type(events, "tool_skipped")) == 2
    assert_single_end(events, reason)


@pytest.mark.lab7_3
@pytest.mark.edits("end_without_tools")
def test_stop_with_a_call_ends_as_a_protocol_error_with_an_unexpected_stop_result() -> None:
    """stop 却夹带 call：不执行，结果标为 unexpected-stop，整次运行以 error 结束吗？"""
    registry, echo = echo_registry()
    malformed = call("stop-call", "echo", {"value": "never"})
    events: list[LoopEvent] = []

    result = run(ScriptedModel([assistant_message([malformed], "stop")]), registry, user_run(), events)

    assert echo.executions == 0
    assert result.reason == "error"
    answered = [
        {"id": r.tool_call_id, "name": r.tool_name, "is_error": r.is_error, "details": r.details}
        for r in tool_results(result.messages)
    ]
    assert answered == [
        {
            "id": malformed.id,
            "name": malformed.name,
            "is_error": True,
            "details": {"skipped": True, "reason": "unexpected-stop"},
        }
    ]
    assert_single_end(events, "error")


@pytest.mark.lab7_3
@pytest.mark.edits("end_without_tools")
def test_tool_use_without_a_call_ends_as_a_protocol_error_with_no_result() -> None:
    """toolUse 却没有任何 call：不写结果，整次运行以 error 结束吗？"""
    registry, _ = echo_registry()
    events: list[LoopEvent] = []
    reply = assistant_message([text("missing call")], "toolUse")

    result = run(ScriptedModel([reply]), registry, user_run(), events)

    assert result.reason == "error"
    assert len(tool_results(result.messages)) == 0
    assert roles(result.messages) == ["user", "assistant"]
    assert of_type(events, "tool_skipped") == []
    assert_single_end(events, "error")


@pytest.mark.lab7_3
@pytest.mark.edits("skipped_result")
@pytest.mark.parametrize("reason", ["length", "error", "aborted", "unexpected-stop"])
def test_a_skipped_result_says_why_in_the_course_s_words(reason: str) -> None:
    """skipped 结果的正文与课程一字不差吗？content、details、is_error 都对吗？"""
    stop: StopReason = "stop" if reason == "unexpected-stop" else STOP_REASONS[reason]
    registry, _ = echo_registry()
    skipped = call("c1", "echo", {"value": "x"})

    result = run(ScriptedModel([assistant_message([skipped], stop)]), registry, user_run())

    [answer] = tool_results(result.messages)
    assert answer.content == [text(SKIPPED_TEXTS[reason])]
    assert answer.details == {"skipped": True, "reason": reason}
    assert answer.is_error is True
    assert answer.role == "toolResult"


@pytest.mark.lab7_3
@pytest.mark.edits("end_without_tools")
def test_skipped_results_follow_their_assistant_in_call_order_with_one_event_each() -> None:
    """skipped 结果紧跟 assistant、按 call 顺序写入，每个结果恰好一个 tool_skipped 事件吗？"""
    registry, _ = echo_registry()
    calls = [call(f"c{n}", "echo", {"value": str(n)}) for n in range(3)]
    reply = assistant_message([text("cut"), *calls], "length")
    events: list[LoopEvent] = []

    result = run(ScriptedModel([reply]), registry, user_run(), events)

    assert roles(result.messages) == ["user", "assistant", "toolResult", "toolResult", "toolResult"]
    written = tool_results(result.messages)
    assert [r.tool_call_id for r in written] == ["c0", "c1", "c2"]
    skipped_events = of_type(events, "tool_skipped")
    assert skipped_events == [LoopToolSkipped(result=r) for r in written]
    after_reply = [e.type for e in events if e.type != "model_event"]
    assert after_reply == ["assistant_message", "tool_skipped", "tool_skipped", "tool_skipped", "turn_end"]
    assert of_type(events, "tool_end") == []


@pytest.mark.lab7_3
@pytest.mark.edits("end_without_tools")
def test_a_failed_stream_ends_the_run_with_its_reason() -> None:
    """模型流以 error 结束（脚本里的失败轮、或脚本已用完）时，run 以 error 结束且不再请求吗？"""
    registry, _ = echo_registry()
    failing = ScriptedModel([ScriptedErrorTurn("error", "upstream 500", partial_text="par")])
    events: list[LoopEvent] = []

    result = run(failing, registry, user_run(), events)

    assert (result.reason, result.steps, len(failing.requests)) == ("error", 1, 1)
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.error_message, last.content) == ("error", "upstream 500", [text("par")])
    assert_single_end(events, "error")

    empty = ScriptedModel([])
    exhausted = run(empty, registry, user_run())
    final = exhausted.messages[-1]
    assert isinstance(final, AssistantMessage)
    assert (exhausted.reason, final.error_message) == ("error", "ScriptedModel 没有更多响应")


@pytest.mark.lab7_3
@pytest.mark.edits("end_without_tools")
@given(
    stop=st.sampled_from(["length", "error", "aborted", "stop", "toolUse"]),
    count=st.integers(min_value=0, max_value=3),
    lead_text=st.booleans(),
)
def test_any_turn_that_ends_the_run_answers_every_call_it_holds(
    stop: StopReason, count: int, lead_text: bool
) -> None:
    """任意一轮只要结束运行：工具从不执行，每个 call 恰好一个配对结果，turn_end 唯一且原因正确吗？"""
    # A toolUse turn with calls continues the run: Lab 7.2 and 7.4 cover it.
    assume(stop != "toolUse" or count == 0)
    registry, echo = echo_registry()
    calls = [call(f"c{n}", "echo", {"value": "v"}) for n in range(count)]
    content: list[AssistantContent] = [text("lead"), *calls] if lead_text else [*calls]
    events: list[LoopEvent] = []

    result = run(ScriptedModel([assistant_message(content, stop)]), registry, user_run(), events)

    expected: RunReason = stop if stop in ("length", "error", "aborted") else "error"
    if stop == "stop" and not calls:
        expected = "stop"
    assert echo.executions == 0
    assert result.reason == expected
    assert [(r.tool_call_id, r.tool_name) for r in tool_results(result.messages)] == [
        (c.id, c.name) for c in calls
    ]
    assert len(of_type(events, "tool_skipped")) == len(calls)
    assert_single_end(events, expected)


# ## Lab 7.4 · concurrent tools


def gated_tool(name: str, gate: asyncio.Event, started: list[str], both: asyncio.Event) -> Tool[Any, None]:
    """A tool that says it started, then waits for the test to open its gate."""

    async def execute(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        started.append(name)
        if len(started) == 2:
            both.set()
        await gate.wait()
        return ToolOutput([text(params["value"])])

    return Tool(name, name, object_schema({"value": string_value}), execute)


@pytest.mark.lab7_4
def test_a_batch_runs_at_once_tool_end_in_completion_order_results_in_call_order() -> None:
    """同批工具同时运行吗？tool_end 按真实完成顺序发出，transcript 仍按 call 顺序写入？"""

    async def scenario() -> tuple[AgentRunResult, list[LoopEvent], ScriptedModel]:
        slow_gate, fast_gate, both_started, fast_ended = (Gate() for _ in range(4))
        started: list[str] = []
        registry = ToolRegistry(
            [
                gated_tool("slow", slow_gate.event, started, both_started.event),
                gated_tool("fast", fast_gate.event, started, both_started.event),
            ]
        )
        calls = [call("slow-call", "slow", {"value": "S"}), call("fast-call", "fast", {"value": "F"})]
        model = ScriptedModel(
            [assistant_message([*calls], "toolUse"), assistant_message([text("done")], "stop")]
        )
        events: list[LoopEvent] = []

        def observe(event: LoopEvent) -> None:
            events.append(event)
            if isinstance(event, LoopToolEnd) and event.result.tool_call_id == "fast-call":
                fast_ended.open()

        pending = asyncio.ensure_future(
            run_agent_loop(model=model, tools=registry, context=user_run(), on_event=observe)
        )
        try:
            await both_started.passed("两个工具没有同时开始：slow 还在等待时，fast 应该已经启动", pending)
            fast_gate.open()
            await fast_ended.passed("fast 完成后没有立刻发出自己的 tool_end", pending)
            slow_gate.open()
            return await asyncio.wait_for(pending, HANG), events, model
        finally:
            pending.cancel()

    result, events, model = asyncio.run(scenario())

    ended = [e.result.tool_call_id for e in events if isinstance(e, LoopToolEnd)]
    assert ended == ["fast-call", "slow-call"]
    assert [r.tool_call_id for r in tool_results(result.messages)] == ["slow-call", "fast-call"]
    assert [r.tool_call_id for r in tool_results(model.requests[1].messages)] == ["slow-call", "fast-call"]
    assert [r.tool_name for r in tool_results(result.messages)] == ["slow", "fast"]
    assert_single_end(events, "stop")


class ExplodingError(Exception):
    """An executor failure that carries a stack-like attribute and a note."""


@pytest.mark.lab7_4
def test_a_rejected_injected_executor_becomes_an_error_result_and_keeps_its_siblings() -> None:
    """注入的 executor 抛出异常：它变成不带 stack 的错误结果，同批的其他结果不丢吗？"""

    async def scenario() -> tuple[AgentRunResult, list[LoopEvent]]:
        good_started, release_good = Gate(), Gate()

        async def executor(
            current: ToolCall,
            *,
            signal: AbortSignal | None = None,
            report_progress: Callable[[list[TextContent]], None] | None = None,
        ) -> ToolResultMessage:
            if current.id == "bad-call":
                error = ExplodingError("executor exploded")
                error.stack = "STACK_SECRET"  # type: ignore[attr-defined]
                error.add_note("STACK_SECRET")
                raise error
            good_started.open()
            await release_good.event.wait()
            if report_progress is not None:
                report_progress([text("good still running")])
            return result_for(current, "good result")

        model = ScriptedModel(
            [
                assistant_message([call("bad-call", "bad", {}), call("good-call", "good", {})], "toolUse"),
                assistant_message([text("done")], "stop"),
            ]
        )
        events: list[LoopEvent] = []
        pending = asyncio.ensure_future(
            run_agent_loop(
                model=model,
                tools=ToolRegistry(),
                context=user_run(),
                execute_tool_call=executor,
                on_event=events.append,
            )
        )
        try:
            await good_started.passed("good 没有启动：bad 的异常不应拦住同批的其他调用", pending)
            release_good.open()
            return await asyncio.wait_for(pending, HANG), events
        finally:
            pending.cancel()

    result, events = asyncio.run(scenario())

    assert result.reason == "stop"
    results = tool_results(result.messages)
    assert [r.tool_call_id for r in results] == ["bad-call", "good-call"]
    assert [r.tool_name for r in results] == ["bad", "good"]
    assert results[0].is_error is True
    assert results[1].is_error is False
    wire = json.dumps(results[0].to_dict(), ensure_ascii=False)
    assert "executor exploded" in wire
    assert "STACK_SECRET" not in wire
    assert "stack" not in wire.lower()
    assert "Traceback" not in wire
    assert sorted(e.result.tool_call_id for e in events if isinstance(e, LoopToolEnd)) == [
        "bad-call",
        "good-call",
    ]
    assert any(isinstance(e, LoopToolProgress) and e.call_id == "good-call" for e in events)
    assert_single_end(events, "stop")


@pytest.mark.lab7_4
def test_a_failed_execution_keeps_only_the_message() -> None:
    """被拒绝的调用的结果是 06 的失败形状吗？正文 Tool <name> failed: <消息>，details 只有 error。"""

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        raise RuntimeError("disk on fire")

    model = ScriptedModel(
        [assistant_message([call("x1", "write", {})], "toolUse"), assistant_message([text("ok")], "stop")]
    )

    result = run(model, ToolRegistry(), user_run(), execute_tool_call=executor)

    [answer] = tool_results(result.messages)
    assert answer.content == [text("Tool write failed: disk on fire")]
    assert answer.details == {"error": "disk on fire"}
    assert (answer.tool_call_id, answer.tool_name, answer.is_error) == ("x1", "write", True)


@pytest.mark.lab7_4
def test_an_exception_without_a_message_is_named_by_its_class() -> None:
    """异常没有消息时，失败结果用异常的类名，而不是空字符串吗？"""

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        raise LookupError()

    model = ScriptedModel(
        [assistant_message([call("x1", "find", {})], "toolUse"), assistant_message([text("ok")], "stop")]
    )

    result = run(model, ToolRegistry(), user_run(), execute_tool_call=executor)

    [answer] = tool_results(result.messages)
    assert answer.content == [text("Tool find failed: LookupError")]
    assert answer.details == {"error": "LookupError"}


@pytest.mark.lab7_4
def test_a_cancellation_inside_an_executor_is_not_turned_into_a_result() -> None:
    """executor 里的 asyncio.CancelledError 会穿过 loop，而不是被当成工具失败吞掉吗？"""

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        raise asyncio.CancelledError()

    model = ScriptedModel(
        [assistant_message([call("x1", "echo", {})], "toolUse"), assistant_message([text("ok")], "stop")]
    )

    with pytest.raises(asyncio.CancelledError):
        run(model, ToolRegistry(), user_run(), execute_tool_call=executor)


@pytest.mark.lab7_4
def test_every_tool_start_of_a_batch_comes_before_any_tool_runs() -> None:
    """整批的 tool_start 都在任何工具开始执行之前发出吗？"""
    events: list[LoopEvent] = []
    starts_seen: list[int] = []

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        starts_seen.append(len(of_type(events, "tool_start")))
        return result_for(current, current.id)

    calls = [call(f"c{n}", "echo", {}) for n in range(3)]
    model = ScriptedModel([assistant_message([*calls], "toolUse"), assistant_message([text("ok")], "stop")])

    run(model, ToolRegistry(), user_run(), events, execute_tool_call=executor)

    assert starts_seen == [3, 3, 3]
    assert [e.call.id for e in events if isinstance(e, LoopToolStart)] == ["c0", "c1", "c2"]


@pytest.mark.lab7_4
@given(order=st.permutations([0, 1, 2]))
def test_for_any_completion_order_results_are_written_in_call_order(order: list[int]) -> None:
    """无论三个工具以什么顺序完成，tool_end 跟着完成顺序，写入的结果始终按 call 顺序吗？"""

    async def scenario() -> tuple[AgentRunResult, list[LoopEvent]]:
        gates = [Gate() for _ in range(3)]
        all_started = Gate()
        started: list[str] = []
        events: list[LoopEvent] = []
        ended = asyncio.Queue[str]()

        async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
            started.append(current.id)
            if len(started) == 3:
                all_started.open()
            await gates[int(current.id[1:])].event.wait()
            return result_for(current, current.id)

        def observe(event: LoopEvent) -> None:
            events.append(event)
            if isinstance(event, LoopToolEnd):
                ended.put_nowait(event.result.tool_call_id)

        calls = [call(f"c{n}", f"tool{n}", {}) for n in range(3)]
        model = ScriptedModel(
            [assistant_message([*calls], "toolUse"), assistant_message([text("ok")], "stop")]
        )
        pending = asyncio.ensure_future(
            run_agent_loop(
                model=model,
                tools=ToolRegistry(),
                context=user_run(),
                on_event=observe,
                execute_tool_call=executor,
            )
        )
        try:
            await all_started.passed("三个工具没有同时开始", pending)
            for index in order:
                gates[index].open()
                assert (
                    await arrival(ended.get(), f"c{index} 完成后没有立刻发出 tool_end", pending)
                    == f"c{index}"
                )
            return await asyncio.wait_for(pending, HANG), events
        finally:
            pending.cancel()

    result, events = asyncio.run(scenario())

    assert [e.result.tool_call_id for e in events if isinstance(e, LoopToolEnd)] == [f"c{i}" for i in order]
    assert [r.tool_call_id for r in tool_results(result.messages)] == ["c0", "c1", "c2"]
    assert [r.tool_name for r in tool_results(result.messages)] == ["tool0", "tool1", "tool2"]


# ## Lab 7.5 · cancellation and the step limit


def forever_tool_use() -> list[AssistantMessage]:
    """A script whose every turn asks for one more echo call (more turns than any limit used here)."""
    return [assistant_message([call(f"loop-{n}", "echo", {"value": str(n)})], "toolUse") for n in range(40)]


@pytest.mark.lab7_5
@pytest.mark.edits("end_cancelled")
def test_cancelled_before_the_first_request_asks_nothing_and_ends_once() -> None:
    """开始前就已取消：不请求模型，steps 为 0，messages 只有输入，只有一个 aborted 终态吗？"""
    controller = AbortController()
    controller.abort()
    initial = user_message("do not start")
    model = ScriptedModel([assistant_message([text("unreachable")], "stop")])
    events: list[LoopEvent] = []

    result = run(model, ToolRegistry(), context_of(initial), events, signal=controller.signal)

    assert result.reason == "aborted"
    assert result.steps == 0
    assert result.messages == [initial]
    assert len(model.requests) == 0
    assert_single_end(events, "aborted")
    assert events == [LoopTurnEnd(reason="aborted")]


@pytest.mark.lab7_5
@pytest.mark.edits("end_cancelled")
def test_cancelled_during_the_tools_keeps_the_paired_results_and_asks_no_more() -> None:
    """工具执行中取消：等这批结束，保留配对结果，不再请求模型，以 aborted 结束吗？"""
    controller = AbortController()
    seen: list[AbortSignal | None] = []

    async def cancel_after(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        seen.append(context.signal)
        controller.abort()
        return ToolOutput([text(params["value"])])

    registry = ToolRegistry(
        [
            Tool(
                "cancel-after",
                "abort after producing evidence",
                object_schema({"value": string_value}),
                cancel_after,
            )
        ]
    )
    current = call("cancel-call", "cancel-after", {"value": "kept"})
    model = ScriptedModel(
        [assistant_message([current], "toolUse"), assistant_message([text("must not be requested")], "stop")]
    )
    events: list[LoopEvent] = []

    result = run(model, registry, user_run(), events, signal=controller.signal)

    assert seen == [controller.signal] and seen[0] is controller.signal
    assert result.reason == "aborted"
    assert result.steps == 1
    assert len(model.requests) == 1
    kept = [
        {"id": r.tool_call_id, "name": r.tool_name, "text": r.content} for r in tool_results(result.messages)
    ]
    assert kept == [{"id": current.id, "name": current.name, "text": [text("kept")]}]
    assert len(of_type(events, "tool_end")) == 1
    assert_single_end(events, "aborted")


@pytest.mark.lab7_5
@pytest.mark.edits("end_at_step_limit")
def test_max_steps_keeps_the_last_batch_and_ends_once_as_max_steps() -> None:
    """max_steps=1：这一批结果保留，不发起第二次请求，以唯一的 maxSteps 终态结束吗？"""
    registry, _ = echo_registry()
    current = call("last-call", "echo", {"value": "kept"})
    model = ScriptedModel(
        [assistant_message([current], "toolUse"), assistant_message([text("must not be requested")], "stop")]
    )
    events: list[LoopEvent] = []

    result = run(model, registry, user_run(), events, max_steps=1)

    assert result.reason == "maxSteps"
    assert result.steps == 1
    assert len(model.requests) == 1
    kept = [
        {"id": r.tool_call_id, "name": r.tool_name, "content": r.content}
        for r in tool_results(result.messages)
    ]
    assert kept == [{"id": current.id, "name": current.name, "content": [text("kept")]}]
    assert roles(result.messages) == ["user", "assistant", "toolResult"]
    assert_single_end(events, "maxSteps")


@pytest.mark.lab7_5
@pytest.mark.edits("end_at_step_limit")
@pytest.mark.parametrize("limit", [2, 3, 5])
def test_max_steps_bounds_the_number_of_model_requests(limit: int) -> None:
    """max_steps 恰好是允许的模型请求次数吗？每一批结果都保留，steps 等于上限。"""
    registry, echo = echo_registry()
    model = ScriptedModel(forever_tool_use())

    result = run(model, registry, user_run(), max_steps=limit)

    assert (result.reason, result.steps, len(model.requests), echo.executions) == (
        "maxSteps",
        limit,
        limit,
        limit,
    )
    assert roles(result.messages) == ["user", *(["assistant", "toolResult"] * limit)]


@pytest.mark.lab7_5
@pytest.mark.edits("end_at_step_limit")
def test_the_default_step_limit_is_32_requests() -> None:
    """不传 max_steps 时，上限是 32 次模型请求吗？"""
    registry, _ = echo_registry()
    model = ScriptedModel(forever_tool_use())

    result = run(model, registry, user_run())

    assert (result.reason, result.steps, len(model.requests)) == ("maxSteps", 32, 32)


@pytest.mark.lab7_5
@pytest.mark.edits("end_at_step_limit")
def test_a_zero_step_limit_asks_nothing() -> None:
    """max_steps=0 时一次也不请求，直接以 maxSteps 结束、steps 为 0 吗？"""
    registry, _ = echo_registry()
    model = ScriptedModel(forever_tool_use())
    events: list[LoopEvent] = []

    result = run(model, registry, user_run(), events, max_steps=0)

    assert (result.reason, result.steps, len(model.requests)) == ("maxSteps", 0, 0)
    assert events == [LoopTurnEnd(reason="maxSteps")]


@pytest.mark.lab7_5
@pytest.mark.edits("end_cancelled")
def test_a_cancellation_on_the_last_allowed_step_ends_as_aborted() -> None:
    """最后一步的工具里取消：以 aborted 而不是 maxSteps 结束吗？取消检查在上限之前。"""
    controller = AbortController()

    async def cancel(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        controller.abort()
        return ToolOutput([text("done")])

    registry = ToolRegistry([Tool("cancel", "cancel", object_schema({}), cancel)])
    model = ScriptedModel([assistant_message([call("k1", "cancel", {})], "toolUse")])
    events: list[LoopEvent] = []

    result = run(model, registry, user_run(), events, signal=controller.signal, max_steps=1)

    assert (result.reason, result.steps) == ("aborted", 1)
    assert_single_end(events, "aborted")


@pytest.mark.lab7_5
@pytest.mark.edits("end_cancelled")
def test_a_cancellation_on_a_later_step_counts_the_completed_requests() -> None:
    """第二轮工具里取消：steps 等于已完成的请求数 2，两批结果都在，不发第三次请求吗？"""
    controller = AbortController()
    executed: list[str] = []

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        executed.append(current.id)
        if len(executed) == 2:
            controller.abort()
        return result_for(current, current.id)

    model = ScriptedModel(forever_tool_use())
    events: list[LoopEvent] = []

    result = run(
        model, ToolRegistry(), user_run(), events, signal=controller.signal, execute_tool_call=executor
    )

    assert (result.reason, result.steps, len(model.requests)) == ("aborted", 2, 2)
    assert [r.tool_call_id for r in tool_results(result.messages)] == ["loop-0", "loop-1"]
    assert_single_end(events, "aborted")
