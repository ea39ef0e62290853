"""Red team, second series: the host around the sandbox, and what a run leaves for the next learner.

One slot (--jobs 1) grades, one after another: a learner who tries to leave a set-user-ID program on
the host through every descriptor it holds, one who tries to make a user namespace, and learners who
nest 1,500 folders in /tmp, hide /tmp or /dev/mqueue from the server's check, or idle the server's
I/O priority, each followed by a learner who looks for what they left. After every run the test
looks at the host: the scratch folder's modes, set-user-ID files, and (as root) whether another local
user can read the staged tree. Under root the module runs again as a fresh unprivileged user
(`test_the_second_series_holds_for_an_unprivileged_instructor`), where the hiding attacks really work
and must make the server quit.
"""

from __future__ import annotations

import os
import platform
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import grader as grading
from pi_course_kit.instructor.grade.sandbox import Limits, Sandboxed
from test_grade import TEACHING, make_learner

ROOT = os.geteuid() == 0
INNER = "PI_COURSE_ATTACKS2_INNER"
NOBODY = 65534
# asm/unistd.h: ioprio_set, ioprio_get and clone3 on the machines the kit grades on.
IOPRIO_SET, IOPRIO_GET, CLONE3 = {"x86_64": (251, 252, 435), "aarch64": (30, 31, 435)}[platform.machine()]
pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

# -- attacks, each appended to a complete counter.py ---------------------------------------------------

HEAD = """
import ctypes as _ctypes
import os as _os
import subprocess as _subprocess
import threading as _threading

_libc = _ctypes.CDLL(None, use_errno=True)
_HITS = []
"""
TAIL = """
if _HITS:
    raise RuntimeError("HITS " + "; ".join(_HITS))
"""

# Every descriptor the run holds (records, output, anything inherited): made executable and set-user-ID,
# by descriptor and through its /proc link; and a set-user-ID program made in /tmp.
SETUID = """
_SCRIPT = b"#!/bin/sh\\nid\\n"
for _name in _os.listdir("/proc/self/fd"):
    _fd = int(_name)
    try:
        _os.write(_fd, _SCRIPT)
    except OSError:
        pass
    for _chmod in (lambda: _os.fchmod(_fd, 0o4755), lambda: _os.chmod("/proc/self/fd/%d" % _fd, 0o4755)):
        try:
            _chmod()
        except OSError:
            pass
for _folder in ("/grade/work/tree", "/grade/work", "/grade/kit"):
    try:
        _os.chmod(_folder, 0o4777)
        _HITS.append("chmod " + _folder)
    except OSError:
        pass
try:
    with open("/tmp/setuid", "wb") as _handle:
        _handle.write(_SCRIPT)
    _os.chmod("/tmp/setuid", 0o4755)
except OSError:
    pass
"""

# A user namespace would give uid 0 and every capability inside it.
USERNS = """
_CLONE_NEWUSER = 0x10000000
if _libc.unshare(_CLONE_NEWUSER) == 0:
    _HITS.append("unshare(CLONE_NEWUSER)")
_pid = _libc.syscall({clone3}, None, 0)
if _pid == 0:
    _os._exit(0)
if _pid > 0 or _ctypes.get_errno() != 38:  # ENOSYS: the C library then falls back to clone
    _HITS.append("clone3 answered %d/%d" % (_pid, _ctypes.get_errno()))
try:
    _done = _subprocess.run(
        ["unshare", "--user", "--map-root-user", "id", "-u"], capture_output=True, text=True
    )
    if _done.returncode == 0:
        _HITS.append("unshare -U: uid " + _done.stdout.strip())
except OSError:
    pass
# Threads still start: glibc falls back from clone3 to clone.
_thread = _threading.Thread(target=lambda: None)
_thread.start()
_thread.join()
"""

# 1,500 nested folders in the private /tmp, a file at the bottom: the server's clean-up must survive.
DEEP = """
_here = _os.open("/tmp", _os.O_RDONLY)
for _ in range(1500):
    _os.mkdir("d", dir_fd=_here)
    _below = _os.open("d", _os.O_RDONLY, dir_fd=_here)
    _os.close(_here)
    _here = _below
_os.close(_os.open("bottom", _os.O_WRONLY | _os.O_CREAT, 0o600, dir_fd=_here))
"""

