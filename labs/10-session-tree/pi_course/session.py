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

from .lab import LabNotImplemented
from .messages import (
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    StopReason,
    SystemMessage,
    TextContent,
    ToolCall,
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


SessionEntry: TypeAlias = MessageSessionEntry | MetadataSessionEntry


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
    MessageSessionEntry,
    MetadataSessionEntry,
)

# Optional fields whose None means "absent": their wire forms leave the key out (see each to_dict).
_ABSENT_WHEN_NONE = frozenset({"raw_arguments", "error_message", "sections", "details"})


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


# ## Lab 10.2 · narrowing an untrusted value to a canonical entry, copying as it goes


def record_at(value: object, label: str, *, typed: bool = True) -> dict[str, object]:
    """Narrow `value` to a plain JSON object (a dict with str keys) and return it.

    With `typed`, one of the kit's own message or entry dataclasses counts as the object it stands for,
    read one level deep; inside JSON values (`typed=False`) a dataclass is not JSON and is refused.
    """
    raise LabNotImplemented("10.2", "record_at")


def exact_keys(record: dict[str, object], allowed: Sequence[str], label: str) -> None:
    """Refuse any key outside `allowed`: a field dropped silently would be data lost silently."""
    raise LabNotImplemented("10.2", "exact_keys")


def non_empty_string(value: object, label: str) -> str:
    """A string with something other than whitespace in it."""
    raise LabNotImplemented("10.2", "non_empty_string")


def finite_number(value: object, label: str) -> int | float:
    """An int or a float, neither a bool nor NaN nor an infinity (JSON can carry none of those)."""
    raise LabNotImplemented("10.2", "finite_number")


def json_value_at(value: object, label: str, ancestors: set[int] | None = None) -> JsonValue:
    """Narrow `value` to a JSON value and return a fresh copy of it; a cycle is refused, not followed."""
    raise LabNotImplemented("10.2", "json_value_at")


def text_content_at(value: object, label: str) -> TextContent:
    """A text block: exactly `type` and `text`."""
    raise LabNotImplemented("10.2", "text_content_at")


def tool_call_at(value: object, label: str) -> ToolCall:
    """A tool call, its arguments copied as JSON; `rawArguments` only where the record has it."""
    raise LabNotImplemented("10.2", "tool_call_at")


def assistant_content_at(value: object, label: str) -> AssistantContent:
    """A text block or a tool call, told apart by `type`."""
    raise LabNotImplemented("10.2", "assistant_content_at")


def usage_at(value: object, label: str) -> Usage:
    """Three finite token counts, none below zero."""
    raise LabNotImplemented("10.2", "usage_at")


def timestamp_at(value: object, label: str) -> int:
    """A message's timestamp: a finite number (kept exactly; the kit's messages type it as int)."""
    raise LabNotImplemented("10.2", "timestamp_at")


def system_message_at(record: dict[str, object], label: str) -> SystemMessage:
    """A system message is an ordinary message entry: a string content, and sections of string or None
    (None deletes a section, so it is kept, never dropped); no sections stays no sections."""
    raise LabNotImplemented("10.2", "system_message_at")


def user_message_at(record: dict[str, object], label: str) -> UserMessage:
    """A user message: text blocks only."""
    raise LabNotImplemented("10.2", "user_message_at")


_STOP_REASONS = frozenset({"stop", "length", "toolUse", "error", "aborted"})


def assistant_message_at(record: dict[str, object], label: str) -> AssistantMessage:
    """An assistant message: its blocks, provider, model, usage and one of the known stop reasons."""
    raise LabNotImplemented("10.2", "assistant_message_at")


def tool_result_message_at(record: dict[str, object], label: str) -> ToolResultMessage:
    """A tool result: its call's id and name, text blocks, is_error, and JSON details if any."""
    raise LabNotImplemented("10.2", "tool_result_message_at")


def agent_message_at(value: object, label: str) -> AgentMessage:
    """One of the four messages, told apart by `role`."""
    raise LabNotImplemented("10.2", "agent_message_at")


