"""Focused tests of checkpoint 09: a stateful Agent runs the loop over one transcript, one prompt at a time.

Sections follow the labs, and each course test (`09-stateful-agent.test.ts`, by position) has a kit
test, or two, that carry all of its assertions; deeper tests follow. Every Agent here works over the
real coding tools of 08, bound to a fresh `tmp_path` workspace. Concurrency is ordered by gates the
test opens (asyncio.Event), never by sleeping; a timeout only turns a hang into a red.

On the starter the Agent (or the loop) turns some stubs' `LabNotImplemented` into an error result, a
failed tool result or a diagnostic line; `surface_stubs` raises it again, so the report names the lab.
"""

from __future__ import annotations

import asyncio
import copy
import re
import sys
from collections.abc import Callable, Coroutine, Generator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AbortController,
    AbortSignal,
    Agent,
    AgentContext,
    AgentEvent,
    AgentLoop,
    AgentMessage,
    AgentRunEnd,
    AgentRunResult,
    AgentRunStart,
    AgentState,
    AssistantMessage,
    AssistantMessageEventStream,
    LabNotImplemented,
    LoopAssistantMessage,
    LoopEvent,
    LoopModelEvent,
    LoopToolEnd,
    LoopToolSkipped,
    LoopToolStart,
    LoopTurnEnd,
    ModelDone,
    ModelError,
    ModelStart,
    ModelTextDelta,
    PromptSystem,
    ScriptedErrorTurn,
    ScriptedModel,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    create_coding_tools,
    current_system_prompt,
    now_ms,
    reduce_agent_state,
    run_agent_loop,
    text,
    text_of,
    user_message,
)

#: How long a gated test waits for something the Agent should do at once, before it calls it a hang.
HANG = 2.0

STUB = re.compile(r"Lab (\d+\.\d+) not implemented: (\S+)")

T = TypeVar("T")

# Shared helpers. Nothing here calls a lab piece at import time.


def tool_call(call_id: str, name: str = "probe") -> ToolCall:
    """A tool call with no arguments, as the course's tests write it."""
    return ToolCall(id=call_id, name=name, arguments={})


def tool_result(current: ToolCall, value: str, is_error: bool = False) -> ToolResultMessage:
    """A result an injected executor builds by hand."""
    return ToolResultMessage(
        tool_call_id=current.id,
        tool_name=current.name,
        content=[text(value)],
        details=None,
        is_error=is_error,
        timestamp=now_ms(),
    )


def initial_state(messages: list[AgentMessage] | None = None) -> AgentState:
    """An idle state holding `messages`."""
    return AgentState(status="idle", messages=messages if messages is not None else [])


def roles(messages: Sequence[AgentMessage]) -> list[str]:
    """The role of each message, in order."""
    return [message.role for message in messages]


def all_text(messages: Sequence[AgentMessage]) -> str:
    """Every message's text, one per line."""
    return "\n".join(text_of(message) for message in messages)


def first_text(message: AgentMessage) -> TextContent:
    """The first block of a user or assistant message, which these tests know is text."""
    assert not isinstance(message, SystemMessage)
    block = message.content[0]
    assert isinstance(block, TextContent)
    return block


def surface_stubs(agent: Agent, result: AgentRunResult | None = None) -> None:
    """Raise the `LabNotImplemented` that the Agent or the loop turned into data, if any."""
    texts = list(agent.get_state().diagnostics)
    if result is not None:
        for message in result.messages:
            if isinstance(message, AssistantMessage) and message.error_message:
                texts.append(message.error_message)
            if isinstance(message, ToolResultMessage):
                texts.append(text_of(message))
    for line in texts:
        if stub := STUB.search(line):
            raise LabNotImplemented(stub[1], stub[2])


async def prompt(agent: Agent, value: str, system: PromptSystem | None = None) -> AgentRunResult:
    """`agent.prompt`, with any stub it swallowed raised again."""
    result = await asyncio.wait_for(agent.prompt(value, system=system), HANG)
    surface_stubs(agent, result)
    return result


def create_agent(
    workspace: Path,
    model: Any,
    *,
    tool_executor: ToolExecutor | None = None,
    system_prompt: str | None = None,
) -> Agent:
    """An Agent over 08's real coding tools, bound to the test's own workspace."""
    return Agent(
        model=model,
        tools=create_coding_tools(cwd=str(workspace), containment="workspace"),
        tool_executor=tool_executor,
        system_prompt=system_prompt,
    )


def complete_stream(stream: AssistantMessageEventStream, message: AssistantMessage) -> None:
    """Play a whole reply onto a stream: start, one delta per text block, then the terminal event."""
    partial = copy.deepcopy(message)
    partial.content, partial.stop_reason = [], "stop"
    stream.push(ModelStart(partial=copy.deepcopy(partial)))
    for index, block in enumerate(message.content):
        if isinstance(block, TextContent):
            partial.content.append(copy.deepcopy(block))
            stream.push(ModelTextDelta(content_index=index, delta=block.text, partial=copy.deepcopy(partial)))
    if message.stop_reason == "error" or message.stop_reason == "aborted":
        stream.push(ModelError(reason=message.stop_reason, error=copy.deepcopy(message)))
        return
    stream.push(ModelDone(reason=message.stop_reason, message=copy.deepcopy(message)))


