"""Benchmark grading a late checkpoint against an early one: seconds per folder for 06 and 17 (issue 37).

Usage: python benchmarks/bench_grade_depth.py [N] [CHECKPOINT ...]   (default: 4 folders of 06 and 17)

Each folder is a finished learner whose code is their own: the solution's teaching files (and the files
the learner writes from nothing) with a `pass`
put first in every function, so every function of the checkpoint's own files differs from the solution
(the worst case for the reference proof) while the inherited files are untouched. Each checkpoint is
graded twice with `--jobs 2`: with `--proof` (the batch's reference proof skips the tests it vouches
for; as shipped, every batch gets it, its traced reference kept by content) and with `--no-proof`
(every test runs).
The figures include each batch's reference run of the solution.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.learner import practice


class _PassFirst(ast.NodeTransformer):
    """Put `pass` first in every function body (after its docstring): the same behaviour, other code."""

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        self.generic_visit(node)
        first = node.body[0] if node.body else None
        keep = int(isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant))
        node.body.insert(keep, ast.Pass())
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def own_code(source: str) -> str:
    """The module with every function's body changed in a way that keeps what it does."""
    return ast.unparse(_PassFirst().visit(ast.parse(source))) + "\n"


def make_class(root: Path, checkpoint_id: str, size: int) -> list[Path]:
    """`size` finished folders of the checkpoint, each with its own code in its teaching files."""
    course = manifest.load()
    checkpoint = course.checkpoint(checkpoint_id)
    template = root / "template"
    practice.create(course, checkpoint, template)
    for relative in (*checkpoint.teaching_files, *checkpoint.solution_only):
        solved = (course.root / checkpoint.solution / relative).read_text(encoding="utf-8")
        (template / relative).write_text(own_code(solved), encoding="utf-8")
    folders = []
    for index in range(size):
        folder = root / f"learner-{index:03d}"
        shutil.copytree(template, folder)
        folders.append(folder)
    return folders


def grade(folders: list[Path], out: Path, extra: list[str]) -> tuple[float, Counter[str], int, float]:
    """Grade the folders once; (wall seconds, statuses, tests proven in all, mean seconds of one learner's
    grading as its record says: the reference run of the batch left out)."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "pi_course_kit.cli", "grade", *map(str, folders)]
    command += ["--jobs", "2", "--json", str(out), "--quiet", *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    proven = sum(test["proven"] for record in records for test in record["tests"])
    each = sum(float(record["seconds"]) for record in records) / max(1, len(records))
    return elapsed, Counter(record["status"] for record in records), proven, each


def main(size: int, checkpoints: list[str]) -> None:
    """Grade each checkpoint's class with --proof and with --no-proof; print seconds per folder."""
    for checkpoint_id in checkpoints:
        with tempfile.TemporaryDirectory(prefix="bench-depth-") as tmp:
            folders = make_class(Path(tmp), checkpoint_id, size)
            for label, extra in (("--proof", ["--proof"]), ("--no-proof", ["--no-proof"])):
                out = Path(tmp) / f"grades-{len(extra)}.jsonl"
                elapsed, statuses, proven, each = grade(folders, out, extra)
                print(
                    f"{checkpoint_id} {label:>10}: {size} folders in {elapsed:6.1f} s "
                    f"({elapsed / size:5.1f} s/folder; one learner {each:5.1f} s), {proven} tests proven, "
                    f"load {os.getloadavg()[0]:.1f}  {dict(statuses)}",
                    flush=True,
                )


if __name__ == "__main__":
    arguments = sys.argv[1:]
    count = int(arguments[0]) if arguments else 4
    main(count, arguments[1:] or ["06", "17"])
