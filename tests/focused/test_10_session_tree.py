"""Focused tests of checkpoint 10: the session tree, its strict boundary, its two stores and its paths.

The JSONL tests use real files in pytest's `tmp_path`. Where the course steers the file system by hand
(an append that waits at a gate, one that writes half a line and then fails), the test passes its own
`SessionFileIO`, still backed by the real file, whose hooks wait on `asyncio.Event` gates the test
opens: no test orders anything by sleeping.

Entries are built as the kit's dataclasses; untrusted shapes as plain wire dicts (camelCase keys), the
form a JSONL line has after `json.loads`.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AgentMessage,
    InMemorySessionStore,
    JsonlSessionStore,
    JsonValue,
    MessageSessionEntry,
    MetadataSessionEntry,
    SessionEntry,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UnterminatedTailWarning,
    UserMessage,
    assistant_message,
    messages_on_path,
    parse_session_entry,
    path_to,
    recover_jsonl,
    text,
    text_of,
    user_message,
)
from strategies import short_text

# Shared helpers. Nothing here calls a lab piece at import time.


def message_entry(entry_id: str, parent_id: str | None, message: AgentMessage) -> MessageSessionEntry:
    """A message entry at timestamp 1, as the course's fixtures build them."""
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, message=message)


def metadata_entry(entry_id: str, parent_id: str | None, key: str, value: JsonValue) -> MetadataSessionEntry:
    """A metadata entry at timestamp 1."""
    return MetadataSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, key=key, value=value)


def line_of(entry: SessionEntry) -> str:
    """One entry as JSON.stringify writes it, without the newline."""
    return json.dumps(entry.to_dict(), ensure_ascii=False, separators=(",", ":"))


def committed(*entries: SessionEntry) -> str:
    """JSONL text whose every line is committed (ends in a newline)."""
    return "".join(line_of(entry) + "\n" for entry in entries)


def wire(entry: SessionEntry) -> dict[str, Any]:
    """A deep-copied wire dict of `entry`, for a test to spoil one field of."""
    return json.loads(json.dumps(entry.to_dict()))  # type: ignore[no-any-return]


def first_text(entry: SessionEntry) -> TextContent:
    """The first block of a user message entry (the fixtures put a text block there)."""
    assert isinstance(entry, MessageSessionEntry)
    block = entry.message.content[0]
    assert isinstance(block, TextContent)
    return block


def ids(entries: list[SessionEntry]) -> list[str]:
    """The ids of some entries, in order."""
    return [entry.id for entry in entries]


def error_of(function: Callable[[], object]) -> str:
    """The message of the ValueError that `function` raises."""
    with pytest.raises(ValueError) as caught:
        function()
    return str(caught.value)


async def rejection_of(awaitable: Awaitable[object]) -> BaseException:
    """The exception an awaitable fails with; a success fails the test."""
    try:
        await awaitable
    except Exception as error:
        return error
    raise AssertionError("预期被拒绝，但它成功了")


class FileIO:
    """A `SessionFileIO` over a real file, counting its calls; `on_append` replaces the plain append.

    The hook gets the line and the call's index and may write part of it (with `write`) and fail, the
    way the course's test I/O does, only here the bytes land in the real file.
    """

    def __init__(self) -> None:
        self.ensure_calls = 0
        self.read_calls = 0
        self.append_calls: list[str] = []
        self.on_append: Callable[[str, int], Awaitable[None]] | None = None

    async def ensure_file(self, file: str) -> None:
        self.ensure_calls += 1
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        Path(file).touch()

    async def read_file(self, file: str) -> str:
        self.read_calls += 1
        return Path(file).read_bytes().decode("utf-8")

    async def append_file(self, file: str, value: str) -> None:
        index = len(self.append_calls)
        self.append_calls.append(value)
        if self.on_append is not None:
            await self.on_append(value, index)
            return
        self.write(file, value)

    @staticmethod
    def write(file: str, value: str) -> None:
        """Append `value` to the real file."""
        with open(file, "ab") as handle:
            handle.write(value.encode("utf-8"))


# ## Lab 10.1 · path_to


@pytest.mark.lab10_1
def test_path_to_chooses_a_branch_and_diagnoses_only_the_chosen_ancestors() -> None:
    """path_to 是否按 leaf 选出 root 到 leaf 的分支，并只对被选中的祖先链报告未知 leaf、缺失 parent 与环？"""
    entries: list[SessionEntry] = [
        message_entry("root", None, user_message("root")),
        message_entry("left", "root", assistant_message([text("left")])),
        message_entry("right", "root", assistant_message([text("right")])),
        message_entry("other-root", None, user_message("other")),
        message_entry("unselected-broken", "missing", user_message("later")),
    ]

    assert ids(path_to(entries, "left")) == ["root", "left"]
    assert ids(path_to(entries, "right")) == ["root", "right"]
    assert ids(path_to(entries, "other-root")) == ["other-root"]
    assert error_of(lambda: path_to(entries, "unknown-leaf")) == "未知 session leaf：unknown-leaf"
    orphan = [message_entry("child", "missing-parent", user_message("x"))]
    assert error_of(lambda: path_to(orphan, "child")) == "session entry child 的 parent missing-parent 缺失"
    cycle = [
        message_entry("cycle-a", "cycle-b", user_message("a")),
        message_entry("cycle-b", "cycle-a", user_message("b")),
    ]
    assert error_of(lambda: path_to(cycle, "cycle-a")) == "session parent 在 cycle-a 形成环"
    longer = [
        message_entry("a", "c", user_message("a")),
        message_entry("b", "a", user_message("b")),
        message_entry("c", "b", user_message("c")),
    ]
    assert error_of(lambda: path_to(longer, "c")) == "session parent 在 c 形成环"


