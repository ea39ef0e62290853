"""The session as an append-only tree of entries: narrowed at the boundary, stored in order, replayed by path.

An entry points at its parent by id, so one log holds every branch of a conversation; choosing a leaf
chooses the branch. Anything that enters the log (from a caller or from a JSONL file) is first narrowed
to the canonical entry shape and copied, so nobody outside can change what was stored.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import math
import os
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, cast

from .messages import (
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    StopReason,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolDefinition,
    ToolReference,
    ToolResultMessage,
    Usage,
    UserMessage,
)

_T = TypeVar("_T")

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"


@dataclass
class MessageSessionEntry:
    """One message of the conversation, hung under `parent_id` (None: a root)."""

    id: str
    parent_id: str | None
    timestamp: int
    message: AgentMessage
    type: Literal["message"] = "message"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, one JSONL line's object."""
        return {
            "id": self.id,
            "parentId": self.parent_id,
            "timestamp": self.timestamp,
            "type": self.type,
            "message": self.message.to_dict(),
        }


@dataclass
class MetadataSessionEntry:
    """A named JSON value on the path (a mode, a cwd); it never reaches the model."""

    id: str
    parent_id: str | None
    timestamp: int
    key: str
    value: JsonValue
    type: Literal["metadata"] = "metadata"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, one JSONL line's object."""
        return {
            "id": self.id,
            "parentId": self.parent_id,
            "timestamp": self.timestamp,
            "type": self.type,
            "key": self.key,
            "value": self.value,
        }


@dataclass
class CompactionSummary:
    """The seven fields a compaction keeps of the history it stands for, each list one fact a line."""

    goal: str
    constraints: list[str]
    completed: list[str]
    decisions: list[str]
    changed_files: list[str]
    unresolved: list[str]
    next: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "goal": self.goal,
            "constraints": list(self.constraints),
            "completed": list(self.completed),
            "decisions": list(self.decisions),
            "changedFiles": list(self.changed_files),
            "unresolved": list(self.unresolved),
            "next": list(self.next),
        }


@dataclass
class CompactionSessionEntry:
    """A summary appended after the leaf: nothing before it is removed, and a context rebuilt from it
    keeps the original messages from `first_kept_entry_id` on. It always has a parent."""

    id: str
    parent_id: str
    timestamp: int
    summary: CompactionSummary
    first_kept_entry_id: str
    tokens_before: float
    type: Literal["compaction"] = "compaction"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, one JSONL line's object."""
        return {
            "id": self.id,
            "parentId": self.parent_id,
            "timestamp": self.timestamp,
            "type": self.type,
            "summary": self.summary.to_dict(),
            "firstKeptEntryId": self.first_kept_entry_id,
            "tokensBefore": self.tokens_before,
        }


SessionEntry: TypeAlias = MessageSessionEntry | MetadataSessionEntry | CompactionSessionEntry


class SessionStore(Protocol):
    """Where entries are kept. Both calls take effect in call order (FIFO), whatever is awaited first."""

    def append(self, entry: SessionEntry) -> Awaitable[None]: ...

    def entries(self) -> Awaitable[list[SessionEntry]]: ...


@dataclass
class UnterminatedTailWarning:
    """The file ends in a line no newline committed; `line` is its physical (1-based) number."""

    line: int
    code: Literal["unterminated_tail"] = "unterminated_tail"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"code": self.code, "line": self.line}


@dataclass
class SessionReadResult:
    """The committed entries of a JSONL text, and what recovery had to leave out."""

    entries: list[SessionEntry]
    warnings: list[UnterminatedTailWarning]


class SessionFileIO(Protocol):
    """The file system seam of the JSONL store, kept narrow on purpose: a test can decide exactly when an
    append starts, fails or writes only part of its line, with no clock involved."""

    async def ensure_file(self, file: str) -> None: ...

    async def read_file(self, file: str) -> str: ...

    async def append_file(self, file: str, value: str) -> None: ...


