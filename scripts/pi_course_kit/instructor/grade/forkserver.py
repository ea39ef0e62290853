"""The fork server that runs inside one grading slot's bubblewrap sandbox (standard library + pytest).

The grader copies this file into the sandbox and starts it as PID 1 of the sandbox's PID namespace.
It imports pytest and hypothesis once (trusted code only, never a learner's), then serves one run
per request: it forks a child that drops to the slot's uid, applies the limits and runs pytest in the
staged tree, so no learner pays for the interpreter start and those imports. While a run lasts, it
sums the CPU time and memory of all the run's processes and kills them all when the sum exceeds the
run's limits. Between two learners it makes sure nothing of the first survives: every other process
of the sandbox is killed and reaped, the private /tmp is emptied, and a run that leaves System V IPC
objects or POSIX message queues, hides anything from the check, or changes this process's state
makes the server quit, so the grader builds a fresh sandbox.

Protocol (a SOCK_SEQPACKET socket whose descriptor is the one argument, one JSON object per message):
- server -> grader, once: {"ready": true}
- grader -> server, per run, with two descriptors (report file, output log) attached:
  {"cwd", "args", "uid", "limits", "wall_seconds", "report_env"}
- server -> grader: {"returncode", "timed_out", "seconds", "fresh", "stopped"}; "fresh": false means
  the server is about to exit and the grader must start a new sandbox before the next run; "stopped"
  says which limit of the whole run ("wall", "cpu", "memory") ended it, "" when it ended by itself.
Why by hand: no kept library forks a preloaded interpreter into a sandbox it shares with nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import importlib
import json
import os
import pkgutil
import platform
import random
import resource
import select
import signal
import socket
import sys
import time
from typing import Any

#: The largest run request the server reads in one message (its `--deselect` list grows with the course).
REQUEST_BYTES = 1 << 18

REPORT_FD = 3  # in the child, where nothing else stays open
HELD_FD = 4  # the held-out modules' memory file, when the run gets one (read and closed by held_plugin)
HELD_ENV = "PI_COURSE_HELD_OUT_FD"  # held_plugin.HELD_ENV
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
# ioprio_get(2) by architecture (asm/unistd.h); IOPRIO_WHO_PROCESS with 0 is this process.
IOPRIO_GET, IOPRIO_WHO_PROCESS = {"x86_64": 252, "aarch64": 31}, 1
STATUS_FIELDS = ("Uid:", "Gid:", "Groups:", "Cap", "NoNewPrivs:", "Seccomp:", "Cpus_allowed_list:")
SHARED_FOLDERS = ("/tmp", "/dev/mqueue", "/dev/shm")
BASELINE: list[object] = []
SHARED: list[int] = []  # own_memory() once the server is ready
POLL_SECONDS = 0.05
#: How this server counts a run's memory (the record's `memory`): every process's RssAnon + RssShmem,
#: and every socket of the sandbox at the most its buffers may hold.
MEMORY_LEVEL = "proc"
#: A socket's send buffer when nobody sets it (Linux's default, used when /proc/sys does not say).
WMEM_DEFAULT = 212_992
SOCKETS_READY: list[int] = []  # sockets() once the server is ready: none of them is a run's
SOCKET_BYTES: list[int] = []  # what one socket may hold, read once the server is ready
STOPPED = {
    "cpu": "the run's processes together used more than {cpu_seconds} s of CPU time",
    "memory": "the run's processes together held more than {memory_bytes} bytes of memory",
}  # state() once the server is ready
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


def ioprio() -> int:
    """This process's I/O priority (`ioprio_get`, which the standard library does not wrap)."""
    number = IOPRIO_GET.get(platform.machine())
    if number is None:
        return -1
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(number, IOPRIO_WHO_PROCESS, 0))


