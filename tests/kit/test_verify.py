"""`pi-course verify`: the repository holds together, and each kind of breakage is named (on a copy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from test_build_labs import copy_repo


@pytest.mark.slow
def test_verify_passes_on_the_repository(course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    """Does `pi-course verify` find no problem in the repository, every mutation of every checkpoint caught?"""
    code = cli.main(["verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verify: all" in out
    for checkpoint in course.checkpoints:
        assert f"ok   {checkpoint.id} starter red, lab by lab" in out
        assert f"ok   {checkpoint.id} inherited files equal the parent's solution" in out
        for mutation in checkpoint.mutations:
            assert f"ok   {checkpoint.id} mutation {mutation.name} caught" in out


def test_a_hand_edited_starter_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a starter edited by hand fail verify, naming the file and `pi-course build-labs`?"""
    repo = copy_repo(course, tmp_path / "repo")
    tool = repo / checkpoint.starter / "pi_course/tool.py"
    tool.write_text(
        tool.read_text(encoding="utf-8").replace("Accept a str", "Accept a string", 1), encoding="utf-8"
    )
    assert cli.main(["verify", "--root", str(repo), "--check", "sync", "--check", "parents"]) == 1
    out = capsys.readouterr().out
    assert "FAIL 06 starters in sync with solutions" in out
    assert f"{checkpoint.starter}/pi_course/tool.py is stale" in out and "pi-course build-labs" in out
    assert "ok   06 given files equal in starter and solution" in out


def test_a_solution_that_breaks_a_test_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a solution with a wrong message fail verify, naming a failing focused test?"""
    repo = copy_repo(course, tmp_path / "repo")
    tool = repo / checkpoint.solution / "pi_course/tool.py"
    source = tool.read_text(encoding="utf-8")
    assert source.count('"未知工具"') == 1
    tool.write_text(source.replace('"未知工具"', '"unknown tool"'), encoding="utf-8")
    assert cli.main(["verify", "--root", str(repo), "--check", "solution"]) == 1
    out = capsys.readouterr().out
    assert "FAIL 06 solution green" in out
    assert "tests/test_06_tool_contract.py::" in out and "failed" in out


def test_a_mutation_no_test_catches_fails_verify(
    course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a mutation that survives every focused test fail verify, naming the mutation?"""
    repo = copy_repo(course, tmp_path / "repo")
    manifest = repo / "course.toml"
    text = manifest.read_text(encoding="utf-8")
    # Keep one caught mutation and add one that only edits a comment.
    head = text[: text.index("[[checkpoints.mutations]]")]
    kept = text[text.index("[[checkpoints.mutations]]") :].split("\n[[checkpoints.mutations]]")[0]
    manifest.write_text(
        head
        + kept
        + '\n[[checkpoints.mutations]]\nname = "comment-only"\ndescription = "changes a comment"\n'
        'file = "pi_course/tool.py"\nfind = "# Overwriting would let"\nreplace = "# Replacing would let"\n',
        encoding="utf-8",
    )
    assert cli.main(["verify", "--root", str(repo), "--check", "mutations"]) == 1
    out = capsys.readouterr().out
    assert "ok   06 mutation parse-after-execute caught" in out
    assert "FAIL 06 mutation comment-only caught" in out
    assert "'comment-only' (changes a comment) is caught by no focused test" in out


def test_a_mutation_whose_text_is_gone_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the solution no longer contains a mutation's find text, does verify say so?"""
    repo = copy_repo(course, tmp_path / "repo")
    tool = repo / checkpoint.solution / "pi_course/tool.py"
    tool.write_text(
        tool.read_text(encoding="utf-8").replace("except Exception as error:", "except Exception as exc:"),
        encoding="utf-8",
    )
    assert cli.main(["verify", "--root", str(repo), "--check", "mutations-static"]) == 1
    out = capsys.readouterr().out
    assert "mutation 'catches-base-exception': its find text does not occur in pi_course/tool.py" in out