@pytest.mark.lab10_1
def test_path_to_refuses_duplicate_ids_anywhere_and_returns_deep_copies() -> None:
    """path_to 是否在整个日志里拒绝重复 id（哪怕不在所选分支上），返回值与输入是否互不共享？"""
    root = message_entry("root", None, user_message("before"))
    leaf = metadata_entry("leaf", "root", "mode", {"nested": ["safe"]})
    selected = path_to([root, leaf], "leaf")

    first_text(root).text = "source changed"
    assert first_text(selected[0]).text == "before"
    assert isinstance(selected[1], MetadataSessionEntry)
    value = selected[1].value
    assert isinstance(value, dict) and isinstance(value["nested"], list)
    value["nested"][0] = "result changed"
    assert leaf.value == {"nested": ["safe"]}

    duplicated: list[SessionEntry] = [
        root,
        leaf,
        message_entry("duplicate", None, user_message("one")),
        metadata_entry("duplicate", None, "branch", True),
    ]
    assert error_of(lambda: path_to(duplicated, "leaf")) == "session entry id 重复：duplicate"


@st.composite
def session_trees(draw: st.DrawFn) -> list[SessionEntry]:
    """A log in append order: each entry hangs under an earlier one or is a root."""
    count = draw(st.integers(min_value=1, max_value=12))
    entries: list[SessionEntry] = []
    for index in range(count):
        parent = draw(st.none() | st.sampled_from([entry.id for entry in entries])) if entries else None
        entry_id = f"e{index}"
        if draw(st.booleans()):
            entries.append(message_entry(entry_id, parent, user_message(draw(short_text))))
        else:
            entries.append(metadata_entry(entry_id, parent, "k", draw(short_text)))
    return entries


@pytest.mark.lab10_1
@given(entries=session_trees(), data=st.data())
def test_any_path_runs_from_a_root_down_parent_by_parent_to_the_leaf(
    entries: list[SessionEntry], data: st.DataObject
) -> None:
    """对任意一棵树和任意 leaf，路径是否从一个 root 开始、每一项的 parent 都是前一项，并停在 leaf？"""
    leaf = data.draw(st.sampled_from(entries))
    path = path_to(entries, leaf.id)

    by_id = {entry.id: entry for entry in entries}
    expected: list[str] = []
    current: SessionEntry | None = leaf
    while current is not None:
        expected.insert(0, current.id)
        current = by_id[current.parent_id] if current.parent_id is not None else None
    assert ids(path) == expected
    assert path == [by_id[entry_id] for entry_id in expected]
    assert all(copy_ is not by_id[copy_.id] for copy_ in path)


# ## Lab 10.2 · parse_session_entry


@pytest.mark.lab10_2
@pytest.mark.edits("parse_session_entry")
def test_parse_session_entry_narrows_both_kinds_and_copies_nested_payloads() -> None:
    """parse_session_entry 是否把 message 与 metadata 原样收窄出来，同时复制每一层嵌套的 payload？"""
    arguments = {"path": "a.txt", "flags": [True, None]}
    call = ToolCall(id="call-1", name="read", arguments=arguments, raw_arguments='{"path":"a.txt"}')
    source = message_entry(
        "assistant", None, assistant_message([text("checking"), call], "toolUse", timestamp=2)
    )

    parsed = parse_session_entry(source)
    assert parsed == source
    assert parsed is not source
    assert isinstance(parsed, MessageSessionEntry) and parsed.message.role == "assistant"
    parsed_call = parsed.message.content[1]
    assert isinstance(parsed_call, ToolCall)
    assert parsed_call.arguments == arguments
    assert parsed_call.arguments is not arguments
    assert parsed_call.raw_arguments == '{"path":"a.txt"}'

    metadata = metadata_entry("meta", None, "settings", {"nested": {"count": 2}})
    parsed_metadata = parse_session_entry(metadata)
    assert parsed_metadata == metadata
    assert parsed_metadata is not metadata
    assert isinstance(parsed_metadata, MetadataSessionEntry)
    assert parsed_metadata.value is not metadata.value

    # A JSONL line's dict narrows to the same dataclass entry.
    assert parse_session_entry(wire(source)) == source
    assert parse_session_entry(wire(metadata)) == metadata


@pytest.mark.lab10_2
@pytest.mark.edits("system_message_at")
def test_parse_session_entry_accepts_system_messages_and_checks_their_sections() -> None:
    """system message 是否作为普通 message entry 通过，None 段落（删除指令）是否保留，没有 sections 时是否不补
    空 dict？"""
    base = message_entry(
        "system",
        None,
        SystemMessage(
            content="You are Pi.", sections={"rules": "RULE v1", "scratch": "SCRATCH"}, timestamp=0
        ),
    )
    parsed = parse_session_entry(base)
    assert parsed == base
    assert parsed is not base
    assert isinstance(parsed, MessageSessionEntry) and isinstance(parsed.message, SystemMessage)
    assert isinstance(base.message, SystemMessage)
    assert parsed.message.sections is not base.message.sections

    patch = message_entry(
        "patch",
        "system",
        SystemMessage(content="", sections={"rules": "RULE v2", "scratch": None}, timestamp=2),
    )
    parsed_patch = parse_session_entry(patch)
    assert parsed_patch == patch, "None 段落是删除指令，必须原样保留"
    assert isinstance(parsed_patch, MessageSessionEntry) and isinstance(parsed_patch.message, SystemMessage)
    assert parsed_patch.message.sections == {"rules": "RULE v2", "scratch": None}

    plain = message_entry("plain", "patch", SystemMessage(content="no sections", timestamp=3))
    parsed_plain = parse_session_entry(plain)
    assert parsed_plain == plain
    assert isinstance(parsed_plain, MessageSessionEntry) and isinstance(parsed_plain.message, SystemMessage)
    assert parsed_plain.message.sections is None, "没有 sections 时不补空 dict"
    assert "sections" not in parsed_plain.message.to_dict()
    assert parse_session_entry(wire(plain)) == plain