class ManualModel:
    """A model whose replies the test completes by hand; it may honour or ignore cancellation."""

    def __init__(self, honor_abort: bool = True) -> None:
        self.honor_abort = honor_abort
        self.requests: list[AgentContext] = []
        self.signals: list[AbortSignal | None] = []
        self.streams: list[AssistantMessageEventStream] = []
        self._grew = asyncio.Event()

    def stream(
        self, context: AgentContext, *, signal: AbortSignal | None = None
    ) -> AssistantMessageEventStream:
        """Record the request and hand back a stream that stays open until `complete` or an abort."""
        stream = AssistantMessageEventStream()
        self.requests.append(copy.deepcopy(context))
        self.signals.append(signal)
        self.streams.append(stream)
        self._grew.set()

        def abort() -> None:
            message = assistant_message([], "aborted", error_message="manual model aborted")
            stream.push(ModelError(reason="aborted", error=message))

        if self.honor_abort and signal is not None:
            if signal.aborted:
                asyncio.get_running_loop().call_soon(abort)
            else:
                signal.add_event_listener("abort", abort)
        return stream

    async def started(self, count: int) -> None:
        """Wait until `count` requests have been made."""
        while len(self.streams) < count:
            self._grew.clear()
            await asyncio.wait_for(self._grew.wait(), HANG)

    def complete(self, index: int, message: AssistantMessage) -> None:
        """Finish request `index` with `message`."""
        complete_stream(self.streams[index], message)


class SignalCapturingModel:
    """A scripted model that also records the signal of each request."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.signals: list[AbortSignal | None] = []

    def stream(
        self, context: AgentContext, *, signal: AbortSignal | None = None
    ) -> AssistantMessageEventStream:
        """Record the signal, then let the script answer."""
        self.signals.append(signal)
        return self.inner.stream(context, signal=signal)


class ThrowOnSecondRequestModel:
    """Asks for one tool, then raises on the second request (a provider that fails mid-run)."""

    def __init__(self, call: ToolCall) -> None:
        self.requests: list[AgentContext] = []
        self.scripted = ScriptedModel(
            [assistant_message([call], "toolUse"), assistant_message([text("clean retry")])]
        )

    def stream(
        self, context: AgentContext, *, signal: AbortSignal | None = None
    ) -> AssistantMessageEventStream:
        """Raise on the second request; otherwise play the script."""
        self.requests.append(copy.deepcopy(context))
        if len(self.requests) == 2:
            raise RuntimeError("provider stream failed")
        return self.scripted.stream(context, signal=signal)


class _Started(Generic[T]):
    """A coroutine already run to its first suspension by hand, awaited from there on (3.11's eager start)."""

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None
        try:
            self._yielded: Any = coroutine.send(None)
        except StopIteration as stop:
            self._done, self._result = True, stop.value
        except Exception as error:  # kept for the awaiter, as a task keeps it
            self._done, self._error = True, error

    def __await__(self) -> Generator[Any, Any, T]:
        if self._error is not None:
            raise self._error
        if self._done:
            return cast(T, self._result)
        yielded = self._yielded
        while True:
            try:
                sent = yield yielded
            except BaseException as error:  # a cancellation or close goes on into the coroutine
                try:
                    yielded = self._coroutine.throw(error)
                except StopIteration as stop:
                    return cast(T, stop.value)
            else:
                try:
                    yielded = self._coroutine.send(sent)
                except StopIteration as stop:
                    return cast(T, stop.value)


def start_eagerly(coroutine: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Run `coroutine` at once up to its first `await`, as a TypeScript async call does, the rest in a task.

    `asyncio.ensure_future` would start it only on a later turn of the loop, after the caller has
    returned; a prompt started so would never meet the busy slot the caller still holds.
    """
    if sys.version_info >= (3, 12):
        return asyncio.eager_task_factory(asyncio.get_running_loop(), coroutine)
    started = _Started(coroutine)

    async def rest() -> T:
        return await started

    return asyncio.ensure_future(rest())


def run_async(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one async scenario on a fresh event loop."""
    return asyncio.run(scenario())


# ## Lab 9.1 · the reducer


@pytest.mark.lab9_1
def test_reducer_derives_streaming_text_pending_tools_and_final_state_without_touching_inputs() -> None:
    """reducer 能派生出流式文本、待处理工具和运行终态，而且从不修改它的输入吗？"""
    previous = user_message("history")
    original = initial_state([previous])
    snapshot = copy.deepcopy(original)
    first = user_message("start")
    running = reduce_agent_state(original, AgentRunStart(run_id=1, message=first))
    assert (running.status, running.active_run_id) == ("running", 1)
    assert running.messages == [previous, first]
    assert running.messages is not original.messages
    assert original == snapshot
    first_text(previous).text = "mutated old history"
    first_text(first).text = "mutated after reduce"
    assert [text_of(m) for m in running.messages] == ["history", "start"]
    first_text(previous).text, first_text(first).text = "history", "start"

    partial = assistant_message([text("hel")])
    delta = ModelTextDelta(content_index=0, delta="hel", partial=partial)
    streamed = reduce_agent_state(running, AgentLoop(run_id=1, event=LoopModelEvent(event=delta)))
    assert streamed.streaming_text == "hel"

    call = tool_call("call-1")
    started = reduce_agent_state(streamed, AgentLoop(run_id=1, event=LoopToolStart(call=call)))
    assert started.pending_tool_call_ids == ["call-1"]
    assert streamed.pending_tool_call_ids == []
    ended = reduce_agent_state(
        started, AgentLoop(run_id=1, event=LoopToolEnd(result=tool_result(call, "done")))
    )
    assert ended.pending_tool_call_ids == []
    assistant_ended = reduce_agent_state(
        ended,
        AgentLoop(run_id=1, event=LoopAssistantMessage(message=assistant_message([text("hello")]))),
    )
    assert assistant_ended.streaming_text == ""

    final_messages: list[AgentMessage] = [first, assistant_message([text("hello")])]
    idle = reduce_agent_state(
        assistant_ended,
        AgentRunEnd(run_id=1, result=AgentRunResult(reason="stop", messages=final_messages, steps=1)),
    )
    assert (idle.status, idle.active_run_id, idle.last_reason) == ("idle", None, "stop")
    assert idle.messages == final_messages
    assert idle.messages is not final_messages
    first_text(final_messages[0]).text = "mutated final input"
    assert text_of(idle.messages[0]) == "start"


@pytest.mark.lab9_1
def test_reducer_ignores_late_events_of_another_run() -> None:
    """不属于当前 run 的迟到事件（loop 或 run_end）会让 reducer 原样返回同一个 state 吗？"""
    current = reduce_agent_state(initial_state(), AgentRunStart(run_id=2, message=user_message("current")))
    stale_delta = ModelTextDelta(content_index=0, delta="STALE", partial=assistant_message([text("STALE")]))
    stale_loop = reduce_agent_state(current, AgentLoop(run_id=1, event=LoopModelEvent(event=stale_delta)))
    stale_end = reduce_agent_state(
        current,
        AgentRunEnd(
            run_id=1, result=AgentRunResult(reason="stop", messages=[user_message("stale")], steps=1)
        ),
    )
    assert stale_loop is current
    assert stale_end is current
    assert (current.streaming_text, current.status, current.active_run_id) == ("", "running", 2)


@pytest.mark.lab9_1
def test_reducer_on_an_idle_state_ignores_loop_events_and_places_a_patch_before_the_user() -> None:
    """idle 状态收到 loop 事件时原样返回；run_start 带 system 补丁时补丁排在用户消息之前吗？"""
    idle = initial_state([user_message("old")])
    delta = ModelTextDelta(content_index=0, delta="x", partial=assistant_message([text("x")]))
    assert reduce_agent_state(idle, AgentLoop(run_id=1, event=LoopModelEvent(event=delta))) is idle
    patch = SystemMessage(content="", timestamp=1, sections={"rules": "R"})
    started = reduce_agent_state(idle, AgentRunStart(run_id=3, message=user_message("new"), system=patch))
    assert roles(started.messages) == ["user", "system", "user"]
    assert started.messages[1] == patch and started.messages[1] is not patch
    skipped = tool_result(tool_call("s1"), "skipped", is_error=True)
    with_pending = reduce_agent_state(started, AgentLoop(run_id=3, event=LoopToolStart(call=tool_call("s1"))))
    after_skip = reduce_agent_state(with_pending, AgentLoop(run_id=3, event=LoopToolSkipped(result=skipped)))
    assert (with_pending.pending_tool_call_ids, after_skip.pending_tool_call_ids) == (["s1"], [])


LOOP_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("delta"), st.text(alphabet="ab字 ", max_size=3)),
        st.tuples(st.just("start"), st.sampled_from(["c1", "c2", "c3"])),
        st.tuples(st.just("end"), st.sampled_from(["c1", "c2", "c3"])),
        st.tuples(st.just("skip"), st.sampled_from(["c1", "c2", "c3"])),
        st.tuples(st.just("assistant"), st.just("")),
        st.tuples(st.just("stale"), st.just("")),
    ),
    max_size=12,
)


