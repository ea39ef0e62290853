"""Durable progress: every step of a run is committed to a store before anyone can see it.

Checkpoint 13's Runtime writes a turn to the session only once the turn is over; a process that stops
half-way leaves nothing of it behind. The harness here splits a turn into small commits instead. A
store holds two collections of JSON records: `entries` (messages of a conversation, written once) and
`tasks` (work still to do, with a status and a checkpoint, replaced whole as the work moves on). One
commit is one batch of writes, accepted whole or refused whole; a session puts every commit on one line
and changes what it shows only after the store has accepted the batch. Calling the model and running a
tool happen outside every commit: a crash at any moment leaves a store from which a new process can tell
how far the work had come, and go on from there.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import dataclasses
import inspect
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar, cast

from .agent_loop import tool_calls
from .lab import LabNotImplemented
from .messages import (
    AbortSignal,
    AgentContext,
    AgentMessage,
    AssistantMessage,
    Model,
    ModelTextDelta,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    now_ms,
    text,
    user_message,
)
from .session import JsonValue, agent_message_at
from .tool import Tool, ToolRegistry, execute_tool_call

T = TypeVar("T")

DurableCollection: TypeAlias = Literal["entries", "tasks"]
#: The two collections a store knows, in the order a snapshot lists them.
DURABLE_COLLECTIONS: tuple[DurableCollection, ...] = ("entries", "tasks")


# ## The store's records and snapshots (given)


@dataclass
class DurableWrite:
    """One write of a commit: the record `id` of `collection` becomes `value`, replaced whole."""

    collection: DurableCollection
    id: str
    value: JsonValue


@dataclass
class DurableItem:
    """One stored record, as `list` hands it out: its id and a copy of its value."""

    id: str
    value: JsonValue


@dataclass
class DurableSnapshot:
    """Everything a store holds, as plain JSON: what a restarted process would find on disk."""

    seq: int
    entries: dict[str, JsonValue]
    tasks: dict[str, JsonValue]

    def to_dict(self) -> dict[str, JsonValue]:
        """Return the wire form (a deep copy)."""
        return {"seq": self.seq, "entries": copy.deepcopy(self.entries), "tasks": copy.deepcopy(self.tasks)}


class StorageRejected(Exception):
    """The store refused a whole batch because one of its writes is not a legal JSON record."""


def is_json_value(value: object, ancestors: set[int] | None = None) -> bool:
    """True for a value JSON can hold: None, a bool, a str, a finite number, a list or a str-keyed dict of
    such values. Functions, class instances, NaN and infinities are not JSON; nor is a cycle."""
    if value is None or isinstance(value, bool | str):
        return True
    if type(value) is int:
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is not list and type(value) is not dict:
        return False
    seen = set() if ancestors is None else ancestors
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        good = all(type(key) is str and is_json_value(item, seen) for key, item in value.items())
    else:
        good = all(is_json_value(item, seen) for item in cast(list[object], value))
    seen.discard(id(value))
    return good


def to_json(value: object) -> JsonValue:
    """A record as plain JSON, through one JSON round trip (a message goes in by its wire form)."""

    def wire(item: object) -> object:
        if hasattr(item, "to_dict"):
            return item.to_dict()
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return dataclasses.asdict(item)
        raise TypeError(f"{type(item).__name__} 不能写成 JSON")

    return cast(JsonValue, json.loads(json.dumps(value, default=wire, ensure_ascii=False)))


async def _settled(previous: asyncio.Future[Any] | None) -> None:
    """Wait until `previous` has finished, however it finished; its failure belongs to its own caller."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])


async def _awaited(value: T | Awaitable[T]) -> T:
    """The value itself, or what it resolves to when it is awaitable (a change may be a coroutine)."""
    if inspect.isawaitable(value):
        return cast(T, await value)
    return value


# ## The harness's records (given): entries, tasks and their checkpoints

ReplayPolicy: TypeAlias = Literal["safe", "unsafe"]
TaskStatus: TypeAlias = Literal["pending", "running", "completed", "failed"]


@dataclass
class DurableEntryUser:
    """A user message of a conversation."""

    message: UserMessage
    type: Literal["user"] = "user"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"type": self.type, "message": self.message.to_dict()}


@dataclass
class DurableEntryAssistant:
    """A model reply of a conversation: finished, failed, or aborted by a crash."""

    message: AssistantMessage
    type: Literal["assistant"] = "assistant"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"type": self.type, "message": self.message.to_dict()}


