"""`pi-course practice 07 DIR --from MY06`: carry a learner's own finished parent work into the next checkpoint.

The new folder is the checkpoint's starter with the parent's teaching files replaced by the learner's
own versions. Those are only taken once the parent's focused tests are green on a staged copy, so the
learner's folder is read and never written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import write_folder_atomically, write_json_atomically
from pi_course_kit.core.folder import META_DIR, META_FILE, open_folder
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import DONE
from pi_course_kit.core.runner import run_tests
from pi_course_kit.core.staging import staged
from pi_course_kit.learner.practice import check_destination, fill_files, meta_record


def parent_checkpoint(course: Course, checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint whose target `checkpoint` starts from; refuse one without a parent."""
    parent = course.parent_of(checkpoint)
    if parent is None:
        raise KitError(
            f"checkpoint {checkpoint.id} starts from no earlier checkpoint, so --from has nothing to carry over; "
            f"drop --from (`pi-course practice {checkpoint.id} DIR`)"
        )
    return parent


def unfinished_labs(course: Course, parent: Checkpoint, source: Path) -> list[str]:
    """The parent's required labs that are not green in `source` (run on a staged copy, never in place)."""
    with staged(course, parent, source) as tree:
        result = run_tests(tree, timeout=600)
    rows = {row["id"]: row for row in result.labs}
    unfinished = []
    for lab in parent.tree_labs:
        if lab.optional:
            continue
        row = rows.get(lab.id)
        if row is None or row["status"] != DONE:
            status = "not run" if row is None else str(row["status"])
            unfinished.append(f"Lab {lab.id} ({status})")
    if result.collect_errors:
        unfinished.insert(0, f"the tests cannot import ({result.collect_errors[0]['message']})")
    return unfinished


def create_from(course: Course, checkpoint: Checkpoint, source: Path, dest: Path) -> Path:
    """Make a practice folder for `checkpoint` that starts from the learner's own finished parent folder."""
    parent = parent_checkpoint(course, checkpoint)
    folder = open_folder(source) if source.is_dir() else None
    if folder is None:
        raise KitError(f"--from {source}: no such folder; give your finished {parent.id} practice folder")
    if folder.checkpoint_id != parent.id:
        raise KitError(
            f"--from {source}: a practice folder of checkpoint {folder.checkpoint_id}, but {checkpoint.id} "
            f"builds on {parent.id}; give your {parent.id} folder"
        )
    dest = check_destination(course, dest)
    unfinished = unfinished_labs(course, parent, folder.root)
    if unfinished:
        raise KitError(
            f"--from {folder.root}: not finished yet: {', '.join(unfinished)}; make its tests green "
            f"(`pi-course check` there) and try again; nothing was written"
        )

    def fill_from(root: Path) -> None:
        fill_files(course, checkpoint, root)
        for relative in parent.teaching_files:
            shutil.copyfile(folder.root / relative, root / relative)
        # Hashed after the carry-over, so `status` counts the learner's own files as shipped, not changed.
        meta = meta_record(course, checkpoint, root)
        meta["from"] = {
            "folder": str(folder.root),
            "checkpoint": parent.id,
            "files": list(parent.teaching_files),
        }
        write_json_atomically(root / META_DIR / META_FILE, meta)

    return write_folder_atomically(dest, fill_from)