# /tmp made unlistable, with a planted file and a closed folder: "cannot look" must not read as "empty".
HIDE_TMP = """
with open("/tmp/planted-{secret}", "w") as _handle:
    _handle.write("for the next learner")
_os.makedirs("/tmp/closed/inner")
open("/tmp/closed/inner/file", "w").close()
_os.chmod("/tmp/closed/inner", 0)
_os.chmod("/tmp/closed", 0)
try:
    _os.chmod("/tmp", 0)
except OSError:
    pass
"""

# A POSIX message queue hidden behind a chmodded /dev/mqueue.
HIDE_MQUEUE = """
_libc.mq_open(b"/planted-{secret}", 0o100 | 0o2, 0o666, None)  # O_CREAT | O_RDWR
try:
    _os.chmod("/dev/mqueue", 0)
except OSError:
    pass
"""

# The server's I/O priority set to idle from outside: every later run would inherit it.
IOPRIO = """
_libc.syscall({ioprio_set}, 1, 1, 3 << 13)  # IOPRIO_WHO_PROCESS, PID 1, IOPRIO_CLASS_IDLE
"""

# The learner graded next: fails its import when anything of the previous one is still there.
FIND = """
for _folder in ("/tmp", "/dev/mqueue"):
    try:
        _os.chmod(_folder, 0o1777)  # the same uid (grading without root) could open them again
    except OSError:
        pass
try:
    if _os.listdir("/tmp"):
        _HITS.append("/tmp holds " + ",".join(sorted(_os.listdir("/tmp"))[:3]))
except OSError:
    _HITS.append("/tmp unlistable")
try:
    if _libc.mq_open(b"/planted-{secret}", 0) != -1:
        _HITS.append("message queue")
except AttributeError:
    pass
if (_libc.syscall({ioprio_get}, 1, 0) >> 13) == 3:
    _HITS.append("idle I/O priority")
"""

ATTACKS = {
    "setuid": SETUID,
    "userns": USERNS,
    "deep": DEEP,
    "hide-tmp": HIDE_TMP,
    "hide-mqueue": HIDE_MQUEUE,
    "ioprio": IOPRIO,
}
# Attacks that, without root, change what the server sees or shares: it must quit after them.
DIRTYING = ("hide-tmp", "hide-mqueue", "ioprio")


@dataclass
class Seen:
    """What the test saw on the host right after one run, before the grader removed the copy."""

    run: Sandboxed
    starts: int
    setuid_files: list[str] = field(default_factory=list)
    modes: dict[str, int] = field(default_factory=dict)
    tree_owner: int = -1
    slot_uid: int | None = None
    nobody_read: str = ""


def own_flags(record: grading.LearnerRecord) -> list[str]:
    """The record's flags but "tests edited", which appears when the kit's test files change meanwhile."""
    return [flag for flag in record.flags if not flag.startswith("tests edited")]


def setuid_files(folder: Path) -> list[str]:
    """Every file below `folder` with a set-user-ID or set-group-ID bit, or executable for anyone."""
    found = []
    for parent, _, files in os.walk(folder):
        for name in files:
            path = Path(parent, name)
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID | 0o111):
                found.append(f"{path} {stat.filemode(mode)}")
    return found


def read_as_nobody(path: Path) -> str:
    """What a local user with no rights gets when reading `path`: its text, or "" when refused."""
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "cat", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout if done.returncode == 0 else ""


def watch(grader: grading.Grader, monkeypatch: pytest.MonkeyPatch) -> list[Seen]:
    """Look at the host after every run of `grader`; the list fills as runs end."""
    real_run = grader._run
    seen: list[Seen] = []

    def run(
        tree: Path, out: Path, slot: grading.Slot, order_seed: str, skipped: Sequence[str] = ()
    ) -> Sandboxed:
        result = real_run(tree, out, slot, order_seed, skipped)
        after = Seen(result, slot.server.starts if slot.server else 0)
        after.setuid_files = setuid_files(grader.scratch)
        for name, path in {
            "scratch": grader.scratch,
            "tree": tree,
            "report": out / "report.jsonl",
            "output": out / "output.log",
        }.items():
            after.modes[name] = stat.S_IMODE(path.lstat().st_mode)
        after.tree_owner, after.slot_uid = tree.lstat().st_uid, slot.uid
        if ROOT:
            for secret in (tree / TEACHING, *tree.glob("tests/test_*.py")):
                after.nobody_read += read_as_nobody(secret)
        seen.append(after)
        return result

    monkeypatch.setattr(grader, "_run", run)
    return seen


