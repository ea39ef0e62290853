"""Focused tests of checkpoint 14: the evaluation runner, from a fresh prepare to a report of counts.

As in the course, most cases run against a small stand-in runtime (`FakeRuntime`): the runner's own
promises (phases, protocol, evidence, lifecycle order) are what is under test, and the stand-in lets each
test choose the session, the result and the failures exactly. One case at the end evaluates 13's real
Runtime: a scripted model calls a tool that writes a real file in `tmp_path`, the Runtime commits the
messages to a real JSONL session, and the runner judges the run from there.

Ordering across awaits is held by `asyncio.Event` gates the test opens, never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AgentMessage,
    AgentRunResult,
    AssistantMessage,
    ContextBudget,
    EvalCase,
    EvalObservation,
    EvalReport,
    EvalRuntime,
    FailingTaskVerdict,
    JsonlSessionStore,
    MessageSessionEntry,
    PassingTaskVerdict,
    PreparedEval,
    ReadOnlyDict,
    ReadOnlyList,
    ResourceCatalog,
    RuntimeConfig,
    RuntimeDeps,
    ScriptedModel,
    SessionEntry,
    SystemMessage,
    TaskVerdict,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    create_runtime,
    is_read_only,
    object_schema,
    read_only,
    run_eval_case,
    run_eval_suite,
    same_transcript,
    string_value,
    text,
    text_of,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time.


def message_entry(entry_id: str, parent_id: str | None, message: AgentMessage) -> MessageSessionEntry:
    """A message node of the session tree."""
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, message=message)


def call(call_id: str, name: str = "write_file") -> ToolCall:
    """A tool call as the model proposed it."""
    return ToolCall(id=call_id, name=name, arguments={"path": "answer.txt"})


def result(tool_call: ToolCall, value: str = "ok", *, is_error: bool = False) -> ToolResultMessage:
    """The tool result paired with `tool_call`."""
    return ToolResultMessage(
        tool_call_id=tool_call.id,
        tool_name=tool_call.name,
        content=[text(value)],
        details={"changed": True},
        is_error=is_error,
        timestamp=1,
    )


def user(value: str, timestamp: int = 1) -> UserMessage:
    """A user message with a fixed timestamp."""
    return dataclasses.replace(user_message(value), timestamp=timestamp)


def chain(prefix: str, messages: Sequence[AgentMessage]) -> list[MessageSessionEntry]:
    """The messages as one branch of entries `<prefix>-0`, `<prefix>-1`, …, each the parent of the next."""
    entries: list[MessageSessionEntry] = []
    parent: str | None = None
    for index, message in enumerate(messages):
        entries.append(message_entry(f"{prefix}-{index}", parent, message))
        parent = entries[-1].id
    return entries


@dataclass
class ToolPath:
    """A session branch: user, assistant with a call, its result, final assistant."""

    entries: list[MessageSessionEntry]
    leaf_id: str
    messages: list[AgentMessage]


def path_with_tool(
    prefix: str,
    *,
    call_id: str | None = None,
    call_name: str = "write_file",
    result_name: str | None = None,
    duplicate_call: bool = False,
    duplicate_result: bool = False,
    omit_result: bool = False,
    file_text: str = "ok",
    is_error: bool = False,
) -> ToolPath:
    """The course's `pathWithTool`: one complete tool interaction, or one broken as asked."""
    tool_call = call(call_id or f"{prefix}-call", call_name)
    calls = [tool_call, copy.deepcopy(tool_call)] if duplicate_call else [tool_call]
    tool_result = result(tool_call, file_text, is_error=is_error)
    if result_name is not None:
        tool_result.tool_name = result_name
    results: list[AgentMessage] = []
    if not omit_result:
        results = [tool_result, copy.deepcopy(tool_result)] if duplicate_result else [tool_result]
    messages: list[AgentMessage] = [
        user(f"build {prefix}"),
        assistant_message(list(calls), "toolUse", timestamp=2),
        *results,
        assistant_message([text(f"done {prefix}")], "stop", timestamp=4),
    ]
    entries = chain(prefix, messages)
    return ToolPath(entries, entries[-1].id, messages)


class FakeSession:
    """The session side of `FakeRuntime`: entries as given (deep copies), no appends."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime

    async def append(self, entry: SessionEntry) -> None:
        """The runner never appends."""
        raise AssertionError("eval fake does not append")

    async def entries(self) -> list[SessionEntry]:
        """Every entry, every branch included."""
        self.runtime.events.append("entries")
        if self.runtime.entries_error is not None:
            raise self.runtime.entries_error
        return copy.deepcopy(list(self.runtime.entries))


@dataclass
class FakeRuntime:
    """A runtime whose session, result and failures the test chooses; it records what it is asked."""

    entries: Sequence[SessionEntry]
    leaf_id: str | None
    result: AgentRunResult | None = None
    prompt_error: Exception | None = None
    flush_error: Exception | None = None
    entries_error: Exception | None = None
    dispose_error: Exception | None = None
    leaf_error: Exception | None = None
    events: list[str] = field(default_factory=list)
    prompt_gate: asyncio.Event | None = None
    prompt_started: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.session = FakeSession(self)
        if self.result is None:
            transcript = [
                copy.deepcopy(e.message) for e in self.entries if isinstance(e, MessageSessionEntry)
            ]
            self.result = AgentRunResult(reason="stop", messages=transcript, steps=2)

    def get_active_leaf_id(self) -> str | None:
        """The chosen leaf."""
        if self.leaf_error is not None:
            raise self.leaf_error
        return self.leaf_id

    async def prompt(self, value: str) -> AgentRunResult:
        """Record the prompt; wait for the gate when there is one."""
        self.events.append("prompt")
        if self.prompt_started is not None:
            self.prompt_started.set()
        if self.prompt_gate is not None:
            await self.prompt_gate.wait()
        if self.prompt_error is not None:
            raise self.prompt_error
        return copy.deepcopy(self.result)  # type: ignore[return-value]

    async def flush(self) -> None:
        """Record the flush."""
        self.events.append("flush")
        if self.flush_error is not None:
            raise self.flush_error

    async def dispose(self) -> None:
        """Record the dispose."""
        self.events.append("dispose")
        if self.dispose_error is not None:
            raise self.dispose_error


def fake(path: ToolPath, **options: Any) -> FakeRuntime:
    """A runtime over `path`'s entries, its leaf selected."""
    return FakeRuntime(entries=path.entries, leaf_id=path.leaf_id, **options)


