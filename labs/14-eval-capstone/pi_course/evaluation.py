"""Checkpoint 14: an independent evaluation runner for the complete agent.

A case describes one task: its prompt, the files the judge may read, a `prepare` that builds a fresh
runtime each time it is called, and a `judge` that decides whether the task was done. The runner owns
everything between them: it runs the prompt, waits for the runtime to settle, takes only the session's
active path, checks the tool protocol on it, reads only the declared files, hands the judge a frozen
copy of those facts, and always disposes the runtime and cleans up, in that order.

What leaves the runner is an `EvalReport` made of fixed codes and counts. No exception text, transcript,
file name, file content, path or call id ever reaches it: a report can be published as it is.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol, TypeAlias, TypeGuard, TypeVar, cast

from .agent_loop import AgentRunResult, tool_calls
from .lab import LabNotImplemented
from .messages import AgentMessage, AssistantMessage, SystemMessage, UserMessage
from .session import MessageSessionEntry, SessionEntry, path_to

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

#: A value, or something to await for it: a case's hooks may be plain functions or coroutines.
MaybeAwaitable: TypeAlias = T | Awaitable[T]


async def awaited(value: MaybeAwaitable[T]) -> T:
    """The value itself, or what awaiting it gives (the course's `await` on a plain value)."""
    if inspect.isawaitable(value):
        return cast(T, await value)
    return value


# ## What a case, a verdict and a report are (given)


class EvalSession(Protocol):
    """The part of a session store the runner reads: every entry, as of now."""

    def entries(self) -> Awaitable[list[SessionEntry]]:
        """All entries of the store, every branch included."""
        ...


class EvalRuntime(Protocol):
    """The part of 13's `Runtime` the runner drives; a real `Runtime` fits it as it is.

    Each call returns something to await: a coroutine, or (as 13's Runtime does, deciding at call
    time) any other awaitable.
    """

    @property
    def session(self) -> EvalSession:
        """The runtime's session store."""
        ...

    def get_active_leaf_id(self) -> str | None:
        """The leaf the runtime's transcript ends at, or `None` before anything was written."""
        ...

    def prompt(self, value: str) -> Awaitable[AgentRunResult]:
        """Run one prompt to its end."""
        ...

    def flush(self) -> Awaitable[None]:
        """Wait until the work the runtime has accepted is done."""
        ...

    def dispose(self) -> Awaitable[None]:
        """Close the runtime for good."""
        ...


@dataclass
class PreparedEval:
    """What one call of `EvalCase.prepare` builds: a fresh runtime and the way to read its files.

    `cleanup`, when given, removes what `prepare` created (a temporary folder, say); the runner calls it
    after `runtime.dispose()`, whatever happened before.
    """

    runtime: EvalRuntime
    read_file: Callable[[str], MaybeAwaitable[str]]
    cleanup: Callable[[], MaybeAwaitable[None]] | None = None


@dataclass
class PassingTaskVerdict:
    """A judge's acceptance: every check held."""

    checks: Sequence[bool]
    passed: Literal[True] = True


@dataclass
class FailingTaskVerdict:
    """A judge's rejection: at least one check did not hold."""

    checks: Sequence[bool]
    passed: Literal[False] = False


TaskVerdict: TypeAlias = PassingTaskVerdict | FailingTaskVerdict


@dataclass(frozen=True)
class EvalObservation:
    """What the judge sees, and nothing more.

    `entries` is the active path only (the leaf's ancestors; branches not selected are not facts of this
    run); `files` holds exactly the files the case declared. The whole value is a deep copy that refuses
    every change: dataclasses raise `FrozenInstanceError`, lists and dicts raise `TypeError`.
    """

    result: AgentRunResult
    entries: Sequence[SessionEntry]
    files: Mapping[str, str]


@dataclass
class EvalCase:
    """One task to evaluate: `prepare` is called again for every run, `judge` reads the observation."""

    id: str
    prompt: str
    files: Sequence[str]
    prepare: Callable[[], MaybeAwaitable[PreparedEval]]
    judge: Callable[[EvalObservation], MaybeAwaitable[TaskVerdict]]


EvalStatus: TypeAlias = Literal["passed", "task_failed", "protocol_failed", "infra_failed"]

EvalFailurePhase: TypeAlias = Literal[
    "prepare", "execute", "collect", "protocol", "judge", "task", "dispose", "cleanup"
]

EvalFailureCode: TypeAlias = Literal[
    "invalid_case",
    "prepare_failed",
    "execute_failed",
    "collect_failed",
    "missing_active_leaf",
    "invalid_active_path",
    "missing_user_interaction",
    "incomplete_user_interaction",
    "result_session_mismatch",
    "assistant_without_user",
    "tool_call_without_user",
    "duplicate_tool_call",
    "orphan_tool_result",
    "duplicate_tool_result",
    "tool_name_mismatch",
    "unpaired_tool_call",
    "judge_failed",
    "invalid_verdict",
    "task_rejected",
    "dispose_failed",
    "cleanup_failed",
]


@dataclass(frozen=True)
class EvalFailure:
    """Where a run went wrong, as two of the runner's own fixed names; never an exception's text."""

    phase: EvalFailurePhase
    code: EvalFailureCode

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"phase": self.phase, "code": self.code}


