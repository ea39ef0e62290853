"""Focused tests of checkpoint 00: the prologue's offline trace, one README request round the agent loop.

An observation checkpoint: the folder holds the target, so every test passes from the start. Each test
is a promise the learner can break on purpose (`pi-course check` then names the test that caught it).
Observation 0.1 looks at the trace and its owners; observation 0.2 at the call/result pairing check.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from pi_course import (
    PrologueTraceEvent,
    assert_valid_prologue_trace,
    format_prologue_trace,
    run_prologue_demo,
)

OWNERS = ["user", "model", "model", "loop", "tool", "model", "model"]
#: The fixture, milestone by milestone: (step, owner, type, detail, tool_call_id).
FIXTURE = [
    (1, "user", "user_message", "读取 README.md，并概括项目", None),
    (2, "model", "model_start", "turn=1", None),
    (3, "model", "assistant_message", "stopReason=toolUse name=read", "call_1"),
    (4, "loop", "tool_start", "name=read", "call_1"),
    (5, "tool", "tool_result", "README fixture", "call_1"),
    (6, "model", "model_start", "turn=2", None),
    (7, "model", "assistant_message", "stopReason=stop", None),
]
#: format_prologue_trace of the fixture, line by line.
FORMATTED = [
    "01 user_message      owner=user 读取 README.md，并概括项目",
    "02 model_start       owner=model turn=1",
    "03 assistant_message owner=model stopReason=toolUse name=read",
    "04 tool_start        owner=loop name=read",
    "05 tool_result       owner=tool README fixture",
    "06 model_start       owner=model turn=2",
    "07 assistant_message owner=model stopReason=stop",
]
DANGLING = "tool call call_1 缺少配对结果"
RESULT_FIRST = "tool result 先于对应的 tool call"


def as_rows(trace: list[PrologueTraceEvent]) -> list[tuple[Any, ...]]:
    """Each event as (step, owner, type, detail, tool_call_id)."""
    return [(e.step, e.owner, e.type, e.detail, e.tool_call_id) for e in trace]


def renumbered(events: list[PrologueTraceEvent]) -> list[PrologueTraceEvent]:
    """The events with their steps counted again from 1, as the course's test does after a removal."""
    return [dataclasses.replace(event, step=index + 1) for index, event in enumerate(events)]


def without(trace: list[PrologueTraceEvent], kind: str) -> list[PrologueTraceEvent]:
    """The trace with every event of one kind removed, renumbered."""
    return renumbered([event for event in trace if event.type != kind])


def validation_error(events: list[PrologueTraceEvent]) -> str:
    """The message of the ValueError that assert_valid_prologue_trace raises for `events`."""
    with pytest.raises(ValueError) as caught:
        assert_valid_prologue_trace(events)
    return str(caught.value)


def turn_trace(call_ids: list[str]) -> list[PrologueTraceEvent]:
    """A well-formed trace in the prologue's shape with one tool round per id, then a final answer."""
    events = [PrologueTraceEvent(1, "user", "user_message", "goal")]
    for turn, call_id in enumerate(call_ids, start=1):
        events += [
            PrologueTraceEvent(0, "model", "model_start", f"turn={turn}"),
            PrologueTraceEvent(0, "model", "assistant_message", "stopReason=toolUse name=read", call_id),
            PrologueTraceEvent(0, "loop", "tool_start", "name=read", call_id),
            PrologueTraceEvent(0, "tool", "tool_result", "result", call_id),
        ]
    events += [
        PrologueTraceEvent(0, "model", "model_start", f"turn={len(call_ids) + 1}"),
        PrologueTraceEvent(0, "model", "assistant_message", "stopReason=stop"),
    ]
    return renumbered(events)


# -- Observation 0.1 · the seven milestones and their owners ------------------------------------


@pytest.mark.observe0_1
@pytest.mark.edits("format_prologue_trace")
def test_the_offline_trace_is_one_complete_loop_of_seven_milestones() -> None:
    """离线轨迹是否恰好七步，owner 依次是 user/model/model/loop/tool/model/model，格式化后含
    `07 assistant_message`？"""
    trace = run_prologue_demo()
    assert len(trace) == 7
    assert [event.owner for event in trace] == OWNERS
    assert "07 assistant_message" in format_prologue_trace(trace)