def judge_answer(observation: EvalObservation) -> TaskVerdict:
    """The default judge: answer.txt must say "ok"."""
    return PassingTaskVerdict(checks=[observation.files["answer.txt"] == "ok"])


def passing_case(
    case_id: str,
    prepare: Callable[[], PreparedEval],
    **overrides: Any,
) -> EvalCase:
    """The course's `passingCase`: declares answer.txt, passes when it says "ok"."""
    values: dict[str, Any] = {
        "id": case_id,
        "prompt": f"prompt:{case_id}",
        "files": ["answer.txt"],
        "prepare": prepare,
        "judge": judge_answer,
    }
    values.update(overrides)
    return EvalCase(**values)


def simple(path: ToolPath, **options: Any) -> Callable[[], PreparedEval]:
    """A prepare giving a fresh fake runtime over `path` each time, reading "ok" for every file."""
    return lambda: PreparedEval(runtime=fake(path, **options), read_file=lambda _file: "ok")


def run(eval_case: EvalCase) -> EvalReport:
    """`run_eval_case` on a fresh event loop."""
    return asyncio.run(run_eval_case(eval_case))


def primary(report: EvalReport) -> tuple[str, str] | None:
    """The primary failure as (phase, code)."""
    failure = report.primary_failure
    return None if failure is None else (failure.phase, failure.code)


def wire(report: EvalReport) -> str:
    """The report as it would be published: JSON of its wire form, and its repr besides."""
    return json.dumps(report.to_dict(), ensure_ascii=False) + repr(report)


