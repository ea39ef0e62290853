"""Run untrusted learner code: resource limits, a scrubbed environment, and (as root) its own namespaces.

This file is also the launcher: `python -I sandbox.py CONFIG -- COMMAND...` sets the sandbox up and
then executes COMMAND. It uses the standard library only, because it runs before anything else.
`python -s -P sandbox.py --serve` is the fork server (`ForkServer`): it imports pytest once and forks
one child per run, which builds the same sandbox and then runs pytest in-process.

Levels, strongest first:
- "isolated" (root, Linux): new mount, PID, network and IPC namespaces; every mount read-only except
  the working copy; /tmp, /var/tmp, /dev/shm and home folders that others cannot enter are replaced by
  empty private folders (the interpreter is bound back in read-only); a fresh /proc that shows only
  the sandbox's processes; then the command runs as an unprivileged uid, so RLIMIT_NPROC applies.
  Every process left behind dies with the namespace.
- "uid" (root without namespaces): the command runs as an unprivileged uid with the same limits;
  it can still write to world-writable folders such as /tmp.
- "limits": resource limits and the scrubbed environment only (not root): learner code runs with the
  grader's own rights.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

ISOLATED, UID, LIMITS = "isolated", "uid", "limits"
SETUP_FAILED = 125
MiB = 1024 * 1024

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MASKED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


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

    @property
    def setup_failed(self) -> bool:
        """The launcher could not build the sandbox (nothing of the learner's ran)."""
        return self.returncode == SETUP_FAILED and "pi-course-sandbox:" in self.output


# -- the launcher (runs in the child, before the command) ----------------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _encode(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(
    libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    result: int = libc.mount(
        _encode(source), _encode(target), _encode(fstype), ctypes.c_ulong(flags), _encode(data)
    )
    _check(result, f"mount {target}")


def _mount_points() -> list[tuple[str, int]]:
    """Every mount point of this namespace with the flags that a read-only remount must keep."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        flags = sum(MOUNT_FLAGS.get(option, 0) for option in fields[5].split(","))
        points.append((point, flags))
    return points


def _blocked_ancestors(path: Path) -> list[Path]:
    """Ancestors of `path` that an unprivileged user cannot enter (e.g. /root)."""
    blocked = []
    for ancestor in reversed(path.parents):
        try:
            if not ancestor.stat().st_mode & stat.S_IXOTH:
                blocked.append(ancestor)
                break
        except OSError:
            break
    return blocked


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _isolate(work: str, expose: Sequence[str]) -> None:
    """Enter new namespaces and leave only `work` writable; `expose` stays readable."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
    keep = [work, *expose]
    masks = [m for m in MASKED_SCRATCH if os.path.isdir(m) and not os.path.islink(m)]
    for path in keep:
        masks += [str(a) for a in _blocked_ancestors(Path(path))]
    masks = sorted(set(masks))
    masks = [m for m in masks if not any(m != o and _under(m, o) for o in masks)]
    # Open what must survive before the masks hide it, then bind it back in at the same path.
    handles = {path: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in keep}
    for mask in masks:
        _mount(libc, "tmpfs", mask, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path, handle in handles.items():
        if any(_under(path, mask) for mask in masks):
            os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC, None)
        os.close(handle)
    for point, flags in _mount_points():
        if _under(point, work) or _under(point, "/proc"):
            continue
        try:
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None)
        except OSError:
            if point == "/":
                raise


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


def _enter(config: Mapping[str, object]) -> int | None:
    """Build the sandbox described by `config` around this process.

    Returns None in the process that must go on to run the command (unprivileged, limited, in
    `work`), or the exit status of that process in the namespace's watcher (isolated level only).
    """
    work = str(config["work"])
    limits = {str(k): int(v) for k, v in dict(config["limits"]).items()}  # type: ignore[call-overload]
    uid = config.get("uid")
    if config["level"] == ISOLATED:
        _isolate(work, [str(p) for p in config["expose"]])  # type: ignore[attr-defined]
        pid = os.fork()
        if pid:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        # PID 1 of the new namespace: a /proc of its own hides every process outside the sandbox.
        with contextlib.suppress(OSError):
            _mount(_libc(), "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    if config["level"] in (ISOLATED, UID):
        assert isinstance(uid, int)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.chdir(work)
    _apply_limits(limits)
    return None


def _config_env(config: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(config["env"]).items()}  # type: ignore[call-overload]


def launch(config: Mapping[str, object], command: Sequence[str]) -> int:
    """Build the sandbox described by `config`, run `command` in it and return its exit status."""
    env = _config_env(config)
    status = _enter(config)
    if status is not None:
        return status
    os.execve(command[0], list(command), env)
    return SETUP_FAILED  # not reached


# Imported once by the fork server, so that no graded run pays for them again (asyncio and pdb: the
# focused tests and pytest's debugging plugin import them on every run). pytest_timeout is left out on
# purpose: pytest loads it with -p and warns when a -p plugin was imported before its rewrite hook.
PRELOAD = ("pytest", "hypothesis", "hypothesis.strategies", "asyncio", "pdb")


def _serve() -> int:
    """The fork server: import pytest once, then fork one sandboxed pytest run per request on stdin.

    Each request is one JSON line {"config", "args", "log"}; the replies are {"pid"} as soon as the
    run started and {"status"} when it ended. The server is single-threaded and never imports
    learner code, so every run starts from the same clean import state.
    """
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from _pytest.config import default_plugins

    for plugin in default_plugins:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"_pytest.{plugin}")
    replies = sys.stdout.buffer
    replies.write(json.dumps({"ready": True}).encode() + b"\n")
    replies.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _serve_one(request)
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        replies.flush()
        # Kill what the run left in its group while the run is still a zombie, so its pid (the
        # group id) cannot have been reused by then.
        if hasattr(os, "waitid"):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        replies.flush()
    return 0


