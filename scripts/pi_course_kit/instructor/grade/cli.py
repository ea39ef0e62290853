"""`pi-course grade DIR...`: grade submissions in sandboxed copies with the kit's pristine tests.

`pi-course grade merge SHARD.jsonl... -o FILE` joins the JSON Lines of shards graded apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.cells import cell_len

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import course_manifest, kit_cache
from pi_course_kit.core.manifest import Course
from pi_course_kit.core.records import FolderMeta, clean
from pi_course_kit.core.runner import RUNS_FOLDER
from pi_course_kit.core.runner import cpus as cpus
from pi_course_kit.instructor.grade import (
    class_report,
    classroom,
    copying,
    feedback,
    gradebook,
    junit,
    mutation_map,
    roster,
    shards,
    statistics,
)
from pi_course_kit.instructor.grade.gradebook import (
    SANDBOX_ERROR,
    SKIPPED,
    LearnerRecord,
    points_of,
    summary,
    write_json_lines,
)
from pi_course_kit.instructor.grade.grader import (
    MAX_META_BYTES,
    META,
    OTHER_CHECKPOINT_FLAG,
    Grader,
    Limits,
    MiB,
)
from pi_course_kit.instructor.options import add_manifest_option, load_course

MERGE = "merge"
#: Statuses of a submission that could not be graded at all: the run exits 1 when any has one. A crashed
#: run is graded (0, with the reason): learner code can end its own run (os._exit), see test_grade_security.
UNGRADED = (SKIPPED, SANDBOX_ERROR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the submissions, the outputs, the parallelism, the slice and the limits."""
    parser.add_argument(
        "dirs",
        nargs="*",
        type=Path,
        metavar="DIR",
        help=_(
            "submissions to grade: practice folders, or folders holding pi_course/ (with --checkpoint); "
            "or `merge SHARD.jsonl...` to join shards"
        ),
    )
    who = parser.add_argument_group(_("learner ids (never a bare folder name)"))
    who.add_argument(
        "--roster",
        type=Path,
        metavar="FILE",
        help=_("CSV with columns learner,submission (any case, `,` or `;`); a bad row is kept, with why"),
    )
    who.add_argument(
        "--submissions-root",
        type=Path,
        metavar="DIR",
        help=_("ids are the paths below DIR; without DIRs, every folder below DIR gets a row"),
    )
    out = parser.add_argument_group(_("outputs"))
    out.add_argument("--json", type=Path, metavar="FILE", help=_("one JSON record per learner (JSON Lines)"))
    out.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help=_("merge: the joined JSON Lines gradebook")
    )
    out.add_argument("--csv", type=Path, metavar="FILE", help=_("one CSV row per learner, with points"))
    out.add_argument("--junit", type=Path, metavar="FILE", help=_("JUnit XML: one testsuite per learner"))
    out.add_argument("--feedback", type=Path, metavar="DIR", help=_("one Markdown feedback file per learner"))
    out.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help=_(
            "the instructor's class report (one static HTML page, with scores and solution diffs: do not "
            "share)"
        ),
    )
    out.add_argument(
        "--class-report",
        type=Path,
        metavar="FILE",
        help=_("the class version of the report: no solution code, no learner's name or score; safe to post"),
    )
    out.add_argument(
        "--classroom",
        type=Path,
        metavar="FILE",
        help=_(
            "GitHub Classroom: the grading reporter's result for this one repository (needs --checkpoint)"
        ),
    )
    out.add_argument(
        "--mutation-cache",
        type=Path,
        metavar="DIR",
        help=_("where the test -> mutation map is cached (default: ~/.cache/pi-course)"),
    )
    out.add_argument(
        "--mutations",
        action="store_true",
        help=_(
            "link the report's most failed tests to the named mutations that explain them: runs the tests "
            "once per mutation of the checkpoint (minutes at a late checkpoint, with a progress bar), "
            "cached for later reports"
        ),
    )
    out.add_argument("--no-mutations", action="store_true", help=_("no mutation links (the default)"))
    parser.add_argument(
        "--shard", metavar="K/N", help=_("grade only the K-th of N slices (sorted by learner id)")
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=_(
            "folders graded at once, one sandbox each (default: the CPUs this process may use, here {cpus})"
        ).format(cpus=cpus()),
    )
    parser.add_argument(
        "--checkpoint", help=_("grade against this checkpoint instead of the one in each meta.json")
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help=_("wall-time limit per learner in seconds (default 120)")
    )
    parser.add_argument(
        "--memory", type=int, default=512, help=_("address-space limit per learner in MiB (default 512)")
    )
    parser.add_argument("--processes", type=int, default=64, help=_("process limit per learner (default 64)"))
    parser.add_argument("--quiet", action="store_true", help=_("print only the class summary"))
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help=_("no sandbox, resource limits only (learner code runs with your rights; refused as root)"),
    )
    parser.add_argument(
        "--fresh-sandbox",
        action="store_true",
        help=_(
            "a new sandbox for every learner instead of one fork server per job slot "
            "(slower, about 1.5 times the time)"
        ),
    )
    parser.add_argument(
        "--proof",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=_(
            "skip in each learner's run the tests the traced run of the solution proves: tests that run "
            "none of the learner's changed code (default: on; the traced run is kept in the kit's cache "
            "by content, so only the first batch of a solution pays for it; --no-proof runs every test)"
        ),
    )
    add_manifest_option(parser)


