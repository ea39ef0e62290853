"""The fork server that runs inside one grading slot's bubblewrap sandbox (standard library + pytest).

The grader copies this file into the sandbox and starts it as PID 1 of the sandbox's PID namespace.
It imports pytest and hypothesis once (trusted code only, never a learner's), then serves one run
per request: it forks a child that drops to the slot's uid, applies the limits and runs pytest in the
staged tree, so no learner pays for the interpreter start and those imports. Between two learners
it makes sure nothing of the first survives: every other process of the sandbox is killed and reaped,
the private /tmp is emptied, and a run that leaves System V IPC objects, POSIX message queues or
changes this process's limits makes the server quit, so the grader builds a fresh sandbox.

Protocol (a SOCK_SEQPACKET socket whose descriptor is the one argument, one JSON object per message):
- server -> grader, once: {"ready": true}
- grader -> server, per run, with two descriptors (report file, output log) attached:
  {"cwd", "args", "uid", "limits", "wall_seconds", "report_env"}
- server -> grader: {"returncode", "timed_out", "seconds", "fresh"}; "fresh": false means the server
  is about to exit and the grader must start a new sandbox before the next run.
Why by hand: no kept library forks a preloaded interpreter into a sandbox it shares with nothing.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import pkgutil
import random
import resource
import select
import signal
import socket
import stat
import sys
import time
from typing import Any

REPORT_FD = 3  # in the child, where nothing else stays open
SETUP_FAILED = 125
MAX_TMP_ENTRIES = 2_000
PR_SET_DUMPABLE, PR_CAPBSET_DROP = 4, 24
CAPABILITY_VERSION_3 = 0x20080522
RLIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "processes": resource.RLIMIT_NPROC,
    "file_bytes": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
}
BASELINE: list[object] = []  # state() once the server is ready
# Modules every run imports: loaded once here, before any learner code exists in this process.
PRELOAD = ("pytest", "hypothesis", "hypothesis.strategies", "asyncio", "pdb", "unittest")


def preload() -> None:
    """Import pytest with all its built-in plugins, hypothesis and their heavy standard modules."""
    for name in PRELOAD:
        importlib.import_module(name)
    import _pytest

    for module in pkgutil.walk_packages(_pytest.__path__, "_pytest."):
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional plugin that cannot load here is loaded (and fails) per run
            continue
    gc.collect()
    # Objects that exist now are shared copy-on-write with every child; freezing keeps the
    # children's garbage collector from touching (and so copying) them.
    gc.freeze()


def state() -> list[object]:
    """What a run could change about this process from outside (same uid): limits, priority, CPUs."""
    limits = [
        resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")
    ]
    return [
        limits,
        os.getpriority(os.PRIO_PROCESS, 0),
        sorted(os.sched_getaffinity(0)),
        os.sched_getscheduler(0),
    ]


def send(channel: socket.socket, message: dict[str, Any]) -> None:
    """One JSON message to the grader."""
    channel.send(json.dumps(message).encode("utf-8"))


def become(uid: int) -> None:
    """Drop from root to `uid` for good, as `setpriv --reuid --regid --clear-groups --inh-caps=-all
    --bounding-set=-all` does: no capability left in any set, none to regain.

    By hand with ctypes: the standard library has no capset or PR_CAPBSET_DROP, and python-prctl needs
    the libcap headers to build.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
        for cap in range(int(last.read()) + 1):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"cannot drop capability {cap} from the bounding set")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # the kernel empties the permitted, effective and ambient sets
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice (64-bit sets)
    if libc.capset(header, nothing) != 0:  # the inheritable set is left to us
        raise OSError(ctypes.get_errno(), "cannot clear the capability sets")


