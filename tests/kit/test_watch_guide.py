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
from learner_support import make_folder
from pi_course_kit.core import i18n
from pi_course_kit.core.folder import open_folder
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import NextStep, RunReport, Status
from pi_course_kit.core.runner import RunResult
from pi_course_kit.learner import guide


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
    # The notes are written before watch starts: a save after `r` would drop the question (tested below).
    mine = teaching.read_text(encoding="utf-8") + "\n# my own notes\n"
    teaching.write_text(mine, encoding="utf-8")
    term = Terminal(folder)
    try:
        term.wait_for("r reset this lab to its stubs (asks first)")
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


def test_a_save_after_r_drops_the_question_and_says_so(folder: Path, checkpoint: Checkpoint) -> None:
    """Does a save while `r` waits for its answer drop the question aloud, so a later `y` resets nothing?"""
    teaching = folder / checkpoint.teaching_files[0]
    backups = folder / ".pi-course" / "backups"
    term = Terminal(folder)
    try:
        term.wait_for("r reset this lab to its stubs (asks first)")
        term.press("r")
        term.wait_for(f"reset Lab {checkpoint.first_lab.id}? Its stubs replace your code")
        mine = teaching.read_text(encoding="utf-8") + "\n# saved while the question was open\n"
        teaching.write_text(mine, encoding="utf-8")
        term.wait_for("reset question dropped: a file was saved (press r to ask again)")
        term.press("y")
        term.press("q")
        assert term.close() == 0
        assert teaching.read_text(encoding="utf-8") == mine
        assert not backups.exists() or not any(backups.iterdir())
    finally:
        if term.process.poll() is None:
            term.process.kill()


#: A test that records its process id in runs.txt, then waits until gate.txt exists: a run that lasts
#: exactly as long as the test wants, so what watch does meanwhile is seen without timing anything.
GATED = """
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_waits_for_the_gate() -> None:
    with (ROOT / "runs.txt").open("a", encoding="utf-8") as runs:
        runs.write(f"{os.getpid()}\\n")
    deadline = time.monotonic() + 300
    while not (ROOT / "gate.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def gated(folder: Path) -> Path:
    """Add the gated test to the folder; return runs.txt (one pid a line, one line a run)."""
    (folder / "tests" / "test_gate.py").write_text(GATED, encoding="utf-8")
    return folder / "runs.txt"


def runs_started(runs: Path, count: int, timeout: float = 120.0) -> list[int]:
    """Wait until `count` runs have reached the gated test; return their pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(line) for line in runs.read_text().split()] if runs.exists() else []
        if len(pids) >= count:
            return pids
        time.sleep(0.1)
    pytest.fail(f"only {runs.read_text() if runs.exists() else 'no'} runs reached the gated test")


def gone(pid: int, timeout: float = 30.0) -> bool:
    """Has process `pid` ended (and been reaped)?"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_h_shows_the_hint_during_a_run_and_q_ends_the_run(folder: Path, checkpoint: Checkpoint) -> None:
    """While the tests still run, does `h` show the hint, and does `q` end watch and its pytest cleanly?"""
    runs = gated(folder)
    term = Terminal(folder)
    try:
        (pid,) = runs_started(runs, 1)
        term.press("h")
        screen = term.wait_for(checkpoint.first_lab.hints[0][:20])
        assert "keys: h hint" not in screen  # the run has not ended: the gate is still closed
        assert not (folder / "gate.txt").exists()
        term.press("q")
        assert term.close() == 0
        assert "Traceback" not in term.screen
        assert gone(pid), "the run's pytest outlived watch"
    finally:
        if term.process.poll() is None:
            term.process.kill()


def test_a_save_during_a_run_starts_a_run_that_sees_it(
    folder: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """A file saved (e.g. by an outside reset) while the tests run: does a new run start and show its
    result?"""
    runs = gated(folder)
    term = Terminal(folder)
    try:
        (first,) = runs_started(runs, 1)
        for relative in checkpoint.teaching_files:
            shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
        extra = [f for f in checkpoint.solution_only if (course.root / checkpoint.solution / f).is_file()]
        for relative in extra:
            shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
        runs_started(runs, 2)
        assert gone(first), "the run made stale by the save was not stopped"
        (folder / "gate.txt").write_text("open\n", encoding="utf-8")
        screen = term.wait_for("every lab is done", timeout=120)
        assert f"Lab {checkpoint.first_lab.id} · " not in screen  # the stale run's screen never came
        term.press("q")
        assert term.close() == 0
    finally:
        if term.process.poll() is None:
            term.process.kill()


def test_the_screen_lists_every_candidate_the_report_names(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the failing test ran several functions that may hold the mistake, does watch's screen list
    each of them and how many more, as `check` does, instead of the first one alone?"""
    i18n.use("en")
    folder = open_folder(make_folder(course, checkpoint, tmp_path / "p"))
    candidates = ("fx_course/counter.py:16 (Counter.add)", "fx_course/counter.py:10 (Counter.__init__)")
    step = NextStep(
        lab="1.1",
        status=Status.FAILING,
        what="does add count one at a time?",
        location="fx_course/counter.py:16",
        function="Counter.add, Counter.__init__",
        candidates=candidates,
        more_candidates=1,
        command='python -m pytest -m "lab1_1"',
    )
    result = RunResult(returncode=1, output="", report=RunReport(next=step, finished=True))
    guide.show(folder, guide.CurrentLab("1.1", "count up"), result, clear=False)
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("edit: the test ran 3 of your functions"))
    assert [line.strip() for line in lines[at + 1 : at + 3]] == list(candidates)
    assert lines[at + 3].strip() == "… and 1 more"