def _check_output(path: Path | None, option: str) -> None:
    if path is not None and not path.parent.is_dir():
        raise KitError(
            _("{option} {path}: folder {folder} does not exist; create it or choose another file").format(
                option=option, path=path, folder=path.parent
            )
        )
    if path is not None and path.is_dir():
        raise KitError(_("{option} {path}: is a folder; give a file name").format(option=option, path=path))


def _check_outputs(args: argparse.Namespace) -> None:
    for option in ("json", "output", "csv", "junit", "report", "class_report", "classroom"):
        _check_output(getattr(args, option, None), f"--{option.replace('_', '-')}")
    if args.feedback is not None and args.feedback.exists() and not args.feedback.is_dir():
        raise KitError(
            _("--feedback {path}: is a file; give a folder for the feedback files").format(path=args.feedback)
        )
    if args.feedback is not None and not args.feedback.parent.is_dir():
        raise KitError(
            _("--feedback {path}: folder {folder} does not exist; create it").format(
                path=args.feedback, folder=args.feedback.parent
            )
        )


def _fraction(record: LearnerRecord, lab_id: str) -> str:
    score = next((s for s in record.labs if s.id == lab_id), None)
    return f"{score.passed}/{score.total}" if score else "-"


def write_outputs(args: argparse.Namespace, course: Course, records: Sequence[LearnerRecord]) -> None:
    """Write every output asked for: JSON Lines, CSV, JUnit, feedback files, the class report."""
    if args.json:
        write_json_lines(args.json, records)
    if args.csv:
        gradebook.write_csv(args.csv, course, records, getattr(args, "checkpoint", None))
    if args.junit:
        junit.write(args.junit, course, records)
    if args.feedback:
        feedback.write_all(course, records, args.feedback)
    if getattr(args, "classroom", None):
        classroom.write_result(args.classroom, course, records)
    reports = [
        (path, version)
        for path, version in (
            (args.report, class_report.INSTRUCTOR),
            (getattr(args, "class_report", None), class_report.CLASS),
        )
        if path
    ]
    if reports:
        mutations: mutation_map.MutationMap = {}
        if getattr(args, "mutations", False) and not args.no_mutations:
            mutations = class_report.mutations_for(course, records, args.mutation_cache)
        for path, version in reports:
            class_report.write(path, course, records, mutations, version=version)


def _print_summary(course: Course, records: Sequence[LearnerRecord]) -> None:
    overview = summary(records)
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(overview.statuses.items()))
    print(
        _("class: {folders} folder(s), {graded} graded: {statuses}").format(
            folders=overview.learners, graded=overview.graded, statuses=statuses
        )
    )
    # The same figures as the class report's cards (one computation), so the two never disagree.
    figures = statistics.statistics(course, records)
    extra = (
        _(", extra credit +{mean:g} of +{most:g}").format(mean=figures.mean_extra, most=figures.extra_max)
        if figures.extra_max
        else ""
    )
    mean = _(
        "  mean score {mean:g}/{most:g} over all {learners} learner(s) (a submission that could not be "
        "scored counts 0)"
    )
    print(mean.format(mean=figures.mean, most=figures.required_max, learners=figures.learners) + extra)
    for row in overview.labs:
        print(
            _("  Lab {lab}: {done}/{graded} done, mean {passed}/{total} tests").format(
                lab=row.id, done=row.done, graded=row.graded, passed=row.mean_passed, total=row.total
            )
        )
    if overview.tests_edited:
        print(
            _("  {count} learner(s) edited the focused tests (the edits had no effect)").format(
                count=overview.tests_edited
            )
        )
    others = [r for r in records if any(f.startswith(OTHER_CHECKPOINT_FLAG) for f in r.flags)]
    if others:
        flag = next(f for f in others[0].flags if f.startswith(OTHER_CHECKPOINT_FLAG))
        print(
            _("  warning: {count} folder(s) of another checkpoint, e.g. {learner}: {flag}").format(
                count=len(others), learner=others[0].learner, flag=flag
            )
        )
    ungraded = [r for r in records if r.status in UNGRADED]
    if ungraded:
        print(
            _("  {count} submission(s) could not be graded, e.g. {learner}: {message}").format(
                count=len(ungraded), learner=ungraded[0].learner, message=ungraded[0].message
            )
        )


