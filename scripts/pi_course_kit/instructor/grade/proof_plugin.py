"""A pytest plugin for the batch's trusted reference run: which package functions and files each test uses.

Loaded with `-p` in the grader's unsandboxed run of the solution, never in a learner's run. For each test
it writes one JSON line to the file PROOF_ENV names: the node id, the units of the package it entered
(a module-level function or a method, by qualified name; code written inside a function counts as that
function), the package files that were opened while it ran, by this process or by any process it
started (a worker that imports the package, a type checker reading the sources), and whether it did
something neither can follow (`opaque`). `proof.Proof` reads the lines back.

A module-, class- or session-scoped fixture runs for the first test that needs it, but its value serves
every test that uses it: the units it entered are added to each of those tests.

The files come from inotify, which sees an open by any process. A process that outlives its test can
serve a later test with what it read before: while one lives, each test gets every file read since the
oldest living one was started. What is read after a test ends cannot change its outcome. Orphans are
found because the run splits off a reaper that adopts them (`_split_off_a_reaper`). Without inotify (not
Linux, or no watch left) a test that starts a process or opens a package file is opaque, as before.

Why by hand: coverage.py records lines per context, not the functions each test entered across the
threads it started, and it cannot say which files a test's processes read.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

try:  # Linux only, and in the instructor extra; without them the run proves less, never more.
    import inotify_simple
    import psutil

    WATCHABLE = sys.platform == "linux"
except ImportError:  # pragma: no cover - depends on the platform
    WATCHABLE = False

#: The file the lines go to; the plugin does nothing without it.
PROOF_ENV = "PI_COURSE_PROOF"
#: The package whose functions are noted (the tree's `pi_course_package` ini value).
PACKAGE_INI = "pi_course_package"
#: Audit events of a test that starts a process: its reads are watched (or, unwatched, it is opaque).
SPAWNS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "os.spawn"})
#: Audit events of a copy of this interpreter that runs the package's code out of the tracer's sight.
FORKS = frozenset({"os.fork", "os.forkpty"})
#: prctl(2): orphans of descendants are reparented to the caller, not to init.
PR_SET_CHILD_SUBREAPER = 36


#: The kit's modules in a tree's tests/ folder: the report reads the package's files for itself (which
#: labs are still stubs), and what it reads decides no test's outcome.
KIT_FILES = frozenset({"pi_course_report.py", "pi_course_records.py", "pi_course_i18n.py"})


def _by_the_kit() -> bool:
    """Whether the kit's own report is on the stack (its hooks, not a test, are reading)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) in KIT_FILES:
            return True
        frame = frame.f_back
    return False


def unit_name(code: CodeType) -> str:
    """The unit a code object belongs to: its qualified name up to the first function it is written in."""
    return code.co_qualname.split(".<locals>", 1)[0]


class PackageReads:
    """The package's files opened by any process since the last `take`, from an inotify watch on each of
    its folders (a compiled module in `__pycache__` counts as its source)."""

    def __init__(self, package: Path) -> None:
        self.package = package
        self.notify = inotify_simple.INotify()
        self.folders: dict[int, Path] = {}
        #: The kernel's queue overflowed: some opens were not seen.
        self.lost = False
        self.watch_new()

    def watch_new(self) -> None:
        """Watch the folders made since (a new `__pycache__`: its first reader opened the source)."""
        seen = set(self.folders.values())
        for folder, _dirs, _files in os.walk(self.package):
            if Path(folder) not in seen:
                self.folders[self.notify.add_watch(folder, inotify_simple.flags.OPEN)] = Path(folder)

    def source(self, path: Path) -> str:
        """The package file an opened path stands for, relative to the package's parent."""
        if path.parent.name == "__pycache__":
            path = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
        return path.relative_to(self.package.parent).as_posix()

    def take(self) -> Counter[str]:
        """The files opened since the last call, with how often."""
        found: Counter[str] = Counter()
        for event in self.notify.read(timeout=0):
            if event.mask & inotify_simple.flags.Q_OVERFLOW:
                self.lost = True
            elif event.name and not event.mask & inotify_simple.flags.ISDIR and event.wd in self.folders:
                found[self.source(self.folders[event.wd] / event.name)] += 1
        return found


