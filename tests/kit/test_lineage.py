"""A checkpoint that builds on a parent (the fixture's a2 on a1): `practice --from`, and grading the parent.

The real course's children keep their promises in test_course_checkpoints.py (inherited files equal,
solution green with the parent's tests, starter red on its own labs only, first red on its first lab).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FX
from learner_support import run_cli, snapshot
from pi_course_kit.core import files
from pi_course_kit.core.folder import META_PATH, sha256_file
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import lineage, practice


def test_practice_from_an_unfinished_parent_folder_is_refused_and_changes_nothing(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """Is `practice CHILD DIR --from MY_PARENT` refused, naming the labs, while the parent folder is red?"""
    parent = course.parent_of(child)
    assert parent is not None
    made = run_cli(["practice", parent.id, str(tmp_path / "mine"), *FX], tmp_path)
    assert made.returncode == 0, made.stderr
    before = snapshot(tmp_path / "mine")
    refused = run_cli(["practice", child.id, str(tmp_path / "next"), "--from", "mine", *FX], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "not finished yet" in refused.stderr
    assert all(f"Lab {lab.id}" in refused.stderr for lab in parent.required_labs)
    assert not (tmp_path / "next").exists()
    assert snapshot(tmp_path / "mine") == before


def test_practice_from_a_finished_parent_folder_carries_the_learners_own_files(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """With the parent finished, does the child folder hold the learner's own files and start red on its
    lab?"""
    parent = course.parent_of(child)
    assert parent is not None
    assert run_cli(["practice", parent.id, str(tmp_path / "mine"), *FX], tmp_path).returncode == 0
    for relative in parent.teaching_files:
        solved = (course.root / parent.solution / relative).read_text(encoding="utf-8")
        # The learner's own version: the reference plus a comment only they wrote.
        (tmp_path / "mine" / relative).write_text(solved + "\n# my own work\n", encoding="utf-8")
    before = snapshot(tmp_path / "mine")
    made = run_cli(["practice", child.id, str(tmp_path / "next"), "--from", "mine", *FX], tmp_path)
    assert made.returncode == 0, made.stderr
    assert snapshot(tmp_path / "mine") == before
    for relative in parent.teaching_files:
        assert (tmp_path / "next" / relative).read_text(encoding="utf-8").endswith("# my own work\n")
    first = child.first_lab
    red = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", first.marker, "-x", "-q"],
        cwd=tmp_path / "next",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert red.returncode == 1
    assert child.first_red_prefix in red.stdout


def test_practice_from_writes_the_metadata_once_with_the_carried_files_and_their_origin(
    tmp_path: Path, course: Course, child: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Is the child's meta.json written in one atomic write, hashing the learner's files and naming their
    folder?"""
    parent = course.parent_of(child)
    assert parent is not None
    mine = practice.create(course, parent, tmp_path / "mine")
    for relative in parent.teaching_files:
        (mine / relative).write_text("# my own work\n", encoding="utf-8")
    # Whether the parent is green has its own tests; here only the writing counts.
    monkeypatch.setattr(lineage, "unfinished_labs", lambda *args: [])
    written: list[Path] = []
    real = files.replace_file

    def counted(path: Path, write: Callable[[Path], None]) -> None:
        written.append(path)
        real(path, write)

    monkeypatch.setattr(files, "replace_file", counted)
    made = lineage.create_from(course, child, mine, tmp_path / "next")
    # One write, of the metadata, inside the folder being built (renamed into place afterwards).
    assert [Path(*path.parts[-2:]) for path in written] == [META_PATH]
    meta = json.loads((made / META_PATH).read_text(encoding="utf-8"))
    assert meta["checkpoint"] == child.id
    assert meta["from"] == {
        "folder": str(mine.resolve()),
        "checkpoint": parent.id,
        "files": [rel for rel in child.inherited_files if (mine / rel).is_file()],
        "replaced": [rel for rel in parent.teaching_files if rel not in child.inherited_files],
    }
    for relative in parent.teaching_files:
        assert meta["files"][relative] == sha256_file(made / relative) == sha256_file(mine / relative)


