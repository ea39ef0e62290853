"""Odd invocations of `pi-course`: each ends with one line saying what was wrong and what to do, never a
traceback.

Each case runs the command line as a subprocess on the fixture course, in a scratch folder holding a
file, a non-empty folder and a practice folder, after an optional set-up that damages something. Some
cases run with no permission to read (as root: without the capabilities that bypass file permissions),
on a read-only file system (a read-only bind mount), or are interrupted with Ctrl-C while starting.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURE
from learner_support import CLI, make_folder, run_cli
from pi_course_kit.core.manifest import Checkpoint, Course

#: As root, file permissions are checked once these capabilities are dropped (setpriv keeps uid 0,
#: so the interpreter under /root stays reachable).
NO_BYPASS = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]


@dataclass(frozen=True)
class Odd:
    """One odd command line: where it runs, what is damaged first, how it is run, and whether 0 is right."""

    argv: tuple[str, ...]
    where: str = "ws"  # ws, folder (a practice folder), sub (its package folder)
    damage: str | None = None  # a key of DAMAGE
    mode: str = "plain"  # plain, noperm (permissions enforced), ro (read-only file system), sigint
    ok: bool = False  # exit code 0 is the right answer
    delay: float = 0.0  # sigint: seconds after the start


def _meta(ws: Path, change: Callable[[dict[str, object]], object]) -> None:
    path = ws / "folder" / ".pi-course" / "meta.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _write(relative: str, data: bytes) -> Callable[[Path], None]:
    def damage(ws: Path) -> None:
        (ws / relative).write_bytes(data)

    return damage


def _remove(*relatives: str) -> Callable[[Path], None]:
    def damage(ws: Path) -> None:
        for relative in relatives:
            path = ws / relative
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    return damage


def _meta_dir(ws: Path) -> None:
    path = ws / "folder" / ".pi-course" / "meta.json"
    path.unlink()
    path.mkdir()


def _backups_file(ws: Path) -> None:
    (ws / "folder" / ".pi-course" / "backups").write_text("not a folder\n", encoding="utf-8")


def _locked(ws: Path) -> None:
    (ws / "locked").mkdir()
    (ws / "locked").chmod(0)


def _locked_folder(ws: Path) -> None:
    (ws / "folder").chmod(0)


def _locked_meta(ws: Path) -> None:
    (ws / "folder" / ".pi-course" / "meta.json").chmod(0)


def _locked_teaching(ws: Path) -> None:
    (ws / "folder" / "fx_course" / "counter.py").chmod(0)


def _with_backup(ws: Path) -> None:
    backup = ws / "folder" / ".pi-course" / "backups" / "20260101-000000-lab1.1" / "fx_course"
    backup.mkdir(parents=True)
    shutil.copyfile(ws / "folder" / "fx_course" / "counter.py", backup / "counter.py")


def _teaching_a_folder(ws: Path) -> None:
    path = ws / "folder" / "fx_course" / "counter.py"
    path.unlink()
    path.mkdir()


def _empty_backup(ws: Path) -> None:
    (ws / "folder" / ".pi-course" / "backups" / "20260101-000000-lab1.1").mkdir(parents=True)


def _progress_dir(ws: Path) -> None:
    (ws / "folder" / ".pi-course" / "progress.json").mkdir(parents=True)


META = "folder/.pi-course/meta.json"
DAMAGE: dict[str, Callable[[Path], None]] = {
    "meta not json": _write(META, b"{not json"),
    "meta a list": _write(META, b"[]"),
    "meta without checkpoint": _write(META, b'{"format": 1}'),
    "meta not utf-8": _write(META, b"\xff\xfe\x00\x81garbage"),
    "meta a folder": _meta_dir,
    "meta unknown checkpoint": lambda ws: _meta(ws, lambda m: m.__setitem__("checkpoint", "zz")),
    "meta files a list": lambda ws: _meta(ws, lambda m: m.__setitem__("files", [1, 2])),
    "meta teaching files a number": lambda ws: _meta(ws, lambda m: m.__setitem__("teaching_files", 5)),
    "meta hints a list": lambda ws: _meta(ws, lambda m: m.__setitem__("hints", [1])),
    "meta format a string": lambda ws: _meta(ws, lambda m: m.__setitem__("format", "x")),
    "course snapshot not toml": _write("folder/.pi-course/course.toml", b"not toml ["),
    "course snapshot gone": _remove("folder/.pi-course/course.toml"),
    "starter copy gone": _remove("folder/.pi-course/starter"),
    "tests gone": _remove("folder/tests", "folder/pytest.ini"),
    "package gone": _remove("folder/fx_course"),
    "teaching file gone": _remove("folder/fx_course/counter.py"),
    "teaching file not utf-8": _write("folder/fx_course/counter.py", b"\xff\xfe\x00\x81"),
    "teaching file not python": _write("folder/fx_course/counter.py", b"def (:\n"),
    "backups a file": _backups_file,
    "a backup to undo": _with_backup,
    "locked folder": _locked,
    "practice folder locked": _locked_folder,
    "meta locked": _locked_meta,
    "teaching file locked": _locked_teaching,
    # -- issue 39: more damage
    "meta checkpoint a number": lambda ws: _meta(ws, lambda m: m.__setitem__("checkpoint", 5)),
    "meta hints negative": lambda ws: _meta(ws, lambda m: m.__setitem__("hints", {"1.1": -3})),
    "meta last lab unknown": lambda ws: _meta(ws, lambda m: m.__setitem__("last_next_lab", "9.9")),
    "progress not json": _write("folder/.pi-course/progress.json", b"{not json"),
    "progress a list": _write("folder/.pi-course/progress.json", b"[1, 2]"),
    "progress a folder": _progress_dir,
    "pytest.ini not utf-8": _write("folder/pytest.ini", b"\xff\xfe[pytest]\x81"),
    "pytest.ini empty": _write("folder/pytest.ini", b""),
    "teaching file a folder": _teaching_a_folder,
    "teaching file empty": _write("folder/fx_course/counter.py", b""),
    "an empty backup": _empty_backup,
}

CASES: dict[str, Odd] = {
    # -- the command line itself
    "no command": Odd(()),  # the help, on stdout, and exit code 2
    "--lang without a value": Odd(("--lang",)),
    "--lang xx": Odd(("--lang", "xx", "check"), where="folder"),
    "--lang= empty": Odd(("--lang=", "check"), where="folder"),
    "unknown command": Odd(("pratice", "a1", "new")),
    "unknown top-level option": Odd(("--frobnicate",)),
    "practice without arguments": Odd(("practice",)),
    "practice without a folder": Odd(("practice", "a1")),
    "practice with an extra argument": Odd(("practice", "a1", "new", "extra")),
    "check --timeout abc": Odd(("check", "--timeout", "abc"), where="folder"),
    "check --timeout -1": Odd(("check", "--timeout", "-1"), where="folder"),
    "check --timeout 0": Odd(("check", "--timeout", "0"), where="folder"),
    "check --timeout nan": Odd(("check", "--timeout", "nan"), where="folder"),
    "check --timeout inf": Odd(("check", "--timeout", "inf"), where="folder"),
    "check --lab empty": Odd(("check", "--lab", ""), where="folder"),
    "check --lab 9.9": Odd(("check", "--lab", "9.9"), where="folder"),
    "check --lab 9.9 from the package folder": Odd(("check", "--lab", "9.9"), where="sub"),
    "check with an unknown option": Odd(("check", "--bogus"), where="folder"),
    "hint 9.9": Odd(("hint", "9.9"), where="folder"),
    "hint empty": Odd(("hint", ""), where="folder"),
    "hint with two labs": Odd(("hint", "1.1", "1.2"), where="folder"),
    "reset without a lab": Odd(("reset",), where="folder"),
    "reset 9.9": Odd(("reset", "9.9"), where="folder"),
    "reset ../1.1": Odd(("reset", "../1.1"), where="folder"),
    "reset --undo without a backup": Odd(("reset", "--undo"), where="folder"),
    "reset --undo with a lab": Odd(("reset", "--undo", "1.1"), where="folder"),
    "reset --undo --kit": Odd(("reset", "--undo", "--kit"), where="folder"),
    "reset with an unknown option": Odd(("reset", "1.1", "--force"), where="folder"),
    "status with an unknown option": Odd(("status", "--bogus"), where="folder"),
    "watch with an unknown option": Odd(("watch", "--bogus"), where="folder"),
    "checkpoint 99": Odd(("checkpoint", "99")),
    "checkpoint ../a1": Odd(("checkpoint", "../a1")),
    "diff 99": Odd(("diff", "99", "--course", str(FIXTURE))),
    "diagnose an unknown mutation": Odd(("diagnose", "a1", "no-such-mutation", "--course", str(FIXTURE))),
    "nbrun a missing notebook": Odd(("nbrun", "missing.ipynb")),
    "nbrun a file that is no notebook": Odd(("nbrun", "a-file")),
    "export without a target": Odd(("export",)),
    # -- where the new folder would go
    "practice 99": Odd(("practice", "99", "new")),
    "practice under a file": Odd(("practice", "a1", "a-file/new")),
    "practice onto a file": Odd(("practice", "a1", "a-file")),
    "practice into a non-empty folder": Odd(("practice", "a1", "full")),
    "practice into the current folder": Odd(("practice", "a1", ".")),
    "practice into an empty name": Odd(("practice", "a1", "")),
    "practice under /proc": Odd(("practice", "a1", "/proc/pi-course-new")),
    "practice under /dev/null": Odd(("practice", "a1", "/dev/null/new")),
    "practice --course missing": Odd(("practice", "a1", "new", "--course", "missing")),
    "practice --course a file": Odd(("practice", "a1", "new", "--course", "a-file")),
    "practice --course an empty folder": Odd(("practice", "a1", "new", "--course", "full")),
    "checkpoint under a file": Odd(("checkpoint", "a1", "a-file/cp")),
    "checkpoint into a non-empty folder": Odd(("checkpoint", "a1", "full")),
    # -- --from
    "--from a missing folder": Odd(("practice", "a2", "new", "--from", "missing")),
    "--from a file": Odd(("practice", "a2", "new", "--from", "a-file")),
    "--from a non-practice folder": Odd(("practice", "a2", "new", "--from", "full")),
    "--from for a checkpoint without a parent": Odd(("practice", "a1", "new", "--from", "folder")),
    "--from an unfinished parent": Odd(("practice", "a2", "new", "--from", "folder")),
    "--from a folder with a corrupt meta.json": Odd(
        ("practice", "a2", "new", "--from", "folder"), damage="meta not json"
    ),
    "--from an unreadable folder": Odd(
        ("practice", "a2", "new", "--from", "locked"), damage="locked folder", mode="noperm"
    ),
    # -- outside a practice folder
    "check outside a practice folder": Odd(("check",)),
    "hint outside a practice folder": Odd(("hint", "1.1")),
    "reset outside a practice folder": Odd(("reset", "1.1")),
    "reset --kit outside a practice folder": Odd(("reset", "--kit")),
    "status outside a practice folder": Odd(("status", "--no-run")),
    "watch outside a practice folder": Odd(("watch",)),
    # -- a damaged practice folder
    **{
        f"{command} with {damage}": Odd(argv, where="folder", damage=damage)
        for damage in (
            "meta not json",
            "meta a list",
            "meta without checkpoint",
            "meta not utf-8",
            "meta a folder",
            "meta unknown checkpoint",
        )
        for command, argv in (("check", ("check",)), ("hint", ("hint", "1.1")), ("reset", ("reset", "1.1")))
    },
    "status with meta not json": Odd(("status", "--no-run"), where="folder", damage="meta not json"),
    "watch with meta not json": Odd(("watch",), where="folder", damage="meta not json"),
    "reset --kit with meta files a list": Odd(("reset", "--kit"), where="folder", damage="meta files a list"),
    "check with meta teaching files a number": Odd(
        ("check",), where="folder", damage="meta teaching files a number"
    ),
    "hint with meta hints a list": Odd(("hint", "1.1"), where="folder", damage="meta hints a list", ok=True),
    "check --lab with meta format a string": Odd(
        ("check", "--lab", "1.1"), where="folder", damage="meta format a string"
    ),
    "hint with the course snapshot not toml": Odd(
        ("hint", "1.1"), where="folder", damage="course snapshot not toml"
    ),
    "reset with the course snapshot gone": Odd(
        ("reset", "1.1"), where="folder", damage="course snapshot gone", ok=True
    ),
    "reset with the starter copy gone": Odd(("reset", "1.1"), where="folder", damage="starter copy gone"),
    "check with tests gone": Odd(("check",), where="folder", damage="tests gone"),
    "watch with tests gone": Odd(("watch",), where="folder", damage="tests gone"),
    "status with tests gone": Odd(("status",), where="folder", damage="tests gone"),
    "check with the package gone": Odd(("check",), where="folder", damage="package gone"),
    "reset with the teaching file gone": Odd(("reset", "1.1"), where="folder", damage="teaching file gone"),
    "reset with a teaching file not utf-8": Odd(
        ("reset", "1.1"), where="folder", damage="teaching file not utf-8"
    ),
    "hint with a teaching file not utf-8": Odd(
        ("hint",), where="folder", damage="teaching file not utf-8", ok=True
    ),
    "reset with a teaching file that does not parse": Odd(
        ("reset", "1.1"), where="folder", damage="teaching file not python"
    ),
    "reset with backups a file": Odd(("reset", "1.1"), where="folder", damage="backups a file"),
    "reset --undo with backups a file": Odd(("reset", "--undo"), where="folder", damage="backups a file"),
    # -- no permission to read
    "practice under an unreadable folder": Odd(
        ("practice", "a1", "locked/new"), damage="locked folder", mode="noperm"
    ),
    "practice onto an unreadable folder": Odd(
        ("practice", "a1", "locked"), damage="locked folder", mode="noperm"
    ),
    "checkpoint under an unreadable folder": Odd(
        ("checkpoint", "a1", "locked/cp"), damage="locked folder", mode="noperm"
    ),
    "check in an unreadable practice folder": Odd(
        ("check",), where="folder", damage="practice folder locked", mode="noperm"
    ),
    "check with an unreadable meta.json": Odd(
        ("check",), where="folder", damage="meta locked", mode="noperm"
    ),
    "hint with an unreadable meta.json": Odd(
        ("hint", "1.1"), where="folder", damage="meta locked", mode="noperm"
    ),
    "reset with an unreadable teaching file": Odd(
        ("reset", "1.1"), where="folder", damage="teaching file locked", mode="noperm"
    ),
    "status with an unreadable teaching file": Odd(
        ("status", "--no-run"), where="folder", damage="teaching file locked", mode="noperm"
    ),
    # -- a read-only file system
    "practice onto a read-only file system": Odd(("practice", "a1", "new"), mode="ro"),
    "checkpoint onto a read-only file system": Odd(("checkpoint", "a1", "cp"), mode="ro"),
    "hint in a read-only folder": Odd(("hint", "1.1"), where="folder", mode="ro", ok=True),
    "reset in a read-only folder": Odd(("reset", "1.1"), where="folder", mode="ro"),
    "reset --all in a read-only folder": Odd(("reset", "--all"), where="folder", mode="ro"),
    "reset --kit in a read-only folder": Odd(
        ("reset", "--kit"), where="folder", damage="tests gone", mode="ro"
    ),
    "reset --undo in a read-only folder": Odd(
        ("reset", "--undo"), where="folder", damage="a backup to undo", mode="ro"
    ),
    "status in a read-only folder": Odd(("status", "--no-run"), where="folder", mode="ro", ok=True),
    "check in a read-only folder": Odd(("check",), where="folder", mode="ro"),
    # -- issue 39: 40 more of the same kind
    "check --lab given a marker": Odd(("check", "--lab", "lab1_1"), where="folder"),
    "check --lab with a space": Odd(("check", "--lab", " 1.1"), where="folder"),
    "check --lab 1.1.1": Odd(("check", "--lab", "1.1.1"), where="folder"),
    "check --lab with an extra argument": Odd(("check", "--lab", "1.1", "extra"), where="folder"),
    "hint 1.1 with an unknown option": Odd(("hint", "1.1", "--bogus"), where="folder"),
    "hint -1": Odd(("hint", "--", "-1"), where="folder"),
    "hint a marker": Odd(("hint", "lab1_1"), where="folder", ok=True),
    "hint 0.1 (another checkpoint's lab)": Odd(("hint", "0.1"), where="folder"),
    "hint from the package folder": Odd(("hint", "1.1"), where="sub", ok=True),
    "reset two labs": Odd(("reset", "1.1", "1.2"), where="folder"),
    "reset --undo --all": Odd(("reset", "--undo", "--all"), where="folder"),
    "reset the optional exercise": Odd(("reset", "extra1"), where="folder"),
    "reset --undo with an empty backup": Odd(("reset", "--undo"), where="folder", damage="an empty backup"),
    "status with an extra argument": Odd(("status", "--no-run", "extra"), where="folder"),
    "watch with an extra argument": Odd(("watch", "--poll", "extra"), where="folder"),
    "practice --from without a value": Odd(("practice", "a2", "new", "--from")),
    "practice --course without a value": Odd(("practice", "a1", "new", "--course")),
    "practice A1 (capitals)": Odd(("practice", "A1", "new")),
    "practice with a space in the id": Odd(("practice", " a1", "new")),
    "practice --course a folder without course.toml": Odd(("practice", "a1", "new", "--course", "folder")),
    "--from the package folder of a practice folder": Odd(
        ("practice", "a2", "new", "--from", "folder/fx_course")
    ),
    "practice into the practice folder's package": Odd(("practice", "a1", "folder/fx_course")),
    "checkpoint onto a file": Odd(("checkpoint", "a1", "a-file")),
    "checkpoint with an extra argument": Odd(("checkpoint", "a1", "cp", "extra")),
    "diff with a missing course": Odd(("diff", "a1", "--course", "missing")),
    "diff a missing folder": Odd(("diff", "a1", "missing", "--course", str(FIXTURE))),
    "diff a file": Odd(("diff", "a1", "a-file", "--course", str(FIXTURE))),
    "diagnose 99": Odd(("diagnose", "99", "x", "--course", str(FIXTURE))),
    "nbrun an empty name": Odd(("nbrun", "")),
    "nbrun a folder": Odd(("nbrun", "full")),
    "export an unknown target": Odd(("export", "bogus", "a1")),
    "verify 99": Odd(("verify", "99", "--course", str(FIXTURE))),
    "build-labs with a missing course": Odd(("build-labs", "--course", "missing")),
    "--lang en without a command": Odd(("--lang", "en")),
    "check with meta checkpoint a number": Odd(("check",), where="folder", damage="meta checkpoint a number"),
    "hint with a negative hint count": Odd(
        ("hint", "1.1"), where="folder", damage="meta hints negative", ok=True
    ),
    "hint with an unknown last lab": Odd(("hint",), where="folder", damage="meta last lab unknown", ok=True),
    "check with progress not json": Odd(("check",), where="folder", damage="progress not json"),
    "status with progress a list": Odd(
        ("status", "--no-run"), where="folder", damage="progress a list", ok=True
    ),
    "check with progress a folder": Odd(("check",), where="folder", damage="progress a folder"),
    "check with pytest.ini not utf-8": Odd(("check",), where="folder", damage="pytest.ini not utf-8"),
    "check with pytest.ini empty": Odd(("check",), where="folder", damage="pytest.ini empty"),
    "reset with the teaching file a folder": Odd(
        ("reset", "1.1"), where="folder", damage="teaching file a folder"
    ),
    "check with the teaching file a folder": Odd(("check",), where="folder", damage="teaching file a folder"),
    "reset with an empty teaching file": Odd(("reset", "1.1"), where="folder", damage="teaching file empty"),
    # -- Ctrl-C while starting up
    **{
        f"Ctrl-C {delay:g}s into {' '.join(argv)}": Odd(argv, where="folder", mode="sigint", delay=delay)
        for argv, delay in (
            (("check",), 0.15),
            (("check",), 0.4),
            (("hint", "1.1"), 0.15),
            (("reset", "1.1"), 0.25),
            (("status",), 0.3),
            (("practice", "a1", "../new"), 0.2),
            (("watch",), 0.6),
        )
    },
}


def test_there_are_at_least_a_hundred_and_sixty_odd_invocations() -> None:
    """Does the table hold at least 160 distinct odd invocations (124 before issue 39, and 40 more)?"""
    assert len(CASES) >= 160
    assert len({(c.argv, c.where, c.damage, c.mode, c.delay) for c in CASES.values()}) == len(CASES)


@pytest.fixture(scope="module")
def starter(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh practice folder of the fixture course, copied into each case's scratch folder."""
    return make_folder(course, checkpoint, tmp_path_factory.mktemp("odd") / "starter")


