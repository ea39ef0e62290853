"""Focused tests of checkpoint 04: a ScriptedModel plays written-down turns through the real event protocol.

Sections follow the labs: 4.1 (a normal turn becomes start → deltas → done; each request is saved as a
snapshot) and 4.2 (an error turn, an exhausted script and a request cancelled beforehand all end in an
`error` event). The turn plays on the event loop after `stream()` has returned, so an exception raised
while playing would never reach the reader: `play` below catches it from the loop and raises it in the
test, and a stream that never ends fails after the course's one-second timeout.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AbortController,
    AgentContext,
    AssistantContent,
    AssistantMessage,
    ModelDone,
    ModelError,
    ModelEvent,
    ModelStart,
    ModelTextDelta,
    ModelToolcallDelta,
    ModelToolcallEnd,
    ScriptedErrorTurn,
    ScriptedModel,
    ToolCall,
    Usage,
    assistant_message,
    raw_arguments_of,
    text,
    text_of,
    user_message,
)
from strategies import short_text

X = TypeVar("X")

#: The course gives each of these tests one second; a stream still open by then never ends.
HANG = 1.0

NO_MORE_TURNS = "ScriptedModel 没有更多响应"
REQUEST_ABORTED = "Request was aborted"


def run(coroutine: Coroutine[Any, Any, X]) -> X:
    """Run one test body on a fresh event loop."""
    return asyncio.run(coroutine)


async def play(stream: Any) -> tuple[list[ModelEvent], AssistantMessage]:
    """Read a reply to its end: every event, then the result.

    An exception raised while the model plays its turn happens in a loop callback; it is taken from the
    loop's exception handler and raised here, so the test fails on it instead of waiting forever.
    """
    loop = asyncio.get_running_loop()
    crashed: asyncio.Future[BaseException] = loop.create_future()

    def on_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, BaseException) and not crashed.done():
            crashed.set_result(error)

    async def read() -> tuple[list[ModelEvent], AssistantMessage]:
        events = [event async for event in stream]
        return events, await stream.result()

    previous = loop.get_exception_handler()
    loop.set_exception_handler(on_error)
    reading = asyncio.ensure_future(read())
    try:
        either: set[asyncio.Future[Any]] = {reading, crashed}
        finished, _ = await asyncio.wait(either, timeout=HANG, return_when="FIRST_COMPLETED")
        if crashed in finished:
            raise crashed.result()
        if reading in finished:
            return reading.result()
        raise AssertionError("the stream never ended: no terminal event arrived within the timeout")
    finally:
        reading.cancel()
        loop.set_exception_handler(previous)


def types(events: list[ModelEvent]) -> list[str]:
    """The event types, in order."""
    return [event.type for event in events]


def read_call() -> ToolCall:
    """The chapter's read call."""
    return ToolCall(id="c1", name="read", arguments={"path": "README.md"})


def first_turn() -> AssistantMessage:
    """The chapter's first turn: some text, then a read call."""
    return assistant_message([text("先看"), read_call()], "toolUse")


def empty_context() -> AgentContext:
    """A request with no messages."""
    return AgentContext(messages=[])


