"""The grading sandbox: bubblewrap with an allow-listed file system, for root and non-root alike.

Inside: the base interpreter and the few installed packages the focused tests import (read-only),
the learner's staged tree (read-only, like everything of the host), a size-limited private /tmp, no
network, IPC, UTS or other processes (own PID namespace: every process dies with the sandbox). Two
shapes share these options: a slot's long-lived sandbox whose PID 1 is the fork server
(`server_command`, see slots.py and forkserver.py), and one fresh sandbox per run (`command`, for
`--fresh-sandbox` and the start-up probe), where `setpriv` drops root to the slot's uid and `prlimit`
sets the limits. Without root, bwrap uses an unprivileged user namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_course_kit.core.i18n import _
from pi_course_kit.core.runner import JSON_ENV
from pi_course_kit.instructor.grade import seccomp
from pi_course_kit.instructor.grade.sandbox import MEMORY_PER_PROCESS, Limits, Sandboxed

BWRAP, UNSAFE = "bwrap", "limits (--unsafe)"
HELD_ENV = "PI_COURSE_HELD_OUT_FD"  # held_plugin.HELD_ENV (that file runs in the sandbox, without the kit)
# SITE's name matters: Hypothesis scans every module outside a ".../site-packages/" path for constants.
WORK, SITE, KIT = "/grade/work", "/grade/site-packages", "/grade/kit"
#: The interpreter's installation when it is not under /usr (`placed`): no host path names it.
PYTHON, PYTHON_BIN, PYTHON_EXEC = "/opt/python", "/opt/python-bin", "/opt/python-exec"
TREE = f"{WORK}/tree"  # the staged copy, always at this path, so one compiled test module fits every learner
SERVER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
# What the focused tests and the report import besides the standard library and pi_course; the course
# adds what its own package imports (course.toml's `[course] requires`, e.g. an HTTP client). The
# sandbox gets these distributions and everything they require here (pygments, pluggy, iniconfig, ...),
# each with every top-level module it installs (pytest brings `py.py`, hypothesis `_hypothesis_*`).
ROOTS = ("pytest", "pytest-timeout", "hypothesis")
SYSTEM = ("/usr", "/etc/ld.so.cache", "/etc/alternatives")
FIRST_UID, UID_SLOTS = 200_000, 4096
SCRATCH_BYTES = 64 * 1024 * 1024
CAP_SYS_ADMIN = 21  # linux/capability.h
MFD_NOEXEC_SEAL = 0x0008  # linux/memfd.h, Linux 6.3; not in Python's os before 3.12
#: The scratch's copy of the allow-listed packages, beside the slots' folders (`copy_site`).
SITE_COPY = "site"
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2  # linux/mount.h


def fix(kind: str) -> str:
    """What to do when the sandbox cannot be built here, in the run's language (`missing`, `userns`,
    `root`)."""
    texts = {
        "missing": _(
            "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: "
            "`dnf install bubblewrap`)"
        ),
        "userns": _(
            "unprivileged user namespaces are blocked here. On Ubuntu >= 23.10 allow them for bwrap with an "
            "AppArmor profile (`/etc/apparmor.d/bwrap` with `userns,`) or "
            "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`; elsewhere "
            "`sysctl kernel.unprivileged_userns_clone=1` / `user.max_user_namespaces=15000`; in a container, "
            "run it with a seccomp profile that allows clone(CLONE_NEWUSER), or grade as root with "
            "CAP_SYS_ADMIN"
        ),
        "root": _(
            "as root, bwrap builds the namespaces itself when it has CAP_SYS_ADMIN; without it (a default "
            "container) the grader drops to an unprivileged uid and bwrap needs an unprivileged user "
            "namespace, which is blocked here; allow them (`sysctl kernel.unprivileged_userns_clone=1`, a "
            "seccomp profile that allows clone(CLONE_NEWUSER)), or give the container CAP_SYS_ADMIN (e.g. "
            "`docker run --cap-add SYS_ADMIN --security-opt seccomp=unconfined`)"
        ),
    }
    return texts[kind]


class SandboxUnavailable(Exception):
    """No sandbox can be built here; the message says why and how to fix it."""


@dataclass(frozen=True)
class Probe:
    """What the start-up probe found: the level grading runs at, and a one-line description."""

    level: str
    message: str


def distributions(requires: tuple[str, ...] = ()) -> list[importlib.metadata.Distribution]:
    """ROOTS, the course's `requires` and, transitively, every distribution they require on this Python."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: dict[str, importlib.metadata.Distribution] = {}
    wanted = [*ROOTS, *requires]
    while wanted:
        name = wanted.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            found[key] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional requirement that is not installed: the tests run without it
        for line in found[key].requires or ():
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(requirement.name)
    return [found[key] for key in sorted(found)]


