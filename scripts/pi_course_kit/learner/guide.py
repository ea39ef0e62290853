"""`pi-course watch`: the guided mode, one thing at a time (like rustlings' watch).

It shows the current lab's first red and its hint command, re-runs that lab on every save, and moves
on by itself when the lab turns green. Keys (or a line, when stdin is no terminal): h the next hint,
l the table of every lab, r reset the current lab to its stubs (asks for `y` first: it replaces the
learner's code), q quit.

The tests run in a worker thread (`Run`), so keys are answered while a run is going on; a save during a
run stops that run (its result would describe files that no longer exist) and starts a new one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import PracticeFolder, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import ManifestError
from pi_course_kit.core.records import edit_candidate_lines
from pi_course_kit.core.runner import RunResult, pytest_command, run_tests
from pi_course_kit.learner.check import RUN_TIMEOUT, render, require_test_files, run_once, short

KEYS = {"h": "hint", "l": "list", "r": "reset", "q": "quit"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare --poll."""
    parser.add_argument("--poll", action="store_true", help=_("poll for saves (file systems without events)"))


@dataclass(frozen=True)
class CurrentLab:
    """The lab the guide is on: its id and its title in the course's language."""

    id: str
    title: str


def lab_table(folder: PracticeFolder) -> dict[str, CurrentLab]:
    """The folder's labs by id, from its one lab table: its course.toml snapshot (read once per watch)."""
    _course, checkpoint = folder.made_from()
    return {lab.id: CurrentLab(lab.id, lab.shown_title) for lab in checkpoint.labs}


class StoppableLaunch:
    """A runner `Launch` whose pytest process (with anything it started) another thread can stop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[str] | None = None
        self.stopped = False

    def __call__(
        self, args: Sequence[str], tree: Path, env: dict[str, str], timeout: float
    ) -> tuple[int, str, bool]:
        with self.lock:
            if self.stopped:
                return -signal.SIGTERM, "", False
            # Its own process group, so that stop() reaches pytest's children (mypy) too.
            process = self.process = subprocess.Popen(
                pytest_command(args),
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            out, err = process.communicate()
            return -9, out + err, True
        return process.returncode, out + err, False

    def stop(self) -> None:
        """End the run's processes (SIGTERM, then SIGKILL after 3 s); a run not started yet never starts."""
        with self.lock:
            self.stopped = True
            process = self.process
        if process is None or process.poll() is not None:
            return
        for sent in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sent)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=3)
                return


class Run:
    """`current_lab` in a worker thread: the main loop hears ("done", name) on `events` when it ends."""

    count = 0

    def __init__(
        self, folder: PracticeFolder, labs: dict[str, CurrentLab], events: queue.Queue[tuple[str, str]]
    ):
        Run.count += 1
        self.name = str(Run.count)
        self.launch = StoppableLaunch()
        self.outcome: tuple[CurrentLab | None, RunResult] | None = None
        self.error: KitError | None = None
        self.elapsed = 0.0
        self.thread = threading.Thread(target=self._work, args=(folder, labs, events), daemon=True)
        self.thread.start()

    def _work(
        self, folder: PracticeFolder, labs: dict[str, CurrentLab], events: queue.Queue[tuple[str, str]]
    ) -> None:
        started = time.monotonic()
        try:
            self.outcome = current_lab(folder, labs, self.launch)
        except KitError as error:  # the tests folder went away: the main loop says so and stops
            self.error = error
        self.elapsed = time.monotonic() - started
        events.put(("done", self.name))

    def stop(self) -> None:
        """End the run and wait for its thread (so no pytest process outlives watch)."""
        self.launch.stop()
        self.thread.join(timeout=10)


def current_lab(
    folder: PracticeFolder, labs: dict[str, CurrentLab], launch: StoppableLaunch | None = None
) -> tuple[CurrentLab | None, RunResult]:
    """One quiet run of every test, and the lab the report names next (None once every lab is done).

    The report already knows the earliest unfinished lab (records.next_step); this only asks it.
    """
    require_test_files(folder)
    result = run_tests(folder.root, ("--tb=no",), timeout=RUN_TIMEOUT, launch=launch or StoppableLaunch())
    report = result.report
    step = report.next
    if step is not None:
        return labs.get(step.lab, CurrentLab(step.lab, step.title)), result
    if report.collect_errors or result.crashed or not report.tests:
        # The run never got to name a lab: stay with the lab that owns the broken line, or the first.
        owner = report.collect_errors[0].lab if report.collect_errors else None
        first = next(iter(labs.values()), None)
        return labs.get(str(owner), first), result
    return None, result


