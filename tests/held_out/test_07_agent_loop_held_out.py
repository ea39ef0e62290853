"""Held-out tests of checkpoint 07: the loop's promises on scripts the public tests never play.

Kept in the course repository only; `pi-course grade` stages them beside the public focused tests,
disguised like them, and scores each with the lab its marker names. The tools, call ids, texts and
scripted turns here (three requests, batches of three, other limits) appear in no public test, so a
loop that recognises the public scripts instead of running any script fails them. Concurrency is
ordered by gates the test opens, never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AgentContext,
    AgentMessage,
    AgentRunResult,
    LoopEvent,
    LoopToolEnd,
    LoopToolSkipped,
    LoopTurnEnd,
    ScriptedModel,
    SystemMessage,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    assistant_message,
    object_schema,
    run_agent_loop,
    string_value,
    text,
    user_message,
)

HANG = 2.0


def roles(messages: Sequence[AgentMessage]) -> list[str]:
    """The role of each message, in order."""
    return [message.role for message in messages]


def results(messages: Sequence[AgentMessage]) -> list[ToolResultMessage]:
    """The tool results of a transcript, in order."""
    return [message for message in messages if isinstance(message, ToolResultMessage)]


def ends(events: Sequence[LoopEvent]) -> list[LoopEvent]:
    """The turn_end events of a run."""
    return [event for event in events if event.type == "turn_end"]


class Lookup:
    """A lookup tool under any name: answers `<name>:<key>` and counts its runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.keys: list[str] = []

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        """Answer with this tool's name and the key asked for."""
        self.keys.append(params["key"])
        return ToolOutput([text(f"{self.name}:{params['key']}")], {"tool": self.name})

    def tool(self) -> Tool[dict[str, Any], dict[str, str]]:
        """The tool to register."""
        return Tool(self.name, f"查询 {self.name}", object_schema({"key": string_value}), self.execute)


def run(
    model: ScriptedModel, registry: ToolRegistry, context: AgentContext, **options: Any
) -> tuple[AgentRunResult, list[LoopEvent]]:
    """Run the loop to its end; its result and its events."""
    events: list[LoopEvent] = []
    result = asyncio.run(
        run_agent_loop(model=model, tools=registry, context=context, on_event=events.append, **options)
    )
    return result, events


def ask(words: str) -> AgentContext:
    """A context holding a system prompt and one user message."""
    return AgentContext(messages=[SystemMessage(content="保持简洁。", timestamp=0), user_message(words)])


# ## Lab 7.1 · one model turn, one ending


@pytest.mark.lab7_1
def test_held_out_a_plain_stop_after_a_longer_history_keeps_it_all_and_ends_once() -> None:
    """已有多轮历史时，一次纯文本 stop 原样保留全部历史、只追加一条 assistant、只结束一次吗？"""
    context = ask("总结一下今天的提交")
    context.messages += [assistant_message([text("好的")], "stop"), user_message("只要三条")]
    before = copy.deepcopy(context)
    registry = ToolRegistry([Lookup("git_log_held").tool()])
    model = ScriptedModel([assistant_message([text("1. 修复 2. 测试 3. 文档")], "stop")])

    result, events = run(model, registry, context)

    assert context == before
    assert result.messages[:4] == before.messages
    assert roles(result.messages) == ["system", "user", "assistant", "user", "assistant"]
    assert result.messages[-1].content == [text("1. 修复 2. 测试 3. 文档")]
    assert [request.messages for request in model.requests] == [before.messages]
    assert model.requests[0].tools == registry.definitions()
    assert (result.reason, result.steps) == ("stop", 1)
    assert ends(events) == [LoopTurnEnd(reason="stop")]


# ## Lab 7.2 · tool round trips


@pytest.mark.lab7_2
def test_held_out_two_tool_turns_in_a_row_feed_each_result_into_the_next_request() -> None:
    """连续两轮工具调用（不同工具、不同 id）：每个结果都配对写回，并出现在下一次请求里，共三次请求吗？"""
    weather, clock = Lookup("weather_held"), Lookup("clock_held")
    registry = ToolRegistry([weather.tool(), clock.tool()])
    first = ToolCall(id="w-0x1", name="weather_held", arguments={"key": "杭州"})
    second = ToolCall(id="c-0x2", name="clock_held", arguments={"key": "UTC+8"})
    model = ScriptedModel(
        [
            assistant_message([text("先查天气"), first], "toolUse"),
            assistant_message([second], "toolUse"),
            assistant_message([text("杭州，晴，现在 9 点")], "stop"),
        ]
    )

    result, events = run(model, registry, ask("杭州现在怎样"))

    assert (weather.keys, clock.keys) == (["杭州"], ["UTC+8"])
    assert roles(result.messages) == [
        "system",
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "assistant",
    ]
    answered = [(r.tool_call_id, r.tool_name, r.content, r.details) for r in results(result.messages)]
    assert answered == [
        ("w-0x1", "weather_held", [text("weather_held:杭州")], {"tool": "weather_held"}),
        ("c-0x2", "clock_held", [text("clock_held:UTC+8")], {"tool": "clock_held"}),
    ]
    assert len(model.requests) == 3
    assert model.requests[1].messages == result.messages[:4]
    assert model.requests[2].messages == result.messages[:6]
    assert (result.reason, result.steps) == ("stop", 3)
    assert ends(events) == [LoopTurnEnd(reason="stop")]


# ## Lab 7.3 · endings that run no tool