@dataclass
class DurableEntryToolResult:
    """The result of one tool call of a conversation."""

    message: ToolResultMessage
    type: Literal["toolResult"] = "toolResult"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"type": self.type, "message": self.message.to_dict()}


DurableEntry: TypeAlias = DurableEntryUser | DurableEntryAssistant | DurableEntryToolResult


@dataclass
class EntryRecord:
    """One stored entry: which conversation it belongs to and its place there (`index`, from 0)."""

    id: str
    conversation_id: str
    index: int
    entry: DurableEntry

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "id": self.id,
            "conversationId": self.conversation_id,
            "index": self.index,
            "entry": self.entry.to_dict(),
        }


@dataclass
class GenerationCheckpoint:
    """How far a generation got: the request phase, and the partial reply committed so far (a crash turns
    it into an aborted entry)."""

    partial: AssistantMessage | None = None
    phase: Literal["request"] = "request"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `partial` only where there is one."""
        wire: dict[str, Any] = {"phase": self.phase}
        if self.partial is not None:
            wire["partial"] = self.partial.to_dict()
        return wire


@dataclass
class ToolCheckpointCall:
    """A tool task that has not yet decided to run its tool."""

    phase: Literal["call"] = "call"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"phase": self.phase}


@dataclass
class ToolCheckpointExecute:
    """The committed intent to run a tool: the final arguments and the replay policy, written before
    `execute()` starts."""

    arguments: JsonValue
    replay: ReplayPolicy
    phase: Literal["execute"] = "execute"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"phase": self.phase, "arguments": copy.deepcopy(self.arguments), "replay": self.replay}


ToolCheckpoint: TypeAlias = ToolCheckpointCall | ToolCheckpointExecute


@dataclass
class GenerationTaskInput:
    """A request's messages: the conversation's entries whose `index` is below `input_entry_count`."""

    input_entry_count: int

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"inputEntryCount": self.input_entry_count}


@dataclass
class ToolTaskInput:
    """Where a tool task reads its call back: the assistant entry and the call's id in it."""

    assistant_entry_id: str
    call_id: str

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"assistantEntryId": self.assistant_entry_id, "callId": self.call_id}


@dataclass
class TaskRecordGeneration:
    """A task that asks the model once."""

    id: str
    conversation_id: str
    order: int
    status: TaskStatus
    input: GenerationTaskInput
    checkpoint: GenerationCheckpoint
    error: str | None = None
    kind: Literal["generation"] = "generation"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `error` only where there is one."""
        return _task_wire(self)


@dataclass
class TaskRecordTool:
    """A task that runs one tool call."""

    id: str
    conversation_id: str
    order: int
    status: TaskStatus
    input: ToolTaskInput
    checkpoint: ToolCheckpoint
    error: str | None = None
    kind: Literal["tool"] = "tool"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `error` only where there is one."""
        return _task_wire(self)


TaskRecord: TypeAlias = TaskRecordGeneration | TaskRecordTool


def _task_wire(task: TaskRecord) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "id": task.id,
        "kind": task.kind,
        "conversationId": task.conversation_id,
        "order": task.order,
        "status": task.status,
        "input": task.input.to_dict(),
        "checkpoint": task.checkpoint.to_dict(),
    }
    if task.error is not None:
        wire["error"] = task.error
    return wire