def _read(path: str) -> str:
    """A small /proc file of this process; the error's name when it cannot be read (then it differs)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError as error:
        return f"unreadable: {error.errno}"


def _look(path: str) -> tuple[int, int, int] | str:
    """Mode and owner of a folder every run shares (/tmp, /dev/mqueue); a run may chmod them."""
    try:
        found = os.lstat(path)
    except OSError as error:
        return f"unreadable: {error.errno}"
    return (found.st_mode, found.st_uid, found.st_gid)


def state() -> list[object]:
    """Everything about this process and the sandbox's shared folders that a run could change.

    From outside, a process of the same uid may change its limits (prlimit), nice value, I/O
    priority, CPUs and scheduler; the rest (umask, folder, environment, signal handlers and mask)
    only this process can change, and is compared all the same, so no later learner inherits it.
    """
    limits = [
        resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")
    ]
    mask = os.umask(0o022)
    os.umask(mask)
    status = [line for line in _read("/proc/self/status").splitlines() if line.startswith(STATUS_FIELDS)]
    return [
        limits,
        os.getpriority(os.PRIO_PROCESS, 0),
        ioprio(),
        sorted(os.sched_getaffinity(0)),
        os.sched_getscheduler(0),
        os.sched_getparam(0).sched_priority,
        _read("/proc/self/oom_score_adj"),
        _read("/proc/self/timerslack_ns"),
        status,
        mask,
        os.getcwd(),
        dict(os.environ),
        [signal.getsignal(number) for number in sorted(signal.valid_signals())],
        sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        [_look(folder) for folder in SHARED_FOLDERS],
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


def child(request: dict[str, Any], report: int, log: int, held: int | None = None) -> int:
    """In the forked child: become the learner's run, then run pytest; return its exit status."""
    os.setsid()
    if held is not None:  # out of the way of the numbers below first
        held = fcntl.fcntl(held, fcntl.F_DUPFD, 100)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(report, REPORT_FD)
    if held is not None:
        os.dup2(held, HELD_FD)
        os.environ[HELD_ENV] = str(HELD_FD)
    os.closerange(HELD_FD + 1 if held is not None else REPORT_FD + 1, 65536)  # the control socket too
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


def resident(pid: str) -> int:
    """The memory a process holds that no file on disk backs, in bytes: RssAnon plus RssShmem.

    RssShmem counts shared memory (MAP_SHARED|MAP_ANONYMOUS, System V and POSIX shared memory) that
    the process has mapped: the kernel charges it to nobody's anonymous memory, and `statm`'s
    "shared" column hides it among file pages (issue #40, M1). A mapping shared by several processes
    counts once per process: the sum can only be larger than what the run holds, never smaller.
    """
    with open(f"/proc/{pid}/status", "rb") as handle:
        found = dict(line.split(b":", 1) for line in handle.read().splitlines() if b":" in line)
    return sum(int(found.get(key, b"0 kB").split()[0]) for key in (b"RssAnon", b"RssShmem")) * 1024


def sockets() -> int:
    """The sockets alive in the sandbox's network namespace (its own, from `--unshare-net`).

    Data written into a socket that nobody reads waits in kernel buffers, in no process's RssAnon
    (issue #40: one process held 2.3 GiB in 240 sockets, its RSS 7 MiB). The filter keeps every
    buffer at the default size, so a socket holds at most SOCKET_BYTES. The namespace's count includes
    a socket in flight inside another one, which no process's descriptors show.
    """
    try:
        with open("/proc/net/sockstat", "rb") as handle:
            return int(handle.readline().split()[2])  # b"sockets: used N"
    except (OSError, ValueError, IndexError):
        return 0


def socket_bytes() -> int:
    """The most one socket's buffers may hold: its send buffer, whose accounting the kernel doubles."""
    try:
        with open("/proc/sys/net/core/wmem_default", "rb") as handle:
            return 2 * int(handle.read())
    except (OSError, ValueError):
        return 2 * WMEM_DEFAULT


def usage() -> tuple[float, int, int]:
    """CPU seconds, unbacked memory in bytes (sockets counted too) and number of every process of the
    sandbox but this one.

    Between two runs the server ends every process, so whatever the PID namespace holds now is the
    run's. CPU counts each process with the children it has reaped (`cutime`, `cstime`), so time
    spent by processes already gone still counts. /proc/PID/stat and status need no ptrace rights.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = memory = count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            used = sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
            held = resident(name)
        except (OSError, ValueError, IndexError):  # gone meanwhile: its time is in its parent's cutime
            continue
        cpu, memory, count = cpu + used, memory + held, count + 1
    if SOCKET_BYTES:
        memory += max(0, sockets() - SOCKETS_READY[0]) * SOCKET_BYTES[0]
    return cpu / ticks, memory, count


def own_memory() -> int:
    """This process's unbacked resident memory: what each forked process may share with it."""
    return resident("self")


def over(limits: dict[str, Any]) -> str:
    """Which limit the run's processes exceed together ("cpu", "memory"), or "" when none."""
    cpu, memory, count = usage()
    if "cpu_seconds" in limits and cpu > float(limits["cpu_seconds"]):
        return "cpu"
    # Each process beyond the first may hold copy-on-write pages of this server's that count as its
    # own: allow that much per process, no more.
    shared = SHARED[0] if SHARED else 0
    if "memory_bytes" in limits and memory > int(limits["memory_bytes"]) + max(0, count - 1) * shared:
        return "memory"
    return ""