def shown(text: str) -> str:
    """Text for one table cell: separators and format characters (no agreed width) written as escapes."""
    return "".join(
        f"\\u{ord(char):04x}" if unicodedata.category(char) in ("Zl", "Zp", "Cf", "Cc") else char
        for char in text
    )


def _pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded to `width` terminal cells (a CJK character takes two; len() would count one)."""
    fill = " " * max(0, width - cell_len(text))
    return fill + text if right else text + fill


def _checkpoint_of(folder: Path) -> str | None:
    """The checkpoint a practice folder's meta.json names, read as safely as the grader reads it."""
    try:
        data = copying.read_file(folder, META.as_posix(), MAX_META_BYTES)
        meta = json.loads(data.decode("utf-8")) if data is not None else None
    except (copying.Refused, OSError, ValueError):
        return None
    try:
        return FolderMeta.from_json(meta).checkpoint
    except ValueError:  # no checkpoint in it
        return None


def graded_checkpoints(course: Course, given: str | None, folders: Sequence[Path]) -> list[str]:
    """The checkpoint of each folder as it will be graded (--checkpoint, else its meta.json), when known."""
    if given:
        return [given]
    known = {cp.id for cp in course.checkpoints}
    return [found for folder in folders if (found := _checkpoint_of(folder)) in known and found]


def unusable_record(entry: roster.Submission) -> LearnerRecord:
    """The record of a row that could not be graded at all (a bad roster row): skipped, with the reason."""
    return LearnerRecord(
        learner=clean(entry.learner, 200),
        folder=clean(entry.folder, 4096) if entry.folder != Path() else "",
        status=SKIPPED,
        message=entry.problem,
    )


def merge(args: argparse.Namespace) -> int:
    """Join shards' JSON Lines into one gradebook sorted by learner id, plus any other output asked for."""
    files = list(args.dirs[1:])
    if not files or args.output is None:
        raise KitError(
            _("merge needs the shards' files and -o FILE: pi-course grade merge A.jsonl B.jsonl -o all.jsonl")
        )
    _check_outputs(args)
    course = load_course(args)
    records = sorted(gradebook.read_json_lines(files), key=lambda record: record.learner)
    seen: set[str] = set()
    for record in records:
        if record.learner in seen:
            raise KitError(
                _("learner {learner!r} is in more than one shard file; merge each shard once").format(
                    learner=record.learner
                )
            )
        seen.add(record.learner)
    write_json_lines(args.output, records)
    write_outputs(args, course, records)
    _print_summary(course, records)
    print(
        _("merged {files} file(s): {learners} learner(s) into {output}").format(
            files=len(files), learners=len(records), output=args.output
        )
    )
    return 1 if any(r.status in UNGRADED for r in records) else 0


