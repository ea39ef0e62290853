#!/usr/bin/env python3
"""Time the learner loop: practice-folder creation and one lab's feedback, against a bare pytest floor.

Run from the kit root with the venv active: `python benchmarks/bench_learner.py [--runs 9]`.
Prints a Markdown table of wall-clock medians (subprocess start to exit, as the learner waits).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from pi_course_kit.core import manifest  # noqa: E402

LEAN = ["--disable-plugin-autoload", "-p", "pytest_timeout", "-p", "no:cacheprovider"]


def bare_python() -> list[str]:
    """A python3 without the kit's site-packages: the system one if it has no pytest, else `-S`."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system:
        probe = subprocess.run([system, "-c", "import pytest"], capture_output=True)
        if probe.returncode != 0:
            return [system]
    return [sys.executable, "-S"]


CPU: list[float] = []  # CPU seconds (user + sys) of each timed subprocess, in order


def timed(command: list[str], cwd: Path, expect: int | None = None) -> float:
    """Seconds from start to exit of one subprocess; its CPU time goes to CPU (steadier under load)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if expect is not None and done.returncode != expect:
        raise SystemExit(
            f"{command} exited {done.returncode}, expected {expect}:\n{done.stdout}{done.stderr}"
        )
    return elapsed


def runner(command: list[str], cwd: Path, expect: int) -> Callable[[int], float]:
    """A timed action for `measure`."""
    return lambda _i: timed(command, cwd, expect)


def measure(runs: int, action: Callable[[int], float]) -> tuple[float, float, float]:
    """(median wall, min wall, median CPU) over `runs` calls, after one untimed warm-up."""
    action(-1)
    del CPU[:]
    samples = [action(i) for i in range(runs)]
    return statistics.median(samples), min(samples), statistics.median(CPU)


def main() -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    course = manifest.load()
    cp = course.checkpoint("06")
    py = sys.executable
    pi_course = [py, "-m", "pi_course_kit.cli"]
    rows: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="pi-bench-") as tmp:
        base = Path(tmp)

        def practice_bare(i: int) -> float:
            return timed(
                [*bare_python(), str(ROOT / "scripts" / "practice"), "06", str(base / f"b{i}")], base, 0
            )

        def practice_cli(i: int) -> float:
            return timed([*pi_course, "practice", "06", str(base / f"c{i}")], base, 0)

        rows.append(
            ("practice folder, `python3 scripts/practice` (stdlib only)", *measure(args.runs, practice_bare))
        )
        rows.append(("practice folder, `pi-course practice`", *measure(args.runs, practice_cli)))

        floor_dir = base / "floor"
        floor_dir.mkdir()
        (floor_dir / "test_trivial.py").write_text("def test_trivial():\n    assert True\n", encoding="utf-8")
        floor = measure(args.runs, lambda i: timed([py, "-m", "pytest", "-q"], floor_dir, 0))
        rows.append(("floor: bare `python -m pytest` on one trivial test (plugins autoloaded)", *floor))
        lean = measure(args.runs, lambda i: timed([py, "-m", "pytest", "-q", *LEAN], floor_dir, 0))
        rows.append(("floor: the same, plugins not autoloaded (practice-folder flags)", *lean))

        starter = base / "c0"
        solved = base / "solved"
        shutil.copytree(starter, solved)
        for relative in cp.teaching_files:
            shutil.copyfile(course.root / cp.solution / relative, solved / relative)
        cases = [
            ("6.1", "lab6_1", "starter, red", starter, 1),
            ("6.1", "lab6_1", "solved, green", solved, 0),
            ("6.2", "lab6_2", "starter, red", starter, 1),
            ("6.2", "lab6_2", "solved, green", solved, 0),
        ]
        for lab, marker, label, folder, code in cases:
            for name, command in (
                (f"`python -m pytest -m {marker}` ({label})", [py, "-m", "pytest", "-m", marker]),
                (f"`pi-course check --lab {lab}` ({label})", [*pi_course, "check", "--lab", lab]),
            ):
                rows.append((name, *measure(args.runs, runner(command, Path(folder), int(code)))))
    print(f"runs: {args.runs} (+1 warm-up), cores: {os.cpu_count()}, python {sys.version.split()[0]}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print()
    print("| what | median s | min s | × lean floor (median) | median CPU s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, median, fastest, cpu in rows:
        print(f"| {name} | {median:.3f} | {fastest:.3f} | {median / lean[0]:.2f} | {cpu:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