def user_entry_wire(**changes: Any) -> dict[str, Any]:
    """A valid user message entry's wire dict, with `changes` applied to the entry."""
    value = wire(message_entry("x", None, UserMessage(content=[text("x")], timestamp=1)))
    value.update(changes)
    return value


def with_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message entry's wire dict around a given message dict."""
    return {"id": "x", "parentId": None, "timestamp": 1, "type": "message", "message": message}


def assistant_wire(**changes: Any) -> dict[str, Any]:
    """A valid assistant message's wire dict, with `changes` applied to the message."""
    message: dict[str, Any] = assistant_message([text("x")], timestamp=1).to_dict()
    message.update(changes)
    return message


def tool_result_wire(**changes: Any) -> dict[str, Any]:
    """A valid tool result's wire dict, with `changes` applied to the message."""
    message: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": "call",
        "toolName": "run",
        "content": [{"type": "text", "text": "done"}],
        "isError": False,
        "timestamp": 1,
    }
    message.update(changes)
    return message


def metadata_wire(value: object) -> dict[str, Any]:
    """A metadata entry's wire dict holding `value` (not necessarily JSON)."""
    return {"id": "x", "parentId": None, "timestamp": 1, "type": "metadata", "key": "bad", "value": value}


def cyclic_dict() -> dict[str, Any]:
    """A dict that holds itself."""
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def cyclic_list() -> list[Any]:
    """A list that holds itself."""
    value: list[Any] = []
    value.append(value)
    return value


class Tagged(list[int]):
    """A list subclass: a list that carries more than its items."""


#: The course's matrix of values that must not cross the boundary, each with the exact message.
#: A row's message is the exact literal, or the literals it may be when a later checkpoint (whose
#: solution this test also runs against) reads the same field: from 15 on, toolsAdded is a known
#: system message field, so an empty one is refused for being empty instead of for being unknown.
INVALID_ENTRIES: list[tuple[str, Callable[[], object], str | tuple[str, ...]]] = [
    ("array", lambda: [], "session entry 必须是 object"),
    ("empty id", lambda: user_entry_wire(id=""), "session entry.id 必须是非空 string"),
    (
        "NaN timestamp",
        lambda: user_entry_wire(timestamp=float("nan")),
        "session entry x.timestamp 必须是 finite number",
    ),
    (
        "Infinity timestamp",
        lambda: user_entry_wire(timestamp=float("inf")),
        "session entry x.timestamp 必须是 finite number",
    ),
    (
        "missing message payload",
        lambda: {"id": "x", "parentId": None, "timestamp": 1, "type": "message"},
        "session entry x 缺少 message payload",
    ),
    (
        "unknown nested role",
        lambda: with_message({"role": "tool", "content": [], "timestamp": 1}),
        "session entry x.message.role 不是已知 AgentMessage",
    ),
    (
        "system content not string",
        lambda: with_message({"role": "system", "content": [], "timestamp": 1}),
        "session entry x.message.content 必须是 string",
    ),
    (
        "system sections not object",
        lambda: with_message({"role": "system", "content": "base", "sections": ["rules"], "timestamp": 1}),
        "session entry x.message.sections 必须是 object",
    ),
    (
        "system section value not string or null",
        lambda: with_message({"role": "system", "content": "base", "sections": {"rules": 7}, "timestamp": 1}),
        "session entry x.message.sections.rules 必须是 string 或 null",
    ),
    (
        "system unknown field",
        lambda: with_message({"role": "system", "content": "base", "toolsAdded": [], "timestamp": 1}),
        (
            "session entry x.message 包含未知字段 toolsAdded",
            "session entry x.message.toolsAdded 必须是非空 array",
        ),
    ),
    (
        "unknown nested field",
        lambda: with_message({**user_message("x").to_dict(), "silentlyDropped": True}),
        "session entry x.message 包含未知字段 silentlyDropped",
    ),
    (
        "unknown content block",
        lambda: with_message(
            {"role": "user", "content": [{"type": "image", "url": "secret"}], "timestamp": 1}
        ),
        "session entry x.message.content[0] 包含未知字段 url",
    ),
    (
        "NaN usage",
        lambda: with_message(assistant_wire(usage={"input": 1, "output": 1, "totalTokens": float("nan")})),
        "session entry x.message.usage.totalTokens 必须是 finite number",
    ),
    (
        "function arguments",
        lambda: with_message(
            assistant_wire(
                content=[
                    {
                        "type": "toolCall",
                        "id": "call",
                        "name": "run",
                        "arguments": {"callback": lambda: "lost"},
                    }
                ],
                stopReason="toolUse",
            )
        ),
        "session entry x.message.content[0].arguments.callback 必须是 object",
    ),
    (
        "Infinity details",
        lambda: with_message(tool_result_wire(details={"duration": float("inf")})),
        "session entry x.message.details.duration 必须是 finite number",
    ),
    (
        "absent metadata value",
        lambda: {"id": "x", "parentId": None, "timestamp": 1, "type": "metadata", "key": "bad"},
        "session entry x 缺少 metadata value",
    ),
    (
        "a number type JSON has not (the course's BigInt)",
        lambda: metadata_wire({"count": Decimal(1)}),
        "session entry x.value.count 必须是普通 JSON object",
    ),
    (
        "unknown field",
        lambda: {**metadata_wire(True), "ignoredByJson": "must reject"},
        "session entry x 包含未知字段 ignoredByJson",
    ),
]