class _DiskSessionFileIO:
    """The default seam: real files, UTF-8, the blocking calls run in a worker thread."""

    async def ensure_file(self, file: str) -> None:
        await asyncio.to_thread(_ensure_file, file)

    async def read_file(self, file: str) -> str:
        # Bytes, not text mode: universal newlines would turn "\r\n" into "\n" and hide what is on disk.
        # Undecodable bytes become U+FFFD, as a UTF-8 read does in the course.
        data = await asyncio.to_thread(Path(file).read_bytes)
        return data.decode("utf-8", errors="replace")

    async def append_file(self, file: str, value: str) -> None:
        await asyncio.to_thread(_append_bytes, file, value.encode("utf-8"))


def _ensure_file(file: str) -> None:
    """Create the parent folders and an empty file, leaving an existing file's bytes alone."""
    os.makedirs(os.path.dirname(file) or ".", exist_ok=True)
    with open(file, "ab"):
        pass


def _append_bytes(file: str, data: bytes) -> None:
    """Append at the end of the file, whatever else has the file open."""
    with open(file, "ab") as handle:
        handle.write(data)


_DISK_FILE_IO = _DiskSessionFileIO()


# -- reading untrusted values: given plumbing ------------------------------------------------------


class _Missing:
    """An absent key. JSON null is None, so a key that is not there needs a value of its own."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _get(record: dict[str, object], key: str) -> object:
    """The value under `key`, or _MISSING when the record has no such key."""
    return record.get(key, _MISSING)


def _own(record: dict[str, object], key: str) -> bool:
    """Whether the record itself holds `key` (its value may be null)."""
    return key in record


def _describe(error: BaseException) -> str:
    """The message of an error, for wrapping it in a line-numbered one."""
    return str(error)


# The kit's own message dataclasses, read field by field at the places the course reads an object.
_RECORD_CLASSES: tuple[type, ...] = (
    TextContent,
    ToolCall,
    Usage,
    UserMessage,
    AssistantMessage,
    ToolResultMessage,
    SystemMessage,
    ToolDefinition,
    ToolReference,
    MessageSessionEntry,
    MetadataSessionEntry,
    CompactionSummary,
    CompactionSessionEntry,
)

# Optional fields whose None means "absent": their wire forms leave the key out (see each to_dict).
_ABSENT_WHEN_NONE = frozenset(
    {"raw_arguments", "error_message", "sections", "details", "tools_added", "tools_removed"}
)


def _wire_key(name: str) -> str:
    """snake_case field name → the course's camelCase key."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _wire_record(value: object) -> dict[str, object]:
    """One level of a dataclass as the wire object it stands for; nested values are left as they are,
    so the narrowing below still checks (and copies) every one of them."""
    record: dict[str, object] = {}
    for field in dataclasses.fields(cast(Any, value)):
        item = getattr(value, field.name)
        if item is None and field.name in _ABSENT_WHEN_NONE:
            continue
        record[_wire_key(field.name)] = item
    return record


def _rejected(error: BaseException) -> asyncio.Future[_T]:
    """A future that has already failed: a refusal still arrives through the awaitable, never as a raise."""
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


async def _settled(previous: asyncio.Future[Any] | None) -> None:
    """Wait until `previous` has finished, however it finished; its failure belongs to its own caller."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])


# ## narrowing an untrusted value to a canonical entry, copying as it goes


def record_at(value: object, label: str, *, typed: bool = True) -> dict[str, object]:
    """Narrow `value` to a plain JSON object (a dict with str keys) and return it.

    With `typed`, one of the kit's own message or entry dataclasses counts as the object it stands for,
    read one level deep; inside JSON values (`typed=False`) a dataclass is not JSON and is refused.
    """
    if typed and type(value) in _RECORD_CLASSES:
        return _wire_record(value)
    if type(value) is not dict:
        # Values JSON has but that are no object, and callables and absent keys, which JSON has not.
        if (
            value is _MISSING
            or value is None
            or isinstance(value, bool | int | float | str | list)
            or callable(value)
        ):
            raise ValueError(f"{label} 必须是 object")
        # A dict subclass, a set, a Decimal, a dataclass inside a JSON value: an object, but not plain JSON.
        raise ValueError(f"{label} 必须是普通 JSON object")
    record = cast(dict[object, object], value)
    for key in record:
        if not isinstance(key, str):
            raise ValueError(f"{label} 不能包含 symbol 字段")
    return cast(dict[str, object], record)


def exact_keys(record: dict[str, object], allowed: Sequence[str], label: str) -> None:
    """Refuse any key outside `allowed`: a field dropped silently would be data lost silently."""
    allowed_keys = set(allowed)
    for key in record:
        if key not in allowed_keys:
            raise ValueError(f"{label} 包含未知字段 {key}")


def non_empty_string(value: object, label: str) -> str:
    """A string with something other than whitespace in it."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{label} 必须是非空 string")
    return value


