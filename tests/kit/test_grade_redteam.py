"""Red team: hostile submissions try to forge scores, leak, escape, or stop the batch; grading must hold.

The class is graded once (module fixture). Under root the same module also runs again as a fresh
unprivileged user (`test_the_red_team_suite_holds_for_an_unprivileged_instructor`).
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import resource
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import keyrings
import pytest
from conftest import FX, REPO
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import copying
from test_grade import TEACHING, make_learner, tree_digest

ROOT = os.geteuid() == 0
INNER = "PI_COURSE_REDTEAM_INNER"
pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

# -- forgeries, each appended to an untouched starter's tool.py --------------------------------------

PATCH_TEST_REPORT = """
import _pytest.reports as _reports

_init = _reports.TestReport.__init__


def _forged_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None


_reports.TestReport.__init__ = _forged_init
"""

PATCH_PLUGIN_INSTANCE = """
import gc as _gc
import json as _json
import sys as _sys


def _forging(real):
    def _forged(self, line):
        if line.strip().startswith("{"):
            line = _json.dumps({**_json.loads(line), "outcome": "passed"})
        return real(self, line)

    return _forged


# The report plugin's class (already imported by the focused tests' conftest) and any live instance.
_plugin_class = getattr(_sys.modules.get("pi_course_report"), "ReportPlugin", None)
if _plugin_class is not None:
    _plugin_class._emit_line = _forging(_plugin_class._emit_line)
for _plugin in [o for o in _gc.get_objects() if type(o).__name__ == "ReportPlugin"]:
    _plugin._emit_line = _forging(type(_plugin)._emit_line).__get__(_plugin)
"""

ONLY_STUB_FAILURES = """
import _pytest.reports as _reports

_init = _reports.TestReport.__init__


def _forged_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.outcome == "failed" and "not implemented" in str(self.longrepr):
        self.outcome, self.longrepr = "passed", None


_reports.TestReport.__init__ = _forged_init
"""

ONLY_PUBLIC_NAMES = """
import _pytest.reports as _reports

_PUBLIC = {public!r}
_init = _reports.TestReport.__init__


def _forged_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.nodeid in _PUBLIC:
        self.outcome, self.longrepr = "passed", None


_reports.TestReport.__init__ = _forged_init
"""

SKIP_EVERY_TEST_BODY = """
import _pytest.python as _python

_python.Function.runtest = lambda self: None
"""

REWRITE_RECORDS = """
import atexit as _atexit
import json as _json
import os as _os

_PUBLIC = {public!r}


def _rewrite():
    path = _os.environ.get("PI_COURSE_REPORT_JSON", "")
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        lines = []
    out = []
    for line in lines:
        try:
            record = _json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "test":
            record["outcome"] = "passed"
        out.append(_json.dumps(record))
    for node, lab in _PUBLIC.items():
        out.append(_json.dumps({{"event": "test", "nodeid": node, "lab": lab, "outcome": "passed"}}))
    out.append(_json.dumps({{"event": "summary", "labs": [], "next": None}}))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\\n".join(out) + "\\n")


_atexit.register(_rewrite)
"""

PRINT_FAKE_RECORDS = """
import json as _json
import sys as _sys

for _node, _lab in {public!r}.items():
    _line = _json.dumps({{"event": "test", "nodeid": _node, "lab": _lab, "outcome": "passed"}})
    print(_line)
    print(_line, file=_sys.stderr)
print("MemoryError Resource temporarily unavailable BlockingIOError Timeout")
"""

COPY_PEER = """
for _source in {sources!r}:
    try:
        exec(compile(open(_source, encoding="utf-8").read(), "peer", "exec"), globals())
        break
    except OSError:
        pass
"""

# -- leaks and escapes, appended to a complete tool.py: any finding breaks the import ---------------

SNOOP = """
import ctypes as _ctypes
import glob as _glob
import os as _os
import socket as _socket

_libc = _ctypes.CDLL(None, use_errno=True)
_HITS = []
# The grader's session keyring holds a key (the fixture planted it): neither found nor listed.
if _libc.syscall({keyctl}, {search}, _ctypes.c_long({session}), b"user", b"grader-{secret}", 0) > 0:
    _HITS.append("the grader's session keyring")
try:
    if "grader-{secret}" in open("/proc/keys").read():
        _HITS.append("/proc/keys")
