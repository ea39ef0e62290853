"""The 07 teaching views: the transcript per request, the event timeline, and both providers' wires."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pi_course_kit.teaching.transcript import timeline, transcript_view
from pi_course_kit.teaching.wire import ANTHROPIC_SCHEMA, OPENAI_SCHEMA, shape_problems, wire_view

# Duck-typed stand-ins for pi_course's messages: the kit process never imports pi_course.


@dataclass
class Msg:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


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


def test_timeline_indents_turns_messages_and_tool_executions() -> None:
    """Are agent, turn, message and tool events indented by level and numbered in order?"""
    events = [
        Event("agent_start"),
        Event("turn_start"),
        Event("message_end", CHAPTER[0]),
        Event("tool_execution_start", call=Call("call-1", "echo")),
        Event("message_end", CHAPTER[2]),
        Event("turn_end", CHAPTER[1]),
        Event("agent_end"),
    ]
    lines = str(timeline(events)).splitlines()
    assert lines[0] == " 1 agent_start" and lines[1] == " 2   turn_start"
    assert lines[2] == " 3     message_end  用户 say Pi"
    assert lines[3] == " 4       tool_execution_start  echo#call-1"
    assert lines[4] == " 5       message_end  工具结果 ↩ call-1/echo：Pi"
    assert lines[6] == " 7 agent_end"


def test_the_chapter_transcript_is_valid_on_both_wires() -> None:
    """Does the chapter's transcript become OpenAI and Anthropic bodies of the right shape, each call paired?"""
    view = wire_view("system", CHAPTER)
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
    view = wire_view("", [user("go"), two, result("a-1")])
    assert not view.valid
    assert view.problems["OpenAI"] == ["第 1 条 assistant 消息的 tool_calls 没有紧随其后的 tool 消息：b-1"]
    assert view.problems["Anthropic"] == ["第 1 条消息的 tool_use 没有紧随其后的 tool_result：b-1"]
    assert "✗ OpenAI" in view._repr_html_()


def test_results_before_their_call_break_the_pairing() -> None:
    """Are tool results placed before the assistant message that made the call reported as unpaired?"""
    view = wire_view("", [user("go"), result("call-1"), reply(call("call-1"))])
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
