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
    # BEGIN LAB 14.1 read_only
    memo = {} if memo is None else memo
    if id(value) in memo:  # shared or cyclic parts stay shared, and the walk ends
        return memo[id(value)]  # type: ignore[return-value]
    result: object
    if isinstance(value, list):
        items: ReadOnlyList[object] = ReadOnlyList()
        memo[id(value)] = items
        list.extend(items, (read_only(item, memo) for item in value))
        result = items
    elif isinstance(value, tuple):
        result = tuple(read_only(item, memo) for item in value)
    elif isinstance(value, set | frozenset):
        result = frozenset(read_only(item, memo) for item in value)
    elif isinstance(value, dict):
        mapping: ReadOnlyDict[object, object] = ReadOnlyDict()
        memo[id(value)] = mapping
        for key, item in value.items():
            dict.__setitem__(mapping, key, read_only(item, memo))
        result = mapping
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        frozen: object = object.__new__(frozen_class(type(value)))
        memo[id(value)] = frozen
        for item in dataclasses.fields(value):
            object.__setattr__(frozen, item.name, read_only(getattr(value, item.name), memo))
        result = frozen
    else:
        result = value
    memo[id(value)] = result
    return result  # type: ignore[return-value]
    # END LAB 14.1


def case_is_valid(eval_case: object) -> bool:
    """True for a well-formed case: a non-blank id, a prompt, distinct non-blank file names, two hooks."""
    # BEGIN LAB 14.1 case_is_valid
    if not isinstance(eval_case, EvalCase):
        return False
    if not isinstance(eval_case.id, str) or not eval_case.id.strip():
        return False
    if not isinstance(eval_case.prompt, str) or not isinstance(eval_case.files, list | tuple):
        return False
    seen: set[str] = set()
    for file in eval_case.files:
        if not isinstance(file, str) or not file.strip() or file in seen:
            return False
        seen.add(file)
    return callable(eval_case.prepare) and callable(eval_case.judge)
    # END LAB 14.1