def show(folder: PracticeFolder, lab: CurrentLab | None, result: RunResult, clear: bool = True) -> None:
    """One screen: the current lab, its first red, where to edit, and the keys."""
    if clear and sys.stdout.isatty():
        print("\033[2J\033[H", end="")
    if lab is None:
        print(_("every lab is done: well done! (q quits)"), flush=True)
        return
    report = result.report
    row = next((row for row in report.labs if row.id == lab.id), None)
    count = f"{row.passed}/{row.total}" if row else "0/0"
    # The report's title speaks the run's language (an English title where the course gives one).
    title = row.title if row else lab.title
    print(f"Lab {lab.id} · {title}  ({count})")
    for error in report.collect_errors:
        where = short(folder, error.location) or error.nodeid
        print(_("cannot import your code: {where}: {message}").format(where=where, message=error.message))
    step = report.next
    if step is not None and not report.collect_errors:
        # A lab merely unchecked since an edit is no red: the step says which labs to re-run.
        shown = _("next: {what}") if step.unchecked else _("red: {what}")
        print(shown.format(what=step.what))
        if step.candidates:
            # The test ran several functions that may hold the mistake: all of them, as `check` lists them
            # (one indent less on this screen, whose lines start at the margin).
            for line in edit_candidate_lines(step.candidates, step.more_candidates):
                print(line.removeprefix("  "))
        elif step.location:
            function = f" ({step.function})" if step.function else ""
            print(_("edit: {where}").format(where=f"{short(folder, step.location)}{function}"))
    print(_("hint: pi-course hint {lab}").format(lab=lab.id))
    print(
        _(
            "keys: h hint · l list the labs · r reset this lab to its stubs (asks first) · q quit   "
            "(saving a file re-runs the lab)"
        ),
        flush=True,
    )


def _keys(events: queue.Queue[tuple[str, str]]) -> None:
    """Feed single keys (a terminal in cbreak mode) or first letters of lines into `events`."""
    stream = sys.stdin
    if stream is None:
        return
    if stream.isatty():
        import termios
        import tty

        saved = termios.tcgetattr(stream.fileno())
        try:
            tty.setcbreak(stream.fileno())
            while key := stream.read(1):
                events.put(("key", key.lower()))
        finally:
            termios.tcsetattr(stream.fileno(), termios.TCSADRAIN, saved)
    else:
        for line in stream:
            if line.strip():
                events.put(("key", line.strip()[0].lower()))
    events.put(("key", "q"))


def _saves(folder: PracticeFolder, poll: bool, events: queue.Queue[tuple[str, str]]) -> None:
    """Feed every batch of saved files into `events`."""
    from pi_course_kit.learner.watch import changes, needs_polling

    stream: Iterator[set[str]] = changes(folder.root, needs_polling(folder.root, forced=poll))
    for _batch in stream:
        events.put(("save", ""))


#: The one key that confirms a reset; any other key keeps the learner's code.
CONFIRM = "y"