def loop_event_for(kind: str, value: str) -> LoopEvent:
    """The loop event that one generated step stands for."""
    if kind in ("delta", "stale"):
        return LoopModelEvent(
            event=ModelTextDelta(content_index=0, delta=value or "S", partial=assistant_message([]))
        )
    if kind == "start":
        return LoopToolStart(call=tool_call(value))
    if kind == "end":
        return LoopToolEnd(result=tool_result(tool_call(value), "ok"))
    if kind == "skip":
        return LoopToolSkipped(result=tool_result(tool_call(value), "skipped", is_error=True))
    return LoopAssistantMessage(message=assistant_message([text("done")]))


@pytest.mark.lab9_1
@given(steps=LOOP_STEPS)
def test_reducer_tracks_any_sequence_of_loop_events_like_a_simple_model(steps: list[tuple[str, str]]) -> None:
    """任意一串 loop 事件之后，streaming_text 与 pending_tool_call_ids 都和一个简单模型一致、且输入从不被改写
    吗？"""
    state = reduce_agent_state(initial_state(), AgentRunStart(run_id=7, message=user_message("go")))
    streaming, pending = "", []
    for kind, value in steps:
        before = copy.deepcopy(state)
        event = loop_event_for(kind, value)
        following = reduce_agent_state(state, AgentLoop(run_id=6 if kind == "stale" else 7, event=event))
        assert state == before
        if kind == "stale":
            assert following is state
        elif kind == "delta":
            streaming += value or "S"
        elif kind == "assistant":
            streaming = ""
        elif kind == "start":
            pending.append(value)
        else:
            pending = [i for i in pending if i != value]
        state = following
        assert (state.streaming_text, state.pending_tool_call_ids) == (streaming, pending)
    assert (state.status, state.active_run_id) == ("running", 7)


# ## Lab 9.2 · one run's lifecycle


@pytest.mark.lab9_2
@pytest.mark.edits("Agent.prompt")
def test_busy_guard_refuses_a_parallel_prompt_and_runs_in_turn_share_one_transcript(tmp_path: Path) -> None:
    """运行中的 Agent 拒绝并行 prompt（Agent is busy），而先后两次运行共享同一份 transcript 吗？"""

    async def scenario() -> None:
        model = ManualModel()
        agent = create_agent(tmp_path, model)
        first = asyncio.ensure_future(prompt(agent, "one"))
        await model.started(1)
        with pytest.raises(RuntimeError, match=r"^Agent is busy$"):
            await agent.prompt("parallel")
        model.complete(0, assistant_message([text("first")]))
        assert (await first).reason == "stop"
        second = asyncio.ensure_future(prompt(agent, "two"))
        await model.started(2)
        model.complete(1, assistant_message([text("second")]))
        assert (await second).reason == "stop"
        assert len(model.requests) == 2
        assert roles(model.requests[1].messages) == ["user", "assistant", "user"]
        state = agent.get_state()
        assert roles(state.messages) == ["user", "assistant", "user", "assistant"]
        assert (state.status, state.last_reason) == ("idle", "stop")

    run_async(scenario)


