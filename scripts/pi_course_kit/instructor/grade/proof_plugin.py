"""A pytest plugin for the batch's trusted reference run: which package functions each test enters.

Loaded with `-p` in the grader's unsandboxed run of the solution, never in a learner's run. For each test
it writes one JSON line to the file PROOF_ENV names: the node id, the units of the package it entered
(a module-level function or a method, by qualified name; code written inside a function counts as that
function), and whether it did something a trace of this process cannot follow (`opaque`): started a
process, or opened a file of the package (as a type checker reading the sources does). `proof.Proof`
reads the lines back.

A module-, class- or session-scoped fixture runs for the first test that needs it, but its value serves
every test that uses it: the units it entered are added to each of those tests.

Why by hand: coverage.py records lines per context, not the functions each test entered across the
threads it started, and it cannot say that a test started a process or read the package's sources.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

#: The file the lines go to; the plugin does nothing without it.
PROOF_ENV = "PI_COURSE_PROOF"
#: The package whose functions are noted (the tree's `pi_course_package` ini value).
PACKAGE_INI = "pi_course_package"
#: Audit events of a test that runs code out of this process's sight.
SPAWNS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.system", "os.spawn"}
)


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


class ProofPlugin:
    """Notes the package's code each test enters, in every thread, and whether it left the process."""

    def __init__(self, config: pytest.Config, out: Path) -> None:
        self.config = config
        self.package = ""
        self.out = out
        #: The code objects the test now running entered (None between tests).
        self.current: set[CodeType] | None = None
        self.opaque = False
        #: Code entered while a fixture of a wider scope was being set up, by fixture definition.
        self.shared: dict[int, set[CodeType]] = {}
        self.names: dict[CodeType, str | None] = {}

    def _trace(self, frame: FrameType, _event: str, _arg: object) -> None:
        # A global trace function that returns None: called once per frame started, never per line.
        current = self.current
        if current is not None:
            current.add(frame.f_code)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.current is None:
            return
        if event in SPAWNS:
            self.opaque = True
        elif event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(self.package + os.sep) and "__pycache__" not in path and not _by_the_kit():
                self.opaque = True

    def pytest_sessionstart(self) -> None:
        """Install the tracer for this thread and every thread started later, and the audit hook."""
        # The tree's conftest registers the ini key; by the session's start it has been read.
        try:
            name = str(self.config.getini(PACKAGE_INI) or "pi_course")
        except ValueError:
            name = "pi_course"
        self.package = str((Path(str(self.config.rootpath)) / name).resolve())
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
        self.current, self.opaque = set(), False
        try:
            return (yield)
        finally:
            entered, self.current = self.current, None
            info = getattr(item, "_fixtureinfo", None)
            for definitions in getattr(info, "name2fixturedefs", {}).values():
                for definition in definitions:
                    entered |= self.shared.get(id(definition), set())
            units = sorted({name for code in entered if (name := self._unit(code))})
            line = {"nodeid": item.nodeid, "units": units, "opaque": self.opaque}
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
    config.pluginmanager.register(ProofPlugin(config, Path(out)), "pi-course-proof")