def handle_key(
    folder: PracticeFolder, key: str, lab: CurrentLab | None, armed: bool = False, last: Run | None = None
) -> str:
    """Do what one key asks: "quit", "rerun" (the lab's files changed: run it again), "confirm" or "stay".

    `r` replaces the learner's code with the lab's stubs, so it only asks ("confirm"); the key after it
    (`armed`) resets on `y` and keeps the code on anything else. `l` shows the table of the `last`
    finished run (watch re-runs on every save, so it is current), or runs the tests when there is none.
    Before the first run has named a lab (`lab` None), `h` lets `pi-course hint` choose it.
    `folder` may have been opened long ago; every command run from here writes meta.json as a
    read-modify-write of the file as it is now (PracticeFolder.update), so nothing recorded since is lost.
    """
    from pi_course_kit.learner import hint, reset

    if armed:
        if key == CONFIRM and lab is not None:
            _command("reset", reset, [lab.id])
            return "rerun"
        print(_("not reset: your code is unchanged"), flush=True)
        return "stay"
    action = KEYS.get(key)
    if action == "quit":
        return "quit"
    if action == "hint":
        _command("hint", hint, [lab.id] if lab is not None else [])
    elif action == "list" and last is not None and last.outcome is not None:
        table(folder, last.outcome[1], last.elapsed)
    elif action == "list":
        run_once(folder, ["--tb=no"], verbose=False)
    elif action == "reset" and lab is not None:
        print(
            _(
                "reset Lab {lab}? Its stubs replace your code in its functions (your version is backed up "
                "in .pi-course/backups/). Press {key} to reset, any other key to keep your code"
            ).format(lab=lab.id, key=CONFIRM),
            flush=True,
        )
        return "confirm"
    return "stay"


def table(folder: PracticeFolder, result: RunResult, elapsed: float) -> None:
    """Print a finished run's table as `pi-course check` does, and remember its next lab likewise."""
    title = _("pi-course check · checkpoint {id} · {root} ({seconds:.1f} s)").format(
        id=folder.checkpoint_id, root=folder.root, seconds=elapsed
    )
    render(folder, result, elapsed, title)
    if result.report.next is not None:
        lab = result.report.next.lab
        with contextlib.suppress(OSError, KitError):  # a read-only folder can still be watched
            folder.update(lambda meta: meta.__setitem__("last_next_lab", lab))


def _command(name: str, module: Any, argv: list[str]) -> int:
    """Run another learner command's module as `pi-course NAME ARGV` would (without importing the CLI)."""
    parser = argparse.ArgumentParser(prog=f"pi-course {name}")
    module.add_arguments(parser)
    try:
        return int(module.run(parser.parse_args(argv)))
    except (KitError, ManifestError) as error:
        print(_("{prog}: error: {message}").format(prog=f"pi-course {name}", message=error), file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Guide the learner lab by lab until every lab is green or they quit.

    One loop reads every event: keys, saves, and the end of the run in the worker thread. So a key is
    answered during a run, and a save during a run restarts it (never lost, never shown stale).
    """
    folder = open_folder()
    require_test_files(folder)
    labs = lab_table(folder)
    events: queue.Queue[tuple[str, str]] = queue.Queue()
    threading.Thread(target=_saves, args=(folder, args.poll, events), daemon=True).start()
    threading.Thread(target=_keys, args=(events,), daemon=True).start()
    running: Run | None = Run(folder, labs, events)
    last: Run | None = None  # the last finished run: its lab and result are on the screen
    lab: CurrentLab | None = None
    armed = False  # the last key was `r`: this key confirms the reset or keeps the code
    keyed = False  # a key printed something since the screen was drawn: keep it when the run ends
    wants_table = False  # `l` came before any run had finished: show the table when one does
    try:
        while True:
            kind, detail = events.get()
            if kind == "done":
                if running is None or detail != running.name:
                    continue  # a stopped run's end: a newer run is going
                if running.error is not None:
                    raise running.error
                last, running = running, None
                assert last.outcome is not None
                lab, result = last.outcome
                show(folder, lab, result, clear=not keyed)
                keyed = False
                if wants_table:
                    table(folder, result, last.elapsed)
                    wants_table = False
                continue
            if kind == "key":
                if detail == "l" and not armed and last is None:
                    wants_table = True
                    continue
                action = handle_key(folder, detail, lab, armed, last)
                armed = action == "confirm"
                keyed = keyed or action != "quit"
                if action == "quit":
                    print(_("stopped watching"), flush=True)
                    return 0
                if action in ("stay", "confirm"):
                    continue
            if armed:
                # A save re-runs the lab: the question asked before it no longer stands, and the learner
                # must know why their next `y` will do nothing.
                print(_("reset question dropped: a file was saved (press r to ask again)"), flush=True)
                armed = False
            if running is not None:
                running.stop()
            running = Run(folder, labs, events)
    except KeyboardInterrupt:
        print(_("stopped watching"), flush=True)
        return 0
    finally:
        if running is not None:
            running.stop()