except OSError:
    pass
for _path in {paths!r}:
    if _os.path.exists(_path):
        _HITS.append("sees " + _path)
for _path in _glob.glob("/proc/[0-9]*/environ"):
    try:
        if b"{secret}" in open(_path, "rb").read():
            _HITS.append("environ " + _path)
    except OSError:
        pass
if _os.getuid() == 0 or _os.geteuid() == 0:
    _HITS.append("runs as uid 0")
# No capability to use or to regain (as root, the grader drops the run to a uid from 200000 on).
_STATUS = dict(_line.split(":", 1) for _line in open("/proc/self/status").read().splitlines() if ":" in _line)
for _set in ("CapPrm", "CapEff", "CapAmb") + (("CapInh", "CapBnd") if _os.getuid() >= 200000 else ()):
    if int(_STATUS[_set], 16):
        _HITS.append("capabilities in " + _set)
if _STATUS["NoNewPrivs"].strip() != "1":
    _HITS.append("privileges can be gained by exec")
for _key, _value in _os.environ.items():
    if "{secret}" in _value or _key == "VIRTUAL_ENV" or "{course}" in _value:
        _HITS.append("env " + _key)
try:
    _socket.create_connection(("1.1.1.1", 53), timeout=1).close()
    _HITS.append("network")
except OSError:
    pass
# Nothing on the host's disk is writable: not the copy (its tests, its package), not the sandbox root.
for _path in ("fx_course/_written.py", "tests/_written.py", "/grade/_written", "/_written"):
    try:
        open(_path, "w").close()
        _HITS.append("writes " + _path)
    except OSError:
        pass
if _HITS:
    raise RuntimeError("LEAK " + "; ".join(_HITS))
"""

WRITE = """
import os as _os
import signal as _signal
import time as _time

for _target in {targets!r}:
    try:
        with open(_target, "w") as _handle:
            _handle.write("escaped")
    except OSError:
        pass
for _folder, _size in (("/tmp", 2 * 1024 ** 3), ("/dev/shm", 1024 ** 3)):
    try:
        with open(_folder + "/fill", "wb") as _handle:
            _chunk = b"x" * (1 << 20)
            for _ in range(_size >> 20):
                _handle.write(_chunk)
    except OSError:
        pass
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        for _ in range(100):
            for _target in {targets!r}:
                try:
                    open(_target, "w").write("daemon")
                except OSError:
                    pass
            _time.sleep(0.1)
    _os.kill(_os.getpid(), _signal.SIGKILL)  # not os._exit: see the daemon in REACH
"""

ESCAPES = """
def _add(self):
    raise ValueError("\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mred\\u202eevil\\nforged,row")


Counter.add = _add
"""


# -- the learner graded next in the same slot: a run that reaches past its own end ----------------------

# Appended to a complete tool.py, one part per attacker: each reaches past the end of its own run, at
# the slot's fork server (PID 1) or at the learner graded next in the same slot.
REACH_HEAD = """
import ctypes as _ctypes
import os as _os
import resource as _resource
import signal as _signal
import time as _time

_libc = _ctypes.CDLL(None, use_errno=True)
_HITS = []
"""
REACH = {
    # Signals, ptrace and /proc at the fork server, then its limits, priority and CPUs changed from outside.
    "server": """
for _sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGSTOP, _signal.SIGKILL):
    try:
        _os.kill(1, _sig)
    except OSError:
        pass
if _libc.ptrace(16, 1, None, None) == 0:  # PTRACE_ATTACH
    _HITS.append("ptrace")
for _name in ("mem", "environ", "fd/0"):
    try:
        open("/proc/1/" + _name, "rb").close()
        _HITS.append("/proc/1/" + _name)
    except OSError:
        pass
for _change in (
    lambda: _resource.prlimit(1, _resource.RLIMIT_NOFILE, (16, 16)),
    lambda: _resource.prlimit(1, _resource.RLIMIT_AS, (64 << 20, 64 << 20)),
    lambda: _os.setpriority(_os.PRIO_PROCESS, 1, 19),
    lambda: _os.sched_setaffinity(1, {{0}}),
):
    try:
        _change()
    except OSError:
        pass
""",
    # A file in the private /tmp the next run shares.
    "tmp": """
with open("/tmp/planted-{secret}", "w") as _handle:
    _handle.write("for the next learner")
