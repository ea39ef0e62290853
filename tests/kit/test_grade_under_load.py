"""`pi-course grade` on a busy machine: a slow but honest run grades the same as on an idle one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from conftest import FX
from learner_support import solve
from pi_course_kit import cli
from pi_course_kit.core import staging
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.staging import pytest_ini
from pi_course_kit.instructor.grade import grader as grading
from pi_course_kit.instructor.grade.sandbox import Limits, Sandboxed
from pi_course_kit.learner import practice

pytestmark = pytest.mark.sandbox


def finished_folder(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """A practice folder holding the solution's teaching files: every lab done."""
    practice.create(course, checkpoint, dest)
    solve(course, checkpoint, dest)
    return dest


def practice_import_limit(course: Course, checkpoint: Checkpoint) -> float:
    """The practice folder's bound on importing the learner's code, as its pytest.ini sets it."""
    found = re.search(r"^pi_course_import_timeout = (\S+)$", pytest_ini(course, checkpoint), re.MULTILINE)
    assert found, "pytest.ini sets no import bound"
    return float(found.group(1))


def test_an_import_slower_than_the_practice_bound_still_grades_complete(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a finished solution whose import takes longer than the practice folder's bound (as on a busy
    machine) grade complete?"""
    folder = finished_folder(course, checkpoint, tmp_path / "slow-import")
    tool = folder / checkpoint.teaching_files[0]
    # A sleep at import time stands in for a machine so loaded that importing takes this long.
    delay = practice_import_limit(course, checkpoint) + 2
    tool.write_text(
        tool.read_text(encoding="utf-8") + f"\nimport time as _time\n\n_time.sleep({delay})\n",
        encoding="utf-8",
    )
    out = tmp_path / "grades.jsonl"
    code = cli.main(
        ["grade", str(folder), "--json", str(out), "--jobs", "1", "--timeout", "90", "--quiet", *FX]
    )
    [record] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert (record["status"], record["message"]) == ("complete", "")
    assert record["passed"] == record["total"] > 0
    assert code == 0


@pytest.fixture(scope="module")
def grader(course: Course) -> Iterator[grading.Grader]:
    """One grader for the re-run tests (its reference run is made once)."""
    made = grading.Grader(course, Limits(wall_seconds=60, cpu_seconds=60), jobs=1)
    yield made
    made.close()


def losing_reports(grader: grading.Grader, monkeypatch: pytest.MonkeyPatch, lost: int) -> list[int]:
    """Make the first `lost` runs of the grader end without their report; return the run counter."""
    real_run = grader._run
    runs: list[int] = []

    def run(
        tree: Path, out: Path, slot: grading.Slot, order_seed: str, skipped: Sequence[str] = ()
    ) -> Sandboxed:
        result = real_run(tree, out, slot, order_seed, skipped)
        runs.append(result.returncode)
        if len(runs) <= lost:
            # What a run killed half-way leaves: some test records, no closing summary.
            report = out / "report.jsonl"
            lines = report.read_text(encoding="utf-8").splitlines()
            report.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
        return result

    monkeypatch.setattr(grader, "_run", run)
    return runs


def graded_losing_reports(
    grader: grading.Grader,
    course: Course,
    checkpoint: Checkpoint,
    dest: Path,
    monkeypatch: pytest.MonkeyPatch,
    lost: int,
) -> tuple[list[int], grading.LearnerRecord]:
    """Grade a finished folder made at `dest` while its first `lost` runs lose their report; the runs and the
    record."""
    grader.reference(checkpoint)  # the solution's own disguised check runs before the counting starts
    folder = finished_folder(course, checkpoint, dest)
    runs = losing_reports(grader, monkeypatch, lost)
    return runs, grader.grade_one(folder)


def test_a_run_that_lost_its_report_is_graded_by_one_rerun_and_says_so(
    grader: grading.Grader,
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Does a finished solution whose first run ends without its report get the second run's score,
    flagged?"""
    runs, record = graded_losing_reports(
        grader, course, checkpoint, tmp_path / "finished", monkeypatch, lost=1
    )
    assert len(runs) == 2
    assert record.status == grading.COMPLETE and record.passed == record.total > 0
    assert grading.RERUN_FLAG.format(code=runs[0]) in record.flags
    assert len(record.labs) == len(checkpoint.labs)


def test_a_run_that_keeps_losing_its_report_is_rerun_once_and_stays_crashed(
    grader: grading.Grader,
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Is a submission whose runs always end without a report re-run only once, and scored 0 as crashed?"""
    runs, record = graded_losing_reports(
        grader, course, checkpoint, tmp_path / "crashing", monkeypatch, lost=2
    )
    assert len(runs) == 2
    assert record.status == grading.CRASHED
    assert record.message.startswith("the test run ended without its report")
    assert sum(flag.startswith("re-run once") for flag in record.flags) == 1


def test_a_complete_first_run_is_not_rerun(
    grader: grading.Grader,
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Does a run that ends with its report count as is, with no second run and no re-run flag?"""
    runs, record = graded_losing_reports(
        grader, course, checkpoint, tmp_path / "finished", monkeypatch, lost=0
    )
    assert len(runs) == 1
    assert record.status == grading.COMPLETE
    assert not any(flag.startswith("re-run once") for flag in record.flags)


def test_a_kit_file_edited_on_disk_during_a_batch_never_reaches_a_learner(
    grader: grading.Grader,
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Is every learner graded with the report files the solution was checked with, even if the disk copy
    changes mid-batch?"""
    grader.reference(checkpoint)
    folder = finished_folder(course, checkpoint, tmp_path / "finished")
    real_files = staging.test_files
    # The records module as a maintainer leaves it half-way through an edit, on disk: the report's
    # summary then breaks, and a run staged from it ends without its report.
    records = tmp_path / "pi_course_records.py"
    broken = "\n\ndef lab_entry(*args: object) -> None:\n    raise TypeError('half-saved edit')\n"
    records.write_text(
        real_files(course, checkpoint)["pi_course_records.py"].read_text(encoding="utf-8") + broken,
        encoding="utf-8",
    )

    def half_edited(course: Course, checkpoint: Checkpoint) -> dict[str, Path]:
        return {**real_files(course, checkpoint), "pi_course_records.py": records}

    monkeypatch.setattr(staging, "test_files", half_edited)
    record = grader.grade_one(folder)
    assert record.status == grading.COMPLETE and record.passed == record.total > 0
    assert record.flags == []
