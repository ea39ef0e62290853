#!/usr/bin/env python3
"""How the kit's checks grow with the course: a generated course of N chained checkpoints, checked cold.

Run from the repository root with the kit's venv:

    python benchmarks/bench_growth.py 10 20 [--tests 6] [--work-ms 20] [--jobs 2]

For each N, a course is generated in a temporary folder, shaped like the real one: checkpoint k adds
`fx_course/mKK.py` (one lab), its `__init__.py` imports every module so far (as each real
checkpoint's does), its focused tests `test_cKK.py` are T tests that each spend about W ms of CPU,
and its notebook runs `progress()` once. The starters come from `pi-course build-labs`. Then, each
with an empty kit cache:

- `verify`: solution green, starter red and the notebooks on solution and starter, every
  checkpoint (the slow tier's work: each tree runs its whole lineage);
- the fast tier's work: each checkpoint's own labs on its solution and its starter.

Prints one Markdown row per N and step: wall and CPU (user + sys of this process and its children).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from pi_course_kit import cli  # noqa: E402
from pi_course_kit.core import manifest  # noqa: E402
from pi_course_kit.instructor import promises, verify  # noqa: E402

FIXTURE = ROOT / "tests/kit/fixture_course"


def _module(k: int, work_ms: int) -> str:
    return (
        f'"""Checkpoint {k:02d}\'s module."""\n\n\n'
        f"# ## Lab {k}.1\n"
        f"def value_{k:02d}(x: int) -> int:\n"
        f'    """Checkpoint {k:02d}\'s value of x."""\n'
        f"    # BEGIN LAB {k}.1\n"
        f"    return x + {k}\n"
        f"    # END LAB {k}.1\n\n\n"
        f"def work() -> int:\n"
        f'    """About {work_ms} ms of CPU, as a real test spends."""\n'
        f"    total = 0\n"
        f"    for i in range({work_ms} * 40_000):\n"
        f"        total += i\n"
        f"    return total\n"
    )


def _tests(k: int, count: int) -> str:
    body = [f'"""Focused tests of the generated checkpoint {k:02d}."""\n\nimport pytest\n']
    body.append(f"from fx_course.m{k:02d} import value_{k:02d}, work\n")
    for n in range(count):
        body.append(
            f"\n\n@pytest.mark.lab{k}_1\ndef test_value_{k:02d}_{n}() -> None:\n"
            f'    """Does value_{k:02d} add {k}?"""\n'
            f"    work()\n    assert value_{k:02d}({n}) == {n + k}\n"
        )
    return "".join(body)


def _notebook(k: int) -> str:
    cells = [
        (
            "# Step 1 · the tree\nfrom pi_course_kit.notebook.helpers import progress, use_tree\n\n"
            f'tree = use_tree("{k:02d}")',
            False,
        ),
        ("# Step 2 · progress\nprogress()", False),
    ]
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [
                {
                    "cell_type": "code",
                    "id": f"c{i}",
                    "metadata": {},
                    "source": s,
                    "outputs": [],
                    "execution_count": None,
                }
                for i, (s, _tagged) in enumerate(cells)
            ],
        }
    )


