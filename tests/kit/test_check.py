"""`pi-course check` in fixture-course folders: the per-lab table, the next step, --lab, and --watch
re-running on save."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from learner_support import CLI, make_folder, run_cli, solve
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import watch


@pytest.fixture(scope="module")
def starter_folder(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh practice folder for the whole module (the tests here only read it)."""
    return make_folder(course, checkpoint, tmp_path_factory.mktemp("check") / "starter")


@pytest.fixture(scope="module")
def solved_folder(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A practice folder holding the solution's teaching files."""
    folder = make_folder(course, checkpoint, tmp_path_factory.mktemp("check") / "solved")
    solve(course, checkpoint, folder)
    return folder


def test_check_from_a_subfolder_shows_the_blocker_and_where_to_edit(starter_folder: Path) -> None:
    """From fx_course/ with 1.1 unsolved, does `check --lab 1.2` show 1.2 blocked and send the learner to
    1.1?"""
    done = run_cli(["check", "--lab", "1.2"], cwd=starter_folder / "fx_course")
    assert done.returncode == 1
    out = done.stdout
    row = next(line for line in out.splitlines() if line.startswith("1.2 "))
    assert "blocked by 1.1" in row and "0/3" in row
    # One of 1.2's tests stops on 1.1's stub, so the next step is the blocker's red, not 1.2's.
    assert "next: Lab 1.1 (failing) — Lab 1.1 not implemented: Counter.add" in out
    assert "edit: fx_course/counter.py:" in out and "(Counter.add)" in out
    assert "run:  python -m pytest -m lab1_1   (or: pi-course check --lab 1.1)" in out
    assert "stuck? pi-course hint 1.1" in out
    assert not any(line.startswith(("1.1 ", "extra1 ")) for line in out.splitlines())  # --lab selects one


def test_check_shows_every_lab_done_on_the_solution(solved_folder: Path, checkpoint: Checkpoint) -> None:
    """With the solution's teaching files only, does `check` exit 0, every required lab done, the transfer
    next?"""
    done = run_cli(["check"], cwd=solved_folder)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line[:1].isalnum()}
    for lab in checkpoint.required_labs:
        assert "done" in rows[lab.id]
    optional = [lab for lab in checkpoint.labs if lab.optional]
    assert optional, "checkpoint a1 has its optional exercise"
    # solve() copies the teaching files, not the optional exercise's new file: it is suggested, not done.
    assert "not started (optional)" in rows[optional[0].id]
    assert "every required lab is done; if you like, try the optional exercise:" in done.stdout
    assert f"optional: Lab {optional[0].id} (not started) — " in done.stdout
    assert (
        f"run:  python -m pytest -m {optional[0].marker}   (or: pi-course check --lab {optional[0].id})"
        in done.stdout
    )


def test_check_outside_a_practice_folder_is_refused(tmp_path: Path) -> None:
    """Outside a practice folder, does check exit 2 with one line saying how to make one?"""
    done = run_cli(["check"], cwd=tmp_path)
    assert done.returncode == 2
    assert "not inside a practice folder" in done.stderr and "pi-course practice" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_check_refuses_an_unknown_lab(starter_folder: Path) -> None:
    """Does `check --lab 9.9` exit 2 and list the labs of the checkpoint?"""
    done = run_cli(["check", "--lab", "9.9"], cwd=starter_folder)
    assert done.returncode == 2
    assert "known labs: 1.1, 1.2, extra1" in done.stderr


# -- watch mode ---------------------------------------------------------------------------------


class Watcher:
    """`pi-course check --watch` as a subprocess whose output lines can be awaited with a deadline."""

    def __init__(self, folder: Path, extra: list[str]) -> None:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [*CLI, "check", "--watch", "--lab", "1.2", *extra],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout} s; saw:\n" + "\n".join(self.seen))


