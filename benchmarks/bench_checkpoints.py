#!/usr/bin/env python3
"""Time each lab's feedback in fresh practice folders of every checkpoint, red (starter) and green (solved).

Run from the repository root with the kit's venv: `python benchmarks/bench_checkpoints.py [--kit DIR]`.
`--kit DIR` times another checkout of the kit instead (e.g. a `git worktree` of an older commit),
for before/after figures. Prints Markdown rows: median wall and median CPU (user + sys) of N runs.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from pi_course_kit.core import manifest  # noqa: E402

LEAN = "[pytest]\naddopts = --disable-plugin-autoload -p pytest_timeout -p no:cacheprovider\n"


def measure(folder: Path, args: list[str], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `python -m pytest ARGS` in `folder`, after one warm-up."""
    walls, cpus = [], []
    for _ in range(runs + 1):
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(time.perf_counter() - started)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls[1:]), statistics.median(cpus[1:])


def main() -> None:
    """Print the floor, then one row per checkpoint, lab and state."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", type=Path, default=ROOT, help="the kit checkout to time (default: this one)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    course = manifest.load(args.kit / "course.toml")
    floor = Path(tempfile.mkdtemp())
    (floor / "test_floor.py").write_text("def test_floor() -> None:\n    assert True\n")
    (floor / "pytest.ini").write_text(LEAN)
    print("| run | median wall s | median CPU s |\n| --- | ---: | ---: |")
    print(
        "| floor: one trivial test, practice-folder flags | {:.2f} | {:.2f} |".format(
            *measure(floor, [], args.runs)
        )
    )
    for checkpoint in course.checkpoints:
        folder = Path(tempfile.mkdtemp()) / "p"
        subprocess.run(
            [sys.executable, str(args.kit / "scripts/practice"), checkpoint.id, str(folder)],
            check=True,
            capture_output=True,
        )
        for state in ("starter (red)", "solved (green)"):
            if state.startswith("solved"):
                for relative in checkpoint.teaching_files:
                    shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
            for lab in checkpoint.required_labs:
                wall, cpu = measure(folder, ["-m", lab.marker], args.runs)
                print(f"| {checkpoint.id}: `-m {lab.marker}`, {state} | {wall:.2f} | {cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()
