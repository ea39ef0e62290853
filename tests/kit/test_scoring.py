"""The grader's scoring rules as pure functions, on the fixture course, without a sandbox or a run."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import CollectError, LabInfo, Status
from pi_course_kit.core.records import TestRecord as Record
from pi_course_kit.instructor.grade import gradebook, scoring
from pi_course_kit.instructor.grade.gradebook import LearnerRecord


@dataclass(frozen=True)
class Ended:
    """How a run ended, as the grader would have seen it."""

    returncode: int = 0
    timed_out: bool = False
    seconds: float = 1.0


def labs_of(checkpoint: Checkpoint, per_lab: int = 2) -> dict[str, str]:
    """Made-up pristine node ids, `per_lab` per lab of the checkpoint's tree."""
    return {
        f"tests/test_x.py::test_{lab.marker}_{n}": lab.id
        for lab in checkpoint.tree_labs
        for n in range(per_lab)
    }


def record_for(
    checkpoint: Checkpoint,
    outcomes: dict[str, str],
    run: Ended | None = None,
    tampering: bool = False,
    finished: bool = True,
    errors: tuple[CollectError, ...] = (),
    **fields: str,
) -> LearnerRecord:
    nodes = labs_of(checkpoint)
    by_node = {
        node: Record(node, lab, outcomes.get(lab, "passed"), **fields)  # type: ignore[arg-type]
        for node, lab in nodes.items()
        if outcomes.get(lab) != "missing"
    }
    record = LearnerRecord("me", "/me", gradebook.SKIPPED, checkpoint.id)
    found = scoring.Found(by_node, tampering, finished, errors)
    scoring.score(record, checkpoint, nodes, run or Ended(), found)
    return record


def test_every_test_passing_is_complete(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {})
    assert record.status == gradebook.COMPLETE
    assert record.passed == record.total == 4  # the optional lab counts for nothing here
    assert [score.status for score in record.labs] == [Status.DONE] * 3
    assert {verdict.outcome for verdict in record.tests} == {"passed"}


def test_a_failing_lab_makes_the_record_partial_and_keeps_the_message(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {"1.2": "failed"}, message="expected 3\x1b[31m")
    assert record.status == gradebook.PARTIAL
    row = next(score for score in record.labs if score.id == "1.2")
    assert (row.status, row.passed, row.total) == (Status.FAILING, 0, 2)
    assert row.first_failure == "expected 3\\x1b[31m"  # cleaned: no control character survives


def test_a_lab_blocked_by_another_names_its_blocker_without_a_string(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {"1.2": "failed"}, exc_lab="1.1")
    row = next(score for score in record.labs if score.id == "1.2")
    assert (row.status, row.blocked_by, row.status_text) == (Status.BLOCKED, "1.1", "blocked by 1.1")


def test_nothing_passing_and_own_stubs_is_not_started(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {"1.1": "failed", "1.2": "failed", "extra1": "failed"}, exc_lab="1.1")
    assert record.status == gradebook.NOT_STARTED and record.passed == 0


def test_tampering_scores_zero_and_forgets_every_verdict(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {}, tampering=True)
    assert record.status == gradebook.TAMPERING and record.passed == 0
    assert scoring.TAMPERING_FLAG in record.flags
    assert {verdict.outcome for verdict in record.tests} == {"missing"}
    assert record.durations == {}


def test_a_run_without_its_summary_crashed(checkpoint: Checkpoint) -> None:
    record = record_for(checkpoint, {}, run=Ended(returncode=-9), finished=False)
    assert record.status == gradebook.CRASHED
    assert "killed (SIGKILL)" in record.flags


def test_a_timeout_wins_over_a_missing_summary(checkpoint: Checkpoint) -> None:
    outcomes = dict.fromkeys(("1.1", "1.2", "extra1"), "missing")
    record = record_for(checkpoint, outcomes, run=Ended(-9, True, 30.0), finished=False)
    assert record.status == gradebook.TIMEOUT and "30s" in record.message
    assert "no test result was recorded" in record.flags and "killed (SIGKILL)" not in record.flags


def test_an_import_error_is_an_error_with_its_location(checkpoint: Checkpoint) -> None:
    outcomes = dict.fromkeys(("1.1", "1.2", "extra1"), "missing")
    error = CollectError("tests/test_x.py", "SyntaxError: invalid syntax", "fx_course/core.py:3", "1.1")
    record = record_for(checkpoint, outcomes, errors=(error,))
    assert record.status == gradebook.ERROR
    assert record.message == "the package does not import at fx_course/core.py:3: SyntaxError: invalid syntax"


def test_a_red_parent_lab_is_flagged_in_the_child(child: Checkpoint) -> None:
    record = record_for(child, {"1.1": "failed"})
    assert "parent labs not green: 1.1" in record.flags
    assert record.status == gradebook.COMPLETE  # the parent's labs earn nothing in the child


def test_lab_status_counts_unreported_tests_as_failures() -> None:
    lab = LabInfo("1.1", "lab1_1")
    assert scoring.lab_status(1, 2, [Record("t::a", "1.1", "passed")], lab) == (Status.FAILING, None)
    assert scoring.lab_status(2, 2, [], lab) == (Status.DONE, None)


def test_an_unknown_outcome_is_read_as_failed() -> None:
    found = scoring.verdicts({"t::a": "1.1", "t::b": "1.1"}, {"t::a": Record("t::a", "1.1", "forged")})
    assert [(v.nodeid, v.outcome) for v in found] == [("t::a", "failed"), ("t::b", "missing")]


