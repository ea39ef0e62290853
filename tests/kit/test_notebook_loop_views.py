"""The 07 teaching views: the transcript per request, the loop's event timeline, one tool batch in time,
the skipped calls, and both providers' wires."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pi_course_kit.teaching.loop_views import batch_view, loop_timeline, skipped_view
from pi_course_kit.teaching.transcript import transcript_view
from pi_course_kit.teaching.wire import ANTHROPIC_SCHEMA, OPENAI_SCHEMA, shape_problems, wire_view

# Duck-typed stand-ins for pi_course's messages: the kit process never imports pi_course.


@dataclass
class Msg:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


def system(content: str, sections: dict[str, str | None] | None = None) -> Msg:
    data: dict[str, Any] = {"role": "system", "content": content, "timestamp": 0}
    if sections is not None:
        data["sections"] = sections
    return Msg(data)


def skipped(call_id: str, reason: str) -> Msg:
    return Msg(
        {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": "echo",
            "content": [{"type": "text", "text": f"not executed: {reason}"}],
            "details": {"skipped": True, "reason": reason},
            "isError": True,
            "timestamp": 1,
        }
    )


def user(content: str) -> Msg:
    return Msg({"role": "user", "content": content, "timestamp": 1_700_000_000_000})


def call(call_id: str, name: str = "echo") -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": {"value": "Pi"}}


def reply(*blocks: dict[str, Any], stop: str = "toolUse") -> Msg:
    return Msg({"role": "assistant", "content": list(blocks), "stopReason": stop, "timestamp": 1})


def result(call_id: str, name: str = "echo", error: bool = False) -> Msg:
    return Msg(
        {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name,
            "content": [{"type": "text", "text": "Pi"}],
            "details": None,
            "isError": error,
            "timestamp": 1,
        }
    )


@dataclass
class Definition:
    name: str


@dataclass
class Request:
    messages: list[Msg]
    tools: list[Definition] = field(default_factory=lambda: [Definition("echo")])


@dataclass
class Event:
    type: str
    message: Msg | None = None
    call: Any = None
    result: Msg | None = None
    event: Any = None
    reason: str | None = None
    call_id: str | None = None
    content: list[dict[str, Any]] | None = None


@dataclass
class Inner:
    type: str
    delta: str | None = None


@dataclass
class Call:
    id: str
    name: str


ANSWER = reply({"type": "text", "text": "Pi"}, stop="stop")
CHAPTER = [user("say Pi"), reply(call("call-1")), result("call-1"), ANSWER]


def test_transcript_view_shows_each_request_its_new_messages_and_the_reply() -> None:
    """Does each request column mark what is new since the last request and show the reply it got?"""
    view = transcript_view([Request(CHAPTER[:1]), Request(CHAPTER[:3])], CHAPTER)
    lines = str(view).splitlines()
    assert lines[0] == "请求 1（模型看到的） · tools：echo"
    assert lines[1] == "  + say Pi"
    assert lines[2].startswith("  ⇒ 回复 [toolUse] 调用 echo#call-1")
    assert lines[4] == "    say Pi" and lines[6] == "  + ↩ call-1/echo：Pi"
    assert lines[7] == "  ⇒ 回复 [stop] “Pi”"
    assert lines[8] == "运行结束后的 transcript · 共 4 条"
    page = view._repr_html_()
    assert page.count("display:grid") == 1 and "repeat(3,minmax(220px,1fr))" in page


def test_loop_timeline_indents_model_events_messages_tools_and_the_end() -> None:
    """Does the loop timeline number each event, indent it by kind and name what it carries, one line each?"""
    events = [
        Event("model_event", event=Inner("start")),
        Event("model_event", event=Inner("text_delta", delta="Pi")),
        Event("assistant_message", message=reply(call("call-1"))),
        Event("tool_start", call=Call("call-1", "echo")),
        Event("tool_progress", call_id="call-1", content=[{"type": "text", "text": "half\nway"}]),
        Event("tool_end", result=result("call-1")),
        Event("tool_skipped", result=skipped("call-2", "length")),
        Event("turn_end", reason="stop"),
    ]
    lines = str(loop_timeline(events)).splitlines()
    assert lines == [
        " 1     model_event  start",
        " 2     model_event  text_delta 'Pi'",
        ' 3   assistant_message  [toolUse] 调用 echo#call-1 {"value": "Pi"}',
        " 4       tool_start  echo#call-1",
        " 5       tool_progress  #call-1 half ⏎ way",
        " 6       tool_end  工具结果 ↩ call-1/echo：Pi",
        " 7       tool_skipped  工具结果（is_error） ↩ call-2/echo：not executed: length",
        " 8 turn_end  reason=stop",
    ]
    assert "turn_end" in loop_timeline(events)._repr_html_()


def test_batch_view_sets_completion_order_against_call_order() -> None:
    """Does the batch view read the start and end of each call from the events and its place from the
    transcript?"""
    slow, fast = Call("slow-call", "slow"), Call("fast-call", "fast")
    events = [
        Event("assistant_message", message=reply(call("slow-call"), call("fast-call"))),
        Event("tool_start", call=slow),
        Event("tool_start", call=fast),
        Event("tool_end", result=result("fast-call", "fast")),
        Event("tool_end", result=result("slow-call", "slow")),
        Event("turn_end", reason="stop"),
    ]
    transcript = [
        user("go"),
        reply(call("slow-call"), call("fast-call")),
        result("slow-call"),
        result("fast-call"),
    ]
    view = batch_view(events, transcript)
    assert [(lane.call_id, lane.start, lane.end, lane.written) for lane in view.lanes] == [
        ("slow-call", 2, 5, 1),
        ("fast-call", 3, 4, 2),
    ]
    assert view.ends_in_order() == ["fast-call", "slow-call"]
    assert view.written_in_order() == ["slow-call", "fast-call"]
    assert "fast-call → slow-call" in str(view)
    assert "slow-call → fast-call" in view._repr_html_()


def test_skipped_view_lists_only_skipped_results_with_their_reason() -> None:
    """Does the skipped view keep the skipped results (not the executed ones) with the run's reason?"""

    @dataclass
    class Run:
        reason: str
        messages: list[Msg]

    run = Run(
        "length",
        [user("go"), reply(call("a"), call("b"), stop="length"), result("x"), skipped("a", "length")],
    )
    view = skipped_view(run)
    assert view.rows == [("a", "echo", "length", "not executed: length")]
    assert str(view).splitlines()[0] == "运行结束：length · skipped 结果 1 条"
    assert "<b" in view._repr_html_() and "not executed: length" in view._repr_html_()