""",
    # System V shared memory and a POSIX message queue: they outlive every process.
    "ipc": """
_libc.shmget(0x50494331, 4096, 0o1000 | 0o666)  # IPC_CREAT
try:
    _libc.mq_open(b"/planted-{secret}", 0o100 | 0o2, 0o666, None)  # O_CREAT | O_RDWR
except AttributeError:
    pass
""",
    # Keys in the uid's keyrings and the session keyring: keyrings belong to no namespace.
    "keyring": """
for _ring in ({user}, {user_session}, {session}):
    if _libc.syscall({add_key}, b"user", b"planted-{secret}", b"x", 1, _ctypes.c_long(_ring)) > 0:
        _HITS.append("a key in keyring %d" % _ring)
""",
    # A daemon that kills every process it can see for 15 seconds.
    "daemon": """
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.closerange(0, 1024)
        for _ in range(300):
            try:
                _os.kill(-1, _signal.SIGKILL)
            except OSError:
                pass
            _time.sleep(0.05)
    # Not os._exit: the report plugin turns that into an error in this fork's copy of the run, which
    # would then race the daemon to write a report. A signal ends the fork the way an attacker would.
    _os.kill(_os.getpid(), _signal.SIGKILL)
# The run waits for its daemon: a run this small could otherwise end before a busy machine first
# schedules the daemon, and whether the daemon ever struck would be left to chance.
_time.sleep(10)
""",
}
REACH_TAIL = """
if _HITS:
    raise RuntimeError("REACHED " + "; ".join(_HITS))
"""

# Appended to a complete tool.py: fails the import when anything of an earlier learner is still there.
FIND_TRACES = """
import ctypes as _ctypes
import os as _os
import resource as _resource

_libc = _ctypes.CDLL(None, use_errno=True)
_TRACES = []
if _os.path.exists("/tmp/planted-{secret}"):
    _TRACES.append("file in /tmp")
if _libc.shmget(0x50494331, 0, 0) != -1:
    _TRACES.append("System V shared memory")
try:
    if _libc.mq_open(b"/planted-{secret}", 0) != -1:
        _TRACES.append("message queue")
except AttributeError:
    pass
if (
    _resource.getrlimit(_resource.RLIMIT_NOFILE)[1] <= 16
    or _resource.getrlimit(_resource.RLIMIT_AS)[1] <= 64 << 20
):
    _TRACES.append("limits")
# The grader's own nice value is every run's (`nice -n 5 pytest` grades at 5): only a higher one is a trace.
if (
    _os.getpriority(_os.PRIO_PROCESS, 0) > {nice}
    or len(_os.sched_getaffinity(0)) < min(2, _os.cpu_count() or 1)
):
    _TRACES.append("priority")
for _ring in ({user}, {user_session}, {session}):
    if _libc.syscall({keyctl}, {search}, _ctypes.c_long(_ring), b"user", b"planted-{secret}", 0) > 0:
        _TRACES.append("a key in keyring %d" % _ring)
if _TRACES:
    raise RuntimeError("TRACES " + "; ".join(_TRACES))