# ## Lab 4.1 · one turn played as events, and a snapshot of every request


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play", "ScriptedModel.stream", "raw_arguments_of")
def test_a_scripted_turn_is_played_as_the_real_event_protocol_and_the_request_is_saved() -> None:
    """脚本消息被投影成 start → text_delta → toolcall_delta → toolcall_end → done，载荷与 partial 都对，并保存
    了请求快照吗？"""

    async def body() -> None:
        turn, second = first_turn(), assistant_message([text("第二轮")])
        model = ScriptedModel([turn, second])
        context = AgentContext(messages=[user_message("go")])
        stream = model.stream(context)
        context.messages.append(user_message("事后追加"))
        events, result = await play(stream)

        assert types(events) == ["start", "text_delta", "toolcall_delta", "toolcall_end", "done"]
        start, text_delta, tool_delta, tool_end, done = events
        assert isinstance(start, ModelStart)
        assert start.partial.content == []

        assert isinstance(text_delta, ModelTextDelta)
        assert text_delta.content_index == 0
        assert text_delta.delta == "先看"
        assert text_delta.partial.content == [text("先看")]

        assert isinstance(tool_delta, ModelToolcallDelta)
        assert tool_delta.content_index == 1
        assert tool_delta.delta == '{"path":"README.md"}'
        assert tool_delta.partial.content[0] == text("先看")
        assert tool_delta.partial.content[1] == ToolCall(
            id="c1", name="read", arguments={}, raw_arguments='{"path":"README.md"}'
        )

        assert isinstance(tool_end, ModelToolcallEnd)
        assert tool_end.content_index == 1
        assert tool_end.tool_call == turn.content[1]
        assert tool_end.partial.content == turn.content

        assert isinstance(done, ModelDone)
        assert done.reason == "toolUse"
        assert done.message == turn
        assert result == turn
        assert len(model.requests) == 1
        assert model.requests[0] is not context
        assert len(model.requests[0].messages) == 1

        second_stream = model.stream(AgentContext(messages=[]))
        _, second_result = await play(second_stream)
        assert text_of(second_result) == "第二轮"
        assert len(model.requests) == 2

    run(body())


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play")
def test_two_text_blocks_get_their_own_content_index_and_the_partial_accumulates() -> None:
    """两个文本块的 text_delta 的 content_index 分别是 0、1，第二个 delta 的 partial 同时含 A 与 B，结果文本是
    "A\\nB" 吗？"""

    async def body() -> tuple[list[ModelEvent], AssistantMessage]:
        return await play(ScriptedModel([assistant_message([text("A"), text("B")])]).stream(empty_context()))

    events, result = run(body())
    assert types(events) == ["start", "text_delta", "text_delta", "done"]
    first, second = events[1], events[2]
    assert isinstance(first, ModelTextDelta) and isinstance(second, ModelTextDelta)
    assert (first.content_index, second.content_index) == (0, 1)
    assert first.partial.content == [text("A")]
    assert second.partial.content == [text("A"), text("B")]
    assert text_of(result) == "A\nB"


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel.stream")
def test_the_request_snapshot_is_deep_so_later_changes_to_nested_messages_do_not_reach_it() -> None:
    """requests 保存的是深拷贝吗？调用之后改动原 context 里某条消息的文本，快照里的那条消息仍保持调用时的样
    子。"""

    async def body() -> tuple[AgentContext, str]:
        model = ScriptedModel([assistant_message([text("ok")])])
        context = AgentContext(messages=[user_message("请求一")])
        stream = model.stream(context)
        first = context.messages[0]
        assert first.role == "user"
        first.content[0].text = "被改写"
        context.messages.clear()
        await play(stream)
        return model.requests[0], text_of(model.requests[0].messages[0])

    snapshot, seen = run(body())
    assert len(snapshot.messages) == 1
    assert seen == "请求一"


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play")
def test_each_event_carries_its_own_partial_snapshot() -> None:
    """每个事件带的 partial 是各自的快照吗？播放结束后 start 的 partial 仍为空，改动一个事件的 partial 不影响
    另一个。"""

    async def body() -> list[ModelEvent]:
        model = ScriptedModel([assistant_message([text("A"), read_call(), text("B")], "toolUse")])
        events, _ = await play(model.stream(empty_context()))
        return events

    events = run(body())
    assert types(events) == ["start", "text_delta", "toolcall_delta", "toolcall_end", "text_delta", "done"]
    partials = [event.partial for event in events if not isinstance(event, ModelDone | ModelError)]
    assert [len(partial.content) for partial in partials] == [0, 1, 2, 2, 3]
    first_text = partials[1].content
    first_text.append(text("changed"))
    assert partials[0].content == []
    assert len(partials[2].content) == 2


@pytest.mark.lab4_1
@pytest.mark.edits("partial_from")
def test_the_partial_keeps_the_final_metadata_but_starts_with_stop_and_no_content() -> None:
    """start 的 partial 沿用最终消息的 provider、model、usage，但 content 为空、stop_reason 为 "stop" 吗？"""
    usage = Usage(input=18, output=12, total_tokens=30)
    turn = assistant_message(
        [read_call()], "toolUse", provider="openai", model="m1", usage=usage, timestamp=7
    )

    async def body() -> list[ModelEvent]:
        events, _ = await play(ScriptedModel([turn]).stream(empty_context()))
        return events

    start = run(body())[0]
    assert isinstance(start, ModelStart)
    assert start.partial == assistant_message(
        [], "stop", provider="openai", model="m1", usage=usage, timestamp=7
    )