def test_the_chapter_transcript_is_valid_on_both_wires() -> None:
    """Does the chapter's transcript become OpenAI and Anthropic bodies of the right shape, each call
    paired?"""
    view = wire_view([system("system"), *CHAPTER])
    assert view.valid, view.problems
    assert [m["role"] for m in view.openai] == ["system", "user", "assistant", "tool", "assistant"]
    assert view.openai[2]["tool_calls"][0]["function"]["arguments"] == '{"value": "Pi"}'
    assert [m["role"] for m in view.anthropic] == ["user", "assistant", "user", "assistant"]
    assert view.anthropic[1]["content"][0] == {
        "type": "tool_use",
        "id": "call-1",
        "name": "echo",
        "input": {"value": "Pi"},
    }
    assert view.anthropic[2]["content"][0]["tool_use_id"] == "call-1"


def test_an_unanswered_call_is_refused_on_both_wires_by_name() -> None:
    """When the second of two calls has no result, does each provider's check name that call?"""
    two = reply(call("a-1"), call("b-1"))
    view = wire_view([user("go"), two, result("a-1")])
    assert not view.valid
    assert view.problems["OpenAI"] == ["第 1 条 assistant 消息的 tool_calls 没有紧随其后的 tool 消息：b-1"]
    assert view.problems["Anthropic"] == ["第 1 条消息的 tool_use 没有紧随其后的 tool_result：b-1"]
    assert "✗ OpenAI" in view._repr_html_()


def test_results_before_their_call_break_the_pairing() -> None:
    """Are tool results placed before the assistant message that made the call reported as unpaired?"""
    view = wire_view([user("go"), result("call-1"), reply(call("call-1"))])
    assert any("前面没有发起调用的 assistant 消息" in p for p in view.problems["OpenAI"])
    # On the Anthropic wire the prompt and the early result share the first user turn.
    assert view.problems["Anthropic"] == [
        "第 0 条消息的 tool_result（call-1）前面没有对应的 tool_use",
        "第 1 条消息的 tool_use 没有紧随其后的 tool_result：call-1",
    ]


def test_the_shape_schemas_reject_a_wrong_body() -> None:
    """Does JSON Schema catch arguments sent as an object to OpenAI and an empty content list to Anthropic?"""
    bad_openai = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "e", "arguments": {}}}],
        }
    ]
    assert shape_problems(bad_openai, OPENAI_SCHEMA)
    assert shape_problems([{"role": "user", "content": []}], ANTHROPIC_SCHEMA)
    assert shape_problems([{"role": "user", "content": "hi"}], OPENAI_SCHEMA) == []


def test_system_messages_fold_into_one_openai_system_message_and_stay_off_anthropic_messages() -> None:
    """Are the transcript's system messages replayed into one leading OpenAI system message, and left out of
    the Anthropic messages (where the prompt is a top-level parameter)?"""
    transcript = [
        system("BASE", {"rules": "RULE v1"}),
        user("first"),
        system("", {"rules": "RULE v2", "old": None}),
        user("second"),
    ]
    view = wire_view(transcript)
    assert view.openai[0] == {"role": "system", "content": "BASE\n\nRULE v2"}
    assert [m["role"] for m in view.openai] == ["system", "user", "user"]
    assert [m["role"] for m in view.anthropic] == ["user"]
    assert view.valid, view.problems