#: More of the boundary: Python's own ways to be not quite JSON, and each remaining literal message.
MORE_INVALID_ENTRIES: list[tuple[str, Callable[[], object], str]] = [
    (
        "bool timestamp",
        lambda: user_entry_wire(timestamp=True),
        "session entry x.timestamp 必须是 finite number",
    ),
    (
        "absent parentId",
        lambda: {k: v for k, v in user_entry_wire().items() if k != "parentId"},
        "session entry x.parentId 必须是非空 string",
    ),
    ("blank parentId", lambda: user_entry_wire(parentId="  "), "session entry x.parentId 必须是非空 string"),
    ("blank metadata key", lambda: {**metadata_wire(1), "key": " "}, "session entry x.key 必须是非空 string"),
    (
        "dict subclass",
        lambda: metadata_wire(OrderedDict(a=1)),
        "session entry x.value 必须是普通 JSON object",
    ),
    (
        "dataclass inside JSON",
        lambda: metadata_wire(text("x")),
        "session entry x.value 必须是普通 JSON object",
    ),
    ("non-str key", lambda: metadata_wire({1: "one"}), "session entry x.value 不能包含 symbol 字段"),
    ("list subclass", lambda: metadata_wire(Tagged([1])), "session entry x.value 必须是连续的 JSON array"),
    ("cyclic dict", lambda: metadata_wire(cyclic_dict()), "session entry x.value.self 不能形成循环引用"),
    ("cyclic list", lambda: metadata_wire(cyclic_list()), "session entry x.value[0] 不能形成循环引用"),
    (
        "bool usage",
        lambda: with_message(assistant_wire(usage={"input": True, "output": 1, "totalTokens": 1})),
        "session entry x.message.usage.input 必须是 finite number",
    ),
    (
        "negative usage",
        lambda: with_message(assistant_wire(usage={"input": 1, "output": -1, "totalTokens": 0})),
        "session entry x.message.usage 的 token 数不能小于 0",
    ),
    (
        "unknown stop reason",
        lambda: with_message(assistant_wire(stopReason="done")),
        "session entry x.message.stopReason 不是已知终态",
    ),
    (
        "provider not string",
        lambda: with_message(assistant_wire(provider=None)),
        "session entry x.message.provider 必须是 string",
    ),
    (
        "model not string",
        lambda: with_message(assistant_wire(model=1)),
        "session entry x.message.model 必须是 string",
    ),
    (
        "errorMessage not string",
        lambda: with_message(assistant_wire(errorMessage=None)),
        "session entry x.message.errorMessage 必须是 string",
    ),
    (
        "assistant content not array",
        lambda: with_message(assistant_wire(content="x")),
        "session entry x.message.content 必须是 array",
    ),
    (
        "unknown assistant block",
        lambda: with_message(assistant_wire(content=[{"type": "image"}])),
        "session entry x.message.content[0].type 不是已知 content block",
    ),
    (
        "text block type",
        lambda: with_message(
            {"role": "user", "content": [{"type": "toolCall", "text": "x"}], "timestamp": 1}
        ),
        "session entry x.message.content[0].type 必须是 text",
    ),
    (
        "text not string",
        lambda: with_message({"role": "user", "content": [{"type": "text", "text": 1}], "timestamp": 1}),
        "session entry x.message.content[0].text 必须是 string",
    ),
    (
        "tool call without id",
        lambda: with_message(
            assistant_wire(content=[{"type": "toolCall", "id": "", "name": "run", "arguments": {}}])
        ),
        "session entry x.message.content[0].id 必须是非空 string",
    ),
    (
        "tool call without arguments",
        lambda: with_message(assistant_wire(content=[{"type": "toolCall", "id": "c", "name": "run"}])),
        "session entry x.message.content[0].arguments 必须是 object",
    ),
    (
        "rawArguments not string",
        lambda: with_message(
            assistant_wire(
                content=[{"type": "toolCall", "id": "c", "name": "run", "arguments": {}, "rawArguments": 1}]
            )
        ),
        "session entry x.message.content[0].rawArguments 必须是 string",
    ),
    (
        "isError not boolean",
        lambda: with_message(tool_result_wire(isError=0)),
        "session entry x.message.isError 必须是 boolean",
    ),
    (
        "blank toolCallId",
        lambda: with_message(tool_result_wire(toolCallId="")),
        "session entry x.message.toolCallId 必须是非空 string",
    ),
    (
        "user content not array",
        lambda: with_message({"role": "user", "content": "x", "timestamp": 1}),
        "session entry x.message.content 必须是 array",
    ),
    (
        "message timestamp",
        lambda: with_message({"role": "user", "content": [], "timestamp": float("-inf")}),
        "session entry x.message.timestamp 必须是 finite number",
    ),
]


@pytest.mark.lab10_2
@pytest.mark.edits("parse_session_entry")
@pytest.mark.parametrize(
    ("label", "make", "message"), INVALID_ENTRIES, ids=[row[0] for row in INVALID_ENTRIES]
)
def test_parse_session_entry_refuses_unknown_shapes_and_values_that_are_not_json_safe(
    label: str, make: Callable[[], object], message: str | tuple[str, ...]
) -> None:
    """课程列出的每一种未知形状或非 JSON-safe 值，是否都被运行时边界拒绝，并给出契约里一字不差的消息？"""
    allowed = message if isinstance(message, tuple) else (message,)
    assert error_of(lambda: parse_session_entry(make())) in allowed, f"{label} 不应通过运行时边界"


#: The message for an unknown entry type names the types the boundary knows, and checkpoint 11 adds
#: compaction to them; this test also runs against later checkpoints' solutions, so it takes either literal.
UNKNOWN_TYPE_MESSAGES = (
    "session entry x.type 不是 message 或 metadata",
    "session entry x.type 不是 message、metadata 或 compaction",
)