def wait(pid: int, wall_seconds: float, limits: dict[str, Any]) -> tuple[int, str]:
    """Wait for the child, watching the run as one whole; its exit status, and why it was stopped.

    The limits of `setrlimit` hold per process; here the run's processes are summed (CPU time and
    memory, polled), and the whole run is killed when the sum exceeds the run's limit: "wall",
    "cpu" or "memory" (empty when it ended by itself).
    """
    handle = os.pidfd_open(pid)
    deadline = time.monotonic() + wall_seconds
    stopped = ""
    try:
        while not stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "wall"
                break
            ready, _, _ = select.select([handle], [], [], min(POLL_SECONDS, left))
            if ready:
                break
            stopped = over(limits)
    finally:
        os.close(handle)
    if stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process of the run at once, not only the first
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stopped


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
    """Remove everything below `folder`; False when there is too much of it or it cannot be looked at.

    Without recursion and without paths (a run may nest folders thousands deep, far past the
    interpreter's recursion limit and PATH_MAX): one descriptor at a time, going down into the first
    folder that is not empty and back up through `..`. Nothing else runs in the sandbox by now, so
    nothing can move a folder while this walks. Links are removed, never followed.
    """
    removed = depth = 0
    here = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        while True:
            with os.scandir(here) as listing:
                names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
            below = None
            for name, is_folder in names:
                removed += 1
                if removed > MAX_TMP_ENTRIES:
                    return False
                if not is_folder:
                    os.unlink(name, dir_fd=here)
                    continue
                try:
                    os.rmdir(name, dir_fd=here)
                    continue
                except OSError as error:
                    if error.errno != errno.ENOTEMPTY:
                        raise
                # A run may have closed it (mode 000): open it for this walk, then go down.
                os.chmod(name, 0o700, dir_fd=here)
                below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
                removed -= 1  # counted again when its parent is listed anew
                break
            if below is not None:
                depth += 1
            elif depth == 0:  # back at `folder` itself, and it is empty: never above it
                return True
            else:
                below = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
                depth -= 1
            os.close(here)
            here = below
    finally:
        os.close(here)


def leftovers() -> bool:
    """Whether the run left System V IPC objects or POSIX message queues behind, or hid them.

    A table or folder this process cannot read (a run chmodded /dev/mqueue) counts as a leftover:
    what cannot be looked at is never taken for empty.
    """
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="utf-8") as table:
                if len(table.read().strip().splitlines()) > 1:
                    return True
        except OSError:
            return True
    try:
        return bool(os.listdir("/dev/mqueue"))
    except OSError:
        return True


def clean_up() -> bool:
    """After a run: nothing of it may reach the next learner. True when this server may serve again.

    Whatever goes wrong while looking (a tree that defeats the walk, a folder that cannot be read,
    anything at all) leaves the slot dirty: the server quits and the next learner gets a new sandbox.
    """
    try:
        alone = end_everything()
        return alone and empty("/tmp") and not leftovers() and state() == BASELINE
    except Exception:
        return False


def serve(channel: socket.socket) -> int:
    """Answer run requests until the grader closes the socket; return 0 in the server, the run's status in a
    child."""
    send(channel, {"ready": True})
    while True:
        message, fds, _, _ = socket.recv_fds(channel, REQUEST_BYTES, 3)
        if not message:
            return 0
        request = json.loads(message)
        if len(fds) not in (2, 3) or state() != BASELINE:
            for fd in fds:
                os.close(fd)
            send(channel, {"returncode": SETUP_FAILED, "timed_out": False, "seconds": 0.0, "fresh": False})
            return 0
        report, log = fds[:2]
        held = fds[2] if len(fds) == 3 else None
        started = time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            channel.detach()  # the descriptor is closed in `child`, with every other one it does not need
            try:
                return child(request, report, log, held)
            except BaseException as error:  # a set-up failure, before or around pytest
                os.write(2, f"pi-course-sandbox: {type(error).__name__}: {error}\n".encode())
                return SETUP_FAILED
        os.close(report)
        if held is not None:
            os.close(held)
        try:
            returncode, stopped = wait(pid, float(request["wall_seconds"]), request["limits"])
            if stopped in STOPPED:  # in the run's own output, where the grader shows a crash's reason
                reason = STOPPED[stopped].format(**request["limits"])
                with contextlib.suppress(OSError):
                    os.write(log, f"\npi-course-sandbox: stopped: {reason}\n".encode())
        finally:
            os.close(log)
        fresh = clean_up()
        seconds = time.perf_counter() - started
        answer = {
            "returncode": returncode,
            "timed_out": stopped in ("wall", "cpu"),
            "seconds": seconds,
            "memory": MEMORY_LEVEL,
        }
        send(channel, {**answer, "fresh": fresh, "stopped": stopped})
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
    SHARED[:] = [own_memory()]
    SOCKETS_READY[:], SOCKET_BYTES[:] = [sockets()], [socket_bytes()]
    return serve(channel)


if __name__ == "__main__":
    sys.exit(main())