@pytest.mark.lab7_3
@pytest.mark.parametrize(
    ("stop", "reason", "ending", "words"),
    [
        ("length", "length", "length", "the model response was truncated"),
        ("aborted", "aborted", "aborted", "the model turn ended with aborted"),
        ("stop", "unexpected-stop", "error", "the model returned stop with a tool call"),
    ],
)
def test_held_out_calls_of_other_tools_in_a_turn_that_runs_none_are_each_skipped(
    stop: Literal["length", "aborted", "stop"], reason: str, ending: str, words: str
) -> None:
    """不执行工具的一轮里夹带三个其他工具的 call：每个都按 call 顺序得到 skipped 结果，工具一个也不运行吗？"""
    tools = [Lookup(name) for name in ("ls_held", "cat_held", "ls_held_2")]
    registry = ToolRegistry([tool.tool() for tool in tools])
    calls = [
        ToolCall(id=f"skip-{n}-{tool.name}", name=tool.name, arguments={"key": "x"})
        for n, tool in enumerate(tools)
    ]
    model = ScriptedModel([assistant_message([*calls, text("……")], stop)])

    result, events = run(model, registry, ask("列出并读取"))

    assert all(tool.keys == [] for tool in tools)
    written = results(result.messages)
    assert [(r.tool_call_id, r.tool_name) for r in written] == [(c.id, c.name) for c in calls]
    assert all(r.content == [text(f"Tool call was not executed because {words}.")] for r in written)
    assert all(r.details == {"skipped": True, "reason": reason} and r.is_error is True for r in written)
    assert [e for e in events if e.type == "tool_skipped"] == [LoopToolSkipped(result=r) for r in written]
    assert (result.reason, ends(events)) == (ending, [LoopTurnEnd(reason=ending)])  # type: ignore[arg-type]


# ## Lab 7.4 · batches


@pytest.mark.lab7_4
def test_held_out_a_batch_of_three_other_calls_ends_in_completion_order_and_is_written_in_call_order() -> (
    None
):
    """三个其他工具同时运行、按相反顺序完成：tool_end 按完成顺序，结果按 call 顺序，失败与未知工具各自配对
    吗？"""

    async def scenario() -> tuple[AgentRunResult, list[LoopEvent]]:
        started = asyncio.Event()
        release = asyncio.Event()
        events: list[LoopEvent] = []

        async def slow(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
            started.set()
            await asyncio.wait_for(release.wait(), HANG)
            return ToolOutput([text(f"slow:{params['key']}")])

        async def broken(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
            await asyncio.wait_for(started.wait(), HANG)
            release.set()
            raise LookupError(f"没有 {params['key']}")

        shape = object_schema({"key": string_value})
        registry = ToolRegistry(
            [Tool("slow_held", "慢", shape, slow), Tool("broken_held", "坏", shape, broken)]
        )
        calls = [
            ToolCall(id="b-1", name="slow_held", arguments={"key": "甲"}),
            ToolCall(id="b-2", name="missing_held", arguments={"key": "乙"}),
            ToolCall(id="b-3", name="broken_held", arguments={"key": "丙"}),
        ]
        model = ScriptedModel(
            [assistant_message(list(calls), "toolUse"), assistant_message([text("完")], "stop")]
        )
        result = await run_agent_loop(
            model=model, tools=registry, context=ask("三件事"), on_event=events.append
        )
        return result, events

    result, events = asyncio.run(scenario())

    written = results(result.messages)
    assert [(r.tool_call_id, r.tool_name, r.is_error) for r in written] == [
        ("b-1", "slow_held", False),
        ("b-2", "missing_held", True),
        ("b-3", "broken_held", True),
    ]
    assert written[0].content == [text("slow:甲")]
    assert written[1].content == [text("Tool missing_held failed: 未知工具")]
    assert written[2].content == [text("Tool broken_held failed: 没有 丙")]
    finished = [e.result.tool_call_id for e in events if isinstance(e, LoopToolEnd)]
    assert finished[-1] == "b-1" and sorted(finished) == ["b-1", "b-2", "b-3"]
    assert roles(result.messages)[2:] == ["assistant", "toolResult", "toolResult", "toolResult", "assistant"]
    assert (result.reason, result.steps) == ("stop", 2)


# ## Lab 7.5 · limits


@pytest.mark.lab7_5
def test_held_out_any_step_limit_below_the_script_stops_after_that_many_requests() -> None:
    """脚本比上限长时，无论上限是几（2 到 5），都恰好请求那么多次、保留最后一批结果并以 maxSteps 结束吗？"""

    @given(st.integers(min_value=2, max_value=5))
    def check(limit: int) -> None:
        tick = Lookup("tick_held")
        turns = [
            assistant_message([ToolCall(id=f"t{n}", name="tick_held", arguments={"key": str(n)})], "toolUse")
            for n in range(limit + 2)
        ]
        model = ScriptedModel(turns)

        result, events = run(model, ToolRegistry([tick.tool()]), ask("数数"), max_steps=limit)

        assert len(model.requests) == limit
        assert tick.keys == [str(n) for n in range(limit)]
        assert [r.tool_call_id for r in results(result.messages)] == [f"t{n}" for n in range(limit)]
        assert roles(result.messages)[-1] == "toolResult"
        assert (result.reason, result.steps) == ("maxSteps", limit)
        assert ends(events) == [LoopTurnEnd(reason="maxSteps")]

    check()
