"""The reference run of the solution never charges a learner (issue #37).

The grader runs the checkpoint's solution first, to learn the pristine tests and to check its own
disguise. A reference that fails once (a loaded machine) is tried again; one that keeps failing stops
the batch with one instructor error naming the failing test and the likely cause, before any learner
is run, and no output that could give a learner a score is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURE
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import grader as grading
from test_grade import make_learner

pytestmark = [pytest.mark.sandbox]

COUNTER = "solutions/a1-counter/fx_course/counter.py"


def course_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture course."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "course"))


def break_reset(root: Path) -> None:
    """The copy's solution resets to one: its reference run fails a test of Lab 1.2 every time."""
    path = root / COUNTER
    source = path.read_text(encoding="utf-8")
    broken = source.replace("self.count = 0\n        # END LAB 1.2", "self.count = 1\n        # END LAB 1.2")
    assert broken != source
    path.write_text(broken, encoding="utf-8")


def make_flaky(root: Path, marks: Path) -> None:
    """The copy's solution resets to one on its first trusted run only (the host folder `marks` is empty).

    Later runs find the mark and pass; the sandbox never sees `marks` (a host path), so it passes there.
    """
    marks.mkdir()
    path = root / COUNTER
    source = path.read_text(encoding="utf-8")
    flaky = source.replace(
        "self.count = 0\n        # END LAB 1.2",
        "self.count = _FIRST_RESET\n        # END LAB 1.2",
    )
    prologue = (
        "import os as _os\n\n"
        f"_MARKS = {str(marks)!r}\n"
        "_FIRST_RESET = 0\n"
        "if _os.path.isdir(_MARKS) and not _os.listdir(_MARKS):\n"
        "    open(_os.path.join(_MARKS, 'failed-once'), 'w').close()\n"
        "    _FIRST_RESET = 1\n"
    )
    assert flaky != source
    path.write_text(
        flaky.replace("\n\n\n# ## Lab 1.1", f"\n\n{prologue}\n\n# ## Lab 1.1", 1), encoding="utf-8"
    )
    assert "_FIRST_RESET = 1" in path.read_text(encoding="utf-8")


def test_a_reference_that_keeps_failing_stops_the_batch_in_one_line_and_scores_nobody(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A solution failing its own test: does grading stop before any learner, naming it, writing nothing?"""
    root = course_copy(tmp_path)
    break_reset(root)
    learner = make_learner(course, checkpoint, tmp_path / "complete", labs_from_solution=True)
    outputs = {name: tmp_path / name for name in ("grades.jsonl", "grades.csv", "junit.xml")}
    code = cli.main(
        [
            "grade",
            str(learner),
            "--json",
            str(outputs["grades.jsonl"]),
            "--csv",
            str(outputs["grades.csv"]),
            "--junit",
            str(outputs["junit.xml"]),
            "--feedback",
            str(tmp_path / "feedback"),
            "--jobs",
            "1",
            "--timeout",
            "60",
            "--course",
            str(root),
        ]
    )
    out, err = capsys.readouterr()
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "reference run of checkpoint a1" in lines[0] and "3 times" in lines[0]
    # It names the failing test (a test of Lab 1.2 in the a1 test file) and a likely cause.
    assert "test_a1_counter.py::" in lines[0] and "likely cause:" in lines[0]
    assert "Traceback" not in out + err
    assert not [path for path in outputs.values() if path.exists()]
    assert not (tmp_path / "feedback").exists() or not any((tmp_path / "feedback").iterdir())
    # No learner row was printed: nobody was graded.
    assert learner.name not in out


def test_a_reference_that_fails_once_is_retried_and_the_learner_is_graded_in_full(
    checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """The solution fails its first reference run only: is it run again, the complete learner scored 100?"""
    root = course_copy(tmp_path)
    marks = tmp_path / "marks"
    make_flaky(root, marks)
    flaky = manifest.load(root / "course.toml")
    learner = make_learner(manifest.load(FIXTURE / "course.toml"), checkpoint, tmp_path / "complete", True)
    grader = grading.Grader(flaky, grading.Limits(wall_seconds=60), jobs=1)
    try:
        records = grader.grade_all([learner])
    finally:
        grader.close()
    assert [path.name for path in marks.iterdir()] == ["failed-once"]  # the first run did fail
    assert [(r.status, r.message) for r in records] == [(grading.COMPLETE, "")]
    assert records[0].labs and all(lab.passed == lab.total for lab in records[0].labs if not lab.optional)
