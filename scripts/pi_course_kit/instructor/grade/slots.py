"""One grading slot: a long-lived bubblewrap sandbox whose fork server runs its learners one at a time.

A slot owns a folder (`work`, seen as /grade/work inside) where the grader stages one learner's tree at
a time, and a fork server (`forkserver.py`) started once in the slot's sandbox. Each run is a fresh
fork of that server, so a learner pays neither for the interpreter start nor for importing pytest and
hypothesis. The server ends every process of a run before it answers, and quits (so that the next run
gets a brand-new sandbox) when a run left anything else behind; a server that dies or hangs is
replaced the same way. See docs/grading-threat-model.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from pi_course_kit.core.runner import JSON_ENV
from pi_course_kit.instructor.grade import bwrap, seccomp
from pi_course_kit.instructor.grade.sandbox import Limits, Sandboxed

SERVER_FILE = "forkserver.py"
HELD_PLUGIN_FILE = "held_plugin.py"  # in the kit folder as pi_course_held.py (the name `-p` loads)
LAB_TIME_FILE = "lab_time.py"  # in the kit folder as pi_course_lab_time.py
READY_SECONDS = 120.0  # importing pytest and hypothesis on a very busy machine
ANSWER_GRACE = 30.0  # beyond a run's wall time, before a silent server counts as hung
LOST = -int(signal.SIGKILL)  # the exit status a run gets when its server died under it
#: The largest request sent to the server: one SOCK_SEQPACKET message must fit the sender's buffer
#: (net.core.wmem_default, 208 KiB on Linux by default) and the server's read (forkserver.REQUEST_BYTES).
REQUEST_LIMIT = 128 * 1024


def request_fits(args: Sequence[str]) -> bool:
    """Whether a run with these arguments fits in one request message, with room for the rest of it."""
    return len(json.dumps(list(args)).encode("utf-8")) + 4096 <= REQUEST_LIMIT


class ServerFailed(Exception):
    """The slot's fork server did not start; the message has the end of its log."""


def install(kit: Path) -> None:
    """Copy the fork server and the grading plugins into the kit folder every sandbox sees read-only."""
    shutil.copyfile(Path(__file__).with_name(SERVER_FILE), kit / SERVER_FILE)
    shutil.copyfile(Path(__file__).with_name(HELD_PLUGIN_FILE), kit / "pi_course_held.py")
    shutil.copyfile(Path(__file__).with_name(LAB_TIME_FILE), kit / "pi_course_lab_time.py")


class SlotServer:
    """The fork server of one slot; started on first use and again after a run that left traces."""

    def __init__(
        self,
        work: Path,
        kit: Path,
        uid: int | None,
        env: Mapping[str, str],
        log: Path,
        requires: tuple[str, ...] = (),
    ) -> None:
        self.work, self.kit, self.uid, self.env, self.log = work, kit, uid, dict(env), log
        self.requires = requires
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        self.is_ready = False
        self.starts = 0

    @property
    def tree(self) -> Path:
        """Where the grader stages the learner this slot runs next."""
        return self.work / "tree"

    def start(self) -> None:
        """Start the sandbox and its server (without waiting for it to be ready)."""
        if self.process is not None and self.process.poll() is not None:
            self.stop()  # it ended between two runs (it never does so unasked): start another
        if self.process is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        rules = seccomp.descriptor()
        try:
            argv = bwrap.server_command(
                self.work, self.kit, self.uid, self.env, theirs.fileno(), rules, self.requires
            )
            with self.log.open("ab") as sink:
                self.process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={"PATH": "/usr/bin:/bin"},
                    pass_fds=(theirs.fileno(), rules),
                    **bwrap.user_options(bwrap.as_user(self.uid), self.work),
                )
        finally:
            theirs.close()
            os.close(rules)
        self.channel, self.is_ready = ours, False
        self.starts += 1

    def ready(self) -> socket.socket:
        """Wait until the server has imported everything; its channel."""
        self.start()
        assert self.channel is not None
        if self.is_ready:
            return self.channel
        self.channel.settimeout(READY_SECONDS)
        try:
            answer = self.channel.recv(1 << 16)
        except OSError:
            answer = b""
        if answer != b'{"ready": true}':
            tail = bwrap.read_tail(self.log, 2_000).strip().splitlines()
            self.stop()
            raise ServerFailed(
                f"the grading sandbox's fork server did not start: {tail[-1] if tail else 'no output'}"
            )
        self.is_ready = True
        return self.channel

    def run(self, args: Sequence[str], limits: Limits, out: Path, held: bytes | None = None) -> Sandboxed:
        """Run `python -m pytest ARGS` on the staged tree; records land in `out/report.jsonl`.

        `held` (the held-out modules, see held_plugin.py) goes to the run in a third memory file.
        """
        channel = self.ready()
        log_path = out / "output.log"
        bwrap.secure_tree(self.work, self.uid)
        # Memory files, never host files: the run must hold no descriptor it could fchmod into a
        # set-user-ID program on the host (see bwrap.channel).
        report, log = bwrap.channel("pi-course-report"), bwrap.channel("pi-course-output")
        handed = [report, log]
        if held is not None:
            handed.append(bwrap.memory_file("pi-course-held", held))
        try:
            request = {
                "cwd": bwrap.TREE,
                "args": list(args),
                # Where bwrap itself runs as the slot's uid (root without CAP_SYS_ADMIN), the server is
                # that uid already and has nothing to drop.
                "uid": None if bwrap.as_user(self.uid) is not None else self.uid,
                "limits": {k: int(v) for k, v in asdict(limits).items() if k != "wall_seconds"},
                "wall_seconds": limits.wall_seconds,
                "report_env": JSON_ENV,
            }
            socket.send_fds(channel, [json.dumps(request).encode("utf-8")], handed)
            channel.settimeout(limits.wall_seconds + ANSWER_GRACE)
            try:
                answer = channel.recv(1 << 16)
            except OSError:  # a timeout included: the server hung
                answer = b""
            if not answer:
                self.stop()  # every process that could still write to the channels ends here
            bwrap.collect(report, out / "report.jsonl")
            bwrap.collect(log, log_path)
        finally:
            for fd in handed:
                os.close(fd)
        if not answer:
            # The server died or hung under this run: the run counts as lost (a crash), the next gets a new
            # sandbox.
            return Sandboxed(LOST, False, bwrap.read_tail(log_path), bwrap.BWRAP, limits.wall_seconds)
        ended = json.loads(answer)
        if not ended.get("fresh"):
            self.stop()
        return Sandboxed(
            int(ended["returncode"]),
            bool(ended["timed_out"]),
            bwrap.read_tail(log_path),
            bwrap.BWRAP,
            float(ended["seconds"]),
            str(ended.get("stopped", "")),
            str(ended.get("memory", "")),
        )

    def stop(self) -> None:
        """End the sandbox: closing the channel lets the server exit; killing its session makes sure."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None