# ## Lab 14.1 · fresh prepare, lifecycle order, frozen observation, execute and collect


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_each_run_prepares_afresh_and_closes_with_dispose_then_cleanup() -> None:
    """同一个 case 运行两次，是否每次都重新 prepare，并按 prompt、flush、entries、读文件、dispose、cleanup 的
    顺序收口？"""
    prepared_count = 0
    runs: list[list[str]] = []
    seen_files: list[str] = []

    def prepare() -> PreparedEval:
        nonlocal prepared_count
        prepared_count += 1
        path = path_with_tool(f"run-{prepared_count}")
        runtime = fake(path)
        runs.append(runtime.events)

        def read_file(file: str) -> str:
            runtime.events.append(f"read:{file}")
            return "ok"

        return PreparedEval(
            runtime=runtime, read_file=read_file, cleanup=lambda: runtime.events.append("cleanup")
        )

    def judge(observation: EvalObservation) -> TaskVerdict:
        seen_files.append(observation.files["answer.txt"])
        return PassingTaskVerdict(checks=[True])

    evaluated = passing_case("fresh-each-run", prepare, judge=judge)
    first = run(evaluated)
    second = run(evaluated)

    assert first.status == "passed"
    assert second.status == "passed"
    assert prepared_count == 2
    assert seen_files == ["ok", "ok"]
    order = ["prompt", "flush", "entries", "read:answer.txt", "dispose", "cleanup"]
    assert runs == [order, order]


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_the_judge_sees_only_the_active_path_and_declared_files_deep_copied_and_frozen() -> None:
    """judge 是否只看到 active path 与声明的文件，而且观察值是深复制、从外到里都拒绝修改的？"""
    active = path_with_tool("active", call_id="selected-call")
    sibling = message_entry(
        "sibling-secret", active.entries[0].id, assistant_message([text("RAW_SIBLING_SECRET")])
    )
    source_entries: list[SessionEntry] = [*active.entries, sibling]
    reads: list[str] = []
    observations: list[EvalObservation] = []
    refused: list[str] = []

    def read_file(file: str) -> str:
        reads.append(file)
        return "ok" if file == "answer.txt" else "UNDECLARED"

    def judge(observation: EvalObservation) -> TaskVerdict:
        observations.append(observation)
        attempts: dict[str, Callable[[], object]] = {
            "files[answer.txt]": lambda: observation.files.__setitem__("answer.txt", "mutated"),  # type: ignore[index]
            "entries.append": lambda: observation.entries.append(sibling),  # type: ignore[attr-defined]
            "entries[0].id": lambda: setattr(observation.entries[0], "id", "forged"),
            "result.messages[0].content": lambda: setattr(observation.result.messages[0], "content", []),
            "result.messages.append": lambda: observation.result.messages.append(user("forged")),
            "result.reason": lambda: setattr(observation.result, "reason", "error"),
            "observation.result": lambda: setattr(observation, "result", None),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except (TypeError, dataclasses.FrozenInstanceError):
                refused.append(name)
        return PassingTaskVerdict(checks=[len(refused) == len(attempts)])

    runtime = FakeRuntime(
        entries=source_entries,
        leaf_id=active.leaf_id,
        result=AgentRunResult(reason="stop", messages=active.messages, steps=2),
    )
    active_ids = [entry.id for entry in active.entries]
    report = run(passing_case("frozen-observation", lambda: PreparedEval(runtime, read_file), judge=judge))
    source_entries[0].id = "mutated-after-prepare"

    assert report.status == "passed", primary(report)
    assert reads == ["answer.txt"]
    [observation] = observations
    assert [entry.id for entry in observation.entries] == active_ids
    assert "RAW_SIBLING_SECRET" not in repr(observation)
    assert list(observation.files) == ["answer.txt"]
    assert observation.files["answer.txt"] == "ok"
    assert len(refused) == 7, refused
    assert is_read_only(observation)
    assert is_read_only(observation.entries)
    assert is_read_only(observation.result.messages[0])
    assert is_read_only(observation.files)
    # Deep: the nested tool call's arguments refuse change too, and nothing is shared with the fixture.
    proposal = observation.result.messages[1]
    assert isinstance(proposal, AssistantMessage)
    arguments = proposal.content[0]
    assert isinstance(arguments, ToolCall)
    with pytest.raises(TypeError):
        arguments.arguments["path"] = "elsewhere"  # type: ignore[index]
    assert observation.result.messages[0] is not active.messages[0]
    assert observation.result.messages == active.messages  # equal in value, though frozen


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_execute_failures_and_collect_failures_are_different_infra_phases() -> None:
    """prompt 或 flush 出错是否记为 execute，session、文件读取出错或文件不是字符串是否记为 collect？"""
    valid = path_with_tool("infra")

    def failing_read(_file: str) -> str:
        raise OSError("RAW_FILE_SECRET")

    def prepared_with(read_file: Callable[[str], Any], **options: Any) -> Callable[[], PreparedEval]:
        return lambda: PreparedEval(runtime=fake(valid, **options), read_file=read_file)

    reports = {
        "prompt": run(
            passing_case("execute-error", prepared_with(str, prompt_error=RuntimeError("RAW_EXECUTE")))
        ),
        "flush": run(passing_case("flush-error", prepared_with(str, flush_error=RuntimeError("RAW_FLUSH")))),
        "entries": run(
            passing_case("entries-error", prepared_with(str, entries_error=OSError("RAW_SESSION")))
        ),
        "read": run(passing_case("collect-error", prepared_with(failing_read))),
        "non-string": run(passing_case("non-string-file", prepared_with(lambda _file: 41))),
    }

    phases = {name: (report.status, primary(report)) for name, report in reports.items()}
    assert phases == {
        "prompt": ("infra_failed", ("execute", "execute_failed")),
        "flush": ("infra_failed", ("execute", "execute_failed")),
        "entries": ("infra_failed", ("collect", "collect_failed")),
        "read": ("infra_failed", ("collect", "collect_failed")),
        "non-string": ("infra_failed", ("collect", "collect_failed")),
    }
    assert "RAW_" not in "".join(wire(report) for report in reports.values())


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_async_hooks_are_awaited_like_plain_ones() -> None:
    """prepare、read_file、cleanup 与 judge 写成协程时，runner 是否同样等待它们，顺序不变？"""
    valid = path_with_tool("async-hooks")
    events: list[str] = []

    async def prepare() -> PreparedEval:
        runtime = fake(valid, events=events)

        async def read_file(file: str) -> str:
            events.append(f"read:{file}")
            return "ok"

        async def cleanup() -> None:
            events.append("cleanup")

        return PreparedEval(runtime=runtime, read_file=read_file, cleanup=cleanup)

    async def judge(observation: EvalObservation) -> TaskVerdict:
        events.append("judge")
        return PassingTaskVerdict(checks=[observation.files["answer.txt"] == "ok"])

    report = run(passing_case("async-hooks", prepare, judge=judge))  # type: ignore[arg-type]

    assert report.status == "passed", primary(report)
    assert events == ["prompt", "flush", "entries", "read:answer.txt", "judge", "dispose", "cleanup"]


@pytest.mark.lab14_1
@pytest.mark.edits("case_is_valid")
@pytest.mark.parametrize(
    "change",
    [
        {"id": "   "},
        {"id": 7},
        {"prompt": None},
        {"files": "answer.txt"},
        {"files": ["answer.txt", "answer.txt"]},
        {"files": ["answer.txt", " "]},
        {"files": [3]},
        {"judge": "not callable"},
        {"prepare": None},
    ],
)
def test_a_malformed_case_is_refused_before_prepare(change: dict[str, Any]) -> None:
    """形状无效的 case（空白 id、重复或空白文件名、files 不是列表、钩子不可调用）是否在 prepare 之前就以
    prepare/invalid_case 拒绝？"""
    prepared: list[int] = []

    def prepare() -> PreparedEval:
        prepared.append(1)
        return simple(path_with_tool("never"))()

    evaluated = passing_case("malformed", prepare)
    for name, value in change.items():
        object.__setattr__(evaluated, name, value)

    report = run(evaluated)

    assert (report.status, primary(report)) == ("infra_failed", ("prepare", "invalid_case"))
    assert prepared == []
    assert report.secondary_failures == []


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_a_failing_leaf_lookup_reaches_the_caller_after_dispose_and_cleanup() -> None:
    """get_active_leaf_id 自己抛错时，异常是否原样交给调用者，而 dispose 与 cleanup 仍按顺序执行？"""
    valid = path_with_tool("leaf-error")
    events: list[str] = []
    runtime = fake(valid, events=events, leaf_error=LookupError("leaf lookup failed"))
    prepared = PreparedEval(runtime, lambda _file: "ok", cleanup=lambda: events.append("cleanup"))

    with pytest.raises(LookupError, match="leaf lookup failed"):
        run(passing_case("leaf-error", lambda: prepared))

    assert events == ["prompt", "flush", "entries", "dispose", "cleanup"]


def json_values() -> st.SearchStrategy[Any]:
    """JSON-like values: the shapes tool arguments and details take."""
    scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=12,
    )


def every_container(value: object) -> list[object]:
    """Every list, dict and dataclass inside `value`, `value` included."""
    found: list[object] = []
    if isinstance(value, list | dict) or dataclasses.is_dataclass(value):
        found.append(value)
    children: list[object] = []
    if isinstance(value, list | tuple):
        children = list(value)
    elif isinstance(value, dict):
        children = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [getattr(value, item.name) for item in dataclasses.fields(value)]
    for child in children:
        found += every_container(child)
    return found