def _split_off_a_reaper() -> int | None:
    """Fork this run in two: the parent only adopts and reaps the orphans of every process the tests
    start, and exits with the run's status; the child goes on as pytest. The reaper's pid (None when
    the kernel refuses), so that a process left running is found even after its parent has ended.

    Why not make pytest itself the subreaper: orphans would stay its zombies, and a test that waits for
    a killed grandchild to disappear would wait forever.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # not inherited by the child
        return None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded": no thread runs yet
        run = os.fork()
    if run == 0:
        return os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run gets it too, and ends
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == run:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def _living(reaper: int) -> bool:
    """Whether a process other than this run lives under the reaper (started by a test, or its orphan);
    True when that cannot be known."""
    try:
        processes = psutil.Process(reaper).children(recursive=True)
    except psutil.Error:
        return True
    for process in processes:
        try:
            if process.pid != os.getpid() and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:  # ended since it was listed
            continue
        except psutil.Error:
            return True
    return False


class ProofPlugin:
    """Notes the package's code each test enters, in every thread, and the package files read."""

    def __init__(self, config: pytest.Config, out: Path, reaper: int | None) -> None:
        self.config = config
        self.package = ""
        self.out = out
        self.reaper = reaper
        #: The code objects the test now running entered (None between tests).
        self.current: set[CodeType] | None = None
        self.opaque = False
        #: A process was started since the last look for living ones.
        self.spawned = False
        #: Package files read between the last test and this one while a process may have been running.
        self.early: set[str] = set()
        #: Package files the kit's own report opened during the test (not the test's reads).
        self.kit_reads: Counter[str] = Counter()
        self.reads: PackageReads | None = None
        #: Every file read since the oldest process that still lived at the last test's end was started:
        #: what a test that talks to such a process may depend on. None while no such process lives.
        self.carried: set[str] | None = None
        #: Code entered while a fixture of a wider scope was being set up, by fixture definition.
        self.shared: dict[int, set[CodeType]] = {}
        self.names: dict[CodeType, str | None] = {}

    def _trace(self, frame: FrameType, _event: str, _arg: object) -> None:
        # A global trace function that returns None: called once per frame started, never per line.
        current = self.current
        if current is not None:
            current.add(frame.f_code)

    def _relative(self, path: str) -> str | None:
        """A path's name relative to the package's parent, None outside the package."""
        path = os.path.abspath(path)
        if not path.startswith(self.package + os.sep) or "__pycache__" in path:
            return None
        return Path(os.path.relpath(path, os.path.dirname(self.package))).as_posix()

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in SPAWNS or event in FORKS:
            # Between tests too (a thread a test left running): the next test's end looks for it.
            self.spawned = True
            if self.current is not None and (event in FORKS or self.reads is None):
                self.opaque = True
            return
        if self.current is None:
            return
        if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            relative = self._relative(os.fsdecode(args[0]))
            if relative is None:
                return
            if _by_the_kit():
                self.kit_reads[relative] += 1
            elif self.reads is None:
                self.opaque = True

    def _watch_processes(self) -> None:
        """A child that runs a function of this process before its program (`preexec_fn`) runs package
        code the tracer cannot see: that test is opaque."""
        execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        signature = inspect.signature(execute)

        @functools.wraps(execute)
        def watched(*args: Any, **kwargs: Any) -> Any:
            if signature.bind(*args, **kwargs).arguments.get("preexec_fn") is not None:
                self.opaque = self.opaque or self.current is not None
            return execute(*args, **kwargs)

        subprocess.Popen._execute_child = watched  # type: ignore[attr-defined]

    def pytest_sessionstart(self) -> None:
        """Install the tracer for this thread and every thread started later, the audit hook and the
        watch on the package's files."""
        # The tree's conftest registers the ini key; by the session's start it has been read.
        try:
            name = str(self.config.getini(PACKAGE_INI) or "pi_course")
        except ValueError:
            name = "pi_course"
        self.package = str((Path(str(self.config.rootpath)) / name).resolve())
        if self.reaper is not None and WATCHABLE and not sys.pycache_prefix:
            with contextlib.suppress(OSError):  # no inotify instance or watch left: proven less
                self.reads = PackageReads(Path(self.package))
        self._watch_processes()
        sys.settrace(self._trace)
        threading.settrace(self._trace)
        sys.addaudithook(self._audit)  # an audit hook stays for the life of the process

    def _unit(self, code: CodeType) -> str | None:
        if code not in self.names:
            path = os.path.abspath(code.co_filename)
            if path.startswith(self.package + os.sep):
                relative = os.path.relpath(path, os.path.dirname(self.package))
                self.names[code] = f"{Path(relative).as_posix()}::{unit_name(code)}"
            else:
                self.names[code] = None
        return self.names[code]

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[None]:
        """Keep what a fixture wider than one test entered while it was set up."""
        current = self.current
        if fixturedef.scope == "function" or current is None:
            return (yield)
        before = set(current)
        try:
            return (yield)
        finally:
            self.shared[id(fixturedef)] = set(current) - before

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Trace one test's setup, call and teardown; write its line."""
        if self.reads is not None:
            self.reads.watch_new()
            between = set(self.reads.take())  # outside any test: only a process's reads count
            if self.carried is not None:
                self.carried |= between
            self.early = between if self.spawned and self.carried is None else set()
        self.current, self.opaque, self.kit_reads = set(), False, Counter()
        try:
            return (yield)
        finally:
            entered, self.current = self.current, None
            info = getattr(item, "_fixtureinfo", None)
            for definitions in getattr(info, "name2fixturedefs", {}).values():
                for definition in definitions:
                    entered |= self.shared.get(id(definition), set())
            units = sorted({name for code in entered if (name := self._unit(code))})
            files: set[str] = set()
            if self.reads is not None:
                files = set(self.reads.take() - self.kit_reads) | self.early | (self.carried or set())
                self.opaque = self.opaque or self.reads.lost
                # A process that lives on can read later and serve a later test: until none lives,
                # every later test depends on what was read since this window began.
                looked, self.spawned = self.spawned or self.carried is not None, False
                living = looked and self.reaper is not None and _living(self.reaper)
                self.carried = set(files) if living else None
            line = {"nodeid": item.nodeid, "units": units, "files": sorted(files), "opaque": self.opaque}
            with self.out.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")


@functools.cache
def loadable() -> bool:
    """Whether a test run (a fresh interpreter without PYTHONPATH, as `runner.run_tests` starts one) can
    load this plugin by name: the kit is installed. From a bare source checkout it is not, and the
    reference run then proves nothing rather than failing to start."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    try:
        found = subprocess.run(
            [sys.executable, "-c", f"import {__name__}"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


def pytest_configure(config: pytest.Config) -> None:
    """Register the plugin when PROOF_ENV names its file."""
    out = os.environ.get(PROOF_ENV)
    if not out:
        return
    reaper = _split_off_a_reaper() if WATCHABLE else None
    config.pluginmanager.register(ProofPlugin(config, Path(out), reaper), "pi-course-proof")
