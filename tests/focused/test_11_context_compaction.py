"""Focused tests of checkpoint 11: compaction entries, interactions, the context budget and resuming.

Every fixture is an active path built by hand, as the course's tests build theirs. An estimator given
by the test prices each message: `timestamp_options` reads the cost from the message's timestamp,
`unit_options` prices every message 1 and a compaction summary 2. The stores are real: the JSONL one
writes, closes and reopens a file in `tmp_path`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pi_course import (
    AgentMessage,
    AssistantMessage,
    BuildContextOptions,
    CompactionSessionEntry,
    CompactionSummary,
    InMemorySessionStore,
    JsonlSessionStore,
    MessageSessionEntry,
    MetadataSessionEntry,
    SessionEntry,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    build_context,
    create_compaction_entry,
    current_system_prompt,
    group_interactions,
    parse_session_entry,
    path_to,
    text,
    text_of,
)

# Shared fixtures, mirroring the course's. Nothing here calls a lab piece at import time.


def summary(goal: str = "交付可恢复的会话") -> CompactionSummary:
    """The seven-field summary every test starts from (one fact in each list)."""
    return CompactionSummary(
        goal=goal,
        constraints=["保持工具事实完整"],
        completed=["完成 session tree"],
        decisions=["换行是 commit marker"],
        changed_files=["src/session.ts"],
        unresolved=["跨进程锁"],
        next=["接入 Agent"],
    )


def system_entry(
    entry_id: str,
    parent_id: str | None,
    content: str,
    cost: int = 1,
    sections: dict[str, str | None] | None = None,
) -> MessageSessionEntry:
    """A system message entry; `cost` is its timestamp, which `timestamp_options` reads as its price."""
    message = SystemMessage(content=content, timestamp=cost, sections=sections)
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=cost, message=message)


def user_entry(entry_id: str, parent_id: str | None, value: str, cost: int = 1) -> MessageSessionEntry:
    """A user message entry."""
    message = UserMessage(content=[text(value)], timestamp=cost)
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=cost, message=message)


def assistant_entry(entry_id: str, parent_id: str | None, value: str, cost: int = 1) -> MessageSessionEntry:
    """A final assistant answer."""
    message = assistant_message([text(value)], "stop", timestamp=cost)
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=cost, message=message)


def assistant_call_entry(
    entry_id: str, parent_id: str | None, calls: list[ToolCall], cost: int = 1
) -> MessageSessionEntry:
    """An assistant message that asks for `calls`."""
    message = assistant_message(list(calls), "toolUse", timestamp=cost)
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=cost, message=message)


def result_entry(
    entry_id: str, parent_id: str | None, tool_call: ToolCall, value: str, cost: int = 1
) -> MessageSessionEntry:
    """The result of `tool_call`, with structured details."""
    message = ToolResultMessage(
        tool_call_id=tool_call.id,
        tool_name=tool_call.name,
        content=[text(value)],
        details={"order": value},
        is_error=False,
        timestamp=cost,
    )
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=cost, message=message)


def metadata_entry(entry_id: str, parent_id: str | None) -> MetadataSessionEntry:
    """A metadata entry: on the path, never in the model's context."""
    return MetadataSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, key="cwd", value="/workspace")


def compaction_entry(
    entry_id: str, parent_id: str, value: CompactionSummary, first_kept: str, tokens_before: float = 80
) -> CompactionSessionEntry:
    """A compaction entry written by hand, as one read back from a store would be."""
    return CompactionSessionEntry(
        id=entry_id,
        parent_id=parent_id,
        timestamp=50,
        summary=value,
        first_kept_entry_id=first_kept,
        tokens_before=tokens_before,
    )


def call(call_id: str, name: str = "probe") -> ToolCall:
    """A tool call whose arguments name it."""
    return ToolCall(id=call_id, name=name, arguments={"id": call_id})


def text_block(message: AgentMessage, index: int = 0) -> TextContent:
    """The text block at `index` of a message (a system message has none)."""
    block = None if isinstance(message, SystemMessage) else message.content[index]
    if not isinstance(block, TextContent):
        raise AssertionError(f"message content {index} 应该是 text")
    return block


def by_timestamp(value: str | AgentMessage) -> float:
    """The estimator of `timestamp_options`: a string costs its length, a message its timestamp."""
    return len(value) if isinstance(value, str) else value.timestamp


def by_unit(value: str | AgentMessage) -> float:
    """The estimator of `unit_options`: a compaction summary costs 2, any other message 1."""
    if isinstance(value, str):
        return len(value)
    return 2 if text_of(value).startswith("【会话压缩摘要】") else 1


def timestamp_options(**overrides: Any) -> BuildContextOptions:
    """Budget options pricing each message by its timestamp; no fixed costs unless overridden."""
    options: BuildContextOptions = {
        "max_tokens": 100,
        "reserved_output": 0,
        "safety_margin": 0,
        "estimate_tokens": by_timestamp,
    }
    options.update(overrides)  # type: ignore[typeddict-item]
    return options


def unit_options(**overrides: Any) -> BuildContextOptions:
    """Budget options pricing each message 1 and a compaction summary 2."""
    return timestamp_options(**{"estimate_tokens": by_unit, **overrides})


def ids_of(groups: list[Any]) -> list[list[str]]:
    """The entry ids of each interaction group."""
    return [[entry.id for entry in group.entries] for group in groups]


SUMMARY_TEXT = "\n".join(
    [
        "【会话压缩摘要】",
        "目标：完成第一轮压缩",
        "约束：",
        "- 保持工具事实完整",
        "已完成：",
        "- 完成 session tree",
        "决策：",
        "- 换行是 commit marker",
        "变更文件：",
        "- src/session.ts",
        "未解决：",
        "- 跨进程锁",
        "下一步：",
        "- 接入 Agent",
    ]
)


