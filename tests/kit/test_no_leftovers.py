"""Checkpoint 08's focused tests start real processes and write real files: none may outlive its test.

The 08 tests run in a staged solution tree with a temporary folder of their own (TMPDIR) and an
environment marker that every process they start inherits. Before and after the run, the folder is
listed and the processes that carry the marker are counted.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pi_course_kit.core.manifest import Course
from pi_course_kit.core.runner import run_tests
from pi_course_kit.core.staging import staged

PROBE = "PI_COURSE_LEFTOVER_PROBE"
FOCUSED = "tests/test_08_coding_tools.py"


def marked_processes(token: str) -> list[int]:
    """Pids of the running processes whose environment holds PROBE=token (zombies hold none)."""
    needle = f"{PROBE}={token}"
    if Path("/proc/self/environ").exists():
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if needle.encode() in environ.read_bytes().split(b"\0"):
                    found.append(int(environ.parent.name))
            except OSError:
                continue
        return found
    # macOS: ps -E shows each process's environment after its command line.
    listing = subprocess.run(["ps", "-E", "-ax", "-o", "pid=,command="], capture_output=True, text=True)
    return [int(line.split()[0]) for line in listing.stdout.splitlines() if needle in line.split()]


def listing(folder: Path) -> list[str]:
    """Every entry under `folder`, relative, sorted."""
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


@pytest.mark.slow
def test_the_08_focused_tests_leave_no_process_and_no_file_behind(real_course: Course) -> None:
    """After the 08 focused tests ran on the solution, is their temp folder empty and no process of theirs
    alive?"""
    checkpoint = real_course.checkpoint("08")
    token = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="pi-course-leftovers-") as scratch:
        temp = Path(scratch)
        before = (listing(temp), marked_processes(token))
        env = {**os.environ, "TMPDIR": str(temp), PROBE: token}
        with staged(real_course, checkpoint, real_course.root / checkpoint.solution) as tree:
            result = run_tests(tree, ("--tb=short", FOCUSED), env=env, timeout=240)
        after = (listing(temp), marked_processes(token))

    assert before == ([], [])
    ran = [test for test in result.tests if "test_08_coding_tools" in test.nodeid]
    assert ran, result.output[-2000:]
    assert [t.nodeid for t in ran if t.outcome != "passed"] == [], result.output[-2000:]
    # Processes first: a survivor could still be writing into the folder.
    assert after[1] == [], f"still running after the 08 tests: {after[1]}"
    assert after[0] == [], f"left in the tests' temp folder: {after[0]}"


def test_the_process_probe_sees_a_marked_process() -> None:
    """Does the probe find a live process that carries the marker, and lose it once it has ended?"""
    token = secrets.token_hex(8)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, PROBE: token},
    )
    try:
        assert marked_processes(token) == [child.pid]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
    assert marked_processes(token) == []
