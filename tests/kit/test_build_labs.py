"""`pi-course build-labs` on copies of the fixture course: one source (the solution) regenerates every
starter."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution

REPO_PARTS = ("course.toml", "labs", "solutions", "tests/focused", "notebooks", "docs")


def copy_repo(course: Course, dest: Path) -> Path:
    """Copy the parts of a course checkout that the instructor commands read."""
    for part in REPO_PARTS:
        source = course.root / part
        if source.is_dir():
            shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest / part)
    return dest


def add_to_checkpoint(manifest_text: str, checkpoint_id: str, toml: str) -> str:
    """Append TOML to one checkpoint's block of a manifest, wherever that block stands in the file."""
    blocks = manifest_text.split("\n[[checkpoints]]\n")
    for index, block in enumerate(blocks[1:], start=1):
        if block.startswith(f'id = "{checkpoint_id}"\n'):
            blocks[index] = block.rstrip("\n") + "\n" + toml + "\n"
            return "\n[[checkpoints]]\n".join(blocks)
    raise AssertionError(f"no checkpoint {checkpoint_id} in the manifest")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under a folder with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_check_lists_a_hand_edited_starter_and_changes_nothing(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does --check exit 1 naming a hand-edited starter file and the fixing command, without writing?"""
    repo = copy_repo(course, tmp_path / "repo")
    counter = repo / checkpoint.starter / "fx_course/counter.py"
    counter.write_text(counter.read_text(encoding="utf-8") + "\n# edited by hand\n", encoding="utf-8")
    before = snapshot(repo)
    assert cli.main(["build-labs", "--check", "--root", str(repo)]) == 1
    out = capsys.readouterr().out
    assert f"{checkpoint.starter}/fx_course/counter.py" in out
    assert "pi-course build-labs" in out
    assert snapshot(repo) == before


def test_build_round_trip_restores_the_generated_starter(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a hand edit, an extra file and a deleted given file, does build-labs restore the exact
    starter?"""
    repo = copy_repo(course, tmp_path / "repo")
    starter = repo / checkpoint.starter
    pristine = snapshot(starter)
    (starter / "fx_course/counter.py").write_text("broken = True\n", encoding="utf-8")
    (starter / "fx_course/extra.py").write_text("x = 1\n", encoding="utf-8")
    (starter / checkpoint.given_files[0]).unlink()
    assert cli.main(["build-labs", "--root", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "fx_course/counter.py" in out and "fx_course/extra.py" in out
    assert snapshot(starter) == pristine
    assert cli.main(["build-labs", "--check", "--root", str(repo)]) == 0


def test_build_carries_a_solution_edit_into_the_starter(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a docstring edited in the solution reach the starter while the marked body stays a stub?"""
    repo = copy_repo(course, tmp_path / "repo")
    solution = repo / checkpoint.solution / "fx_course/counter.py"
    source = solution.read_text(encoding="utf-8")
    old = '"""Count one more and return the new count."""'
    assert source.count(old) == 1
    solution.write_text(source.replace(old, '"""Count one more (edited)."""'), encoding="utf-8")
    assert cli.main(["build-labs", "--check", "--root", str(repo)]) == 1
    assert cli.main(["build-labs", "--root", str(repo)]) == 0
    starter = (repo / checkpoint.starter / "fx_course/counter.py").read_text(encoding="utf-8")
    assert '"""Count one more (edited)."""' in starter
    assert 'raise LabNotImplemented("1.1", "Counter.add")' in starter
    assert "self.count += 1" not in starter


def test_build_carries_a_parents_edit_into_the_childs_solution_and_starter(
    course: Course, child: Checkpoint, tmp_path: Path
) -> None:
    """Does an edit to a1's solution counter.py reach a2's solution and starter (an inherited file)?"""
    repo = copy_repo(course, tmp_path / "repo")
    parent = repo / "solutions/a1-counter/fx_course/counter.py"
    parent.write_text(parent.read_text(encoding="utf-8") + "\n# shared edit\n", encoding="utf-8")
    assert cli.main(["build-labs", "--root", str(repo)]) == 0
    for tree in (child.solution, child.starter):
        assert (repo / tree / "fx_course/counter.py").read_bytes() == parent.read_bytes(), tree


def test_malformed_marker_is_a_one_line_error_and_writes_nothing(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does an unclosed lab region give exit 2, one line naming file and fix, and leave the starter alone?"""
    repo = copy_repo(course, tmp_path / "repo")
    solution = repo / checkpoint.solution / "fx_course/counter.py"
    source = solution.read_text(encoding="utf-8")
    solution.write_text(source.replace("        # END LAB 1.2\n", "", 1), encoding="utf-8")
    before = snapshot(repo / checkpoint.starter)
    assert cli.main(["build-labs", "--root", str(repo)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "counter.py" in err and "END LAB" in err
    assert snapshot(repo / checkpoint.starter) == before


def test_unknown_checkpoint_and_missing_root_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Are an unknown checkpoint and a --root that does not exist refused with exit 2?"""
    assert cli.main(["build-labs", "99", "--check", *FX]) == 2
    assert "unknown checkpoint '99'; known checkpoints: a1, a2" in capsys.readouterr().err
    assert cli.main(["build-labs", "--root", str(tmp_path / "nowhere")]) == 2
    assert "--course" in capsys.readouterr().err


def test_a_starter_whose_package_import_spans_lines_still_parses() -> None:
    """When a file's only import of its own package is parenthesised over several lines, does the starter
    import LabNotImplemented after that statement, not inside its parentheses?"""
    solution = (
        '"""A module of the course."""\n\n'
        "from .codec import (\n"
        "    decode,\n"
        "    encode,\n"
        ")\n\n\n"
        "def answer() -> int:\n"
        "    # BEGIN LAB 1.1 answer\n"
        "    return len(encode(decode('x')))\n"
        "    # END LAB 1.1\n"
    )
    starter = strip_solution(solution, "fx_course/bridge.py", {"1.1"})
    ast.parse(starter)
    assert "    encode,\n)\nfrom .lab import LabNotImplemented\n" in starter
    assert 'raise LabNotImplemented("1.1", "answer")' in starter
