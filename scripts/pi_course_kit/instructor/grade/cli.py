"""`pi-course grade DIR...`: grade practice folders in sandboxed copies with the kit's pristine tests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.instructor.grade.grader import Grader, LearnerRecord, summary, write_csv, write_json_lines
from pi_course_kit.instructor.grade.sandbox import ISOLATED, Limits, MiB
from pi_course_kit.instructor.options import add_manifest_option, load_course


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the folders, the output files, the parallelism and the limits."""
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="practice folders to grade")
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="write one JSON record per learner (JSON Lines)"
    )
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write one CSV row per learner")
    parser.add_argument("--jobs", type=int, default=2, help="folders graded at once (default 2)")
    parser.add_argument(
        "--checkpoint", help="grade against this checkpoint instead of the one in each meta.json"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="wall-time limit per learner in seconds (default 120)"
    )
    parser.add_argument(
        "--memory", type=int, default=512, help="address-space limit per learner in MiB (default 512)"
    )
    parser.add_argument("--processes", type=int, default=64, help="process limit per learner (default 64)")
    parser.add_argument("--quiet", action="store_true", help="print only the class summary")
    add_manifest_option(parser)


def _check_output(path: Path | None, option: str) -> None:
    if path is not None and not path.parent.is_dir():
        raise KitError(
            f"{option} {path}: folder {path.parent} does not exist; create it or choose another file"
        )
    if path is not None and path.is_dir():
        raise KitError(f"{option} {path}: is a folder; give a file name")


def _fraction(record: LearnerRecord, lab_id: str) -> str:
    score = next((s for s in record.labs if s.id == lab_id), None)
    return f"{score.passed}/{score.total}" if score else "-"


def run(args: argparse.Namespace) -> int:
    """Grade every folder, print a table and a class summary; exit 0 once grading has run."""
    if args.jobs < 1 or args.timeout <= 0 or args.memory < 64 or args.processes < 4:
        raise KitError("--jobs must be >= 1, --timeout > 0, --memory >= 64 (MiB) and --processes >= 4")
    _check_output(args.json, "--json")
    _check_output(args.csv, "--csv")
    course = load_course(args)
    if args.checkpoint is not None:
        course.checkpoint(args.checkpoint)
    limits = Limits(
        wall_seconds=args.timeout,
        memory_bytes=args.memory * MiB,
        cpu_seconds=max(1, int(args.timeout)),
        processes=args.processes,
    )
    grader = Grader(course, limits, args.jobs, args.checkpoint)
    if grader.level != ISOLATED:
        print(
            f"pi-course grade: warning: sandbox level {grader.level!r}: learner code is limited in time, memory and "
            "processes, but not kept from writing outside its copy; grade as root on Linux for full isolation",
            file=sys.stderr,
        )
    lab_ids = [lab.id for cp in course.checkpoints for lab in cp.labs]
    name_width = max([7, *(len(d.name or str(d)) for d in args.dirs)])
    if not args.quiet:
        print(f"grading {len(args.dirs)} folder(s), {args.jobs} at a time, sandbox: {grader.level}")
        print(
            f"{'learner':<{name_width}}  {'status':<13}  "
            + "  ".join(f"{lab:>9}" for lab in lab_ids)
            + "  notes"
        )

    def show(record: LearnerRecord) -> None:
        if args.quiet:
            return
        notes = "; ".join([*([record.message] if record.message else []), *record.flags])
        cells = "  ".join(f"{_fraction(record, lab):>9}" for lab in lab_ids)
        print(f"{record.learner:<{name_width}}  {record.status:<13}  {cells}  {notes}", flush=True)

    try:
        records = grader.grade_all(args.dirs, on_done=show)
    finally:
        grader.close()
    overview = summary(records)
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(overview["statuses"].items()))
    print(f"class: {overview['learners']} folder(s), {overview['graded']} graded: {statuses}")
    for row in overview["labs"]:
        print(
            f"  Lab {row['id']}: {row['done']}/{row['graded']} done, mean {row['mean_passed']}/{row['total']} tests"
        )
    if overview["tests_edited"]:
        print(f"  {overview['tests_edited']} learner(s) edited the focused tests (the edits had no effect)")
    if args.json:
        write_json_lines(args.json, records)
    if args.csv:
        write_csv(args.csv, records)
    sys.stdout.flush()
    return 0