@pytest.mark.lab14_1
@pytest.mark.edits("read_only")
@given(arguments=json_values(), details=json_values())
def test_read_only_copies_compare_equal_refuse_every_change_and_thaw_on_deepcopy(
    arguments: Any, details: Any
) -> None:
    """对任意 JSON 形状的 arguments 与 details，read_only 的结果是否与原值相等、每一层都拒绝修改，而 deepcopy
    又得到普通可变的值？"""
    messages: list[AgentMessage] = [
        assistant_message([ToolCall(id="c", name="n", arguments=arguments)], "toolUse", timestamp=1),
        ToolResultMessage("c", "n", [text("r")], details, False, 2),
    ]
    original = AgentRunResult(reason="stop", messages=messages, steps=1)

    frozen = read_only(copy.deepcopy(original))

    assert frozen == original
    assert isinstance(frozen, AgentRunResult)
    assert json.dumps([m.to_dict() for m in frozen.messages]) == json.dumps([m.to_dict() for m in messages])
    for part in every_container(frozen):
        assert is_read_only(part), part
        if isinstance(part, list):
            with pytest.raises(TypeError):
                part.append(None)
        elif isinstance(part, dict):
            with pytest.raises(TypeError):
                part["new"] = None
        else:
            with pytest.raises(dataclasses.FrozenInstanceError):
                object.__getattribute__(part, "__setattr__")("timestamp", 0)
    thawed = copy.deepcopy(frozen)
    assert thawed == original
    assert type(thawed) is AgentRunResult and type(thawed.messages) is list
    thawed.messages.append(user("more"))  # an ordinary, mutable copy again
    assert len(frozen.messages) == 2


@pytest.mark.lab14_1
@pytest.mark.edits("read_only")
def test_read_only_keeps_shared_parts_shared_and_ends_on_cycles() -> None:
    """read_only 遇到共享的或自我引用的列表时，是否保持共享关系并正常结束？"""
    shared: list[Any] = ["x"]
    cyclic: list[Any] = [shared, shared]
    cyclic.append(cyclic)

    frozen = read_only(cyclic)

    assert isinstance(frozen, ReadOnlyList)
    assert frozen[0] is frozen[1]
    assert frozen[2] is frozen
    assert isinstance(read_only({"k": {"n": 1}})["k"], ReadOnlyDict)
    assert read_only({1, 2}) == frozenset({1, 2})


# ## Lab 14.2 · verdicts, the active path's protocol, fixed failure layers


@pytest.mark.lab14_2
@pytest.mark.edits("valid_verdict")
def test_a_verdict_decides_the_task_only_and_a_contradictory_one_is_the_judges_fault() -> None:
    """合法的 passed=False 是否记为 task_failed 并计数 checks，而 passed 与 checks 矛盾或形状不对的 verdict 是
    否记为 judge/invalid_verdict？"""
    valid = path_with_tool("oracle")

    def with_verdict(verdict: object) -> EvalReport:
        return run(passing_case("verdict", simple(valid), judge=lambda _observation: verdict))

    rejected = with_verdict(FailingTaskVerdict(checks=[True, False]))
    contradictory = with_verdict(PassingTaskVerdict(checks=[True, False]))
    invalid = [
        with_verdict(FailingTaskVerdict(checks=[True, True])),
        with_verdict(PassingTaskVerdict(checks=[True, 1])),  # type: ignore[list-item]
        with_verdict(PassingTaskVerdict(checks="yes")),  # type: ignore[arg-type]
        with_verdict(dataclasses.replace(PassingTaskVerdict(checks=[]), passed=1)),  # type: ignore[arg-type]
        with_verdict({"passed": True, "checks": [True]}),
        with_verdict(None),
    ]
    empty = with_verdict(PassingTaskVerdict(checks=[]))

    assert (rejected.status, primary(rejected)) == ("task_failed", ("task", "task_rejected"))
    assert rejected.evidence.checks.to_dict() == {"passed": 1, "failed": 1}
    assert (contradictory.status, primary(contradictory)) == ("infra_failed", ("judge", "invalid_verdict"))
    assert [(report.status, primary(report)) for report in invalid] == [
        ("infra_failed", ("judge", "invalid_verdict"))
    ] * len(invalid)
    assert (empty.status, primary(empty)) == ("passed", None)


@pytest.mark.lab14_2
@pytest.mark.edits("assert_protocol")
def test_the_active_path_refuses_split_transcripts_late_results_and_duplicate_or_dangling_calls() -> None:
    """active path 是否拒绝重复的 call、没有 result 的 call、跨过下一条 assistant 才补交的 result，以及与
    result 不一致的 transcript？"""
    duplicate = path_with_tool("duplicate", call_id="same-call", duplicate_call=True)
    unpaired = path_with_tool("unpaired", call_id="never-finished", omit_result=True)
    late_call = call("late-across-assistant")
    late_entries = chain(
        "late",
        [
            user("late result"),
            assistant_message([late_call], "toolUse", timestamp=2),
            assistant_message([text("continued too early")], "stop", timestamp=3),
            result(late_call),
        ],
    )
    consistent = path_with_tool("split-brain", call_id="split-brain-call")
    forged = [copy.deepcopy(message) for message in consistent.messages]
    forged[-1] = assistant_message([text("forged success")], "stop", timestamp=4)

    reports = [
        run(passing_case("duplicate-protocol", simple(duplicate))),
        run(passing_case("unpaired-protocol", simple(unpaired))),
        run(
            passing_case(
                "late-protocol",
                lambda: PreparedEval(FakeRuntime(late_entries, late_entries[-1].id), lambda _file: "ok"),
            )
        ),
        run(
            passing_case(
                "result-session-mismatch",
                simple(consistent, result=AgentRunResult(reason="stop", messages=forged, steps=2)),
            )
        ),
    ]

    assert [primary(report) for report in reports] == [
        ("protocol", "duplicate_tool_call"),
        ("protocol", "unpaired_tool_call"),
        ("protocol", "unpaired_tool_call"),
        ("protocol", "result_session_mismatch"),
    ]
    assert [report.status for report in reports] == ["protocol_failed"] * 4


