"""`scripts/checkpoint` / `pi-course checkpoint`: the card, the listing and the parent/target copies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FX, REPO
from learner_support import snapshot
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import run_tests
from pi_course_kit.learner import checkpoint as checkpoint_cmd
from pi_course_kit.learner import practice

SAMPLE = """
import pytest

pytestmark = [pytest.mark.lab9_1]


def test_module_level():
    pass


@pytest.mark.lab9_2
@pytest.mark.parametrize("x", [1, 2, 3])
def test_both_marks(x):
    pass


@pytest.mark.lab9_2
class TestGroup:
    def test_a(self):
        pass

    async def test_b(self):
        pass

    def helper(self):
        pass


def helper_test():
    pass
"""


def test_count_tests_counts_functions_per_marker() -> None:
    """Does the ast count see module, class and function marks, and count a parametrized test once?"""
    counts = practice.count_tests(SAMPLE, {"lab9_1", "lab9_2", "lab9_3"})
    assert counts == {"lab9_1": 4, "lab9_2": 3, "lab9_3": 0}


@pytest.fixture(scope="module")
def card_run(course: Course, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`scripts/checkpoint a1 DIR --course FIXTURE` run once with no site-packages (standard library only)."""
    dest = tmp_path_factory.mktemp("cp") / "copies"
    done = subprocess.run(
        [sys.executable, "-S", str(REPO / "scripts" / "checkpoint"), "a1", str(dest), *FX],
        capture_output=True,
        text=True,
        timeout=60,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    return dest, done.stdout


def test_card_shows_trees_files_counts_and_first_red(
    card_run: tuple[Path, str], course: Course, checkpoint: Checkpoint
) -> None:
    """Does the card name parent and target, the teaching files, tests per lab, the first red and commands?"""
    dest, out = card_run
    assert f"parent (starter):  {checkpoint.starter}" in out
    assert f"target (solution): {checkpoint.solution}" in out
    assert all(name in out for name in checkpoint.teaching_files)
    counts = practice.lab_test_counts(course, checkpoint)
    for lab in checkpoint.labs:
        assert any(
            line.split()[:3] == [lab.id, lab.marker, str(counts[lab.id])] for line in out.splitlines()
        ), lab.id
    assert all(counts[lab.id] > 0 for lab in checkpoint.labs)
    assert f"first red:         {checkpoint.first_red_prefix} …" in out
    assert f"cd {dest / 'parent'} && python -m pytest -m lab1_1 -x" in out


def test_parent_copy_is_red_on_the_first_lab(card_run: tuple[Path, str], checkpoint: Checkpoint) -> None:
    """Does `python -m pytest` in parent/ fail, first on the manifest's first red?"""
    dest, _ = card_run
    result = run_tests(dest / "parent", ["-m", checkpoint.first_lab.marker, "-x"], timeout=120)
    assert result.returncode == 1
    assert result.tests[0].message == "Lab 1.1 not implemented: Counter.add"


def test_target_copy_is_green(card_run: tuple[Path, str]) -> None:
    """Does `python -m pytest` in target/ pass every focused test?"""
    dest, _ = card_run
    result = run_tests(dest / "target", timeout=300)
    assert result.returncode == 0, result.output[-2000:]
    assert result.labs and all(row.status == "done" for row in result.labs)


def test_listing_without_arguments(course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a checkpoint, does the command list every checkpoint with its slug?"""
    assert cli.main(["checkpoint", *FX]) == 0
    out = capsys.readouterr().out
    for cp in course.checkpoints:
        assert cp.id in out and cp.slug in out


def test_a_second_run_is_refused_then_replace_refreshes(
    card_run: tuple[Path, str], course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is an existing copy refused untouched, and does --replace swap in fresh copies with no leftovers?"""
    dest = tmp_path / "copies"
    assert cli.main(["checkpoint", "a1", str(dest), *FX]) == 0
    (dest / "parent" / "fx_course" / "counter.py").write_text("edited\n", encoding="utf-8")
    before = snapshot(dest)
    capsys.readouterr()
    assert cli.main(["checkpoint", "a1", str(dest), *FX]) == 2
    assert "--replace" in capsys.readouterr().err
    assert snapshot(dest) == before
    assert cli.main(["checkpoint", "a1", str(dest), "--replace", *FX]) == 0
    fresh = (dest / "parent" / "fx_course" / "counter.py").read_bytes()
    assert fresh == (course.root / "labs" / "a1-counter" / "fx_course" / "counter.py").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copies"]


def test_replace_never_touches_a_folder_it_did_not_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does --replace refuse a non-empty folder that an earlier checkpoint run did not make?"""
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "work.py").write_text("x = 1\n", encoding="utf-8")
    before = snapshot(tmp_path)
    assert cli.main(["checkpoint", "a1", str(dest), "--replace", *FX]) == 2
    assert "not made by" in capsys.readouterr().err
    assert snapshot(tmp_path) == before and [p.name for p in tmp_path.iterdir()] == ["mine"]


@pytest.mark.parametrize("tree", ["labs", "solutions"])
def test_refuses_inside_labs_or_solutions(
    tree: str, course: Course, checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does checkpoint refuse a DIR inside labs/ or solutions/ with exit 2 and nothing touched?"""
    root = course.root / tree
    before = snapshot(root)
    assert cli.main(["checkpoint", "a1", str(root / checkpoint.slug / "copies"), *FX]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert snapshot(root) == before


def test_refuses_a_non_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Does checkpoint refuse a non-empty DIR with one line and exit 2?"""
    (tmp_path / "keep.txt").write_text("keep", encoding="utf-8")
    assert cli.main(["checkpoint", "a1", str(tmp_path), *FX]) == 2
    err = capsys.readouterr().err.strip()
    assert "not empty" in err and len(err.splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_refuses_an_unknown_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Does an unknown checkpoint exit 2, list the known ones and create nothing?"""
    assert cli.main(["checkpoint", "99", str(tmp_path / "c"), *FX]) == 2
    assert "known checkpoints: a1, a2" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_default_folder_is_git_ignored(course: Course, checkpoint: Checkpoint) -> None:
    """Is the default destination (.checkpoints/SLUG) ignored by the kit's git, so copies never get
    committed?"""
    default = Path(checkpoint_cmd.DEFAULT_BASE) / checkpoint.slug / "parent" / course.package / "counter.py"
    done = subprocess.run(
        ["git", "check-ignore", "-q", str(default)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0