@pytest.mark.parametrize("mode", [[], ["--poll"]], ids=["events", "polling"])
def test_watch_reruns_after_a_save_and_stops_on_terminate(
    mode: list[str], course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does `check --watch` run once, run again after counter.py is saved, and end cleanly on SIGTERM?"""
    folder = make_folder(course, checkpoint, tmp_path / "watched")
    watcher = Watcher(folder, mode)
    try:
        watcher.wait_for("── run 1")
        watcher.wait_for("watching ")
        counter = folder / "fx_course" / "counter.py"
        time.sleep(0.2)  # let the watcher settle before the save
        counter.write_text(
            counter.read_text(encoding="utf-8") + "\n# saved by the learner\n", encoding="utf-8"
        )
        second = watcher.wait_for("── run 2")
        assert "changed: fx_course/counter.py" in second
        watcher.wait_for("next: Lab 1.1 (failing) — Lab 1.1 not implemented")
        watcher.wait_for("watching ")
        watcher.process.terminate()
        watcher.wait_for("stopped watching", timeout=20)
        assert watcher.process.wait(timeout=20) == 0
    finally:
        if watcher.process.poll() is None:
            watcher.process.kill()
            watcher.process.wait(timeout=20)


def test_poll_changes_reports_edits_additions_and_deletions(tmp_path: Path) -> None:
    """Does the stdlib poller report a modified, an added and a deleted source file, ignoring caches?"""
    (tmp_path / "a.py").write_text("a = 1\n", encoding="utf-8")
    (tmp_path / "gone.py").write_text("", encoding="utf-8")

    def make_cache() -> None:
        (tmp_path / "__pycache__").mkdir()
        (tmp_path / "__pycache__" / "x.py").write_text("1", encoding="utf-8")

    edits: list[Callable[[], object]] = [
        lambda: (tmp_path / "a.py").write_text("a = 22\n", encoding="utf-8"),
        make_cache,
        lambda: (tmp_path / "new.py").write_text("", encoding="utf-8"),
        lambda: (tmp_path / "gone.py").unlink(),
    ]
    steps = iter(edits)

    def fake_sleep(_seconds: float) -> None:
        next(steps)()

    changes = watch.poll_changes(tmp_path, interval=0, sleep=fake_sleep)
    assert next(changes) == {str(tmp_path / "a.py")}
    assert next(changes) == {str(tmp_path / "new.py")}  # the __pycache__ write was skipped over
    assert next(changes) == {str(tmp_path / "gone.py")}


def test_relevant_keeps_sources_and_drops_caches_and_metadata(tmp_path: Path) -> None:
    """Does the event filter react to .py/.ini saves only, outside caches and .pi-course?"""
    root = tmp_path.resolve()
    assert watch.relevant(str(root / "fx_course" / "counter.py"), root)
    assert watch.relevant(str(root / "pytest.ini"), root)
    assert not watch.relevant(str(root / ".pi-course" / "meta.json"), root)
    assert not watch.relevant(str(root / "fx_course" / "__pycache__" / "counter.cpython-311.py"), root)
    assert not watch.relevant(str(root / "fx_course" / ".counter.py.swp"), root)
    assert not watch.relevant("/elsewhere/tool.py", root)


def test_polling_is_chosen_on_file_systems_without_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Is polling chosen on a network/VM share (by /proc/mounts type), by --poll, or by the env variable?"""
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\nhost:/share /mnt/share nfs4 rw 0 0\nshared /mnt/vm 9p rw 0 0\n",
        encoding="utf-8",
    )
    assert watch.mount_type(Path("/mnt/share/course"), str(mounts)) == "nfs4"
    assert watch.mount_type(Path("/mnt/vm"), str(mounts)) == "9p"
    assert watch.mount_type(Path("/home/learner"), str(mounts)) == "ext4"
    monkeypatch.delenv(watch.POLL_ENV, raising=False)
    assert watch.needs_polling(tmp_path, forced=True)
    monkeypatch.setenv(watch.POLL_ENV, "1")
    assert watch.needs_polling(tmp_path)
    monkeypatch.setattr(watch, "mount_type", lambda path: "nfs")
    monkeypatch.setenv(watch.POLL_ENV, "0")
    assert watch.needs_polling(tmp_path)
    monkeypatch.setattr(watch, "mount_type", lambda path: "ext4")
    assert not watch.needs_polling(tmp_path)