@pytest.mark.lab14_2
@pytest.mark.edits("assert_protocol")
def test_system_messages_belong_to_the_path_but_take_no_part_in_the_pairing() -> None:
    """active path 里的 system message 是否被接受、只留下计数，又不能顶替缺失的 tool result？"""
    tool_call = call("system-path-call")
    messages: list[AgentMessage] = [
        SystemMessage(content="BASE", sections={"rules": "RULE v1"}, timestamp=0),
        user("first"),
        assistant_message([tool_call], "toolUse", timestamp=2),
        result(tool_call),
        assistant_message([text("done first")], "stop", timestamp=4),
        SystemMessage(content="", sections={"rules": "RULE v2"}, timestamp=5),
        user("second", 6),
        assistant_message([text("done second")], "stop", timestamp=7),
    ]
    entries = chain("system", messages)
    report = run(
        passing_case(
            "system-path", lambda: PreparedEval(FakeRuntime(entries, entries[-1].id), lambda _file: "ok")
        )
    )

    assert report.status == "passed", primary(report)
    assert report.primary_failure is None
    assert report.evidence.messages.to_dict() == {"system": 2, "user": 2, "assistant": 3, "toolResult": 1}
    assert report.evidence.tools.to_dict() == {"calls": 1, "results": 1, "errors": 0}
    assert "BASE" not in wire(report) and "RULE" not in wire(report)

    kept = [entry for entry in entries if entry.id != "system-3"]
    dangling = [
        dataclasses.replace(entry, parent_id=None if index == 0 else kept[index - 1].id)
        for index, entry in enumerate(kept)
    ]
    without_result = run(
        passing_case(
            "system-path-dangling",
            lambda: PreparedEval(FakeRuntime(dangling, dangling[-1].id), lambda _file: "ok"),
        )
    )
    # A system message cannot stand in for the missing tool result.
    assert primary(without_result) == ("protocol", "unpaired_tool_call")


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_prepare_and_judge_errors_leave_fixed_layers_and_no_error_text() -> None:
    """prepare 与 judge 抛错（或 prepare 交回的不是 PreparedEval）时，报告是否只有固定的 phase/code，没有异常
    正文？"""
    valid = path_with_tool("layer")

    def failing_prepare() -> PreparedEval:
        raise RuntimeError("RAW_PREPARE_TOKEN")

    def failing_judge(_observation: EvalObservation) -> TaskVerdict:
        raise RuntimeError("RAW_JUDGE_TOKEN")

    prepare_report = run(
        EvalCase(
            id="prepare-layer",
            prompt="prepare",
            files=[],
            prepare=failing_prepare,
            judge=lambda _observation: PassingTaskVerdict(checks=[]),
        )
    )
    judge_report = run(passing_case("judge-layer", simple(valid), judge=failing_judge))
    not_prepared = run(passing_case("not-prepared", lambda: {"runtime": fake(valid)}))  # type: ignore[arg-type,return-value]
    no_reader = run(passing_case("no-reader", lambda: PreparedEval(fake(valid), None)))  # type: ignore[arg-type]

    assert primary(prepare_report) == ("prepare", "prepare_failed")
    assert primary(judge_report) == ("judge", "judge_failed")
    assert primary(not_prepared) == ("prepare", "prepare_failed")
    assert primary(no_reader) == ("prepare", "prepare_failed")
    assert {prepare_report.status, judge_report.status, not_prepared.status} == {"infra_failed"}
    published = wire(prepare_report) + wire(judge_report)
    assert "RAW_" not in published and "TOKEN" not in published


@pytest.mark.lab14_1
@pytest.mark.edits("run_eval_case")
def test_a_missing_leaf_or_a_broken_path_is_a_protocol_failure() -> None:
    """没有 active leaf、leaf 不在 session 里或祖先链断开时，是否分别记为 protocol/missing_active_leaf 与
    protocol/invalid_active_path？"""
    valid = path_with_tool("leaf")
    broken = [dataclasses.replace(entry) for entry in valid.entries]
    broken[2] = dataclasses.replace(broken[2], parent_id="gone")

    reports = [
        run(passing_case("no-leaf", lambda: PreparedEval(FakeRuntime(valid.entries, None), str))),
        run(passing_case("unknown-leaf", lambda: PreparedEval(FakeRuntime(valid.entries, "elsewhere"), str))),
        run(passing_case("broken-parent", lambda: PreparedEval(FakeRuntime(broken, valid.leaf_id), str))),
    ]

    assert [(report.status, primary(report)) for report in reports] == [
        ("protocol_failed", ("protocol", "missing_active_leaf")),
        ("protocol_failed", ("protocol", "invalid_active_path")),
        ("protocol_failed", ("protocol", "invalid_active_path")),
    ]


def case_over(entries: Sequence[SessionEntry], leaf_id: str | None = None) -> EvalCase:
    """A case whose runtime has exactly these entries, the last (or `leaf_id`) selected, no files."""
    leaf = leaf_id if leaf_id is not None else entries[-1].id
    return EvalCase(
        id="protocol",
        prompt="probe",
        files=[],
        prepare=lambda: PreparedEval(FakeRuntime(entries, leaf), lambda _file: ""),
        judge=lambda _observation: PassingTaskVerdict(checks=[]),
    )