@pytest.mark.lab4_1
@pytest.mark.edits("terminal_message")
def test_the_played_message_is_a_copy_of_the_script() -> None:
    """result 与脚本里的回合相等但不是同一个对象吗？改动 result 不会改动脚本，同一个回合可以再播放一次。"""
    turn = first_turn()

    async def body() -> tuple[AssistantMessage, AssistantMessage]:
        model = ScriptedModel([turn, turn])
        _, first = await play(model.stream(empty_context()))
        first.content.clear()
        _, second = await play(model.stream(empty_context()))
        return first, second

    first, second = run(body())
    assert first is not turn
    assert turn.content == [text("先看"), read_call()]
    assert second == turn


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play")
def test_a_call_that_already_has_raw_arguments_streams_them_unchanged() -> None:
    """回合里的 tool call 自带 raw_arguments 时，toolcall_delta 原样发出这段文本，toolcall_end 的调用也保留它
    吗？"""
    raw = '{ "path": "README.md" }'
    call = ToolCall(id="c9", name="read", arguments={"path": "README.md"}, raw_arguments=raw)

    async def body() -> list[ModelEvent]:
        events, _ = await play(ScriptedModel([assistant_message([call], "toolUse")]).stream(empty_context()))
        return events

    events = run(body())
    delta, end = events[1], events[2]
    assert isinstance(delta, ModelToolcallDelta) and isinstance(end, ModelToolcallEnd)
    assert delta.delta == raw
    assert delta.partial.content == [ToolCall(id="c9", name="read", arguments={}, raw_arguments=raw)]
    assert end.tool_call == call


@pytest.mark.lab4_1
@pytest.mark.edits("raw_arguments_of")
def test_raw_arguments_are_compact_json_that_keeps_non_ascii_text() -> None:
    """raw_arguments_of 给出与 JSON.stringify 相同的紧凑 JSON（没有空格，中文不转义）吗？"""
    assert raw_arguments_of({"path": "README.md"}) == '{"path":"README.md"}'
    assert raw_arguments_of({"path": "值", "n": [1, 2]}) == '{"path":"值","n":[1,2]}'
    assert raw_arguments_of(None) == "null"


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel.stream")
def test_turns_are_chosen_in_call_order_even_when_played_later() -> None:
    """连续两次 stream 之后才读取：第一次调用得到第一个回合、第二次得到第二个，requests 也按调用顺序保存
    吗？"""

    async def body() -> tuple[str, str, list[str]]:
        model = ScriptedModel([assistant_message([text("一")]), assistant_message([text("二")])])
        first = model.stream(AgentContext(messages=[user_message("请求一")]))
        second = model.stream(AgentContext(messages=[user_message("请求二")]))
        _, second_result = await play(second)
        _, first_result = await play(first)
        asked = [text_of(request.messages[0]) for request in model.requests]
        return text_of(first_result), text_of(second_result), asked

    assert run(body()) == ("一", "二", ["请求一", "请求二"])


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel.stream")
def test_a_length_stop_ends_with_done_and_its_reason() -> None:
    """stop_reason 为 "length" 的回合以 done 结束，reason 为 "length" 吗？"""

    async def body() -> tuple[list[ModelEvent], AssistantMessage]:
        return await play(ScriptedModel([assistant_message([text("截")], "length")]).stream(empty_context()))

    events, result = run(body())
    done = events[-1]
    assert isinstance(done, ModelDone)
    assert (done.reason, result.stop_reason) == ("length", "length")


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play")
def test_a_scripted_assistant_message_that_stopped_on_error_ends_with_an_error_event() -> None:
    """脚本里直接写一条 stop_reason 为 "error" 的 assistant 消息，它的终态是 error 事件、result 就是这条消息的
    副本吗？"""
    turn = assistant_message([text("部分")], "error", error_message="socket reset")

    async def body() -> tuple[list[ModelEvent], AssistantMessage]:
        return await play(ScriptedModel([copy.deepcopy(turn)]).stream(empty_context()))

    events, result = run(body())
    assert types(events) == ["start", "text_delta", "error"]
    assert events[-1] == ModelError(reason="error", error=turn)
    assert result == turn