def finite_number(value: object, label: str) -> int | float:
    """An int or a float, neither a bool nor NaN nor an infinity (JSON can carry none of those)."""
    # Exact types: bool is an int subclass, and an int is always finite (math.isfinite overflows on big ones).
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return value
    raise ValueError(f"{label} 必须是 finite number")


def json_value_at(value: object, label: str, ancestors: set[int] | None = None) -> JsonValue:
    """Narrow `value` to a JSON value and return a fresh copy of it; a cycle is refused, not followed."""
    seen = set() if ancestors is None else ancestors
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return finite_number(value, label)
    if isinstance(value, list):
        if id(value) in seen:
            raise ValueError(f"{label} 不能形成循环引用")
        if type(value) is not list:
            raise ValueError(f"{label} 必须是连续的 JSON array")
        # Only the current chain of ancestors counts: the same list twice side by side is no cycle.
        seen.add(id(value))
        items = [json_value_at(item, f"{label}[{index}]", seen) for index, item in enumerate(value)]
        seen.discard(id(value))
        return items
    record = record_at(value, label, typed=False)
    if id(record) in seen:
        raise ValueError(f"{label} 不能形成循环引用")
    seen.add(id(record))
    result: dict[str, JsonValue] = {
        key: json_value_at(item, f"{label}.{key}", seen) for key, item in record.items()
    }
    seen.discard(id(record))
    return result


def text_content_at(value: object, label: str) -> TextContent:
    """A text block: exactly `type` and `text`."""
    record = record_at(value, label)
    exact_keys(record, ["type", "text"], label)
    if _get(record, "type") != "text":
        raise ValueError(f"{label}.type 必须是 text")
    block_text = _get(record, "text")
    if not isinstance(block_text, str):
        raise ValueError(f"{label}.text 必须是 string")
    return TextContent(type="text", text=block_text)


def tool_call_at(value: object, label: str) -> ToolCall:
    """A tool call, its arguments copied as JSON; `rawArguments` only where the record has it."""
    record = record_at(value, label)
    exact_keys(record, ["type", "id", "name", "arguments", "rawArguments"], label)
    if _get(record, "type") != "toolCall":
        raise ValueError(f"{label}.type 必须是 toolCall")
    call = ToolCall(
        id=non_empty_string(_get(record, "id"), f"{label}.id"),
        name=non_empty_string(_get(record, "name"), f"{label}.name"),
        arguments=json_value_at(_get(record, "arguments"), f"{label}.arguments"),
    )
    if _own(record, "rawArguments"):
        raw = _get(record, "rawArguments")
        if not isinstance(raw, str):
            raise ValueError(f"{label}.rawArguments 必须是 string")
        call.raw_arguments = raw
    return call


def assistant_content_at(value: object, label: str) -> AssistantContent:
    """A text block or a tool call, told apart by `type`."""
    record = record_at(value, label)
    kind = _get(record, "type")
    if kind == "text":
        return text_content_at(record, label)
    if kind == "toolCall":
        return tool_call_at(record, label)
    raise ValueError(f"{label}.type 不是已知 content block")


def usage_at(value: object, label: str) -> Usage:
    """Three finite token counts, none below zero."""
    record = record_at(value, label)
    exact_keys(record, ["input", "output", "totalTokens"], label)
    tokens_in = finite_number(_get(record, "input"), f"{label}.input")
    tokens_out = finite_number(_get(record, "output"), f"{label}.output")
    total = finite_number(_get(record, "totalTokens"), f"{label}.totalTokens")
    if tokens_in < 0 or tokens_out < 0 or total < 0:
        raise ValueError(f"{label} 的 token 数不能小于 0")
    # The kit types counts as int; a finite float from a file is kept as it is, not rounded.
    return Usage(input=cast(int, tokens_in), output=cast(int, tokens_out), total_tokens=cast(int, total))


def timestamp_at(value: object, label: str) -> int:
    """A message's timestamp: a finite number (kept exactly; the kit's messages type it as int)."""
    return cast(int, finite_number(value, f"{label}.timestamp"))


