"""Per-lab report for the focused tests: passed/total, a status per lab, and the next step.

Needs pytest and the standard library only, so it works in any folder that has the tests.
Set PI_COURSE_REPORT_JSON=path to also get one JSON record per line (the kit's tools read it).
"""

from __future__ import annotations

import contextlib
import difflib
import dis
import functools
import gc
import hashlib
import inspect
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NoReturn

import pi_course_i18n
import pytest
from pi_course_i18n import _
from pi_course_records import (
    LAB_MARKER,
    CollectError,
    NextStep,
    TestRecord,
    collector_paused,
    defined_at,
    edit_target,
    first_paragraph,
    function_at,
    function_entry,
    function_line,
    function_span,
    lab_entry,
    lab_of_line,
    module_data,
    next_step,
    parse_marker_line,
    read_progress,
    record_line,
    render,
    stubbed_labs,
    summarise,
    summary_line,
    test_record,
    write_progress,
)

#: The marker naming the learner's function a focused test checks: `@pytest.mark.edits("Tool.parse")`.
EDITS_MARKER = "edits"
#: The learner's package; staging writes course.toml's `package` into pytest.ini, read at configure
#: (a tree without that key: the folder beside tests/ that holds the package's `lab.py`).
PACKAGE = ""
#: Grading passes a larger import bound (`-o pi_course_import_timeout=N`): a busy machine must not
#: turn a slow import into a failed one. Practice folders keep the per-test timeout.
IMPORT_TIMEOUT_INI = "pi_course_import_timeout"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the pytest.ini key naming the learner's package (conftest.py re-exports this hook)."""
    parser.addini("pi_course_package", "the learner's package, from course.toml", default="")
    parser.addini("pi_course_language", "the course's language, from course.toml", default="")
    parser.addini(
        "pi_course_kind", "the checkpoint's kind, labs or observation, from course.toml", default="labs"
    )
    parser.addini(
        IMPORT_TIMEOUT_INI,
        "seconds importing the tests (and the learner's code) may take; default: the per-test timeout",
        default="",
    )


JSON_ENV = "PI_COURSE_REPORT_JSON"
#: Set (to anything) by the grader: a graded run shows no `edit:` line, so a failure is never run twice.
GRADING_ENV = "PI_COURSE_GRADING"

#: How often a running test is looked at, seconds; how much CPU one call of the learner's code may
#: use before it is taken for an endless loop; and, once a loop was found, how much a call of the
#: same function may use (see ReportPlugin._alarm).
REPEAT_TIMEOUT = 0.1
LOOP_CPU = 2.0
REPEAT_CPU = 0.3
#: How long an event loop that nothing can wake (see `_waits_forever`) is watched before the test
#: fails, seconds: a certainty, so a short look, where the time limit would make the learner wait.
STUCK_WAIT = 0.5
#: A failed test that spent this long waiting (its wall time less its CPU time and its time queued for
#: a CPU, seconds) is not run again to be traced: the second run would wait as long, and a red that
#: waits out a time limit (a shell left running, a cancellation lost) would come back twice as late.
#: Its `edit:` line is then taken from the traceback and the test's `edits` marker. Shorter waits are
#: still traced: a test that gives concurrent code a second or two to start (a gate) and fails is
#: placed by what ran.
RETRACE_WAIT = 4.0


class LearnerTimeout(BaseException):
    """A test ran past its time limit. A BaseException, so hypothesis does not catch it and replay the
    loop."""

    #: Stopped waiting on an event loop that nothing can wake, not spinning: the lab's other tests are
    #: not skipped as if they would run into a loop, since each of them is stopped as soon.
    waits_forever = False


class RefusedRun(KeyboardInterrupt):
    """Ends a run before it starts, its one line already written (pytest adds nothing to an interrupt
    then)."""


