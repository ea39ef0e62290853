"""Everything an instructor relies on, checked at once: one report, independent runs in parallel."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import promises as checks
from pi_course_kit.instructor.mutate import MutationError, mutation_problems, run_mutation, survived_problem
from pi_course_kit.instructor.options import add_manifest_option, checkpoints, load_course

CHECKS = ("sync", "parents", "mutations-static", "solution", "starter", "first-red", "mutations", "notebooks")


@dataclass
class Outcome:
    """One verified promise: its name, the problems found (none when it holds) and how long it took."""

    name: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

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
        problems = [p for p in (survived_problem(outcome, checkpoint), outcome.expect_problem()) if p]
        return problems

    return run


def _notebook_job(
    course: Course, checkpoint: Checkpoint, tree: str, starter: bool
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
            notebook, course.root / tree, package=course.package, allow_lab_errors=starter
        )
        return [f"{checkpoint.notebook} on {tree}: {problem}" for problem in problems]

    return run


def jobs(course: Course, checkpoint: Checkpoint, selected: Iterable[str] = CHECKS) -> list[Job]:
    """The checks of one checkpoint, in report order."""
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
        Job(f"{cp.id} solution green", "solution", lambda: checks.solution_problems(course, cp)),
        Job(f"{cp.id} starter red, lab by lab", "starter", lambda: checks.starter_problems(course, cp)),
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
            _notebook_job(course, cp, cp.solution, False),
        ),
        Job(
            f"{cp.id} notebook runs on the starter", "notebooks", _notebook_job(course, cp, cp.starter, True)
        ),
    ]
    return [job for job in all_jobs if job.kind in chosen]


def verify(
    course: Course,
    checkpoints: Iterable[Checkpoint],
    selected: Iterable[str] = CHECKS,
    workers: int = 2,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run every chosen check; the fast ones inline, the subprocess ones `workers` at a time."""
    todo = [job for checkpoint in checkpoints for job in jobs(course, checkpoint, tuple(selected))]
    outcomes: dict[str, Outcome] = {}
    for job in (j for j in todo if not j.slow):
        outcomes[job.name] = _guarded(job)
        if on_done:
            on_done(outcomes[job.name])
    slow = [j for j in todo if j.slow]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        # Longest first (whole-suite runs and notebooks), so the pool's tail is short.
        order = sorted(slow, key=lambda j: j.kind != "notebooks")
        for outcome in pool.map(_guarded, order):
            outcomes[outcome.name] = outcome
            if on_done:
                on_done(outcome)
    return [outcomes[job.name] for job in todo]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the optional checkpoint, --check, --jobs and the manifest option."""
    parser.add_argument("checkpoint", nargs="?", help="only this checkpoint (default: every checkpoint)")
    parser.add_argument(
        "--check",
        action="append",
        choices=CHECKS,
        metavar="NAME",
        help=f"run only this check (repeatable): {', '.join(CHECKS)}",
    )
    parser.add_argument("--jobs", type=int, default=2, help="checks run in parallel (default 2)")
    add_manifest_option(parser)


def _line(outcome: Outcome) -> None:
    mark = "ok  " if outcome.ok else "FAIL"
    print(f"{mark} {outcome.name}  ({outcome.seconds:.1f}s)", flush=True)
    for problem in outcome.problems:
        print(f"       {problem}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Print one line per check (problems under it); exit 1 when any check found a problem."""
    course = load_course(args)
    chosen = checkpoints(course, args.checkpoint)
    if args.jobs < 1:
        print("pi-course verify: --jobs must be at least 1", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(f"verifying {course.path} ({', '.join(c.id for c in chosen)})", flush=True)
    outcomes = verify(course, chosen, tuple(args.check or CHECKS), args.jobs, on_done=_line)
    failed = [o for o in outcomes if not o.ok]
    problems = sum(len(o.problems) for o in failed)
    elapsed = time.perf_counter() - started
    if failed:
        print(
            f"verify: {len(failed)} of {len(outcomes)} checks failed ({problems} problem(s)) in {elapsed:.0f}s"
        )
        for outcome in failed:
            print(f"  - {outcome.name}")
        return 1
    print(f"verify: all {len(outcomes)} checks passed in {elapsed:.0f}s")
    return 0