def _serve_one(request: Mapping[str, Any]) -> NoReturn:
    """In the forked child: own session, output to the log, sandbox, then pytest; never returns."""
    code = SETUP_FAILED
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        out = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for target, source in ((0, null), (1, out), (2, out)):
            os.dup2(source, target)
        os.close(null)
        os.close(out)
        config = request["config"]
        try:
            status = _enter(config)
        except (OSError, ValueError, KeyError) as error:
            print(f"pi-course-sandbox: cannot set up the sandbox: {error}", file=sys.stderr)
            status = SETUP_FAILED
        code = status if status is not None else _run_pytest(config, [str(a) for a in request["args"]])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_pytest(config: Mapping[str, object], args: Sequence[str]) -> int:
    """Run pytest exactly as `python -m pytest ARGS` would, in this (already sandboxed) process."""
    import atexit
    import runpy
    import tempfile
    import traceback

    env = _config_env(config)
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    tempfile.tempdir = None
    sys.path.insert(0, str(config["work"]))  # what `python -m` puts first: the working folder
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - fd 0 is /dev/null; the server read requests there
    sys.argv = ["-m", *args]  # runpy replaces the first item with the path of pytest/__main__.py
    code: object = 0
    try:
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:  # what the interpreter does with an uncaught exception: print it, exit 1
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _main(argv: Sequence[str]) -> int:
    if list(argv) == ["--serve"]:
        return _serve()
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
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
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
    return Sandboxed(returncode, timed_out, output, level, time.perf_counter() - started)


def server_env() -> dict[str, str]:
    """The fork server's own environment: only what must hold from interpreter start (hash seed, locale)."""
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING")
    return {k: v for k, v in minimal_env(Path("/nonexistent")).items() if k in keep}


class ForkServer:
    """One grading slot's fork server: a separate, single-threaded process that imported pytest once.

    The grader itself is multi-threaded and must not fork; the server forks one child per run, and
    the child builds the same sandbox as the launcher (namespaces, uid, rlimits, scrubbed environment)
    before it runs pytest. This saves the interpreter start and the pytest imports of every run.
    """

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def _running(self) -> subprocess.Popen[bytes]:
        """The server process, started (and its imports done) if it is not running."""
        if self.process is not None and self.process.poll() is None:
            return self.process
        self.close()
        with self.log.open("ab") as sink:
            # -s -P rather than -I: -I would also ignore PYTHONHASHSEED, which must be fixed at start.
            self.process = subprocess.Popen(
                [sys.executable, "-s", "-P", str(Path(__file__).resolve()), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
                start_new_session=True,
                env=server_env(),
                cwd="/",
            )
        self._pending = b""
        assert self.process.stdout is not None
        # Wait for the imports here, so that they never count against a learner's wall time.
        if self._reply(self.process.stdout, time.perf_counter() + 120) != {"ready": True}:
            raise EOFError("the fork server did not start")
        return self.process

    def close(self) -> None:
        """Stop the server (and anything it still runs)."""
        process, self.process = self.process, None
        if process is None:
            return
        _kill_group(process.pid)
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def _reply(self, stream: IO[bytes], deadline: float) -> dict[str, Any] | None:
        """The server's next reply, or None when the deadline passed first."""
        while b"\n" not in self._pending:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([stream], [], [], remaining)
            if ready:
                chunk = os.read(stream.fileno(), 4096)
                if not chunk:
                    raise EOFError("the fork server stopped")
                self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(
        self,
        args: Sequence[str],
        work: Path,
        env: Mapping[str, str],
        limits: Limits,
        level: str,
        log: Path,
        uid: int | None = None,
    ) -> Sandboxed:
        """Run `pytest ARGS` in `work` under the sandbox; like `run`, with the same kill on wall time."""
        request = {"config": _config(work, env, limits, level, uid), "args": list(args), "log": str(log)}
        timed_out, problem = False, ""
        returncode = SETUP_FAILED
        started = time.perf_counter()
        try:
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            started = time.perf_counter()
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            started_reply = self._reply(process.stdout, started + 60)
            if started_reply is None:
                raise EOFError("the fork server did not start the run")
            pid = int(started_reply["pid"])
            ended = self._reply(process.stdout, started + limits.wall_seconds)
            if ended is None:
                timed_out = True
                _kill_group(pid)
                ended = self._reply(process.stdout, time.perf_counter() + 60)
                if ended is None:
                    raise EOFError("the fork server did not end the run")
            returncode = -signal.SIGKILL if timed_out else int(ended["status"])
        except (OSError, EOFError, ValueError, KeyError, TypeError) as error:
            self.close()
            problem = f"\npi-course-sandbox: cannot run the sandbox: {error}\n"
        output = log.read_bytes()[-200_000:].decode("utf-8", "replace") if log.is_file() else ""
        return Sandboxed(returncode, timed_out, output + problem, level, time.perf_counter() - started)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def best_level(scratch: Path, uid: int) -> str:
    """The strongest level that works here: try the interpreter once at each level, strongest first."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return LIMITS
    for level in (ISOLATED, UID):
        probe = scratch / f"sandbox-probe-{level}"
        probe.mkdir(parents=True, exist_ok=True)
        prepare_work(probe, uid)
        result = run(
            [sys.executable, "-c", "import pytest"],
            probe,
            minimal_env(probe),
            Limits(wall_seconds=60),
            level,
            scratch / f"sandbox-probe-{level}.log",
            uid,
        )
        if result.returncode == 0:
            return level
    return LIMITS


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
