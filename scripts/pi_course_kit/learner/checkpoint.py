"""`pi-course checkpoint [ID [DIR]]`: a checkpoint's card, plus runnable parent/ and target/ copies."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import write_folder_atomically
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import course_manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.staging import hash_checked_bytecode, stage_tree
from pi_course_kit.learner import practice

DEFAULT_BASE = ".checkpoints"
MARK = ".pi-course-checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint, the destination and --replace."""
    parser.add_argument(
        "checkpoint",
        nargs="?",
        metavar="CHECKPOINT",
        help=_("checkpoint id or slug, e.g. 06 (none: list them)"),
    )
    parser.add_argument(
        "dir",
        nargs="?",
        type=Path,
        metavar="DIR",
        help=_("where to put parent/ and target/ (default: .checkpoints/SLUG)"),
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help=_("replace DIR if an earlier `checkpoint` run made it (nothing else)"),
    )
    parser.add_argument(
        "--course",
        type=Path,
        metavar="DIR",
        help=_(
            "the course to use (default: PI_COURSE_ROOT, a checkout above this folder, or the bundled one)"
        ),
    )


def listing(course: Course) -> list[str]:
    """One line per checkpoint."""
    lines = [
        _("{title}: {count} checkpoint(s)").format(title=course.shown_title, count=len(course.checkpoints))
    ]
    for cp in course.checkpoints:
        required = len(cp.required_labs)
        extra = len(cp.labs) - required
        labs = _("{count} labs").format(count=required) + (
            _(" + {count} optional").format(count=extra) if extra else ""
        )
        lines.append(f"  {cp.id}  {cp.slug:<20} {labs:<22} {cp.shown_title}")
    first = course.checkpoints[0].id
    lines.append(_("show one: scripts/checkpoint {id}   (or: pi-course checkpoint {id})").format(id=first))
    return lines


def card(course: Course, cp: Checkpoint, dest: Path) -> list[str]:
    """The checkpoint's card: trees, files, tests per lab, first red and the commands to run."""
    counts = practice.lab_test_counts(course, cp)
    notebook = cp.notebook + ("" if practice.notebook_path(course, cp) else _("  (not written yet)"))
    lines = [
        _("checkpoint {id} · {slug}").format(id=cp.id, slug=cp.slug),
        f"  {cp.shown_title}",
        _("parent (starter):  {path}").format(path=cp.starter),
        _("target (solution): {path}").format(path=cp.solution),
        _("builds on:         {parent}").format(parent=cp.parent or "-")
        + (
            _("  (its target is this parent state; inherited: {files})").format(
                files=", ".join(cp.inherited_files)
            )
            if cp.parent
            else ""
        ),
        _("teaching files:    {files}").format(files=", ".join(cp.teaching_files)),
        _("given files:       {files}").format(files=", ".join(cp.given_files) or "-"),
        _("solution only:     {files}").format(files=", ".join(cp.solution_only) or "-"),
        _("notebook:          {notebook}").format(notebook=notebook),
        _("focused tests:     {files}").format(files=", ".join(cp.focused_tests)),
    ]
    width = max(len(lab.id) for lab in cp.labs)
    lines.append(f"  {'lab':<{width}}  {'marker':<10} {_('tests'):>5}  {_('title')}")
    for lab in cp.labs:
        flag = _(" (optional)") if lab.optional else ""
        lines.append(f"  {lab.id:<{width}}  {lab.marker:<10} {counts[lab.id]:>5}  {lab.shown_title}{flag}")
    lines.append(
        _("  ({count} test functions, counted per marker; parametrized cases count once)").format(
            count=sum(counts.values())
        )
    )
    first = cp.labs[0]
    if cp.observation:
        return [
            *lines,
            _(
                "first red:         none: an observation checkpoint (nothing to implement; run, predict, "
                "break)"
            ),
            _("commands:"),
            f"  cd {dest / 'target'} && python -m pytest                      # "
            + _("green: every focused test passes"),
            f"  pi-course practice {cp.id} ~/pi-practice                          # "
            + _("your own practice folder"),
        ]
    lines += [
        _("first red:         {prefix} …").format(prefix=cp.first_red_prefix),
        _("commands:"),
        f"  cd {dest / 'parent'} && python -m pytest -m {first.marker} -x   # "
        + _("red: {prefix} …").format(prefix=cp.first_red_prefix),
        f"  cd {dest / 'target'} && python -m pytest                      # "
        + _("green: every focused test passes"),
        f"  pi-course practice {cp.id} ~/pi-practice                          # "
        + _("your own practice folder"),
    ]
    return lines


def fill(course: Course, cp: Checkpoint, root: Path) -> None:
    """Stage the parent (starter) and target (solution) trees side by side."""
    for name, source in (("parent", cp.starter), ("target", cp.solution)):
        stage_tree(course, cp, course.root / source, root / name)
        hash_checked_bytecode(root / name / course.package)
    (root / MARK).write_text(f"{cp.id}\n", encoding="utf-8")


def materialise(course: Course, cp: Checkpoint, dest: Path, replace: bool) -> Path:
    """Write DIR/parent and DIR/target atomically; with `replace`, swap out only a folder we made."""
    dest = dest.expanduser().resolve()
    if replace and dest.is_dir() and any(dest.iterdir()):
        if not (dest / MARK).is_file():
            raise KitError(
                _(
                    "{dest} was not made by `pi-course checkpoint`; --replace only replaces such folders"
                ).format(dest=dest)
            )
        # The labs/ and solutions/ refusals hold for a replacement too.
        practice.check_destination(course, dest.parent / f"{dest.name}.new-check")
        fresh = write_folder_atomically(dest.parent / f".{dest.name}.new", lambda tmp: fill(course, cp, tmp))
        old = dest.parent / f".{dest.name}.old"
        os.replace(dest, old)
        os.replace(fresh, dest)
        shutil.rmtree(old, ignore_errors=True)
        return dest
    dest = practice.check_destination(course, dest)
    return write_folder_atomically(dest, lambda tmp: fill(course, cp, tmp))


def run(args: argparse.Namespace) -> int:
    """List the checkpoints, or print one card and materialise its copies."""
    course = manifest.load(course_manifest(args.course, need_solutions=args.checkpoint is not None))
    if args.checkpoint is None:
        print("\n".join(listing(course)))
        return 0
    cp = course.checkpoint(args.checkpoint)
    dest = args.dir if args.dir is not None else course.root / DEFAULT_BASE / cp.slug
    if (dest / MARK).is_file() and not args.replace:
        raise KitError(
            _("{dest} already holds this checkpoint's copies; add --replace to refresh them").format(
                dest=dest
            )
        )
    made = materialise(course, cp, dest, args.replace)
    print("\n".join(card(course, cp, made)))
    parent_state = _("green too: nothing to implement") if cp.observation else _("red")
    print(
        _("materialised: {parent} ({state}) and {target} (green)").format(
            parent=made / "parent", state=parent_state, target=made / "target"
        )
    )
    return 0
