"""`pi-course build-labs` carries a parent's inherited files down the lineage (on the fixture course)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pi_course_kit import cli
from pi_course_kit.core import manifest

FIXTURE = Path(__file__).parent / "fixture_course"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A private copy of the fixture course, whose second checkpoint inherits files from the first."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "course", ignore=shutil.ignore_patterns("__pycache__")))


def test_parent_edit_reaches_the_child_solution_and_starter(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a parent's inherited file changes, does --check name the child's copy and build-labs fix it?"""
    course = manifest.load(repo / "course.toml")
    child = next(c for c in course.checkpoints if c.parent and c.inherited_files)
    parent = course.parent_of(child)
    assert parent is not None
    relative = child.inherited_files[-1]
    source = repo / parent.solution / relative
    source.write_text(source.read_text(encoding="utf-8") + "\n# edited in the parent\n", encoding="utf-8")

    assert cli.main(["build-labs", "--check", "--root", str(repo)]) == 1
    assert f"{child.solution}/{relative}" in capsys.readouterr().out

    assert cli.main(["build-labs", "--root", str(repo)]) == 0
    assert f"wrote {child.solution}/{relative}" in capsys.readouterr().out
    assert (repo / child.solution / relative).read_bytes() == source.read_bytes()
    assert "# edited in the parent" in (repo / child.starter / relative).read_text(encoding="utf-8")
    assert cli.main(["build-labs", "--check", "--root", str(repo)]) == 0


def test_sync_leaves_files_that_are_not_inherited_alone(repo: Path) -> None:
    """Does a child's own file, present in the parent too, keep its content when build-labs runs?"""
    course = manifest.load(repo / "course.toml")
    child = next(c for c in course.checkpoints if c.parent and c.inherited_files)
    own = [rel for rel in child.given_files if rel not in child.inherited_files]
    assert own, "the fixture's child checkpoint should have a given file of its own"
    before = {rel: (repo / child.solution / rel).read_bytes() for rel in own}
    assert cli.main(["build-labs", "--root", str(repo)]) == 0
    assert {rel: (repo / child.solution / rel).read_bytes() for rel in own} == before
