"""Resource limits and a scrubbed environment for `pi-course grade --unsafe` (no isolation).

The grader's sandbox is bubblewrap (`bwrap.py`). This module keeps what `--unsafe` needs on a
machine where no sandbox can be built: `python -I sandbox.py CONFIG -- COMMAND...` sets rlimits and
executes COMMAND with an environment built from nothing, in its own session that the grader kills
at the wall time. Learner code then runs with the grader's own rights. It uses the standard library
only, because it runs before anything else. (The hand-made namespaces that lived here were replaced
by bubblewrap; the fork server now lives inside a slot's bubblewrap sandbox, see forkserver.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ISOLATED, UID, LIMITS = "isolated", "uid", "limits"
#: How a run's memory is held to --memory, most exact first: the kernel's own count for the whole run
#: (a cgroup v2 with memory.max and pids.max), the sum of every process's RssAnon + RssShmem polled
#: from /proc (the fork server), or each process's address space alone (setrlimit; a fresh sandbox
#: per learner and --unsafe, where a run of many processes may hold their sum).
MEMORY_CGROUP, MEMORY_PROC, MEMORY_PER_PROCESS = "cgroup", "proc", "per-process"
#: What every graded run's environment holds, sandboxed or not (each adds its own PATH, HOME, TMPDIR).
RUN_ENV = {
    # The report plugin's GRADING_ENV: no traced second run of a failed test (only `edit:` lines need it).
    "PI_COURSE_GRADING": "1",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
}
SETUP_FAILED = 125
MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    wall_seconds: float = 120.0
    memory_bytes: int = 512 * MiB
    cpu_seconds: int = 120
    processes: int = 64
    file_bytes: int = 16 * MiB
    open_files: int = 256


@dataclass
class Sandboxed:
    """How a sandboxed run ended."""

    returncode: int
    timed_out: bool
    output: str
    level: str
    seconds: float
    #: Which limit of the whole run stopped it ("wall", "cpu", "memory": see forkserver.wait), or "".
    stopped: str = ""
    #: How the run's memory was held to its limit (MEMORY_LEVELS), the record's `memory`.
    memory: str = ""

    @property
    def setup_failed(self) -> bool:
        """The launcher could not build the sandbox (nothing of the learner's ran)."""
        return self.returncode == SETUP_FAILED and "pi-course-sandbox:" in self.output


# -- the launcher (runs in the child, before the command) ----------------------------------------


def _apply_limits(limits: Mapping[str, int]) -> None:
    pairs = {
        resource.RLIMIT_AS: limits["memory_bytes"],
        resource.RLIMIT_CPU: limits["cpu_seconds"],
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_bytes"],
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in pairs.items():
        resource.setrlimit(kind, (value, value))


def _enter(config: Mapping[str, object]) -> None:
    """Limit this process as `config` says and move into its working folder."""
    limits = {str(k): int(v) for k, v in dict(config["limits"]).items()}  # type: ignore[call-overload]
    os.chdir(str(config["work"]))
    _apply_limits(limits)


def _config_env(config: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(config["env"]).items()}  # type: ignore[call-overload]


def launch(config: Mapping[str, object], command: Sequence[str]) -> int:
    """Build the sandbox described by `config`, run `command` in it and return its exit status."""
    env = _config_env(config)
    _enter(config)
    os.execve(command[0], list(command), env)
    return SETUP_FAILED  # not reached


def _main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("pi-course-sandbox: usage: sandbox.py CONFIG_JSON -- COMMAND...", file=sys.stderr)
        return SETUP_FAILED
    try:
        return launch(json.loads(argv[0]), argv[2:])
    except (OSError, ValueError, KeyError) as error:
        print(f"pi-course-sandbox: cannot set up the sandbox: {error}", file=sys.stderr)
        return SETUP_FAILED


# -- the grader's side --------------------------------------------------------------------------


def interpreter_paths() -> list[str]:
    """The folders the sandboxed interpreter must still read: the venv and its base installation."""
    paths = {sys.prefix, sys.base_prefix, str(Path(os.path.realpath(sys.executable)).parent.parent)}
    return sorted(p for p in paths if os.path.isdir(p))


def minimal_env(work: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment built from nothing: PATH, HOME, LANG, the venv. No variable of ours leaks in."""
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work / ".home"),
        "TMPDIR": str(work / ".tmp"),
        **RUN_ENV,
    }
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    env.update(extra or {})
    return env


def prepare_work(work: Path, uid: int | None, writable: Sequence[str] = ()) -> None:
    """Make a home and a temp folder in the copy; give only those and `writable` entries to the uid.

    Everything else in the copy (the pristine tests, pytest.ini) stays the grader's and read-only,
    so learner code cannot rewrite the tests that grade it.
    """
    for name in (".home", ".tmp"):
        (work / name).mkdir(exist_ok=True)
    if uid is None:
        return
    for entry in (".home", ".tmp", *writable):
        top = work / entry
        if top.is_symlink() or not top.exists():
            continue
        os.chown(top, uid, uid, follow_symlinks=False)
        for folder, dirs, files in os.walk(top) if top.is_dir() else ():
            for name in dirs + files:
                os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)
    os.chmod(work, 0o755)


def _config(
    work: Path, env: Mapping[str, str], limits: Limits, level: str, uid: int | None
) -> dict[str, Any]:
    return {
        "work": str(work),
        "env": dict(env),
        "limits": {k: int(v) for k, v in asdict(limits).items() if k != "wall_seconds"},
        "level": level,
        "uid": uid,
        "expose": interpreter_paths(),
    }


def run(
    command: Sequence[str],
    work: Path,
    env: Mapping[str, str],
    limits: Limits,
    level: str,
    log: Path,
    uid: int | None = None,
) -> Sandboxed:
    """Run `command` in `work` under the sandbox; kill everything it started when the wall time is up."""
    config = _config(work, env, limits, level, uid)
    launcher = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), json.dumps(config), "--", *command]
    started = time.perf_counter()
    timed_out = False
    # Output goes to a file, not a pipe: a grandchild holding a pipe open cannot hang the grader.
    with log.open("wb") as sink:
        process = subprocess.Popen(
            launcher,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={},
        )
        try:
            returncode = process.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = -signal.SIGKILL
        finally:
            _kill_group(process.pid)
            process.wait()
    output = log.read_bytes()[-200_000:].decode("utf-8", "replace")
    seconds = time.perf_counter() - started
    return Sandboxed(returncode, timed_out, output, level, seconds, memory=MEMORY_PER_PROCESS)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