# ## Lab 11.1 · the compaction entry


@pytest.mark.lab11_1
@pytest.mark.edits("compaction_entry_at", "string_array_at")
def test_compaction_entry_is_narrowed_and_its_seven_fields_deep_copied() -> None:
    """一条 compaction entry 经过 parse_session_entry 后，是否仍是 compaction、与输入相等却不共享 summary 及其
    列表？"""
    source = compaction_entry("compact-1", "answer-1", summary(), "user-2", 144)
    parsed = parse_session_entry(source)

    assert parsed.type == "compaction"
    assert parsed == source
    assert parsed is not source
    assert isinstance(parsed, CompactionSessionEntry)
    assert parsed.summary is not source.summary
    assert parsed.summary.constraints is not source.summary.constraints
    source.summary.constraints[0] = "mutated source"
    assert parsed.summary.constraints == ["保持工具事实完整"]
    parsed.summary.next[0] = "mutated result"
    assert source.summary.next == ["接入 Agent"]
    # The wire form too: a JSONL line's object reads back as the same entry, camelCase keys and all.
    wire = compaction_entry("compact-2", "answer-1", summary(), "user-2", 0).to_dict()
    assert wire["firstKeptEntryId"] == "user-2"
    assert wire["summary"]["changedFiles"] == ["src/session.ts"]
    assert parse_session_entry(json.loads(json.dumps(wire))) == compaction_entry(
        "compact-2", "answer-1", summary(), "user-2", 0
    )


def invalid_compactions() -> list[tuple[str, object]]:
    """The course's broken compaction records, as wire dicts (its object spreads become dict edits)."""
    valid = compaction_entry("compact-valid", "parent", summary(), "keep").to_dict()

    def changed(**fields: object) -> dict[str, object]:
        return {**copy.deepcopy(valid), **fields}

    def summary_with(**fields: object) -> dict[str, object]:
        return {**copy.deepcopy(valid["summary"]), **fields}

    missing_constraints = summary_with()
    del missing_constraints["constraints"]
    missing_first_kept = changed()
    del missing_first_kept["firstKeptEntryId"]
    return [
        ("null parent", changed(parentId=None)),
        ("blank goal", changed(summary=summary_with(goal="   "))),
        ("missing constraints", changed(summary=missing_constraints)),
        ("old summary aliases", changed(summary=summary_with(files=[], nextSteps=[], invariants=[]))),
        ("old compacted ids", changed(compactedEntryIds=["old"])),
        ("missing first kept", missing_first_kept),
        ("negative tokens", changed(tokensBefore=-1)),
        ("infinite tokens", changed(tokensBefore=float("inf"))),
        ("string timestamp", changed(timestamp="2026-07-19")),
        ("non-string array member", changed(summary=summary_with(decisions=["valid", 7]))),
    ]


@pytest.mark.lab11_1
@pytest.mark.edits("compaction_entry_at")
def test_compaction_schema_refuses_old_fields_missing_fields_and_bad_numbers() -> None:
    """空 parent、空白 goal、缺字段、旧别名、旧的 compactedEntryIds、负数或无穷的 tokens、字符串 timestamp、非
    字符串数组成员，是否都过不了 compaction 边界？"""
    valid = compaction_entry("compact-valid", "parent", summary(), "keep")
    assert parse_session_entry(valid).type == "compaction"
    assert parse_session_entry(valid.to_dict()).type == "compaction"

    for label, value in invalid_compactions():
        with pytest.raises(ValueError, match=r".+"):
            parse_session_entry(value)
            pytest.fail(f"{label} 不应通过 compaction 边界")


@pytest.mark.lab11_1
@pytest.mark.edits("compaction_summary_at")
def test_compaction_schema_errors_name_the_field_that_is_wrong() -> None:
    """每种损坏的 compaction 是否都报出点名那个字段的那条消息（parentId、goal、数组成员、tokensBefore、未知字
    段）？"""
    expected = {
        "null parent": "session compaction compact-valid.parentId 必须是 string",
        "blank goal": "session compaction compact-valid.summary.goal 必须是非空 string",
        "missing constraints": "session compaction compact-valid.summary.constraints 必须是 string[]",
        "old summary aliases": "session compaction compact-valid.summary 包含未知字段 files",
        "old compacted ids": "session entry compact-valid 包含未知字段 compactedEntryIds",
        "missing first kept": "session compaction compact-valid.firstKeptEntryId 必须是非空 string",
        "negative tokens": "session compaction compact-valid.tokensBefore 不能小于 0",
        "infinite tokens": "session compaction compact-valid.tokensBefore 必须是 finite number",
        "string timestamp": "session entry compact-valid.timestamp 必须是 finite number",
        "non-string array member": "session compaction compact-valid.summary.decisions[1] 必须是 string",
    }
    for label, value in invalid_compactions():
        with pytest.raises(ValueError) as caught:
            parse_session_entry(value)
        assert str(caught.value) == expected[label], label
    with pytest.raises(ValueError) as unknown:
        parse_session_entry({"id": "x", "parentId": None, "timestamp": 1, "type": "summary"})
    assert str(unknown.value) == "session entry x.type 不是 message、metadata 或 compaction"