@pytest.mark.lab9_2
@pytest.mark.edits("end_after_model_failure")
def test_a_model_that_raises_keeps_the_committed_tool_result_and_the_agent_recovers(tmp_path: Path) -> None:
    """模型在第二次请求时抛异常：已提交的工具结果留在 transcript，运行以 error 结束，下一次 prompt 正常吗？"""

    async def scenario() -> None:
        call = tool_call("write-before-provider-error")
        model = ThrowOnSecondRequestModel(call)
        side_effects = 0

        async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
            nonlocal side_effects
            side_effects += 1
            return tool_result(current, "write committed")

        agent = create_agent(tmp_path, model, tool_executor=executor)
        run_ends: list[int] = []
        agent.subscribe(lambda event: run_ends.append(event.run_id) if event.type == "run_end" else None)
        failed = await prompt(agent, "change a file")
        assert failed.reason == "error"
        assert side_effects == 1
        assert roles(failed.messages) == ["user", "assistant", "toolResult", "assistant"]
        assert "write committed" in text_of(failed.messages[2])
        last = failed.messages[-1]
        assert isinstance(last, AssistantMessage)
        assert "provider stream failed" in (last.error_message or "")
        assert last.stop_reason == "error"
        assert agent.get_state().status == "idle"
        assert run_ends == [1]
        assert (await prompt(agent, "retry")).reason == "stop"
        assert run_ends == [1, 2]

    run_async(scenario)


@pytest.mark.lab9_2
@pytest.mark.edits("end_after_model_failure")
def test_a_model_that_raises_after_a_cancellation_ends_the_run_as_aborted() -> None:
    """signal 已取消时模型抛出的异常会被记成 aborted，而不是 error 吗？"""

    class CancellingThenRaising:
        def __init__(self, controller: AbortController) -> None:
            self.controller = controller

        def stream(
            self, context: AgentContext, *, signal: AbortSignal | None = None
        ) -> AssistantMessageEventStream:
            self.controller.abort()
            raise RuntimeError("connection reset after cancel")

    async def scenario() -> tuple[AgentRunResult, list[LoopEvent]]:
        controller = AbortController()
        events: list[LoopEvent] = []
        result = await run_agent_loop(
            model=CancellingThenRaising(controller),
            tools=ToolRegistry(),
            context=AgentContext(messages=[user_message("go")]),
            signal=controller.signal,
            on_event=events.append,
        )
        return result, events

    result, events = run_async(scenario)
    assert (result.reason, result.steps) == ("aborted", 1)
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.error_message) == ("aborted", "connection reset after cancel")
    assert [event.type for event in events] == ["assistant_message", "turn_end"]
    assert events[-1] == LoopTurnEnd(reason="aborted")


@pytest.mark.lab9_2
@pytest.mark.edits("Agent.prompt", "Agent._emit")
def test_a_run_started_by_a_run_end_listener_is_not_undone_by_the_old_cleanup(tmp_path: Path) -> None:
    """run_end 监听者启动的新运行不受旧运行清理的影响：它仍在运行、挡住第三次 prompt，生命周期顺序正确吗？"""

    async def scenario() -> None:
        model = ManualModel()
        agent = create_agent(tmp_path, model)
        second: list[asyncio.Future[AgentRunResult]] = []
        lifecycle: list[str] = []

        def start_second(event: AgentEvent) -> None:
            if event.type == "run_end" and event.run_id == 1:
                # Started at once, inside the old run's run_end: it takes the free slot before the old
                # prompt has returned, as the course's synchronous prompt() does.
                second.append(start_eagerly(agent.prompt("second")))

        def record(event: AgentEvent) -> None:
            if event.type in ("run_start", "run_end"):
                lifecycle.append(f"{event.type}:{event.run_id}")

        agent.subscribe(start_second)
        agent.subscribe(record)
        first = asyncio.ensure_future(prompt(agent, "first"))
        await model.started(1)
        model.complete(0, assistant_message([text("first done")]))
        assert (await first).reason == "stop"
        assert second
        if second[0].done():
            second[0].result()  # a refused or failed second prompt shows here, not as a hang
        await model.started(2)
        assert len(model.streams) == 2
        assert roles(model.requests[1].messages) == ["user", "assistant", "user"]
        assert text_of(model.requests[1].messages[-1]) == "second"

        third = start_eagerly(agent.prompt("parallel third"))
        await asyncio.sleep(0)
        if len(model.streams) > 2:
            model.complete(2, assistant_message([text("wrongly admitted")]))
        with pytest.raises(RuntimeError, match="Agent is busy"):
            await asyncio.wait_for(third, HANG)
        assert len(model.streams) == 2

        model.complete(1, assistant_message([text("second done")]))
        result = await asyncio.wait_for(second[0], HANG)
        surface_stubs(agent, result)
        assert result.reason == "stop"
        assert agent.get_state().status == "idle"
        assert lifecycle == ["run_start:1", "run_end:1", "run_start:2", "run_end:2"]

    run_async(scenario)


