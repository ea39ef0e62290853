"""Grading contains hostile or broken learner code: secrets, escapes, loops, memory, processes, os._exit."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import keyrings
import pytest
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import bwrap, sandbox, seccomp
from pi_course_kit.instructor.grade.bwrap import FIRST_UID, UID_SLOTS
from pi_course_kit.instructor.grade.grader import Grader
from test_grade import TEACHING, make_learner, tree_digest

WALL_SECONDS = 20
JOBS = 2
ROOT = os.geteuid() == 0
SECRET_NAME = "PI_COURSE_GRADE_TEST_SECRET"

SNOOP = """
import glob as _glob
import os as _os

_HITS = [f"{k}={v}" for k, v in _os.environ.items() if "SECRET" in k or "TOKEN" in k or "KEY" in k]
for _path in _glob.glob("/proc/*/environ"):
    try:
        with open(_path, "rb") as _handle:
            _data = _handle.read()
    except OSError:
        continue
    if b"SECRET" in _data:
        _HITS.append(_path + ":" + _data.decode("utf-8", "replace"))


def _leak(self):
    raise ValueError("leak:" + (";".join(_HITS) or "nothing"))


Counter.add = _leak
"""

ESCAPE = """
for _target in {targets!r}:
    try:
        with open(_target, "w") as _handle:
            _handle.write("escaped")
    except OSError:
        pass
"""

LOOP = "\nwhile True:\n    pass\n"
MEMORY = "\n_blob = bytearray(8 * 1024 ** 3)\n"
SPAWN = """
import os as _os
import time as _time

_children = 0
for _ in range(400):
    try:
        _pid = _os.fork()
    except OSError:
        break
    if _pid == 0:
        _time.sleep(120)
        _os._exit(0)
    _children += 1
raise RuntimeError(f"forked {_children} of 400")
"""
EXIT = "\nimport os as _os\n\n_os._exit(3)\n"
# posix._exit is os._exit under another name: it slips past the report plugin's guard and ends the run.
HARD_EXIT = "\nimport posix as _posix\n\n_posix._exit(3)\n"


def sandbox_processes(patience: float = 10.0) -> list[str]:
    """Processes still running under one of the grader's sandbox uids, after the kernel's clean-up."""
    deadline = time.monotonic() + patience
    while (left := _sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _sandbox_processes() -> list[str]:
    left = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        uid = int(uid_line.split()[1])
        if uid in range(FIRST_UID, FIRST_UID + UID_SLOTS) and not _claimed_elsewhere(uid):
            left.append(status.parent.name)
    return left


def _claimed_elsewhere(uid: int) -> bool:
    """Whether another grading batch (a concurrent run) holds this sandbox uid right now."""
    try:
        pool = bwrap.UidPool(0)
        handle = os.open(pool.lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(handle)
    return False


@pytest.fixture(scope="module")
def hostile(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Grade one good and six hostile learners together, with a secret in the grader's environment."""
    root = tmp_path_factory.mktemp("hostile")
    token = secrets.token_hex(8)
    secret_value = f"s3cret-{token}"
    escape_dir = root / "escape"
    escape_dir.mkdir()
    targets = [
        f"/tmp/pi-course-escape-{token}",
        str(course.root / f"pi-course-escape-{token}"),
        str(root / "good" / f"escape-{token}"),
        str(escape_dir / f"escape-{token}"),
        f"/root/pi-course-escape-{token}",
    ]
    payloads = {
        "good": "",
        "secret": SNOOP,
        "escape": ESCAPE.format(targets=targets),
        "loop": LOOP,
        "memory": MEMORY,
        "spawn": SPAWN,
        "exit": EXIT,
        "hard-exit": HARD_EXIT,
    }
    folders = []
    for name, payload in payloads.items():
        folder = make_learner(course, checkpoint, root / name, labs_from_solution=True)
        tool = folder / TEACHING
        tool.write_text(tool.read_text(encoding="utf-8") + payload, encoding="utf-8")
        folders.append(folder)
    before = {folder.name: tree_digest(folder) for folder in folders}
    json_path = root / "grades.jsonl"
    # The grader's scratch goes into a folder of this test's own, so other runs' scratch never counts.
    scratch = root / "scratch"
    scratch.mkdir()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(scratch)
    os.environ[SECRET_NAME] = secret_value
    try:
        code = cli.main(
            [
                "grade",
                *map(str, folders),
                "--json",
                str(json_path),
                "--jobs",
                str(JOBS),
                "--timeout",
                str(WALL_SECONDS),
                "--memory",
                "512",
                *FX,
            ]
        )
    finally:
        tempfile.tempdir = saved_tempdir
        del os.environ[SECRET_NAME]
        escaped = [target for target in targets if os.path.lexists(target)]
        for target in escaped:
            Path(target).unlink()
    text = json_path.read_text(encoding="utf-8")
    return {
        "code": code,
        "text": text,
        "records": {Path(r["folder"]).name: r for r in map(json.loads, text.splitlines())},
        "secret": secret_value,
        "escaped": escaped,
        "before": before,
        "after": {folder.name: tree_digest(folder) for folder in folders},
        "left": sandbox_processes() if ROOT else [],
        "scratch_left": sorted(scratch.iterdir()),
    }