@pytest.mark.observe0_1
@pytest.mark.edits("run_prologue_demo")
def test_every_run_replays_the_same_fixture() -> None:
    """每次运行得到的七个事件（step、owner、type、detail、tool_call_id）是否都与固定轨迹一字不差？"""
    assert as_rows(run_prologue_demo()) == FIXTURE
    assert as_rows(run_prologue_demo()) == FIXTURE


@pytest.mark.observe0_1
@pytest.mark.edits("run_prologue_demo")
def test_the_tool_request_and_its_result_share_one_id() -> None:
    """read 的请求（assistant_message）、调度（tool_start）和结果（tool_result）是否用同一个 `call_1`，且别的
    事件不带 id？"""
    trace = run_prologue_demo()
    with_id = {event.type: event.tool_call_id for event in trace if event.tool_call_id is not None}
    assert with_id == {"assistant_message": "call_1", "tool_start": "call_1", "tool_result": "call_1"}
    assert [event.step for event in trace if event.tool_call_id] == [3, 4, 5]


@pytest.mark.observe0_1
@pytest.mark.edits("run_prologue_demo")
def test_each_run_hands_out_a_fresh_copy() -> None:
    """调用方改动自己拿到的事件和列表之后，下一次运行是否仍然得到原样的固定轨迹？"""
    first = run_prologue_demo()
    first[0].detail = "changed by the caller"
    first[2].tool_call_id = "call_9"
    first.pop()
    assert as_rows(run_prologue_demo()) == FIXTURE


@pytest.mark.observe0_1
@pytest.mark.edits("format_prologue_trace")
def test_the_formatted_trace_is_one_aligned_line_per_milestone() -> None:
    """格式化结果是否每步一行：两位补零的 step、补到 17 列的 type、owner=…、detail，行间只用换行分隔？"""
    assert format_prologue_trace(run_prologue_demo()) == "\n".join(FORMATTED)


@pytest.mark.observe0_1
@pytest.mark.edits("format_prologue_trace")
def test_formatting_an_empty_trace_gives_an_empty_string() -> None:
    """没有事件时，格式化结果是否是空字符串（不是一个换行）？"""
    assert format_prologue_trace([]) == ""


@pytest.mark.observe0_1
@pytest.mark.edits("format_prologue_trace")
def test_each_line_starts_with_the_zero_padded_step_and_keeps_the_detail() -> None:
    """任意 step 与 detail：该行是否以至少两位（不足补零）的 step 开头、以原样的 detail 结尾？"""
    from hypothesis import given  # imported here, so that a run of the other step never loads hypothesis
    from hypothesis import strategies as st
    from strategies import short_text

    def line_of(step: int, detail: str) -> str:
        return format_prologue_trace([PrologueTraceEvent(step, "tool", "tool_result", detail, "call_1")])

    assert line_of(7, "x") == "07 tool_result       owner=tool x"

    @given(step=st.integers(min_value=1, max_value=999), detail=short_text.filter(lambda s: "\n" not in s))
    def check(step: int, detail: str) -> None:
        assert line_of(step, detail) == f"{step:02d} tool_result       owner=tool {detail}"

    check()


@pytest.mark.observe0_1
@pytest.mark.edits("run_prologue_demo")
def test_the_wire_form_uses_camel_case_and_leaves_out_a_missing_call_id() -> None:
    """to_dict() 是否写成 `toolCallId`，而没有工具调用的事件干脆不带这个键？"""
    trace = run_prologue_demo()
    assert trace[2].to_dict() == {
        "step": 3,
        "owner": "model",
        "type": "assistant_message",
        "detail": "stopReason=toolUse name=read",
        "toolCallId": "call_1",
    }
    assert list(trace[0].to_dict()) == ["step", "owner", "type", "detail"]


# -- Observation 0.2 · every tool call is answered by its result ---------------------------------