@pytest.mark.lab9_2
@pytest.mark.edits("Agent", "Agent.prompt")
def test_system_prompt_opens_the_transcript_and_a_patch_is_appended_just_before_its_user_message(
    tmp_path: Path,
) -> None:
    """system_prompt 成为开头的 system message；prompt 的 system 补丁只追加在本次用户消息之前、不改写前缀
    吗？"""

    async def scenario() -> None:
        model = ScriptedModel(
            [
                assistant_message([text("first")]),
                assistant_message([text("second")]),
                assistant_message([text("third")]),
            ]
        )
        agent = create_agent(tmp_path, model, system_prompt="BASE")
        assert agent.get_state().messages == [SystemMessage(content="BASE", timestamp=0)]
        assert agent.system_prompt == "BASE"
        starts: list[AgentEvent] = []
        agent.subscribe(lambda event: starts.append(event) if event.type == "run_start" else None)

        plain = await prompt(agent, "one")
        assert roles(plain.messages) == ["system", "user", "assistant"]
        assert current_system_prompt(model.requests[0].messages) == "BASE"
        assert not hasattr(model.requests[0], "system_prompt")

        patched = await prompt(agent, "two", PromptSystem(sections={"rules": "RULE v1"}))
        assert roles(patched.messages) == ["system", "user", "assistant", "system", "user", "assistant"]
        patch = patched.messages[3]
        assert isinstance(patch, SystemMessage)
        assert (patch.content, patch.sections) == ("", {"rules": "RULE v1"})
        assert agent.system_prompt == "BASE\n\nRULE v1"
        assert current_system_prompt(model.requests[1].messages) == "BASE\n\nRULE v1"
        # The patch stays where it was written: nothing folds it into the first system message.
        assert roles(model.requests[1].messages).count("system") == 2
        assert agent.get_state().messages[:3] == plain.messages
        second_start = starts[1]
        assert isinstance(second_start, AgentRunStart)
        assert second_start.system is not None and second_start.system.sections == {"rules": "RULE v1"}
        assert roles(reduce_agent_state(initial_state(), second_start).messages) == ["system", "user"]

        removed = await prompt(
            agent, "three", PromptSystem(content="Prefer small diffs.", sections={"rules": None})
        )
        assert agent.system_prompt == "BASE\n\nPrefer small diffs."
        assert roles(removed.messages).count("system") == 3
        assert current_system_prompt(model.requests[2].messages) == "BASE\n\nPrefer small diffs."

    run_async(scenario)
    bare = create_agent(tmp_path, ScriptedModel([]))
    assert bare.get_state().messages == []
    assert bare.system_prompt is None
    empty = create_agent(tmp_path, ScriptedModel([]), system_prompt="")
    assert empty.get_state().messages == []


# ## Lab 9.3 · subscribers and copies


@pytest.mark.lab9_3
@pytest.mark.edits("Agent._deliver")
def test_state_is_updated_before_subscribers_hear_and_a_broken_subscriber_harms_no_one(
    tmp_path: Path,
) -> None:
    """订阅者听到事件时 state 已经更新；坏订阅者只留下一条诊断，unsubscribe 之后谁都不再收到吗？"""

    async def scenario() -> None:
        model = ScriptedModel(
            [
                assistant_message([text("first")]),
                assistant_message([text("second")]),
                assistant_message([text("third")]),
            ]
        )
        agent = create_agent(tmp_path, model)
        observed_starts = 0
        seen_states: list[tuple[str, int | None]] = []

        def broken(event: AgentEvent) -> None:
            if event.type == "run_start":
                raise RuntimeError("broken renderer")

        def observer(event: AgentEvent) -> None:
            nonlocal observed_starts
            if event.type == "run_start":
                observed_starts += 1
                state = agent.get_state()
                seen_states.append((state.status, state.active_run_id))
                assert state.active_run_id == event.run_id

        unsubscribe_broken = agent.subscribe(broken)
        unsubscribe_observer = agent.subscribe(observer)

        assert (await prompt(agent, "one")).reason == "stop"
        assert observed_starts == 1
        assert seen_states == [("running", 1)]
        diagnostics = agent.get_state().diagnostics
        assert len(diagnostics) == 1 and "broken renderer" in diagnostics[0]
        assert diagnostics == ["subscriber: broken renderer"]
        assert unsubscribe_broken() is True
        assert unsubscribe_broken() is False

        assert (await prompt(agent, "two")).reason == "stop"
        assert observed_starts == 2
        assert len(agent.get_state().diagnostics) == 1
        unsubscribe_observer()

        assert (await prompt(agent, "three")).reason == "stop"
        assert observed_starts == 2
        assert len(agent.get_state().diagnostics) == 1

    run_async(scenario)


@pytest.mark.lab9_3
@pytest.mark.edits("Agent._deliver")
def test_state_subscriber_events_and_prompt_results_share_no_mutable_references(tmp_path: Path) -> None:
    """state、每个订阅者拿到的事件和 prompt 的返回值彼此不共享可变引用吗？"""

    async def scenario() -> None:
        agent = create_agent(tmp_path, ScriptedModel([assistant_message([text("answer")])]))
        second_seen: list[tuple[int, str]] = []

        def mutating(event: AgentEvent) -> None:
            if isinstance(event, AgentRunEnd):
                event.result.messages.append(user_message("subscriber mutation"))
                first = event.result.messages[0]
                if isinstance(first, UserMessage):
                    first_text(first).text = "subscriber changed"

        def reading(event: AgentEvent) -> None:
            if isinstance(event, AgentRunEnd):
                second_seen.append((len(event.result.messages), text_of(event.result.messages[0])))

        agent.subscribe(mutating)
        agent.subscribe(reading)
        result = await prompt(agent, "question")
        assert len(result.messages) == 2
        assert text_of(result.messages[0]) == "question"
        assert second_seen == [(2, "question")]

        result.messages.append(user_message("caller mutation"))
        snapshot = agent.get_state()
        snapshot.messages.append(user_message("snapshot mutation"))
        first_text(snapshot.messages[0]).text = "changed"
        internal = agent.get_state()
        assert len(internal.messages) == 2
        assert text_of(internal.messages[0]) == "question"

    run_async(scenario)


