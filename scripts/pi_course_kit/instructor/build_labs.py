"""`pi-course build-labs [CHECKPOINT] [--check]`: regenerate the starters in labs/ from solutions/.

Before the starters, it carries each checkpoint's `inherited_files` down from its parent's solution, in
lineage order, so one edit to a parent's file reaches every descendant's solution and starter.
"""

from __future__ import annotations

import argparse
import shutil

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import LabMarkerError, lab_import, strip_solution
from pi_course_kit.instructor.options import add_manifest_option, checkpoints, load_course


def expected_starter(course: Course, checkpoint: Checkpoint) -> dict[str, bytes]:
    """Every file the starter's pi_course must hold, relative to the starter folder."""
    solution = course.root / checkpoint.solution
    files: dict[str, bytes] = {}
    for relative in checkpoint.given_files:
        files[relative] = (solution / relative).read_bytes()
    for relative in checkpoint.teaching_files:
        if checkpoint.observation:  # nothing to rebuild: the learner starts from the target itself
            files[relative] = (solution / relative).read_bytes()
            continue
        source = (solution / relative).read_text(encoding="utf-8")
        stripped = strip_solution(source, str(solution / relative), import_line=lab_import(relative))
        files[relative] = stripped.encode("utf-8")
    return files


def stale_inherited(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Inherited solution files that differ from the parent's solution (missing ones included)."""
    parent = course.parent_of(checkpoint)
    if parent is None:
        return []
    mine, theirs = course.root / checkpoint.solution, course.root / parent.solution
    return [
        rel
        for rel in checkpoint.inherited_files
        if (theirs / rel).is_file()
        and (not (mine / rel).is_file() or (mine / rel).read_bytes() != (theirs / rel).read_bytes())
    ]


def inherit(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Copy the stale inherited files from the parent's solution; return them as solution paths."""
    parent = course.parent_of(checkpoint)
    copied = []
    for rel in stale_inherited(course, checkpoint):
        assert parent is not None  # stale_inherited finds nothing without a parent
        target = course.root / checkpoint.solution / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((course.root / parent.solution / rel).read_bytes())
        copied.append(f"{checkpoint.solution}/{rel}")
    return copied


def stale_files(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Starter files that differ from what build-labs would write (missing, changed or extra)."""
    starter = course.root / checkpoint.starter
    expected = expected_starter(course, checkpoint)
    stale = [
        rel
        for rel, data in expected.items()
        if not (starter / rel).is_file() or (starter / rel).read_bytes() != data
    ]
    package = starter / course.package
    if package.is_dir():
        for path in sorted(package.rglob("*.py")):
            rel = path.relative_to(starter).as_posix()
            if rel not in expected:
                stale.append(rel)
    return stale


def build(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Rewrite the starter of one checkpoint; return the files that changed."""
    starter = course.root / checkpoint.starter
    changed = stale_files(course, checkpoint)
    package = starter / course.package
    if package.is_dir():
        for path in package.rglob("*.py"):
            if path.relative_to(starter).as_posix() not in expected_starter(course, checkpoint):
                path.unlink()
        shutil.rmtree(package / "__pycache__", ignore_errors=True)
    for relative, data in expected_starter(course, checkpoint).items():
        target = starter / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return changed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the optional checkpoint, `--check` and the manifest option."""
    parser.add_argument(
        "checkpoint",
        nargs="?",
        metavar="CHECKPOINT",
        help=_("only this checkpoint (default: every checkpoint)"),
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=_("write nothing; exit 1 listing the stale starter and inherited files"),
    )
    add_manifest_option(parser)


def run(args: argparse.Namespace) -> int:
    """Rewrite stale starters (or, with --check, only list them)."""
    course = load_course(args)
    stale: list[str] = []
    try:
        for checkpoint in checkpoints(course, args.checkpoint):
            if args.check:
                stale += [f"{checkpoint.solution}/{rel}" for rel in stale_inherited(course, checkpoint)]
                stale += [f"{checkpoint.starter}/{rel}" for rel in stale_files(course, checkpoint)]
            else:
                for path in inherit(course, checkpoint):
                    print(f"wrote {path} (inherited from the parent's solution)")
                changed = build(course, checkpoint)
                for rel in changed:
                    print(f"wrote {checkpoint.starter}/{rel}")
                print(f"{checkpoint.starter}: {len(changed)} file(s) regenerated from {checkpoint.solution}")
    except LabMarkerError as error:
        raise KitError(f"{error}; nothing was written for that checkpoint") from None
    if not args.check:
        return 0
    if stale:
        print(f"{len(stale)} file(s) are stale; run `pi-course build-labs` to regenerate them:")
        for path in stale:
            print(f"  {path}")
        return 1
    print("every starter is in sync with its solution, and every inherited file with its parent's")
    return 0