@pytest.mark.lab11_1
@pytest.mark.edits("compaction_entry_at")
def test_memory_and_jsonl_stores_write_and_reopen_a_compaction(tmp_path: Path) -> None:
    """InMemorySessionStore 与 JsonlSessionStore 是否都能写入 compaction，JSONL 文件关闭、重新打开后读回的是同
    样两条 entry？"""
    root = user_entry("user-1", None, "start")
    compact = compaction_entry("compact-1", "user-1", summary(), "user-1")

    async def scenario() -> None:
        memory = InMemorySessionStore()
        await memory.append(root)
        await memory.append(compact)
        memory_entries = await memory.entries()
        assert [entry.type for entry in memory_entries] == ["message", "compaction"]
        assert memory_entries[1] == compact
        assert memory_entries[1] is not compact

        file = tmp_path / "session.jsonl"
        store = await JsonlSessionStore.open(str(file))
        await store.append(root)
        await store.append(compact)
        reopened = await JsonlSessionStore.open(str(file))
        reopened_entries = await reopened.entries()
        assert reopened_entries == [root, compact]
        assert reopened_entries[1].type == "compaction"

    asyncio.run(scenario())
    # On disk: one committed line per entry, the compaction in the course's wire form.
    lines = (tmp_path / "session.jsonl").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    assert json.loads(lines[1]) == compact.to_dict()


# ## Lab 11.2 · interactions


@pytest.mark.lab11_2
@pytest.mark.edits("group_interactions")
def test_group_interactions_splits_at_user_messages_and_returns_copies() -> None:
    """group_interactions 是否在每条 user message 处开始新组，且返回的组与输入互不影响？"""
    entries = [
        user_entry("u1", None, "one"),
        assistant_entry("a1", "u1", "answer one"),
        user_entry("u2", "a1", "two"),
        assistant_entry("a2", "u2", "answer two"),
    ]
    snapshot = copy.deepcopy(entries)
    groups = group_interactions(entries)

    assert ids_of(groups) == [["u1", "a1"], ["u2", "a2"]]
    text_block(groups[0].entries[0].message).text = "changed output"
    assert entries == snapshot
    text_block(entries[1].message).text = "changed source"
    assert text_block(groups[0].entries[1].message).text == "answer one"


@pytest.mark.lab11_2
@pytest.mark.edits("validate_interaction")
def test_tool_results_in_reverse_order_still_pair_by_call_id() -> None:
    """两个 tool result 反序到达、中间还夹着一条 assistant 时，是否仍按 call id 配齐，留在同一组并保持原顺
    序？"""
    first, second = call("call-1", "first"), call("call-2", "second")
    entries = [
        user_entry("u1", None, "run both"),
        assistant_call_entry("calls", "u1", [first, second]),
        result_entry("result-2", "calls", second, "second done"),
        assistant_entry("progress", "result-2", "still working"),
        result_entry("result-1", "progress", first, "first done"),
        assistant_entry("done", "result-1", "all done"),
    ]
    groups = group_interactions(entries)
    assert len(groups) == 1
    assert ids_of(groups) == [["u1", "calls", "result-2", "progress", "result-1", "done"]]


@pytest.mark.lab11_2
@pytest.mark.edits("validate_interaction")
def test_interaction_refuses_orphan_duplicate_and_missing_tool_facts() -> None:
    """user 之前的 assistant、找不到 call 的 result、重复的 call、重复的 result、缺 result 的 call，是否各自以
    点名 id 的消息被拒绝？"""
    assert (
        len(
            group_interactions(
                [user_entry("valid-u", None, "valid"), assistant_entry("valid-a", "valid-u", "done")]
            )
        )
        == 1
    )

    def refused(entries: list[MessageSessionEntry]) -> str:
        with pytest.raises(ValueError) as caught:
            group_interactions(entries)
        return str(caught.value)

    known, unknown = call("known"), call("unknown")
    orphan = refused([assistant_entry("orphan-assistant", None, "orphan")])
    assert orphan == "message entry orphan-assistant 在第一个 user interaction 之前"
    orphan_result = refused(
        [
            user_entry("u", None, "run"),
            assistant_call_entry("calls", "u", [known]),
            result_entry("orphan-result", "calls", unknown, "bad"),
        ]
    )
    assert re.search(r"orphan-result.*unknown", orphan_result)
    assert orphan_result == "tool result orphan-result 引用了不存在的 call unknown"
    duplicate_call = refused(
        [
            user_entry("u", None, "run"),
            assistant_call_entry("duplicate-calls", "u", [known, known]),
            result_entry("result", "duplicate-calls", known, "done"),
        ]
    )
    assert duplicate_call == "interaction 中 tool call known 重复：duplicate-calls 与 duplicate-calls"
    duplicate_result = refused(
        [
            user_entry("u", None, "run"),
            assistant_call_entry("calls", "u", [known]),
            result_entry("result-1", "calls", known, "done"),
            result_entry("result-2", "result-1", known, "again"),
        ]
    )
    assert duplicate_result == "interaction 中 tool result known 重复：result-1 与 result-2"
    missing = refused([user_entry("u", None, "run"), assistant_call_entry("missing-result", "u", [known])])
    assert missing == "tool call known（entry missing-result）缺少 result"


@pytest.mark.lab11_2
@pytest.mark.edits("validate_interaction")
def test_a_result_is_paired_within_its_own_interaction_only() -> None:
    """一个 call 的 result 落到下一个 user 之后时，是否两组都被拒绝（前一组缺 result），而不是跨组配对？"""
    known = call("known")
    with pytest.raises(ValueError) as caught:
        group_interactions(
            [
                user_entry("u1", None, "run"),
                assistant_call_entry("calls", "u1", [known]),
                user_entry("u2", "calls", "interrupt"),
                result_entry("late", "u2", known, "late"),
            ]
        )
    assert str(caught.value) == "tool call known（entry calls）缺少 result"


# ## Lab 11.3 · the budget