@pytest.mark.lab10_2
@pytest.mark.edits("parse_session_entry")
def test_parse_session_entry_refuses_an_entry_type_it_does_not_know() -> None:
    """type 不是已知 entry 类型时，运行时边界是否拒绝它，并用契约里的消息说出自己认识哪些类型？"""
    wire: dict[str, object] = {"id": "x", "parentId": None, "timestamp": 1, "type": "snapshot", "summary": {}}
    assert error_of(lambda: parse_session_entry(wire)) in UNKNOWN_TYPE_MESSAGES


@pytest.mark.lab10_2
@pytest.mark.edits("parse_session_entry", "finite_number")
@pytest.mark.parametrize(
    ("label", "make", "message"), MORE_INVALID_ENTRIES, ids=[row[0] for row in MORE_INVALID_ENTRIES]
)
def test_parse_session_entry_refuses_python_values_that_json_cannot_carry(
    label: str, make: Callable[[], object], message: str
) -> None:
    """bool 当数字、缺少 parentId、dict 子类、非 str 键、循环引用等 Python 特有的非 JSON 值，是否都得到契约里
    的消息？"""
    assert error_of(lambda: parse_session_entry(make())) == message, f"{label} 不应通过运行时边界"


@pytest.mark.lab10_2
@pytest.mark.edits("json_value_at")
def test_the_same_object_twice_side_by_side_is_no_cycle_and_each_place_gets_its_own_copy() -> None:
    """同一个对象在 JSON 值里并排出现两次时，是否不被当作环，而且两个位置各得到一份独立副本？"""
    shared = {"n": 1}
    parsed = parse_session_entry(metadata_wire({"a": shared, "b": [shared, shared]}))
    assert isinstance(parsed, MetadataSessionEntry)
    assert parsed.value == {"a": {"n": 1}, "b": [{"n": 1}, {"n": 1}]}
    value = parsed.value
    assert isinstance(value, dict) and isinstance(value["b"], list)
    assert value["a"] is not shared and value["b"][0] is not value["b"][1]


finite_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | short_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(short_text, children, max_size=3),
    max_leaves=8,
)


@pytest.mark.lab10_2
@pytest.mark.edits("json_value_at")
@given(value=finite_json)
def test_any_finite_json_value_survives_the_boundary_equal_and_unshared(value: Any) -> None:
    """任意有限的 JSON 值作为 metadata 通过边界后，是否与原值相等、写成 JSON 也相同，且不共享任何容器？"""
    parsed = parse_session_entry(metadata_wire(value))
    assert isinstance(parsed, MetadataSessionEntry)
    assert parsed.value == value
    assert json.dumps(parsed.value) == json.dumps(value)

    def containers(item: Any) -> list[int]:
        if isinstance(item, list):
            return [id(item), *(i for child in item for i in containers(child))]
        if isinstance(item, dict):
            return [id(item), *(i for child in item.values() for i in containers(child))]
        return []

    assert not set(containers(parsed.value)) & set(containers(value))


# ## Lab 10.3 · InMemorySessionStore


@pytest.mark.lab10_3
@pytest.mark.edits("InMemorySessionStore.append")
def test_in_memory_append_snapshots_at_the_call_and_commits_in_fifo_order() -> None:
    """InMemory append 是否在调用时取快照（之后改原对象无效）、按调用顺序提交，entries() 是否每次返回新副
    本？"""

    async def scenario() -> None:
        store = InMemorySessionStore()
        root = message_entry("root", None, user_message("original"))
        child = metadata_entry("child", "root", "mode", {"value": "original"})
        settled: list[str] = []

        async def note(awaitable: Awaitable[None], name: str) -> None:
            await awaitable
            settled.append(name)

        first = store.append(root)
        first_text(root).text = "mutated too late"
        second = store.append(child)
        child.id = "mutated-child"
        assert isinstance(child.value, dict)
        child.value["value"] = "mutated too late"

        await asyncio.gather(note(second, "child"), note(first, "root"))
        assert settled == ["root", "child"]
        first_read = await store.entries()
        assert ids(first_read) == ["root", "child"]
        assert first_text(first_read[0]).text == "original"
        assert isinstance(first_read[1], MetadataSessionEntry)
        assert first_read[1].value == {"value": "original"}
        first_text(first_read[0]).text = "mutated read"
        second_read = await store.entries()
        assert first_text(second_read[0]).text == "original"

    asyncio.run(scenario())


@pytest.mark.lab10_3
@pytest.mark.edits("InMemorySessionStore.append")
def test_in_memory_refuses_missing_parents_and_duplicate_ids_without_poisoning_the_queue() -> None:
    """InMemory 是否拒绝缺失 parent、非 JSON 值和重复 id，而且一次拒绝不影响之后合法的 append？"""

    async def scenario() -> None:
        store = InMemorySessionStore()
        missing = await rejection_of(store.append(message_entry("child", "missing", user_message("x"))))
        assert str(missing) == "session entry child 的 parent missing 尚不存在"
        bad_json = metadata_entry("bad-json", None, "callback", None)
        bad_json.value = {"callback": lambda: "lost"}  # type: ignore[dict-item]
        not_json = await rejection_of(store.append(bad_json))
        assert str(not_json) == "session entry bad-json.value.callback 必须是 object"

        await store.append(message_entry("root", None, user_message("root")))
        duplicate = await rejection_of(store.append(metadata_entry("root", None, "duplicate", True)))
        assert str(duplicate) == "session entry id 重复：root"
        await store.append(metadata_entry("other-root", None, "ok", True))
        assert ids(await store.entries()) == ["root", "other-root"]

    asyncio.run(scenario())