"""


@pytest.fixture(scope="module")
def next_learner(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """One slot (--jobs 1): each learner right after one who tried to reach past the end of their run."""
    root = tmp_path_factory.mktemp("next-learner")
    secret = secrets.token_hex(4)
    folders = []
    for part, payload in REACH.items():
        attacker = make_learner(course, checkpoint, root / f"reach-{part}", labs_from_solution=True)
        _append(attacker, (REACH_HEAD + payload + REACH_TAIL).format(secret=secret, **keyrings.NAMES))
        victim = make_learner(course, checkpoint, root / f"after-{part}", labs_from_solution=True)
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        _append(victim, FIND_TRACES.format(secret=secret, nice=nice, **keyrings.NAMES))
        folders += [attacker, victim]
    folders.append(make_learner(course, checkpoint, root / "starter-last"))
    grades = root / "grades.jsonl"
    code = cli.main(
        ["grade", *map(str, folders), "--json", str(grades), "--jobs", "1", "--timeout", "60", "--quiet", *FX]
    )
    records = [json.loads(line) for line in grades.read_text(encoding="utf-8").splitlines()]
    return {"code": {"value": code}, **{r["folder"].rsplit("/", 1)[-1]: r for r in records}}


def test_nothing_of_a_run_reaches_the_learner_graded_next(next_learner: dict[str, dict[str, Any]]) -> None:
    """After a run that signals and ptraces the fork server, changes its limits, plants files, IPC, keys and a
    killing daemon, is the next learner graded complete, untouched and unflagged?"""
    for part in REACH:
        record = next_learner[f"after-{part}"]
        assert (record["status"], record["message"], record["flags"]) == ("complete", "", []), part
        assert record["passed"] == record["total"] > 0


def test_a_run_that_reaches_past_its_end_gains_nothing(next_learner: dict[str, dict[str, Any]]) -> None:
    """Does the reaching submission find no way into the fork server, and score no more than its own honest
    run allows?"""
    for part in REACH:
        record = next_learner[f"reach-{part}"]
        assert "REACHED" not in record["message"]
        # The daemon also kills its own run (twice: a lost report is re-run once).
        assert record["status"] == ("crashed" if part == "daemon" else "complete"), (part, record["message"])
    last = next_learner["starter-last"]
    assert (last["status"], last["passed"], last["flags"]) == ("not started", 0, [])


def _public(course: Course, checkpoint: Checkpoint) -> dict[str, str | None]:
    """The public node ids a forger knows, with their labs (read from the reference run)."""
    from pi_course_kit.instructor.promises import run_tree

    result = run_tree(course, checkpoint, checkpoint.solution)
    return {t.nodeid: t.lab for t in result.tests}


def _append(folder: Path, payload: str) -> None:
    tool = folder / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + payload, encoding="utf-8")


@pytest.fixture(scope="module")
def attack(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Grade one class of honest, forging, leaking and malformed submissions in one batch."""
    root = tmp_path_factory.mktemp("redteam")
    secret = f"s3cret-{secrets.token_hex(6)}"
    public = _public(course, checkpoint)
    grades = root / "grades.jsonl"
    solution = course.root / checkpoint.solution / TEACHING
    honest = make_learner(course, checkpoint, root / "honest", labs_from_solution=True)
    starter = make_learner(course, checkpoint, root / "starter")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    forgeries = {
        "forge-test-report": PATCH_TEST_REPORT,
        "forge-plugin": PATCH_PLUGIN_INSTANCE,
        "forge-stub-failures": ONLY_STUB_FAILURES,
        "forge-public-names": ONLY_PUBLIC_NAMES.format(public=set(public)),
        "forge-skip-bodies": SKIP_EVERY_TEST_BODY,
        "forge-records": REWRITE_RECORDS.format(public=public),
        "forge-print": PRINT_FAKE_RECORDS.format(public=public),
        "copy-peer": COPY_PEER.format(sources=[str(honest / TEACHING), str(solution)]),
    }
    folders = [honest, starter]
    for name, payload in forgeries.items():
        folder = make_learner(course, checkpoint, root / name)
        _append(folder, payload)
        folders.append(folder)
    targets = [
        str(REPO / "scripts/pi_course_kit" / f"escape-{secret}"),
        str(course.root / "tests/focused" / f"escape-{secret}"),
        str(honest / f"escape-{secret}"),
        str(grades),
        f"/tmp/escape-{secret}",
    ]
    snoop = make_learner(course, checkpoint, root / "snoop", labs_from_solution=True)
    paths = [
        str(home / ".ssh"),
        str(home / ".aws"),
        str(course.root / "solutions"),
        str(course.root / "course.toml"),
        str(honest),
        str(snoop),
        str(grades.parent),
        "/home",
        "/etc/shadow",
        f"/proc/{os.getpid()}/environ",
        "/run",
        sys.prefix + "/pyvenv.cfg",
    ]
    _append(snoop, SNOOP.format(paths=paths, secret=secret, course=str(course.root), **keyrings.NAMES))
    writer = make_learner(course, checkpoint, root / "writer", labs_from_solution=True)
    _append(writer, WRITE.format(targets=targets))
    escapes = make_learner(course, checkpoint, root / "escape-sequences", labs_from_solution=True)
    _append(escapes, ESCAPES)
    folders += [snoop, writer, escapes]
    # Malformed submissions: each must be reported, none may stop the batch.
    hardlink = make_learner(course, checkpoint, root / "hard-link", labs_from_solution=True)
    try:
        os.link("/etc/shadow" if ROOT else "/etc/passwd", hardlink / "fx_course/shadow.txt")
    except OSError:
        os.link(hardlink / TEACHING, hardlink / "fx_course/again.py")
    deep = make_learner(course, checkpoint, root / "deep", labs_from_solution=True)
    handle = os.open(deep / "fx_course", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(40):  # 40 x 200 characters: far past PATH_MAX, so any path-based copy fails
        os.mkdir("d" * 200, dir_fd=handle)
        handle, previous = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle), handle
        os.close(previous)
    os.close(handle)
    sparse = make_learner(course, checkpoint, root / "sparse", labs_from_solution=True)
    for relative in ("pytest.ini", "tests/conftest.py", "fx_course/big.py"):
        with (sparse / relative).open("r+b" if (sparse / relative).exists() else "wb") as big:
            big.truncate(2 * 1024**3)
    sparse_meta = make_learner(course, checkpoint, root / "sparse-meta", labs_from_solution=True)
    with (sparse_meta / ".pi-course/meta.json").open("r+b") as big:
        big.truncate(2 * 1024**3)
    link = make_learner(course, checkpoint, root / "symlink", labs_from_solution=True)
    (link / "fx_course/secret.py").symlink_to("/etc/passwd")
    fifo = make_learner(course, checkpoint, root / "fifo", labs_from_solution=True)
    os.mkfifo(fifo / "fx_course/pipe.py")
    newline = make_learner(course, checkpoint, root / "new\nline,forged", labs_from_solution=True)
    odd = make_learner(course, checkpoint, Path(os.fsdecode(bytes(root) + b"/odd\xffname")))
    folders += [hardlink, deep, sparse, sparse_meta, link, fifo, newline, odd]
    after_honest = make_learner(course, checkpoint, root / "last-honest", labs_from_solution=True)
    folders.append(after_honest)
    before = {folder.name: tree_digest(folder) for folder in (honest, starter, snoop, writer)}
    memory_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    os.environ["PI_COURSE_REDTEAM_SECRET"] = secret
    # A key in the grader's session keyring, as an instructor's login may hold (Kerberos, say). The
    # test process first takes an anonymous session keyring of its own, so the key reaches no one else.
    keyrings.join_new_session_keyring()
    keyrings.add_user_key(f"grader-{secret}", secret, keyrings.SESSION_KEYRING)
    try:
        code = cli.main(
            [
                "grade",
                *map(str, folders),
                *("--json", str(grades), "--csv", str(root / "grades.csv")),
                *("--jobs", "2", "--timeout", "40", "--memory", "768"),
                *FX,
            ]
        )
    finally:
        del os.environ["PI_COURSE_REDTEAM_SECRET"]
    grades_text = grades.read_text(encoding="utf-8")
    threading.Event().wait(2.0)  # give a surviving daemon the chance to rewrite the grades
    records = [json.loads(line) for line in grades.read_text(encoding="utf-8").splitlines()]
    escaped = [t for t in targets if t != str(grades) and os.path.lexists(t)]
    for target in escaped:
        Path(target).unlink()
    return {
        "code": code,
        "records": {r["folder"].rsplit("/", 1)[-1]: r for r in records},
        "order": [r["folder"].rsplit("/", 1)[-1] for r in records],
        "text": grades_text,
        "text_after": grades.read_text(encoding="utf-8"),
        "csv": list(csv.DictReader((root / "grades.csv").open(encoding="utf-8-sig"))),
        "escaped": escaped,
        "before": before,
        "after": {folder.name: tree_digest(folder) for folder in (honest, starter, snoop, writer)},
        "memory_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory_before,
        "forgeries": list(forgeries),
        "count": len(folders),
    }