def child(request: dict[str, Any], report: int, log: int) -> int:
    """In the forked child: become the learner's run, then run pytest; return its exit status."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(report, REPORT_FD)
    os.closerange(REPORT_FD + 1, 65536)  # the control socket too: a run can never talk to the grader
    signal.signal(signal.SIGINT, signal.default_int_handler)
    uid = request["uid"]
    if uid is not None:
        become(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        os.write(2, b"pi-course-sandbox: refusing to run learner code as uid 0\n")
        return SETUP_FAILED
    for key, value in request["limits"].items():
        resource.setrlimit(RLIMITS[key], (int(value), int(value)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir(request["cwd"])
    # The sandbox's own environment (bwrap --clearenv, then --setenv), plus where this run stands.
    os.environ["PWD"] = request["cwd"]
    os.environ[request["report_env"]] = f"/proc/self/fd/{REPORT_FD}"
    sys.argv = ["pytest", *request["args"]]
    random.seed()
    import pytest

    return int(pytest.main(list(request["args"])))


def wait(pid: int, wall_seconds: float) -> tuple[int, bool]:
    """Wait for the child until the wall time; the exit status like subprocess's, and whether it timed out."""
    handle = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([handle], [], [], wall_seconds)
    finally:
        os.close(handle)
    timed_out = not ready
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), timed_out


def end_everything() -> bool:
    """Kill and reap every other process of the sandbox; True when there was none left to kill."""
    alone = True
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # as PID 1: every process of the namespace except this one
            alone = False
        except ProcessLookupError:
            pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return alone
        if pid == 0:
            time.sleep(0.001)  # killed, not yet gone; a process forked after the kill gets the next one


def empty(folder: str) -> bool:
    """Remove everything below `folder` without following links; False when there is too much of it."""
    removed = 0
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files + dirs:
            path = os.path.join(root, name)
            removed += 1
            if removed > MAX_TMP_ENTRIES:
                return False
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                os.rmdir(path)
            else:
                os.unlink(path)
    return True


def open_folders(folder: str) -> None:
    """Let the walk enter folders a run closed (mode 000) before they are removed."""
    for root, dirs, _ in os.walk(folder, onerror=lambda error: None):
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)


def leftovers() -> bool:
    """Whether the run left System V IPC objects or POSIX message queues behind."""
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="utf-8") as table:
                if len(table.read().strip().splitlines()) > 1:
                    return True
        except OSError:
            continue
    try:
        return bool(os.listdir("/dev/mqueue"))
    except OSError:
        return False


def clean_up() -> bool:
    """After a run: nothing of it may reach the next learner. True when this server may serve again."""
    alone = end_everything()
    try:
        open_folders("/tmp")
        emptied = empty("/tmp")
    except OSError:
        emptied = False
    return alone and emptied and not leftovers() and state() == BASELINE


def serve(channel: socket.socket) -> int:
    """Answer run requests until the grader closes the socket; return 0 in the server, the run's status in a child."""
    send(channel, {"ready": True})
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 16, 2)
        if not message:
            return 0
        request = json.loads(message)
        if len(fds) != 2 or state() != BASELINE:
            for fd in fds:
                os.close(fd)
            send(channel, {"returncode": SETUP_FAILED, "timed_out": False, "seconds": 0.0, "fresh": False})
            return 0
        report, log = fds
        started = time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            channel.detach()  # the descriptor is closed in `child`, with every other one it does not need
            try:
                return child(request, report, log)
            except BaseException as error:  # a set-up failure, before or around pytest
                os.write(2, f"pi-course-sandbox: {type(error).__name__}: {error}\n".encode())
                return SETUP_FAILED
        os.close(report)
        os.close(log)
        returncode, timed_out = wait(pid, float(request["wall_seconds"]))
        fresh = clean_up()
        seconds = time.perf_counter() - started
        send(channel, {"returncode": returncode, "timed_out": timed_out, "seconds": seconds, "fresh": fresh})
        if not fresh:
            return 0


def main() -> int:
    """Preload, harden this process, then serve."""
    # Nothing a run does may reach this process: not ptrace, not /proc/1/mem, not its files in /proc.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # As PID 1, a signal from inside the namespace only arrives when a handler is installed.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    channel = socket.socket(fileno=int(sys.argv[1]))
    preload()
    BASELINE[:] = state()
    return serve(channel)


if __name__ == "__main__":
    sys.exit(main())
