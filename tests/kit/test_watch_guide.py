"""The guided watch mode under a real terminal (a pty), in a fixture-course folder: one lab at a time."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FX
from pi_course_kit.core.manifest import Checkpoint, Course


class Terminal:
    """`pi-course watch` on the slave side of a pty; what it prints is read from the master side."""

    def __init__(self, cwd: Path) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "PI_COURSE_LANG": "en", "TERM": "xterm"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pi_course_kit.cli", "watch", "--poll"],
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
        )
        os.close(slave)
        self.screen = ""

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """Read until `text` has been printed (or fail with what was seen)."""
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"never saw {text!r}; the terminal showed:\n{self.screen[-2000:]}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.screen += os.read(self.master, 65536).decode("utf-8", "replace")
                except OSError:
                    break
        return self.screen

    def press(self, key: str) -> None:
        """Type one key."""
        os.write(self.master, key.encode())

    def close(self) -> int:
        """Wait for the program to end; return its exit code."""
        try:
            return self.process.wait(timeout=30)
        finally:
            os.close(self.master)


@pytest.fixture
def folder(tmp_path: Path, checkpoint: Checkpoint) -> Path:
    """A fresh practice folder of the first checkpoint."""
    done = subprocess.run(
        [sys.executable, "-m", "pi_course_kit.cli", "practice", checkpoint.id, str(tmp_path / "p"), *FX],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return tmp_path / "p"


def test_watch_shows_the_first_red_then_moves_on_when_the_lab_turns_green(
    folder: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """Does watch show the first lab's red and hint command, and reach "every lab is done" after a save?"""
    first = checkpoint.first_lab
    term = Terminal(folder)
    try:
        screen = term.wait_for("keys: h hint")
        assert f"Lab {first.id} · {first.title}" in screen
        assert checkpoint.first_red_prefix in screen
        assert f"hint: pi-course hint {first.id}" in screen
        term.press("h")
        term.wait_for(first.hints[0][:20])
        for relative in checkpoint.teaching_files:
            shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
        extra = [f for f in checkpoint.solution_only if (course.root / checkpoint.solution / f).is_file()]
        for relative in extra:
            shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
        term.wait_for("every lab is done", timeout=120)
        term.press("q")
        assert term.close() == 0
    finally:
        if term.process.poll() is None:
            term.process.kill()


def test_r_asks_before_it_resets_and_any_other_key_keeps_the_code(
    folder: Path, checkpoint: Checkpoint
) -> None:
    """Does `r` only ask (naming the backup), `n` keep the learner's code, and `r` then `y` reset the lab?"""
    first = checkpoint.first_lab
    teaching = folder / checkpoint.teaching_files[0]
    backups = folder / ".pi-course" / "backups"
    term = Terminal(folder)
    try:
        term.wait_for("r reset this lab to its stubs (asks first)")
        mine = teaching.read_text(encoding="utf-8") + "\n# my own notes\n"
        teaching.write_text(mine, encoding="utf-8")
        term.press("r")
        term.wait_for(f"reset Lab {first.id}? Its stubs replace your code")
        term.press("n")
        term.wait_for("not reset: your code is unchanged")
        assert teaching.read_text(encoding="utf-8") == mine
        assert not backups.exists() or not any(backups.iterdir())
        term.press("r")
        term.press("y")
        term.wait_for("pi-course reset --undo", timeout=120)
        assert backups.is_dir() and len(list(backups.iterdir())) == 1
        term.press("q")
        assert term.close() == 0
    finally:
        if term.process.poll() is None:
            term.process.kill()