def test_a_record_survives_the_gradebook_and_an_older_blocked_status_is_migrated(
    checkpoint: Checkpoint, course: Course, tmp_path: Path
) -> None:
    record = record_for(checkpoint, {"1.2": "failed"}, exc_lab="1.1")
    path = tmp_path / "class.jsonl"
    gradebook.write_json_lines(path, [record])
    [back] = gradebook.read_json_lines([path])
    assert back == record
    older = json.loads(path.read_text(encoding="utf-8"))
    older["labs"][1] = {**older["labs"][1], "status": "blocked by 1.1"}
    del older["labs"][1]["blocked_by"]
    path.write_text(json.dumps(older) + "\n", encoding="utf-8")
    [migrated] = gradebook.read_json_lines([path])
    assert (migrated.labs[1].status, migrated.labs[1].blocked_by) == (Status.BLOCKED, "1.1")
    points = gradebook.points_of(course, migrated)
    assert [row.status_text for row in points.labs][1] == "blocked by 1.1"


@pytest.mark.parametrize(
    "change",
    [{"status": "graded!"}, {"passed": -1}, {"labs": [{"id": "1.1", "status": "sort of"}]}, {"tests": "x"}],
)
def test_a_gradebook_line_that_is_not_a_record_is_refused(
    change: dict[str, object], checkpoint: Checkpoint, tmp_path: Path
) -> None:
    data = {**record_for(checkpoint, {}).to_json(), **change}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    with pytest.raises(KitError, match=r"bad\.jsonl:1: not a grading record"):
        gradebook.read_json_lines([path])


EXPORTERS = [
    "pi_course_kit.instructor.export",
    "pi_course_kit.instructor.grade.gradebook",
    "pi_course_kit.instructor.grade.scoring",
    "pi_course_kit.instructor.grade.junit",
    "pi_course_kit.instructor.grade.class_report",
    "pi_course_kit.instructor.grade.statistics",
    "pi_course_kit.instructor.grade.feedback",
    "pi_course_kit.instructor.grade.gradescope",
    "pi_course_kit.instructor.grade.classroom",
]
SANDBOX = ("grader", "sandbox", "bwrap", "slots", "forkserver", "seccomp")


@pytest.mark.parametrize("module", EXPORTERS)
def test_an_export_imports_neither_the_grader_nor_its_sandbox(module: str) -> None:
    script = (
        f"import sys, {module}\n"
        f"print([m for m in sys.modules if m.rsplit('.', 1)[-1] in {SANDBOX!r} and "
        "m.startswith('pi_course_kit')])"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stdout


def test_a_package_that_does_not_import_is_said_once_and_first(child: Checkpoint) -> None:
    """With a SyntaxError (nothing ran), is the note the import failure alone, no red parent labs?"""
    outcomes = dict.fromkeys([lab.id for lab in child.tree_labs], "missing")
    error = CollectError("tests/test_x.py", "SyntaxError: invalid syntax", "fx_course/pair.py:3", "2.1")
    record = record_for(child, outcomes, errors=(error,))
    assert record.status == gradebook.ERROR
    assert record.message.startswith("the package does not import at fx_course/pair.py:3")
    assert not [flag for flag in record.flags if "parent labs" in flag]


def test_a_crash_is_the_first_cause_not_the_parent_labs_it_never_reached(child: Checkpoint) -> None:
    """A run ended by os._exit after some tests: is the crash the note, with no "parent labs not green"?"""
    record = record_for(child, {"1.1": "missing"}, run=Ended(returncode=3), finished=False)
    assert record.status == gradebook.CRASHED and "exit code 3" in record.message
    assert not [flag for flag in record.flags if "parent labs" in flag]
    nothing = dict.fromkeys([lab.id for lab in child.tree_labs], "missing")
    record = record_for(child, nothing, run=Ended(returncode=3), finished=False)
    assert record.message.endswith(
        "(exit code 3): no test ran, so something ended it while importing the package (os._exit?)"
    )
    assert not [flag for flag in record.flags if "parent labs" in flag]


def test_a_module_that_does_not_import_beside_others_that_ran_is_named(child: Checkpoint) -> None:
    """When one test module's import fails but others ran, does the note still say what did not import?"""
    error = CollectError("tests/test_y.py", "ImportError: no pair", "fx_course/pair.py:1", "2.1")
    record = record_for(child, {"2.1": "missing", "1.1": "missing"}, errors=(error,))
    assert record.status != gradebook.ERROR
    assert record.message.startswith("the package does not import at fx_course/pair.py:1")
    assert not [flag for flag in record.flags if "parent labs" in flag]


def test_many_red_parent_labs_are_named_briefly(child: Checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """With more red parent labs than the flag names, does it name the first and count the rest?"""
    monkeypatch.setattr(scoring, "NAMED_PARENT_LABS", 1)
    record = record_for(child, {"1.1": "failed", "1.2": "failed"})
    assert "parent labs not green: 1.1 and 1 more" in record.flags


def test_held_out_tests_are_told_apart_by_their_module(checkpoint: Checkpoint) -> None:
    """Are the tests of a tests/held_out/ module the held-out ones, and all tests when none can be told
    apart?"""
    graded = replace(checkpoint, tree_tests=(*checkpoint.tree_tests, "tests/held_out/test_a1_held_out.py"))
    nodes = {"tests/test_a1_counter.py::test_a": "1.1", "tests/test_a1_held_out.py::test_b": "1.1"}
    assert scoring.held_out_nodes(graded, nodes) == {"tests/test_a1_held_out.py::test_b"}
    assert scoring.held_out_nodes(checkpoint, nodes) == frozenset()
    renamed = {"tests/test_a1_counter.py::test_a": "1.1", "tests/test_q8x.py::test_b": "1.1"}
    assert scoring.held_out_nodes(graded, renamed) == set(renamed)