def rec(attack: dict[str, Any], name: str) -> dict[str, Any]:
    """One learner's record by folder name."""
    value: dict[str, Any] = attack["records"][name]
    return value


def test_honest_work_and_the_starter_grade_as_before(attack: dict[str, Any]) -> None:
    """Amid the attacks, is the honest folder complete and the untouched starter at 0?"""
    assert rec(attack, "honest")["status"] == "complete"
    assert rec(attack, "honest")["passed"] == rec(attack, "honest")["total"] > 0
    assert rec(attack, "last-honest")["status"] == "complete"
    assert (rec(attack, "starter")["status"], rec(attack, "starter")["passed"]) == ("not started", 0)
    for name in ("honest", "starter"):
        # "tests edited" can appear when the kit's own test files change while the class is graded.
        assert [f for f in rec(attack, name)["flags"] if not f.startswith("tests edited")] == []


@pytest.mark.parametrize(
    "name",
    [
        "forge-test-report",
        "forge-plugin",
        "forge-stub-failures",
        "forge-public-names",
        "forge-skip-bodies",
        "forge-records",
        "forge-print",
        "copy-peer",
    ],
)
def test_no_forgery_raises_a_score(attack: dict[str, Any], name: str) -> None:
    """Does each forgery score no more than the untouched starter (or get flagged as tampering)?"""
    record = rec(attack, name)
    assert record["passed"] <= rec(attack, "starter")["passed"]
    assert all(lab["passed"] == 0 for lab in record["labs"])
    assert record["status"] in ("tampering", "not started", "crashed", "error")


