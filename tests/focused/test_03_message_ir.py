"""Focused tests of checkpoint 03: the canonical message IR, its text projection, the system-message
replay, and the stream of one model reply whose `done` and `error` events are terminal.

Sections follow the labs: 3.1 (building messages, `text_of`, replaying system messages) and 3.2
(`AssistantMessageEventStream`). The course compares whole objects; here dataclass equality does the
same, with timestamps fixed by the test wherever the value matters.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    EMPTY_USAGE,
    AgentMessage,
    AssistantMessage,
    AssistantMessageEventStream,
    ModelDone,
    ModelError,
    ModelEvent,
    ModelStart,
    ModelTextDelta,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    assistant_message,
    current_system_message,
    current_system_prompt,
    final_message,
    system_message_text,
    text,
    text_of,
    user_message,
)
from strategies import short_text

X = TypeVar("X")

#: A reader still waiting after this many seconds will never be woken (the course's 1 s timeout).
HANG = 1.0


def now_ms() -> int:
    """Whole milliseconds since the epoch, the unit of every timestamp."""
    return time.time_ns() // 1_000_000


def run(coroutine: Coroutine[Any, Any, X]) -> X:
    """Run one test body on a fresh event loop."""
    return asyncio.run(coroutine)


async def settle(awaitable: Awaitable[X], what: str) -> X:
    """Await something that must finish by now; a hang becomes a failure instead of a stuck run."""
    try:
        return await asyncio.wait_for(awaitable, HANG)
    except TimeoutError:
        raise AssertionError(f"{what} never finished: the stream did not end") from None


async def drain(stream: AssistantMessageEventStream) -> list[ModelEvent]:
    """Every event `async for` reads from the stream."""
    return [event async for event in stream]


def read_call() -> ToolCall:
    """The chapter's read call."""
    return ToolCall(id="c1", name="read", arguments={"path": "README.md"})


def system(content: str, timestamp: int, sections: dict[str, str | None] | None = None) -> SystemMessage:
    """A system message with a fixed timestamp."""
    return SystemMessage(content=content, timestamp=timestamp, sections=sections)


def replay_transcript() -> tuple[SystemMessage, SystemMessage, SystemMessage, list[AgentMessage]]:
    """The chapter's transcript that changes its instructions twice."""
    base = system("You are Pi.", 10, {"rules": "RULE v1", "scratch": "SCRATCH"})
    patch = system("", 20, {"rules": "RULE v2", "scratch": None})
    note = system("Prefer small diffs.", 30)
    messages: list[AgentMessage] = [
        base,
        UserMessage(content=[text("go")], timestamp=11),
        patch,
        assistant_message([text("ok")]),
        note,
    ]
    return base, patch, note, messages


# ## Lab 3.1 · building messages, the text projection and the system-message replay


@pytest.mark.lab3_1
@pytest.mark.edits("text_of")
def test_text_projection_is_lossy_but_leaves_the_canonical_content_unchanged() -> None:
    """text_of 只取文本块、用换行连接（得到 "先读取\\n再回答"），且不改动原消息的 content 吗？"""
    message = assistant_message([text("先读取"), read_call(), text("再回答")])
    before = copy.deepcopy(message.content)
    assert text_of(message) == "先读取\n再回答"
    assert message.content == before
    assert message.content[1] == read_call()


@pytest.mark.lab3_1
@pytest.mark.edits("text_of")
def test_text_of_reads_user_and_tool_result_messages_and_gives_empty_text_for_calls_only() -> None:
    """text_of 对 user、toolResult 同样只取文本；只有工具调用的 assistant 消息得到空串吗？"""
    user = UserMessage(content=[text("请读取 README"), text("然后回答")], timestamp=1)
    result = ToolResultMessage(
        tool_call_id="call_1",
        tool_name="read",
        content=[text("# tiny-pi\nA small agent runtime.")],
        details=None,
        is_error=False,
        timestamp=2,
    )
    calls_only = assistant_message([read_call()], "toolUse")
    assert text_of(user) == "请读取 README\n然后回答"
    assert text_of(result) == "# tiny-pi\nA small agent runtime."
    assert text_of(calls_only) == ""
    assert calls_only.content == [read_call()]