@pytest.mark.lab9_3
@pytest.mark.edits("uncloneable_tool_result")
def test_a_tool_result_that_is_not_plain_data_becomes_an_error_result_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """执行器返回的结果里带着函数：它被换成一个 is_error 的结果（提到 structured-cloneable），运行照常结束
    吗？"""

    async def scenario() -> tuple[AgentRunResult, Agent, ScriptedModel]:
        call = tool_call("uncloneable-details")
        model = ScriptedModel(
            [
                assistant_message([call], "toolUse"),
                assistant_message([text("recovered from malformed result")]),
            ]
        )

        async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
            result = tool_result(current, "raw result")
            result.details = {"nested": [{"callback": lambda: "not cloneable"}]}
            return result

        agent = create_agent(tmp_path, model, tool_executor=executor)
        return await prompt(agent, "run malformed tool"), agent, model

    normalized, agent, model = run_async(scenario)
    assert normalized.reason == "stop"
    [answer] = [m for m in normalized.messages if isinstance(m, ToolResultMessage)]
    assert answer.is_error is True
    assert "structured-cloneable" in text_of(answer)
    assert text_of(answer) == "Tool probe failed: tool result is not structured-cloneable"
    assert answer.tool_call_id == "uncloneable-details"
    assert agent.get_state().status == "idle"
    # The model was shown the error result, not the live callback.
    shown = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert shown == [answer]


@pytest.mark.lab9_3
@pytest.mark.edits("uncloneable_tool_result")
def test_a_tool_result_of_plain_data_and_dataclasses_is_kept_as_it_was(tmp_path: Path) -> None:
    """details 里是普通数据和 dataclass 的工具结果原样进入 transcript，不会被误判为不可复制吗？"""
    produced: list[ToolResultMessage] = []

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        result = tool_result(current, "fine")
        cycle: list[object] = []
        details = {"lines": [1, 2], "note": text("plain"), "pair": (None, 1.5), "cycle": cycle}
        cycle.append(details)
        result.details = details
        produced.append(result)
        return result

    async def scenario() -> AgentRunResult:
        model = ScriptedModel(
            [assistant_message([tool_call("p1")], "toolUse"), assistant_message([text("ok")])]
        )
        return await prompt(create_agent(tmp_path, model, tool_executor=executor), "go")

    result = run_async(scenario)
    [answer] = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert (answer.is_error, text_of(answer)) == (False, "fine")
    assert isinstance(answer.details, dict)
    assert answer.details["note"] == text("plain") and answer.details["pair"] == (None, 1.5)
    assert answer.details["cycle"][0] is answer.details
    assert answer.details is not produced[0].details


# ## Lab 9.4 · cancellation


@pytest.mark.lab9_4
@pytest.mark.edits("Agent.abort")
def test_a_cancellation_before_the_first_request_gives_one_run_end_and_the_next_prompt_a_new_controller(
    tmp_path: Path,
) -> None:
    """run_start 时就取消（两次）：不请求模型、只有一个 run_end；下一次 prompt 用新的 controller 正常完成
    吗？"""

    async def scenario() -> None:
        model = ScriptedModel([assistant_message([text("reachable on second run")])])
        agent = create_agent(tmp_path, model)
        run_ends: list[int] = []

        def listener(event: AgentEvent) -> None:
            if event.type == "run_start" and event.run_id == 1:
                agent.abort()
                agent.abort()
            if event.type == "run_end":
                run_ends.append(event.run_id)

        agent.subscribe(listener)
        cancelled = await prompt(agent, "cancel")
        assert (cancelled.reason, cancelled.steps) == ("aborted", 0)
        assert len(model.requests) == 0
        assert run_ends == [1]
        assert agent.get_state().status == "idle"

        second = await prompt(agent, "continue")
        assert second.reason == "stop"
        assert len(model.requests) == 1
        assert run_ends == [1, 2]
        agent.abort()  # idle: nothing to cancel, and nothing breaks

    run_async(scenario)


@pytest.mark.lab9_4
@pytest.mark.edits("Agent.abort")
def test_cancelling_a_running_tool_hands_model_and_tool_one_signal_and_waits_for_the_paired_result(
    tmp_path: Path,
) -> None:
    """运行中取消：模型和工具拿到的是同一个 signal，等工具交回配对结果后以 aborted 结束，下一次用新 signal
    吗？"""

    async def scenario() -> None:
        call = tool_call("slow-tool")
        model = SignalCapturingModel(
            ScriptedModel([assistant_message([call], "toolUse"), assistant_message([text("new run")])])
        )
        tool_started = asyncio.Event()
        tool_signals: list[AbortSignal | None] = []

        async def executor(
            current: ToolCall, *, signal: AbortSignal | None = None, **_: object
        ) -> ToolResultMessage:
            assert signal is not None, "tool context 缺失"
            tool_signals.append(signal)
            tool_started.set()
            cancelled = asyncio.Event()
            if signal.aborted:
                cancelled.set()
            else:
                signal.add_event_listener("abort", cancelled.set)
            await cancelled.wait()
            return tool_result(current, "cancelled", is_error=True)

        agent = create_agent(tmp_path, model, tool_executor=executor)
        running = asyncio.ensure_future(prompt(agent, "run tool"))
        await asyncio.wait_for(tool_started.wait(), HANG)
        agent.abort()
        agent.abort()
        cancelled = await running
        assert cancelled.reason == "aborted"
        assert len(model.inner.requests) == 1
        assert model.signals[0] is tool_signals[0]
        assert tool_signals[0] is not None and tool_signals[0].aborted
        assert roles(cancelled.messages) == ["user", "assistant", "toolResult"]

        old_signal = model.signals[0]
        assert (await prompt(agent, "new run")).reason == "stop"
        assert model.signals[1] is not old_signal
        assert model.signals[1] is not None and not model.signals[1].aborted

    run_async(scenario)