@dataclass
class MessageCounts:
    """How many messages of each canonical role the active path holds."""

    system: int = 0
    user: int = 0
    assistant: int = 0
    tool_result: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "system": self.system,
            "user": self.user,
            "assistant": self.assistant,
            "toolResult": self.tool_result,
        }


@dataclass
class ToolCounts:
    """Tool calls in assistant messages, tool results, and how many of those are errors."""

    calls: int = 0
    results: int = 0
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"calls": self.calls, "results": self.results, "errors": self.errors}


@dataclass
class FileCounts:
    """How many files the case declared, and how many were read before the run went on (or stopped)."""

    requested: int = 0
    read: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"requested": self.requested, "read": self.read}


@dataclass
class CheckCounts:
    """How many of a valid verdict's checks held, and how many did not."""

    passed: int = 0
    failed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"passed": self.passed, "failed": self.failed}


@dataclass
class SafeEvidence:
    """The only facts of a run a report carries: counts."""

    messages: MessageCounts = field(default_factory=MessageCounts)
    tools: ToolCounts = field(default_factory=ToolCounts)
    files: FileCounts = field(default_factory=FileCounts)
    checks: CheckCounts = field(default_factory=CheckCounts)

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "messages": self.messages.to_dict(),
            "tools": self.tools.to_dict(),
            "files": self.files.to_dict(),
            "checks": self.checks.to_dict(),
        }