def system_message_at(record: dict[str, object], label: str) -> SystemMessage:
    """A system message is an ordinary message entry: a string content, and sections of string or None
    (None deletes a section, so it is kept, never dropped); no sections stays no sections. Since 15 it
    may declare tools (`toolsAdded`) and withdraw them (`toolsRemoved`); an absent list stays absent."""
    exact_keys(record, ["role", "content", "sections", "toolsAdded", "toolsRemoved", "timestamp"], label)
    content = _get(record, "content")
    if not isinstance(content, str):
        raise ValueError(f"{label}.content 必须是 string")
    message = SystemMessage(content=content, timestamp=timestamp_at(_get(record, "timestamp"), label))
    if _own(record, "sections"):
        sections = record_at(_get(record, "sections"), f"{label}.sections", typed=False)
        parsed: dict[str, str | None] = {}
        for name, section in sections.items():
            if section is not None and not isinstance(section, str):
                raise ValueError(f"{label}.sections.{name} 必须是 string 或 null")
            parsed[name] = section
        message.sections = parsed
    if _own(record, "toolsAdded"):
        message.tools_added = tools_added_at(_get(record, "toolsAdded"), f"{label}.toolsAdded")
    if _own(record, "toolsRemoved"):
        message.tools_removed = tools_removed_at(_get(record, "toolsRemoved"), f"{label}.toolsRemoved")
    return message


# ## Lab 15.2 · a tool declaration crosses the strict boundary


def tools_added_at(value: object, label: str) -> list[ToolDefinition]:
    """A non-empty list of full tool definitions, each read into a new definition (the list is given)."""
    # The loop leaves an empty side out, so an empty list means someone else wrote the file.
    if type(value) is not list or not value:
        raise ValueError(f"{label} 必须是非空 array")
    return [tool_definition_at(item, f"{label}[{index}]") for index, item in enumerate(value)]


def tools_removed_at(value: object, label: str) -> list[ToolReference]:
    """A non-empty list of tool references, each read into a new reference (the list is given)."""
    if type(value) is not list or not value:
        raise ValueError(f"{label} 必须是非空 array")
    return [tool_reference_at(item, f"{label}[{index}]") for index, item in enumerate(value)]


def tool_definition_at(value: object, label: str) -> ToolDefinition:
    """One declared tool: exactly a non-empty `name`, a string `description` and `parameters`, a JSON
    object copied afresh."""
    # BEGIN LAB 15.2
    record = record_at(value, label)
    exact_keys(record, ["name", "description", "parameters"], label)
    name = non_empty_string(_get(record, "name"), f"{label}.name")
    description = _get(record, "description")
    if not isinstance(description, str):
        raise ValueError(f"{label}.description 必须是 string")
    parameters = _get(record, "parameters")
    # A JSON object only: null, an array or a string is no parameter schema.
    if type(parameters) is not dict:
        raise ValueError(f"{label}.parameters 必须是 JSON object")
    copied = cast(dict[str, Any], json_value_at(parameters, f"{label}.parameters"))
    return ToolDefinition(name=name, description=description, parameters=copied)
    # END LAB 15.2


def tool_reference_at(value: object, label: str) -> ToolReference:
    """One withdrawn tool: exactly a non-empty `name`."""
    # BEGIN LAB 15.2
    record = record_at(value, label)
    exact_keys(record, ["name"], label)
    return ToolReference(name=non_empty_string(_get(record, "name"), f"{label}.name"))
    # END LAB 15.2


# ## the other three messages (given since 10)


def user_message_at(record: dict[str, object], label: str) -> UserMessage:
    """A user message: text blocks only."""
    exact_keys(record, ["role", "content", "timestamp"], label)
    content = _get(record, "content")
    if not isinstance(content, list):
        raise ValueError(f"{label}.content 必须是 array")
    blocks = [text_content_at(block, f"{label}.content[{index}]") for index, block in enumerate(content)]
    return UserMessage(content=blocks, timestamp=timestamp_at(_get(record, "timestamp"), label))


_STOP_REASONS = frozenset({"stop", "length", "toolUse", "error", "aborted"})


