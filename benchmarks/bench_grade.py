"""Benchmark `pi-course grade`: N generated practice folders (complete, partial, broken) with --jobs 2.

Usage: python benchmarks/bench_grade.py [N ...]   (default: 10 50 100)
Prints one line per class size: seconds, seconds per folder, and the status counts.
The CPU figure misses the sandboxed runs under bubblewrap (its PID-namespace init reaps them); compare wall
times.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.learner import practice


def make_class(root: Path, size: int) -> list[Path]:
    """Generate `size` practice folders: a third complete, a third partial (no Lab 6.3), a third broken."""
    course = manifest.load()
    checkpoint = course.checkpoint("06")
    solution = (course.root / checkpoint.solution / "pi_course/tool.py").read_text(encoding="utf-8")
    start = solution.index("    # BEGIN LAB 6.3\n    tool = registry.get")
    end = solution.index("    # END LAB 6.3\n", start)
    partial = solution[:start] + '    raise NotImplementedError("Lab 6.3")\n' + solution[end:]
    broken = solution.replace(
        "def string_value(value: object) -> str:", "def string_value(value: object) -> str\n", 1
    )
    template = root / "template"
    practice.create(course, checkpoint, template)
    folders = []
    for index in range(size):
        folder = root / f"learner-{index:03d}"
        shutil.copytree(template, folder)
        kind = index % 3
        if kind == 0:
            (folder / "pi_course/tool.py").write_text(solution, encoding="utf-8")
        elif kind == 1:
            (folder / "pi_course/tool.py").write_text(partial, encoding="utf-8")
        else:
            (folder / "pi_course/tool.py").write_text(broken, encoding="utf-8")
        folders.append(folder)
    return folders


def main(sizes: list[int]) -> None:
    """Grade each class size once and print the timings."""
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
            root = Path(tmp)
            folders = make_class(root, size)
            out = root / "grades.jsonl"
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pi_course_kit.cli",
                    "grade",
                    *map(str, folders),
                    "--jobs",
                    "2",
                    "--json",
                    str(out),
                    "--quiet",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            elapsed = time.perf_counter() - started
            cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
            statuses = Counter(
                json.loads(line)["status"] for line in out.read_text(encoding="utf-8").splitlines()
            )
            print(
                f"{size:>4} folders: wall {elapsed:6.1f} s ({elapsed / size:.2f} s/folder), "
                f"cpu {cpu:6.1f} s (cpu/2 = {cpu / 2:5.1f} s), load {os.getloadavg()[0]:.1f}  "
                f"{dict(statuses)}",
                flush=True,
            )


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [10, 50, 100])