@dataclass
class EvalReport:
    """The outcome of one run: a status, the evidence, the first failure and those that came after it."""

    id: str
    status: EvalStatus
    evidence: SafeEvidence
    primary_failure: EvalFailure | None = None
    secondary_failures: list[EvalFailure] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `primaryFailure` only when there is one."""
        wire: dict[str, Any] = {"id": self.id, "status": self.status, "evidence": self.evidence.to_dict()}
        if self.primary_failure is not None:
            wire["primaryFailure"] = self.primary_failure.to_dict()
        wire["secondaryFailures"] = [failure.to_dict() for failure in self.secondary_failures]
        return wire


class ProtocolViolation(Exception):
    """The active path breaks the tool protocol; `code` says how (and is the only thing reported)."""

    def __init__(self, code: EvalFailureCode) -> None:
        super().__init__(code)
        self.code: EvalFailureCode = code


def failure(phase: EvalFailurePhase, code: EvalFailureCode) -> EvalFailure:
    """A failure record."""
    return EvalFailure(phase=phase, code=code)


def empty_evidence(requested_files: int) -> SafeEvidence:
    """Evidence of a run that has not reached the session yet: only the declared file count is known."""
    return SafeEvidence(files=FileCounts(requested=requested_files, read=0))


def report_with(
    eval_case: EvalCase, evidence: SafeEvidence, status: EvalStatus, primary: EvalFailure | None = None
) -> EvalReport:
    """A new report of `eval_case`, with no secondary failure yet."""
    return EvalReport(id=eval_case.id, status=status, evidence=evidence, primary_failure=primary)


def message_entries(entries: Sequence[SessionEntry]) -> list[AgentMessage]:
    """The messages on a path, in order; metadata and compaction entries are not messages."""
    return [entry.message for entry in entries if isinstance(entry, MessageSessionEntry)]


# ## Read-only copies (given): what the judge receives refuses every change


def _refuse(*_arguments: object, **_keywords: object) -> NoReturn:
    raise TypeError("a frozen observation cannot be changed")


class ReadOnlyList(list[T]):
    """A list that refuses every change with `TypeError`, as a frozen array does.

    It stays a `list`, so `==`, `json.dumps` and `isinstance(..., list)` treat it as one; a deep copy of
    it is an ordinary list again.
    """

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list[T]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[T]:
        return [copy.deepcopy(item, memo) for item in self]


class ReadOnlyDict(dict[K, V]):
    """A dict that refuses every change with `TypeError`; a deep copy of it is an ordinary dict."""

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[K, V]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[K, V]:
        return {copy.deepcopy(key, memo): copy.deepcopy(value, memo) for key, value in self.items()}


_frozen_classes: dict[type, type] = {}


def frozen_class(cls: type) -> type:
    """A subclass of the dataclass `cls` whose instances refuse assignment (`FrozenInstanceError`).

    It keeps `cls`'s name, fields and methods, so `isinstance`, `match`, `to_dict` and `text_of` work
    on its instances; they compare equal to a `cls` instance with equal fields, and a deep copy of one
    is a plain, mutable `cls` instance again.
    """
    if cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return cls  # already refuses assignment
    made = _frozen_classes.get(cls)
    if made is not None:
        return made
    names = [item.name for item in dataclasses.fields(cls)]

    def __setattr__(self: object, name: str, value: object) -> NoReturn:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: object, name: str) -> NoReturn:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self: object, other: object) -> bool:
        if _thawed_class(type(other)) is not cls:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in names)

    def __deepcopy__(self: object, memo: dict[int, Any]) -> object:
        thawed: object = object.__new__(cls)
        memo[id(self)] = thawed
        for name in names:
            object.__setattr__(thawed, name, copy.deepcopy(getattr(self, name), memo))
        return thawed

    made = type(
        cls.__name__,
        (cls,),
        {
            "__setattr__": __setattr__,
            "__delattr__": __delattr__,
            "__eq__": __eq__,
            "__hash__": None,
            "__deepcopy__": __deepcopy__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )
    _frozen_classes[cls] = made
    return made


def _thawed_class(cls: type) -> type:
    """The dataclass a frozen class was made from (or `cls` itself)."""
    for original, made in _frozen_classes.items():
        if made is cls:
            return original
    return cls


def is_read_only(value: object) -> bool:
    """True when `value` refuses change: a read-only container, a frozen dataclass, or a plain scalar."""
    if isinstance(value, ReadOnlyList | ReadOnlyDict | tuple | frozenset):
        return True
    if isinstance(value, list | dict | set | bytearray):
        return False
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return bool(type(value).__dataclass_params__.frozen) or type(value) in _frozen_classes.values()  # type: ignore[attr-defined]
    return True


# ## Lab 14.1 · a fresh prepare per run, a frozen observation, and a runner that closes what it opened


def read_only(value: T, memo: dict[int, object] | None = None) -> T:
    """`value` (already a private deep copy) made read-only all the way down.

    Lists become `ReadOnlyList`, dicts `ReadOnlyDict`, sets `frozenset`, tuples hold read-only items, and
    each dataclass becomes an instance of its `frozen_class`; strings, numbers and `None` are immutable
    already and stay as they are.
    """
    raise LabNotImplemented("14.1", "read_only")


def case_is_valid(eval_case: object) -> bool:
    """True for a well-formed case: a non-blank id, a prompt, distinct non-blank file names, two hooks."""
    raise LabNotImplemented("14.1", "case_is_valid")


async def run_eval_case(eval_case: EvalCase) -> EvalReport:
    """Run one case from a fresh `prepare` to its cleanup, and report what happened in fixed terms.

    The first failure is the report's primary one; a failing dispose or cleanup afterwards is only
    appended as a secondary failure, never put in its place.
    """
    raise LabNotImplemented("14.1", "run_eval_case")


# ## Lab 14.2 · only a trustworthy active path reaches the judge, and only a coherent verdict counts


def valid_verdict(value: object) -> TypeGuard[TaskVerdict]:
    """True for a verdict whose `passed` is exactly "every check is True"; anything else is the judge's
    fault."""
    raise LabNotImplemented("14.2", "valid_verdict")


def assert_protocol(entries: Sequence[SessionEntry]) -> None:
    """Scan the active path's messages in order; raise `ProtocolViolation` at the first broken rule.

    Each call id appears once on the whole path and is answered by exactly one result of the same name
    before the next user or assistant message. System messages belong to the path but take no part in
    the pairing: they neither open nor close an interaction, and never stand in for a result.
    """
    raise LabNotImplemented("14.2", "assert_protocol")


def same_transcript(left: object, right: object) -> bool:
    """Deep, strict equality (node's `isDeepStrictEqual`): same classes, same fields, same items.

    Stricter than `==` where JSON-like values differ in kind: `True` is not `1`, a list is not a dict.
    Numbers compare by value, as a JavaScript number does (`1 == 1.0`).
    """
    raise LabNotImplemented("14.2", "same_transcript")


# ## Lab 14.3 · counts instead of contents, the first failure kept first, and a suite in series


def count_evidence(
    entries: Sequence[SessionEntry], requested_files: int, read_files: int, checks: Sequence[bool] = ()
) -> SafeEvidence:
    """Count the active path's messages by role, its tool calls, results and errors, the files and checks."""
    raise LabNotImplemented("14.3", "count_evidence")


def append_cleanup_failure(report: EvalReport, cleanup_failure: EvalFailure) -> None:
    """Record a dispose or cleanup failure: after an existing primary failure, or as the primary one."""
    raise LabNotImplemented("14.3", "append_cleanup_failure")


async def run_eval_suite(cases: Sequence[EvalCase]) -> list[EvalReport]:
    """Run the cases one after another, in input order, each through its own fresh `prepare`."""
    raise LabNotImplemented("14.3", "run_eval_suite")