def record(hostile: dict[str, Any], name: str) -> dict[str, Any]:
    """One learner's record."""
    records = hostile["records"]
    assert isinstance(records, dict)
    value: dict[str, Any] = records[name]
    return value


@pytest.mark.sandbox
def test_the_good_learner_is_graded_normally(hostile: dict[str, Any]) -> None:
    """Next to six hostile folders, is the good learner still complete?"""
    assert hostile["code"] == 0
    assert record(hostile, "good")["status"] == "complete"


@pytest.mark.sandbox
def test_an_environment_secret_never_reaches_learner_code(hostile: dict[str, Any]) -> None:
    """Does learner code that hunts os.environ and /proc/*/environ find nothing of the grader's secret?"""
    secret_record = record(hostile, "secret")
    labs = secret_record["labs"]
    assert isinstance(labs, list)
    assert labs[0]["first_failure"].startswith("leak:nothing")
    assert str(hostile["secret"]) not in str(hostile["text"])


@pytest.mark.sandbox
def test_writes_outside_the_copy_do_not_happen(hostile: dict[str, Any]) -> None:
    """Does none of the escape targets (/tmp, the repo, another learner, /root) exist after grading?"""
    assert hostile["escaped"] == []
    assert record(hostile, "escape")["status"] == "complete"
    assert record(hostile, "escape")["sandbox"] == bwrap.BWRAP


@pytest.mark.sandbox
def test_an_endless_loop_is_stopped_at_the_wall_time(hostile: dict[str, Any]) -> None:
    """Is an endless loop at import stopped and reported as one, with nothing passed?"""
    loop = record(hostile, "loop")
    # The report plugin may stop an import that never ends first (its own limit), else the wall time does.
    assert loop["status"] in ("timeout", "error")
    assert loop["status"] == "timeout" or any(w in loop["message"] for w in ("endless loop", "死循环"))
    assert loop["passed"] == 0


@pytest.mark.sandbox
def test_a_huge_allocation_hits_the_memory_limit(hostile: dict[str, Any]) -> None:
    """Does allocating 8 GiB fail inside the sandbox and get reported for that learner?"""
    memory = record(hostile, "memory")
    assert memory["status"] == "error"
    assert "MemoryError" in memory["message"]


@pytest.mark.sandbox
def test_spawning_many_processes_is_limited_and_cleaned_up(hostile: dict[str, Any]) -> None:
    """Does a fork loop hit the process limit, and is no sandbox process left afterwards?"""
    spawn = record(hostile, "spawn")
    assert spawn["status"] == "error"
    message = str(spawn["message"])
    assert "forked " in message
    forked = int(message.split("forked ")[1].split(" of")[0])
    assert forked < 400
    assert hostile["left"] == []


@pytest.mark.sandbox
def test_os_exit_is_contained_and_reported(hostile: dict[str, Any]) -> None:
    """Is a learner whose code calls os._exit(3) at import reported, with the exit named, and not graded?"""
    exited = record(hostile, "exit")
    assert exited["status"] in ("error", "crashed")
    assert "os._exit(3)" in str(exited["message"]) or "exit code 3" in str(exited["message"])
    assert exited["passed"] == 0


@pytest.mark.sandbox
def test_a_hard_exit_is_reported_as_a_crash(hostile: dict[str, Any]) -> None:
    """Is a run that ends through posix._exit(3), with no report, a crash with that exit code?"""
    crashed = record(hostile, "hard-exit")
    assert crashed["status"] == "crashed"
    assert "exit code 3" in str(crashed["message"])


@pytest.mark.sandbox
def test_hostile_folders_are_left_byte_identical(hostile: dict[str, Any]) -> None:
    """Is every folder, hostile or not, unchanged by grading?"""
    assert hostile["after"] == hostile["before"]


@pytest.mark.sandbox
def test_the_grader_leaves_no_scratch_behind(hostile: dict[str, Any]) -> None:
    """Does the grader remove its temporary copies (owned by the sandbox uids) when it is done?"""
    assert hostile["scratch_left"] == []