blocks = st.lists(
    st.one_of(
        short_text.map(text),
        st.builds(
            lambda call_id, arguments: ToolCall(id=call_id, name="read", arguments=arguments),
            short_text,
            st.dictionaries(st.sampled_from(["path", "limit", "值"]), short_text | st.integers(), max_size=2),
        ),
    ),
    max_size=5,
)


def check_projection(content: list[AssistantContent], reason: Any) -> None:
    """Playing a turn of `content` gives the block-by-block projection and ends with the whole message."""
    turn = assistant_message(content, reason)

    async def body() -> tuple[list[ModelEvent], AssistantMessage]:
        return await play(ScriptedModel([turn]).stream(empty_context()))

    events, result = run(body())
    expected: list[str] = ["start"]
    for block in content:
        expected += ["text_delta"] if block.type == "text" else ["toolcall_delta", "toolcall_end"]
    assert types(events) == [*expected, "done"]
    indexed = [event for event in events if isinstance(event, ModelTextDelta | ModelToolcallEnd)]
    assert [event.content_index for event in indexed] == list(range(len(content)))
    assert [event.partial.content for event in indexed] == [content[: i + 1] for i in range(len(content))]
    for event in events:
        if isinstance(event, ModelToolcallDelta):
            call = content[event.content_index]
            assert isinstance(call, ToolCall)
            assert json.loads(event.delta) == call.arguments
    assert result == turn
    assert events[-1] == ModelDone(reason=reason, message=turn)


@pytest.mark.lab4_1
@pytest.mark.edits("ScriptedModel._play")
def test_any_turn_is_projected_block_by_block_and_ends_with_the_whole_message() -> None:
    """任意的文本块与调用块：事件是 start、每个文本一个 text_delta、每个调用一对 delta/end，最后 done；partial
    逐步累计到完整 content 吗？"""
    # One plain example first: an unfinished lab fails here, before Hypothesis starts generating.
    check_projection([text("A"), read_call()], "toolUse")
    given(content=blocks, reason=st.sampled_from(["stop", "length", "toolUse"]))(check_projection)()


# ## Lab 4.2 · an error turn, an exhausted script, a request cancelled beforehand


@pytest.mark.lab4_2
@pytest.mark.edits("terminal_message")
def test_an_explicit_error_turn_keeps_its_partial_text_and_diagnosis() -> None:
    """显式错误回合产生 start → text_delta → error，result 的 stop_reason 为 "error"、文本为
    "正在"、error_message 为 "rate limited" 吗？"""

    async def body() -> tuple[list[ModelEvent], AssistantMessage]:
        turn = ScriptedErrorTurn(stop_reason="error", partial_text="正在", error_message="rate limited")
        return await play(ScriptedModel([turn]).stream(empty_context()))

    events, result = run(body())
    assert types(events) == ["start", "text_delta", "error"]
    assert result.stop_reason == "error"
    assert text_of(result) == "正在"
    assert result.error_message == "rate limited"
    error = events[-1]
    assert isinstance(error, ModelError)
    assert error.reason == "error"
    assert error.error == result


@pytest.mark.lab4_2
@pytest.mark.edits("ScriptedModel._end_before_playing")
def test_an_exhausted_script_and_a_cancelled_request_both_end_in_one_error_event() -> None:
    """脚本耗尽时只有一个 error（"ScriptedModel 没有更多响应"）；请求预先取消时也只有一个
    error（aborted，"Request was aborted"）吗？"""

    async def body() -> None:
        exhausted_events, exhausted = await play(ScriptedModel([]).stream(empty_context()))
        assert types(exhausted_events) == ["error"]
        assert exhausted.stop_reason == "error"
        assert exhausted.error_message == NO_MORE_TURNS

        controller = AbortController()
        controller.abort()
        model = ScriptedModel([assistant_message([text("不应出现")])])
        cancelled_events, cancelled = await play(model.stream(empty_context(), signal=controller.signal))
        assert types(cancelled_events) == ["error"]
        assert cancelled.stop_reason == "aborted"
        assert cancelled.error_message == REQUEST_ABORTED

    run(body())