@pytest.mark.lab11_3
@pytest.mark.edits("build_context")
def test_build_context_takes_system_output_reserve_and_margin_off_first() -> None:
    """build_context 是否先扣掉 system、输出预留与安全余量，再按剩下的额度保留最新的完整组，system 排在最前却
    不进 kept_entry_ids？"""
    conversation = [
        user_entry("u1", "sys", "one", 3),
        assistant_entry("a1", "u1", "one answer", 4),
        user_entry("u2", "a1", "two", 3),
        assistant_entry("a2", "u2", "two answer", 4),
        user_entry("u3", "a2", "three", 3),
        assistant_entry("a3", "u3", "three answer", 4),
    ]
    system = system_entry("sys", None, "sys", 3)
    projected = build_context(
        [system, *conversation], **timestamp_options(max_tokens=29, reserved_output=4, safety_margin=2)
    )

    assert projected.kept_entry_ids == ["u2", "a2", "u3", "a3"]
    assert projected.messages[0] == system.message, (
        "重放出的 system message 固定在最前面，不计入 kept_entry_ids"
    )
    assert current_system_prompt(projected.messages) == "sys"
    assert projected.reason == "trimmed"
    assert projected.tokens.to_dict() == {
        "maxTokens": 29,
        "system": 3,
        "messages": 14,
        "reservedOutput": 4,
        "safetyMargin": 2,
        "availableForMessages": 20,
        "total": 23,
    }

    without_fixed_costs = build_context(conversation, **timestamp_options(max_tokens=29))
    assert without_fixed_costs.kept_entry_ids == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert without_fixed_costs.tokens.system == 0
    assert without_fixed_costs.messages[0].role == "user"
    assert current_system_prompt(without_fixed_costs.messages) is None
    assert without_fixed_costs.reason == "within_budget"


@pytest.mark.lab11_3
@pytest.mark.edits("select_suffix")
def test_newest_group_over_budget_is_kept_whole() -> None:
    """最新一组单独就超出额度时，是否仍完整保留 user、call、两个 result 与最终回答，并报告
    single_group_overflow？"""
    old = [user_entry("old-u", None, "old", 1), assistant_entry("old-a", "old-u", "old answer", 1)]
    first, second = call("call-1"), call("call-2")
    latest = [
        user_entry("u", "old-a", "latest", 3),
        assistant_call_entry("calls", "u", [first, second], 3),
        result_entry("result-2", "calls", second, "second", 3),
        result_entry("result-1", "result-2", first, "first", 3),
        assistant_entry("final", "result-1", "done", 3),
    ]
    projected = build_context(
        [*old, *latest], **timestamp_options(max_tokens=10, reserved_output=1, safety_margin=1)
    )
    assert projected.reason == "single_group_overflow"
    assert projected.kept_entry_ids == [entry.id for entry in latest]
    assert [message.role for message in projected.messages] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
    ]
    assert projected.tokens.messages == 15
    assert projected.tokens.total == 17
    assert projected.tokens.available_for_messages == 8


@pytest.mark.lab11_3
@pytest.mark.edits("build_context")
def test_budget_cuts_only_between_whole_groups_and_shares_nothing_with_the_input() -> None:
    """额度只在完整组之间截断时，结果的工具参数与输入是否互不影响（改结果不动历史，改历史不动结果）？"""
    arguments_value: dict[str, Any] = {"nested": {"path": "before.ts"}}
    probe = ToolCall(id="probe", name="read", arguments=arguments_value)
    entries = [
        user_entry("old-u", None, "old", 2),
        assistant_entry("old-a", "old-u", "old answer", 2),
        user_entry("new-u", "old-a", "new", 2),
        assistant_call_entry("new-call", "new-u", [probe], 2),
        result_entry("new-result", "new-call", probe, "done", 2),
        assistant_entry("new-final", "new-result", "final", 2),
    ]
    snapshot = copy.deepcopy(entries)
    projected = build_context(entries, **timestamp_options(max_tokens=8))

    assert projected.kept_entry_ids == ["new-u", "new-call", "new-result", "new-final"]
    assert projected.reason == "trimmed"
    call_message = projected.messages[1]
    assert isinstance(call_message, AssistantMessage), "第二条消息应该是 assistant tool call"
    projected_call = call_message.content[0]
    assert isinstance(projected_call, ToolCall), "assistant 应该保留 tool call"
    assert isinstance(projected_call.arguments, dict)
    projected_call.arguments["nested"]["path"] = "changed output"
    assert entries == snapshot
    arguments_value["nested"]["path"] = "changed source"
    assert projected_call.arguments == {"nested": {"path": "changed output"}}


@pytest.mark.lab11_3
@pytest.mark.edits("estimated_tokens")
def test_the_estimator_sees_copies_and_its_answers_are_checked() -> None:
    """估算器改动它拿到的消息时历史是否不变；估算器抛错、返回负数或 NaN、预算参数为负时，是否以点名来源的消息
    报错？"""
    entries = [user_entry("u1", None, "one"), assistant_entry("a1", "u1", "answer")]
    snapshot = copy.deepcopy(entries)

    def meddling(value: str | AgentMessage) -> float:
        if not isinstance(value, str | SystemMessage):
            value.content.clear()
        return 1

    assert build_context(entries, **timestamp_options(estimate_tokens=meddling)).tokens.messages == 2
    assert entries == snapshot

    def failing(value: str | AgentMessage) -> float:
        raise RuntimeError("tokenizer offline")

    with pytest.raises(ValueError) as failed:
        build_context(entries, **timestamp_options(estimate_tokens=failing))
    assert str(failed.value) == "interaction 1 message 1 token 估算失败：tokenizer offline"
    assert isinstance(failed.value.__cause__, RuntimeError)

    with pytest.raises(ValueError) as negative:
        build_context(entries, **timestamp_options(estimate_tokens=lambda value: -1))
    assert str(negative.value) == "interaction 1 message 1 token 估算 必须是非负 finite number"
    with pytest.raises(ValueError, match="system message token 估算 必须是非负 finite number"):
        build_context(
            [system_entry("s", None, "sys"), *entries],
            **timestamp_options(estimate_tokens=lambda value: float("nan")),
        )
    for name, label in (
        ("max_tokens", "maxTokens"),
        ("reserved_output", "reservedOutput"),
        ("safety_margin", "safetyMargin"),
    ):
        with pytest.raises(ValueError) as bad:
            build_context(entries, **timestamp_options(**{name: -1}))
        assert str(bad.value) == f"{label} 必须是非负 finite number"