@contextmanager
def _refusing_os_exit() -> Iterator[None]:
    """Make os._exit raise instead of killing pytest before the report is written."""
    real_exit = os._exit

    def refuse_exit(status: int) -> NoReturn:
        raise RuntimeError(f"learner code called os._exit({status}); a tool must return, not end the process")

    os._exit = refuse_exit
    try:
        yield
    finally:
        os._exit = real_exit


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _run_queue_seconds() -> float:
    """How long this process's main thread has been ready to run and waiting for a CPU, in seconds.

    Linux's /proc/self/schedstat (its second field, in nanoseconds); 0.0 where there is none, and then
    a test on a loaded machine counts its time in the run queue as waiting.
    """
    try:
        with open("/proc/self/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _learner_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame of the stack that runs the learner's package, if any."""
    while frame is not None:
        if PACKAGE in Path(frame.f_code.co_filename).parts:
            return frame
        frame = frame.f_back
    return None


def _standing_in(frame: FrameType | None, code: set[tuple[str, str]]) -> FrameType | None:
    """The innermost frame of the stack that runs one of the (file, function) pairs in `code`, if any."""
    while frame is not None and code:
        if (frame.f_code.co_filename, frame.f_code.co_name) in code:
            return frame
        frame = frame.f_back
    return None


def _threads_of_this_process() -> int:
    """Every thread of the process, those C code started included (Linux), else Python's own."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _waits_forever(frame: FrameType | None) -> bool:
    """Is the interrupted main thread an asyncio loop that nothing left can ever wake?

    That is: the loop sleeps in its selector with no time limit (no callback ready, no timer), it
    watches no file but its own wake-up pipe, it handles no signal, and the process has no other
    thread that could hand it a callback. Then every task waits for something no one can deliver,
    and the test would only sit out its time limit. Read from the loop's own fields, since asyncio
    has no public way to ask this; any field not found means "not proven", never "stuck".
    """
    if (
        frame is None
        or frame.f_code.co_name != "select"
        or not frame.f_code.co_filename.endswith("selectors.py")
    ):
        return False
    caller = frame.f_back
    if (
        caller is None
        or caller.f_code.co_name != "_run_once"
        or caller.f_locals.get("timeout", 0) is not None
    ):
        return False
    loop: Any = caller.f_locals.get("self")
    try:
        watched = [key.fd for key in loop._selector.get_map().values()]
        waker = loop._ssock.fileno()
        handlers = loop._signal_handlers
    except (AttributeError, OSError, ValueError):
        return False
    return watched == [waker] and not handlers and _threads_of_this_process() == 1


def _marker_names(expression: str) -> set[str]:
    """The marker names of an `-m` expression made of names joined by `or`; empty for anything else."""
    words = expression.split()
    if not words or len(words) % 2 == 0 or any(word != "or" for word in words[1::2]):
        return set()
    names = set(words[::2])
    return names if all(name.isidentifier() and name not in {"and", "not"} for name in names) else set()


#: Code that builds or rewrites syntax trees. A timeout raised while it runs (an import rewritten by
#: pytest's assertion rewriting, ast.parse) leaves CPython's AST constructor inconsistent and kills
#: the run with an INTERNALERROR (`SystemError: AST constructor recursion depth mismatch`); there the
#: alarm waits a moment and fires again.
_AST_WORK = ("ast.py", "_pytest/assertion/rewrite.py", "_pytest/_code/source.py")
#: How long the alarm waits when it lands in AST work, and for how long at most it keeps waiting, seconds.
AST_RETRY = 0.05
AST_GRACE = 2.0


def in_ast_work(frame: FrameType | None) -> bool:
    """Is the interrupted code building syntax trees (see `_AST_WORK`) on its own account?

    Only the frames inside the learner's code count: pytest imports a test module, and with it the
    learner's package, from inside its assertion rewriter, so a loop at import time runs with
    rewrite.py further out on the stack. That loop is the learner's, and must be stopped.
    """
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if name.endswith(_AST_WORK):
            return True
        if PACKAGE and PACKAGE in Path(name).parts:
            return False
        frame = frame.f_back
    return False


def _guess_package(root: Path) -> str:
    """The learner's package of a tree whose pytest.ini does not name it: the folder holding `lab.py`."""
    found = sorted(path.parent.name for path in root.glob("*/lab.py") if path.parent.name != "tests")
    return found[0] if found else ""


def frame_location(frame: FrameType | None, root: Path) -> tuple[str, Path, int] | None:
    """(`path:line`, file, line) of the innermost frame of a stack that runs the learner's package."""
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if PACKAGE in path.parts:
            try:
                shown = path.resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                shown = str(path)
            return f"{shown}:{frame.f_lineno}", path, frame.f_lineno
        frame = frame.f_back
    return None


class RanFunctions:
    """Which functions of the learner's package a test ran: the code objects entered while it runs.

    Only calls are watched, never lines: on 3.12+ `sys.monitoring` reports each code object's first
    start once (PY_START, then DISABLE until the next test restarts the events); on 3.11 a global
    `sys.settrace` function notes the frame's code and returns None, so no frame is traced line by
    line. Files are told apart after the test, from the few code objects noted.
    """

    #: sys.monitoring's tool id for this report (ids 0-5 are free for tools; Hypothesis takes 4).
    TOOL_ID = 3

    def __init__(self) -> None:
        self.codes: set[CodeType] = set()
        #: (caller, callee) code pairs: who called what.
        self.calls: set[tuple[CodeType, CodeType]] = set()
        self.active = False
        self._monitoring = hasattr(sys, "monitoring")

    def start(self) -> None:
        """Begin (or, after the fixtures' setup, go on) noting the code entered."""
        if self._monitoring:
            monitoring: Any = vars(sys)["monitoring"]  # 3.12+; the kit is typed for 3.11
            if monitoring.get_tool(self.TOOL_ID) is None:
                monitoring.use_tool_id(self.TOOL_ID, "pi-course-report")
            elif monitoring.get_tool(self.TOOL_ID) != "pi-course-report":
                return  # another tool holds the id: no trace, the report falls back to the traceback
            add, link, disable = self.codes.add, self.calls.add, monitoring.DISABLE

            def started(code: CodeType, _offset: int) -> Any:
                add(code)
                frame = sys._getframe(1)  # the frame that starts, when it is the callback's caller
                if frame.f_code is code and frame.f_back is not None:
                    link((frame.f_back.f_code, code))
                return disable

            monitoring.register_callback(self.TOOL_ID, monitoring.events.PY_START, started)
            monitoring.restart_events()
            monitoring.set_events(self.TOOL_ID, monitoring.events.PY_START)
        else:
            if sys.gettrace() is not None:
                return  # a debugger or coverage runs: leave its tracer alone
            note, link = self.codes.add, self.calls.add

            def trace(frame: FrameType, _event: str, _arg: object) -> None:
                code = frame.f_code
                note(code)
                caller = frame.f_back
                if caller is not None:
                    link((caller.f_code, code))

            sys.settrace(trace)
            threading.settrace(trace)
        self.active = True

    def stop(self) -> None:
        """Stop noting (the codes noted so far are kept)."""
        if not self.active:
            return
        self.active = False
        if self._monitoring:
            monitoring: Any = vars(sys)["monitoring"]  # 3.12+; the kit is typed for 3.11
            monitoring.set_events(self.TOOL_ID, 0)
        else:
            sys.settrace(None)
            threading.settrace(None)

    def learner_functions(self, root: Path) -> dict[str, Ran]:
        """The learner's functions that ran, by qualified name, with who called them.

        A lambda, comprehension or nested function counts as the function it is written in.
        """
        tests = (root / "tests").resolve()
        names: dict[CodeType, str | None] = {}

        def name_of(code: CodeType) -> str | None:
            if code not in names:
                names[code] = learner_name(code)
            return names[code]

        found: dict[str, Ran] = {}
        for code in list(self.codes):
            name = name_of(code)
            if name is None or name in found:
                continue
            path = Path(code.co_filename)
            line = function_line(path, name) or code.co_firstlineno
            try:
                shown = path.resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                shown = str(path)
            found[name] = Ran(f"{shown}:{line}", path, line)
        for code in list(self.codes):
            if (ran := found.get(name_of(code) or "")) is not None:
                loaded, stored = reads_and_writes(code)
                ran.reads |= loaded
                ran.writes |= stored
        # Module-level data a function that ran reads (`_TRACE`): a wrong value there shows only later.
        reads: dict[str, set[str]] = {}
        for code in list(self.codes):
            if (name := name_of(code)) is not None:
                for read in code.co_names:
                    reads.setdefault(read, set()).add(name)
        files = {ran.path: ran.where.rpartition(":")[0] for ran in found.values()}
        for path, shown in files.items():
            for data, line in module_data(path):
                if data in reads and data not in found:
                    found[data] = Ran(f"{shown}:{line}", path, line, callers=set(reads[data]), writes={data})
        for caller, callee in list(self.calls):
            ran = found.get(name_of(callee) or "")
            if ran is None:
                continue
            by = name_of(caller)
            if by is not None and by != name_of(callee):
                ran.callers.add(by)
            elif by is None and tests in Path(caller.co_filename).resolve().parents:
                ran.from_test = True
        for code in list(self.codes):
            ran = found.get(name_of(code) or "")
            if ran is not None and code.co_flags & _RESUMABLE and not ran.callers:
                ran.from_test = (
                    True  # driven through the event loop or a for loop, by nothing of the learner's
                )
        return found


def learner_name(code: CodeType) -> str | None:
    """The qualified name (`Agent._emit`) of the learner's function a code object belongs to, or None."""
    path = Path(code.co_filename)
    if not PACKAGE or PACKAGE not in path.parts or code.co_name == "<module>":
        return None
    parts = [part for part in getattr(code, "co_qualname", code.co_name).split(".") if part != "<locals>"]
    while parts and parts[-1].startswith("<"):
        parts.pop()
    return ".".join(parts) or None


@dataclass
class Ran:
    """A function of the learner's that a test ran: its `def` as `path:line`, and who called it."""

    where: str
    path: Path
    line: int
    #: Called straight from the test (or a fixture): the test checks what it returns or does.
    from_test: bool = False
    #: The learner's functions that called it.
    callers: set[str] = field(default_factory=set)
    #: The lab whose `# ## Lab` section holds its `def`.
    owner: str | None = None
    #: The attribute and global names it reads, and those it writes (see `reads_and_writes`).
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)


#: Where a practice folder keeps the code each test last passed with (see PassedCode).
PASSED_DIR = Path(".pi-course") / "passed"


class PassedCode:
    """Which code each test last passed with, in a practice folder (never in grading).

    A test that passed and now fails points first at what changed since: a mistake often runs long before
    it shows, and a learner's regression is in the functions edited since the test was green. Each test
    that passes is mapped to the hashes of the package's files at that run; each file's text is kept once
    per content, so a green run writes only the files that are new since the last one. Hand-written
    because no kept library maps a test to the code it passed with.
    """

    def __init__(self, root: Path, package: str) -> None:
        self.root = root
        self.folder = root / PASSED_DIR
        self.package = package
        #: The package's files as this run found them: relative path -> sha1 of their bytes.
        self.files = self._hashes()
        self.snapshots: dict[str, dict[str, str]] = {}
        self.tests: dict[str, str] = {}
        try:
            index = json.loads((self.folder / "index.json").read_text(encoding="utf-8"))
            self.snapshots = {str(k): dict(v) for k, v in index["snapshots"].items()}
            self.tests = {str(k): str(v) for k, v in index["tests"].items() if v in self.snapshots}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # none yet, or unreadable: nothing is known to have passed
        self._lines: dict[tuple[str, Path], set[int] | None] = {}

    def _hashes(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for path in sorted((self.root / self.package).rglob("*.py")):
            try:
                found[path.relative_to(self.root).as_posix()] = hashlib.sha1(path.read_bytes()).hexdigest()
            except OSError:
                continue
        return found

    def save(self, passed: list[str]) -> None:
        """Remember that the tests `passed` passed with this run's files (unless they changed meanwhile)."""
        if not passed or self._hashes() != self.files:
            return
        blobs = self.folder / "files"
        blobs.mkdir(parents=True, exist_ok=True)
        for relative, digest in self.files.items():
            if not (blobs / digest).exists():
                _write_atomically(blobs / digest, (self.root / relative).read_bytes())
        key = hashlib.sha1(json.dumps(self.files, sort_keys=True).encode()).hexdigest()
        self.snapshots[key] = self.files
        self.tests.update(dict.fromkeys(passed, key))
        kept = set(self.tests.values())
        self.snapshots = {k: v for k, v in self.snapshots.items() if k in kept}
        used = {digest for files in self.snapshots.values() for digest in files.values()}
        for blob in blobs.iterdir():
            if blob.name not in used:
                blob.unlink(missing_ok=True)
        index = {"snapshots": self.snapshots, "tests": self.tests}
        _write_atomically(self.folder / "index.json", json.dumps(index).encode())

    def changed(self, nodeid: str, name: str, ran: Ran) -> bool:
        """Whether the function `name` (which ran as `ran`) changed since the test `nodeid` last passed
        (False if it never did)."""
        lines = self._changed_lines(nodeid, ran.path)
        if not lines:
            return False
        span = function_span(ran.path, name)
        return span is not None and any(span[0] <= line <= span[1] for line in lines)

    def _changed_lines(self, nodeid: str, path: Path) -> set[int] | None:
        """The lines of `path`, as it is now, that differ from the text the test last passed with."""
        if (nodeid, path) not in self._lines:
            self._lines[nodeid, path] = self._diff(nodeid, path)
        return self._lines[nodeid, path]

    def _diff(self, nodeid: str, path: Path) -> set[int] | None:
        before = self.snapshots.get(self.tests.get(nodeid, ""))
        try:
            relative = path.resolve().relative_to(self.root.resolve()).as_posix()
            now = path.read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError):
            return None
        if before is None or before.get(relative) == self.files.get(relative):
            return None
        if relative not in before:
            return set(range(1, len(now) + 1))  # a new file: all of it changed
        try:
            old = (self.folder / "files" / before[relative]).read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError):
            return None
        lines: set[int] = set()
        for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, old, now, autojunk=False).get_opcodes():
            if tag != "equal":
                # A deletion has no lines of its own now: the lines around the gap changed.
                lines.update(range(j1 + 1, j2 + 1) if j2 > j1 else (j1, j1 + 1))
        return lines


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