def assistant_message_at(record: dict[str, object], label: str) -> AssistantMessage:
    """An assistant message: its blocks, provider, model, usage and one of the known stop reasons."""
    exact_keys(
        record,
        ["role", "content", "provider", "model", "usage", "stopReason", "errorMessage", "timestamp"],
        label,
    )
    content = _get(record, "content")
    if not isinstance(content, list):
        raise ValueError(f"{label}.content 必须是 array")
    provider = _get(record, "provider")
    if not isinstance(provider, str):
        raise ValueError(f"{label}.provider 必须是 string")
    model = _get(record, "model")
    if not isinstance(model, str):
        raise ValueError(f"{label}.model 必须是 string")
    stop_reason = _get(record, "stopReason")
    if not isinstance(stop_reason, str) or stop_reason not in _STOP_REASONS:
        raise ValueError(f"{label}.stopReason 不是已知终态")
    message = AssistantMessage(
        content=[
            assistant_content_at(block, f"{label}.content[{index}]") for index, block in enumerate(content)
        ],
        provider=provider,
        model=model,
        usage=usage_at(_get(record, "usage"), f"{label}.usage"),
        stop_reason=cast(StopReason, stop_reason),
        timestamp=timestamp_at(_get(record, "timestamp"), label),
    )
    if _own(record, "errorMessage"):
        error_message = _get(record, "errorMessage")
        if not isinstance(error_message, str):
            raise ValueError(f"{label}.errorMessage 必须是 string")
        message.error_message = error_message
    return message


def tool_result_message_at(record: dict[str, object], label: str) -> ToolResultMessage:
    """A tool result: its call's id and name, text blocks, is_error, and JSON details if any."""
    exact_keys(
        record,
        ["role", "toolCallId", "toolName", "content", "details", "isError", "timestamp"],
        label,
    )
    content = _get(record, "content")
    if not isinstance(content, list):
        raise ValueError(f"{label}.content 必须是 array")
    is_error = _get(record, "isError")
    if not isinstance(is_error, bool):
        raise ValueError(f"{label}.isError 必须是 boolean")
    message = ToolResultMessage(
        tool_call_id=non_empty_string(_get(record, "toolCallId"), f"{label}.toolCallId"),
        tool_name=non_empty_string(_get(record, "toolName"), f"{label}.toolName"),
        content=[text_content_at(block, f"{label}.content[{index}]") for index, block in enumerate(content)],
        details=None,
        is_error=is_error,
        timestamp=timestamp_at(_get(record, "timestamp"), label),
    )
    if _own(record, "details"):
        message.details = json_value_at(_get(record, "details"), f"{label}.details")
    return message


def agent_message_at(value: object, label: str) -> AgentMessage:
    """One of the four messages, told apart by `role`."""
    record = record_at(value, label)
    role = _get(record, "role")
    if role == "system":
        return system_message_at(record, label)
    if role == "user":
        return user_message_at(record, label)
    if role == "assistant":
        return assistant_message_at(record, label)
    if role == "toolResult":
        return tool_result_message_at(record, label)
    raise ValueError(f"{label}.role 不是已知 AgentMessage")


# ## a compaction entry crosses the same strict boundary (given since 11)


def string_array_at(value: object, label: str) -> list[str]:
    """A new list holding the same strings, or an error naming the first member that is not one."""
    if not isinstance(value, list):
        raise ValueError(f"{label} 必须是 string[]")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"{label}[{index}] 必须是 string")
    # A new list: changing the caller's list later must not change the stored summary.
    return list(value)


def compaction_summary_at(value: object, label: str) -> CompactionSummary:
    """The seven summary fields read one by one into a new summary; no other key is accepted."""
    record = record_at(value, label)
    # An old alias (files, nextSteps, invariants) is an unknown key: old records are migrated outside.
    exact_keys(
        record,
        ["goal", "constraints", "completed", "decisions", "changedFiles", "unresolved", "next"],
        label,
    )
    return CompactionSummary(
        goal=non_empty_string(_get(record, "goal"), f"{label}.goal"),
        constraints=string_array_at(_get(record, "constraints"), f"{label}.constraints"),
        completed=string_array_at(_get(record, "completed"), f"{label}.completed"),
        decisions=string_array_at(_get(record, "decisions"), f"{label}.decisions"),
        changed_files=string_array_at(_get(record, "changedFiles"), f"{label}.changedFiles"),
        unresolved=string_array_at(_get(record, "unresolved"), f"{label}.unresolved"),
        next=string_array_at(_get(record, "next"), f"{label}.next"),
    )