@pytest.mark.parametrize(
    "name", ["forge-test-report", "forge-plugin", "forge-stub-failures", "forge-skip-bodies", "forge-records"]
)
def test_forgeries_that_turn_failures_into_passes_are_flagged_as_tampering(
    attack: dict[str, Any], name: str
) -> None:
    """Do the secret controls catch every generic failure-to-pass forgery?"""
    record = rec(attack, name)
    # Another status says why in its message and flags (a CI run once saw `error` here, not seen again).
    assert record["status"] == "tampering", (record["status"], record.get("message"), record["flags"])
    assert any(flag.startswith("tampering") for flag in record["flags"])


def test_printed_text_never_becomes_flags_or_verdicts(attack: dict[str, Any]) -> None:
    """Do fake record lines and alarming words on stdout leave the record untouched?"""
    record = rec(attack, "forge-print")
    assert record["flags"] == []
    assert record["status"] == "not started"


def test_learner_code_sees_no_secret_home_peer_solution_or_network(attack: dict[str, Any]) -> None:
    """Does code hunting ~/.ssh, ~/.aws, /proc environ, the grader's keys, solutions/, classmates, the
    network, a writable disk find nothing?"""
    record = rec(attack, "snoop")
    assert record["status"] == "complete", record["message"]
    assert "LEAK" not in attack["text"]


def test_writes_daemons_and_fills_are_contained(attack: dict[str, Any]) -> None:
    """Do writes into the kit, the focused tests, a peer and the grades (also by a daemon) all fail?"""
    assert attack["escaped"] == []
    assert attack["text_after"] == attack["text"]
    assert "escaped" not in attack["text"] and "daemon" not in attack["text"]
    assert rec(attack, "writer")["status"] == "complete"


def test_learner_folders_stay_byte_identical(attack: dict[str, Any]) -> None:
    """Are the graded folders unchanged, hostile ones included?"""
    assert attack["after"] == attack["before"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("hard-link", "hard link"),
        ("deep", "nested deeper"),
        ("symlink", "symbolic link"),
        ("fifo", "not a regular file"),
        ("sparse", "bytes, more than"),
    ],
)
def test_unsafe_submissions_are_ungradable_with_a_reason(
    attack: dict[str, Any], name: str, reason: str
) -> None:
    """Is each unsafe submission reported as ungradable, naming why, without being copied?"""
    record = rec(attack, name)
    assert record["status"] == "ungradable"
    assert reason in record["message"]
    assert "root:" not in attack["text"]


def test_a_huge_meta_json_is_refused_without_reading_it(attack: dict[str, Any]) -> None:
    """Is a 2 GiB sparse meta.json refused, and did the grader stay far below its size in memory?"""
    assert rec(attack, "sparse-meta")["status"] == "skipped"
    assert "bytes, more than" in rec(attack, "sparse-meta")["message"]
    assert attack["memory_growth"] < 512 * 1024  # ru_maxrss is in KiB: under 512 MiB for all of it


def test_one_bad_submission_never_stops_the_batch(attack: dict[str, Any]) -> None:
    """Does every folder get a JSON record and a CSV row, in order, odd names included?"""
    assert attack["code"] in (0, 1)
    assert len(attack["order"]) == len(attack["csv"]) == attack["count"]
    assert attack["order"][-1] == "last-honest"


def test_odd_folder_names_are_escaped_and_forge_no_row(attack: dict[str, Any]) -> None:
    """Are newline and 0xff folder names escaped in the records, so no extra row appears?"""
    assert "new\\x0aline,forged" in attack["records"]
    assert "odd\\udcffname" in attack["records"]
    assert all("\n" not in row["learner"] and "\n" not in row["folder"] for row in attack["csv"])