@pytest.mark.lab11_3
@pytest.mark.edits("estimated_tokens")
def test_an_estimator_that_rewrites_its_message_changes_neither_the_session_nor_the_context() -> None:
    """估算器改写它拿到的 system、摘要和对话消息时，会话历史、active path 与构建出的上下文是否都不受影响？"""
    written: list[SessionEntry] = [
        system_entry("sys", None, "BASE", 1, {"rules": "RULE"}),
        user_entry("u1", "sys", "old question"),
        assistant_entry("a1", "u1", "old answer"),
        compaction_entry("compact-1", "a1", summary("改写测试"), "u1"),
        user_entry("u2", "compact-1", "new question"),
        assistant_entry("a2", "u2", "new answer"),
    ]

    async def stored_history() -> list[SessionEntry]:
        store = InMemorySessionStore()
        for entry in written:
            await store.append(entry)
        return await store.entries()

    history = asyncio.run(stored_history())
    history_snapshot = copy.deepcopy(history)
    active_path = path_to(history, "a2")
    path_snapshot = copy.deepcopy(active_path)
    honest = build_context(active_path, **unit_options())

    def rewriting(value: str | AgentMessage) -> float:
        # Prices as by_unit does, then scribbles over every part of the message it was handed.
        cost = by_unit(value)
        if isinstance(value, SystemMessage):
            value.content = "rewritten system"
            value.sections = {"rules": "rewritten rule"}
        elif not isinstance(value, str):
            for block in value.content:
                if isinstance(block, TextContent):
                    block.text = "rewritten by the estimator"
            value.timestamp = 999
        return cost

    projected = build_context(active_path, **unit_options(estimate_tokens=rewriting))

    assert active_path == path_snapshot, "估算器的改动不能写回 active path"
    assert history == history_snapshot, "估算器的改动不能写回会话历史"
    assert projected.to_dict() == honest.to_dict(), "构建出的上下文不应带上估算器的改动"
    assert current_system_prompt(projected.messages) == "BASE\n\nRULE"
    assert text_of(projected.messages[1]).startswith("【会话压缩摘要】\n目标：改写测试")
    assert [text_of(message) for message in projected.messages[2:]] == [
        "old question",
        "old answer",
        "new question",
        "new answer",
    ]
    assert [message.timestamp for message in projected.messages] == [1, 50, 1, 1, 1, 1]


@pytest.mark.lab11_3
@pytest.mark.edits("build_context")
def test_fixed_costs_over_the_window_leave_zero_for_messages() -> None:
    """固定成本超过整个窗口时，消息额度是否是 0 而不是负数，且最新一组仍被完整保留？"""
    entries = [
        system_entry("s", None, "sys", 50),
        user_entry("u1", "s", "one", 1),
        assistant_entry("a1", "u1", "answer", 1),
        user_entry("u2", "a1", "two", 1),
        assistant_entry("a2", "u2", "answer", 1),
    ]
    projected = build_context(entries, **timestamp_options(max_tokens=20, reserved_output=5))
    assert projected.tokens.available_for_messages == 0
    assert projected.reason == "single_group_overflow"
    assert projected.kept_entry_ids == ["u2", "a2"]
    assert projected.tokens.total == 50 + 2 + 5


@pytest.mark.lab11_3
@pytest.mark.edits("select_suffix")
def test_selection_stops_at_the_first_group_that_does_not_fit_even_if_an_older_one_would() -> None:
    """较新的一组放不下、更早的一组却放得下时，挑选是否就此停下，只保留连续的最新后缀，而不跳过它去拿更早的组？"""
    entries: list[SessionEntry] = [
        user_entry("small-u", None, "small old", 1),
        assistant_entry("small-a", "small-u", "small old answer", 1),
        user_entry("big-u", "small-a", "big middle", 10),
        assistant_entry("big-a", "big-u", "big middle answer", 10),
        user_entry("new-u", "big-a", "newest", 2),
        assistant_entry("new-a", "new-u", "newest answer", 2),
    ]
    # Costs 2, 20, 4: the newest and the oldest together would fit in 8, but the 20 between them does
    # not, and a context that jumped over it would no longer be a suffix of the conversation.
    projected = build_context(entries, **timestamp_options(max_tokens=8))
    assert projected.kept_entry_ids == ["new-u", "new-a"]
    assert projected.reason == "trimmed"
    assert projected.tokens.messages == 4
    assert projected.tokens.total == 4
    assert [text_of(message) for message in projected.messages] == ["newest", "newest answer"]

    # After a compaction that keeps all three, the summary is a fixed cost and the rule is the same.
    resumed = [
        *entries,
        compaction_entry("compact", "new-a", summary("跳过测试"), "small-u"),
        user_entry("after-u", "compact", "after", 1),
        assistant_entry("after-a", "after-u", "after answer", 1),
    ]

    def summary_costs_three(value: str | AgentMessage) -> float:
        if not isinstance(value, str) and text_of(value).startswith("【会话压缩摘要】"):
            return 3
        return by_timestamp(value)

    # Groups cost 2, 20, 4, 2; 12 - 3 leaves 9: the last two (6) fit, the 20 stops it, the 2 waits.
    projected = build_context(
        resumed, **timestamp_options(max_tokens=12, estimate_tokens=summary_costs_three)
    )
    assert projected.kept_entry_ids == ["new-u", "new-a", "after-u", "after-a"]
    assert projected.reason == "trimmed"
    assert projected.tokens.messages == 3 + 6
    assert not any("small old" in text_of(message) for message in projected.messages)


