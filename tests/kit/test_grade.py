"""`pi-course grade` on fixture-course folders: per learner and lab, passed/total with the pristine tests."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import FX
from learner_support import solve
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.instructor.grade.grader import edited_tests
from pi_course_kit.learner import practice

GRADE_OPTIONS = ["--jobs", "2", "--timeout", "60", *FX]


def tree_digest(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry under a folder: content hash (or link target) and mode bits."""
    digest = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            content = "link:" + os.readlink(path)
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            content = "dir"
        digest[path.relative_to(folder).as_posix()] = (content, info.st_mode)
    return digest


def make_learner(
    course: Course, checkpoint: Checkpoint, dest: Path, labs_from_solution: bool = False
) -> Path:
    """A practice folder, optionally with the solution's teaching files (a learner who finished)."""
    practice.create(course, checkpoint, dest)
    if labs_from_solution:
        solve(course, checkpoint, dest)
    return dest


#: The teaching file the grading tests edit: a1's counter.
TEACHING = "fx_course/counter.py"


def partial_tool(course: Course, checkpoint: Checkpoint) -> str:
    """The solution's counter.py with Lab 1.2 (reset) left unimplemented."""
    source = (course.root / checkpoint.solution / TEACHING).read_text(encoding="utf-8")
    return strip_solution(source, "counter.py", {"1.2"})


