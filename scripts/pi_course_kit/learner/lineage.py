"""`pi-course practice 07 DIR --from MY06`: carry a learner's own finished parent work into the next
checkpoint.

The new folder is the checkpoint's starter with the parent's teaching files replaced by the learner's
own versions. Those are only taken once the parent's focused tests are green on a staged copy, so the
learner's folder is read and never written. A parent teaching file that the new chapter itself changes
(not in its `inherited_files`, e.g. 03 adds a class to 02's event stream) comes from the course instead:
the learner's version would lack what the chapter adds. Those files are listed as `replaced`.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import write_folder_atomically, write_json_atomically
from pi_course_kit.core.folder import META_DIR, META_FILE, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import course_manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import Status
from pi_course_kit.core.runner import run_tests
from pi_course_kit.core.staging import staged
from pi_course_kit.learner import practice
from pi_course_kit.learner.practice import check_destination, fill_files, meta_record


def parent_checkpoint(course: Course, checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint whose target `checkpoint` starts from; refuse one without a parent."""
    parent = course.parent_of(checkpoint)
    if parent is None:
        raise KitError(
            _(
                "checkpoint {id} starts from no earlier checkpoint, so --from has nothing to carry over; "
                "drop --from (`pi-course practice {id} DIR`)"
            ).format(id=checkpoint.id)
        )
    return parent


def unfinished_labs(course: Course, parent: Checkpoint, source: Path) -> list[str]:
    """The parent's required labs that are not green in `source` (run on a staged copy, never in place)."""
    with staged(course, parent, source) as tree:
        result = run_tests(tree, timeout=600)
    rows = {row.id: row for row in result.report.labs}
    unfinished = []
    for lab in parent.tree_labs:
        if lab.optional:
            continue
        row = rows.get(lab.id)
        if row is None or row.status != Status.DONE:
            status = Status.NOT_RUN if row is None else row.status
            unfinished.append(f"Lab {lab.id} ({status})")
    if result.report.collect_errors:
        unfinished.insert(0, f"the tests cannot import ({result.report.collect_errors[0].message})")
    return unfinished


def carried_and_replaced(
    parent: Checkpoint, checkpoint: Checkpoint, source: Path, earlier: list[str]
) -> tuple[list[str], list[str]]:
    """Which of the learner's files go along, and which of their own the new chapter changes.

    Every file the chapter inherits unchanged goes along from the learner's folder, so work done in
    earlier chapters (and carried into `source` by its own --from, `earlier`) keeps travelling.
    """
    carried = [rel for rel in checkpoint.inherited_files if (source / rel).is_file()]
    own = dict.fromkeys([*parent.teaching_files, *earlier])
    replaced = [rel for rel in own if rel not in checkpoint.inherited_files]
    return carried, replaced


#: Where a `--from` folder keeps the learner's versions of the files the course supplied instead.
REPLACED_DIR = "replaced"


def keep_replaced(
    source: Path, root: Path, package: str, shipped: dict[str, str], carried: list[str], own: list[str]
) -> list[str]:
    """Copy the learner's changed package files that `root` holds in another version to .pi-course/replaced/.

    A file is the learner's when it is one of `own` (the parent's teaching files, and what their own
    earlier `--from` carried), or its bytes differ from what their folder was shipped with (or it was not
    shipped at all); it is replaced when the new folder has the same path with other bytes.
    """
    kept: list[str] = []
    folder = source / package
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        relative = path.relative_to(source).as_posix()
        target = root / relative
        if relative in carried or path.is_symlink() or not target.is_file():
            continue
        try:
            mine = path.read_bytes()
        except OSError:
            continue
        unchanged = relative not in own and hashlib.sha256(mine).hexdigest() == shipped.get(relative)
        if unchanged or target.read_bytes() == mine:
            continue
        backup = root / META_DIR / REPLACED_DIR / relative
        backup.parent.mkdir(parents=True, exist_ok=True)
        backup.write_bytes(mine)
        kept.append(relative)
    return kept


def replaced_files(dest: Path) -> list[str]:
    """The learner's files that `create_from` took from the course instead (read back from meta.json)."""
    carried = open_folder(dest).meta.carried
    return list(carried.replaced) if carried is not None else []