def compaction_entry_at(
    record: dict[str, object], entry_id: str, parent_id: str | None, timestamp: int
) -> CompactionSessionEntry:
    """The compaction branch of parse_session_entry: the rest of a record whose id, parent and timestamp
    are already read. It always has a parent and a non-negative, finite tokens_before."""
    # Given, like the first lines of the other two branches: the keys, and the parent.
    exact_keys(
        record,
        ["id", "parentId", "timestamp", "type", "summary", "firstKeptEntryId", "tokensBefore"],
        f"session entry {entry_id}",
    )
    # A compaction is appended after a leaf, so it always has one: never a root.
    if parent_id is None:
        raise ValueError(f"session compaction {entry_id}.parentId 必须是 string")
    tokens_before = finite_number(_get(record, "tokensBefore"), f"session compaction {entry_id}.tokensBefore")
    if tokens_before < 0:
        raise ValueError(f"session compaction {entry_id}.tokensBefore 不能小于 0")
    return CompactionSessionEntry(
        id=entry_id,
        parent_id=parent_id,
        timestamp=timestamp,
        summary=compaction_summary_at(_get(record, "summary"), f"session compaction {entry_id}.summary"),
        first_kept_entry_id=non_empty_string(
            _get(record, "firstKeptEntryId"), f"session compaction {entry_id}.firstKeptEntryId"
        ),
        tokens_before=tokens_before,
    )


def parse_session_entry(value: object) -> SessionEntry:
    """Narrow an untrusted value (a wire dict, or an entry dataclass) to a canonical entry, deep-copied.

    `value` may be the JSON object of a JSONL line (camelCase keys) or a `MessageSessionEntry` /
    `MetadataSessionEntry` / `CompactionSessionEntry`; either way every nested value is checked and copied.
    """
    record = record_at(value, "session entry")
    entry_id = non_empty_string(_get(record, "id"), "session entry.id")
    raw_parent = _get(record, "parentId")
    # Only an explicit null makes a root; an absent parentId is a malformed entry.
    parent_id = (
        None if raw_parent is None else non_empty_string(raw_parent, f"session entry {entry_id}.parentId")
    )
    timestamp = cast(int, finite_number(_get(record, "timestamp"), f"session entry {entry_id}.timestamp"))
    kind = _get(record, "type")
    if kind == "message":
        exact_keys(record, ["id", "parentId", "timestamp", "type", "message"], f"session entry {entry_id}")
        if not _own(record, "message"):
            raise ValueError(f"session entry {entry_id} 缺少 message payload")
        return MessageSessionEntry(
            id=entry_id,
            parent_id=parent_id,
            timestamp=timestamp,
            message=agent_message_at(_get(record, "message"), f"session entry {entry_id}.message"),
        )
    if kind == "metadata":
        exact_keys(
            record, ["id", "parentId", "timestamp", "type", "key", "value"], f"session entry {entry_id}"
        )
        if not _own(record, "value"):
            raise ValueError(f"session entry {entry_id} 缺少 metadata value")
        return MetadataSessionEntry(
            id=entry_id,
            parent_id=parent_id,
            timestamp=timestamp,
            key=non_empty_string(_get(record, "key"), f"session entry {entry_id}.key"),
            value=json_value_at(_get(record, "value"), f"session entry {entry_id}.value"),
        )
    if kind == "compaction":
        return compaction_entry_at(record, entry_id, parent_id, timestamp)
    raise ValueError(f"session entry {entry_id}.type 不是 message、metadata 或 compaction")