@pytest.fixture(scope="module")
def graded(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Grade a small class once: complete, partial, untouched, test-editor, skipper, and two non-folders."""
    root = tmp_path_factory.mktemp("class")
    folders = {
        "complete": make_learner(course, checkpoint, root / "complete", labs_from_solution=True),
        "partial": make_learner(course, checkpoint, root / "partial"),
        "untouched": make_learner(course, checkpoint, root / "untouched"),
        "editor": make_learner(course, checkpoint, root / "editor"),
        "skipper": make_learner(course, checkpoint, root / "skipper", labs_from_solution=True),
    }
    (folders["partial"] / TEACHING).write_text(partial_tool(course, checkpoint), encoding="utf-8")
    # The test editor replaces the focused tests with one that always passes; grading must ignore that.
    (folders["editor"] / "tests/test_a1_counter.py").write_text(
        "import pytest\n\n\n@pytest.mark.lab1_1\ndef test_nothing():\n    assert True\n", encoding="utf-8"
    )
    # The skipper's code skips the tests of Lab 1.2 instead of passing them.
    counter = folders["skipper"] / TEACHING
    source = counter.read_text(encoding="utf-8")
    skipped = source.replace(
        "        self.count = 0\n        # END LAB 1.2",
        '        import pytest\n\n        pytest.skip("not today")\n        # END LAB 1.2',
    )
    assert skipped != source
    counter.write_text(skipped, encoding="utf-8")
    plain = root / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("no practice here", encoding="utf-8")
    no_package = make_learner(course, checkpoint, root / "no-package")
    shutil.rmtree(no_package / course.package)
    order = [*folders.values(), plain, no_package, root / "missing"]
    before = {folder.name: tree_digest(folder) for folder in order if folder.exists()}
    json_path, csv_path = root / "grades.jsonl", root / "grades.csv"
    code = cli.main(
        [
            "grade",
            *map(str, order),
            "--submissions-root",
            str(root),
            "--json",
            str(json_path),
            "--csv",
            str(csv_path),
            *GRADE_OPTIONS,
        ]
    )
    records = [json.loads(line) for line in json_path.read_text(encoding="utf-8").splitlines()]
    after = {folder.name: tree_digest(folder) for folder in order if folder.exists()}
    return {
        "code": code,
        "records": {Path(r["folder"]).name: r for r in records},
        "order": [Path(r["folder"]).name for r in records],
        "csv": list(csv.DictReader(csv_path.open(encoding="utf-8-sig"))),
        "before": before,
        "after": after,
    }


def lab(record: dict[str, Any], lab_id: str) -> dict[str, Any]:
    """One lab row of a learner record."""
    labs = record["labs"]
    assert isinstance(labs, list)
    return next(row for row in labs if row["id"] == lab_id)


def records(graded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The learner records by name."""
    value = graded["records"]
    assert isinstance(value, dict)
    return value


@pytest.mark.sandbox
def test_grading_runs_and_writes_one_json_record_per_learner(graded: dict[str, Any]) -> None:
    """Does grading exit 1 (some folders could not be graded) and write one JSON object per folder, in
    order?"""
    assert graded["code"] == 1
    assert graded["order"] == [
        "complete",
        "partial",
        "untouched",
        "editor",
        "skipper",
        "plain",
        "no-package",
        "missing",
    ]


@pytest.mark.sandbox
def test_a_finished_learner_is_complete(graded: dict[str, Any], checkpoint: Checkpoint) -> None:
    """Is the learner with the solution's code complete, every required lab at total/total?"""
    record = records(graded)["complete"]
    assert record["status"] == "complete" and record["passed"] == record["total"] > 0
    for required in checkpoint.required_labs:
        row = lab(record, required.id)
        assert row["status"] == "done" and row["passed"] == row["total"] > 0
    assert lab(record, "extra1")["passed"] == 0  # doubler.py is not in the practice folder
    assert record["tests_edited"] == [] and record["sandbox"]


@pytest.mark.sandbox
def test_a_partial_learner_gets_per_lab_counts(graded: dict[str, Any]) -> None:
    """Does the learner without Lab 1.2 get 1.1 done and 1.2 not started?"""
    record = records(graded)["partial"]
    assert record["status"] == "partial"
    assert lab(record, "1.1")["status"] == "done"
    row = lab(record, "1.2")
    assert row["passed"] == 0 and row["status"] == "not started"
    assert row["first_failure"] == "Lab 1.2 not implemented: Counter.reset"


@pytest.mark.sandbox
def test_an_untouched_starter_passes_nothing(graded: dict[str, Any]) -> None:
    """Does a fresh practice folder score 0 on every required lab?"""
    record = records(graded)["untouched"]
    assert record["status"] == "not started" and record["passed"] == 0 and record["total"] > 0


@pytest.mark.sandbox
def test_edited_tests_are_flagged_and_have_no_effect(graded: dict[str, Any]) -> None:
    """Is the learner who emptied the tests flagged, yet graded with the pristine tests (nothing passed)?"""
    record = records(graded)["editor"]
    assert record["tests_edited"] == ["tests/test_a1_counter.py (changed)"]
    assert any("tests edited" in flag for flag in record["flags"])
    assert record["status"] == "not started"
    assert record["total"] == records(graded)["complete"]["total"]


def test_a_catalog_from_an_older_kit_is_no_test_edit_but_an_edited_conftest_is(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is a folder whose translation catalog predates a kit upgrade left unflagged, while an edited
    conftest.py is flagged?"""
    folder = make_learner(course, checkpoint, tmp_path / "older-kit")
    catalogs = list((folder / "tests").rglob("*.mo"))
    assert catalogs
    for catalog in catalogs:
        catalog.write_bytes(catalog.read_bytes() + b"older")
    assert edited_tests(course, checkpoint, folder) == []
    conftest = folder / "tests/conftest.py"
    conftest.write_text(conftest.read_text(encoding="utf-8") + "\n# mine\n", encoding="utf-8")
    assert edited_tests(course, checkpoint, folder) == ["tests/conftest.py (changed)"]


@pytest.mark.sandbox
def test_skipped_tests_never_count_as_passed(graded: dict[str, Any]) -> None:
    """Does code that skips Lab 1.2's tests lose them instead of passing them?"""
    record = records(graded)["skipper"]
    row = lab(record, "1.2")
    assert row["passed"] < row["total"] and row["status"] != "done"
    assert record["status"] == "partial"


@pytest.mark.sandbox
def test_folders_that_are_not_practice_folders_are_skipped(graded: dict[str, Any]) -> None:
    """Are a plain folder, one without fx_course/ and a missing path each reported as skipped, with a
    reason?"""
    by_name = records(graded)
    assert by_name["plain"]["status"] == "skipped" and ".pi-course/meta.json" in by_name["plain"]["message"]
    assert by_name["no-package"]["status"] == "skipped" and "fx_course/" in by_name["no-package"]["message"]
    assert by_name["missing"]["status"] == "skipped"


@pytest.mark.sandbox
def test_learner_folders_are_byte_identical_after_grading(graded: dict[str, Any]) -> None:
    """Is every learner folder exactly as it was before grading (contents, links and modes)?"""
    assert graded["after"] == graded["before"]


@pytest.mark.sandbox
def test_csv_has_one_row_per_learner_with_lab_counts(graded: dict[str, Any]) -> None:
    """Does the CSV carry status and per-lab passed/total for every learner?"""
    rows = graded["csv"]
    assert isinstance(rows, list) and len(rows) == 8
    complete = next(row for row in rows if row["learner"] == "complete")
    assert complete["status"] == "complete" and complete["1.1 passed"] == complete["1.1 total"] != "0"


def test_bad_output_path_is_refused_before_grading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is a --json file in a folder that does not exist refused with exit 2 and nothing written?"""
    assert cli.main(["grade", str(tmp_path), "--json", str(tmp_path / "no" / "out.jsonl")]) == 2
    assert "--json" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_the_disguised_tests_hide_every_public_name_and_add_failing_controls(
    course: Course, checkpoint: Checkpoint
) -> None:
    """Does a grading run's test module carry no public test name, map each back, and add controls?"""
    import ast
    import random

    from pi_course_kit.instructor.grade import verdict

    source = (course.root / checkpoint.tree_tests[0]).read_text(encoding="utf-8")
    public = {
        n.name
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    }
    first, disguise = verdict.disguise_module(source, random.Random(1))
    second, _ = verdict.disguise_module(source, random.Random(2))
    names = {
        n.name for n in ast.parse(first).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    }
    assert not names & public
    assert set(disguise.names) == names and set(disguise.names.values()) == public
    assert len(disguise.controls) >= max(verdict.MIN_CONTROLS, len(public) // 5)
    assert first != second  # a fresh secret per run gives fresh names


def test_a_control_reported_as_passed_is_tampering() -> None:
    """Is one passed control enough to flag the run, while unknown node ids count for nothing?"""
    from pi_course_kit.instructor.grade import verdict

    disguise = verdict.Disguise(
        names={"test_a_b": "test_real", "test_b_a": "test_real"}, controls={"test_b_a"}
    )
    expected = ["tests/t.py::test_real"]
    honest = [
        {"nodeid": "tests/t.py::test_a_b", "outcome": "passed"},
        {"nodeid": "tests/t.py::test_b_a", "outcome": "failed"},
        {"nodeid": "tests/t.py::test_real", "outcome": "passed"},
    ]
    forged = [{**record, "outcome": "passed"} for record in honest]
    assert not verdict.read_verdicts(honest, {"t.py": disguise}, expected).tampering
    assert verdict.read_verdicts(forged, {"t.py": disguise}, expected).tampering
    only_public = verdict.read_verdicts(honest[2:], {"t.py": disguise}, expected)
    assert only_public.by_node == {} and not only_public.tampering