def _object(value: object, label: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ValueError(f"{label} 必须是 object")
    return cast(dict[str, Any], value)


def _message(value: object, label: str, kind: type[T]) -> T:
    message = agent_message_at(value, label)
    if not isinstance(message, kind):
        raise ValueError(f"{label} 不是 {kind.__name__}")
    return message


def parse_entry_record(value: JsonValue) -> EntryRecord:
    """A stored entry record read back into its dataclasses."""
    record = _object(value, "entry record")
    entry = _object(record.get("entry"), "entry")
    kind = entry.get("type")
    parsed: DurableEntry
    if kind == "user":
        parsed = DurableEntryUser(_message(entry.get("message"), "entry.message", UserMessage))
    elif kind == "assistant":
        parsed = DurableEntryAssistant(_message(entry.get("message"), "entry.message", AssistantMessage))
    elif kind == "toolResult":
        parsed = DurableEntryToolResult(_message(entry.get("message"), "entry.message", ToolResultMessage))
    else:
        raise ValueError(f"未知 entry 类型 {kind}")
    return EntryRecord(
        id=str(record["id"]),
        conversation_id=str(record["conversationId"]),
        index=int(record["index"]),
        entry=parsed,
    )


def parse_task_record(value: JsonValue) -> TaskRecord:
    """A stored task record read back into its dataclasses."""
    record = _object(value, "task record")
    checkpoint = _object(record.get("checkpoint"), "task.checkpoint")
    task_input = _object(record.get("input"), "task.input")
    error = record.get("error")
    common: dict[str, Any] = {
        "id": str(record["id"]),
        "conversation_id": str(record["conversationId"]),
        "order": int(record["order"]),
        "status": record["status"],
        "error": None if error is None else str(error),
    }
    if record.get("kind") == "generation":
        partial = checkpoint.get("partial")
        return TaskRecordGeneration(
            **common,
            input=GenerationTaskInput(int(task_input["inputEntryCount"])),
            checkpoint=GenerationCheckpoint(
                partial=None if partial is None else _message(partial, "checkpoint.partial", AssistantMessage)
            ),
        )
    if record.get("kind") == "tool":
        tool_checkpoint: ToolCheckpoint = (
            ToolCheckpointExecute(arguments=checkpoint.get("arguments"), replay=checkpoint["replay"])
            if checkpoint.get("phase") == "execute"
            else ToolCheckpointCall()
        )
        return TaskRecordTool(
            **common,
            input=ToolTaskInput(str(task_input["assistantEntryId"]), str(task_input["callId"])),
            checkpoint=tool_checkpoint,
        )
    raise ValueError(f"未知任务类型 {record.get('kind')}")


@dataclass
class DurableToolRegistration:
    """A tool and whether it may run again from the start after an interruption (None: `unsafe`)."""

    tool: Tool[Any, Any]
    replay: ReplayPolicy | None = None


@dataclass
class DurableHarnessOptions:
    """What a harness is opened with."""

    store: DurableStore
    model: Model
    create_id: Callable[[], str]
    tools: Sequence[DurableToolRegistration] | None = None


INTERRUPTED = "interrupted"


def durable_failed_result(call: ToolCall, code: str, message: str) -> ToolResultMessage:
    """An error result for a call the harness answers itself; `details` holds the code and the message."""
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool {call.name} failed: {message}")],
        details={"error": code, "message": message},
        is_error=True,
        timestamp=now_ms(),
    )


class _Aborted:
    """What `_unless_aborted` gives back when the signal fired first."""


_ABORTED = _Aborted()


async def _unless_aborted(work: Awaitable[T], signal: AbortSignal | None) -> T | _Aborted:
    """What `work` gives, or `_ABORTED` as soon as the signal fires (then `work` is cancelled).

    When both are ready, the signal wins: once it has fired, nothing more may be committed.
    """
    if signal is None:
        return await work
    task = asyncio.ensure_future(work)
    fired: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_abort() -> None:
        if not fired.done():
            fired.set_result(None)

    if signal.aborted:
        on_abort()
    signal.add_event_listener("abort", on_abort)
    try:
        waiting: list[asyncio.Future[Any]] = [task, fired]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal.remove_event_listener("abort", on_abort)
        fired.cancel()
    if signal.aborted:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return _ABORTED
    return task.result()


def _aborted(signal: AbortSignal | None) -> bool:
    return signal is not None and signal.aborted


CommitListener: TypeAlias = Callable[[int, Sequence[DurableWrite]], None]


# ## Lab 19.1 · one batch accepted whole or refused whole, and one line of change