@pytest.mark.lab3_1
@pytest.mark.edits("user_message")
def test_user_message_holds_one_text_block_stamped_now() -> None:
    """user_message("go") 是只含一个文本块的 user 消息，时间戳是当下的整数毫秒吗？"""
    before = now_ms()
    message = user_message("go")
    after = now_ms()
    assert message == UserMessage(content=[text("go")], timestamp=message.timestamp)
    assert message.role == "user"
    assert isinstance(message.timestamp, int)
    assert before <= message.timestamp <= after


@pytest.mark.lab3_1
@pytest.mark.edits("assistant_message")
def test_assistant_message_has_the_scripted_defaults() -> None:
    """assistant_message 默认 provider "scripted"、model "scripted-v1"、EMPTY_USAGE、stop_reason "stop"、没有
    error_message 吗？"""
    before = now_ms()
    message = assistant_message([text("ok")])
    after = now_ms()
    assert message.role == "assistant"
    assert message.content == [text("ok")]
    assert (message.provider, message.model) == ("scripted", "scripted-v1")
    assert message.usage == EMPTY_USAGE == Usage(input=0, output=0, total_tokens=0)
    assert message.stop_reason == "stop"
    assert message.error_message is None
    assert before <= message.timestamp <= after


@pytest.mark.lab3_1
@pytest.mark.edits("assistant_message")
def test_assistant_message_keywords_override_each_default() -> None:
    """assistant_message 的关键字参数能逐项覆盖默认值
    （stop_reason、provider、model、usage、error_message、timestamp）吗？"""
    usage = Usage(input=18, output=12, total_tokens=30)
    content: list[TextContent | ToolCall] = [text("partial")]
    message = assistant_message(
        content,
        "error",
        provider="openai",
        model="gpt-test",
        usage=usage,
        error_message="socket reset",
        timestamp=1_010,
    )
    assert message == AssistantMessage(
        content=[text("partial")],
        provider="openai",
        model="gpt-test",
        usage=usage,
        stop_reason="error",
        timestamp=1_010,
        error_message="socket reset",
    )
    assert message.content is content


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message", "current_system_prompt")
def test_system_messages_replay_in_order_appending_content_replacing_and_deleting_sections() -> None:
    """system message 按顺序重放：content 追加、sections 按名字覆盖、None 删除、时间戳取第一条，且不改写任何原
    消息吗？"""
    base, patch, _note, messages = replay_transcript()
    before = copy.deepcopy(messages)

    assert current_system_message(messages) == SystemMessage(
        content="You are Pi.\n\nPrefer small diffs.", timestamp=10, sections={"rules": "RULE v2"}
    )
    assert current_system_prompt(messages) == "You are Pi.\n\nPrefer small diffs.\n\nRULE v2"
    assert messages == before, "重放不能改写任何 system message"

    assert current_system_message([base]) == base
    assert current_system_message([UserMessage(content=[text("no system")], timestamp=1)]) is None
    assert current_system_prompt([]) is None
    delete_only = system("", 40, {"rules": None})
    assert current_system_message([base, patch, delete_only]) == SystemMessage(
        content="You are Pi.", timestamp=10, sections=None
    ), "段落全部删除后不保留空 sections"