@pytest.mark.lab10_3
@pytest.mark.edits("InMemorySessionStore.append")
def test_in_memory_child_called_right_after_its_parent_passes_and_a_failure_between_stays_its_own() -> None:
    """parent 与 child 连续调用、都还没 await 时，child 是否在 parent 提交后通过；夹在中间的失败是否只拒绝它自
    己？"""

    async def scenario() -> None:
        store = InMemorySessionStore()
        root = store.append(message_entry("root", None, user_message("root")))
        orphan = store.append(message_entry("orphan", "nowhere", user_message("x")))
        child = store.append(message_entry("child", "root", assistant_message([text("child")])))
        reading = store.entries()
        later = store.append(metadata_entry("later", "child", "mode", "late"))
        await root
        assert str(await rejection_of(orphan)) == "session entry orphan 的 parent nowhere 尚不存在"
        await child
        # entries() sees the appends called before it, not the one called after.
        assert ids(await reading) == ["root", "child"]
        await later
        assert ids(await store.entries()) == ["root", "child", "later"]

    asyncio.run(scenario())


# ## Lab 10.4 · recover_jsonl


@pytest.mark.lab10_4
def test_recover_jsonl_reads_committed_lines_and_skips_blank_ones() -> None:
    """recover_jsonl 是否读出所有以换行提交的行、跳过空白行，并且不产生 warning？"""
    root = message_entry("root", None, user_message("root"))
    child = metadata_entry("child", "root", "mode", "test")
    recovered = recover_jsonl(f"\n{line_of(root)}\n   \n{line_of(child)}\n\n")
    assert ids(recovered.entries) == ["root", "child"]
    assert recovered.entries == [root, child]
    assert recovered.warnings == []

    empty = recover_jsonl("")
    assert empty.entries == [] and empty.warnings == []
    # A last piece of whitespace only is a blank line, not a tail.
    assert recover_jsonl(committed(root) + "  \t").warnings == []


@pytest.mark.lab10_4
def test_recover_jsonl_treats_any_tail_without_a_newline_as_uncommitted() -> None:
    """没有换行的最后一段——完整合法的 entry、schema 错误的对象、半截 JSON——是否都被忽略并报告为第 2 行的未提交
    尾部？"""
    root = message_entry("root", None, user_message("root"))
    valid_tail = metadata_entry("tail", "root", "mode", "valid")
    for tail in (line_of(valid_tail), json.dumps({"id": "schema-invalid"}), '{"id":'):
        recovered = recover_jsonl(committed(root) + tail)
        assert ids(recovered.entries) == ["root"]
        assert recovered.warnings == [UnterminatedTailWarning(line=2)]
        assert recovered.warnings[0].to_dict() == {"code": "unterminated_tail", "line": 2}


@pytest.mark.lab10_4
def test_recover_jsonl_reports_the_physical_line_of_a_committed_bad_line() -> None:
    """已经换行提交的坏 JSON 或坏 schema，是否让 recover_jsonl 失败，并在消息里写出物理行号（空行也算一
    行）？"""
    root = message_entry("root", None, user_message("root"))
    bad_json = error_of(lambda: recover_jsonl(f"{committed(root)}BAD\n"))
    assert bad_json.startswith("session JSONL 第 2 行不是合法 JSON：")
    bad_schema = error_of(lambda: recover_jsonl(f"{committed(root)}{json.dumps({'id': 'bad'})}\n"))
    assert bad_schema.startswith("session JSONL 第 2 行不是合法 session entry：")
    assert (
        bad_schema
        == "session JSONL 第 2 行不是合法 session entry：session entry bad.parentId 必须是非空 string"
    )
    after_blanks = error_of(lambda: recover_jsonl(f"\n  \n{committed(root)}{{\n"))
    assert after_blanks.startswith("session JSONL 第 4 行不是合法 JSON：")
    # Python's decoder would take NaN; JSON has no such literal.
    nan_line = line_of(root).replace('"timestamp":1,', '"timestamp":NaN,', 1)
    assert error_of(lambda: recover_jsonl(nan_line + "\n")).startswith("session JSONL 第 1 行不是合法 JSON：")


@pytest.mark.lab10_4
@given(entries=session_trees(), tail=st.text(alphabet='{"a: \t', min_size=1, max_size=6))
def test_any_committed_log_reads_back_whole_and_a_tail_never_becomes_an_entry(
    entries: list[SessionEntry], tail: str
) -> None:
    """任意日志写成 JSONL 后是否原样读回；再接上任意没有换行的尾部，是否只多一条指向下一行的 warning？"""
    text_ = committed(*entries)
    assert recover_jsonl(text_).entries == entries
    recovered = recover_jsonl(text_ + tail)
    assert recovered.entries == entries
    expected = [] if not tail.strip() else [UnterminatedTailWarning(line=len(entries) + 1)]
    assert recovered.warnings == expected


# ## Lab 10.5 · JsonlSessionStore


