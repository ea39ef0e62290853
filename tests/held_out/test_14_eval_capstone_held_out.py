"""Held-out tests of checkpoint 14: the runner's promises on cases the public tests never build.

Kept in the course repository only; `pi-course grade` stages them beside the public focused tests,
disguised like them, and scores each with the lab its marker names (the course files them as a fourth
lab, "Lab 14.4"; here each counts for the lab whose promise it checks). The session here starts at a
metadata root, carries an unselected sibling branch, and uses other ids, tool names, prompts and files
than any public test, so a runner that recognises the public fixtures instead of checking the protocol
fails them.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field

import pytest
from pi_course import (
    AgentMessage,
    AgentRunResult,
    EvalCase,
    EvalObservation,
    EvalReport,
    MessageSessionEntry,
    MetadataSessionEntry,
    PassingTaskVerdict,
    PreparedEval,
    SessionEntry,
    TaskVerdict,
    ToolCall,
    ToolResultMessage,
    assistant_message,
    run_eval_case,
    run_eval_suite,
    text,
    user_message,
)


def node(entry_id: str, parent_id: str | None, message: AgentMessage) -> MessageSessionEntry:
    """A message node."""
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=41, message=message)


def invocation(call_id: str, name: str = "patch") -> ToolCall:
    """A call with arguments no public test uses."""
    return ToolCall(id=call_id, name=name, arguments={"line": 947, "replacement": "bounded"})


def outcome(tool_call: ToolCall, *, name: str | None = None, body: str = "applied") -> ToolResultMessage:
    """The result of `tool_call` (under another tool name when `name` is given)."""
    return ToolResultMessage(
        tool_call_id=tool_call.id,
        tool_name=name or tool_call.name,
        content=[text(body)],
        details={"line": 947},
        is_error=False,
        timestamp=44,
    )


@dataclass
class Fixture:
    """A session: metadata root → request → (sibling) → proposal → result(s) → answer."""

    entries: list[SessionEntry]
    leaf_id: str
    messages: list[AgentMessage]


def held_out_path(
    seed: str, *, result_name: str | None = None, repeat_result: bool = False, sibling_noise: bool = False
) -> Fixture:
    """The held-out session of `seed`, perturbed as asked."""
    root = MetadataSessionEntry(
        id=f"{seed}-meta", parent_id=None, timestamp=40, key="fixture", value="held-out"
    )
    tool_call = invocation(f"{seed}-invoke-947")
    request = node(f"{seed}-request", root.id, user_message(f"repair held-out target {seed}"))
    request.message.timestamp = 42
    proposal = node(f"{seed}-proposal", request.id, assistant_message([tool_call], "toolUse", timestamp=43))
    answer_result = outcome(tool_call, name=result_name)
    result_node = node(f"{seed}-result", proposal.id, answer_result)
    repeated = (
        node(f"{seed}-result-again", result_node.id, copy.deepcopy(answer_result)) if repeat_result else None
    )
    final = node(
        f"{seed}-answer",
        (repeated or result_node).id,
        assistant_message([text(f"verified {seed}")], "stop", timestamp=45),
    )
    sibling = (
        node(
            f"{seed}-unselected-noise",
            request.id,
            outcome(invocation(f"{seed}-unknown-sibling"), body="RAW_UNSELECTED_BRANCH"),
        )
        if sibling_noise
        else None
    )
    entries: list[SessionEntry] = [root, request]
    if sibling is not None:
        entries.append(sibling)
    entries += [proposal, result_node]
    if repeated is not None:
        entries.append(repeated)
    entries.append(final)
    messages = [
        entry.message
        for entry in entries
        if isinstance(entry, MessageSessionEntry) and (sibling is None or entry.id != sibling.id)
    ]
    return Fixture(entries, final.id, messages)


@dataclass
class HeldOutRuntime:
    """A runtime over a fixture; it records its calls and may fail to dispose."""

    fixture: Fixture
    dispose_error: Exception | None = None
    events: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.session = self

    async def append(self, entry: SessionEntry) -> None:
        """Not used by the runner."""
        raise AssertionError("not used")

    async def entries(self) -> list[SessionEntry]:
        """Every entry of the fixture, as copies."""
        self.events.append("entries")
        return copy.deepcopy(self.fixture.entries)

    def get_active_leaf_id(self) -> str | None:
        """The fixture's leaf."""
        return self.fixture.leaf_id

    async def prompt(self, value: str) -> AgentRunResult:
        """The fixture's transcript as the run's result."""
        self.events.append("prompt")
        return AgentRunResult(reason="stop", messages=copy.deepcopy(self.fixture.messages), steps=2)

    async def flush(self) -> None:
        """Nothing pending."""
        self.events.append("flush")

    async def dispose(self) -> None:
        """Record, and fail when asked to."""
        self.events.append("dispose")
        if self.dispose_error is not None:
            raise self.dispose_error


def published(report: EvalReport) -> str:
    """What a published report shows."""
    return json.dumps(report.to_dict(), ensure_ascii=False) + repr(report)