@pytest.mark.lab3_1
@pytest.mark.edits("system_message_text")
def test_system_message_text_joins_content_then_sections_skipping_empty_parts() -> None:
    """system_message_text 按 content、各段落的顺序用空行连接，跳过空串与 None；text_of 对 system message 给出
    同样的文本吗？"""
    message = system("", 1, {"first": "A", "empty": "", "removed": None, "last": "B"})
    assert system_message_text(message) == "A\n\nB"
    assert system_message_text(system("only", 1)) == "only"
    assert text_of(message) == "A\n\nB"


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_the_replayed_message_does_not_share_its_sections_with_the_transcript() -> None:
    """重放得到的 sections 是新的 dict 吗？改动结果不会反过来改动 transcript 里的 system message。"""
    base = system("You are Pi.", 10, {"rules": "RULE v1"})
    replayed = current_system_message([base])
    assert replayed is not None and replayed.sections is not None
    assert replayed is not base
    replayed.sections["rules"] = "changed"
    assert base.sections == {"rules": "RULE v1"}


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_a_replaced_section_keeps_its_place_and_a_re_added_one_moves_to_the_end() -> None:
    """按名字替换的段落留在原位；删除后再加回的段落排到最后。prompt 的段落顺序因此是确定的吗？"""
    messages: list[AgentMessage] = [
        system("base", 1, {"a": "A1", "b": "B1"}),
        system("", 2, {"a": "A2"}),
    ]
    assert current_system_prompt(messages) == "base\n\nA2\n\nB1"
    messages += [system("", 3, {"a": None}), system("", 4, {"a": "A3"})]
    replayed = current_system_message(messages)
    assert replayed is not None
    assert list((replayed.sections or {}).items()) == [("b", "B1"), ("a", "A3")]
    assert current_system_prompt(messages) == "base\n\nB1\n\nA3"


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_a_later_system_message_with_empty_content_adds_no_blank_paragraph() -> None:
    """后来的 system message 若 content 为空，只改 sections，不会在 content 里多出空段落吗？时间戳仍取第一条
    吗？"""
    messages: list[AgentMessage] = [system("first", 5), system("", 6, {"x": "X"}), system("", 7)]
    assert current_system_message(messages) == SystemMessage(
        content="first", timestamp=5, sections={"x": "X"}
    )
    assert current_system_prompt(messages) == "first\n\nX"


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_deleting_an_unknown_section_changes_nothing() -> None:
    """删除一个从未出现过的段落名不会出错，也不改变其余段落吗？"""
    messages: list[AgentMessage] = [system("p", 1, {"keep": "K"}), system("", 2, {"ghost": None})]
    assert current_system_message(messages) == SystemMessage(content="p", timestamp=1, sections={"keep": "K"})


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_a_transcript_whose_only_system_message_is_empty_replays_to_an_empty_prompt() -> None:
    """只有一条空的 system message 时，重放结果存在（不是 None），prompt 是空串吗？"""
    assert current_system_message([system("", 3)]) == SystemMessage(content="", timestamp=3, sections=None)
    assert current_system_prompt([system("", 3)]) == ""


SECTION_NAMES = ("rules", "scratch", "tools")

system_messages = st.builds(
    SystemMessage,
    content=st.sampled_from(["", "You are Pi.", "Prefer small diffs.", "值"]) | short_text,
    timestamp=st.integers(min_value=0, max_value=10**6),
    sections=st.none() | st.dictionaries(st.sampled_from(SECTION_NAMES), st.none() | short_text, max_size=3),
)
transcripts = st.lists(
    system_messages | st.builds(lambda value: UserMessage(content=[text(value)], timestamp=0), short_text),
    max_size=8,
)


def reference_replay(messages: list[AgentMessage]) -> tuple[str, int, list[tuple[str, str]]] | None:
    """A second, plain fold of the replay rule: (content, timestamp, sections in order), or None."""
    found = [message for message in messages if isinstance(message, SystemMessage)]
    if not found:
        return None
    sections: list[tuple[str, str]] = []
    for message in found:
        for name, value in (message.sections or {}).items():
            index = next((i for i, (known, _) in enumerate(sections) if known == name), None)
            if value is None:
                if index is not None:
                    del sections[index]
            elif index is None:
                sections.append((name, value))
            else:
                sections[index] = (name, value)
    content = "\n\n".join(message.content for message in found if message.content)
    return content, found[0].timestamp, sections


def check_replay(messages: list[AgentMessage]) -> None:
    """The replay of `messages` equals the reference fold, and leaves `messages` unchanged."""
    before = copy.deepcopy(messages)
    expected = reference_replay(messages)
    replayed = current_system_message(messages)
    prompt = current_system_prompt(messages)
    assert messages == before
    if expected is None:
        assert replayed is None
        assert prompt is None
        return
    content, timestamp, sections = expected
    assert replayed == SystemMessage(content=content, timestamp=timestamp, sections=dict(sections) or None)
    assert prompt == "\n\n".join(part for part in [content, *(value for _, value in sections)] if part)


@pytest.mark.lab3_1
@pytest.mark.edits("current_system_message")
def test_replaying_any_transcript_equals_a_reference_fold() -> None:
    """任意交错的 system/user 消息：重放结果与一个逐条折叠的参考实现一致，prompt 是它的 content 加各段落（跳过
    空串），且输入不被改写吗？"""
    # One plain example first: an unfinished lab fails here, before Hypothesis starts generating.
    check_replay([system("a", 1, {"x": "X"}), system("", 2, {"x": None, "y": "Y"})])
    given(messages=transcripts)(check_replay)()


# ## Lab 3.2 · done and error end the stream of one model reply


