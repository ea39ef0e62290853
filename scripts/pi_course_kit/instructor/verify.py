"""Everything an instructor relies on, checked at once: one report, independent runs in parallel.

The checks of every chosen checkpoint share one pool, one worker per usable CPU by default. A check
that passed is remembered (in the cache folder the mutation map uses) under a digest of everything it
reads: the checkpoint's trees, tests, notebook and manifest entry, the parent's solution, the kit
itself and the versions of the tools that run the tests. It is not run again until one of those
changes; `--no-cache` runs everything. A failure is never remembered.

Below the checks, the whole-tree test runs (solution, starter, the notebooks' progress cells) are kept
in the same cache folder by their content (`core.runner`): a tree run once is read back wherever the
same content runs again, within one verify or across them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pi_course_kit
from pi_course_kit.core import runner
from pi_course_kit.core.files import write_text_atomically
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import cpus as cpus
from pi_course_kit.instructor import promises as checks
from pi_course_kit.instructor.grade.mutation_map import default_cache
from pi_course_kit.instructor.mutate import (
    MutationError,
    mutation_problems,
    run_mutation,
    survived_problem,
    unplaced_problem,
)
from pi_course_kit.instructor.options import add_manifest_option, checkpoints, load_course

#: The folder of the cache where whole-tree test runs are kept by content (`runner.run_tests(reuse=)`);
#: the grader keeps its references there too.
RUNS_FOLDER = runner.RUNS_FOLDER
CHECKS = ("sync", "parents", "mutations-static", "solution", "starter", "first-red", "mutations", "notebooks")


@dataclass
class Outcome:
    """One verified promise: its name, the problems found (none when it holds) and how long it took."""

    name: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: True when an earlier run passed this check on exactly the same inputs (see the module's docstring).
    cached: bool = False

    @property
    def ok(self) -> bool:
        """True when the promise holds."""
        return not self.problems


@dataclass(frozen=True)
class Job:
    """A named check; `slow` ones run tests or notebooks in subprocesses and go to the pool."""

    name: str
    kind: str
    run: Callable[[], list[str]]
    slow: bool = True


def _guarded(job: Job) -> Outcome:
    started = time.perf_counter()
    try:
        problems = job.run()
    except (MutationError, OSError, ValueError) as error:
        problems = [f"{job.name}: could not run: {error}"]
    return Outcome(job.name, problems, time.perf_counter() - started)


def _mutation_job(course: Course, checkpoint: Checkpoint, name: str) -> Callable[[], list[str]]:
    def run() -> list[str]:
        outcome = run_mutation(course, checkpoint, checkpoint.mutation(name), stop_first=True)
        found = (
            survived_problem(outcome, checkpoint),
            outcome.expect_problem(),
            unplaced_problem(course, checkpoint, outcome),
        )
        problems = [problem for problem in found if problem]
        return problems

    return run


def _notebook_job(
    course: Course, checkpoint: Checkpoint, tree: str, starter: bool, runs: Path | None
) -> Callable[[], list[str]]:
    def run() -> list[str]:
        notebook = course.root / checkpoint.notebook
        if not notebook.is_file():
            return [f"{checkpoint.notebook}: the checkpoint's notebook is missing; add it or fix course.toml"]
        try:
            nbrun = importlib.import_module("pi_course_kit.notebook.nbrun")
        except ImportError as error:
            return [f"{checkpoint.notebook}: cannot execute notebooks: the kit has no nbrun ({error})"]
        problems: list[str] = nbrun.notebook_errors(
            notebook, course.root / tree, package=course.package, allow_lab_errors=starter, runs=runs
        )
        return [f"{checkpoint.notebook} on {tree}: {problem}" for problem in problems]

    return run


def jobs(
    course: Course, checkpoint: Checkpoint, selected: Iterable[str] = CHECKS, runs: Path | None = None
) -> list[Job]:
    """The checks of one checkpoint, in report order.

    With `runs` (a folder), the whole-tree test runs (solution, starter, the notebooks' progress cells)
    reuse a run of the same content from there (`runner.run_tests`).
    """
    chosen = set(selected)
    cp = checkpoint
    all_jobs = [
        Job(
            f"{cp.id} starters in sync with solutions",
            "sync",
            lambda: checks.stale_starter_problems(course, cp),
            False,
        ),
        Job(
            f"{cp.id} given files equal in starter and solution",
            "parents",
            lambda: checks.given_file_problems(course, cp),
            False,
        ),
        Job(
            f"{cp.id} inherited files equal the parent's solution",
            "parents",
            lambda: checks.inherited_file_problems(course, cp),
            False,
        ),
        Job(
            f"{cp.id} mutations well-formed", "mutations-static", lambda: mutation_problems(course, cp), False
        ),
        Job(f"{cp.id} solution green", "solution", lambda: checks.solution_problems(course, cp, runs=runs)),
    ]
    if cp.observation:
        # Nothing to implement: no red to promise. The starter is the target, and the mutations
        # (the chapter's "break it on purpose" exercises) show that the tests still have teeth.
        all_jobs.append(
            Job(
                f"{cp.id} observation: the starter is the target, with nothing to implement",
                "starter",
                lambda: checks.observation_problems(course, cp),
                False,
            )
        )
    else:
        all_jobs += [
            Job(
                f"{cp.id} starter red, lab by lab",
                "starter",
                lambda: checks.starter_problems(course, cp, runs=runs),
            ),
            Job(
                f"{cp.id} starter stops first on {cp.first_red_prefix} …",
                "first-red",
                lambda: checks.first_red_problems(course, cp),
            ),
        ]
    static_ok = not mutation_problems(course, cp)
    for mutation in cp.mutations if static_ok else ():
        all_jobs.append(
            Job(
                f"{cp.id} mutation {mutation.name} caught",
                "mutations",
                _mutation_job(course, cp, mutation.name),
            )
        )
    all_jobs += [
        Job(
            f"{cp.id} notebook runs on the solution",
            "notebooks",
            _notebook_job(course, cp, cp.solution, False, runs),
        ),
        Job(
            f"{cp.id} notebook runs on the starter",
            "notebooks",
            _notebook_job(course, cp, cp.starter, True, runs),
        ),
    ]
    return [job for job in all_jobs if job.kind in chosen]


#: The distributions whose versions decide how the focused tests and the notebooks run.
TOOLS = ("pytest", "pytest-timeout", "hypothesis", "nbclient", "nbformat", "ipykernel")


@functools.cache
def _kit_digest() -> str:
    """The kit's own code and catalogs, the interpreter and the test tools, as one digest."""
    hasher = hashlib.sha256(sys.version.encode())
    for name in TOOLS:
        try:
            hasher.update(f"{name} {importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            hasher.update(f"{name} -".encode())
    kit = Path(pi_course_kit.__file__).parent
    for path in sorted(p for p in kit.rglob("*") if p.suffix in (".py", ".mo") and p.is_file()):
        hasher.update(path.relative_to(kit).as_posix().encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def inputs_digest(course: Course, checkpoint: Checkpoint) -> str:
    """A digest of everything the checks of `checkpoint` read; any change to one of them changes it."""
    hasher = hashlib.sha256(_kit_digest().encode())
    hasher.update(repr((course.format_version, course.package, course.language, checkpoint)).encode())
    parent = course.parent_of(checkpoint)
    trees = [checkpoint.solution, checkpoint.starter, *([parent.solution] if parent else [])]
    files = [
        path
        for tree in trees
        for path in sorted((course.root / tree).rglob("*"))
        if path.is_file() and not {"__pycache__", ".hypothesis", ".pytest_cache"} & set(path.parts)
    ]
    relatives = (*checkpoint.tree_tests, *checkpoint.tree_support, checkpoint.notebook)
    files += [course.root / relative for relative in relatives]
    for path in files:
        # Paths relative to the course: another checkout of the same course (a CI clone) shares the cache.
        hasher.update(path.relative_to(course.root).as_posix().encode() + b"\0")
        hasher.update(path.read_bytes() if path.is_file() else b"<missing>")
    return hasher.hexdigest()[:24]


def _cache_file(cache: Path, course: Course, checkpoint: Checkpoint) -> Path:
    return cache / f"verify-{checkpoint.id}-{inputs_digest(course, checkpoint)}.json"


def _remembered(path: Path) -> set[str]:
    """The names of the checks that passed on these inputs before."""
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {str(name) for name in names} if isinstance(names, list) else set()


def verify(
    course: Course,
    checkpoints: Iterable[Checkpoint],
    selected: Iterable[str] = CHECKS,
    workers: int | None = None,
    on_done: Callable[[Outcome], None] | None = None,
    cache: Path | None = None,
) -> list[Outcome]:
    """Run every chosen check of every checkpoint; the fast ones inline, the subprocess ones in one pool.

    The pool has `workers` threads (default: one per usable CPU), each waiting on one subprocess, so
    the checkpoints run side by side. With a `cache` folder, a slow check that passed before on the
    same inputs is reported from there (`cached`) instead of being run again.
    """
    chosen = list(checkpoints)
    runs = cache / RUNS_FOLDER if cache else None
    todo = [(cp, job) for cp in chosen for job in jobs(course, cp, tuple(selected), runs)]
    files = {cp.id: _cache_file(cache, course, cp) for cp in chosen} if cache else {}
    passed = {cp_id: _remembered(path) for cp_id, path in files.items()}
    outcomes: dict[str, Outcome] = {}

    def finish(outcome: Outcome) -> None:
        outcomes[outcome.name] = outcome
        if on_done:
            on_done(outcome)

    for cp, job in todo:
        if not job.slow:
            finish(_guarded(job))
        elif job.name in passed.get(cp.id, set()):
            finish(Outcome(job.name, cached=True))
    slow = [job for _, job in todo if job.slow and job.name not in outcomes]
    with ThreadPoolExecutor(max_workers=max(1, workers or cpus())) as pool:
        # Longest first (whole-suite runs and notebooks), so the pool's tail is short.
        order = sorted(slow, key=lambda j: j.kind != "notebooks")
        for outcome in pool.map(_guarded, order):
            finish(outcome)
    for cp in chosen:
        ok = {job.name for c, job in todo if c is cp and job.slow and outcomes[job.name].ok}
        if cache and ok - passed[cp.id]:
            files[cp.id].parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(files[cp.id], json.dumps(sorted(ok | passed[cp.id]), ensure_ascii=False))
    return [outcomes[job.name] for _, job in todo]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the optional checkpoint, --check, --jobs and the manifest option."""
    parser.add_argument(
        "checkpoint",
        nargs="?",
        metavar="CHECKPOINT",
        help=_("only this checkpoint (default: every checkpoint)"),
    )
    parser.add_argument(
        "--check",
        action="append",
        choices=CHECKS,
        metavar="NAME",
        help=_("run only this check (repeatable): {checks}").format(
            checks=", ".join(f"`{c}`" for c in CHECKS)
        ),
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help=_("checks run in parallel (default: one per usable CPU)")
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help=_("run every check, even one that passed before on exactly the same inputs"),
    )
    add_manifest_option(parser)


def _line(outcome: Outcome) -> None:
    mark = "ok  " if outcome.ok else "FAIL"
    took = "cached: passed before on the same inputs" if outcome.cached else f"{outcome.seconds:.1f}s"
    print(f"{mark} {outcome.name}  ({took})", flush=True)
    for problem in outcome.problems:
        print(f"       {problem}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Print one line per check (problems under it); exit 1 when any check found a problem."""
    course = load_course(args)
    chosen = checkpoints(course, args.checkpoint)
    if args.jobs is not None and args.jobs < 1:
        print("pi-course verify: --jobs must be at least 1", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(f"verifying {course.path} ({', '.join(c.id for c in chosen)})", flush=True)
    cache = None if args.no_cache else default_cache()
    outcomes = verify(course, chosen, tuple(args.check or CHECKS), args.jobs, on_done=_line, cache=cache)
    failed = [o for o in outcomes if not o.ok]
    problems = sum(len(o.problems) for o in failed)
    elapsed = time.perf_counter() - started
    if failed:
        print(
            f"verify: {len(failed)} of {len(outcomes)} checks failed ({problems} problem(s)) in "
            f"{elapsed:.0f}s"
        )
        for outcome in failed:
            print(f"  - {outcome.name}")
        return 1
    print(f"verify: all {len(outcomes)} checks passed in {elapsed:.0f}s")
    return 0