# ## Lab 11.4 · creating a compaction entry


@pytest.mark.lab11_4
def test_create_compaction_entry_derives_its_parent_and_keeps_history_and_input_apart() -> None:
    """create_compaction_entry 是否以路径最后一条为 parent，且改动输入 summary 或返回的 entry 都不会反过来改动
    历史？"""
    active_path: list[SessionEntry] = [
        user_entry("u1", None, "one"),
        assistant_entry("a1", "u1", "answer one"),
        user_entry("u2", "a1", "two"),
        assistant_entry("a2", "u2", "answer two"),
    ]
    active_snapshot = copy.deepcopy(active_path)
    input_summary = summary("继续完成上下文压缩")
    created = create_compaction_entry(
        active_path,
        id="compact-1",
        timestamp=100,
        summary=input_summary,
        first_kept_entry_id="u2",
        tokens_before=256,
    )

    assert created == CompactionSessionEntry(
        id="compact-1",
        parent_id="a2",
        timestamp=100,
        summary=input_summary,
        first_kept_entry_id="u2",
        tokens_before=256,
    )
    assert active_path == active_snapshot
    assert created.summary is not input_summary
    input_summary.next[0] = "mutated source"
    assert created.summary.next == ["接入 Agent"]
    created.summary.constraints[0] = "mutated result"
    assert active_path == active_snapshot, "修改新 entry 不能反向修改历史"


@pytest.mark.lab11_4
def test_create_compaction_entry_accepts_only_the_first_message_of_a_whole_interaction() -> None:
    """空路径、组内的 first kept、不存在的 first kept、与路径重复的 id、无效的 tokens_before，是否都被拒
    绝？"""
    valid_path: list[SessionEntry] = [user_entry("u1", None, "one"), assistant_entry("a1", "u1", "answer")]
    created = create_compaction_entry(
        valid_path,
        id="valid-compaction",
        timestamp=10,
        summary=summary(),
        first_kept_entry_id="u1",
        tokens_before=20,
    )
    assert created.parent_id == "a1"

    def refused(path: list[SessionEntry], entry_id: str, first_kept: str, tokens_before: float = 20) -> str:
        with pytest.raises(ValueError) as caught:
            create_compaction_entry(
                path,
                id=entry_id,
                timestamp=10,
                summary=summary(),
                first_kept_entry_id=first_kept,
                tokens_before=tokens_before,
            )
        return str(caught.value)

    assert refused([], "compact", "u1") == "空 active path 不能创建 compaction"
    assert refused(valid_path, "compact", "a1") == "firstKeptEntryId a1 必须是完整 interaction 的首条 message"
    assert re.search(r"missing.*首条 message", refused(valid_path, "compact", "missing"))
    assert refused(valid_path, "u1", "u1") == "session entry id 重复：u1"
    # The parser has the last word: a number it refuses is refused here too.
    assert refused(valid_path, "compact", "u1", -3) == "session compaction compact.tokensBefore 不能小于 0"


# ## Lab 11.5 · resuming from the latest compaction


@pytest.mark.lab11_5
@pytest.mark.edits("compaction_summary_text")
def test_resume_uses_the_latest_summary_and_keeps_the_suffix_from_first_kept() -> None:
    """恢复时是否只用最新 compaction 的摘要开头，再从 first kept 接上保留的后缀，错误分支与被摘要的旧消息都不
    出现？"""
    full_log: list[SessionEntry] = [
        user_entry("u1", None, "old question"),
        assistant_entry("a1", "u1", "old answer"),
        user_entry("u2", "a1", "kept question"),
        assistant_entry("a2", "u2", "kept answer"),
        compaction_entry("compact-1", "a2", summary("完成第一轮压缩"), "u2"),
        metadata_entry("meta", "compact-1"),
        user_entry("u3", "meta", "new question"),
        assistant_entry("a3", "u3", "new answer"),
        assistant_entry("sibling", "a1", "wrong branch"),
    ]
    projected = build_context(path_to(full_log, "a3"), **unit_options())

    assert projected.kept_entry_ids == ["u2", "a2", "u3", "a3"]
    assert len(projected.messages) == 5
    assert text_of(projected.messages[0]) == SUMMARY_TEXT
    assert projected.messages[0].role == "user"
    assert projected.messages[0].timestamp == 50
    assert not any("wrong branch" in text_of(message) for message in projected.messages)
    assert not any("old question" in text_of(message) for message in projected.messages)
    assert projected.tokens.messages == 2 + 4


@pytest.mark.lab11_5
@pytest.mark.edits("latest_compaction")
def test_only_the_latest_of_several_compactions_is_read_and_builds_are_repeatable() -> None:
    """有多条 compaction 时是否只读最新一条（空列表写作“- （无）”），同一输入构建两次结果相等却互不共享？"""
    second_summary = summary("second summary")
    second_summary.constraints = []
    second_summary.unresolved = []
    active_path: list[SessionEntry] = [
        user_entry("u1", None, "old"),
        assistant_entry("a1", "u1", "old answer"),
        user_entry("u2", "a1", "middle"),
        assistant_entry("a2", "u2", "middle answer"),
        compaction_entry("compact-1", "a2", summary("first summary"), "u2"),
        user_entry("u3", "compact-1", "recent"),
        assistant_entry("a3", "u3", "recent answer"),
        compaction_entry("compact-2", "a3", second_summary, "u3"),
        user_entry("u4", "compact-2", "latest"),
        assistant_entry("a4", "u4", "latest answer"),
    ]
    before = copy.deepcopy(active_path)
    first = build_context(active_path, **unit_options())
    second = build_context(active_path, **unit_options())

    assert first == second
    assert first.messages is not second.messages
    assert first.kept_entry_ids == ["u3", "a3", "u4", "a4"]
    heading = text_of(first.messages[0])
    assert "second summary" in heading
    assert "first summary" not in heading
    assert re.search(r"约束：\n- （无）", heading)
    assert re.search(r"未解决：\n- （无）", heading)

    text_block(first.messages[0]).text = "mutated projection"
    assert "second summary" in text_of(second.messages[0])
    assert active_path == before