@pytest.mark.lab3_2
@pytest.mark.edits("AssistantMessageEventStream", "final_message")
def test_error_is_a_terminal_event_and_result_gives_the_same_message() -> None:
    """error 事件也是终态吗？迭代只看到 "error" 就结束，result() 返回事件里的同一条消息并保留
    "socket reset"。"""

    async def body() -> tuple[list[str], AssistantMessage, AssistantMessage]:
        stream = AssistantMessageEventStream()
        error = assistant_message([text("partial")], "error", error_message="socket reset")
        stream.push(ModelError(reason="error", error=error))
        observed: list[str] = [event.type for event in await settle(drain(stream), "reading the stream")]
        return observed, error, await settle(stream.result(), "result()")

    observed, error, result = run(body())
    assert observed == ["error"]
    assert result is error
    assert result.error_message == "socket reset"


@pytest.mark.lab3_2
@pytest.mark.edits("AssistantMessageEventStream")
def test_done_ends_the_stream_after_the_deltas_and_result_is_its_message() -> None:
    """start → text_delta → done 依次读出后迭代结束，result() 就是 done 携带的那条消息吗？"""

    async def body() -> tuple[list[str], AssistantMessage, AssistantMessage]:
        stream = AssistantMessageEventStream()
        final = assistant_message([text("先看")])
        partial = assistant_message([])
        stream.push(ModelStart(partial=partial))
        stream.push(ModelTextDelta(content_index=0, delta="先看", partial=final))
        stream.push(ModelDone(reason="stop", message=final))
        observed: list[str] = [event.type for event in await settle(drain(stream), "reading the stream")]
        return observed, final, await settle(stream.result(), "result()")

    observed, final, result = run(body())
    assert observed == ["start", "text_delta", "done"]
    assert result is final


@pytest.mark.lab3_2
@pytest.mark.edits("AssistantMessageEventStream")
def test_an_aborted_error_is_terminal_too_and_later_events_are_ignored() -> None:
    """reason 为 "aborted" 的 error 同样结束流；之后再 push 的 done 被忽略，result 仍是被取消的那条消息吗？"""

    async def body() -> tuple[list[str], AssistantMessage, AssistantMessage]:
        stream = AssistantMessageEventStream()
        aborted = assistant_message([], "aborted", error_message="Request was aborted")
        stream.push(ModelError(reason="aborted", error=aborted))
        stream.push(ModelDone(reason="stop", message=assistant_message([text("late")])))
        stream.end(assistant_message([text("also late")]))
        observed: list[str] = [event.type for event in await settle(drain(stream), "reading the stream")]
        return observed, aborted, await settle(stream.result(), "result()")

    observed, aborted, result = run(body())
    assert observed == ["error"]
    assert result is aborted


@pytest.mark.lab3_2
@pytest.mark.edits("AssistantMessageEventStream")
def test_a_reader_waiting_for_the_reply_is_woken_by_the_error_and_then_stops() -> None:
    """读者先在流上等待，error 到来时它被唤醒并拿到 error 事件，随后迭代自行结束（无需 end）吗？"""

    async def body() -> tuple[list[str], str | None]:
        stream = AssistantMessageEventStream()
        gate = asyncio.Event()

        async def read() -> list[ModelEvent]:
            gate.set()
            return await drain(stream)

        reader = asyncio.ensure_future(read())
        await gate.wait()
        error = assistant_message([], "error", error_message="rate limited")
        stream.push(ModelError(reason="error", error=error))
        observed: list[str] = [event.type for event in await settle(reader, "the waiting reader")]
        return observed, (await settle(stream.result(), "result()")).error_message

    assert run(body()) == (["error"], "rate limited")


@pytest.mark.lab3_2
@pytest.mark.edits("final_message")
def test_final_message_reads_done_and_error_and_refuses_other_events() -> None:
    """final_message 从 done 取 message、从 error 取 error（同一个对象），其他事件抛出
    "非终态事件不能生成最终消息" 吗？"""
    message = assistant_message([text("ok")])
    failure = assistant_message([], "error", error_message="boom")
    assert final_message(ModelDone(reason="stop", message=message)) is message
    assert final_message(ModelError(reason="error", error=failure)) is failure
    with pytest.raises(ValueError) as refused:
        final_message(ModelStart(partial=assistant_message([])))
    assert str(refused.value) == "非终态事件不能生成最终消息"