def make_course(root: Path, n: int, tests: int, work_ms: int) -> Path:
    """Write a course of `n` chained checkpoints into `root` and build its starters."""
    (root / "tests/focused").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "tests/focused/conftest.py").write_bytes((FIXTURE / "tests/focused/conftest.py").read_bytes())
    lab = (FIXTURE / "solutions/a1-counter/fx_course/lab.py").read_bytes()
    toml = ['format_version = 2\n\n[course]\ntitle = "growth"\npackage = "fx_course"\nlanguage = "en"\n']
    for k in range(1, n + 1):
        package = root / f"solutions/c{k:02d}/fx_course"
        package.mkdir(parents=True)
        (package / "lab.py").write_bytes(lab)
        for j in range(1, k + 1):
            (package / f"m{j:02d}.py").write_text(_module(j, work_ms), encoding="utf-8")
        imports = "".join(f"from . import m{j:02d}\n" for j in range(1, k + 1))
        (package / "__init__.py").write_text(
            f'"""Generated checkpoint {k:02d}."""\n\n{imports}from .lab import LabNotImplemented\n',
            encoding="utf-8",
        )
        (root / f"tests/focused/test_c{k:02d}.py").write_text(_tests(k, tests), encoding="utf-8")
        (root / f"notebooks/c{k:02d}.ipynb").write_text(_notebook(k), encoding="utf-8")
        inherited = [f"fx_course/m{j:02d}.py" for j in range(1, k)] + ["fx_course/lab.py"]
        toml.append(
            f'\n[[checkpoints]]\nid = "{k:02d}"\nslug = "c{k:02d}"\n'
            + (f'parent = "{k - 1:02d}"\n' if k > 1 else "")
            + f'title = "checkpoint {k}"\nstarter = "labs/c{k:02d}"\nsolution = "solutions/c{k:02d}"\n'
            f'teaching_files = ["fx_course/m{k:02d}.py"]\n'
            f"given_files = {json.dumps(['fx_course/__init__.py', *inherited])}\n"
            f"inherited_files = {json.dumps(inherited if k > 1 else [])}\n"
            f'solution_only = []\nfocused_tests = ["tests/focused/test_c{k:02d}.py"]\n'
            f'test_support = ["tests/focused/conftest.py"]\nnotebook = "notebooks/c{k:02d}.ipynb"\n'
            f'\n[[checkpoints.labs]]\nid = "{k}.1"\nmarker = "lab{k}_1"\ntitle = "value {k}"\n'
            f'implements = ["value_{k:02d}"]\npoints = 100\nhints = ["add {k}", "return it"]\n'
            f'\n[[checkpoints.mutations]]\nname = "off-by-one"\ndescription = "adds one more"\n'
            f'file = "fx_course/m{k:02d}.py"\nfind = "return x + {k}"\nreplace = "return x + {k + 1}"\n'
        )
    (root / "course.toml").write_text("".join(toml), encoding="utf-8")
    if cli.main(["build-labs", "--course", str(root)]) != 0:
        raise SystemExit("build-labs failed on the generated course")
    return root / "course.toml"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _verify(course: manifest.Course, cache: Path | None, jobs: int) -> None:
    outcomes = verify.verify(
        course, course.checkpoints, ("solution", "starter", "notebooks"), jobs, cache=cache
    )
    if failed := [outcome.name for outcome in outcomes if not outcome.ok]:
        raise SystemExit(f"checks failed: {failed}")


def _fast(course: manifest.Course, cache: Path) -> None:
    for cp in course.checkpoints:
        for tree in (cp.solution, cp.starter):
            promises.run_tree(course, cp, tree, ("-m", cp.labs[0].marker), runs=cache / verify.RUNS_FOLDER)


STEPS = {
    "unshared": "verify (solution, starter, notebooks), every run its own (no cache)",
    "verify": "verify (solution, starter, notebooks), runs shared by content",
    "fast": "fast tier (own labs on solution and starter)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int)
    parser.add_argument("--tests", type=int, default=6, help="focused tests per checkpoint")
    parser.add_argument("--work-ms", type=int, default=20, help="CPU per test, ms")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # one step, in a child process
    parser.add_argument("--course", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        # A child process per step: its CPU, with every process it started and waited for, is counted.
        course, cache = manifest.load(args.course / "course.toml"), Path(os.environ["XDG_CACHE_HOME"])
        if args.step == "fast":
            _fast(course, cache)
        else:
            _verify(course, cache / "pi-course" if args.step == "verify" else None, args.jobs)
        return 0
    print("| N | step | wall | CPU (user + sys) |\n| --- | --- | --- | --- |")
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="pi-course-growth-") as tmp:
            with contextlib.redirect_stdout(io.StringIO()):
                make_course(Path(tmp) / "course", n, args.tests, args.work_ms)
            for step, name in STEPS.items():
                env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-{step}")}
                command = [sys.executable, __file__, "--step", step, "--course", f"{tmp}/course"]
                wall, cpu = time.perf_counter(), _children_cpu()
                subprocess.run([*command, "--jobs", str(args.jobs)], env=env, check=True)
                print(
                    f"| {n} | {name} | {time.perf_counter() - wall:.1f} s | {_children_cpu() - cpu:.1f} s |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