def test_escape_sequences_never_reach_the_records(attack: dict[str, Any]) -> None:
    """Is raw ESC, BEL and a bidi override printed by learner code escaped in the records?"""
    assert "\x1b" not in attack["text"] and "\x07" not in attack["text"] and "\u202e" not in attack["text"]
    assert any("\\x1b[2J" in lab["first_failure"] for lab in rec(attack, "escape-sequences")["labs"])


def test_a_swap_to_a_symlink_during_the_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a folder and a file are swapped for symlinks between listing and opening, is the copy refused?"""
    source = tmp_path / "learner"
    (source / "pi_course/sub").mkdir(parents=True)
    (source / "pi_course/sub/a.py").write_text("a = 1\n", encoding="utf-8")
    (source / "pi_course/b.py").write_text("b = 1\n", encoding="utf-8")
    real_stat = os.stat

    def racing_stat(name: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        found = real_stat(name, *args, **kwargs)
        # The attacker wins every race: right after the check, the entry becomes a symlink to /etc.
        where = source / "pi_course" / str(name)
        if str(name) in ("sub", "b.py") and not where.is_symlink():
            shutil.rmtree(where) if where.is_dir() else where.unlink()
            where.symlink_to("/etc" if str(name) == "sub" else "/etc/passwd")
        return found

    monkeypatch.setattr(os, "stat", racing_stat)  # the same module object copying uses
    dest = tmp_path / "copy"
    dest.mkdir()
    with pytest.raises(copying.Refused, match=r"symlink|plain folder"):
        copying.copy_package(source, "pi_course", dest)
    copied = [p.name for p in dest.rglob("*")]
    assert "passwd" not in copied and "shadow" not in copied


def _admin_tool(name: str) -> str:
    """An administration command by full path: root's PATH may lack the sbin folders (`env -i`, cron)."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or name


@pytest.mark.skipif(not ROOT or bool(os.environ.get(INNER)), reason="creates a user: needs root")
def test_the_red_team_suite_holds_for_an_unprivileged_instructor(tmp_path: Path) -> None:
    """Run as a fresh unprivileged user, does this whole module pass there too?"""
    name = f"pi-rt-{secrets.token_hex(4)}"
    subprocess.run(
        [_admin_tool("useradd"), "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    try:
        uid, gid = pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
        # tmp_path's parents are closed to other users: in a private mount namespace, the user's
        # folder appears at /mnt/pi-rt (a tmpfs over /mnt there, nothing changes outside).
        work = tmp_path / "unprivileged"
        work.mkdir()
        os.chown(work, uid, gid)
        shown = "/mnt/pi-rt"
        prepare = (
            f"mount -t tmpfs -o mode=0755,size=1m tmpfs /mnt && mkdir {shown} && "
            f"mount --bind {work} {shown} && "
        )
        python = os.path.realpath(sys.executable)
        blocked = next(
            (p for p in reversed(Path(python).parents) if p != Path("/") and not os.stat(p).st_mode & 0o001),
            None,
        )
        if blocked is not None:
            # The interpreter lives under a folder others cannot enter (/root/.pyenv): replace that
            # folder by an open tmpfs, in the private namespace only, and bind the interpreter's part back.
            inner = blocked / Path(python).relative_to(blocked).parts[0]
            keep = tmp_path / "keep"
            keep.mkdir()
            prepare += (
                f"mount --bind {inner} {keep} && mount -t tmpfs -o mode=0755,size=1m tmpfs {blocked} && "
                f"mkdir -p {inner} && mount --bind {keep} {inner} && "
            )
        repo = Path(__file__).resolve().parents[2]
        command = (
            f"{prepare}cd {repo} && exec setpriv --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all "
            f"env -i HOME={shown} PATH=/usr/bin:/bin {INNER}=1 TMPDIR={shown} "
            f"{sys.executable} -m pytest {Path(__file__).resolve()} -q -p no:cacheprovider -n 0 "
            f"--basetemp={shown}/basetemp -x"
        )
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert re.search(r"\d+ passed", done.stdout)
        assert " failed" not in done.stdout
    finally:
        subprocess.run([_admin_tool("userdel"), name], check=False, capture_output=True)