def test_practice_from_carries_the_learners_own_transfer_exercise(
    tmp_path: Path, course: Course, child: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Does the parent's optional transfer file come along when the learner wrote it, and only then?"""
    parent = course.parent_of(child)
    assert parent is not None
    if not parent.solution_only:
        pytest.skip(f"{parent.id} has no optional transfer exercise")
    mine = practice.create(course, parent, tmp_path / "mine")
    monkeypatch.setattr(lineage, "unfinished_labs", lambda *args: [])
    without = lineage.create_from(course, child, mine, tmp_path / "without")
    assert not any((without / relative).exists() for relative in parent.solution_only)
    for relative in parent.solution_only:
        (mine / relative).write_text("# my own transfer work\n", encoding="utf-8")
    before = snapshot(mine)
    made = lineage.create_from(course, child, mine, tmp_path / "with")
    assert snapshot(mine) == before
    for relative in parent.solution_only:
        assert (made / relative).read_text(encoding="utf-8") == "# my own transfer work\n"
    meta = json.loads((made / META_PATH).read_text(encoding="utf-8"))
    inherited = [rel for rel in child.inherited_files if (mine / rel).is_file()]
    assert meta["from"]["files"] == [*inherited, *parent.solution_only]
    assert meta["from"]["replaced"] == [
        rel for rel in parent.teaching_files if rel not in child.inherited_files
    ]


def test_a_file_the_next_chapter_changes_comes_from_the_course_and_is_named(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """When the next chapter changes one of the learner's files, is it left out of the carry and listed?"""
    parent = course.parent_of(child)
    assert parent is not None
    changed = parent.teaching_files[0]
    assert changed in child.inherited_files  # the fixture's child keeps it; pretend the chapter changes it
    rewritten = dataclasses.replace(
        child, inherited_files=tuple(rel for rel in child.inherited_files if rel != changed)
    )
    mine = practice.create(course, parent, tmp_path / "mine")
    carried, replaced = lineage.carried_and_replaced(parent, rewritten, mine, ["earlier/own.py"])
    assert changed not in carried and changed in replaced
    assert "earlier/own.py" in replaced  # carried in by the learner's own earlier --from: theirs too
    assert set(carried) == {rel for rel in rewritten.inherited_files if (mine / rel).is_file()}


def test_practice_from_a_folder_of_the_wrong_checkpoint_is_refused(tmp_path: Path, child: Checkpoint) -> None:
    """Is --from with a folder of the child itself (not its parent) refused in one line?"""
    assert run_cli(["practice", child.id, str(tmp_path / "a"), *FX], tmp_path).returncode == 0
    refused = run_cli(["practice", child.id, str(tmp_path / "b"), "--from", "a", *FX], tmp_path)
    assert refused.returncode == 2 and "builds on" in refused.stderr
    assert not (tmp_path / "b").exists()


def test_practice_from_on_a_checkpoint_without_parent_is_refused(
    tmp_path: Path, checkpoint: Checkpoint
) -> None:
    """Does --from on a checkpoint with no parent (a1) say that there is nothing to carry over?"""
    refused = run_cli(
        ["practice", checkpoint.id, str(tmp_path / "x"), "--from", str(tmp_path), *FX], tmp_path
    )
    assert refused.returncode == 2 and "--from has nothing to carry over" in refused.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.sandbox
def test_grading_a_child_flags_a_parent_that_is_no_longer_green(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """When a child folder's inherited files are the parent's starter again, does its grade say so?"""
    parent = course.parent_of(child)
    assert parent is not None
    folder = tmp_path / "class" / "learner"
    assert run_cli(["practice", child.id, str(folder), *FX], tmp_path).returncode == 0
    for relative in child.teaching_files:
        (folder / relative).write_bytes((course.root / child.solution / relative).read_bytes())
    for relative in parent.teaching_files:
        (folder / relative).write_bytes((course.root / parent.starter / relative).read_bytes())
    out = tmp_path / "grades.jsonl"
    done = run_cli(
        ["grade", str(folder), "--submissions-root", str(tmp_path / "class"), "--json", str(out), *FX],
        tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    required = ", ".join(lab.id for lab in parent.required_labs)
    assert f"parent labs not green: {required}" in record["flags"]


def test_a_changed_file_the_course_supplies_instead_is_named_and_kept(
    tmp_path: Path, course: Course, child: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the learner changed a package file that the new folder takes from the course, is it named and
    kept?"""
    parent = course.parent_of(child)
    assert parent is not None
    mine = practice.create(course, parent, tmp_path / "mine")
    given = f"{course.package}/__init__.py"  # given code, not a teaching file, not inherited by the child
    assert given not in parent.teaching_files and given not in child.inherited_files
    changed = (mine / given).read_text(encoding="utf-8") + "\n# my own change to given code\n"
    (mine / given).write_text(changed, encoding="utf-8")
    untouched = f"{course.package}/lab.py"  # shipped and never edited: nothing of the learner's to keep
    monkeypatch.setattr(lineage, "unfinished_labs", lambda *args: [])
    before = snapshot(mine)
    made = lineage.create_from(course, child, mine, tmp_path / "next")
    assert snapshot(mine) == before
    assert (made / given).read_bytes() == (course.root / child.starter / given).read_bytes()
    assert (made / ".pi-course" / "replaced" / given).read_text(encoding="utf-8") == changed
    assert not (made / ".pi-course" / "replaced" / untouched).exists()
    assert given in lineage.replaced_files(made)


def test_the_practice_command_says_which_of_the_learners_files_were_replaced_and_where_they_are(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """Does `practice CHILD DIR --from MINE` name the learner's replaced file and the folder that keeps it?"""
    parent = course.parent_of(child)
    assert parent is not None
    assert run_cli(["practice", parent.id, str(tmp_path / "mine"), *FX], tmp_path).returncode == 0
    for relative in parent.teaching_files:
        solved = (course.root / parent.solution / relative).read_bytes()
        (tmp_path / "mine" / relative).write_bytes(solved)
    given = tmp_path / "mine" / course.package / "__init__.py"
    given.write_text(given.read_text(encoding="utf-8") + "# mine\n", encoding="utf-8")
    made = run_cli(["practice", child.id, str(tmp_path / "next"), "--from", "mine", *FX], tmp_path)
    assert made.returncode == 0, made.stderr
    named = [line for line in made.stdout.splitlines() if ".pi-course/replaced" in line]
    assert len(named) == 1 and f"{course.package}/__init__.py" in named[0], made.stdout
