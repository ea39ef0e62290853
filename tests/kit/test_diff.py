"""`pi-course diff a1 [DIR]` on the fixture course: teaching files against the solution, in full or --stat."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import practice

ESC = "\033["


def test_default_diff_is_starter_against_solution(
    checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does the default diff show the starter's stubs replaced by the solution's bodies, without lab
    markers?"""
    assert cli.main(["diff", "a1", *FX]) == 0
    out = capsys.readouterr().out
    assert f"--- {checkpoint.starter}/fx_course/counter.py" in out
    assert f"+++ {checkpoint.solution}/fx_course/counter.py" in out
    assert '-        raise LabNotImplemented("1.1", "Counter.add")' in out
    assert "+        self.count += 1" in out
    assert "BEGIN LAB" not in out and "END LAB" not in out
    assert ESC not in out  # captured output is not a terminal


def test_practice_folder_diff_shows_only_what_the_learner_still_lacks(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does diffing a practice folder name that folder and go quiet once its counter.py is the solution's?"""
    folder = practice.create(course, checkpoint, tmp_path / "alice")
    assert cli.main(["diff", "a1", str(folder), *FX]) == 0
    out = capsys.readouterr().out
    assert f"--- {folder}/fx_course/counter.py" in out
    assert '-        raise LabNotImplemented("1.2", "Counter.reset")' in out
    shutil.copyfile(
        course.root / checkpoint.solution / "fx_course/counter.py", folder / "fx_course/counter.py"
    )
    assert cli.main(["diff", "a1", str(folder), *FX]) == 0
    assert "no differences" in capsys.readouterr().out


def test_stat_summarises_changed_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """Does --stat give one line per teaching file and a total that matches the full diff?"""
    assert cli.main(["diff", "a1", *FX]) == 0
    full = capsys.readouterr().out.splitlines()
    added = sum(1 for line in full if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in full if line.startswith("-") and not line.startswith("---"))
    assert cli.main(["diff", "a1", "--stat", *FX]) == 0
    out = capsys.readouterr().out
    assert " fx_course/counter.py | " in out
    assert f"1 file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)" in out


def test_color_always_and_never(capsys: pytest.CaptureFixture[str]) -> None:
    """Does --color always colour even into a pipe, and --color never never colour?"""
    assert cli.main(["diff", "a1", "--color", "always", *FX]) == 0
    assert f"{ESC}32m+" in capsys.readouterr().out
    assert cli.main(["diff", "a1", "--stat", "--color", "never", *FX]) == 0
    assert ESC not in capsys.readouterr().out


def test_color_auto_colours_only_on_a_terminal() -> None:
    """With --color auto, is the output coloured on a pseudo-terminal but plain into a pipe?"""
    command = [sys.executable, "-m", "pi_course_kit.cli", "diff", "a1", "--stat", *FX]
    piped = subprocess.run(command, capture_output=True, text=True, check=True)
    assert ESC not in piped.stdout and "fx_course/counter.py" in piped.stdout
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(command, stdout=follower, stderr=subprocess.DEVNULL, check=True, timeout=60)
        assert done.returncode == 0
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert ESC.encode() in b"".join(chunks)


def test_a_folder_without_the_package_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Is a folder that holds no fx_course/ refused with exit 2 and a one-line hint naming the package?"""
    (tmp_path / "pi_course").mkdir()  # the real course's package is not the fixture's
    assert cli.main(["diff", "a1", str(tmp_path), *FX]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a practice folder" in err and "fx_course/" in err and len(err.splitlines()) == 1
    assert cli.main(["diff", "a1", str(tmp_path / "missing"), *FX]) == 2
    assert "no such folder" in capsys.readouterr().err