CALL_A = call("call-a", "read")
CALL_B = call("call-b", "write")
PROTOCOL_CASES: dict[str, tuple[list[AgentMessage], str]] = {
    "assistant first": ([assistant_message([text("hello")], "stop", timestamp=1)], "assistant_without_user"),
    "result before any user": ([result(CALL_A)], "orphan_tool_result"),
    "result for no call": (
        [user("u"), assistant_message([text("a")], "stop", timestamp=2), result(CALL_A)],
        "orphan_tool_result",
    ),
    "result twice": (
        [user("u"), assistant_message([CALL_A], "toolUse", timestamp=2), result(CALL_A), result(CALL_A)],
        "duplicate_tool_result",
    ),
    "result under another name": (
        [
            user("u"),
            assistant_message([CALL_A], "toolUse", timestamp=2),
            dataclasses.replace(result(CALL_A), tool_name="write"),
            assistant_message([text("done")], "stop", timestamp=4),
        ],
        "tool_name_mismatch",
    ),
    "system only": ([SystemMessage(content="BASE", timestamp=0)], "missing_user_interaction"),
    "user then user": (
        [user("one"), user("two"), assistant_message([text("a")], "stop", timestamp=3)],
        "incomplete_user_interaction",
    ),
    "user at the end": (
        [user("one"), assistant_message([text("a")], "stop", timestamp=2), user("two")],
        "incomplete_user_interaction",
    ),
    "call open at the next user": (
        [user("u"), assistant_message([CALL_A], "toolUse", timestamp=2), user("again")],
        "unpaired_tool_call",
    ),
    "same id in two assistants": (
        [
            user("u"),
            assistant_message([CALL_A], "toolUse", timestamp=2),
            result(CALL_A),
            assistant_message([dataclasses.replace(CALL_A, name="write")], "toolUse", timestamp=4),
        ],
        "duplicate_tool_call",
    ),
}


@pytest.mark.lab14_2
@pytest.mark.edits("assert_protocol")
@pytest.mark.parametrize("name", list(PROTOCOL_CASES))
def test_each_protocol_break_has_its_own_code(name: str) -> None:
    """每一种协议偏差（先有 assistant、孤立或重复的 result、toolName 错配、没有 user、interaction 不完整、悬空
    call）是否各自得到固定的 code？"""
    messages, code = PROTOCOL_CASES[name]
    report = run(case_over(chain("p", messages)))

    assert (report.status, primary(report)) == ("protocol_failed", ("protocol", code))


@pytest.mark.lab14_2
@pytest.mark.edits("assert_protocol")
@given(
    batches=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=3),
    order=st.randoms(use_true_random=False),
    data=st.data(),
)
def test_results_of_a_batch_may_come_in_any_order_but_none_may_be_missing(
    batches: list[int], order: Any, data: st.DataObject
) -> None:
    """一次 interaction 里的 results 以任意顺序出现时路径是否合法，而去掉其中任意一个 result 是否总是
    unpaired_tool_call？"""
    messages: list[AgentMessage] = []
    result_positions: list[int] = []
    for turn, size in enumerate(batches):
        calls = [call(f"t{turn}-c{index}", f"tool{index}") for index in range(size)]
        messages.append(user(f"turn {turn}"))
        messages.append(assistant_message(list(calls), "toolUse" if calls else "stop", timestamp=2))
        answers: list[AgentMessage] = [result(item) for item in calls]
        order.shuffle(answers)
        for answer in answers:
            result_positions.append(len(messages))
            messages.append(answer)
        if calls:
            messages.append(assistant_message([text("done")], "stop", timestamp=3))

    whole = run(case_over(chain("ok", messages)))
    assert (whole.status, primary(whole)) == ("passed", None)
    if result_positions:
        dropped = data.draw(st.sampled_from(result_positions))
        missing = run(case_over(chain("gap", messages[:dropped] + messages[dropped + 1 :])))
        assert primary(missing) == ("protocol", "unpaired_tool_call")


@pytest.mark.lab14_2
@pytest.mark.edits("same_transcript")
def test_the_transcript_comparison_is_strict_about_kinds() -> None:
    """result 与 session 的比较是否像 isDeepStrictEqual 一样严格：True 不等于 1，列表不等于字典，数字 1 等于
    1.0？"""
    valid = path_with_tool("strict")
    loose = [copy.deepcopy(message) for message in valid.messages]
    answer = loose[2]
    assert isinstance(answer, ToolResultMessage)
    answer.details = {"changed": 1}  # the session has True

    report = run(
        passing_case("strict", simple(valid, result=AgentRunResult(reason="stop", messages=loose, steps=2)))
    )

    assert primary(report) == ("protocol", "result_session_mismatch")
    assert same_transcript(valid.messages, copy.deepcopy(valid.messages))
    assert same_transcript({"n": 1}, {"n": 1.0})
    assert not same_transcript([True], [1])
    assert not same_transcript([], {})
    assert not same_transcript({"a": 1}, {"a": 1, "b": 2})
    assert not same_transcript(user("x"), SystemMessage(content="x", timestamp=1))


# ## Lab 14.3 · safe evidence, primary and secondary failures, the suite in series