async def run_eval_case(eval_case: EvalCase) -> EvalReport:
    """Run one case from a fresh `prepare` to its cleanup, and report what happened in fixed terms.

    The first failure is the report's primary one; a failing dispose or cleanup afterwards is only
    appended as a secondary failure, never put in its place.
    """
    # BEGIN LAB 14.1 run_eval_case
    files_declared = eval_case.files if isinstance(eval_case.files, list | tuple) else ()
    requested = len(files_declared)
    evidence = empty_evidence(requested)
    report = report_with(eval_case, evidence, "passed")
    if not case_is_valid(eval_case):
        # Nothing was prepared, so there is nothing to dispose or clean up.
        return report_with(eval_case, evidence, "infra_failed", failure("prepare", "invalid_case"))

    prepared: PreparedEval | None = None
    runtime: EvalRuntime | None = None
    try:
        try:
            candidate = await awaited(eval_case.prepare())  # every run gets its own runtime and files
            if isinstance(candidate, PreparedEval):
                prepared = candidate
                runtime = candidate.runtime
            if prepared is None or runtime is None or not callable(prepared.read_file):
                raise TypeError("invalid prepared eval")
        except Exception:
            report = report_with(eval_case, evidence, "infra_failed", failure("prepare", "prepare_failed"))
            return report

        try:
            result = await runtime.prompt(eval_case.prompt)
            await runtime.flush()  # the work the runtime accepted is written before the session is read
        except Exception:
            report = report_with(eval_case, evidence, "infra_failed", failure("execute", "execute_failed"))
            return report

        try:
            all_entries = await runtime.session.entries()
        except Exception:
            report = report_with(eval_case, evidence, "infra_failed", failure("collect", "collect_failed"))
            return report

        # As in the course, a failing get_active_leaf_id is not caught: it reaches the caller (after
        # the finally below has disposed and cleaned up).
        leaf_id = runtime.get_active_leaf_id()
        if leaf_id is None:
            report = report_with(
                eval_case, evidence, "protocol_failed", failure("protocol", "missing_active_leaf")
            )
            return report
        try:
            active = path_to(all_entries, leaf_id)  # 10's path_to: the leaf's ancestors, nothing else
        except Exception:
            report = report_with(
                eval_case, evidence, "protocol_failed", failure("protocol", "invalid_active_path")
            )
            return report

        read_count = 0
        try:
            assert_protocol(active)
        except ProtocolViolation as violation:
            evidence = count_evidence(active, requested, read_count)
            report = report_with(eval_case, evidence, "protocol_failed", failure("protocol", violation.code))
            return report
        if not same_transcript(message_entries(active), result.messages):
            evidence = count_evidence(active, requested, read_count)
            report = report_with(
                eval_case, evidence, "protocol_failed", failure("protocol", "result_session_mismatch")
            )
            return report

        files: dict[str, str] = {}
        try:
            for file in files_declared:  # only the declared files; the runner never lists a folder
                content: object = await awaited(prepared.read_file(file))
                if not isinstance(content, str):
                    raise TypeError("read_file must return str")
                files[file] = content
                read_count += 1
            copied = copy.deepcopy((result, active, files))  # cut every link to the runtime and fixture
        except Exception:
            evidence = count_evidence(active, requested, read_count)
            report = report_with(eval_case, evidence, "infra_failed", failure("collect", "collect_failed"))
            return report
        observation = EvalObservation(
            result=read_only(copied[0]), entries=read_only(copied[1]), files=read_only(copied[2])
        )

        try:
            candidate_verdict: object = await awaited(eval_case.judge(observation))
        except Exception:
            evidence = count_evidence(active, requested, read_count)
            report = report_with(eval_case, evidence, "infra_failed", failure("judge", "judge_failed"))
            return report
        if not valid_verdict(candidate_verdict):
            evidence = count_evidence(active, requested, read_count)
            report = report_with(eval_case, evidence, "infra_failed", failure("judge", "invalid_verdict"))
            return report

        evidence = count_evidence(active, requested, read_count, candidate_verdict.checks)
        if candidate_verdict.passed:
            report = report_with(eval_case, evidence, "passed")
        else:
            report = report_with(eval_case, evidence, "task_failed", failure("task", "task_rejected"))
        return report
    finally:
        # `report` is the very object returned above: what happens here is appended to it.
        if runtime is not None:
            try:
                await runtime.dispose()
            except Exception:
                append_cleanup_failure(report, failure("dispose", "dispose_failed"))
        if prepared is not None and prepared.cleanup is not None:
            try:
                await awaited(prepared.cleanup())
            except Exception:
                append_cleanup_failure(report, failure("cleanup", "cleanup_failed"))
    # END LAB 14.1


# ## Lab 14.2 · only a trustworthy active path reaches the judge, and only a coherent verdict counts


def valid_verdict(value: object) -> TypeGuard[TaskVerdict]:
    """True for a verdict whose `passed` is exactly "every check is True"; anything else is the judge's
    fault."""
    # BEGIN LAB 14.2 valid_verdict
    if not isinstance(value, PassingTaskVerdict | FailingTaskVerdict):
        return False
    if not isinstance(value.passed, bool) or not isinstance(value.checks, list | tuple):
        return False
    if not all(isinstance(check, bool) for check in value.checks):
        return False
    return value.passed == all(value.checks)
    # END LAB 14.2


