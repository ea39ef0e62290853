"""The grading sandbox's system-call filter: no kernel keyrings and no new user namespaces.

Keyrings are the one kernel store that namespaces do not separate. Without this filter a run can
read keys from the grader's session keyring, and keys it adds to its uid's keyrings are found by
every later learner graded with that uid, in another sandbox or another batch. Seccomp denies the
three keyring calls (`add_key`, `request_key`, `keyctl`) with EPERM, like Docker's default profile.

A user namespace of its own gives a process uid 0 and every capability inside it: a large attack
surface of the kernel, and root-like powers over anything the namespace owns. `bwrap
--disable-userns` only exists where bwrap made a user namespace (not as root), so the filter denies
it in every mode: `unshare` and `clone` with CLONE_NEWUSER fail with EPERM, and `clone3`, whose
flags sit in memory a filter cannot read, fails with ENOSYS, so the C library falls back to `clone`
(as Docker's profile does).

Memory that no process maps is memory that /proc's per-process counts (`forkserver.usage`) cannot
see: a memory file (`memfd_create`, `memfd_secret`) written and never mapped, or a System V segment
(`shmget`) written and detached, holds its pages with no process's RssAnon or RssShmem showing them
(issue #40: sixty memory files of 16 MiB each held 960 MiB through a run under `--memory 512`, which
ended complete). Those calls fail with EPERM. The kit's own memory files (a run's records and output,
the held-out modules) are made by the grader, outside the sandbox, and handed in; nothing a course
runs needs them. What stays countable only by the kernel (a tmpfs file, a pipe's buffer) is bounded
by the sandbox's tmpfs sizes, RLIMIT_FSIZE and the per-user pipe pages. Data queued in a socket
waits in kernel buffers too: one process held 2.3 GiB in 240 sockets whose send buffers it had raised
to 4 MiB. Raising a socket's buffers (`setsockopt` of SO_SNDBUF, SO_RCVBUF and their FORCE forms)
fails with EPERM, so each stays at the system's default, and the fork server counts every socket of
the sandbox as that much memory (`forkserver.sockets`).
"""

from __future__ import annotations

import errno
import functools
import os

KEYRING_CALLS = ("add_key", "request_key", "keyctl")
#: Calls that make memory no process maps (see above). libseccomp older than 2.5.2 may not know
#: memfd_secret (Linux 5.14): a call it does not know cannot be made through it either, so it is skipped.
HIDDEN_MEMORY_CALLS = ("memfd_create", "memfd_secret", "shmget")
#: asm-generic/socket.h: SOL_SOCKET and the options that set a socket's buffer sizes.
SOL_SOCKET, BUFFER_OPTIONS = 1, (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
CLONE_NEWUSER = 0x10000000  # linux/sched.h


class FilterUnavailable(Exception):
    """The filter cannot be built here; the message says how to fix it."""


@functools.cache
def program() -> bytes:
    """The filter as the BPF program `bwrap --seccomp` loads, compiled by libseccomp for this machine."""
    try:
        # pyseccomp is a ctypes binding of libseccomp, which knows each architecture's call numbers
        # and its compat ABIs: a call through another ABI (x32 or i386 on x86_64) is stopped too.
        import pyseccomp
    except (ImportError, RuntimeError) as error:
        raise FilterUnavailable(
            f"the grading sandbox's system-call filter needs libseccomp ({error}): install it "
            "(Debian/Ubuntu: `apt-get install libseccomp2`; Fedora: `dnf install libseccomp`) and the "
            "kit's `pyseccomp` dependency"
        ) from error
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for call in KEYRING_CALLS:
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), call)
    new_user = pyseccomp.Arg(0, pyseccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    for call in ("unshare", "clone"):  # the flags are the first argument of both on x86_64 and arm64
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), call, new_user)
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    for call in HIDDEN_MEMORY_CALLS:
        try:
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), call)
        except OSError:  # EINVAL: a name this libseccomp does not know (see HIDDEN_MEMORY_CALLS)
            continue
    at_socket_level = pyseccomp.Arg(1, pyseccomp.EQ, SOL_SOCKET)
    for option in BUFFER_OPTIONS:
        rules.add_rule(
            pyseccomp.ERRNO(errno.EPERM),
            "setsockopt",
            at_socket_level,
            pyseccomp.Arg(2, pyseccomp.EQ, option),
        )
    # Into a memory file, not a pipe: a pipe would block libseccomp once the program outgrew its buffer.
    with os.fdopen(os.memfd_create("pi-course-seccomp", os.MFD_CLOEXEC), "w+b") as compiled:
        rules.export_bpf(compiled)
        compiled.seek(0)
        return compiled.read()


def descriptor() -> int:
    """A new descriptor, at offset 0, holding the program (bwrap reads it to the end, once)."""
    fd = os.memfd_create("pi-course-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