@pytest.mark.lab10_5
@pytest.mark.edits("JsonlSessionStore.append", "JsonlSessionStore.open")
def test_jsonl_append_keeps_the_old_bytes_as_a_prefix_and_reopens_across_instances(tmp_path: Path) -> None:
    """真实文件上，被拒绝的 append 是否一个字节都不写、成功的 append 是否保留旧字节前缀，换一个实例重开是否读
    回同样的 entries？"""

    async def scenario() -> None:
        file = tmp_path / "session" / "run.jsonl"
        root = message_entry("root", None, user_message("root"))
        store = await JsonlSessionStore.open(file)
        assert file.read_bytes() == b""
        await store.append(root)
        before = file.read_bytes()
        orphan = await rejection_of(store.append(message_entry("orphan", "missing", user_message("orphan"))))
        assert str(orphan) == "session entry orphan 的 parent missing 尚不存在"
        duplicate = await rejection_of(store.append(metadata_entry("root", None, "duplicate", True)))
        assert str(duplicate) == "session entry id 重复：root"
        assert file.read_bytes() == before
        await store.append(message_entry("answer", "root", assistant_message([text("answer")])))
        after = file.read_bytes()
        assert after[: len(before)] == before
        assert after.endswith(b"\n")

        reopened = await JsonlSessionStore.open(str(file))
        assert ids(await reopened.entries()) == ["root", "answer"]
        assert (await reopened.read()).warnings == []
        assert (await reopened.read()).entries == await store.entries()

        invalid_schema = tmp_path / "invalid-schema.jsonl"
        invalid_schema.write_text(json.dumps({"id": "bad"}) + "\n", encoding="utf-8")
        error = await rejection_of(JsonlSessionStore.open(invalid_schema))
        assert str(error).startswith("session JSONL 第 1 行不是合法 session entry：")
        missing_parent = tmp_path / "missing-parent.jsonl"
        missing_parent.write_text(
            committed(message_entry("orphan-on-disk", "missing-on-disk", user_message("x"))), encoding="utf-8"
        )
        error = await rejection_of(JsonlSessionStore.open(missing_parent))
        assert str(error) == "session entry orphan-on-disk 的 parent missing-on-disk 尚不存在"
        duplicated = tmp_path / "duplicated.jsonl"
        duplicated.write_text(committed(root, metadata_entry("root", None, "k", 1)), encoding="utf-8")
        assert str(await rejection_of(JsonlSessionStore.open(duplicated))) == "session entry id 重复：root"

    asyncio.run(scenario())


@pytest.mark.lab10_5
@pytest.mark.edits("JsonlSessionStore.append")
def test_jsonl_serializes_at_the_call_and_writes_fifo_through_one_instance(tmp_path: Path) -> None:
    """Jsonl append 是否在调用时就序列化（之后改原对象无效），第一次写入卡住时第二次是否排队等待而不并发
    写？"""

    async def scenario() -> None:
        file = tmp_path / "memory.jsonl"
        io = FileIO()
        first_started = asyncio.Event()
        release_first = asyncio.Event()

        async def gated(value: str, index: int) -> None:
            if index == 0:
                first_started.set()
                await release_first.wait()
            io.write(str(file), value)

        io.on_append = gated
        store = await JsonlSessionStore.open(file, io)
        root = message_entry("root", None, user_message("before"))
        child = metadata_entry("child", "root", "mode", {"value": "before"})

        first = store.append(root)
        first_text(root).text = "after call"
        second = store.append(child)
        child.id = "after-call-id"
        assert isinstance(child.value, dict)
        child.value["value"] = "after call"

        await first_started.wait()
        assert len(io.append_calls) == 1
        release_first.set()
        await asyncio.gather(second, first)
        assert len(io.append_calls) == 2
        recovered = recover_jsonl(file.read_text(encoding="utf-8"))
        assert ids(recovered.entries) == ["root", "child"]
        assert first_text(recovered.entries[0]).text == "before"
        assert isinstance(recovered.entries[1], MetadataSessionEntry)
        assert recovered.entries[1].value == {"value": "before"}
        # One committed line per append, in JSON.stringify's compact form.
        assert io.append_calls == [line_of(entry) + "\n" for entry in recovered.entries]

    asyncio.run(scenario())


@pytest.mark.lab10_5
@pytest.mark.edits("JsonlSessionStore.append")
def test_an_append_io_failure_closes_the_writer_and_a_reopen_reads_only_until_repaired(
    tmp_path: Path,
) -> None:
    """append 的 I/O 失败后，排队中的和之后的 append、read 是否都得到同一个原始错误且不再碰 I/O；重开后是否只
    读并拒绝 append？"""

    async def scenario() -> None:
        healthy_io = FileIO()
        healthy = await JsonlSessionStore.open(tmp_path / "healthy.jsonl", healthy_io)
        bad = metadata_entry("bad", None, "callback", None)
        bad.value = {"callback": lambda: "lost"}  # type: ignore[dict-item]
        await rejection_of(healthy.append(bad))
        assert len(healthy_io.append_calls) == 0
        await healthy.append(message_entry("healthy-root", None, user_message("ok")))
        assert len(healthy_io.append_calls) == 1

        file = tmp_path / "broken.jsonl"
        root = message_entry("root", None, user_message("root"))
        file.write_text(committed(root), encoding="utf-8")
        io = FileIO()
        failure_started = asyncio.Event()
        release_failure = asyncio.Event()
        original_cause = OSError("disk append failed")

        async def half_write(value: str, index: int) -> None:
            io.write(str(file), value[:12])
            failure_started.set()
            await release_failure.wait()
            raise original_cause

        io.on_append = half_write
        store = await JsonlSessionStore.open(file, io)
        failing = store.append(metadata_entry("child", "root", "mode", "first"))
        already_queued = store.append(metadata_entry("other-root", None, "mode", "queued"))
        await failure_started.wait()
        release_failure.set()

        assert await rejection_of(failing) is original_cause
        assert await rejection_of(already_queued) is original_cause
        reads_before = io.read_calls
        assert (
            await rejection_of(store.append(metadata_entry("later", None, "mode", "later"))) is original_cause
        )
        assert await rejection_of(store.read()) is original_cause
        assert await rejection_of(store.entries()) is original_cause
        assert len(io.append_calls) == 1
        assert io.read_calls == reads_before

        # Reopened with the default, real-file I/O: the committed prefix reads, the half line is a tail.
        reopened = await JsonlSessionStore.open(file)
        recovered = await reopened.read()
        assert ids(recovered.entries) == ["root"]
        assert recovered.warnings == [UnterminatedTailWarning(line=2)]
        assert ids(await reopened.entries()) == ["root"]
        before = file.read_bytes()
        blocked = await rejection_of(reopened.append(metadata_entry("repair", "root", "mode", "blocked")))
        assert str(blocked) == "session 文件第 2 行有未提交尾部；修复前不能 append"
        assert file.read_bytes() == before
        assert len(io.append_calls) == 1

    asyncio.run(scenario())