@pytest.mark.lab11_5
@pytest.mark.edits("summary_messages")
def test_a_resumed_path_can_be_compacted_again_and_still_cuts_whole_groups() -> None:
    """恢复后的路径能否再创建一条 compaction，之后的构建是否读它的摘要，并在预算内仍只截完整组？"""
    active_path: list[SessionEntry] = [
        user_entry("u1", None, "old"),
        assistant_entry("a1", "u1", "old answer"),
        user_entry("u2", "a1", "middle"),
        assistant_entry("a2", "u2", "middle answer"),
        compaction_entry("compact-1", "a2", summary("first"), "u2"),
        user_entry("u3", "compact-1", "recent"),
        assistant_entry("a3", "u3", "recent answer"),
    ]
    second = create_compaction_entry(
        active_path,
        id="compact-2",
        timestamp=200,
        summary=summary("second"),
        first_kept_entry_id="u3",
        tokens_before=44,
    )
    assert second.parent_id == "a3"
    resumed_path: list[SessionEntry] = [
        *active_path,
        second,
        user_entry("u4", "compact-2", "latest"),
        assistant_entry("a4", "u4", "latest answer"),
    ]
    projected = build_context(resumed_path, **unit_options(max_tokens=4))

    assert projected.reason == "trimmed"
    assert projected.kept_entry_ids == ["u4", "a4"]
    assert [text_of(message) for message in projected.messages][1:] == ["latest", "latest answer"]
    assert len(projected.messages) == 3
    assert re.search(r"目标：second", text_of(projected.messages[0]))
    assert projected.tokens.messages == 4


@pytest.mark.lab11_5
@pytest.mark.edits("message_candidates")
def test_system_messages_replay_over_the_whole_path_and_stay_out_of_groups_and_summary() -> None:
    """system message 是否从整条 active path（包括 compaction 之前）重放成开头一条，不进任何组、不进摘要，也不
    能当作 first kept？"""
    active_path: list[SessionEntry] = [
        system_entry("sys", None, "BASE", 1, {"rules": "RULE v1"}),
        user_entry("u1", "sys", "old question"),
        assistant_entry("a1", "u1", "old answer"),
        system_entry("patch-1", "a1", "", 1, {"rules": "RULE v2"}),
        user_entry("u2", "patch-1", "kept question"),
        assistant_entry("a2", "u2", "kept answer"),
        compaction_entry("compact-1", "a2", summary("压缩"), "u2"),
        system_entry("patch-2", "compact-1", "Prefer small diffs."),
        user_entry("u3", "patch-2", "new question"),
        assistant_entry("a3", "u3", "new answer"),
    ]
    before = copy.deepcopy(active_path)

    messages_only = [entry for entry in active_path if isinstance(entry, MessageSessionEntry)]
    assert ids_of(group_interactions(messages_only)) == [["u1", "a1"], ["u2", "a2"], ["u3", "a3"]], (
        "system message 不属于任何 interaction"
    )

    projected = build_context(active_path, **unit_options())
    assert projected.messages[0] == SystemMessage(
        content="BASE\n\nPrefer small diffs.", sections={"rules": "RULE v2"}, timestamp=1
    )
    assert current_system_prompt(projected.messages) == "BASE\n\nPrefer small diffs.\n\nRULE v2", (
        "compaction 之前的 system message 也参与重放"
    )
    assert re.search(r"【会话压缩摘要】", text_of(projected.messages[1]))
    assert not re.search(r"BASE|RULE", text_of(projected.messages[1]))
    assert [message.role for message in projected.messages[2:]] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ], "后缀里的 system message 已经折进开头，不再原位出现"
    assert projected.kept_entry_ids == ["u2", "a2", "u3", "a3"]
    assert projected.tokens.system == 1
    assert projected.tokens.messages == 6
    assert active_path == before

    again = create_compaction_entry(
        active_path,
        id="compact-2",
        timestamp=300,
        summary=summary("再压缩"),
        first_kept_entry_id="u3",
        tokens_before=10,
    )
    assert again.parent_id == "a3"
    with pytest.raises(ValueError) as wrong_start:
        create_compaction_entry(
            active_path,
            id="compact-3",
            timestamp=300,
            summary=summary("错误起点"),
            first_kept_entry_id="patch-2",
            tokens_before=10,
        )
    assert re.search(r"patch-2.*首条 message", str(wrong_start.value)), (
        "system message 不能作为 interaction 起点"
    )


@pytest.mark.lab11_5
@pytest.mark.edits("message_candidates")
def test_a_compaction_whose_first_kept_is_not_a_start_before_it_is_refused() -> None:
    """compaction 的 first kept 在它之后、不存在、或不是 user 起点时，build_context 是否以点名 compaction 的消
    息拒绝，而不是悄悄换一个起点？"""
    head: list[SessionEntry] = [
        user_entry("u1", None, "one"),
        assistant_entry("a1", "u1", "answer"),
        user_entry("u2", "a1", "two"),
        assistant_entry("a2", "u2", "answer"),
    ]

    def refused(first_kept: str) -> str:
        path = [*head, compaction_entry("c", "a2", summary(), first_kept), user_entry("u3", "c", "three")]
        with pytest.raises(ValueError) as caught:
            build_context(path, **unit_options())
        return str(caught.value)

    assert refused("u3") == "compaction c 的 firstKeptEntryId u3 不在它之前"
    assert refused("nowhere") == "compaction c 的 firstKeptEntryId nowhere 不在它之前"
    assert refused("a1") == "compaction c 的 firstKeptEntryId a1 不是 interaction 起点"