@pytest.mark.lab14_3
@pytest.mark.edits("run_eval_suite")
def test_held_out_repeated_case_is_isolated_on_new_ids_and_ignores_the_unselected_branch() -> None:
    """在新的路径与 callId 上重复运行同一个 held-out case 时，每次是否都重新 prepare、各自隔离，并忽略未选中的
    分支？"""
    generation = 0
    observed_leaves: list[str] = []

    def prepare() -> PreparedEval:
        nonlocal generation
        generation += 1
        current = generation
        fixture = held_out_path(f"generation-{current}", sibling_noise=True)

        def read_file(file: str) -> str:
            return json.dumps({"file": file, "generation": current, "stable": True})

        return PreparedEval(runtime=HeldOutRuntime(fixture), read_file=read_file)

    def judge(observation: EvalObservation) -> TaskVerdict:
        observed_leaves.append(observation.entries[-1].id)
        content = json.loads(observation.files["artifacts/result-41.json"])
        return PassingTaskVerdict(
            checks=[
                "RAW_UNSELECTED_BRANCH" not in repr(list(observation.entries)),
                content["stable"] is True,
            ]
        )

    hidden = EvalCase(
        id="hidden-branch-41",
        prompt="repair artifact 41 without reading sibling branches",
        files=["artifacts/result-41.json"],
        prepare=prepare,
        judge=judge,
    )

    reports = asyncio.run(run_eval_suite([hidden, hidden]))

    assert [report.status for report in reports] == ["passed", "passed"]
    assert generation == 2
    assert observed_leaves == ["generation-1-answer", "generation-2-answer"]
    assert [report.evidence.checks.to_dict() for report in reports] == [{"passed": 2, "failed": 0}] * 2


def probe(case_id: str, fixture: Fixture) -> EvalCase:
    """A case over `fixture` that declares no file and accepts anything the protocol lets through."""
    return EvalCase(
        id=case_id,
        prompt=f"probe {case_id}",
        files=[],
        prepare=lambda: PreparedEval(runtime=HeldOutRuntime(fixture), read_file=lambda _file: ""),
        judge=lambda _observation: PassingTaskVerdict(checks=[]),
    )


@pytest.mark.lab14_2
@pytest.mark.edits("assert_protocol")
def test_held_out_protocol_faults_tell_a_tool_name_mismatch_from_a_repeated_result() -> None:
    """held-out 的协议扰动里，toolName 错配与重复的 result 是否分别识别为 tool_name_mismatch 与
    duplicate_tool_result？"""
    wrong_name = asyncio.run(
        run_eval_case(probe("hidden-name-fault-73", held_out_path("fault-name-73", result_name="replace")))
    )
    repeated = asyncio.run(
        run_eval_case(probe("hidden-repeat-fault-89", held_out_path("fault-repeat-89", repeat_result=True)))
    )

    assert wrong_name.primary_failure is not None and wrong_name.primary_failure.to_dict() == {
        "phase": "protocol",
        "code": "tool_name_mismatch",
    }
    assert repeated.primary_failure is not None and repeated.primary_failure.to_dict() == {
        "phase": "protocol",
        "code": "duplicate_tool_result",
    }
    assert wrong_name.status == "protocol_failed"
    assert repeated.status == "protocol_failed"


@pytest.mark.lab14_3
@pytest.mark.edits("append_cleanup_failure")
def test_held_out_file_fault_stays_primary_lifecycle_faults_only_append_and_nothing_leaks() -> None:
    """held-out 的文件读取故障是否保持 primary，之后的 dispose 与 cleanup 故障只是追加，而报告里不含任何秘密、
    路径或异常正文？"""
    fixture = held_out_path("fault-stack-113")
    events: list[str] = []
    secret = "secret-held-out-113"
    judged: list[int] = []

    def read_file(_file: str) -> str:
        raise OSError(f"read:{secret}")

    def cleanup() -> None:
        events.append("cleanup")
        raise RuntimeError(f"cleanup:{secret}")

    def judge(_observation: EvalObservation) -> TaskVerdict:
        judged.append(1)
        raise AssertionError("judge must not run")

    runtime = HeldOutRuntime(fixture, dispose_error=RuntimeError(f"dispose:{secret}"), events=events)
    report = asyncio.run(
        run_eval_case(
            EvalCase(
                id="hidden-cleanup-fault-113",
                prompt="verify a path with injected read failure 113",
                files=["private/variant-113.bin"],
                prepare=lambda: PreparedEval(runtime=runtime, read_file=read_file, cleanup=cleanup),
                judge=judge,
            )
        )
    )

    assert report.status == "infra_failed"
    assert report.primary_failure is not None
    assert report.primary_failure.to_dict() == {"phase": "collect", "code": "collect_failed"}
    assert [failure.to_dict() for failure in report.secondary_failures] == [
        {"phase": "dispose", "code": "dispose_failed"},
        {"phase": "cleanup", "code": "cleanup_failed"},
    ]
    assert events == ["prompt", "flush", "entries", "dispose", "cleanup"]
    assert judged == []
    text_of_report = published(report)
    for leaked in ("secret-held-out", "variant-113", "private", "stack"):
        assert leaked not in text_of_report