#: How many functions an `edit:` line names at most when the test ran several that may hold the mistake.
#: Five, not three: of the 370 mistakes verify plants, 8 more sit fourth or fifth (a helper that runs
#: early and shows late), and a ranked list of five is still read from the top.
MAX_CANDIDATES = 5
#: A checker's finding as mypy prints it: `events.py:108: error: ...` (a path of the package, or its tail).
CHECKER_LINE = re.compile(r"(?m)(?:^|[\s'\"\[(])(?P<file>[\w./\\-]+\.py):(?P<line>\d+):\s")


def package_file(root: Path, package: str, named: str) -> Path | None:
    """The file of the learner's package a checker's path names: the same relative path, else the one
    file whose path ends with it (a checker run on a copy names `events.py` or `copy/pkg/events.py`)."""
    tail = Path(named.replace("\\", "/")).parts
    if not package or not tail:
        return None
    files = sorted((root / package).rglob("*.py"))
    for size in range(len(tail), 0, -1):
        found = [path for path in files if path.relative_to(root).parts[-size:] == tail[-size:]]
        if len(found) == 1:
            return found[0]
        if found:
            return None  # ambiguous: several files end so
    return None


#: Code whose frames are resumed by whoever drives them (an event loop, a for loop), not by their caller.
_RESUMABLE = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR

#: Methods that change the object they are called on: `self._queue.append(x)` writes `_queue`.
_MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard", "setdefault"}
)


@functools.lru_cache(maxsize=4096)
def reads_and_writes(code: CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The attribute and global names a code object reads, and those it writes (stores, or changes
    in place with a mutating method)."""
    reads: set[str] = set()
    writes: set[str] = set()
    previous = ""
    for instruction in dis.get_instructions(code):
        name = str(instruction.argval)
        if instruction.opname in ("STORE_ATTR", "DELETE_ATTR", "STORE_GLOBAL"):
            writes.add(name)
        elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL"):
            if name in _MUTATORS and previous:
                writes.add(previous)
            reads.add(name)
            previous = name
            continue
        previous = ""
    return frozenset(reads), frozenset(writes)


def rank_candidates(
    ran: dict[str, Ran], framed: str | None, targets: tuple[str, ...], lab: str | None, order: list[str]
) -> list[str]:
    """The functions a failure may come from, likeliest first.

    First the traceback's frame, then the functions the test names (`edits`, or its lab's one
    function). Then the others by how closely they feed the ones named: writing what those read (an
    attribute, a global, module data) and calling them count two each, being called by them and
    being called by the test itself (or driven by nothing of the learner's) one each, calling another
    function of the test's lab one, and belonging to the test's own lab one; a constructor counts only
    what it writes and its lab (every test builds its objects). Ties: a constructor after the rest,
    the latest lab first, then source order.
    """
    wanted = {name for target in targets for name in (target, f"{target}.__init__")}
    named = {name for name in (framed, *wanted) if name is not None and name in ran}
    read = {field for name in named for field in ran[name].reads}

    def score(name: str, info: Ran) -> int:
        if name.endswith(".__init__"):  # every test builds its objects: that says little
            return bool(info.writes & read) + (info.owner == lab)
        points = 2 * bool(info.writes & read) + 2 * any(name in ran[other].callers for other in named)
        points += bool(info.callers & named) + info.from_test
        # It drives other functions of the test's lab (the one that calls the lab's helpers).
        points += any(name in other.callers for other in ran.values() if other.owner == lab)
        return points + (info.owner == lab)

    def key(name: str) -> tuple[int, int, bool, int, str, int]:
        info = ran[name]
        group = 0 if name == framed else 1 if name in wanted else 2
        latest = -order.index(info.owner) if info.owner in order else 0
        constructor = name.endswith(".__init__")
        return group, -score(name, info), constructor, latest, info.where.rpartition(":")[0], info.line

    return sorted(ran, key=key)


#: pytest's assertion explanation lines that say how to see more, not what differs.
_NOISE = re.compile(
    r"^(Use -v|Full diff|Omitting \d+ identical|Matching attributes|Left contains|Right contains)"
)


#: pytest's own words for a difference (the shapes of _pytest/assertion/util.py's explanations), each
#: an English msgid with its fields: pytest has no translations, and a Chinese report must not switch
#: to English in the middle of a line. The values themselves stay as pytest wrote them.
_PYTEST_PHRASES = tuple(
    (re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>.*)", re.escape(msgid)) + "$"), msgid)
    for msgid in (
        "At index {index} diff: {values}",
        "Left contains one more item: {item}",
        "Right contains one more item: {item}",
        "Left contains {count} more items, first extra item: {item}",
        "Right contains {count} more items, first extra item: {item}",
        "Differing items: {items}",
        "Differing attributes: {names}",
        "Extra items in the left set: {items}",
        "Extra items in the right set: {items}",
        "Left contains {count} more items: {items}",
        "Right contains {count} more items: {items}",
    )
)


#: pytest's and Hypothesis's words inside a failure's text (pytest.raises, truncation, a failing
#: example): translated where they stand, after an `E   ` prefix and an exception's name.
_FAILURE_PHRASES = tuple(
    (re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>.*)", re.escape(msgid)) + "$"), msgid)
    for msgid in (
        "DID NOT RAISE {exception}",
        "Regex pattern did not match.",
        "Regex pattern did not match{detail}.",
        "Expected regex: {regex}",
        "Actual message: {message}",
        "Use -v to get more diff",
        "...Full output truncated, use '-vv' to show",
        "Failing test case: {case}",
        "Falsifying example: {case}",
        "Draw {number}: {value}",
        "Timeout (>{limit}s) from pytest-timeout.",
    )
)
_TRACEBACK_PLACE = re.compile(r"^(?P<where>\S+:\d+): in (?P<function>\S+)$")
_LEADING = re.compile(r"^(?P<lead>(?:E\s+|>\s+|\s*)(?:[A-Za-z_][\w.]*: )?)(?P<rest>.*)$")


def _translated(pattern: re.Pattern[str], msgid: str, text: str) -> str | None:
    match = pattern.match(text)
    if match is None:
        return None
    fields = match.groupdict()
    if "index" in fields and fields["index"].isdigit() and not pi_course_i18n.speaks_english():
        # pytest counts from 0; the Chinese ordinal of the "item N differs" line counts from 1.
        fields["index"] = str(int(fields["index"]) + 1)
    return _(msgid).format(**fields)


def in_run_language(line: str) -> str:
    """One of pytest's explanation lines in the run's language (unchanged when the run speaks English)."""
    if pi_course_i18n.speaks_english():
        return line
    for pattern, msgid in _PYTEST_PHRASES:
        if (found := _translated(pattern, msgid, line)) is not None:
            return found
    return failure_line(line)


def failure_line(line: str) -> str:
    """A line of a failure's text with pytest's and Hypothesis's own words in the run's language."""
    if pi_course_i18n.speaks_english():
        return line
    if place := _TRACEBACK_PLACE.match(line):  # `tests/test_x.py:12: in test_y`, --tb=short's frame line
        return _("{where}: in {function}").format(where=place["where"], function=place["function"])
    parts = _LEADING.match(line)
    if parts is None:
        return line
    lead, rest = parts["lead"], parts["rest"]
    for pattern, msgid in (*_FAILURE_PHRASES, *_PYTEST_PHRASES):
        if (found := _translated(pattern, msgid, rest.strip())) is not None:
            return lead + rest[: len(rest) - len(rest.lstrip())] + found
    return line


def failure_text(text: str) -> str:
    """A whole failure's text (pytest's longrepr) line by line in the run's language."""
    return "\n".join(failure_line(line) for line in text.split("\n"))