@pytest.fixture(scope="module")
def attacked(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Each attacker and the learner after it, graded in one slot; the records and what the host showed."""
    root = tmp_path_factory.mktemp("attacks2")
    secret = secrets.token_hex(4)
    names = {"ioprio_get": IOPRIO_GET, "ioprio_set": IOPRIO_SET, "clone3": CLONE3, "secret": secret}
    folders: list[Path] = []
    for name, attack in ATTACKS.items():
        attacker = make_learner(course, checkpoint, root / name, labs_from_solution=True)
        _append(attacker, (HEAD + attack + TAIL).format(**names))
        after = make_learner(course, checkpoint, root / f"after-{name}", labs_from_solution=True)
        _append(after, (HEAD + FIND + TAIL).format(**names))
        folders += [attacker, after]
    grader = grading.Grader(course, Limits(wall_seconds=60, cpu_seconds=60), jobs=1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        seen = watch(grader, monkeypatch)
        try:
            grader.reference(checkpoint)
            found: dict[str, Any] = {}
            for folder in folders:
                first = len(seen)
                record = grader.grade_one(folder)
                found[folder.name] = {"record": record, "seen": seen[first:]}
            [slot] = grader.all_slots
            assert slot.server is not None
            found["server log"] = slot.server.log.read_text(encoding="utf-8", errors="replace")
            yield found
        finally:
            grader.close()


def _append(folder: Path, payload: str) -> None:
    tool = folder / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + payload, encoding="utf-8")


def test_a_run_leaves_no_set_user_id_program_on_the_host(attacked: dict[str, Any]) -> None:
    """After a run that writes a script into every descriptor it holds and makes it 04755, is no file under
    the scratch set-user-ID or executable, and are the records 0600?"""
    graded = attacked["setuid"]
    assert graded["record"].status == grading.COMPLETE, graded["record"].message
    for seen in graded["seen"]:
        assert seen.setuid_files == []
        assert (seen.modes["report"], seen.modes["output"]) == (0o600, 0o600)


def test_a_run_in_a_fresh_sandbox_leaves_no_set_user_id_program_either(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With --fresh-sandbox (bwrap per run, its output inherited through bwrap), is no file under the scratch
    set-user-ID or executable after the same attack?"""
    attacker = make_learner(course, checkpoint, tmp_path / "setuid", labs_from_solution=True)
    _append(attacker, HEAD + SETUID + TAIL)
    grader = grading.Grader(course, Limits(wall_seconds=60, cpu_seconds=60), jobs=1, fresh_sandboxes=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        seen = watch(grader, monkeypatch)
        try:
            record = grader.grade_one(attacker)
        finally:
            grader.close()
    assert record.status == grading.COMPLETE, record.message
    assert seen and all(s.setuid_files == [] for s in seen)
    assert all((s.modes["report"], s.modes["output"], s.modes["tree"]) == (0o600, 0o600, 0o700) for s in seen)


def test_classmates_staged_trees_are_closed_to_other_users(attacked: dict[str, Any]) -> None:
    """Is every staged tree 0700 under a 0700 scratch (owned by the slot's uid under root), and can a user
    with no rights read neither a learner's code nor the disguised tests?"""
    runs = [seen for graded in attacked.values() if isinstance(graded, dict) for seen in graded["seen"]]
    assert runs
    for seen in runs:
        assert (seen.modes["scratch"], seen.modes["tree"]) == (0o700, 0o700)
        assert seen.tree_owner == (seen.slot_uid if ROOT else os.getuid())
        assert seen.nobody_read == ""


def test_no_user_namespace_can_be_made_inside_the_sandbox(attacked: dict[str, Any]) -> None:
    """Do unshare(CLONE_NEWUSER), clone3 and `unshare -U` all fail inside the sandbox, while threads still
    start?"""
    record = attacked["userns"]["record"]
    assert "HITS" not in record.message
    assert record.status == grading.COMPLETE, record.message


def test_the_server_survives_1500_nested_folders(attacked: dict[str, Any]) -> None:
    """After 1,500 nested folders in /tmp, is that learner graded complete (no lost run), the next one too,
    and did the server never fail on the walk?"""
    assert attacked["deep"]["record"].status == grading.COMPLETE, attacked["deep"]["record"].message
    assert own_flags(attacked["deep"]["record"]) == []
    after = attacked["after-deep"]["record"]
    assert (after.status, after.message) == (grading.COMPLETE, "")
    assert "RecursionError" not in attacked["server log"] and "Traceback" not in attacked["server log"]


@pytest.mark.parametrize("attack", ["hide-tmp", "hide-mqueue", "ioprio"])
def test_what_a_run_hides_or_changes_never_reaches_the_next_learner(
    attacked: dict[str, Any], attack: str
) -> None:
    """After /tmp or /dev/mqueue was made unlistable, or the server's I/O priority idled, is the next learner
    complete and clean, and (without root, where the attack works) did the server quit?"""
    after = attacked[f"after-{attack}"]
    assert (after["record"].status, after["record"].message) == (grading.COMPLETE, ""), attack
    if not ROOT and attack in DIRTYING:
        before = attacked[attack]["seen"][-1].starts
        assert after["seen"][0].starts == before + 1, "the server served on after a run it could not check"


def _admin_tool(name: str) -> str:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or name


def interpreter_reachable(tmp_path: Path) -> str:
    """Shell commands that, in a private mount namespace, open the interpreter to every user.

    When it lives under a folder others cannot enter (/root/.pyenv), that folder is replaced by an
    open tmpfs, in the private namespace only, and the interpreter's part bound back.
    """
    python = os.path.realpath(sys.executable)
    blocked = next(
        (p for p in reversed(Path(python).parents) if p != Path("/") and not os.stat(p).st_mode & 0o001),
        None,
    )
    if blocked is None:
        return ""
    inner_dir = blocked / Path(python).relative_to(blocked).parts[0]
    keep = tmp_path / "keep"
    keep.mkdir()
    return (
        f"mount --bind {inner_dir} {keep} && mount -t tmpfs -o mode=0755,size=1m tmpfs {blocked} && "
        f"mkdir -p {inner_dir} && mount --bind {keep} {inner_dir} && "
    )


def run_as_new_user(test_file: Path, inner: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run one kit test module as a fresh unprivileged user (root only), as test_grade_redteam does."""
    name = f"pi-a2-{secrets.token_hex(4)}"
    subprocess.run(
        [_admin_tool("useradd"), "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    try:
        uid, gid = pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid
        work = tmp_path / "unprivileged"
        work.mkdir()
        os.chown(work, uid, gid)
        shown = "/mnt/pi-a2"
        prepare = (
            f"mount -t tmpfs -o mode=0755,size=1m tmpfs /mnt && mkdir {shown} && "
            f"mount --bind {work} {shown} && "
        )
        prepare += interpreter_reachable(tmp_path)
        repo = Path(__file__).resolve().parents[2]
        command = (
            f"{prepare}cd {repo} && exec setpriv --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all "
            f"env -i HOME={shown} PATH=/usr/bin:/bin {inner}=1 TMPDIR={shown} "
            f"{sys.executable} -m pytest {test_file} -q -p no:cacheprovider -n 0 "
            f"--basetemp={shown}/basetemp -x"
        )
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run([_admin_tool("userdel"), name], check=False, capture_output=True)


@pytest.mark.skipif(not ROOT or bool(os.environ.get(INNER)), reason="creates a user: needs root")
def test_the_second_series_holds_for_an_unprivileged_instructor(tmp_path: Path) -> None:
    """Run as a fresh unprivileged user (where hiding /tmp and idling the server really work), does this
    module pass there too?"""
    done = run_as_new_user(Path(__file__).resolve(), INNER, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout
    # Only the test that starts the user is skipped there: none of the attacks.
    assert re.search(r"\b1 skipped", done.stdout), done.stdout[-2000:]