def serialize_session_entry(entry: SessionEntry) -> str:
    """One committed JSONL line: JSON.stringify's compact form, then the newline that commits it."""
    return json.dumps(entry.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


# ## recovering the committed lines of a JSONL text


def _refuse_constant(name: str) -> object:
    """JSON has no NaN or Infinity; Python's decoder would accept them unless told otherwise."""
    raise ValueError(f"不是 JSON 值：{name}")


def recover_jsonl(value: str) -> SessionReadResult:
    """Read the committed lines of a session file.

    A blank line is layout, not an entry. A line counts only once its newline is written: a last piece
    without one is an uncommitted tail, ignored and reported, however complete it looks. A committed line
    that is not JSON, or not an entry, is an error naming its physical line number.
    """
    lines = value.split("\n")
    warnings: list[UnterminatedTailWarning] = []
    has_unterminated_tail = not value.endswith("\n") and lines[-1].strip() != ""
    committed_line_count = len(lines) - 1 if has_unterminated_tail else len(lines)
    if has_unterminated_tail:
        warnings.append(UnterminatedTailWarning(line=len(lines)))
    entries: list[SessionEntry] = []
    for index in range(committed_line_count):
        line = lines[index]
        if not line.strip():
            continue
        try:
            parsed = json.loads(line, parse_constant=_refuse_constant)
        except ValueError as error:
            raise ValueError(f"session JSONL 第 {index + 1} 行不是合法 JSON：{_describe(error)}") from error
        try:
            entries.append(parse_session_entry(parsed))
        except ValueError as error:
            raise ValueError(
                f"session JSONL 第 {index + 1} 行不是合法 session entry：{_describe(error)}"
            ) from error
    return SessionReadResult(entries=entries, warnings=warnings)


# ## the in-memory store: a snapshot at the call, commits in FIFO order


def validate_next_entry(entry: SessionEntry, ids: set[str]) -> None:
    """An entry may join a log only under a new id, and only under a parent the log already has."""
    if entry.id in ids:
        raise ValueError(f"session entry id 重复：{entry.id}")
    if entry.parent_id is not None and entry.parent_id not in ids:
        raise ValueError(f"session entry {entry.id} 的 parent {entry.parent_id} 尚不存在")


def ids_from_committed_entries(entries: Sequence[SessionEntry]) -> set[str]:
    """The ids of a log read back, checking it entry by entry as if each were being appended now."""
    ids: set[str] = set()
    for entry in entries:
        validate_next_entry(entry, ids)
        ids.add(entry.id)
    return ids


class InMemorySessionStore:
    """A `SessionStore` in a list: each append is copied at the call and committed in call order."""

    def __init__(self) -> None:
        self._log: list[SessionEntry] = []
        self._ids: set[str] = set()
        self._tail: asyncio.Future[None] | None = None

    def append(self, entry: SessionEntry) -> Awaitable[None]:
        """Copy `entry` now; commit it after every earlier append. A refusal arrives when awaited."""
        # A plain def, not async: the snapshot must be taken inside this call, before any await, so a
        # caller changing `entry` afterwards changes nothing that is stored.
        try:
            snapshot = parse_session_entry(entry)
        except Exception as error:
            return _rejected(error)
        previous = self._tail

        async def commit() -> None:
            await _settled(previous)
            # Checked against the log as it is when this entry's turn comes, not at the call.
            validate_next_entry(snapshot, self._ids)
            self._log.append(snapshot)
            self._ids.add(snapshot.id)

        operation = asyncio.ensure_future(commit())
        self._tail = operation
        # Shielded: a caller cancelling its wait must not cancel a commit the queue already holds.
        return asyncio.shield(operation)

    def entries(self) -> Awaitable[list[SessionEntry]]:
        """Every entry committed by the appends called before this call, as a deep copy."""
        previous = self._tail

        async def read() -> list[SessionEntry]:
            await _settled(previous)
            return copy.deepcopy(self._log)

        return asyncio.ensure_future(read())


# ## the JSONL store: committed prefix, FIFO appends, fail-closed after an I/O failure


class JsonlSessionStore:
    """A `SessionStore` in an append-only JSONL file; make one with `await JsonlSessionStore.open(file)`.

    After an append fails in I/O the file's end is unknown, so this writer refuses everything from then
    on with the original error; a store opened on a file with an uncommitted tail reads but never appends.
    """

    def __init__(
        self,
        file: str,
        io: SessionFileIO,
        ids: set[str],
        repair_warning: UnterminatedTailWarning | None = None,
    ) -> None:
        """Internal: `open` checks the file first. Use `await JsonlSessionStore.open(file, io)`."""
        self._file = file
        self._io = io
        self._ids = ids
        self._repair_warning = repair_warning
        self._tail: asyncio.Future[None] | None = None
        self._tainted = False
        self._taint_cause: BaseException | None = None

    @classmethod
    async def open(cls, file: str | os.PathLike[str], io: SessionFileIO | None = None) -> JsonlSessionStore:
        """Create the file if needed and check its committed prefix: ready, or read-only until repaired."""
        path = os.fspath(file)
        seam = _DISK_FILE_IO if io is None else io
        await seam.ensure_file(path)
        recovered = recover_jsonl(await seam.read_file(path))
        warning = recovered.warnings[0] if recovered.warnings else None
        return cls(path, seam, ids_from_committed_entries(recovered.entries), warning)

    def _refusal(self) -> BaseException:
        """The error every call gets once the writer is tainted: the original one, the same object."""
        assert self._taint_cause is not None
        return self._taint_cause

    def append(self, entry: SessionEntry) -> Awaitable[None]:
        """Serialize `entry` now; append its line after every earlier append of this store."""
        if self._tainted:
            return _rejected(self._refusal())
        if self._repair_warning is not None:
            return _rejected(
                ValueError(f"session 文件第 {self._repair_warning.line} 行有未提交尾部；修复前不能 append")
            )
        try:
            snapshot = parse_session_entry(entry)
            serialized = serialize_session_entry(snapshot)
        except Exception as error:
            return _rejected(error)
        previous = self._tail

        async def commit() -> None:
            await _settled(previous)
            # An append queued before the failure must not write after it.
            if self._tainted:
                raise self._refusal()
            validate_next_entry(snapshot, self._ids)
            try:
                await self._io.append_file(self._file, serialized)
            except BaseException as error:
                # Part of the line may be on disk: from now on this writer cannot know where the file ends.
                self._tainted = True
                self._taint_cause = error
                raise
            self._ids.add(snapshot.id)

        operation = asyncio.ensure_future(commit())
        self._tail = operation
        return asyncio.shield(operation)

    def entries(self) -> Awaitable[list[SessionEntry]]:
        """The committed entries, read back from the file after the appends called before this call."""
        reading = self.read()

        async def entries_of() -> list[SessionEntry]:
            return (await reading).entries

        return asyncio.ensure_future(entries_of())

    def read(self) -> Awaitable[SessionReadResult]:
        """Entries and recovery warnings; a tainted writer refuses rather than report a file it broke."""
        previous = self._tail

        async def read_after() -> SessionReadResult:
            await _settled(previous)
            if self._tainted:
                raise self._refusal()
            return recover_jsonl(await self._io.read_file(self._file))

        return asyncio.ensure_future(read_after())


# ## one path through the tree: from a leaf up its parents


def path_to(entries: Sequence[SessionEntry], leaf_id: str) -> list[SessionEntry]:
    """The entries from the root down to `leaf_id`, as deep copies.

    Only the chosen leaf's ancestors are checked: another branch may be incomplete for now. A duplicate
    id anywhere is refused, since a pointer to it would no longer mean one entry.
    """
    by_id: dict[str, SessionEntry] = {}
    for entry in entries:
        if entry.id in by_id:
            raise ValueError(f"session entry id 重复：{entry.id}")
        by_id[entry.id] = entry
    current = by_id.get(leaf_id)
    if current is None:
        raise ValueError(f"未知 session leaf：{leaf_id}")
    reverse: list[SessionEntry] = []
    visited: set[str] = set()
    while True:
        if current.id in visited:
            raise ValueError(f"session parent 在 {current.id} 形成环")
        visited.add(current.id)
        reverse.append(current)
        if current.parent_id is None:
            break
        child_id, parent_id = current.id, current.parent_id
        parent = by_id.get(parent_id)
        if parent is None:
            raise ValueError(f"session entry {child_id} 的 parent {parent_id} 缺失")
        current = parent
    reverse.reverse()
    # Copies: what the caller does with the path must not reach the log, nor the other way round.
    return copy.deepcopy(reverse)


# ## the messages of the active path, as the model will see them


def messages_on_path(entries: Sequence[SessionEntry], leaf_id: str) -> list[AgentMessage]:
    """The messages on the path to `leaf_id`, in order: metadata is left out, tool facts kept whole."""
    return [
        copy.deepcopy(entry.message)
        for entry in path_to(entries, leaf_id)
        if isinstance(entry, MessageSessionEntry)
    ]
