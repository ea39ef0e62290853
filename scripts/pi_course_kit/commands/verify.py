"""`pi-course verify`: solutions green, starters red and in sync, mutations caught, notebooks running."""

from __future__ import annotations

import argparse
import sys
import time

from ..instructor import add_manifest_option, checkpoints, load_course
from ..verify import CHECKS, Outcome, verify


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