@pytest.mark.lab9_4
@pytest.mark.edits("end_aborted_text_stop")
def test_a_model_that_ignores_the_signal_and_stops_with_text_still_ends_the_run_as_aborted(
    tmp_path: Path,
) -> None:
    """模型忽略 signal、取消后仍以纯文本 stop 结束：运行以 aborted 结束，回复保留，不再请求吗？"""

    async def scenario() -> None:
        model = ManualModel(honor_abort=False)
        agent = create_agent(tmp_path, model)
        text_run = asyncio.ensure_future(prompt(agent, "cancel text"))
        await model.started(1)
        agent.abort()
        model.complete(0, assistant_message([text("late text")]))
        cancelled = await text_run
        assert cancelled.reason == "aborted"
        assert len(model.requests) == 1
        assert roles(cancelled.messages) == ["user", "assistant"]
        assert agent.get_state().last_reason == "aborted"

    run_async(scenario)


# ## Lab 9.5 · steering and follow-up


@pytest.mark.lab9_5
@pytest.mark.edits("append_queued")
def test_steering_enters_the_next_request_in_fifo_order_after_the_whole_batch(tmp_path: Path) -> None:
    """工具批次全部配对写入之后，steering 才按先进先出进入下一次请求吗？"""

    async def scenario() -> None:
        slow, fast = tool_call("slow"), tool_call("fast")
        model = ScriptedModel(
            [assistant_message([slow, fast], "toolUse"), assistant_message([text("steering applied")])]
        )
        starts = {"slow": asyncio.Event(), "fast": asyncio.Event()}
        releases = {"slow": asyncio.Event(), "fast": asyncio.Event()}
        finished: list[str] = []
        fast_done = asyncio.Event()

        async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
            starts[current.id].set()
            await releases[current.id].wait()
            finished.append(current.id)
            if current.id == "fast":
                fast_done.set()
            return tool_result(current, f"{current.id} done")

        agent = create_agent(tmp_path, model, tool_executor=executor)
        running = asyncio.ensure_future(prompt(agent, "start batch"))
        await asyncio.wait_for(asyncio.gather(starts["slow"].wait(), starts["fast"].wait()), HANG)
        agent.steer("先检查测试")
        agent.steer("再更新说明")
        releases["fast"].set()
        # The fast call really finishes first: its result is written only with the whole batch.
        await asyncio.wait_for(fast_done.wait(), HANG)
        releases["slow"].set()

        result = await running
        assert result.reason == "stop"
        assert finished == ["fast", "slow"]
        assert len(model.requests) == 2
        second = model.requests[1].messages
        assert roles(second) == ["user", "assistant", "toolResult", "toolResult", "user", "user"]
        assert [text_of(m) for m in second[-2:]] == ["先检查测试", "再更新说明"]
        assert [m.tool_call_id for m in second if isinstance(m, ToolResultMessage)] == ["slow", "fast"]

    run_async(scenario)


@pytest.mark.lab9_5
@pytest.mark.edits("append_queued")
def test_steering_that_arrives_during_a_text_reply_starts_another_request(tmp_path: Path) -> None:
    """纯文本回复期间到达的 steering 会开启下一轮模型请求吗？"""

    async def scenario() -> None:
        model = ManualModel()
        agent = create_agent(tmp_path, model)
        running = asyncio.ensure_future(prompt(agent, "start"))
        await model.started(1)
        assert len(model.streams) == 1
        agent.steer("回答前补充检查")
        model.complete(0, assistant_message([text("draft")]))
        await model.started(2)
        model.complete(1, assistant_message([text("final")]))
        result = await running
        assert result.reason == "stop"
        assert len(model.requests) == 2
        assert roles(model.requests[1].messages) == ["user", "assistant", "user"]
        assert text_of(model.requests[1].messages[-1]) == "回答前补充检查"

    run_async(scenario)


@pytest.mark.lab9_5
@pytest.mark.edits("Agent.steer")
def test_steering_queued_before_a_cancelled_text_stop_is_never_consumed(tmp_path: Path) -> None:
    """steer 之后取消、模型忽略取消仍以文本 stop 结束：steering 不被消费，也不漏进下一次运行吗？"""

    async def scenario() -> None:
        model = ManualModel(honor_abort=False)
        agent = create_agent(tmp_path, model)
        cancelled_run = asyncio.ensure_future(prompt(agent, "cancel before text stop"))
        await model.started(1)
        agent.steer("must not consume before abort")
        agent.abort()
        model.complete(0, assistant_message([text("late draft")]))
        cancelled = await cancelled_run
        assert cancelled.reason == "aborted"
        assert "must not consume" not in all_text(cancelled.messages)
        assert len(model.requests) == 1

        clean_run = asyncio.ensure_future(prompt(agent, "clean retry"))
        await model.started(2)
        model.complete(1, assistant_message([text("clean")]))
        assert (await clean_run).reason == "stop"
        assert "must not consume" not in all_text(model.requests[1].messages)

    run_async(scenario)


