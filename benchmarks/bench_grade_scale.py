"""Benchmark `pi-course grade` at class scale: N folders copied from one practice folder, growing N.

Usage: python benchmarks/bench_grade_scale.py [--fresh-sandbox] [N ...]   (default: 100 300 1000)
The folders are a third each complete (the solution's tool.py), untouched starter, and partial (Labs 6.1
and 6.2 done, 6.3 a stub), one level below a submissions root. Prints, per N: wall seconds, seconds per
folder, CPU seconds of everything started, the 1-minute load average, and the status counts.
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
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.learner import practice


def make_class(root: Path, size: int) -> Path:
    """`size` submissions below `root/sub`: complete, starter and partial in turn; return the root."""
    course = manifest.load()
    checkpoint = course.checkpoint("06")
    solution = (course.root / checkpoint.solution / "pi_course/tool.py").read_text(encoding="utf-8")
    partial = strip_solution(solution, "tool.py", labs={"6.3"})
    template = root / "template"
    practice.create(course, checkpoint, template)
    for index in range(size):
        folder = root / "sub" / f"learner-{index:04d}" / "pi-practice"
        shutil.copytree(template, folder)
        kind = index % 3
        if kind == 0:
            (folder / "pi_course/tool.py").write_text(solution, encoding="utf-8")
        elif kind == 2:
            (folder / "pi_course/tool.py").write_text(partial, encoding="utf-8")
    return root / "sub"


def main(sizes: list[int], options: list[str]) -> None:
    """Grade each class size once (with `options` passed to `pi-course grade`) and print the timings."""
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-grade-scale-") as tmp:
            root = Path(tmp)
            submissions = make_class(root, size)
            out = root / "grades.jsonl"
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            command = [
                sys.executable,
                "-m",
                "pi_course_kit.cli",
                "grade",
                "--submissions-root",
                str(submissions),
            ]
            command += ["--jobs", "2", "--json", str(out), "--quiet", *options]
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
            elapsed = time.perf_counter() - started
            cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
            lines = out.read_text(encoding="utf-8").splitlines()
            statuses = Counter(json.loads(line)["status"] for line in lines)
            print(
                f"{size:>5} folders: wall {elapsed:7.1f} s ({elapsed / size:.3f} s/folder), "
                f"cpu {cpu:7.1f} s ({cpu / size:.3f} s/folder), load {os.getloadavg()[0]:.1f}  "
                f"{dict(statuses)}",
                flush=True,
            )


if __name__ == "__main__":
    flags = [arg for arg in sys.argv[1:] if arg.startswith("--")]
    main([int(arg) for arg in sys.argv[1:] if not arg.startswith("--")] or [100, 300, 1000], flags)
