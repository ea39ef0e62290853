"""A folder of another checkpoint in a batch (issue #40, K1): graded as the instructor says, never silently.

Without --checkpoint each folder is graded as its meta.json says, and one of a checkpoint other than
most of the batch's is flagged in its record and warned about in the summary. With --checkpoint, that
option decides, and a folder made for another checkpoint is flagged the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade.grader import OTHER_CHECKPOINT_FLAG
from test_grade import make_learner

pytestmark = [pytest.mark.sandbox]


def grade(folders: list[Path], out: Path, *options: str) -> tuple[int, dict[str, dict[str, object]]]:
    """Grade `folders` through the CLI; exit code, records by folder name, and what it printed."""
    code = cli.main(
        ["grade", *map(str, folders), "--json", str(out), "--jobs", "1", "--timeout", "60", *FX, *options]
    )
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return code, {Path(str(r["folder"])).name: r for r in records}


def flags_of(record: dict[str, object]) -> list[str]:
    """The record's flags about a folder of another checkpoint."""
    flags = record["flags"]
    assert isinstance(flags, list)
    return [str(flag) for flag in flags if str(flag).startswith(OTHER_CHECKPOINT_FLAG)]


def test_a_folder_of_another_checkpoint_is_flagged_and_warned_about(
    course: Course,
    checkpoint: Checkpoint,
    child: Checkpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two a2 folders and one a1: is the a1 folder graded as a1 but flagged, with a warning in the summary?"""
    folders = [
        make_learner(course, child, tmp_path / "first-a2", labs_from_solution=True),
        make_learner(course, checkpoint, tmp_path / "an-a1", labs_from_solution=True),
        make_learner(course, child, tmp_path / "second-a2"),
    ]
    code, records = grade(folders, tmp_path / "grades.jsonl")
    out = capsys.readouterr().out
    assert code == 0
    assert records["an-a1"]["checkpoint"] == "a1"
    assert flags_of(records["an-a1"]) == [f"{OTHER_CHECKPOINT_FLAG}a1: graded as a1, the batch is mostly a2"]
    assert flags_of(records["first-a2"]) == flags_of(records["second-a2"]) == []
    warning = [line for line in out.splitlines() if "another checkpoint" in line]
    assert len(warning) == 1 and "1 folder(s)" in warning[0] and "an-a1" in warning[0]


def test_the_instructor_s_checkpoint_decides_and_the_folder_is_flagged(
    course: Course,
    checkpoint: Checkpoint,
    child: Checkpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --checkpoint a2, is an a1 folder graded as a2, flagged as made for a1, and warned about?"""
    folders = [
        make_learner(course, checkpoint, tmp_path / "an-a1", labs_from_solution=True),
        make_learner(course, child, tmp_path / "an-a2", labs_from_solution=True),
    ]
    code, records = grade(folders, tmp_path / "grades.jsonl", "--checkpoint", "a2")
    out = capsys.readouterr().out
    assert code == 0
    assert records["an-a1"]["checkpoint"] == "a2"
    assert flags_of(records["an-a1"]) == [f"{OTHER_CHECKPOINT_FLAG}a1: graded as a2 (--checkpoint)"]
    assert flags_of(records["an-a2"]) == []
    assert len([line for line in out.splitlines() if "another checkpoint" in line]) == 1