@pytest.mark.lab9_5
@pytest.mark.edits("Agent.follow_up", "Agent.steer")
def test_follow_ups_wait_for_a_natural_stop_and_no_queue_leaks_into_the_next_run(tmp_path: Path) -> None:
    """follow-up 只在自然 stop 后消费；空闲或 turn_end 之后排队会被拒绝；失败或取消的运行留下的队列不会漏进下
    一次吗？"""

    async def scenario() -> None:
        natural_model = ScriptedModel(
            [assistant_message([text("first")]), assistant_message([text("after follow-up")])]
        )
        natural = create_agent(tmp_path, natural_model)
        with pytest.raises(RuntimeError, match="只在当前 run"):
            natural.steer("idle")
        with pytest.raises(RuntimeError, match="只在当前 run"):
            natural.follow_up("idle")
        late_errors: dict[str, str] = {}

        def listener(event: AgentEvent) -> None:
            if event.type == "run_start":
                natural.follow_up("先总结")
                natural.follow_up("再列风险")
            if isinstance(event, AgentLoop) and event.event.type == "turn_end":
                for name, queue in (("steer", natural.steer), ("follow_up", natural.follow_up)):
                    try:
                        queue("too late")
                        late_errors[name] = "accepted"
                    except RuntimeError as error:
                        late_errors[name] = str(error)

        natural.subscribe(listener)
        natural_result = await prompt(natural, "start")
        assert natural_result.reason == "stop"
        assert late_errors == {
            "steer": "steering 只在当前 run 尚未结束时有意义",
            "follow_up": "follow-up 只在当前 run 尚未结束时排队",
        }
        assert roles(natural_model.requests[1].messages) == ["user", "assistant", "user", "user"]
        assert [text_of(m) for m in natural_model.requests[1].messages[-2:]] == ["先总结", "再列风险"]

        error_model = ScriptedModel(
            [
                ScriptedErrorTurn(stop_reason="error", error_message="provider failed"),
                assistant_message([text("clean next run")]),
            ]
        )
        after_error = create_agent(tmp_path, error_model)

        def leaky(event: AgentEvent) -> None:
            if event.type == "run_start" and event.run_id == 1:
                after_error.steer("must not leak steering")
                after_error.follow_up("must not leak follow-up")

        after_error.subscribe(leaky)
        assert (await prompt(after_error, "fail")).reason == "error"
        assert (await prompt(after_error, "retry")).reason == "stop"
        assert len(error_model.requests) == 2
        assert "must not leak" not in all_text(error_model.requests[1].messages)

        abort_call = tool_call("abort-queue")
        abort_model = ScriptedModel(
            [assistant_message([abort_call], "toolUse"), assistant_message([text("clean after abort")])]
        )
        tool_started = asyncio.Event()

        async def executor(
            current: ToolCall, *, signal: AbortSignal | None = None, **_: object
        ) -> ToolResultMessage:
            tool_started.set()
            cancelled = asyncio.Event()
            if signal is None or signal.aborted:
                cancelled.set()
            else:
                signal.add_event_listener("abort", cancelled.set)
            await cancelled.wait()
            return tool_result(current, "cancelled", is_error=True)

        abort_agent = create_agent(tmp_path, abort_model, tool_executor=executor)
        abort_run = asyncio.ensure_future(prompt(abort_agent, "cancel tool"))
        await asyncio.wait_for(tool_started.wait(), HANG)
        abort_agent.steer("must not consume after tool")
        abort_agent.abort()
        aborted = await abort_run
        assert aborted.reason == "aborted"
        assert "must not consume" not in all_text(aborted.messages)
        assert (await prompt(abort_agent, "retry after abort")).reason == "stop"
        assert "must not consume" not in all_text(abort_model.requests[1].messages)

    run_async(scenario)


def queue_of(*batches: list[str]) -> tuple[Callable[[], list[UserMessage]], list[int]]:
    """A taker that hands out one prepared batch per call (then nothing), counting its calls."""
    pending = [[user_message(value) for value in batch] for batch in batches]
    calls = [0]

    def take() -> list[UserMessage]:
        calls[0] += 1
        return pending.pop(0) if pending else []

    return take, calls


@pytest.mark.lab9_5
@pytest.mark.edits("append_queued")
def test_at_a_text_stop_steering_goes_first_and_follow_ups_wait_for_the_next_natural_stop() -> None:
    """文本 stop 时 steering 与 follow-up 都在排队：先进 steering，follow-up 等下一次自然 stop 才进吗？"""
    take_steering, _ = queue_of(["steer-1", "steer-2"])
    take_follow_ups, _ = queue_of(["follow-1"])
    model = ScriptedModel([assistant_message([text(f"reply {n}")]) for n in range(3)])

    async def scenario() -> AgentRunResult:
        return await run_agent_loop(
            model=model,
            tools=ToolRegistry(),
            context=AgentContext(messages=[user_message("go")]),
            take_steering_messages=take_steering,
            take_follow_up_messages=take_follow_ups,
        )

    result = run_async(scenario)
    assert (result.reason, result.steps) == ("stop", 3)
    assert [text_of(m) for m in model.requests[1].messages] == ["go", "reply 0", "steer-1", "steer-2"]
    assert [text_of(m) for m in model.requests[2].messages][-1] == "follow-1"
    assert roles(result.messages) == ["user", "assistant", "user", "user", "assistant", "user", "assistant"]


@pytest.mark.lab9_5
@pytest.mark.edits("append_queued")
def test_after_a_tool_batch_only_steering_is_read_and_follow_ups_are_left_for_the_stop() -> None:
    """工具批次之后只读 steering、不读 follow-up；follow-up 在随后的自然 stop 才进入吗？"""
    take_steering, steering_calls = queue_of(["steer"])
    take_follow_ups, follow_up_calls = queue_of(["follow"])
    model = ScriptedModel(
        [
            assistant_message([tool_call("t1", "echo")], "toolUse"),
            assistant_message([text("a")]),
            assistant_message([text("b")]),
        ]
    )

    async def executor(current: ToolCall, **_: object) -> ToolResultMessage:
        return tool_result(current, "ran")

    async def scenario() -> AgentRunResult:
        return await run_agent_loop(
            model=model,
            tools=ToolRegistry(),
            context=AgentContext(messages=[user_message("go")]),
            execute_tool_call=executor,
            take_steering_messages=take_steering,
            take_follow_up_messages=take_follow_ups,
        )

    result = run_async(scenario)
    assert result.reason == "stop"
    assert roles(model.requests[1].messages) == ["user", "assistant", "toolResult", "user"]
    assert text_of(model.requests[1].messages[-1]) == "steer"
    assert text_of(model.requests[2].messages[-1]) == "follow"
    # One read after the batch, one at each of the two text stops; follow-ups only at those stops.
    assert (steering_calls[0], follow_up_calls[0]) == (3, 2)