#: pytest's section titles and closing counts, as its terminal writes them (between `=` rules).
_SECTION_TITLES = {
    "test session starts": "test session starts",
    "FAILURES": "FAILURES",
    "ERRORS": "ERRORS",
    "short test summary info": "short test summary info",
    "warnings summary": "warnings summary",
    "PASSES": "PASSES",
    "collection failures": "collection failures",
    "KeyboardInterrupt": "KeyboardInterrupt",
}
#: The line pytest adds under an interrupted run.
FULL_TRACE_HINT = "(to show a full traceback on KeyboardInterrupt use --full-trace)"


def _title_patterns(*msgids: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    """Each msgid as a pattern that matches pytest's English line, its `{fields}` as (shortest) groups."""
    return tuple(
        (re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>.*?)", re.escape(msgid)) + "$"), msgid)
        for msgid in msgids
    )


_SECTION_PATTERNS = _title_patterns(
    "stopping after {count} failures",
    "Interrupted: {count} error during collection",
    "Interrupted: {count} errors during collection",
    "Captured {stream} {phase}",
    "Captured log {phase}",
    "{count} failed",
    "{count} passed",
    "{count} skipped",
    "{count} deselected",
    "{count} xfailed",
    "{count} xpassed",
    "{count} error",
    "{count} errors",
    "{count} warning",
    "{count} warnings",
    "no tests ran",
)
#: Titles of sections a learner's own options add: `--durations=N`, `--junitxml=FILE`.
_OPTION_TITLES = _title_patterns(
    "slowest {count} durations", "slowest durations", "generated xml file: {path}"
)
#: `--durations`' lines: `0.52s call     tests/test_x.py::test_y`, and the note on the ones it left out.
_DURATION_LINE = re.compile(
    r"^(?P<seconds>\d[\d.]*s) (?P<when>setup|call|teardown)(?P<pad> +)(?P<nodeid>\S.*)$"
)
_DURATIONS_HIDDEN = re.compile(
    r"^\((?P<count>\d+) durations < (?P<threshold>[\d.]+s) hidden\.  Use -vv to show these durations\.\)$"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COUNT_WORDS = re.compile(
    r"(?P<phrase>\d+ (?:failed|passed|skipped|deselected|xfailed|xpassed|errors?|warnings?)|no tests ran)"
)
_DURATION = re.compile(r" in (?P<seconds>\d[\d.]*s(?: \([\d:]+\))?)")
_SHORT_SUMMARY = re.compile(r"^(?P<word>FAILED|ERROR|PASSED|SKIPPED|XFAIL|XPASS) (?P<rest>.*)$")
_COLLECTED = re.compile(r"^collected (?P<count>\d+) items?(?P<rest>.*)$")


def terminal_title(title: str) -> str:
    """A title pytest's terminal writes between rules, in the run's language."""
    if pi_course_i18n.speaks_english():
        return title
    plain = _ANSI.sub("", title).strip()
    if plain in _SECTION_TITLES:
        return _(_SECTION_TITLES[plain])
    for pattern, msgid in (*_SECTION_PATTERNS[:5], *_OPTION_TITLES):
        if (found := _translated(pattern, msgid, plain)) is not None:
            return found
    if _COUNT_WORDS.search(title):  # the closing counts: `4 failed, 5 passed in 0.22s`, maybe coloured

        def phrase(match: re.Match[str]) -> str:
            for pattern, msgid in _SECTION_PATTERNS[5:]:
                if (found := _translated(pattern, msgid, match["phrase"])) is not None:
                    return found
            return match["phrase"]

        title = _COUNT_WORDS.sub(phrase, title).replace(", ", _(", "))
        return _DURATION.sub(lambda m: _(" in {seconds}").format(seconds=m["seconds"]), title)
    return title


def terminal_line(line: str) -> str:
    """A plain line of pytest's terminal (the short summary, the count of collected tests) in the run's
    language."""
    if pi_course_i18n.speaks_english():
        return line
    plain = _ANSI.sub("", line)
    if match := _SHORT_SUMMARY.match(plain):
        return _(match["word"]) + " " + failure_line(match["rest"])
    if match := _COLLECTED.match(plain):
        rest = re.sub(
            r"(\d+) (deselected|selected)", lambda m: _("{count} " + m[2]).format(count=m[1]), match["rest"]
        )
        return _("collected {count} items").format(count=match["count"]) + rest
    if match := _DURATION_LINE.match(plain):
        when = {"setup": _("setup"), "call": _("call"), "teardown": _("teardown")}[match["when"]]
        return f"{match['seconds']} {when}{match['pad']}{match['nodeid']}"
    if match := _DURATIONS_HIDDEN.match(plain):
        return _("({count} durations < {threshold} hidden; -vv shows them)").format(
            count=match["count"], threshold=match["threshold"]
        )
    return line


def speak_the_run_language(terminal: Any) -> None:
    """Make pytest's terminal write its own lines in the run's language (nothing changes in English).

    pytest has no translations: its section titles, counts and short summary are rewritten as they are
    written, and the header (platform, plugins, rootdir: pytest's facts, in English) is left out.
    """
    if pi_course_i18n.speaks_english() or terminal is None or getattr(terminal, "_pi_translated", False):
        return
    terminal._pi_translated = True
    terminal.config.option.no_header = True
    writer = terminal._tw
    sep, write_line, rewrite, line_of = writer.sep, terminal.write_line, terminal.rewrite, writer.line

    def translated_writer_line(text: str = "", **markup: bool) -> None:
        if text == FULL_TRACE_HINT:
            text = _(FULL_TRACE_HINT)
        elif text.endswith(": KeyboardInterrupt"):  # where the Ctrl-C landed
            text = text.removesuffix("KeyboardInterrupt") + _("KeyboardInterrupt")
        line_of(text, **markup)

    def translated_sep(sepchar: str, title: str | None = None, *args: Any, **kwargs: Any) -> None:
        sep(sepchar, terminal_title(title) if title else title, *args, **kwargs)

    def translated_line(line: str | bytes, **markup: bool) -> None:
        write_line(terminal_line(line) if isinstance(line, str) else line, **markup)

    def translated_rewrite(line: str, **markup: bool) -> None:
        rewrite(terminal_line(line), **markup)

    writer.sep = translated_sep
    writer.line = translated_writer_line
    terminal.write_line = translated_line
    terminal.rewrite = translated_rewrite


def readable_diff(text: str, limit: int = 3, width: int = 160) -> list[str]:
    """The lines of pytest's assertion explanation that name what differs (a key, an attribute, a value)."""
    lines = [line.strip() for line in text.splitlines()]
    if not lines or not lines[0]:
        return []
    body = lines[1:]
    drill = [i for i, line in enumerate(body) if line.startswith("Drill down")]
    if drill:
        body = body[drill[-1] + 1 :]
    picked: list[str] = []
    header = ""
    for line in body:
        if header:
            # A header ("Differing items:", "Left contains 1 more item:") reads best joined to its first line.
            if not header.startswith("Matching attributes"):
                picked.append(f"{header} {line}")
            header = ""
        elif not line or (
            _NOISE.match(line) and not line.startswith(("Left contains", "Right contains", "Matching"))
        ):
            continue
        elif line.endswith(":") and not line.startswith("+"):
            header = line
        elif " object at 0x" not in line:  # a default repr names a memory address, not the mistake
            picked.append(line)
    picked = [in_run_language(line) for line in picked]
    picked = [line if len(line) <= width else line[: width - 1] + "…" for line in picked]
    first = lines[0] if lines[0].startswith("assert") else ""
    if first and (not picked or all(line.startswith("+") for line in picked)):
        picked.insert(0, first)
    return picked[:limit]


def learner_location(excinfo: pytest.ExceptionInfo[BaseException], root: Path) -> str | None:
    """The deepest traceback line inside the learner's package, as `path:line`."""
    for entry in reversed(excinfo.traceback):
        path = Path(str(entry.path))
        if PACKAGE in path.parts:
            try:
                shown = path.relative_to(root)
            except ValueError:
                shown = path
            return f"{shown}:{entry.lineno + 1}"
    return None


def stub_lab(error: BaseException) -> str | None:
    """The lab of a `LabNotImplemented` (matched by name: this plugin never imports the learner's package),
    else None."""
    lab = getattr(error, "lab", None)
    is_stub = any(cls.__name__ == "LabNotImplemented" for cls in type(error).__mro__)
    return lab if is_stub and isinstance(lab, str) else None


class StubFailures:
    """Reports a test stopped by an unfinished lab's stub in one line instead of a full traceback.

    On a fresh starter dozens of tests stop on the same few `raise LabNotImplemented(...)` lines;
    one line each (what is missing, and where) reads better and skips seconds of traceback rendering.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> pytest.TestReport | None:
        """Build the compact report for a stub failure; leave every other outcome to pytest."""
        when = call.when
        if when == "collect" or call.excinfo is None or stub_lab(call.excinfo.value) is None:
            return None
        where = learner_location(call.excinfo, self.root)
        text = f"{_first_line(str(call.excinfo.value))}" + (f"  ({where})" if where else "")
        sections = [(f"Captured {key} {when}", content) for when, key, content in item._report_sections]
        return pytest.TestReport(
            item.nodeid,
            item.location,
            dict.fromkeys(item.keywords, 1),
            "failed",
            text,
            when,
            sections,
            call.duration,
            call.start,
            call.stop,
            item.user_properties,
        )


class ReportPlugin:
    """Collects one TestRecord per focused test and prints the per-lab table at the end."""

    def __init__(self, config: pytest.Config) -> None:
        global PACKAGE  # one run, one learner package: the module's helpers read it too
        PACKAGE = str(config.getini("pi_course_package") or "") or _guess_package(Path(str(config.rootpath)))
        language = str(config.getini("pi_course_language"))
        if language:
            pi_course_i18n.set_course_language(language)
        self.config = config
        self.root = Path(str(config.rootpath))
        self.labs = [lab for line in config.getini("markers") if (lab := parse_marker_line(str(line)))]
        self.records: list[TestRecord] = []
        self.collect_errors: list[CollectError] = []
        #: lab -> `path:line` where one of its tests was stopped in an endless loop.
        self.loops: dict[str, str] = {}
        #: (file, function) of the learner code those loops stood in.
        self.stuck_code: set[tuple[str, str]] = set()
        self.collected: dict[str, int] = {}
        #: The labs with a stub still in the learner's package, read at the first test that asks.
        self.stubbed: set[str] | None = None
        #: The learner's functions the current test ran (its setup and its body).
        self.ran = RanFunctions()
        #: True while a failed test runs again, traced (`_trace_rerun`): nothing of it is recorded.
        self.rerunning = False
        #: Learner code runs a second time, traced, only where an `edit:` line is shown (never in grading).
        self.trace_failures = not os.environ.get(GRADING_ENV)
        #: A practice folder's memory of what each test last passed with, and the tests passing now.
        self.passed_code: PassedCode | None = None
        if self.trace_failures and PACKAGE and (self.root / PASSED_DIR.parent / "meta.json").is_file():
            self.passed_code = PassedCode(self.root, PACKAGE)
        self.passed_now: list[str] = []
        self.json_path = os.environ.get(JSON_ENV)
        if self.json_path:
            Path(self.json_path).write_text("", encoding="utf-8")
        # pytest and the plugins are loaded: move their objects out of the collector's way for the whole run.
        gc.freeze()

    def _limit(self) -> float:
        """The per-test time limit (--timeout or pytest.ini's timeout); import and collection get the same."""
        for value in (self.config.getoption("timeout", None), self.config.getini("timeout")):
            try:
                if value not in (None, "") and 0 < float(value) < math.inf:  # no timer is set to inf
                    return float(value)
            except (TypeError, ValueError):
                continue
        return 0.0

    def _import_limit(self) -> float:
        """The bound on importing the tests: pytest.ini's pi_course_import_timeout, else the per-test one."""
        try:
            value = float(self.config.getini(IMPORT_TIMEOUT_INI) or 0)
        except (TypeError, ValueError):
            value = 0.0
        return value if value > 0 else self._limit()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> Any:
        """Bound the import of the learner's code: a loop at import time ends with its file and line."""
        limit = self._import_limit()
        usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        if not limit or not usable:
            return (yield)

        def stop(signum: int, frame: FrameType | None) -> None:
            if in_ast_work(frame):  # pytest is rewriting a test module: let it finish first
                signal.setitimer(signal.ITIMER_REAL, AST_RETRY)
                return
            # The collect report names the file, line and lab from this exception's traceback.
            raise LearnerTimeout(
                _("importing your code did not finish within {limit}s: probably an endless loop here").format(
                    limit=f"{limit:g}"
                )
            )

        previous = signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Refuse an `-m` that names no lab of this folder in one line that lists the labs.

        pytest (with --strict-markers) would only refuse it after collecting, in English, and the report
        would first have called the run "done"; without strict markers it would select nothing at all.
        """
        unknown = self._unknown_marks(str(self.config.getoption("markexpr", "") or ""))
        if not unknown:
            speak_the_run_language(self.config.pluginmanager.get_plugin("terminalreporter"))
            return
        labs = ", ".join(f"{lab.id} ({lab.marker})" for lab in self.labs)
        example = next((lab.marker for lab in self.labs if not lab.inherited), "")
        line = _("pytest: error: no lab {names} in this folder; its labs: {labs}").format(
            names=", ".join(unknown), labs=labs or "-"
        )
        if example:
            line += _("; run one with `python -m pytest -m {marker}`").format(marker=example)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        # pytest's terminal would add its own lines about the stop (in English): this one line says it all.
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            self.config.pluginmanager.unregister(terminal)
        raise RefusedRun

    def _unknown_marks(self, expression: str) -> list[str]:
        """The names of an `-m` expression that no marker of this run registers (lab ids where they look like
        one)."""
        registered = {
            str(line).split(":", 1)[0].split("(", 1)[0].strip() for line in self.config.getini("markers")
        }
        names = dict.fromkeys(re.findall(r"[A-Za-z_]\w*", expression))
        unknown = [name for name in names if name not in registered and name not in {"and", "or", "not"}]
        try:
            strict = bool(
                self.config.getoption("strict_markers", False) or self.config.getini("strict_markers")
            )
        except ValueError:  # an older pytest without the ini key
            strict = bool(self.config.getoption("strict_markers", False))
        if not strict:  # pytest selects nothing for an unknown name then; a lab's marker is still refused
            unknown = [name for name in unknown if LAB_MARKER.match(name)]
        return [
            f"{match['major']}.{match['minor']} ({name})" if (match := LAB_MARKER.match(name)) else name
            for name in unknown
        ]

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """With `-m` naming only labs, pass over test modules that mark none of them.

        A later checkpoint's folder holds every earlier checkpoint's tests; importing them all only to
        deselect them made each lab run slower as the course went on. pytest has no "collect only
        what -m can select" option, so the module's text is searched for the marker, which is how
        the focused tests write it (`pytest.mark.labN_x`).
        """
        names = _marker_names(str(config.getoption("markexpr", "") or ""))
        if not names or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
            return None
        try:
            text = collection_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None  # let pytest collect it and say what is wrong
        return None if any(re.search(rf"\bmark\.{name}\b", text) for name in names) else True

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count the tests each lab has in this run, so a run stopped early (-x) says so."""
        for item in session.items:
            lab = self._lab_of(item)
            if lab is not None:
                self.collected[lab] = self.collected.get(lab, 0) + 1

    # -- recording -------------------------------------------------------------

    def _emit(self, record: dict[str, Any]) -> None:
        self._emit_line(json.dumps(record, ensure_ascii=False))

    def _emit_line(self, line: str) -> None:
        if self.json_path:
            # One line per event, flushed at once: a run killed half-way still leaves its records.
            with open(self.json_path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Leave out the optional exercises of earlier checkpoints: a later tree does not re-run them.

        Unless `-m` names one: the learner's exercise came along (`--from`) and still runs when asked for.
        """
        named = _marker_names(str(config.getoption("markexpr", "") or ""))
        skipped = {
            lab.marker for lab in self.labs if lab.optional and lab.inherited and lab.marker not in named
        }
        if not skipped:
            return
        keep = [item for item in items if not any(mark.name in skipped for mark in item.iter_markers())]
        if len(keep) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in keep])
            items[:] = keep

    def _lab_of(self, item: pytest.Item) -> str | None:
        known = {lab.marker: lab.id for lab in self.labs}
        for mark in item.iter_markers():
            if mark.name in known:
                return known[mark.name]
            if match := LAB_MARKER.match(mark.name):
                return f"{match['major']}.{match['minor']}"
        return None

    def _location(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
        """The deepest traceback line inside the learner's package, as `path:line`."""
        return learner_location(excinfo, self.root)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """Take pytest-timeout's signal timer over: this plugin arms its own around each phase's body.

        pytest-timeout arms one alarm for setup, call, teardown and the reports between them; an alarm
        landing in pytest's own report-making (which parses source) ended runs with an INTERNALERROR.
        """
        usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        if getattr(settings, "method", None) != "signal" or not usable:
            return None  # pytest-timeout's own timer (thread method) takes over
        item._pi_limit = float(settings.timeout)  # type: ignore[attr-defined]
        item.cancel_timeout = lambda: None  # type: ignore[attr-defined]
        return True

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        """Skip a lab's remaining tests once one is stuck in an endless loop; bound the fixtures' setup."""
        lab = self._lab_of(item)
        if lab in self.loops:  # they would run into the same loop, one time limit each
            pytest.skip(
                _(
                    "not run: an earlier test of Lab {lab} is stuck in an endless loop at {where}; fix that "
                    "first"
                ).format(lab=lab, where=self.loops[lab])
            )
        with self._alarm(item), self._tracing():
            return (yield)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """Bound the test body with the per-test alarm, armed only while it runs; note how long a failed
        one waited (see RETRACE_WAIT)."""
        wall, cpu, queued = time.perf_counter(), time.process_time(), _run_queue_seconds()
        try:
            with self._alarm(item), self._no_search_on_stubs(item), self._tracing():
                return (yield)
        except BaseException:
            # Time spent ready to run but waiting for a CPU is load, not the test waiting: left out.
            busy = (time.process_time() - cpu) + (_run_queue_seconds() - queued)
            item._pi_waited = (time.perf_counter() - wall) - busy  # type: ignore[attr-defined]
            raise

    @contextmanager
    def _tracing(self) -> Iterator[None]:
        """Note which of the learner's functions the fixtures and the test run (see RanFunctions), when
        a failed test runs again for that (`_trace_rerun`)."""
        if not self.rerunning:
            yield
            return
        self.ran.start()
        try:
            yield
        finally:
            self.ran.stop()

    def _stubbed_up_to(self, lab: str | None) -> bool:
        """Whether a stub of `lab`, or of a lab before it, is still in the learner's package (read once)."""
        if self.stubbed is None:
            self.stubbed = stubbed_labs(self.root, PACKAGE, self.labs)
        order = [info.id for info in self.labs]
        if lab not in order:
            return bool(self.stubbed)
        return any(order.index(found) <= order.index(lab) for found in self.stubbed if found in order)

    @contextmanager
    def _no_search_on_stubs(self, item: pytest.Item) -> Iterator[None]:
        """Hypothesis neither shrinks nor explains in a test that can still stop on a lab's stub.

        A stub raised inside `@given` fails on every input alike, so shrinking and explaining it is
        about a hundred calls of the stub: seconds of CPU per test on a starter, and on a busy grading
        machine a time-out that makes a stubbed lab look `failing` in one run and `not started` in
        another (issue #26). The tests' profile (loaded when conftest imports it) is narrowed for
        this test only, and put back after it; a run that has not imported Hypothesis by then (a
        lab that never uses it) does not pay for its import.
        """
        hypothesis = sys.modules.get("hypothesis")
        if hypothesis is None or not (self.rerunning or self._stubbed_up_to(self._lab_of(item))):
            yield
            return
        settings, phase = hypothesis.settings, hypothesis.Phase
        name = settings.get_current_profile_name()
        original = settings.get_profile(name)
        kept = tuple(p for p in original.phases if p not in (phase.shrink, phase.explain))
        if kept == tuple(original.phases):
            yield
            return
        settings.register_profile(name, original, phases=kept)
        settings.load_profile(name)
        # A test decorated with `@given` at import time holds the settings it was decorated under, so a
        # profile loaded now does not reach it: narrow its own settings too (where `@settings` puts them).
        test = getattr(item, "obj", None)
        held = getattr(test, "_hypothesis_internal_use_settings", None)
        if held is not None:
            test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
                held, phases=tuple(p for p in held.phases if p not in (phase.shrink, phase.explain))
            )
        try:
            yield
        finally:
            if held is not None:
                test._hypothesis_internal_use_settings = held  # type: ignore[union-attr]
            settings.register_profile(name, original)
            settings.load_profile(name)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """Bound the fixtures' teardown with the per-test alarm."""
        with self._alarm(item):
            return (yield)

    @contextmanager
    def _alarm(self, item: pytest.Item) -> Iterator[None]:
        """Raise LearnerTimeout in the phase's body when it loops, naming the learner's line.

        The test is looked at every REPEAT_TIMEOUT seconds. One call of the learner's code that has
        used LOOP_CPU seconds of CPU on its own is an endless loop (the functions of these labs take
        milliseconds), and so is a call of a function an earlier test already looped in, after
        REPEAT_CPU. An event loop that nothing can wake any more (`_waits_forever`) fails the test once
        it has been seen so for STUCK_WAIT seconds; anything else runs to the item's time limit. CPU time
        of one call, so that a busy machine, a test waiting on I/O, or many quick calls are never taken
        for a loop.
        """
        limit = float(getattr(item, "_pi_limit", 0) or 0)
        if not 0 < limit < math.inf:
            yield
            return
        lab = self._lab_of(item)
        root, stuck = self.root, self.stuck_code
        started = time.monotonic()
        watched: list[Any] = [None, 0.0]  # the learner call being watched, and the CPU clock when first seen
        asleep: list[float | None] = [None]  # since when the loop has been found waiting forever

        def looping(frame: FrameType | None) -> float | None:
            """The CPU seconds one learner call has spun for, once past its allowance; else None."""
            spot = _standing_in(frame, stuck) or _learner_frame(frame)
            if spot is None or spot is not watched[0]:
                watched[:] = [spot, time.process_time()]
                return None
            spent = time.process_time() - float(watched[1])
            known = (spot.f_code.co_filename, spot.f_code.co_name) in stuck
            return spent if spent >= (REPEAT_CPU if known else LOOP_CPU) else None

        def stop(signum: int, frame: FrameType | None) -> None:
            left = limit - (time.monotonic() - started)
            if in_ast_work(frame) and left > -AST_GRACE:
                signal.setitimer(signal.ITIMER_REAL, AST_RETRY)
                return
            if left > 0 and _waits_forever(frame):
                since = asleep[0] = asleep[0] or time.monotonic()
                if time.monotonic() - since >= STUCK_WAIT:
                    stuck_here = LearnerTimeout(
                        _(
                            "Stuck: the test waits, and no timer, file or other thread is left that could "
                            "wake it; Lab {lab} probably waits for something that never comes"
                        ).format(lab=lab)
                    )
                    stuck_here.waits_forever = True
                    raise stuck_here
            else:
                asleep[0] = None
            spun = looping(frame) if left > 0 else None
            if left > 0 and spun is None:
                signal.setitimer(signal.ITIMER_REAL, min(REPEAT_TIMEOUT, left))
                return
            found = frame_location(frame, root)
            owner = lab_of_line(found[1], found[2]) if found else None
            where = f" {found[0]}" if found else ""
            if spun is not None:
                raise LearnerTimeout(
                    _(
                        "Timeout: stopped at{where} after one call spun for {seconds}s of CPU, "
                        "probably an endless loop in Lab {lab}"
                    ).format(where=where, seconds=f"{spun:.1f}", lab=owner or lab)
                )
            if found is None:  # no learner code on the stack: the test was waiting, not spinning
                raise LearnerTimeout(
                    _(
                        "Timeout (>{limit}s): the test did not finish while none of your code was running; "
                        "Lab {lab} probably waits for something that never comes"
                    ).format(limit=f"{limit:g}", lab=lab)
                )
            raise LearnerTimeout(
                _("Timeout (>{limit}s): stopped at{where}, probably an endless loop in Lab {lab}").format(
                    limit=f"{limit:g}", where=where, lab=owner or lab
                )
            )

        previous = signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, min(REPEAT_TIMEOUT, limit))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """Turn os._exit() in learner code (setup, call or teardown) into a failure so the report prints.

        A failure the `edit:` line must place is written out only after the test ran once more, traced
        (see `_trace_rerun`): tests run untraced, and only a lab's first failure pays for the trace.
        """
        with _refusing_os_exit():
            result = yield
            pending: tuple[TestRecord, str, bool] | None = getattr(item, "_pi_edit", None)
            if pending is not None and not self.rerunning:
                record, text, traced = pending
                try:
                    if traced:
                        self._trace_rerun(item, nextitem)
                    self._point_at_edit(item, record, text, traced)
                finally:
                    item._pi_edit = None  # type: ignore[attr-defined]
                    self._emit_line(test_record(record))
            return result

    def _trace_rerun(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Run a failed test once more (fresh fixtures, no report) noting the learner's functions it runs.

        Tracing every test cost about a third more CPU; a failure is traced alone, after its run.
        """
        from _pytest.runner import runtestprotocol

        self.rerunning = True
        self.ran.codes, self.ran.calls = set(), set()
        try:
            runtestprotocol(item, nextitem=nextitem, log=False)
        except Exception:
            pass
        finally:
            self.rerunning = False
            self.ran.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """While importing the tests (and so the learner's package), refuse os._exit and shorten import
        errors."""
        with _refusing_os_exit():
            try:
                report: pytest.CollectReport = yield
            except SystemExit as exit_:
                # pytest lets SystemExit out of collection and dies with INTERNALERROR; make it a failure.
                frames = [
                    f'File "{frame.f_code.co_filename}", line {line}'
                    for frame, line in traceback.walk_tb(exit_.__traceback__)
                ]
                text = "\n".join(
                    [*frames, f"E   SystemExit: learner code called sys.exit({exit_.code!r}) while importing"]
                )
                report = pytest.CollectReport(collector.nodeid, "failed", text, [])
        if report.failed:
            entry, excerpt = self._describe_collect_error(report)
            report._pi_entry = entry  # type: ignore[attr-defined]
            if entry.location:
                # pytest would show importlib's frames; the learner needs the line and the lab only.
                lab = f" (Lab {entry.lab})" if entry.lab else ""
                report.longrepr = f"{entry.location}{lab}: {entry.message}\n{excerpt}".rstrip()
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Record the phase that decides the test's outcome."""
        # pytest renders a failure's source with ast.parse: with a collection inside it, CPython 3.11 ends
        # the run in an INTERNALERROR (`collector_paused`; an asyncio test leaves the garbage that does it).
        with collector_paused() if call.excinfo is not None else contextlib.nullcontext():
            report: pytest.TestReport = yield
        if report.when == "call" and report.passed and not self.rerunning:
            self.passed_now.append(report.nodeid)
        decisive = report.when == "call" or report.outcome != "passed"
        if decisive and not self.rerunning and not getattr(item, "_pi_recorded", False):
            item._pi_recorded = True  # type: ignore[attr-defined]
            record = TestRecord(report.nodeid, self._lab_of(item), report.outcome)
            record.duration = round(report.duration, 6)
            if report.skipped:
                longrepr = report.longrepr
                record.skip_reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
                record.skip_reason = record.skip_reason.removeprefix("Skipped: ")
            elif call.excinfo is not None:
                error = call.excinfo.value
                record.exc_type = type(error).__name__
                record.exc_lab = stub_lab(error)
                record.message = failure_line(_first_line(str(error))) or record.exc_type
                if isinstance(error, SystemExit):
                    record.message = _(
                        "learner code called sys.exit({code}); a tool must return or raise, not end the "
                        "process"
                    ).format(code=repr(error.code))
                if record.exc_type == "Failed" and "Timeout" in record.message:
                    record.message = _("{message}: stopped, probably an endless loop").format(
                        message=record.message
                    )
                record.location = self._location(call.excinfo)
                if record.location:
                    path, _sep, line = record.location.rpartition(":")
                    full = Path(path) if Path(path).is_absolute() else self.root / path
                    record.owner_lab = lab_of_line(full, int(line))
                    record.function = function_at(full, int(line))
                if isinstance(error, LearnerTimeout) and not error.waits_forever:
                    self._remember_loop(record.lab, record.owner_lab, call.excinfo)
                if isinstance(error, AssertionError):
                    record.diff = readable_diff(str(error))
                if record.outcome == "failed":
                    doc = getattr(getattr(item, "obj", None), "__doc__", None) or ""
                    english = pi_course_i18n.english_question(
                        item.path, getattr(item, "originalname", item.name)
                    )
                    record.question = english or first_paragraph(doc)
                if record.outcome == "failed" and record.exc_lab is None:
                    # Placed (and written out) after the test's teardown: see pytest_runtest_protocol.
                    first = not any(r.lab == record.lab and r.outcome == "failed" for r in self.records)
                    traced = (
                        first
                        and self.trace_failures
                        and not isinstance(error, LearnerTimeout)
                        and getattr(item, "_pi_waited", 0.0) < RETRACE_WAIT
                    )
                    item._pi_edit = (record, str(error), traced)  # type: ignore[attr-defined]
            self.records.append(record)
            if getattr(item, "_pi_edit", None) is None:
                self._emit_line(test_record(record))
        if report.failed and report.longrepr is not None and not pi_course_i18n.speaks_english():
            # pytest's and Hypothesis's words inside the failure (`DID NOT RAISE`, `Expected regex:`).
            report.longrepr = failure_text(str(report.longrepr))
        return report

    def _point_at_edit(self, item: pytest.Item, record: TestRecord, error: str, traced: bool) -> None:
        """Send a failure to the function that holds the mistake, or name the few that may.

        In order: a checker's `file:line: error:` line (mypy's) names the line itself, whichever lab's
        test ran the checker. Else the learner's functions this test ran (`RanFunctions`), of its own
        lab or an earlier one, are the places a mistake can be: one of them is named, or up to
        MAX_CANDIDATES as candidates, the traceback's frame and the test's `edits` marker first. A
        wrong value fails in the test's own assertion and a mistake may run long before it shows:
        the last frame alone often names the wrong function.
        """
        if self._point_at_checker_line(record, error):
            return
        order = [info.id for info in self.labs]
        owner, lab = record.owner_lab, record.lab
        if owner in order and lab in order and order.index(owner) > order.index(lab):
            # A later lab's code cannot block an earlier lab's test: the mistake is this lab's own.
            record.owner_lab = None
        mark = item.get_closest_marker(EDITS_MARKER)
        named = tuple(str(arg) for arg in mark.args) if mark is not None else ()
        tested = next((info for info in self.labs if info.id == record.lab), None)
        if record.owner_lab not in (None, lab) and record.owner_lab in self._green_labs():
            # Every test of that earlier lab passed in this run: its code is where the mistake showed,
            # not what blocks this lab (still a candidate below).
            record.owner_lab = None
        ran = self._ran_in_labs(lab, order) if traced else {}
        framed = record.function if record.location and record.owner_lab is not None else None
        targets = edit_target(tested, named)
        ranked = rank_candidates(ran, framed, targets, lab, order)
        changed: set[str] = set()
        if traced and self.passed_code is not None:
            ranked, changed = self._changed_first(item.nodeid, ran, ranked)
        places = [(ran[name].where, name) for name in ranked]
        if ran:
            # A function the test names in a file of which the trace saw nothing run ran in another
            # process (16's worker): the test's own word for it stands right after the frame. A named
            # function of a file that did run here was simply not called, and stays out.
            seen_files = {info.where.rpartition(":")[0] for info in ran.values()}
            unseen = [
                entry
                for name in targets
                if name not in ran and f"{name}.__init__" not in ran
                if (entry := function_entry(self.root, PACKAGE, name))
                and entry[0].rpartition(":")[0] not in seen_files
            ]
            at = 1 if ranked and ranked[0] == framed else 0
            places[at:at] = unseen
        if places:
            chosen = places[:MAX_CANDIDATES]
            if chosen[0][1] != framed:  # the frame keeps its own line (the one that raised)
                record.location = chosen[0][0]
            record.function = ", ".join(name for _where, name in chosen)
            # A function changed since this test last passed says so: that is why it comes first.
            record.candidates = (
                [
                    f"{where} ({name}; {_('changed since this test last passed')})"
                    if name in changed
                    else f"{where} ({name})"
                    for where, name in chosen
                ]
                if len(chosen) > 1
                else []
            )
            if len(places) > MAX_CANDIDATES:
                record.more_candidates = len(places) - MAX_CANDIDATES
            return
        if record.location and record.owner_lab is not None:
            return
        found = [
            entry
            for name in edit_target(tested, named)
            if (entry := function_entry(self.root, PACKAGE, name))
        ]
        if found:
            record.location = found[0][0]
            record.function = ", ".join(function for _where, function in found)

    def _changed_first(
        self, nodeid: str, ran: dict[str, Ran], ranked: list[str]
    ) -> tuple[list[str], set[str]]:
        """`ranked` with the functions changed since this test last passed first (in `ran`'s order, then
        source order), and those functions; a later lab's function joins `ran` too, since the test ran it
        and it changed."""
        assert self.passed_code is not None
        changed = [name for name in ranked if self.passed_code.changed(nodeid, name, ran[name])]
        every = self.ran.learner_functions(self.root)
        later = sorted(
            (
                name
                for name, info in every.items()
                if name not in ran and self.passed_code.changed(nodeid, name, info)
            ),
            key=lambda name: (str(every[name].path), every[name].line),
        )
        for name in later:
            ran[name] = every[name]
            ran[name].owner = lab_of_line(ran[name].path, ran[name].line)
        first = changed + later
        return first + [name for name in ranked if name not in first], set(first)

    def _green_labs(self) -> set[str]:
        """The labs every test of which passed so far in this run (one at least)."""
        seen: dict[str, bool] = {}
        for done in self.records:
            if done.lab is not None:
                seen[done.lab] = seen.get(done.lab, True) and done.outcome == "passed"
        return {lab for lab, green in seen.items() if green}

    def _ran_in_labs(self, lab: str | None, order: list[str]) -> dict[str, Ran]:
        """The learner's functions the test ran whose `def` lies in the `# ## Lab` section of its lab or
        of an earlier one (a later lab's code cannot hold an earlier lab's mistake)."""
        allowed = set(order[: order.index(lab) + 1] if lab in order else order)
        found: dict[str, Ran] = {}
        for name, ran in self.ran.learner_functions(self.root).items():
            ran.owner = lab_of_line(ran.path, ran.line)
            if ran.owner in allowed:
                found[name] = ran
        return found

    def _point_at_checker_line(self, record: TestRecord, text: str) -> bool:
        """Point at the first `file:line: error:` a checker (mypy) reported about the learner's package.

        The line's own lab is blamed, a later one too: a checker reads the whole file, whichever lab's
        test ran it. False when the failure quotes no such line of a file of the package.
        """
        for match in CHECKER_LINE.finditer(text):
            path = package_file(self.root, PACKAGE, match["file"])
            if path is None:
                continue
            line = int(match["line"])
            owner = lab_of_line(path, line)
            if owner is None:
                continue
            record.location = f"{path.relative_to(self.root).as_posix()}:{line}"
            record.owner_lab = owner
            record.function = function_at(path, line) or defined_at(path, line)
            return True
        return False

    def _remember_loop(
        self, lab: str | None, owner: str | None, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> None:
        """Note where a test was stopped in an endless loop: its lab's other tests are not run into it.

        Only the lab that owns the looping line skips its other tests; a later lab that merely calls
        into the loop runs on, its tests stopped at once if they stand in the same function.
        """
        frames = [frame for frame, _line in traceback.walk_tb(excinfo.tb)]
        inner = next((f for f in reversed(frames) if PACKAGE in Path(f.f_code.co_filename).parts), None)
        if inner is None:
            return  # stopped outside the learner's code: a slow test, not a loop of theirs
        self.stuck_code.add((inner.f_code.co_filename, inner.f_code.co_name))
        if lab is not None and owner in (lab, None):
            self.loops[lab] = self._location(excinfo) or inner.f_code.co_name

    def _describe_collect_error(self, report: pytest.CollectReport) -> tuple[CollectError, str]:
        """Where an import of the tests failed (the package's file:line, its lab, the error), and that
        line."""
        text = str(report.longrepr)
        location, lab, excerpt = None, None, ""
        # The course's package, as pytest.ini names it: a course whose package is not `pi_course` keeps
        # the location and the lab of its import errors too.
        package = re.escape(PACKAGE)
        matches = re.findall(rf'File "([^"]*\b{package}[/\\][^"]*)", line (\d+)', text) or re.findall(
            rf"(\S*\b{package}[/\\]\S*\.py):(\d+)", text
        )
        if matches:
            raw, number = matches[-1]  # the innermost frame: where the learner's code broke
            path, line = Path(raw), int(number)
            full = path if path.is_absolute() else self.root / path
            try:
                shown = full.resolve().relative_to(self.root.resolve())
            except ValueError:
                shown = full
            location = f"{shown.as_posix()}:{line}"
            lab = lab_of_line(full, line)
            try:
                excerpt = "    " + full.read_text(encoding="utf-8").splitlines()[line - 1].strip()
            except (OSError, UnicodeDecodeError, IndexError):
                excerpt = ""
        error_lines = [
            line
            for line in text.splitlines()
            if re.match(r"^E\s+[\w.]*(Error|Exception|Exit|Timeout)\b", line)
        ]
        message = error_lines[-1].lstrip("E").strip() if error_lines else _first_line(text)
        # `pi_course_report.LearnerTimeout: ...` reads better without the plugin's module name.
        message = re.sub(r"^[\w.]*\.(?=\w+:)", "", message).removeprefix("LearnerTimeout: ")
        return CollectError(report.nodeid, message, location, lab), excerpt

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Report a test module that cannot even be imported (a syntax error, say) in one line."""
        if not report.failed:
            return
        entry = getattr(report, "_pi_entry", None) or self._describe_collect_error(report)[0]
        self.collect_errors.append(entry)
        self._emit_line(record_line("collect_error", asdict(entry)))

    # -- reporting -------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Remember the code the passing tests passed with (a practice folder's hint; never an error)."""
        if self.passed_code is not None:
            with contextlib.suppress(OSError):
                self.passed_code.save(self.passed_now)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """Print the per-lab table and the next step after pytest's own summary."""
        # Outermost wrapper: the table comes after pytest's list of failed tests, where the learner looks.
        result = yield
        self._summary(terminalreporter)
        return result

    def _summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("pi-course labs")
        for error in self.collect_errors:
            where = error.location or error.nodeid
            lab = _(" (in Lab {lab})").format(lab=error.lab) if error.lab else ""
            write(
                _("cannot import the tests: {where}{lab}: {message}").format(
                    where=where, lab=lab, message=error.message
                )
            )
            write(_("  fix that line first; no lab can run until the package imports"))
        if self.collect_errors and not self.records:
            self._emit(
                {"event": "summary", "labs": [], "next": None, "collect_errors": len(self.collect_errors)}
            )
            return
        if not self.labs:
            # pytest.ini declares no lab (emptied, or replaced): nothing here can be called done.
            write(
                _(
                    "no test that ran belongs to a lab: this folder's pytest.ini no longer declares them; "
                    "`pi-course reset --kit` puts the kit's pytest.ini back (your code is not touched)"
                )
            )
            self._emit({"event": "summary", "labs": [], "next": None, "collect_errors": 0})
            return
        rows = [row for row in summarise(self.labs, self.records, self.collected) if row.total]
        recorded = read_progress(self.root, PACKAGE)
        entries = {lab.id: entry for lab in self.labs if (entry := lab_entry(self.root, PACKAGE, lab))}
        stubbed = stubbed_labs(self.root, PACKAGE, self.labs)
        step = next_step(rows, self.labs, recorded, entries, stubbed)
        stopped = any(row.collected > row.total for row in rows)
        shown = NextStep.from_json(step) if step is not None else None
        for line in render(rows, shown, stopped, str(self.config.getini("pi_course_kind") or "labs")):
            write(line)
        write_progress(self.root, rows, PACKAGE, self.labs)
        self._emit_line(summary_line(rows, step, len(self.collect_errors), stopped))