class DurableStore:
    """A store in memory. One commit is an atomic batch: the whole batch is checked first, and one bad
    write refuses all of it (`StorageRejected`), nothing written; an accepted batch is written at once and
    given the next `seq`. Commits run one after the other, in call order. A snapshot exported and
    imported again stands for a process restart.
    """

    def __init__(self) -> None:
        """An empty store: no record, `current_seq` 0."""
        self._seq = 0
        self._collections: dict[DurableCollection, dict[str, JsonValue]] = {"entries": {}, "tasks": {}}
        self._listeners: builtins.list[CommitListener] = []
        self._tail: asyncio.Future[Any] | None = None

    @classmethod
    def from_snapshot(cls, snapshot: DurableSnapshot) -> DurableStore:
        """A new store holding a copy of the snapshot: the same records, the same `seq`."""
        store = cls()
        store._seq = snapshot.seq
        for record_id, value in snapshot.entries.items():
            store._collections["entries"][record_id] = copy.deepcopy(value)
        for record_id, value in snapshot.tasks.items():
            store._collections["tasks"][record_id] = copy.deepcopy(value)
        return store

    def commit(self, writes: Sequence[DurableWrite]) -> Awaitable[int]:
        """Queue one batch after every earlier commit; it resolves to the batch's `seq`, or fails with
        `StorageRejected` (then nothing of the batch is written and `seq` stays as it was)."""
        raise LabNotImplemented("19.1", "DurableStore.commit")

    @property
    def current_seq(self) -> int:
        """The `seq` of the last accepted commit (0 before the first)."""
        return self._seq

    def get(self, collection: DurableCollection, record_id: str) -> JsonValue | None:
        """A copy of one stored record, or None when there is none."""
        value = self._collections[collection].get(record_id)
        return None if value is None else copy.deepcopy(value)

    def list(self, collection: DurableCollection) -> builtins.list[DurableItem]:
        """Copies of every record of a collection, in the order they were first written."""
        return [
            DurableItem(key, copy.deepcopy(value)) for key, value in self._collections[collection].items()
        ]

    def snapshot(self) -> DurableSnapshot:
        """A deep copy of everything stored, with the current `seq`."""
        return DurableSnapshot(
            seq=self._seq,
            entries=copy.deepcopy(self._collections["entries"]),
            tasks=copy.deepcopy(self._collections["tasks"]),
        )

    def on_commit(self, listener: CommitListener) -> Callable[[], None]:
        """Call `listener(seq, writes)` right after every accepted commit; the result unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe


@dataclass(frozen=True)
class Transaction:
    """What a change sees: the committed state (`get`, `list`) and where its writes go (`put` only
    collects them; nothing reaches the store or the session's view before the change has returned)."""

    get: Callable[[DurableCollection, str], JsonValue | None]
    list: Callable[[DurableCollection], builtins.list[DurableItem]]
    put: Callable[[DurableCollection, str, JsonValue], None]


class DurableSession:
    """The one line of change over a store, and the view a reader sees.

    Commits run one at a time, in call order. A change only reads and collects writes; when it returns,
    the batch goes to the store, and only once the store has accepted it does the view change. A change
    that raises, or a batch the store refuses, leaves no visible progress. Side effects (calling the
    model, running a tool) never happen inside a change.
    """

    def __init__(self, store: DurableStore) -> None:
        """Start the view from what the store has committed."""
        self._store = store
        self._view: dict[DurableCollection, dict[str, JsonValue]] = {
            collection: {item.id: item.value for item in store.list(collection)}
            for collection in DURABLE_COLLECTIONS
        }
        self._tail: asyncio.Future[Any] | None = None

    @property
    def store(self) -> DurableStore:
        """The store this session commits to."""
        return self._store

    def get(self, collection: DurableCollection, record_id: str) -> JsonValue | None:
        """A copy of one visible record, or None."""
        value = self._view[collection].get(record_id)
        return None if value is None else copy.deepcopy(value)

    def list(self, collection: DurableCollection) -> builtins.list[DurableItem]:
        """Copies of every visible record of a collection, in the order they were first written."""
        return [DurableItem(key, copy.deepcopy(value)) for key, value in self._view[collection].items()]

    def commit(self, change: Callable[[Transaction], T | Awaitable[T]]) -> Awaitable[T]:
        """Queue `change` after every earlier commit; it resolves to what the change returns, after its
        writes (if any) are in the store and then in the view. A change without writes commits nothing."""
        raise LabNotImplemented("19.1", "DurableSession.commit")


# ## Lab 19.2 · tasks: pending → running → completed | failed


class DurableHarness:
    """A minimal durable harness: `prompt` commits a user entry with its generation task; `run` takes the
    pending tasks in order; every bit of visible progress is committed before it happens. Opening turns
    running tasks back to pending: the last process may have stopped half-way through them.
    """

    def __init__(self, options: DurableHarnessOptions, session: DurableSession) -> None:
        """Internal: use `await DurableHarness.open(...)`."""
        self._options = options
        self._session = session
        self._registry = ToolRegistry()
        self._replay: dict[str, ReplayPolicy] = {}
        for registration in options.tools or ():
            self._registry.register(registration.tool)
            self._replay[registration.tool.name] = registration.replay or "unsafe"
        self._next_order = max([0, *(task.order + 1 for task in self.tasks())])

    @classmethod
    async def open(
        cls,
        *,
        store: DurableStore,
        model: Model,
        create_id: Callable[[], str],
        tools: Sequence[DurableToolRegistration] | None = None,
    ) -> DurableHarness:
        """Read what is committed, and turn every running task back to pending (in one commit)."""
        raise LabNotImplemented("19.2", "DurableHarness.open")

    async def run(self, *, signal: AbortSignal | None = None) -> None:
        """Run the pending tasks in `order` until none is left or the signal fires.

        When the signal fires, the task in progress stays `running`: to the store, that is a crash.
        """
        raise LabNotImplemented("19.2", "DurableHarness.run")

    # ## Reading and writing records (given)

    def entries(self, conversation_id: str) -> list[EntryRecord]:
        """The committed entries of one conversation, by `index`."""
        records = [parse_entry_record(item.value) for item in self._session.list("entries")]
        return sorted(
            (record for record in records if record.conversation_id == conversation_id),
            key=lambda record: record.index,
        )

    def messages(self, conversation_id: str) -> list[AgentMessage]:
        """The committed messages of one conversation, in order."""
        return [record.entry.message for record in self.entries(conversation_id)]

    def tasks(self) -> list[TaskRecord]:
        """Every committed task, by `order`."""
        tasks = [parse_task_record(item.value) for item in self._session.list("tasks")]
        return sorted(tasks, key=lambda task: task.order)

    def _task(self, task_id: str) -> TaskRecord:
        value = self._session.get("tasks", task_id)
        if value is None:
            raise ValueError(f"未知任务 {task_id}")
        return parse_task_record(value)

    def _generation_task(self, task_id: str) -> TaskRecordGeneration:
        task = self._task(task_id)
        if not isinstance(task, TaskRecordGeneration):
            raise ValueError(f"任务 {task_id} 不是 generation")
        return task

    def _tool_task(self, task_id: str) -> TaskRecordTool:
        task = self._task(task_id)
        if not isinstance(task, TaskRecordTool):
            raise ValueError(f"任务 {task_id} 不是 tool")
        return task

    def _entry(self, entry_id: str) -> EntryRecord:
        value = self._session.get("entries", entry_id)
        if value is None:
            raise ValueError(f"未知 entry {entry_id}")
        return parse_entry_record(value)

    def _put_entry(self, tx: Transaction, conversation_id: str, entry: DurableEntry) -> EntryRecord:
        """Write the conversation's next entry (its index counts the entries already committed)."""
        index = sum(
            1
            for item in tx.list("entries")
            if parse_entry_record(item.value).conversation_id == conversation_id
        )
        record = EntryRecord(self._options.create_id(), conversation_id, index, entry)
        tx.put("entries", record.id, to_json(record))
        return record

    def _put_task(self, tx: Transaction, task: TaskRecord) -> None:
        tx.put("tasks", task.id, to_json(task))

    def _take_order(self) -> int:
        order = self._next_order
        self._next_order += 1
        return order

    def _new_generation(self, tx: Transaction, conversation_id: str, input_entry_count: int) -> TaskRecord:
        task = TaskRecordGeneration(
            id=self._options.create_id(),
            conversation_id=conversation_id,
            order=self._take_order(),
            status="pending",
            input=GenerationTaskInput(input_entry_count),
            checkpoint=GenerationCheckpoint(),
        )
        self._put_task(tx, task)
        return task

    def _change_status(self, task_id: str, status: TaskStatus) -> Callable[[Transaction], None]:
        """A change that gives the committed task `task_id` a new status, its checkpoint unchanged."""

        def change(tx: Transaction) -> None:
            self._put_task(tx, dataclasses.replace(self._task(task_id), status=status))

        return change

    def prompt(self, conversation_id: str, value: str) -> Awaitable[None]:
        """Commit a user entry and the generation task it calls for together: both visible, or neither."""

        def change(tx: Transaction) -> None:
            record = self._put_entry(tx, conversation_id, DurableEntryUser(user_message(value)))
            self._new_generation(tx, conversation_id, record.index + 1)

        return self._session.commit(change)

    # ## Generation (given): partial output committed delta by delta, then the reply

    async def _run_generation(self, task_id: str, signal: AbortSignal | None) -> bool:
        """Ask the model once; False when the signal stopped it (the task then stays running)."""
        task = self._generation_task(task_id)
        if task.checkpoint.partial is not None:
            await self._recover_partial(task_id)
            task = self._generation_task(task_id)
        conversation_id = task.conversation_id
        messages: list[AgentMessage] = [
            record.entry.message
            for record in self.entries(conversation_id)
            if record.index < task.input.input_entry_count
        ]
        stream = self._options.model.stream(
            AgentContext(messages=messages, tools=self._registry.definitions()), signal=signal
        )
        iterator = stream.__aiter__()

        async def next_event() -> tuple[bool, object]:
            try:
                return False, await iterator.__anext__()
            except StopAsyncIteration:
                return True, None

        def checkpoint(partial: AssistantMessage) -> Callable[[Transaction], None]:
            def change(tx: Transaction) -> None:
                current = self._generation_task(task_id)
                self._put_task(tx, dataclasses.replace(current, checkpoint=GenerationCheckpoint(partial)))

            return change

        try:
            while True:
                step = await _unless_aborted(next_event(), signal)
                if isinstance(step, _Aborted):  # the signal stops the wait at once: a crash, here
                    return False
                done, event = step
                if done:
                    break
                if isinstance(event, ModelTextDelta):
                    # No throttling in the course: every delta is one commit.
                    await self._session.commit(checkpoint(event.partial))
            final = await _unless_aborted(stream.result(), signal)
            if isinstance(final, _Aborted):
                return False
            message = final
        except Exception as error:
            message = assistant_message(
                [], "aborted" if _aborted(signal) else "error", error_message=str(error)
            )
        if _aborted(signal):
            return False

        def finish(tx: Transaction) -> None:
            # The reply, its tool tasks and the generation's completion become visible together.
            record = self._put_entry(tx, conversation_id, DurableEntryAssistant(message))
            if message.stop_reason == "toolUse":
                for call in tool_calls(message):
                    self._put_task(
                        tx,
                        TaskRecordTool(
                            id=self._options.create_id(),
                            conversation_id=conversation_id,
                            order=self._take_order(),
                            status="pending",
                            input=ToolTaskInput(record.id, call.id),
                            checkpoint=ToolCheckpointCall(),
                        ),
                    )
            done_task = dataclasses.replace(
                self._generation_task(task_id), status="completed", checkpoint=GenerationCheckpoint()
            )
            self._put_task(tx, done_task)

        await self._session.commit(finish)
        return True

    # ## Lab 19.3 · tools: the intent committed before execute(); on recovery, replay or interrupted

    def _read_call(self, task: TaskRecordTool) -> ToolCall:
        """The task's call, read back from its assistant entry."""
        record = self._entry(task.input.assistant_entry_id)
        message = record.entry.message
        found = (
            next((call for call in tool_calls(message) if call.id == task.input.call_id), None)
            if isinstance(message, AssistantMessage)
            else None
        )
        if found is None:
            raise ValueError(f"entry {record.id} 没有 tool call {task.input.call_id}")
        return found

    async def _run_tool(self, task_id: str, signal: AbortSignal | None) -> bool:
        """Run one tool task; on recovery (an intent already committed) replay it or answer interrupted."""
        raise LabNotImplemented("19.3", "DurableHarness._run_tool")

    async def _execute(self, task: TaskRecordTool, call: ToolCall, signal: AbortSignal | None) -> bool:
        """Run the tool (checkpoint 06's executor); False when the signal stopped it."""
        result = await execute_tool_call(call, self._registry, signal=signal)
        if _aborted(signal):
            return False
        await self._settle(task, result, "completed")
        return True

    def _settle(
        self,
        task: TaskRecordTool,
        result: ToolResultMessage,
        status: Literal["completed", "failed"],
        error: str | None = None,
    ) -> Awaitable[None]:
        """Commit the result entry with the task's end; when every call of the reply has ended, the next
        generation is created in the same commit."""

        def change(tx: Transaction) -> None:
            record = self._put_entry(tx, task.conversation_id, DurableEntryToolResult(result))
            ended = dataclasses.replace(self._tool_task(task.id), status=status)
            if error is not None:
                ended.error = error
            self._put_task(tx, ended)
            assistant = self._entry(task.input.assistant_entry_id).entry.message
            calls = tool_calls(assistant) if isinstance(assistant, AssistantMessage) else []
            siblings = [
                other
                for other in self.tasks()
                if isinstance(other, TaskRecordTool)
                and other.input.assistant_entry_id == task.input.assistant_entry_id
                and other.id != task.id
            ]
            if calls and all(other.status in ("completed", "failed") for other in siblings):
                self._new_generation(tx, task.conversation_id, record.index + 1)

        return self._session.commit(change)

    # ## Lab 19.4 · a crash's partial output becomes an aborted entry, and the request starts again

    async def _recover_partial(self, task_id: str) -> None:
        """Turn the partial reply a crash left in the checkpoint into an aborted assistant entry, and clear
        the checkpoint, in one commit (the request is then sent again from the start)."""
        raise LabNotImplemented("19.4", "DurableHarness._recover_partial")
