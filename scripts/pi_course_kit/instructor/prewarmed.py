"""Run the focused tests in processes forked from an interpreter that has already imported pytest.

`verify` and the mutation runs start pytest hundreds of times on the instructor's own trees, and a
fresh interpreter spends about 0.6 s of each start importing pytest, its plugins and Hypothesis. Here
a server process imports them once, and every run is a fork of it that then behaves as
`python -m pytest` would in the tree: its own folder, the run's environment only, the `sys.path` of a
fresh interpreter, its own process group. Each thread of the caller has a server of its own, so runs
side by side never wait for each other.

Only trusted code runs this way (the instructor's solutions and starters); graded learner code goes
through the grading sandbox, which has a fork server of its own (`grade.forkserver`).

Why by hand: the standard library's multiprocessing "forkserver" re-runs the caller's main script in
every child it forks, and no kept library forks a preloaded interpreter into a plain `pytest` run.

Protocol (one JSON line each way per run, on the server's stdin and stdout):
- caller -> server: {"args", "cwd", "env", "output", "path", "timeout"};
- server -> caller: {"returncode", "timed_out"}.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pi_course_kit.core.runner import pytest_command, run_in_subprocess

#: Imported once in the server: pytest with the plugins every run loads, and Hypothesis.
PRELOAD = ("pytest", "_pytest.python", "_pytest.terminal", "hypothesis", "hypothesis.strategies", "asyncio")
#: The arguments `pytest_command` puts before a run's own.
BASE_ARGS = pytest_command()[3:]
#: Set in the environment of runs that come from the server (its tests check that it was used).
MARK_ENV = "PI_COURSE_PREWARMED"


# -- the server -------------------------------------------------------------------------------------


def _child(request: dict[str, Any]) -> int:
    """The forked run: become `python -m pytest` in the request's folder, and run."""
    os.setpgrp()  # one group per run, so a timeout ends the tests' own subprocesses too
    sink = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cwd = request["cwd"]
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["PWD"] = cwd
    os.environ[MARK_ENV] = "1"
    sys.path[:] = [cwd, *request["path"]]
    sys.argv = [sys.argv[0], *request["args"]]
    sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    random.seed()
    import hypothesis.configuration
    import pytest

    # Hypothesis fixed its home folder when the server imported it; a fresh run's is its own folder.
    hypothesis.configuration.set_hypothesis_home_dir(Path(cwd) / ".hypothesis")
    return int(pytest.main(list(request["args"])))


def _serve_one(request: dict[str, Any]) -> dict[str, Any]:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(request)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + float(request["timeout"])
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": False}
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"returncode": -9, "timed_out": True}
        time.sleep(0.01)


def serve() -> None:
    """Import pytest once, then answer one run per request line until stdin closes."""
    for name in PRELOAD:
        importlib.import_module(name)
    requests, answers = sys.stdin, sys.stdout
    for line in requests:
        answers.write(json.dumps(_serve_one(json.loads(line))) + "\n")
        answers.flush()


# -- the caller's side ------------------------------------------------------------------------------


@functools.cache
def _fresh_path() -> tuple[str, ...]:
    """`sys.path` of a fresh interpreter without PYTHONPATH, minus the script's folder in front."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(str(entry) for entry in json.loads(found.stdout))


class _Server:
    """One server process, used by one thread at a time."""

    def __init__(self) -> None:
        kit = str(Path(__file__).resolve().parents[2])  # the folder that holds pi_course_kit
        env = dict(os.environ)
        env["PYTHONPATH"] = kit
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from pi_course_kit.instructor.prewarmed import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            encoding="utf-8",
        )
        # The server ends with its thread (a pool's thread goes once its pool is done) or at exit.
        weakref.finalize(self, _stop, self.process)

    def run(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The server's answer, or None when it is gone (the caller then starts pytest itself)."""
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        if stdin is None or stdout is None or self.process.poll() is not None:
            return None
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            answer = stdout.readline()
            return dict(json.loads(answer)) if answer else None
        except (OSError, ValueError):
            return None


def _stop(process: subprocess.Popen[str]) -> None:
    """End a server: its stdin closes, so it leaves its loop and exits."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


_local = threading.local()


def _server() -> _Server:
    server: _Server | None = getattr(_local, "server", None)
    if server is None or server.process.poll() is not None:
        server = _local.server = _Server()
    return server


def launch(args: Sequence[str], tree: Path, env: dict[str, str], timeout: float) -> tuple[int, str, bool]:
    """A `runner.Launch`: pytest in a fork of this thread's warm server (a fresh interpreter without one)."""
    with tempfile.TemporaryDirectory(prefix="pi-course-run-") as tmp:
        output = Path(tmp) / "output.txt"
        request = {
            "args": [*BASE_ARGS, *args],
            "cwd": str(tree),
            "env": env,
            "output": str(output),
            "path": list(_fresh_path()),
            "timeout": timeout,
        }
        answer = _server().run(request)
        if answer is None:
            return run_in_subprocess(args, tree, env, timeout)
        text = output.read_text(encoding="utf-8", errors="replace") if output.exists() else ""
    return int(answer["returncode"]), text, bool(answer["timed_out"])