def assert_protocol(entries: Sequence[SessionEntry]) -> None:
    """Scan the active path's messages in order; raise `ProtocolViolation` at the first broken rule.

    Each call id appears once on the whole path and is answered by exactly one result of the same name
    before the next user or assistant message. System messages belong to the path but take no part in
    the pairing: they neither open nor close an interaction, and never stand in for a result.
    """
    # BEGIN LAB 14.2 assert_protocol
    calls: dict[str, tuple[str, list[bool]]] = {}  # call id -> (tool name, [matched])

    def unmatched() -> bool:
        return any(not matched[0] for _, matched in calls.values())

    saw_user = False
    interaction_open = False
    interaction_has_assistant = False
    for message in message_entries(entries):
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, UserMessage):
            if interaction_open and not interaction_has_assistant:
                raise ProtocolViolation("incomplete_user_interaction")
            if unmatched():
                raise ProtocolViolation("unpaired_tool_call")
            saw_user = True
            interaction_open = True
            interaction_has_assistant = False
            continue
        if isinstance(message, AssistantMessage):
            if not interaction_open:
                raise ProtocolViolation("assistant_without_user")
            if unmatched():  # a result may not arrive after the next assistant message
                raise ProtocolViolation("unpaired_tool_call")
            interaction_has_assistant = True
            for call in tool_calls(message):
                if not saw_user:
                    raise ProtocolViolation("tool_call_without_user")
                if call.id in calls:
                    raise ProtocolViolation("duplicate_tool_call")
                calls[call.id] = (call.name, [False])
            continue
        if not interaction_open:
            raise ProtocolViolation("orphan_tool_result")
        known = calls.get(message.tool_call_id)
        if known is None:
            raise ProtocolViolation("orphan_tool_result")
        name, matched = known
        if matched[0]:
            raise ProtocolViolation("duplicate_tool_result")
        if name != message.tool_name:
            raise ProtocolViolation("tool_name_mismatch")
        matched[0] = True

    if not saw_user:
        raise ProtocolViolation("missing_user_interaction")
    if not interaction_has_assistant:
        raise ProtocolViolation("incomplete_user_interaction")
    if unmatched():
        raise ProtocolViolation("unpaired_tool_call")
    # END LAB 14.2


def same_transcript(left: object, right: object) -> bool:
    """Deep, strict equality (node's `isDeepStrictEqual`): same classes, same fields, same items.

    Stricter than `==` where JSON-like values differ in kind: `True` is not `1`, a list is not a dict.
    Numbers compare by value, as a JavaScript number does (`1 == 1.0`).
    """
    # BEGIN LAB 14.2 same_transcript
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(
            same_transcript(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_transcript(left[key], right[key]) for key in left)
    if dataclasses.is_dataclass(left) and dataclasses.is_dataclass(right):
        if _thawed_class(type(left)) is not _thawed_class(type(right)):
            return False
        return all(
            same_transcript(getattr(left, item.name), getattr(right, item.name))
            for item in dataclasses.fields(left)
        )
    return type(left) is type(right) and left == right
    # END LAB 14.2


# ## Lab 14.3 · counts instead of contents, the first failure kept first, and a suite in series


def count_evidence(
    entries: Sequence[SessionEntry], requested_files: int, read_files: int, checks: Sequence[bool] = ()
) -> SafeEvidence:
    """Count the active path's messages by role, its tool calls, results and errors, the files and checks."""
    # BEGIN LAB 14.3 count_evidence
    evidence = empty_evidence(requested_files)
    evidence.files.read = read_files
    for message in message_entries(entries):
        if isinstance(message, SystemMessage):
            evidence.messages.system += 1
        elif isinstance(message, UserMessage):
            evidence.messages.user += 1
        elif isinstance(message, AssistantMessage):
            evidence.messages.assistant += 1
            evidence.tools.calls += len(tool_calls(message))
        else:
            evidence.messages.tool_result += 1
            evidence.tools.results += 1
            if message.is_error:
                evidence.tools.errors += 1
    evidence.checks.passed = sum(1 for check in checks if check)
    evidence.checks.failed = len(checks) - evidence.checks.passed
    return evidence
    # END LAB 14.3


def append_cleanup_failure(report: EvalReport, cleanup_failure: EvalFailure) -> None:
    """Record a dispose or cleanup failure: after an existing primary failure, or as the primary one."""
    # BEGIN LAB 14.3 append_cleanup_failure
    if report.primary_failure is not None:
        report.secondary_failures.append(cleanup_failure)
        return
    report.status = "infra_failed"
    report.primary_failure = cleanup_failure
    # END LAB 14.3


async def run_eval_suite(cases: Sequence[EvalCase]) -> list[EvalReport]:
    """Run the cases one after another, in input order, each through its own fresh `prepare`."""
    # BEGIN LAB 14.3 run_eval_suite
    reports: list[EvalReport] = []
    for eval_case in cases:  # in series: one case is closed before the next is prepared
        reports.append(await run_eval_case(eval_case))
    return reports
    # END LAB 14.3