@functools.cache
def site_paths(requires: tuple[str, ...] = ()) -> tuple[Path, ...]:
    """The installed top-level modules and packages of `distributions()`, as their installers recorded
    them."""
    paths: dict[str, Path] = {}
    for distribution in distributions(requires):
        for file in distribution.files or ():
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith((".dist-info", ".pth")):
                continue  # scripts in bin/, caches, metadata and path hooks: nothing a test imports
            located = Path(str(distribution.locate_file(top)))
            # Top-level extension modules count too: a mypyc-compiled distribution (mypy) ships its code
            # in one `<hash>__mypyc.cpython-*.so` beside its packages.
            if located.is_dir() or (top.endswith((".py", ".so", ".pyd")) and located.is_file()):
                paths[top] = located
    return tuple(paths[top] for top in sorted(paths))


@functools.cache
def base_site_dirs() -> tuple[str, ...]:
    """The base interpreter's own site-packages folders: bound with it, but outside the allow-list.

    Asked of the real interpreter binary itself (outside any venv), so a Debian python names its
    dist-packages and a pyenv build its lib/python3.X/site-packages.
    """
    python, _ = interpreter()
    ask = "import json, site; print(json.dumps(site.getsitepackages()))"
    try:
        found = subprocess.run(
            [str(python), "-s", "-c", ask],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
        folders = json.loads(found.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return ()
    return tuple(str(folder) for folder in folders if os.path.isdir(str(folder)))


def interpreter() -> tuple[Path, Path]:
    """The real interpreter binary and the base installation it belongs to (never the venv)."""
    return Path(os.path.realpath(sys.executable)), Path(sys.base_prefix)


@dataclass(frozen=True)
class Placed:
    """Where the sandbox sees the interpreter: its binds (host, inside), binary and environment."""

    binds: tuple[tuple[str, str], ...]
    executable: str
    env: tuple[tuple[str, str], ...]

    def inside(self, host: str) -> str:
        """The sandbox's path of a host path under one of the binds (unchanged when under none)."""
        for source, target in self.binds:
            if Path(host).is_relative_to(source):
                return str(Path(target) / Path(host).relative_to(source))
        return host


@functools.cache
def placed() -> Placed:
    """The interpreter's installation under a neutral path (`PYTHON`), unless it lives under /usr.

    Python finds its prefix from the binary's own location (the landmark `lib/python3.X/os.py` above
    it), so run from `PYTHON/bin` it reports `PYTHON` in sys.prefix, sys.executable, sys.path and
    every module's file (tracebacks), and /proc/self/exe and maps name no host path (a pyenv or uv
    build names $HOME). A shared libpython is found through the binary's RUNPATH, a host path absent
    inside, and the loader would fall back on a system libpython of another build: LD_LIBRARY_PATH
    names the bound one. mountinfo still names the installation's folder as its bind's source, and
    the installation's own bytes name it (RUNPATH, _sysconfigdata, bytecode): see the threat model.
    """
    python, base = interpreter()
    base = Path(os.path.realpath(base))  # as the binary's own path: a pyenv `versions/3.11` may be a link
    if python.is_relative_to("/usr") and base.is_relative_to("/usr"):
        return Placed((), str(python), ())  # /usr is bound as a system path (SYSTEM)
    binds: list[tuple[str, str]] = [(str(base), PYTHON)]
    env: list[tuple[str, str]] = []
    if python.is_relative_to(base):
        executable = f"{PYTHON}/{python.relative_to(base)}"
    else:  # a binary outside its installation: it cannot find the prefix from where it is
        binds.append((str(python), f"{PYTHON_BIN}/{python.name}"))
        executable = f"{PYTHON_BIN}/{python.name}"
        env.append(("PYTHONHOME", PYTHON))
    exec_prefix = Path(os.path.realpath(sys.base_exec_prefix))
    if not exec_prefix.is_relative_to(base) and not exec_prefix.is_relative_to("/usr"):
        binds.append((str(exec_prefix), PYTHON_EXEC))
        env.append(("PYTHONHOME", f"{PYTHON}:{PYTHON_EXEC}"))
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and isinstance(libdir, str):
        real = os.path.realpath(libdir)
        inside = Placed(tuple(binds), executable, ()).inside(real)
        if inside != real:
            env.append(("LD_LIBRARY_PATH", inside))
    return Placed(tuple(binds), executable, tuple(dict(env).items()))


@functools.cache
def root_builds_namespaces() -> bool:
    """Whether this process is root with CAP_SYS_ADMIN, so bwrap can build namespaces without a user one."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = next(line for line in status if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(found.split()[1], 16) >> CAP_SYS_ADMIN & 1)


def as_user(uid: int | None) -> int | None:
    """The uid bwrap itself runs as: the slot's when root lacks CAP_SYS_ADMIN (a default container), else
    None.

    Root without CAP_SYS_ADMIN cannot build namespaces, and learner code must never run as uid 0:
    the grader drops to the slot's unprivileged uid first and lets bwrap build an unprivileged user
    namespace from there, as for a non-root instructor. That uid must reach what bwrap binds: the
    interpreter (not under a closed /root), and the scratch folder (`scratch_group`).
    """
    return uid if uid is not None and not root_builds_namespaces() else None


def _sandbox(
    work: Path,
    kit: Path | None,
    uid: int | None,
    caps: Sequence[str],
    env: Mapping[str, str],
    seccomp_fd: int,
    *,
    one_run: bool,
    requires: tuple[str, ...] = (),
) -> list[str]:
    """The bwrap options every sandbox shares: namespaces, the allow-listed files, `work` read-only.

    `seccomp_fd` holds the system-call filter (seccomp.py), for bwrap to load before anything runs.
    """
    delegated = as_user(uid) is not None

    argv = [shutil.which("bwrap") or "bwrap", "--new-session", "--clearenv", "--seccomp", str(seccomp_fd)]
    if one_run:
        argv.append("--die-with-parent")
    if uid is None or delegated:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns"]
    else:
        # As root: no user namespace (its only mapped uid would be 0); learner code runs as `uid`.
        argv += ["--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        for cap in caps:
            argv += ["--cap-add", cap]
    for system in SYSTEM:
        if os.path.exists(system):
            argv += ["--ro-bind", system, system]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            argv += ["--ro-bind", f"/{link}", f"/{link}"]
    where = placed()
    for host, target in where.binds:
        argv += ["--perms", "0755", "--dir", str(Path(target).parent), "--ro-bind", host, target]
    for folder in base_site_dirs():
        # Hidden behind an empty read-only folder: only the packages bound below may be imported.
        inside = where.inside(folder)
        argv += ["--tmpfs", inside, "--remount-ro", inside]
    for folder in ("/grade", SITE):
        argv += ["--perms", "0755", "--dir", folder]
    copies = work.parent / SITE_COPY  # bound from the scratch's copies: no mount names the venv
    for path in site_paths(requires):
        source = copies / path.name if (copies / path.name).exists() else path
        argv += ["--ro-bind", str(source), f"{SITE}/{path.name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    # The filter denies the keyring calls; these two files would still list the grader's keys by name.
    argv += ["--ro-bind", "/dev/null", "/proc/keys", "--ro-bind", "/dev/null", "/proc/key-users"]
    # /dev/shm and /tmp: small private tmpfs; /dev itself read-only so nothing else there takes memory.
    argv += ["--size", str(4096), "--tmpfs", "/dev/shm", "--remount-ro", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp"]
    # Nothing of the host's disk is writable: the slot's folder (the staged copy) is read-only, and the
    # record goes to an inherited descriptor.
    argv += ["--ro-bind", str(work), WORK]
    if kit is not None:
        argv += ["--ro-bind", str(kit), KIT]
    # bwrap's own root tmpfs (and /grade on it) belong to the sandbox uid in a user namespace: read-only.
    argv += ["--remount-ro", "/"]
    for key, value in {
        **env,
        "PYTHONPATH": f"{SITE}:{KIT}" if kit is not None else SITE,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PATH": "/usr/bin:/bin",
        **dict(where.env),
    }.items():
        argv += ["--setenv", key, value]
    return argv


def command(
    work: Path,
    kit: Path | None,
    args: Sequence[str],
    limits: Limits,
    uid: int | None,
    env: Mapping[str, str],
    seccomp_fd: int,
    requires: tuple[str, ...] = (),
) -> list[str]:
    """The bwrap command line of one fresh sandbox that runs `python ARGS` in `work`/tree."""
    caps = ("CAP_SETUID", "CAP_SETGID")
    argv = _sandbox(work, kit, uid, caps, env, seccomp_fd, one_run=True, requires=requires)
    argv += ["--chdir", TREE]
    if uid is not None and as_user(uid) is None:
        argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    argv += [
        "/usr/bin/prlimit",
        f"--as={limits.memory_bytes}",
        f"--cpu={limits.cpu_seconds}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
        placed().executable,
        "-s",
        "-P",
        *args,
    ]
    return argv


def server_command(
    work: Path,
    kit: Path,
    uid: int | None,
    env: Mapping[str, str],
    control_fd: int,
    seccomp_fd: int,
    requires: tuple[str, ...] = (),
) -> list[str]:
    """The bwrap command line of a slot's long-lived sandbox, with the fork server as its PID 1.

    As root the server keeps only what it needs to drop each run to `uid`, and to end and clean up
    after it (kill, remove its files in /tmp); without root it has no capabilities at all.
    """
    argv = _sandbox(work, kit, uid, SERVER_CAPS, env, seccomp_fd, one_run=False, requires=requires)
    # No --die-with-parent: a grading thread that ends must not take the slot with it. The server
    # exits when the grader's end of its socket closes, which happens when the grader dies too.
    argv += [
        "--chdir",
        WORK,
        "--as-pid-1",
        placed().executable,
        "-s",
        "-P",
        f"{KIT}/forkserver.py",
        str(control_fd),
    ]
    return argv


def run(
    argv: Sequence[str],
    log: int,
    wall_seconds: float,
    fds: Sequence[int] = (),
    user: int | None = None,
    work: Path | None = None,
) -> tuple[int, bool, float]:
    """Run a sandbox command with output to the descriptor `log`; kill the whole session at the wall time."""
    started = time.perf_counter()
    timed_out = False
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # bwrap stays PID 1 of the sandbox, and learner code of the same uid can read its
        # /proc/1/environ: it must start with nothing of the grader's environment.
        env={"PATH": "/usr/bin:/bin"},
        pass_fds=tuple(fds),
        **user_options(user, work),
    )
    try:
        returncode = process.wait(timeout=wall_seconds)
    except subprocess.TimeoutExpired:
        timed_out, returncode = True, -signal.SIGKILL
    finally:
        # bwrap's PID namespace kills every process of the run when its init ends; killing the
        # session also ends bwrap itself if it is still there.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return returncode, timed_out, time.perf_counter() - started


_SCRATCH_LOCK = threading.Lock()


def scratch_group(work: Path, uid: int) -> int:
    """The group that may enter the scratch folder above a slot's `work` (when bwrap runs as a uid).

    The scratch stays closed to every other local user: mode 0710, group the first slot's uid, which
    every slot's bwrap gets as its one supplementary group, to reach its folder and the kit in it.
    """
    scratch = work.parent
    with _SCRATCH_LOCK:
        found = os.stat(scratch)
        if found.st_gid != 0:
            return found.st_gid
        os.chown(scratch, 0, uid)
        os.chmod(scratch, 0o710)
        return uid


def user_options(user: int | None, work: Path | None) -> dict[str, Any]:
    """Popen's options that start bwrap as `user` (see `as_user`), with the scratch's group only."""
    if user is None:
        return {}
    groups = [scratch_group(work, user)] if work is not None else []
    return {"user": user, "group": user, "extra_groups": groups}


def channel(name: str) -> int:
    """A memory file for a run's records or output: the run holds no descriptor to a file on the host.

    A host file the run could write to is a host file it could `fchmod` into a set-user-ID program
    for any local user to execute (as the slot's uid under root, as the instructor without root). A
    memory file has no path, belongs to the grader, and with MFD_NOEXEC_SEAL (Linux 6.3) can never be
    made executable; the grader copies what it holds into a file of its own once the run is over.
    """
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | MFD_NOEXEC_SEAL)
    except OSError:  # an older kernel: still no path, and as root still not the run's to chmod
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    # Reopened by the run through /proc/self/fd/N as another uid (root grading): readable and writable.
    os.fchmod(fd, 0o666)
    return fd


def memory_file(name: str, data: bytes) -> int:
    """A sealed-for-exec memory file holding `data`, for a run to read once (the held-out modules).

    Readable by the run's uid through its inherited descriptor only: it has no path on any disk.
    """
    fd = channel(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def collect(fd: int, path: Path) -> None:
    """Copy a channel's bytes into a new file of the grader's (mode 0600), replacing any there."""
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(target, 0o600)
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := os.read(fd, 1 << 20):
            os.write(target, chunk)
    finally:
        os.close(target)


def read_tail(log: Path, limit: int = 200_000) -> str:
    """The last `limit` bytes of a log, read without loading a huge file."""
    try:
        with log.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - limit))
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def sandboxed(
    work: Path,
    out: Path,
    kit: Path | None,
    args: Sequence[str],
    limits: Limits,
    uid: int | None,
    env: Mapping[str, str],
    requires: tuple[str, ...] = (),
    held: bytes | None = None,
) -> Sandboxed:
    """Run `python ARGS` in a fresh sandbox on `work`/tree; its records land in `out/report.jsonl`.

    The records and the output go to memory files (`channel`) the run inherits (`/proc/self/fd/N`
    inside), capped by the file-size limit; nothing on the host's disk is the run's to write or chmod.
    """
    secure_tree(work, uid)
    report, log = channel("pi-course-report"), channel("pi-course-output")
    rules = seccomp.descriptor()
    given = [report, rules]
    if held is not None:
        given.append(memory_file("pi-course-held", held))
    try:
        run_env = {**env, JSON_ENV: f"/proc/self/fd/{report}"}
        if held is not None:
            run_env[HELD_ENV] = str(given[-1])  # read and closed by held_plugin before any learner code
        argv = command(work, kit, args, limits, uid, run_env, rules, requires)
        user = as_user(uid)
        returncode, timed_out, seconds = run(argv, log, limits.wall_seconds, given, user, work)
        collect(report, out / "report.jsonl")
        collect(log, out / "output.log")
    finally:
        for fd in (log, *given):
            os.close(fd)
    tail = read_tail(out / "output.log")
    return Sandboxed(returncode, timed_out, tail, BWRAP, seconds, memory=MEMORY_PER_PROCESS)


def private_scratch(scratch: Path) -> bool:
    """Mount a fresh tmpfs on the (empty) scratch folder, as root with CAP_SYS_ADMIN; True when done.

    Bind mounts show their source's path inside its file system in /proc/self/mountinfo: a slot's
    folder bound from the host's /tmp named the scratch's host path inside the sandbox (issue #40,
    H3). On a file system of its own, what every bind below the scratch shows is `/slot-0`, `/kit`,
    `/site/pytest`. Without the right to mount, the scratch stays a plain folder.
    """
    if not root_builds_namespaces():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.mount(b"pi-course", os.fsencode(scratch), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0700")
    return bool(done == 0)


def release_scratch(scratch: Path) -> None:
    """Detach the scratch's tmpfs (`private_scratch`); its files go with it."""
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(scratch), MNT_DETACH)


def copy_site(scratch: Path, requires: tuple[str, ...] = ()) -> None:
    """Copy the allow-listed packages into the scratch, which the sandboxes bind them from.

    A bind of the venv's own folders named the venv's host path (the course checkout's) in every
    run's /proc/self/mountinfo. The copies keep their bytecode caches, whose code Python renames to
    the path it imports from.
    """
    target = scratch / SITE_COPY
    target.mkdir(mode=0o755)
    for path in site_paths(requires):
        if path.is_dir():
            shutil.copytree(path, target / path.name, symlinks=False, copy_function=_plain_copy)
        else:
            _plain_copy(str(path), str(target / path.name))


def _plain_copy(source: str, target: str) -> str:
    """Copy a file's bytes as a plain file, mode 0644: nothing under the scratch is executable.

    Extension modules need no execute bit to load (the scratch is not mounted noexec). The copy keeps
    the source's modification time: a `.pyc` is used only while its source's mtime and size are the
    ones it recorded, and with a new mtime every sandboxed run compiled pytest and hypothesis again
    (hypothesis imported from the copy in 0.43 s, and in 0.28 s with the mtime kept).
    """
    shutil.copyfile(source, target)
    os.chmod(target, 0o644)
    found = os.stat(source)
    os.utime(target, ns=(found.st_atime_ns, found.st_mtime_ns))
    return target


def secure_tree(work: Path, uid: int | None) -> None:
    """Close the staged tree to everyone but the run: mode 0700, owned by the slot's uid under root.

    The copy holds the learner's code and the batch's disguised tests; no other local user may read
    them (the scratch folder above is 0700 too). Inside, the tree is mounted read-only, so owning
    it lets the run read it and nothing more. The files in it stay the grader's, readable.
    """
    tree = work / "tree"
    if not tree.is_dir() or tree.is_symlink():
        return
    os.chmod(tree, 0o700)
    if uid is not None:
        os.chown(tree, uid, uid)


def probe(scratch: Path, uid: int | None) -> Probe:
    """Try the sandbox once; raise SandboxUnavailable with the fix when it cannot be built."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(
            _("grading needs Linux with bubblewrap; elsewhere pass --unsafe (no isolation)")
        )
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(_("bubblewrap (`bwrap`) is not installed: {fix}").format(fix=fix("missing")))
    try:
        seccomp.program()
    except seccomp.FilterUnavailable as error:
        raise SandboxUnavailable(str(error)) from None
    work, out = scratch / "probe-work", scratch / "probe-out"
    (work / "tree").mkdir(parents=True, exist_ok=True)
    out.mkdir(exist_ok=True)
    check = (
        f"import os, pytest, hypothesis; assert os.getuid() != 0; open(os.environ['{JSON_ENV}'], "
        "'w').write('ok')"
    )
    result = sandboxed(work, out, None, ["-c", check], Limits(wall_seconds=60), uid, {})
    if result.returncode == 0 and (out / "report.jsonl").read_text(encoding="utf-8") == "ok":
        who = _("as uid {uid} (root drops privileges)") if uid is not None else _("in a user namespace")
        if as_user(uid) is not None:
            who = _("in a user namespace as uid {uid} (root without CAP_SYS_ADMIN drops privileges first)")
        return Probe(
            BWRAP,
            _("bubblewrap sandbox {who}: no network, allow-listed files, private /tmp").format(
                who=who.format(uid=uid)
            ),
        )
    reason = result.output.strip().splitlines()[-1] if result.output.strip() else f"exit {result.returncode}"
    what = fix("root") if uid is not None else fix("userns")
    raise SandboxUnavailable(
        _("the bubblewrap sandbox does not work here ({reason}): {fix}").format(reason=reason[:200], fix=what)
    )


class UidPool:
    """Unprivileged uids claimed with lock files, so concurrent batches never share one."""

    def __init__(self, count: int, lock_dir: Path | None = None) -> None:
        # Under /run (root only): in /tmp another user could own the folder and swap the lock files.
        self.lock_dir = lock_dir or Path("/run/pi-course-grade-uids")
        self.lock_dir.mkdir(mode=0o700, exist_ok=True)
        self.uids: list[int] = []
        self._handles: list[int] = []
        for slot in range(UID_SLOTS):
            if len(self.uids) == count:
                break
            handle = os.open(
                self.lock_dir / f"{FIRST_UID + slot}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
            )
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                continue
            self.uids.append(FIRST_UID + slot)
            self._handles.append(handle)
        if len(self.uids) < count:
            raise SandboxUnavailable(
                _("no free sandbox uids left in {folder}; wait for other batches").format(
                    folder=self.lock_dir
                )
            )

    def close(self) -> None:
        """Release the uids (the kernel releases them too when the grader dies)."""
        for handle in self._handles:
            os.close(handle)
        self._handles = []
