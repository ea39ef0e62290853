"""Learner ids (roster, submissions root, path; never a bare folder name), bare pi_course/ submissions, exit
codes."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import FX
from learner_support import solve
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import roster
from pi_course_kit.learner import practice

GRADE_OPTIONS = ["--jobs", "2", "--timeout", "60", "--quiet", *FX]


def two_alike(course: Course, checkpoint: Checkpoint, root: Path) -> tuple[Path, Path]:
    """Two practice folders with the same name, one finished and one untouched: sub/s1 and sub/s2."""
    first, second = root / "sub/s1/pi-practice", root / "sub/s2/pi-practice"
    for folder in (first, second):
        folder.parent.mkdir(parents=True)
        practice.create(course, checkpoint, folder)
    solve(course, checkpoint, first)
    return first, second


def test_paths_below_a_root_keep_same_named_folders_apart(tmp_path: Path) -> None:
    """Do sub/s1/pi-practice and sub/s2/pi-practice get the ids s1/pi-practice and s2/pi-practice?"""
    for name in ("s1", "s2"):
        (tmp_path / "sub" / name / "pi-practice" / ".pi-course").mkdir(parents=True)
        (tmp_path / "sub" / name / "pi-practice" / ".pi-course" / "meta.json").write_text(
            "{}", encoding="utf-8"
        )
    pairs = roster.assign([], "pi_course", root=tmp_path / "sub")
    assert [learner for learner, _ in pairs] == ["s1/pi-practice", "s2/pi-practice"]


def test_without_roster_or_root_the_path_as_given_is_the_id(tmp_path: Path) -> None:
    """Are folders given without a roster named by their whole path, so two pi-practice folders stay two?"""
    pairs = roster.assign([tmp_path / "s1/pi-practice", tmp_path / "s2/pi-practice"], "pi_course")
    assert len({learner for learner, _ in pairs}) == 2
    assert all(learner.endswith("/pi-practice") and "/s" in learner for learner, _ in pairs)


def test_a_bare_package_path_means_the_folder_holding_it(tmp_path: Path) -> None:
    """Is `.../alice/pi_course` graded as the submission `.../alice`?"""
    (tmp_path / "alice/pi_course").mkdir(parents=True)
    [(learner, folder)] = roster.assign([tmp_path / "alice/pi_course"], "pi_course", root=tmp_path)
    assert learner == "alice" and folder == tmp_path / "alice"


def test_roster_ids_replace_paths_and_unknown_folders_are_refused(tmp_path: Path) -> None:
    """Does the roster name each submission, and is a folder missing from it refused with its path?"""
    (tmp_path / "roster.csv").write_text("learner,submission\nalice@uni,a/pi-practice\n", encoding="utf-8")
    pairs = roster.assign([tmp_path / "a/pi-practice"], "pi_course", roster=tmp_path / "roster.csv")
    assert [learner for learner, _ in pairs] == ["alice@uni"]
    with pytest.raises(KitError, match="not in the roster"):
        roster.assign([tmp_path / "b/pi-practice"], "pi_course", roster=tmp_path / "roster.csv")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("name,folder\nalice,a\n", "learner,submission"),
        ("learner,submission\n", "learner,submission"),
    ],
)
def test_a_bad_roster_is_refused_with_one_line_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, problem: str
) -> None:
    """Is a roster without the columns or without rows refused before grading (a bad row is kept instead)?"""
    (tmp_path / "roster.csv").write_text(content, encoding="utf-8")
    out = tmp_path / "grades.csv"
    code = cli.main(["grade", "--roster", str(tmp_path / "roster.csv"), "--csv", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_bad_shard_is_refused_before_grading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Is --shard 4/3 refused with an example of the right form?"""
    (tmp_path / "a").mkdir()
    assert cli.main(["grade", str(tmp_path / "a"), "--shard", "4/3"]) == 2
    assert "K/N" in capsys.readouterr().err


@pytest.mark.sandbox
def test_roster_csv_carries_learner_ids_and_points(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Graded from a roster alone, does the CSV name learners by their roster ids with their points?"""
    first, second = two_alike(course, checkpoint, tmp_path)
    roster_file = tmp_path / "roster.csv"
    with roster_file.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(
            [["learner", "submission"], ["s001", "sub/s1/pi-practice"], ["s002", str(second)]]
        )
    out = tmp_path / "grades.csv"
    assert cli.main(["grade", "--roster", str(roster_file), "--csv", str(out), *GRADE_OPTIONS]) == 0
    rows = {row["learner"]: row for row in csv.DictReader(out.open(encoding="utf-8-sig"))}
    assert set(rows) == {"s001", "s002"}
    assert rows["s001"]["points"] == "100.0" and rows["s002"]["points"] == "0.0"
    assert rows["s001"]["folder"] == str(first.absolute())


@pytest.mark.sandbox
def test_a_bare_package_submission_is_graded_with_checkpoint_and_skipped_without(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is an upload of only the package folder graded with --checkpoint, and without it skipped with exit
    1?"""
    upload = tmp_path / "uploads/alice"
    upload.mkdir(parents=True)
    shutil.copytree(course.root / checkpoint.solution / course.package, upload / course.package)
    for relative in checkpoint.solution_only:
        (upload / relative).unlink()
    out = tmp_path / "grades.jsonl"
    args = ["grade", str(upload), "--submissions-root", str(tmp_path / "uploads"), "--json", str(out)]
    assert cli.main([*args, "--checkpoint", checkpoint.id, *GRADE_OPTIONS]) == 0
    [record] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert record["learner"] == "alice" and record["status"] == "complete"
    assert record["tests_edited"] == [] and any("bare" in flag for flag in record["flags"])
    assert cli.main([*args, *GRADE_OPTIONS]) == 1
    [record] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert record["status"] == "skipped"