def create_from(course: Course, checkpoint: Checkpoint, source: Path, dest: Path) -> Path:
    """Make a practice folder for `checkpoint` that starts from the learner's own finished parent folder."""
    parent = parent_checkpoint(course, checkpoint)
    folder = open_folder(source) if source.is_dir() else None
    if folder is None:
        raise KitError(
            _("--from {source}: no such folder; give your finished {parent} practice folder").format(
                source=source, parent=parent.id
            )
        )
    if folder.checkpoint_id != parent.id:
        raise KitError(
            _(
                "--from {source}: a practice folder of checkpoint {found}, but {id} builds on {parent}; "
                "give your {parent} folder"
            ).format(source=source, found=folder.checkpoint_id, id=checkpoint.id, parent=parent.id)
        )
    dest = check_destination(course, dest)
    unfinished = unfinished_labs(course, parent, folder.root)
    if unfinished:
        raise KitError(
            _(
                "--from {source}: not finished yet: {labs}; make its tests green "
                "(`pi-course check` there) and try again; nothing was written"
            ).format(source=folder.root, labs=", ".join(unfinished))
        )

    def fill_from(root: Path) -> None:
        fill_files(course, checkpoint, root)
        before = folder.meta.carried
        earlier = list(before.files) if before is not None else []
        carried, replaced = carried_and_replaced(parent, checkpoint, folder.root, earlier)
        for relative in carried:
            shutil.copyfile(folder.root / relative, root / relative)
        # The parent's optional transfer exercise (its solution-only files) is the learner's own work too:
        # it comes along when they wrote it, so its tests keep running in the new folder.
        for relative in parent.solution_only:
            source = folder.root / relative
            if source.is_file() and not source.is_symlink():
                shutil.copyfile(source, root / relative)
                carried.append(relative)
        # Any other file of the learner's package that they changed (or added) and that the new folder
        # holds in the course's version: listed, and their version kept under .pi-course/replaced/.
        own = [*parent.teaching_files, *earlier]
        kept = keep_replaced(folder.root, root, course.package, folder.meta.files, carried, own)
        replaced = list(dict.fromkeys([*replaced, *kept]))
        # Hashed after the carry-over, so `status` counts the learner's own files as shipped, not changed.
        meta = meta_record(course, checkpoint, root)
        meta["from"] = {
            "folder": str(folder.root),
            "checkpoint": parent.id,
            "files": carried,
            "replaced": replaced,
        }
        write_json_atomically(root / META_DIR / META_FILE, meta)

    return write_folder_atomically(dest, fill_from)


# -- the `practice` command: this module is its entry, so that practice never imports lineage --------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `practice` command's arguments (declared by practice), --from among them."""
    practice.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """`pi-course practice`: from the starter, or with --from from the learner's own parent folder."""
    if args.source is None:
        return practice.run(args)
    course = manifest.load(course_manifest(args.course))
    checkpoint = course.checkpoint(args.checkpoint)
    dest = create_from(course, checkpoint, args.source, args.dir)
    print(
        _("your own {package} came from {source}: every test of checkpoint {parent} passes there").format(
            package=course.package, source=args.source, parent=parent_checkpoint(course, checkpoint).id
        )
    )
    replaced = replaced_files(dest)
    if replaced:
        print(
            _(
                "this chapter changes {files}, so they come from the course, not from {source} "
                "(your own versions stay there)"
            ).format(files=", ".join(replaced), source=args.source)
        )
    kept = [rel for rel in replaced if (dest / META_DIR / REPLACED_DIR / rel).is_file()]
    if kept:
        print(
            _("your own versions of {files} are kept in {folder}/ (compare them with the new ones)").format(
                files=", ".join(kept), folder=f"{META_DIR}/{REPLACED_DIR}"
            )
        )
    # The parent's optional exercise, when the learner wrote it, came along and still runs by its marker.
    parent = parent_checkpoint(course, checkpoint)
    exercises = [rel for rel in parent.solution_only if (dest / rel).is_file()]
    markers = [lab.marker for lab in parent.labs if lab.optional]
    if exercises and markers:
        print(
            _(
                "your optional exercise {files} came along: `python -m pytest -m {marker}` still runs it"
            ).format(files=", ".join(exercises), marker=" or ".join(markers))
        )
    practice.print_next_steps(course, checkpoint, dest)
    return 0