def parse_session_entry(value: object) -> SessionEntry:
    """Narrow an untrusted value (a wire dict, or an entry dataclass) to a canonical entry, deep-copied.

    `value` may be the JSON object of a JSONL line (camelCase keys) or a `MessageSessionEntry` /
    `MetadataSessionEntry`; either way every nested value is checked and copied.
    """
    raise LabNotImplemented("10.2", "parse_session_entry")


def serialize_session_entry(entry: SessionEntry) -> str:
    """One committed JSONL line: JSON.stringify's compact form, then the newline that commits it."""
    return json.dumps(entry.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


# ## Lab 10.4 · recovering the committed lines of a JSONL text


def _refuse_constant(name: str) -> object:
    """JSON has no NaN or Infinity; Python's decoder would accept them unless told otherwise."""
    raise ValueError(f"不是 JSON 值：{name}")


def recover_jsonl(value: str) -> SessionReadResult:
    """Read the committed lines of a session file.

    A blank line is layout, not an entry. A line counts only once its newline is written: a last piece
    without one is an uncommitted tail, ignored and reported, however complete it looks. A committed line
    that is not JSON, or not an entry, is an error naming its physical line number.
    """
    raise LabNotImplemented("10.4", "recover_jsonl")


# ## Lab 10.3 · the in-memory store: a snapshot at the call, commits in FIFO order


def validate_next_entry(entry: SessionEntry, ids: set[str]) -> None:
    """An entry may join a log only under a new id, and only under a parent the log already has."""
    raise LabNotImplemented("10.3", "validate_next_entry")


def ids_from_committed_entries(entries: Sequence[SessionEntry]) -> set[str]:
    """The ids of a log read back, checking it entry by entry as if each were being appended now."""
    raise LabNotImplemented("10.3", "ids_from_committed_entries")


class InMemorySessionStore:
    """A `SessionStore` in a list: each append is copied at the call and committed in call order."""

    def __init__(self) -> None:
        self._log: list[SessionEntry] = []
        self._ids: set[str] = set()
        self._tail: asyncio.Future[None] | None = None

    def append(self, entry: SessionEntry) -> Awaitable[None]:
        """Copy `entry` now; commit it after every earlier append. A refusal arrives when awaited."""
        raise LabNotImplemented("10.3", "InMemorySessionStore.append")

    def entries(self) -> Awaitable[list[SessionEntry]]:
        """Every entry committed by the appends called before this call, as a deep copy."""
        raise LabNotImplemented("10.3", "InMemorySessionStore.entries")


# ## Lab 10.5 · the JSONL store: committed prefix, FIFO appends, fail-closed after an I/O failure


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
        raise LabNotImplemented("10.5", "JsonlSessionStore.open")

    def _refusal(self) -> BaseException:
        """The error every call gets once the writer is tainted: the original one, the same object."""
        assert self._taint_cause is not None
        return self._taint_cause

    def append(self, entry: SessionEntry) -> Awaitable[None]:
        """Serialize `entry` now; append its line after every earlier append of this store."""
        raise LabNotImplemented("10.5", "JsonlSessionStore.append")

    def entries(self) -> Awaitable[list[SessionEntry]]:
        """The committed entries, read back from the file after the appends called before this call."""
        raise LabNotImplemented("10.5", "JsonlSessionStore.entries")

    def read(self) -> Awaitable[SessionReadResult]:
        """Entries and recovery warnings; a tainted writer refuses rather than report a file it broke."""
        raise LabNotImplemented("10.5", "JsonlSessionStore.read")


# ## Lab 10.1 · one path through the tree: from a leaf up its parents


def path_to(entries: Sequence[SessionEntry], leaf_id: str) -> list[SessionEntry]:
    """The entries from the root down to `leaf_id`, as deep copies.

    Only the chosen leaf's ancestors are checked: another branch may be incomplete for now. A duplicate
    id anywhere is refused, since a pointer to it would no longer mean one entry.
    """
    raise LabNotImplemented("10.1", "path_to")


# ## Lab 10.6 · the messages of the active path, as the model will see them


def messages_on_path(entries: Sequence[SessionEntry], leaf_id: str) -> list[AgentMessage]:
    """The messages on the path to `leaf_id`, in order: metadata is left out, tool facts kept whole."""
    raise LabNotImplemented("10.6", "messages_on_path")
