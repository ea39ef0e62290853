"""Scoring one graded run: pure functions from the trusted verdicts to a learner record.

Nothing here runs code or touches a sandbox: the grader hands over what it saw (the verdicts, how the
run ended) and gets the record's labs, flags and status back, so every rule is tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Protocol

from pi_course_kit.core.manifest import HELD_OUT_DIR, Checkpoint
from pi_course_kit.core.records import CollectError, LabInfo, Status, TestRecord, clean, summarise
from pi_course_kit.instructor.grade.gradebook import (
    COMPLETE,
    CRASHED,
    ERROR,
    NOT_STARTED,
    OUTCOMES,
    PARTIAL,
    SANDBOX_ERROR,
    TAMPERING,
    TIMEOUT,
    LabScore,
    LearnerRecord,
    TestVerdict,
)

TAMPERING_FLAG = "tampering: a control test that no honest code can pass was reported as passed; scored 0"
#: At most this many parent labs are named in the "parent labs not green" flag; the rest are counted.
NAMED_PARENT_LABS = 6


class RunEnd(Protocol):
    """How a run ended, as the grader itself observed it (never from the learner's output)."""

    @property
    def returncode(self) -> int: ...

    @property
    def timed_out(self) -> bool: ...

    @property
    def seconds(self) -> float: ...


@dataclass(frozen=True)
class Found:
    """What the grader read back from one run: verdicts by public node id, tampering, the report's end."""

    by_node: Mapping[str, TestRecord]
    tampering: bool
    #: Whether the run wrote its closing summary (a run without one crashed).
    finished: bool
    collect_errors: Sequence[CollectError] = ()


def lab_status(
    passed: int, total: int, found: Sequence[TestRecord], lab: LabInfo, known: Sequence[str] = ()
) -> tuple[Status, str | None]:
    """The lab's status by the report's own rules (records.summarise), and the lab blocking it.

    The blocker is read from the run, so learner code chooses it: only a lab id of `known` (the
    checkpoint's tree labs) is kept, never free text (a blocker is shown to the learner).
    """
    if total and passed == total:
        return Status.DONE, None
    row = summarise([lab], [replace(t, lab=lab.id) for t in found])[0]
    if row.status == Status.BLOCKED and row.blocked_by and row.blocked_by in known:
        return Status.BLOCKED, row.blocked_by
    # Tests that never reported count as failures here, so a lab with any pass is failing, not done.
    if row.status in (Status.FAILING, Status.IN_PROGRESS, Status.DONE) or passed:
        return Status.FAILING, None
    return Status.NOT_STARTED, None


def held_out_nodes(checkpoint: Checkpoint, labs_of: Mapping[str, str]) -> frozenset[str]:
    """The node ids of the held-out tests among `labs_of`: those of a module the checkpoint's tree (as
    graded, see held_out.graded) takes from tests/held_out/.

    When the tree has held-out modules but no node id names one (they were staged under other names),
    the held-out tests cannot be told apart: every test counts as held out, so that nothing leaks.
    """
    modules = {PurePosixPath(path).name for path in checkpoint.tree_tests if path.startswith(HELD_OUT_DIR)}
    if not modules:
        return frozenset()
    found = frozenset(node for node in labs_of if PurePosixPath(node.partition("::")[0]).name in modules)
    return found or frozenset(labs_of)


def verdicts(
    labs_of: Mapping[str, str],
    by_node: Mapping[str, TestRecord],
    held_out: frozenset[str] = frozenset(),
    proven: frozenset[str] = frozenset(),
) -> list[TestVerdict]:
    """Each pristine test's outcome in run order; a test the learner's run did not report is "missing"."""
    found = []
    for node, lab in labs_of.items():
        test = by_node.get(node)
        outcome = test.outcome if test is not None else "missing"
        shown = outcome if outcome in OUTCOMES else "failed"
        found.append(TestVerdict(node, lab, shown, node in held_out, node in proven and shown == "passed"))
    return found


def durations(labs_of: Mapping[str, str], by_node: Mapping[str, TestRecord]) -> dict[str, float]:
    """Each pristine test's reported duration (TestRecord.from_json already kept only sane ones)."""
    return {node: by_node[node].duration for node in labs_of if node in by_node}


def observed_flags(run: RunEnd) -> list[str]:
    """Flags from what the grader itself saw (exit status, its own clock), never from learner output."""
    flags = []
    signals = {
        -9: "killed (SIGKILL)",
        137: "killed (SIGKILL)",
        -24: "CPU time limit reached",
        152: "CPU time limit reached",
    }
    if run.returncode in signals and not run.timed_out:
        flags.append(signals[run.returncode])
    if run.returncode in (-25, 153):
        flags.append("file size limit reached")
    return flags


def score(
    record: LearnerRecord,
    checkpoint: Checkpoint,
    labs_of: Mapping[str, str],
    run: RunEnd,
    found: Found,
    proven: frozenset[str] = frozenset(),
) -> None:
    """Fill `record` (labs, totals, verdicts, flags, status) from one run's trusted verdicts; `proven`
    tests passed by the batch's reference proof (`proof`), without running."""
    by_node = found.by_node
    known = [lab.id for lab in checkpoint.tree_labs]
    for lab in checkpoint.labs:
        nodes = [node for node, lab_id in labs_of.items() if lab_id == lab.id]
        tests = [by_node[node] for node in nodes if node in by_node]
        # Only a pristine test that ran and passed counts: skipped or missing tests never do.
        passed = 0 if found.tampering else sum(1 for t in tests if t.outcome == "passed")
        failure = next((t for t in tests if t.outcome != "passed"), None)
        message = clean(failure.message or failure.skip_reason) if failure else ""
        status: str
        blocked_by: str | None
        if found.tampering:
            status, blocked_by = TAMPERING, None
        else:
            info = LabInfo(lab.id, lab.marker, lab.title, lab.optional)
            status, blocked_by = lab_status(passed, len(nodes), tests, info, known)
        record.labs.append(
            LabScore(lab.id, lab.title, lab.optional, passed, len(nodes), status, message, blocked_by)
        )
    required = [s for s in record.labs if not s.optional]
    record.passed = sum(s.passed for s in required)
    # The parent checkpoint's labs earn nothing here, but the parent must stay green: say when it is not.
    inherited = [lab.id for lab in checkpoint.tree_labs if lab.inherited and not lab.optional]
    broken = [
        lab_id
        for lab_id in inherited
        if any(
            (test := by_node.get(node)) is None or test.outcome != "passed"
            for node, owner in labs_of.items()
            if owner == lab_id
        )
    ]
    trusted = {} if found.tampering else by_node
    record.tests = verdicts(labs_of, trusted, held_out_nodes(checkpoint, labs_of), proven)
    record.durations = durations(labs_of, trusted)
    record.total = sum(s.total for s in required)
    # MemoryError is read from the structured verdict of a graded test, never from printed text.
    if any(t.exc_type == "MemoryError" for t in by_node.values()):
        record.flags.append("memory limit reached")
    record.flags += observed_flags(run)
    if found.tampering:
        record.status, record.message = TAMPERING, ""
        record.flags.append(TAMPERING_FLAG)
    elif run.timed_out:
        record.status = TIMEOUT
        record.message = f"stopped after the wall-time limit of {run.seconds:.0f}s (an endless loop?)"
    elif found.collect_errors and not by_node:
        record.status = ERROR
        record.message = import_failure(found.collect_errors[0])
    elif not found.finished:
        record.status = CRASHED
        record.message = f"the test run ended without its report (exit code {run.returncode})"
        if not by_node:  # nothing ran: the process ended while the package was being imported
            record.message += ": no test ran, so something ended it while importing the package (os._exit?)"
    elif record.total and record.passed == record.total:
        record.status = COMPLETE
    else:
        record.status = PARTIAL if record.passed else NOT_STARTED
    if found.collect_errors and not record.message and not found.tampering:
        # Some test modules ran, others did not import: that is the first thing to fix, said first.
        record.message = import_failure(found.collect_errors[0])
    if record.status in (TIMEOUT, CRASHED, SANDBOX_ERROR) and not by_node:
        record.flags.append("no test result was recorded")
    # The parent must stay green: say when it is not, unless the first cause above explains it already
    # (a package that does not import, a run stopped early fails every parent lab it did not reach).
    if broken and not found.tampering and not record.message:
        named = ", ".join(broken[:NAMED_PARENT_LABS])
        more = f" and {len(broken) - NAMED_PARENT_LABS} more" if len(broken) > NAMED_PARENT_LABS else ""
        record.flags.append(f"parent labs not green: {named}{more}")


def import_failure(first: CollectError) -> str:
    """The note for a package (or test module) that does not import: where, and the error."""
    where = f" at {clean(first.location, 200)}" if first.location else ""
    return clean(f"the package does not import{where}: {first.message}")