# ## Properties over generated conversations


def conversation_strategy() -> Any:
    """Conversations of 1-5 interactions, each a user message, 0-2 tool rounds whose results arrive in
    any order, and a final answer; every message has a cost of 1-6 (its timestamp)."""
    from hypothesis import strategies as st

    cost = st.integers(min_value=1, max_value=6)
    interaction = st.tuples(
        cost,
        st.lists(st.tuples(st.integers(0, 2), st.randoms(use_true_random=False), cost), max_size=2),
        cost,
    )
    return st.lists(interaction, min_size=1, max_size=5)


def build_conversation(shape: Any) -> tuple[list[MessageSessionEntry], list[list[str]], list[int]]:
    """The entries of a generated conversation, the ids of each interaction and each one's cost."""
    entries: list[MessageSessionEntry] = []
    groups: list[list[str]] = []
    costs: list[int] = []
    parent: str | None = None

    def add(entry: MessageSessionEntry) -> None:
        nonlocal parent
        entries.append(entry)
        groups[-1].append(entry.id)
        costs[-1] += int(entry.timestamp)
        parent = entry.id

    for g, (user_cost, rounds, final_cost) in enumerate(shape):
        groups.append([])
        costs.append(0)
        add(user_entry(f"u{g}", parent, f"question {g}", user_cost))
        for r, (count, rng, round_cost) in enumerate(rounds):
            calls = [call(f"c{g}-{r}-{k}") for k in range(count)]
            add(assistant_call_entry(f"calls{g}-{r}", parent, calls, round_cost))
            rng.shuffle(calls)
            for tool_call in calls:
                add(result_entry(f"r-{tool_call.id}", parent, tool_call, "done", round_cost))
        add(assistant_entry(f"a{g}", parent, f"answer {g}", final_cost))
    return entries, groups, costs


@pytest.mark.lab11_3
@pytest.mark.edits("select_suffix")
def test_any_budget_keeps_the_longest_newest_run_of_whole_groups() -> None:
    """对任意对话与任意预算，保留的是否总是最新的、放得下的最长一段完整组（放不下时只留最新一组），token 账目
    是否对得上？"""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    # One plain call first: on the starter it stops here, not inside Hypothesis's search.
    build_context([user_entry("u", None, "probe")], **timestamp_options())

    @given(shape=conversation_strategy(), max_tokens=st.integers(0, 60), reserve=st.integers(0, 6))
    @settings(max_examples=60)
    def check(shape: Any, max_tokens: int, reserve: int) -> None:
        entries, groups, costs = build_conversation(shape)
        assert [[e.id for e in g.entries] for g in group_interactions(entries)] == groups
        projected = build_context(
            entries, **timestamp_options(max_tokens=max_tokens, reserved_output=reserve)
        )
        available = max(0, max_tokens - reserve)
        # Which whole groups are kept: the kept ids must be exactly the concatenation of a suffix.
        first = next(
            i
            for i in range(len(groups) + 1)
            if [x for g in groups[i:] for x in g] == projected.kept_entry_ids
        )
        assert first < len(groups), "the newest group is always kept"
        kept_cost = sum(costs[first:])
        assert projected.tokens.messages == kept_cost
        assert projected.tokens.total == kept_cost + reserve
        if projected.reason == "single_group_overflow":
            assert first == len(groups) - 1 and costs[-1] > available
        else:
            assert kept_cost <= available
            assert first == 0 or kept_cost + costs[first - 1] > available
            assert projected.reason == ("trimmed" if first > 0 else "within_budget")

    check()


@pytest.mark.lab11_5
@pytest.mark.edits("message_candidates")
def test_resuming_at_any_group_start_keeps_nothing_before_it_and_round_trips_through_jsonl(
    tmp_path: Path,
) -> None:
    """在任意组首创建 compaction、经 JSONL 写入并重新打开后，构建结果是否只从那一组开始、以摘要开头，并与重开
    前的构建相同？"""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    build_context(
        [
            user_entry("u", None, "x"),
            assistant_entry("a", "u", "y"),
            compaction_entry("c", "a", summary(), "u"),
        ],
        **unit_options(),
    )

    @given(shape=conversation_strategy(), data=st.data())
    @settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
    def check(shape: Any, data: Any) -> None:
        entries, groups, _ = build_conversation(shape)
        start = data.draw(st.integers(0, len(groups) - 1))
        path: list[SessionEntry] = list(entries)
        compaction = create_compaction_entry(
            path,
            id="compact",
            timestamp=7,
            summary=summary(),
            first_kept_entry_id=groups[start][0],
            tokens_before=1,
        )
        path.append(compaction)
        path.append(user_entry("after", "compact", "after"))
        path.append(assistant_entry("after-a", "after", "done"))
        projected = build_context(path, **unit_options(max_tokens=1000))
        assert projected.kept_entry_ids == [x for g in groups[start:] for x in g] + ["after", "after-a"]
        assert text_of(projected.messages[0]).startswith("【会话压缩摘要】")

        async def reopen() -> list[SessionEntry]:
            file = tmp_path / "property.jsonl"
            file.unlink(missing_ok=True)
            store = await JsonlSessionStore.open(str(file))
            for entry in path:
                await store.append(entry)
            return await (await JsonlSessionStore.open(str(file))).entries()

        reopened = asyncio.run(reopen())
        assert reopened == path
        assert build_context(reopened, **unit_options(max_tokens=1000)) == projected

    check()
