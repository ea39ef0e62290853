"""Red team, third series (issue #40): what learner code can find out, and what it can hold, while graded.

Each attack is a learner of the fixture course whose own code attacks while it is graded, then turns
what it found into its score: an attack that works fails Lab 1.1 on purpose, so a COMPLETE record
means it found nothing. Each attack also checks that it really looked (it must find the public tests,
or its own files), so none of these tests can pass because the attack did nothing. The course is a
copy of the fixture with one held-out test for checkpoint a1. Under root the module runs again as a
fresh unprivileged user.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURE
from pi_course_kit.core import i18n, manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import bwrap
from pi_course_kit.instructor.grade import grader as grading
from pi_course_kit.instructor.grade.sandbox import Limits, MiB, Sandboxed
from test_grade import TEACHING, make_learner
from test_grade_attacks2_sandbox import own_flags, run_as_new_user

ROOT = os.geteuid() == 0
INNER = "PI_COURSE_ATTACKS3_INNER"
pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

HELD_OUT = "tests/held_out/test_a1_counter_held_out.py"
#: Written only in the held-out file (the attacks spell it in two halves, so their own files lack it).
SECRET = "held-secret-Zq7"
HELD_SOURCE = f'''"""A held-out test of the fixture's checkpoint a1."""

import pytest
from fx_course import Counter

SECRET = "{SECRET}"


@pytest.mark.lab1_1
def test_three_adds_count_three() -> None:
    """加三次是不是 3？"""
    counter = Counter()
    counter.add()
    counter.add()
    assert counter.add() == 3 and SECRET
'''

#: Appended to the solved counter.py: Counter.add raises (Lab 1.1 fails) when ATTACK found something,
#: or when it did not look (its `looked` check). ATTACK sets `found` and `looked`.
WRAP = """

_honest_add = Counter.add
_verdict: list[tuple[bool, bool]] = []


def _add(self):  # type: ignore[no-untyped-def]
    if not _verdict:
        _verdict.append(_attack())
    found, looked = _verdict[0]
    if found or not looked:
        raise RuntimeError("the attack found something" if found else "the attack did not look")
    return _honest_add(self)


Counter.add = _add
"""

FIND_HELD_OUT = '''
import os as _os
import sys as _sys