@pytest.mark.observe0_2
def test_a_dangling_tool_call_is_exposed_before_the_result_text() -> None:
    """删掉 tool_result 并重新编号后，验证器是否报告“缺少配对结果”，哪怕最终文本还在？"""
    broken = without(run_prologue_demo(), "tool_result")
    assert [event.type for event in broken][-1] == "assistant_message"
    with pytest.raises(ValueError, match="缺少配对结果"):
        assert_valid_prologue_trace(broken)


@pytest.mark.observe0_2
def test_the_dangling_call_is_named_by_its_id() -> None:
    """缺结果时，报错消息是否一字不差地是 `tool call call_1 缺少配对结果`？"""
    assert validation_error(without(run_prologue_demo(), "tool_result")) == DANGLING


@pytest.mark.observe0_2
def test_the_fixture_itself_passes_the_check() -> None:
    """固定轨迹本身是否通过验证（不抛异常，也不改动事件）？"""
    trace = run_prologue_demo()
    before = copy.deepcopy(trace)
    assert_valid_prologue_trace(trace)
    assert trace == before


@pytest.mark.observe0_2
def test_a_result_before_its_call_is_refused() -> None:
    """把 tool_result 挪到模型提出调用之前，验证器是否报告 `tool result 先于对应的 tool call`？"""
    trace = run_prologue_demo()
    result = trace.pop(4)
    trace.insert(2, result)
    assert validation_error(renumbered(trace)) == RESULT_FIRST


@pytest.mark.observe0_2
def test_a_result_for_an_unknown_or_missing_id_is_refused() -> None:
    """tool_result 的 id 不属于任何调用，或者没有 id，是否都报告 `tool result 先于对应的 tool call`？"""
    for wrong in ("call_2", "", None):
        trace = run_prologue_demo()
        trace[4].tool_call_id = wrong
        assert validation_error(trace) == RESULT_FIRST, wrong


@pytest.mark.observe0_2
def test_the_call_is_opened_by_the_assistant_message_not_by_tool_start() -> None:
    """调用由模型的 assistant_message 打开：去掉 tool_start 仍然合法，而只有 tool_start 带 id 时结果无处配
    对？"""
    assert_valid_prologue_trace(without(run_prologue_demo(), "tool_start"))
    trace = run_prologue_demo()
    trace[2].tool_call_id = None
    assert validation_error(trace) == RESULT_FIRST


@pytest.mark.observe0_2
def test_steps_must_count_from_one_without_a_gap() -> None:
    """删掉 tool_result 却不重新编号时，是否先报告 `trace step 应为 5`（编号检查先于配对检查）？"""
    trace = [event for event in run_prologue_demo() if event.type != "tool_result"]
    assert validation_error(trace) == "trace step 应为 5"
    shifted = run_prologue_demo()
    shifted[0].step = 0
    assert validation_error(shifted) == "trace step 应为 1"


@pytest.mark.observe0_2
def test_the_first_unanswered_call_is_the_one_reported() -> None:
    """两次调用都没有结果时，报告的是否是先提出的那一个？"""
    trace = [event for event in turn_trace(["call_b", "call_a"]) if event.type != "tool_result"]
    assert validation_error(renumbered(trace)) == "tool call call_b 缺少配对结果"


@pytest.mark.observe0_2
def test_any_paired_trace_passes_and_dropping_one_result_names_that_call() -> None:
    """任意几轮“调用→结果”的轨迹是否都合法，而删掉其中任意一条结果时，报错是否正好点名那次调用？"""
    from hypothesis import given
    from hypothesis import strategies as st

    assert_valid_prologue_trace(turn_trace(["call_1", "call_2"]))

    @given(
        ids=st.lists(
            st.text(alphabet="abc_123", min_size=1, max_size=6), min_size=1, max_size=4, unique=True
        ),
        data=st.data(),
    )
    def check(ids: list[str], data: st.DataObject) -> None:
        trace = turn_trace(ids)
        assert_valid_prologue_trace(trace)
        dropped = data.draw(st.sampled_from(ids))
        broken = [e for e in trace if not (e.type == "tool_result" and e.tool_call_id == dropped)]
        assert validation_error(renumbered(broken)) == f"tool call {dropped} 缺少配对结果"

    check()