def scratch(tmp_path: Path, starter: Path) -> Path:
    """A scratch folder: a file, a non-empty folder and a practice folder."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a-file").write_text("not a folder\n", encoding="utf-8")
    (ws / "full").mkdir()
    (ws / "full" / "notes.txt").write_text("the learner's notes\n", encoding="utf-8")
    shutil.copytree(starter, ws / "folder")
    return ws


def read_only(ws: Path, cwd: Path) -> list[str]:
    """A command prefix that runs with `ws` mounted read-only, or a skip saying why it cannot here."""
    probe = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(ws), str(ws), "--chdir", str(cwd)]
    if shutil.which("bwrap"):
        tried = subprocess.run([*probe, "true"], capture_output=True, timeout=30)
        if tried.returncode == 0:
            return probe
    pytest.skip("cannot mount a read-only file system here (bubblewrap cannot run)")


def wait_for_the_kit(process: subprocess.Popen[str], patience: float = 30.0) -> None:
    """Wait until the interpreter runs the kit (it has loaded `_json`, which the kit's first imports need).

    A Ctrl-C before that lands in Python's own start-up (site, .pth files), where no program can
    catch it; the cases are about the kit's start-up, which begins here. A process that has ended is
    not waited for: its maps read empty until it is reaped (watch ends at once when its input is closed).
    """
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if "_json" in maps.read_text(encoding="utf-8", errors="replace"):
                return
        except OSError:
            return  # no /proc here, or the process already ended
        time.sleep(0.005)


def restore_permissions(ws: Path) -> None:
    """Give every folder back its permissions, so the scratch folder can be removed."""
    for path in (ws, *ws.rglob("*")):
        if path.is_dir() or path.exists():
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_odd_invocation_ends_in_one_line_without_a_traceback(
    name: str, starter: Path, tmp_path: Path
) -> None:
    """Does this odd command end with the right exit code and one line on stderr, and no traceback?"""
    case = CASES[name]
    ws = scratch(tmp_path, starter)
    cwd = {"ws": ws, "folder": ws / "folder", "sub": ws / "folder" / "fx_course"}[case.where]
    if case.damage is not None:
        DAMAGE[case.damage](ws)
    prefix: list[str] = []
    if case.mode == "noperm" and os.geteuid() == 0:
        prefix = NO_BYPASS
    elif case.mode == "ro":
        prefix = read_only(ws, cwd)
    env = {**os.environ, "PI_COURSE_LANG": "en", "PI_COURSE_ROOT": str(FIXTURE)}
    env.pop("PYTHONPATH", None)
    try:
        process = subprocess.Popen(
            [*prefix, *CLI, *case.argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        if case.mode == "sigint":
            wait_for_the_kit(process)
            time.sleep(case.delay)  # the moment of the Ctrl-C is what this case is about
            process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        restore_permissions(ws)
    shown = out + err
    assert "Traceback" not in shown, shown[-3000:]
    assert "INTERNALERROR" not in shown, shown[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    if case.mode == "sigint":
        # Interrupted (130, or killed by the signal), or already done when it came: at most one line.
        assert len(lines) <= 1, err
        return
    if case.ok:
        assert process.returncode == 0, shown[-3000:]
        assert len(lines) <= 1, err
        return
    assert process.returncode != 0, shown[-3000:]
    if process.returncode in (1, 2) and not lines and out.strip():
        return  # a red run: the report on stdout says why; no command at all: the help on stdout
    assert len(lines) == 1, err


# -- issue 39: lines that were false, or lost work -------------------------------------------------


def _pytest_in(folder: Path, args: list[str], language: str = "en") -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` in a practice folder, as a learner types it."""
    env = {**os.environ, "PI_COURSE_LANG": language}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_pytest_with_an_unknown_lab_says_so_in_one_line_listing_the_labs(
    starter: Path, tmp_path: Path, language: str
) -> None:
    """Does `python -m pytest -m lab9_9` end in one line naming 9.9 and the folder's labs, and nothing
    "done"?"""
    folder = scratch(tmp_path, starter) / "folder"
    done = _pytest_in(folder, ["-m", "lab9_9"], language)
    assert done.returncode != 0
    assert done.stdout.strip() == "", done.stdout  # no table, no "every required lab is done"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "9.9" in lines[0] and "1.1 (lab1_1)" in lines[0] and "1.2 (lab1_2)" in lines[0]
    assert "Unknown marker" not in lines[0] and "Traceback" not in done.stderr
    assert ("没有" in lines[0]) == (language == "zh_CN")


def test_a_lab_that_stops_in_an_unchecked_earlier_labs_code_is_itself_the_next_step(
    starter: Path, tmp_path: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """A reset that leaves a count which cannot grow, run with `-m lab1_2`: is the next step 1.2, not 1.1?

    The only failing 1.2 test stops inside add (Lab 1.1's code), but the mistake is reset's, and Lab 1.1
    neither ran nor is recorded: naming it "next" would send the learner to code that is right.
    """
    folder = scratch(tmp_path, starter) / "folder"
    for relative in checkpoint.teaching_files:
        shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
    counter = folder / "fx_course" / "counter.py"
    text = counter.read_text(encoding="utf-8")
    wrong = (
        "        class Zero(int):  # equal to 0, but `+` fails inside add, with no frame of its own\n"
        "            __add__ = None\n\n"
        "        self.count = Zero(0)\n"
        "        # END LAB 1.2"
    )
    counter.write_text(text.replace("        self.count = 0\n        # END LAB 1.2", wrong), encoding="utf-8")
    assert counter.read_text(encoding="utf-8") != text
    assert not (folder / ".pi-course" / "progress.json").exists()  # nothing known about Lab 1.1
    done = _pytest_in(folder, ["-m", "lab1_2"])
    assert done.returncode == 1
    tail = done.stdout.split("pi-course labs")[-1]
    assert "blocked by 1.1" in tail  # the table still says where the test stopped
    step = next(line for line in tail.splitlines() if line.startswith("next:"))
    assert step.startswith("next: Lab 1.2"), tail
    assert "Lab 1.1" not in step


def test_reset_all_says_what_it_restored_without_naming_a_lab(starter: Path, tmp_path: Path) -> None:
    """Does `reset --all` say it restored the starter files, never "Lab None"?"""
    folder = scratch(tmp_path, starter) / "folder"
    done = run_cli(["reset", "--all"], cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "None" not in done.stdout and "restored the Lab" not in done.stdout, done.stdout
    assert "restored the starter version of fx_course/counter.py" in done.stdout


def test_practice_onto_an_empty_file_says_it_is_a_file(tmp_path: Path) -> None:
    """Does `practice a1 FILE` (an empty regular file) say FILE is a file, not a folder, and keep it?"""
    (tmp_path / "empty").write_bytes(b"")
    done = run_cli(["practice", "a1", "empty", "--course", str(FIXTURE)], cwd=tmp_path)
    assert done.returncode == 2
    assert "is a file, not a folder" in done.stderr and "not empty" not in done.stderr
    assert (tmp_path / "empty").is_file() and (tmp_path / "empty").read_bytes() == b""


def test_hint_of_an_earlier_chapters_lab_is_given_in_a_later_folder(
    course: Course, child: Checkpoint, tmp_path: Path
) -> None:
    """In a folder of the child checkpoint, whose table lists the parent's labs, is `hint 1.1` given?"""
    parent = course.parent_of(child)
    assert parent is not None
    folder = make_folder(course, child, tmp_path / "child")
    lab = parent.labs[0]
    assert lab.id in {info.id for info in child.tree_labs} and lab.id not in {info.id for info in child.labs}
    done = run_cli(["hint", lab.id], cwd=folder)
    assert done.returncode == 0, done.stderr
    assert lab.hints[0] in done.stdout


def test_ctrl_c_while_the_focused_tests_import_hypothesis_ends_in_one_line(
    real_course: Course, tmp_path: Path
) -> None:
    """Ctrl-C while conftest imports the shared strategies (Hypothesis): one line `已中断`, no traceback?

    The import is held at a known point (the folder's strategies.py waits after a mark file appears), so
    the Ctrl-C lands inside it every time, as it did by chance on a loaded machine.
    """
    checkpoint = real_course.checkpoint("00")
    folder = tmp_path / "practice"
    made = run_cli(["practice", checkpoint.id, str(folder), "--course", str(real_course.root)], tmp_path)
    assert made.returncode == 0, made.stderr
    mark = tmp_path / "importing"
    strategies = folder / "tests" / "strategies.py"
    strategies.write_text(
        strategies.read_text(encoding="utf-8")
        + f"\nimport pathlib, time\npathlib.Path({str(mark)!r}).touch()\ntime.sleep(120)\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LANG", "LC_ALL", "LANGUAGE")}
    env["PI_COURSE_LANG"] = "zh_CN"
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-m", "observe0_1"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), process.communicate(timeout=30)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert "Traceback" not in out + err, err[-3000:]
    assert process.returncode == 130, (out, err)
    assert [line for line in err.splitlines() if line.strip()] == ["pytest：已中断"]


def test_in_00_a_red_observe0_2_run_names_0_2_not_the_unrun_0_1(real_course: Course, tmp_path: Path) -> None:
    """00 with a shared fixture (both steps red in a whole run), then `-m observe0_2`: is 0.2 next, not 0.1?

    The whole run recorded 0.1 as failing; the learner then ran 0.2 alone. The step must speak of the
    lab that ran (0.2, red, with its failure), not send them to 0.1, which this run did not run.
    """
    checkpoint = real_course.checkpoint("00")
    folder = tmp_path / "practice"
    made = run_cli(["practice", checkpoint.id, str(folder), "--course", str(real_course.root)], tmp_path)
    assert made.returncode == 0, made.stderr
    mutation = checkpoint.mutation("demo-shares-the-fixture")
    target = folder / mutation.file
    target.write_text(
        target.read_text(encoding="utf-8").replace(mutation.find, mutation.replace), encoding="utf-8"
    )
    whole = _pytest_in(folder, [])
    assert whole.returncode == 1
    rows = {
        line.split()[0]: line.split()[2] for line in whole.stdout.splitlines() if line[:4] in ("0.1 ", "0.2 ")
    }
    assert rows == {"0.1": "failing", "0.2": "failing"}, whole.stdout[-2000:]
    alone = _pytest_in(folder, ["-m", "observe0_2"])
    assert alone.returncode == 1
    step = next(line for line in alone.stdout.splitlines() if line.startswith("next:"))
    assert step.startswith("next: Lab 0.2 (failing)"), alone.stdout[-2000:]