@pytest.mark.lab14_3
@pytest.mark.edits("count_evidence")
def test_safe_evidence_keeps_only_counts_never_transcript_files_paths_or_call_ids() -> None:
    """报告的 evidence 是否只有计数，序列化后不含 transcript、文件正文、路径或 callId，字段也只有规定的五
    个？"""
    raw_secret = "sk-live-RAW-CAPSTONE-SECRET"
    valid = path_with_tool("safe", call_id="raw-sensitive-call-id", file_text=raw_secret)

    report = run(
        passing_case(
            "safe-report",
            lambda: PreparedEval(fake(valid), lambda _file: f"/private/work/{raw_secret}/answer"),
            judge=lambda _observation: FailingTaskVerdict(checks=[True, False, True]),
        )
    )

    assert report.evidence.to_dict() == {
        "messages": {"system": 0, "user": 1, "assistant": 2, "toolResult": 1},
        "tools": {"calls": 1, "results": 1, "errors": 0},
        "files": {"requested": 1, "read": 1},
        "checks": {"passed": 2, "failed": 1},
    }
    published = wire(report)
    for secret in ("RAW-CAPSTONE", "raw-sensitive", "private/work", "answer.txt", "sk-live"):
        assert secret not in published
    assert sorted(report.to_dict()) == ["evidence", "id", "primaryFailure", "secondaryFailures", "status"]
    assert [item.name for item in dataclasses.fields(report)] == [
        "id",
        "status",
        "evidence",
        "primary_failure",
        "secondary_failures",
    ]
    assert "primaryFailure" not in run(passing_case("clean", simple(valid))).to_dict()


@pytest.mark.lab14_3
@pytest.mark.edits("count_evidence")
def test_evidence_counts_tool_errors_and_the_files_read_before_a_failure() -> None:
    """evidence 是否数出 is_error 的 result，并在读文件中途失败时只记下已经读到的文件数？"""
    failed_tool = path_with_tool("tool-error", is_error=True)
    reads: list[str] = []

    def read_file(file: str) -> str:
        reads.append(file)
        if file == "c.txt":
            raise OSError("disk gone")
        return "ok"

    errors = run(passing_case("tool-errors", simple(failed_tool)))
    partial = run(
        passing_case(
            "partial-read",
            lambda: PreparedEval(fake(failed_tool), read_file),
            files=["a.txt", "b.txt", "c.txt", "d.txt"],
        )
    )
    protocol = run(passing_case("protocol-evidence", simple(path_with_tool("open", omit_result=True))))

    assert errors.evidence.tools.to_dict() == {"calls": 1, "results": 1, "errors": 1}
    assert primary(partial) == ("collect", "collect_failed")
    assert reads == ["a.txt", "b.txt", "c.txt"]
    assert partial.evidence.files.to_dict() == {"requested": 4, "read": 2}
    assert partial.evidence.checks.to_dict() == {"passed": 0, "failed": 0}
    # A protocol failure still counts the path it refused.
    assert protocol.evidence.messages.to_dict() == {"system": 0, "user": 1, "assistant": 2, "toolResult": 0}
    assert protocol.evidence.tools.to_dict() == {"calls": 1, "results": 0, "errors": 0}


@pytest.mark.lab14_3
@pytest.mark.edits("append_cleanup_failure")
def test_dispose_and_cleanup_failures_never_replace_a_primary_and_append_in_order() -> None:
    """dispose 与 cleanup 出错时，已有的 primary 是否保留、它们按发生顺序追加为 secondary；主流程通过时
    dispose_failed 是否成为 primary？"""
    valid = path_with_tool("cleanup")
    events: list[str] = []

    def prepare() -> PreparedEval:
        def cleanup() -> None:
            events.append("cleanup")
            raise RuntimeError("RAW_CLEANUP")

        return PreparedEval(
            fake(valid, dispose_error=RuntimeError("RAW_DISPOSE"), events=events), lambda _file: "ok", cleanup
        )

    task_failed = run(
        passing_case("task-before-cleanup", prepare, judge=lambda _o: FailingTaskVerdict(checks=[False]))
    )
    cleanup_primary = run(passing_case("cleanup-primary", prepare))

    assert primary(task_failed) == ("task", "task_rejected")
    assert [failure.to_dict() for failure in task_failed.secondary_failures] == [
        {"phase": "dispose", "code": "dispose_failed"},
        {"phase": "cleanup", "code": "cleanup_failed"},
    ]
    assert task_failed.status == "task_failed"
    assert primary(cleanup_primary) == ("dispose", "dispose_failed")
    assert [failure.to_dict() for failure in cleanup_primary.secondary_failures] == [
        {"phase": "cleanup", "code": "cleanup_failed"}
    ]
    assert cleanup_primary.status == "infra_failed"
    assert events.count("dispose") == 2
    assert events.count("cleanup") == 2
    assert "RAW_" not in wire(task_failed) + wire(cleanup_primary)


@pytest.mark.lab14_3
@pytest.mark.edits("append_cleanup_failure")
def test_a_failing_cleanup_alone_becomes_the_primary_of_a_passing_run() -> None:
    """只有 cleanup 出错、主流程与 dispose 都正常时，cleanup_failed 是否成为 primary、status 变为
    infra_failed？"""
    valid = path_with_tool("cleanup-only")

    def cleanup() -> None:
        raise RuntimeError("RAW_CLEANUP")

    report = run(passing_case("cleanup-only", lambda: PreparedEval(fake(valid), lambda _file: "ok", cleanup)))

    assert (report.status, primary(report), report.secondary_failures) == (
        "infra_failed",
        ("cleanup", "cleanup_failed"),
        [],
    )


@pytest.mark.lab14_3
@pytest.mark.edits("run_eval_suite")
def test_the_suite_runs_in_series_in_input_order_and_prepares_a_repeated_case_again() -> None:
    """suite 是否按输入顺序串行运行，每个 case 收口后下一个才 prepare，重复出现的 case 是否再次 prepare？"""
    sequence: list[str] = []
    alpha_runs = 0

    def make_case(case_id: str) -> EvalCase:
        def prepare() -> PreparedEval:
            nonlocal alpha_runs
            if case_id == "alpha":
                alpha_runs += 1
            sequence.append(f"prepare:{case_id}")
            valid = path_with_tool(f"{case_id}-{len(sequence)}")

            def read_file(_file: str) -> str:
                sequence.append(f"read:{case_id}")
                return "ok"

            return PreparedEval(
                fake(valid, events=sequence), read_file, lambda: sequence.append(f"cleanup:{case_id}")
            )

        return passing_case(case_id, prepare)

    alpha = make_case("alpha")
    beta = make_case("beta")
    reports = asyncio.run(run_eval_suite([alpha, beta, alpha]))

    assert [report.id for report in reports] == ["alpha", "beta", "alpha"]
    assert [report.status for report in reports] == ["passed", "passed", "passed"]
    assert alpha_runs == 2
    lifecycle = [event for event in sequence if event.startswith(("prepare:", "cleanup:"))]
    assert lifecycle == [
        "prepare:alpha",
        "cleanup:alpha",
        "prepare:beta",
        "cleanup:beta",
        "prepare:alpha",
        "cleanup:alpha",
    ]