def run(args: argparse.Namespace) -> int:
    """Grade every submission (or merge shards); exit 1 when any submission could not be graded."""
    if args.dirs and str(args.dirs[0]) == MERGE:
        return merge(args)
    if (
        (args.jobs is not None and args.jobs < 1)
        or args.timeout <= 0
        or args.memory < 64
        or args.processes < 4
    ):
        raise KitError(_("--jobs must be >= 1, --timeout > 0, --memory >= 64 (MiB) and --processes >= 4"))
    if args.output is not None:
        raise KitError(_("-o/--output is for `pi-course grade merge`; use --json FILE when grading"))
    _check_outputs(args)
    if args.classroom is not None and args.checkpoint is None:
        raise KitError(_("--classroom needs --checkpoint ID (the checkpoint this repository practises)"))
    # A learner's repository has the installed kit's course (no solutions); graders have a checkout.
    course = manifest.load(course_manifest(args.root)) if args.classroom else load_course(args)
    if args.checkpoint is not None:
        course.checkpoint(args.checkpoint)
    entries = roster.plan(
        args.dirs, course.package, args.roster, args.submissions_root, bare=args.checkpoint is not None
    )
    if args.shard:
        entries = shards.select(entries, *shards.parse(args.shard))
    pairs = [(entry.learner, entry.folder) for entry in entries if not entry.problem]
    if args.jobs is None:
        # Grading is CPU-bound and a slot runs one learner at a time: one slot per usable CPU, and no
        # more slots than submissions (each slot starts a sandbox).
        args.jobs = max(1, min(cpus(), len(pairs) or 1))
    limits = Limits(
        wall_seconds=args.timeout,
        memory_bytes=args.memory * MiB,
        cpu_seconds=max(1, int(args.timeout)),
        processes=args.processes,
    )
    if args.unsafe and args.fresh_sandbox:
        raise KitError(_("--fresh-sandbox and --unsafe contradict each other: choose one"))
    grader = Grader(
        course,
        limits,
        args.jobs,
        args.checkpoint,
        unsafe=args.unsafe,
        fresh_sandboxes=args.fresh_sandbox,
        proof=args.proof,
        keep=kit_cache() / RUNS_FOLDER,
    )
    if args.classroom is not None:
        classroom.use_starter_reference(grader, course, course.checkpoint(args.checkpoint))
    if args.unsafe:
        print(
            _(
                "pi-course grade: warning: --unsafe: learner code runs with your own rights, limited only in "
                "time, memory and processes; every record says so"
            ),
            file=sys.stderr,
        )
    try:
        # The solution's reference runs first: one that keeps failing stops here, before any row.
        grader.prepare([folder for _, folder in pairs])
    except BaseException:
        grader.close()
        raise
    # The table's lab columns are the labs of the checkpoint(s) graded, not of every checkpoint of the course.
    checkpoints = graded_checkpoints(course, args.checkpoint, [folder for _, folder in pairs])
    lab_ids = [lab.id for cp in course.checkpoints if cp.id in checkpoints for lab in cp.labs]
    default_checkpoint = Counter(checkpoints).most_common(1)[0][0] if checkpoints else None
    name_width = max([7, *(cell_len(shown(clean(entry.learner, 200))) for entry in entries)])
    if not args.quiet:
        shard = _(" (shard {shard})").format(shard=args.shard) if args.shard else ""
        print(
            _("grading {count} submission(s){shard}, {jobs} at a time, sandbox: {sandbox}").format(
                count=len(pairs), shard=shard, jobs=args.jobs, sandbox=grader.probe_message
            )
        )
        print(_("reference proof: {note}").format(note=grader.proof_note()))
        name_width = max(name_width, cell_len(_("learner")))
        print(
            f"{_pad(_('learner'), name_width)}  {_pad(_('status'), 13)}  {_pad(_('points'), 9, right=True)}  "
            + "".join(f"{_pad(lab, 9, right=True)}  " for lab in lab_ids)
            + _("notes")
        )
    ids = iter([learner for learner, _ in pairs])

    def show(record: LearnerRecord) -> None:
        # grade_all reports in submission order, so the ids line up.
        record.learner = clean(next(ids), 200)  # a folder name may hold ESC, newlines or 0xff
        if not args.quiet:
            print_row(record)

    def print_row(record: LearnerRecord) -> None:
        notes = "; ".join([*([record.message] if record.message else []), *record.flags])
        cells = "".join(f"{_pad(_fraction(record, lab), 9, right=True)}  " for lab in lab_ids)
        # A record graded against no checkpoint (skipped) still shows the class checkpoint's maximum.
        scored = record if record.checkpoint else replace(record, checkpoint=default_checkpoint)
        points = points_of(course, scored)
        score = f"{points.score:g}/{points.max_points:g}"
        print(
            f"{_pad(shown(record.learner), name_width)}  {record.status:<13}  {score:>9}  {cells}{notes}",
            flush=True,
        )

    unusable = {entry.learner: unusable_record(entry) for entry in entries if entry.problem}
    if not args.quiet:
        for record in unusable.values():
            print_row(record)
    try:
        graded = grader.grade_all([folder for _, folder in pairs], on_done=show) if pairs else []
    finally:
        grader.close()
    # Every row of the class in the order given: grade_all keeps the order of the folders it was given.
    in_order = iter(graded)
    records = [unusable[entry.learner] if entry.problem else next(in_order) for entry in entries]
    _print_summary(course, records)
    write_outputs(args, course, records)
    sys.stdout.flush()
    return 1 if any(r.status in UNGRADED for r in records) else 0
