"""Helpers shared by the learner-workflow tests: make practice folders, run the CLI, snapshot trees."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import practice

CLI = [sys.executable, "-m", "pi_course_kit.cli"]


def make_folder(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """A fresh practice folder (starter state), made in-process."""
    return practice.create(course, checkpoint, dest)


def solve(course: Course, checkpoint: Checkpoint, folder: Path) -> None:
    """Copy the solution's teaching files into a practice folder, as a learner who finished would have."""
    for relative in checkpoint.teaching_files:
        shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)


def run_cli(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `pi-course ARGS` in its own interpreter from `cwd` (plain output: not a terminal)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (relative posix path -> digest); proves nothing was touched."""
    if not root.exists():
        return {}
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