@pytest.mark.lab14_3
@pytest.mark.edits("run_eval_suite")
def test_the_next_case_waits_while_the_first_one_is_still_running() -> None:
    """第一个 case 的 prompt 被闸门挡住时，第二个 case 是否还没有 prepare，闸门打开后才开始？"""
    prepared: list[str] = []
    gate = asyncio.Event()
    started = asyncio.Event()

    def case(case_id: str, **options: Any) -> EvalCase:
        def prepare() -> PreparedEval:
            prepared.append(case_id)
            return simple(path_with_tool(case_id), **options)()

        return passing_case(case_id, prepare)

    async def scenario() -> list[EvalReport]:
        suite = asyncio.ensure_future(
            run_eval_suite([case("first", prompt_gate=gate, prompt_started=started), case("second")])
        )
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait({suite, waiting}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        if suite.done():  # it ended without ever reaching the gate: show why (an unfinished lab, say)
            waiting.cancel()
            return suite.result()
        for _ in range(20):  # give a concurrent runner every chance to start the second case
            await asyncio.sleep(0)
        assert prepared == ["first"]
        gate.set()
        return await asyncio.wait_for(suite, timeout=5)

    reports = asyncio.run(scenario())

    assert prepared == ["first", "second"]
    assert [report.status for report in reports] == ["passed", "passed"]


# ## A real run: 13's Runtime writes a real file, a real JSONL session keeps it, the runner judges


def write_answer_tool(workspace: Path) -> Tool[dict[str, Any], dict[str, Any]]:
    """A write tool for the real run: writes a file under `workspace`, with JSON details.

    (08's `write` reports a `WriteDetails` dataclass, which 10's strict session refuses to persist as
    JSON; a tool whose details are JSON, as the course's are, is what a persisted Runtime can keep.)
    """

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, Any]]:
        target = workspace / parameters["path"]
        target.write_text(parameters["content"], encoding="utf-8")
        return ToolOutput(
            [text("written")], {"path": parameters["path"], "bytes": len(parameters["content"])}
        )

    return Tool(
        "write_file", "写一个文件", object_schema({"path": string_value, "content": string_value}), execute
    )


@pytest.mark.lab14_3
@pytest.mark.edits("run_eval_suite", "count_evidence")
def test_a_real_runtime_that_writes_answer_txt_passes_and_each_run_gets_its_own_folder(
    tmp_path: Path,
) -> None:
    """13 的真实 Runtime 在临时目录写出 answer.txt、消息落进 JSONL session 后，runner 是否判定通过，两次运行是
    否各用各的目录并在 cleanup 后删掉？"""
    folders: list[Path] = []
    runtimes: list[EvalRuntime] = []

    async def prepare() -> PreparedEval:
        workspace = tmp_path / f"run-{len(folders) + 1}"  # a new folder, session and runtime every time
        workspace.mkdir()
        folders.append(workspace)
        store = await JsonlSessionStore.open(str(workspace / "session.jsonl"))
        write = ToolCall(
            id="call-write", name="write_file", arguments={"path": "answer.txt", "content": "ok"}
        )
        model = ScriptedModel(
            [assistant_message([write], "toolUse"), assistant_message([text("done")], "stop")]
        )
        ids = iter(range(100))
        runtime: EvalRuntime = await create_runtime(  # 13's Runtime fits the runner's EvalRuntime as it is
            RuntimeConfig(
                active_leaf_id=None,
                context=ContextBudget(
                    total=10_000, reserved_output=0, safety_margin=0, estimate_tokens=lambda _: 1
                ),
            ),
            RuntimeDeps(
                model=model,
                tools=ToolRegistry([write_answer_tool(workspace)]),
                session=store,
                resources=ResourceCatalog(resources=[], instructions=[], skills=[], templates=[]),
                create_id=lambda: f"entry-{next(ids)}",
                now=lambda: 1,
            ),
        )
        runtimes.append(runtime)
        return PreparedEval(
            runtime=runtime,
            read_file=lambda file: (workspace / file).read_text(encoding="utf-8"),
            cleanup=lambda: shutil.rmtree(workspace),
        )

    def judge(observation: EvalObservation) -> TaskVerdict:
        checks = [observation.files["answer.txt"] == "ok", text_of(observation.result.messages[-1]) == "done"]
        return PassingTaskVerdict(checks=checks) if all(checks) else FailingTaskVerdict(checks=checks)

    write_answer = EvalCase(
        id="write-answer", prompt="write ok to answer.txt", files=["answer.txt"], prepare=prepare, judge=judge
    )
    reports = asyncio.run(run_eval_suite([write_answer, write_answer]))

    assert [report.to_dict() for report in reports] == [
        {
            "id": "write-answer",
            "status": "passed",
            "evidence": {
                "messages": {"system": 0, "user": 1, "assistant": 2, "toolResult": 1},
                "tools": {"calls": 1, "results": 1, "errors": 0},
                "files": {"requested": 1, "read": 1},
                "checks": {"passed": 2, "failed": 0},
            },
            "secondaryFailures": [],
        }
    ] * 2
    assert len(folders) == 2 and folders[0] != folders[1]
    assert runtimes[0] is not runtimes[1]
    assert not any(folder.exists() for folder in folders)