@pytest.mark.lab10_5
@pytest.mark.edits("JsonlSessionStore.open")
def test_open_creates_the_file_and_its_folders_and_leaves_existing_bytes_alone(tmp_path: Path) -> None:
    """open 是否建出缺少的目录和空文件，对已有文件一个字节都不改（包括 \\r\\n 和未提交尾部）？"""

    async def scenario() -> None:
        fresh = tmp_path / "a" / "b" / "new.jsonl"
        store = await JsonlSessionStore.open(fresh)
        assert fresh.is_file() and fresh.read_bytes() == b""
        assert (await store.read()).entries == []

        existing = tmp_path / "existing.jsonl"
        root = message_entry("root", None, user_message("根"))
        data = (line_of(root) + "\r\n" + '{"id":"cut').encode("utf-8")
        existing.write_bytes(data)
        opened = await JsonlSessionStore.open(existing)
        assert existing.read_bytes() == data
        result = await opened.read()
        assert result.entries == [root]
        assert result.warnings == [UnterminatedTailWarning(line=2)]

    asyncio.run(scenario())


# ## Lab 10.6 · messages_on_path


@pytest.mark.lab10_6
def test_messages_on_path_projects_only_the_active_branch_and_keeps_tool_facts_whole() -> None:
    """messages_on_path 是否只投影活动分支、跳过 metadata，并完整保留 tool call 与 toolResult 的字段？"""
    arguments = {"path": "src/index.ts", "options": {"encoding": "utf8"}}
    call = ToolCall(id="call-read", name="read", arguments=arguments, raw_arguments='{"path":"src/index.ts"}')
    result = ToolResultMessage(
        tool_call_id="call-read",
        tool_name="read",
        content=[text("permission denied")],
        details={"code": "EACCES", "retryable": False},
        is_error=True,
        timestamp=3,
    )
    entries: list[SessionEntry] = [
        message_entry("root", None, user_message("inspect")),
        message_entry(
            "assistant", "root", assistant_message([text("I will inspect"), call], "toolUse", timestamp=2)
        ),
        metadata_entry("meta", "assistant", "cwd", "/workspace"),
        message_entry("result", "meta", result),
        message_entry("sibling", "root", assistant_message([text("wrong branch")])),
    ]

    messages = messages_on_path(entries, "result")
    assert [message.role for message in messages] == ["user", "assistant", "toolResult"]
    assert not any(text_of(message) == "wrong branch" for message in messages)
    assistant = messages[1]
    assert assistant.role == "assistant"
    assert assistant.content[1] == call
    projected = messages[2]
    assert isinstance(projected, ToolResultMessage)
    assert projected.tool_call_id == "call-read"
    assert projected.is_error is True
    assert projected.details == {"code": "EACCES", "retryable": False}
    assert projected == result

    sibling = messages_on_path(entries, "sibling")
    assert [text_of(message) for message in sibling] == ["inspect", "wrong branch"]


@pytest.mark.lab10_6
def test_messages_on_path_shares_no_arguments_details_or_list_with_its_input() -> None:
    """messages_on_path 的 arguments、details 和返回的 list 是否与输入互不共享：改输入不影响已投影的结果，改结
    果不影响下一次投影？"""
    arguments: dict[str, Any] = {"nested": {"path": "before.ts"}}
    details: dict[str, Any] = {"nested": {"bytes": 10}}
    call = ToolCall(id="call", name="read", arguments=arguments)
    result = ToolResultMessage(
        tool_call_id="call",
        tool_name="read",
        content=[text("done")],
        details=details,
        is_error=False,
        timestamp=3,
    )
    entries: list[SessionEntry] = [
        message_entry("root", None, user_message("root")),
        message_entry("assistant", "root", assistant_message([call], "toolUse", timestamp=2)),
        message_entry("result", "assistant", result),
    ]
    messages = messages_on_path(entries, "result")

    arguments["nested"]["path"] = "source-mutated.ts"
    details["nested"]["bytes"] = 99
    projected_call = messages[1].content[0]
    projected_result = messages[2]
    assert isinstance(projected_call, ToolCall) and isinstance(projected_result, ToolResultMessage)
    assert projected_call.arguments == {"nested": {"path": "before.ts"}}
    assert projected_result.details == {"nested": {"bytes": 10}}

    assert isinstance(projected_call.arguments, dict) and isinstance(projected_result.details, dict)
    projected_call.arguments["nested"]["path"] = "output-mutated.ts"
    projected_result.details["nested"]["bytes"] = -1
    messages.clear()
    again = messages_on_path(entries, "result")
    call_again = again[1].content[0]
    result_again = again[2]
    assert isinstance(call_again, ToolCall) and isinstance(result_again, ToolResultMessage)
    assert call_again.arguments == {"nested": {"path": "source-mutated.ts"}}
    assert result_again.details == {"nested": {"bytes": 99}}
    assert len(entries) == 3


@pytest.mark.lab10_6
@given(entries=session_trees(), data=st.data())
def test_messages_on_path_are_the_messages_of_path_to_in_order(
    entries: list[SessionEntry], data: st.DataObject
) -> None:
    """对任意一棵树和任意 leaf，messages_on_path 是否正好是 path_to 路径上各条 message 的消息，顺序不变？"""
    leaf = data.draw(st.sampled_from(entries))
    by_id = {entry.id: entry for entry in entries}
    expected: list[AgentMessage] = []
    current: SessionEntry | None = leaf
    while current is not None:
        if isinstance(current, MessageSessionEntry):
            expected.insert(0, current.message)
        current = by_id[current.parent_id] if current.parent_id is not None else None
    projected = messages_on_path(entries, leaf.id)
    assert projected == expected
    assert all(mine is not theirs for mine, theirs in zip(projected, expected, strict=True))
    assert copy.deepcopy(projected) == projected