def _attack():  # type: ignore[no-untyped-def]
    """Every file it can list (below / but /proc, /sys, /dev, /usr) or name (each module's __file__,
    each open descriptor of every process), read for the held-out literal and the public tests' text."""
    secret, public = ("held-" "secret-Zq7").encode(), ("From 41, " "does add return 42").encode()
    paths = set()
    for top, folders, files in _os.walk("/"):
        if top == "/":
            folders[:] = [f for f in folders if f not in ("proc", "sys", "dev", "usr")]
        paths.update(_os.path.join(top, name) for name in files)
    for module in list(_sys.modules.values()):
        where = getattr(module, "__file__", None)
        if isinstance(where, str):
            paths.add(where)
            paths.add(_os.path.join(_os.path.dirname(where), "__pycache__"))
    for pid in [name for name in _os.listdir("/proc") if name.isdigit()] + ["self"]:
        try:  # every descriptor of every process it may look at: bwrap's, the server's, its own
            paths.update(f"/proc/{pid}/fd/{number}" for number in _os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    found = looked = False
    for path in sorted(paths):
        names = [path]
        if _os.path.isdir(path):
            try:
                names = [_os.path.join(path, n) for n in _os.listdir(path)]
            except OSError:
                continue
        for name in names:
            try:
                with open(name, "rb") as handle:
                    data = handle.read(1 << 22)
            except OSError:
                continue
            found = found or secret in data
            looked = looked or public in data
    return found, looked
'''


# Five children, each mapping 200 MiB of MAP_SHARED|MAP_ANONYMOUS memory (mmap's default with no
# file): each far below the per-process limit, together twice --memory 512. statm's "shared" column
# counts these pages as shared, so "resident minus shared" saw none of them.
SHARED_CHILDREN = """

import mmap as _mmap
import os as _os
import time as _time

_children = []
for _ in range(5):
    _pid = _os.fork()
    if _pid == 0:
        try:
            _area = _mmap.mmap(-1, 200 << 20)
            for _at in range(0, 200 << 20, 4096):
                _area[_at] = 1  # written, so resident
        except (OSError, MemoryError):
            pass
        _time.sleep(60)
        _os._exit(0)
    _children.append(_pid)
for _pid in _children:
    _os.waitpid(_pid, 0)
"""


# Memory that no process maps: a memory file written and never mapped, a System V segment made and
# never attached, a secret memory file, a socket's buffers raised to 4 MiB. /proc's per-process counts
# cannot see any of them (sixty 16 MiB memory files once held 960 MiB through a run under --memory 512):
# the sandbox's filter refuses all five with EPERM. The attack asks for 1 MiB only, so a hole found here
# costs the host nothing.
HIDE_MEMORY = """
import ctypes as _ctypes
import errno as _errno
import os as _os


def _attack():  # type: ignore[no-untyped-def]
    \"\"\"Whether any of the three could be made; it looked when each was refused with EPERM.\"\"\"
    libc = _ctypes.CDLL(None, use_errno=True)
    made, refused = [], []
    try:
        fd = _os.memfd_create("hidden")
        _os.write(fd, bytes(1 << 20))
        made.append("memfd_create")
    except PermissionError:
        refused.append("memfd_create")
    except OSError:
        pass
    segment = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment >= 0:
        made.append("shmget")
    elif _ctypes.get_errno() == _errno.EPERM:
        refused.append("shmget")
    secret = libc.syscall(447, 0)  # memfd_secret on x86_64 and arm64
    if secret >= 0:
        made.append("memfd_secret")
    elif _ctypes.get_errno() == _errno.EPERM:
        refused.append("memfd_secret")
    import socket as _socket

    one, other = _socket.socketpair()
    for option in (_socket.SO_SNDBUF, _socket.SO_RCVBUF):
        try:
            one.setsockopt(_socket.SOL_SOCKET, option, 4 << 20)
            made.append(f"setsockopt {option}")
        except PermissionError:
            refused.append(f"setsockopt {option}")
    return bool(made), len(refused) == 5
"""


# Twelve children, each filling 120 socket pairs (default buffers) that nobody reads: about 670 MiB
# waiting in kernel buffers under --memory 512, while each child's RSS stays near 7 MiB. Stopped only
# because the fork server counts every socket of the sandbox at the most it may hold.
SOCKET_CHILDREN = """

import os as _os
import socket as _socket
import time as _time

_children = []
for _ in range(12):
    _pid = _os.fork()
    if _pid == 0:
        _pairs = []
        try:
            for _n in range(120):
                _pair = _socket.socketpair()
                for _end in _pair:
                    _end.setblocking(False)
                    try:
                        while True:
                            _end.send(bytes(65536))
                    except BlockingIOError:
                        pass
                _pairs.append(_pair)
        except OSError:
            pass
        _time.sleep(60)
        _os._exit(0)
    _children.append(_pid)
for _pid in _children:
    _os.waitpid(_pid, 0)
"""


def host_paths() -> list[str]:
    """Host paths no mount or descriptor inside a sandbox may name: the checkout, the venv, and
    (where the grader mounts its scratch as a file system of its own: root with CAP_SYS_ADMIN) the
    scratch under the temporary folder."""
    paths = [str(Path(__file__).resolve().parents[2]), sys.prefix]
    if bwrap.root_builds_namespaces():
        paths.append(os.path.join(tempfile.gettempdir(), "pi-course-grade-"))
    return paths


def interpreter_paths() -> list[str]:
    """Host paths the interpreter's own paths inside (sys.executable, sys.prefix, sys.path, module
    files, /proc/self/exe and maps) may not name either: $HOME, and the base interpreter's
    installation unless it is under /usr. mountinfo still names the installation's folder as the
    source of its bind (see the threat model), so it is left out of that one."""
    paths = [*host_paths()]
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        paths.append(home.rstrip("/") + "/")
    for prefix in (sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))):
        for form in (prefix, os.path.realpath(prefix)):
            if not Path(form).is_relative_to("/usr"):
                paths.append(form)
    return sorted(set(paths))


FIND_HOST_PATHS = """
import os as _os
import sys as _sys


def _attack():  # type: ignore[no-untyped-def]
    \"\"\"Whether /proc/self/mountinfo or the target of any open descriptor (or the working folder)
    names a host path, or the interpreter's own paths (sys.*, module files, /proc/self/exe and
    maps) name it or its installation; `looked` when mountinfo was read and names the staged
    tree's mount, and the interpreter's paths were gathered.\"\"\"
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        mounts = handle.read()
    targets = []
    for number in _os.listdir("/proc/self/fd"):
        try:
            targets.append(_os.readlink(f"/proc/self/fd/{number}"))
        except OSError:  # the descriptor that listed the folder, closed by now
            continue
    targets.append(_os.readlink("/proc/self/cwd"))
    own = [_os.readlink("/proc/self/exe"), _sys.prefix, _sys.base_prefix, _sys.executable, *_sys.path]
    own += [str(getattr(module, "__file__", "")) for module in list(_sys.modules.values())]
    with open("/proc/self/maps", encoding="utf-8") as handle:
        own.append(handle.read())
    text = mounts + "\\n".join(targets)
    found = any(path in text for path in HOST_PATHS)
    found = found or any(path in "\\n".join(own) for path in INTERPRETER_PATHS)
    looked = "/grade/work" in mounts and len(targets) > 2 and _os.path.isfile(_sys.executable)
    return found, looked
"""


def held_out_course(root: Path) -> Course:
    """A copy of the fixture course whose checkpoint a1 has one held-out test."""
    course_root = Path(shutil.copytree(FIXTURE, root / "course"))
    (course_root / HELD_OUT).parent.mkdir(parents=True)
    (course_root / HELD_OUT).write_text(HELD_SOURCE, encoding="utf-8")
    toml = course_root / "course.toml"
    text = toml.read_text(encoding="utf-8")
    marker = 'contract = "docs/contract-a1.md"\n'
    assert marker in text
    toml.write_text(text.replace(marker, f'{marker}held_out = ["{HELD_OUT}"]\n', 1), encoding="utf-8")
    return manifest.load(toml)


def attacker(course: Course, checkpoint: Checkpoint, dest: Path, attack: str) -> Path:
    """A finished learner whose counter.py runs `attack` when Lab 1.1's tests first call add()."""
    folder = make_learner(course, checkpoint, dest, labs_from_solution=True)
    tool = folder / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + attack + WRAP, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def graded(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The attackers and an honest learner, graded in one slot's fork server and in fresh sandboxes."""
    root = tmp_path_factory.mktemp("attacks3")
    held = held_out_course(root)
    a1 = held.checkpoint("a1")
    folders = {
        "honest": make_learner(course, checkpoint, root / "honest", labs_from_solution=True),
        "find-held-out": attacker(course, checkpoint, root / "find-held-out", FIND_HELD_OUT),
        "hide-memory": attacker(course, checkpoint, root / "hide-memory", HIDE_MEMORY),
        "find-host-paths": attacker(
            course,
            checkpoint,
            root / "find-host-paths",
            f"\nHOST_PATHS = {host_paths()!r}\nINTERPRETER_PATHS = {interpreter_paths()!r}\n"
            + FIND_HOST_PATHS,
        ),
    }
    found: dict[str, Any] = {}
    limits = Limits(wall_seconds=60, cpu_seconds=30, memory_bytes=512 * MiB)
    for mode, fresh in (("server", False), ("fresh", True)):
        grader = grading.Grader(held, limits, jobs=1, fresh_sandboxes=fresh)
        try:
            records = grader.grade_all(list(folders.values()))
        finally:
            grader.close()
        found[mode] = dict(zip(folders, records, strict=True))
    found["checkpoint"] = a1
    yield found


@pytest.mark.parametrize("mode", ["server", "fresh"])
def test_the_held_out_test_is_graded_from_memory(graded: dict[str, Any], mode: str) -> None:
    """Does the honest learner pass Lab 1.1 with its held-out test counted (3 of 3), served without a file?"""
    record = graded[mode]["honest"]
    assert (record.status, own_flags(record)) == (grading.COMPLETE, []), record.message
    lab = next(score for score in record.labs if score.id == "1.1")
    assert (lab.passed, lab.total) == (3, 3)


@pytest.mark.parametrize("mode", ["server", "fresh"])
def test_learner_code_cannot_list_or_open_the_held_out_source(graded: dict[str, Any], mode: str) -> None:
    """Reading every file it can list or name (module paths, caches, descriptors): no held-out source?"""
    record = graded[mode]["find-held-out"]
    assert record.status == grading.COMPLETE, [
        (t.nodeid, t.outcome) for t in record.tests if t.outcome != "passed"
    ]


@pytest.mark.parametrize("mode", ["server", "fresh"])
def test_no_mount_or_descriptor_names_a_host_path(graded: dict[str, Any], mode: str) -> None:
    """Reading mountinfo and its descriptors' targets, does learner code find no checkout, venv or scratch?"""
    record = graded[mode]["find-host-paths"]
    assert record.status == grading.COMPLETE, [
        (t.nodeid, t.outcome) for t in record.tests if t.outcome != "passed"
    ]


@pytest.mark.parametrize("mode", ["server", "fresh"])
def test_memory_that_no_process_maps_cannot_be_made(graded: dict[str, Any], mode: str) -> None:
    """Can learner code make a memory file, a System V segment or a secret memory file, or raise a
    socket's buffers, whose pages no process's /proc counts show (each must be refused with EPERM)?"""
    record = graded[mode]["hide-memory"]
    assert record.status == grading.COMPLETE, [
        (t.nodeid, t.outcome) for t in record.tests if t.outcome != "passed"
    ]


@pytest.mark.parametrize(("mode", "level"), [("server", "proc"), ("fresh", "per-process")])
def test_each_record_says_how_its_memory_was_counted(graded: dict[str, Any], mode: str, level: str) -> None:
    """Does the record say how its run's memory was held to --memory (summed from /proc, or per process)?"""
    assert graded[mode]["honest"].memory == level


@pytest.fixture(scope="module")
def shared_memory(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The shared-memory and socket attackers, then an honest learner, in one slot; records and runs."""
    root = tmp_path_factory.mktemp("shared-memory")
    folder = make_learner(course, checkpoint, root / "shared", labs_from_solution=True)
    tool = folder / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + SHARED_CHILDREN, encoding="utf-8")
    sockets = make_learner(course, checkpoint, root / "sockets", labs_from_solution=True)
    tool = sockets / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + SOCKET_CHILDREN, encoding="utf-8")
    after = make_learner(course, checkpoint, root / "after", labs_from_solution=True)
    grader = grading.Grader(course, Limits(wall_seconds=40, cpu_seconds=30, memory_bytes=512 * MiB), jobs=1)
    runs: list[Sandboxed] = []
    real_run = grader._run

    def run(
        tree: Path, out: Path, slot: grading.Slot, order_seed: str, skipped: Sequence[str] = ()
    ) -> Sandboxed:
        runs.append(real_run(tree, out, slot, order_seed, skipped))
        return runs[-1]

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(grader, "_run", run)
        try:
            grader.reference(checkpoint)
            found: dict[str, Any] = {}
            for learner in (folder, sockets, after):
                first = len(runs)
                found[learner.name] = {"record": grader.grade_one(learner), "runs": runs[first:]}
            yield found
        finally:
            grader.close()


def test_children_holding_shared_anonymous_memory_are_stopped_at_the_run_s_limit(
    shared_memory: dict[str, Any],
) -> None:
    """Five children holding 1 GiB of MAP_SHARED|MAP_ANONYMOUS pages under --memory 512: stopped?"""
    graded = shared_memory["shared"]
    assert [run.stopped for run in graded["runs"]] == ["memory"] * len(graded["runs"]) != []
    assert graded["record"].status == grading.CRASHED and graded["record"].passed == 0
    after = shared_memory["after"]
    assert (after["record"].status, [run.stopped for run in after["runs"]]) == (grading.COMPLETE, [""])


def test_children_holding_data_in_unread_sockets_are_stopped_at_the_run_s_limit(
    shared_memory: dict[str, Any],
) -> None:
    """Twelve children with 240 full sockets each (about 670 MiB in kernel buffers) under --memory 512:
    stopped for memory, and the learner graded next complete?"""
    graded = shared_memory["sockets"]
    assert [run.stopped for run in graded["runs"]] == ["memory"] * len(graded["runs"]) != []
    assert graded["record"].status == grading.CRASHED and graded["record"].passed == 0
    after = shared_memory["after"]
    assert (after["record"].status, [run.stopped for run in after["runs"]]) == (grading.COMPLETE, [""])


@pytest.mark.skipif(not ROOT or bool(os.environ.get(INNER)), reason="creates a user: needs root")
def test_the_third_series_holds_for_an_unprivileged_instructor(tmp_path: Path) -> None:
    """Run as a fresh unprivileged user, does this module pass there too?"""
    done = run_as_new_user(Path(__file__).resolve(), INNER, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout
    assert re.search(r"\b1 skipped", done.stdout), done.stdout[-2000:]


#: Lab 1.2's reset blocks in a C call (no frame of the learner's on the stack, so no loop to point
#: at): before the fix each of the lab's tests waited its whole time limit, and together they
#: outlasted the run's wall time, which zeroed Lab 1.1 too.
BLOCKING_RESET = """

import functools as _functools
import time as _time

Counter.reset = _functools.partial(_time.sleep, 3600)  # type: ignore[method-assign]
"""


def graded_with_reset(
    course: Course, checkpoint: Checkpoint, folder: Path, reset: str, seconds: int
) -> grading.LearnerRecord:
    """A finished learner whose teaching file ends with `reset` (Lab 1.2's fault), graded alone within
    `seconds` of wall and CPU time; checks that only Lab 1.2 is lost."""
    make_learner(course, checkpoint, folder, labs_from_solution=True)
    tool = folder / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + reset, encoding="utf-8")
    grader = grading.Grader(course, Limits(wall_seconds=seconds, cpu_seconds=seconds), jobs=1)
    try:
        record = grader.grade_all([folder])[0]
    finally:
        grader.close()
    labs = {lab.id: (lab.passed, lab.total) for lab in record.labs}
    assert record.status == grading.PARTIAL, (record.status, record.message, record.flags)
    assert labs["1.1"] == (2, 2) and labs["1.2"] == (0, 3)
    return record


def test_a_lab_that_hangs_costs_that_lab_and_the_others_are_graded(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Lab 1.2 hangs in every test: is Lab 1.1 still graded in full, the run not stopped at its wall time?"""
    # Three tests of Lab 1.2 at the 10 s per-test limit outlast 25 s; one does not.
    graded_with_reset(course, checkpoint, tmp_path / "hangs", BLOCKING_RESET, 25)


#: Lab 1.2's reset awaits what no one will ever deliver: an event loop that nothing can wake.
AWAITING_RESET = """

import asyncio as _asyncio

Counter.reset = lambda self: _asyncio.run(_asyncio.Event().wait())  # type: ignore[method-assign]
"""


def test_a_lab_whose_loop_nothing_can_wake_is_stuck_at_once_and_the_others_are_graded(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lab 1.2 awaits, in every test, an event no one will set: inside the sandbox, does each test fail as
    stuck (not at the per-test limit) and Lab 1.1 still get graded in full?"""
    monkeypatch.setenv(i18n.LANG_ENV, "en")
    record = graded_with_reset(course, checkpoint, tmp_path / "awaits", AWAITING_RESET, 60)
    (stuck,) = [lab.first_failure for lab in record.labs if lab.id == "1.2"]
    assert stuck.startswith("Stuck: the test waits"), stuck