@pytest.mark.lab4_2
@pytest.mark.edits("terminal_message")
def test_an_error_turn_without_partial_text_plays_no_text() -> None:
    """没有 partial_text（或为空串）的错误回合只产生 start → error，content 为空吗？reason "aborted" 也原样保
    留吗？"""

    async def body() -> list[tuple[list[str], AssistantMessage]]:
        model = ScriptedModel(
            [
                ScriptedErrorTurn(stop_reason="error", error_message="boom"),
                ScriptedErrorTurn(stop_reason="aborted", error_message="stopped", partial_text=""),
            ]
        )
        played = [await play(model.stream(empty_context())), await play(model.stream(empty_context()))]
        return [(types(events), result) for events, result in played]

    (first_types, first), (second_types, second) = run(body())
    assert first_types == ["start", "error"] == second_types
    assert (first.content, first.stop_reason, first.error_message) == ([], "error", "boom")
    assert (second.content, second.stop_reason, second.error_message) == ([], "aborted", "stopped")


@pytest.mark.lab4_2
@pytest.mark.edits("ScriptedModel._end_before_playing")
def test_an_abort_right_after_stream_returns_is_seen_because_the_turn_plays_later() -> None:
    """stream() 返回后、事件循环还没运行时就取消：回合尚未播放，所以流以 aborted 结束，而不是播放完整回合
    吗？"""

    async def body() -> tuple[list[str], AssistantMessage]:
        controller = AbortController()
        stream = ScriptedModel([assistant_message([text("太晚了")])]).stream(
            empty_context(), signal=controller.signal
        )
        controller.abort()
        events, result = await play(stream)
        return types(events), result

    seen, result = run(body())
    assert seen == ["error"]
    assert (result.stop_reason, result.error_message) == ("aborted", REQUEST_ABORTED)


@pytest.mark.lab4_2
@pytest.mark.edits("ScriptedModel._end_before_playing")
def test_cancellation_is_checked_before_exhaustion() -> None:
    """脚本已耗尽而请求又被预先取消时，结果是 aborted（先看取消，再看耗尽）吗？"""

    async def body() -> AssistantMessage:
        controller = AbortController()
        controller.abort()
        _, result = await play(ScriptedModel([]).stream(empty_context(), signal=controller.signal))
        return result

    result = run(body())
    assert (result.stop_reason, result.error_message) == ("aborted", REQUEST_ABORTED)


@pytest.mark.lab4_2
@pytest.mark.edits("ScriptedModel._end_before_playing")
def test_a_cancelled_request_is_still_recorded_and_uses_up_its_turn() -> None:
    """预先取消的请求仍记入 requests，并消耗一个回合，下一次请求得到的是下一个回合吗？"""

    async def body() -> tuple[int, str]:
        controller = AbortController()
        controller.abort()
        model = ScriptedModel([assistant_message([text("第一轮")]), assistant_message([text("第二轮")])])
        await play(model.stream(AgentContext(messages=[user_message("取消的")]), signal=controller.signal))
        _, result = await play(model.stream(empty_context()))
        return len(model.requests), text_of(result)

    assert run(body()) == (2, "第二轮")


@pytest.mark.lab4_2
@pytest.mark.edits("ScriptedModel._end_before_playing")
def test_an_exhausted_script_keeps_answering_with_errors_and_recording_requests() -> None:
    """脚本用完之后的每一次请求都以 "ScriptedModel 没有更多响应" 结束，同时仍被记入 requests 吗？"""

    async def body() -> tuple[list[str | None], int]:
        model = ScriptedModel([assistant_message([text("唯一一轮")])])
        messages = []
        for _ in range(3):
            _, result = await play(model.stream(empty_context()))
            messages.append(result.error_message)
        return messages, len(model.requests)

    assert run(body()) == ([None, NO_MORE_TURNS, NO_MORE_TURNS], 3)