def test_concurrent_batches_get_distinct_uids(tmp_path: Path) -> None:
    """Do two batches claiming sandbox uids at once (same lock folder) never share one?"""
    first = bwrap.UidPool(3, tmp_path)
    second = bwrap.UidPool(3, tmp_path)
    try:
        assert not set(first.uids) & set(second.uids)
        assert all(uid >= FIRST_UID for uid in first.uids + second.uids)
    finally:
        first.close()
        second.close()
    again = bwrap.UidPool(1, tmp_path)
    again.close()
    assert again.uids == [first.uids[0]]  # released uids are claimed again


@pytest.mark.skipif(not ROOT, reason="the refusal is for root")
def test_unsafe_grading_is_refused_as_root(course: Course) -> None:
    """Does `--unsafe` as root refuse to run learner code as uid 0?"""
    with pytest.raises(KitError, match="never run as uid 0"):
        Grader(course, sandbox.Limits(), unsafe=True)


def test_a_missing_bubblewrap_fails_loudly_with_the_fix(
    course: Course, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without bwrap, does grading stop before any learner code runs, in one line naming the fix?"""
    monkeypatch.setattr(shutil, "which", lambda name: None)  # the module bwrap looks bwrap up with
    code = cli.main(["grade", str(tmp_path), *FX])
    err = capsys.readouterr().err
    assert code == 2
    assert "apt-get install bubblewrap" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.sandbox  # bwrap must be there for grading to reach the seccomp check
def test_a_missing_libseccomp_fails_loudly_with_the_fix(
    course: Course, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without libseccomp (so no keyring filter), does grading stop before any learner code runs, in one line
    naming the fix?"""
    seccomp.program.cache_clear()
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # what `import pyseccomp` finds: an ImportError
    try:
        code = cli.main(["grade", str(tmp_path), *FX])
    finally:
        seccomp.program.cache_clear()
    err = capsys.readouterr().err
    assert code == 2
    assert "apt-get install libseccomp2" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.sandbox
def test_the_keyring_filter_is_a_program_bwrap_can_load() -> None:
    """Is the filter a whole number of BPF instructions (8 bytes each), and does it refuse add_key/keyctl
    inside bwrap?"""
    program = seccomp.program()
    assert program and len(program) % 8 == 0
    rules = seccomp.descriptor()
    try:
        probe = (
            "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            f"print(libc.syscall({keyrings.KEYCTL}, {keyrings.KEYCTL_GET_KEYRING_ID}, "
            f"{keyrings.SESSION_KEYRING}, 0), ctypes.get_errno())"
        )
        done = subprocess.run(
            ["bwrap", "--seccomp", str(rules), "--dev-bind", "/", "/", sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            pass_fds=(rules,),
            timeout=60,
        )
    finally:
        os.close(rules)
    assert done.stdout.split() == ["-1", str(errno.EPERM)], done.stderr


def test_unsafe_grading_without_root_grades_as_usual_and_says_so(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --unsafe (as a non-root instructor would), are scores unchanged and every record flagged?"""
    complete = make_learner(course, checkpoint, tmp_path / "complete", labs_from_solution=True)
    untouched = make_learner(course, checkpoint, tmp_path / "untouched")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the Grader's own root check only
    grader = Grader(course, sandbox.Limits(wall_seconds=60), jobs=2, unsafe=True)
    try:
        records = grader.grade_all([complete, untouched])
    finally:
        grader.close()
    # a1's five required tests; the optional exercise's file is not in the folder.
    assert [(r.status, r.passed) for r in records] == [("complete", 5), ("not started", 0)]
    assert all(any("--unsafe" in flag for flag in r.flags) for r in records)


def test_the_sandboxes_copies_of_the_packages_keep_bytecode_python_will_use(tmp_path: Path) -> None:
    """Does every timestamp-checked `.pyc` the scratch copies for the sandboxes still match its copied source,
    so that a sandboxed run imports pytest and hypothesis from bytecode instead of compiling them again?"""
    # Compiled as the kit's bootstrap compiles the venv (a venv made otherwise may hold none yet).
    pluggy = next(path for path in bwrap.site_paths() if path.name == "pluggy")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(pluggy)], check=True, capture_output=True)
    bwrap.copy_site(tmp_path)
    checked = 0
    for pyc in (tmp_path / bwrap.SITE_COPY / "pluggy" / "__pycache__").glob(
        f"*.{sys.implementation.cache_tag}.pyc"
    ):
        header = pyc.read_bytes()[:16]
        if int.from_bytes(header[4:8], "little") != 0:
            continue  # a hash-based pyc: checked against the source's bytes, not its time
        source = pyc.parent.parent / f"{pyc.name.split('.')[0]}.py"
        found = source.stat()
        assert int.from_bytes(header[8:12], "little") == int(found.st_mtime) & 0xFFFFFFFF, source.name
        assert int.from_bytes(header[12:16], "little") == found.st_size & 0xFFFFFFFF, source.name
        checked += 1
    assert checked > 0
