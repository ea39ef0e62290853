"""`pi-course hint [LAB]`: show the next hint for a lab; how far you got is remembered in the folder."""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import replace
from typing import Any

from pi_course_kit.core import records
from pi_course_kit.core.folder import PracticeFolder, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course, Lab, ManifestError
from pi_course_kit.core.records import FolderMeta


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the lab and --all."""
    parser.add_argument(
        "lab", nargs="?", metavar="LAB", help=_("lab id, e.g. 6.1 (default: the lab `check` pointed to last)")
    )
    parser.add_argument("--all", action="store_true", help=_("show again every hint you have already seen"))


def syntax_error(folder: PracticeFolder, checkpoint: Checkpoint) -> tuple[str, int, str] | None:
    """(file, line, message) of the first teaching file that does not parse, else None."""
    for relative in checkpoint.teaching_files:
        path = folder.root / relative
        try:
            ast.parse(path.read_text(encoding="utf-8"), relative)
        except SyntaxError as error:
            return relative, error.lineno or 1, error.msg
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    return None


def choose_lab(folder: PracticeFolder, course: Course, checkpoint: Checkpoint, wanted: str | None) -> Lab:
    """The lab asked for; else the lab of a line that does not parse; else the earliest unfinished required
    lab."""
    if wanted is not None:  # `hint ""` names no lab: refuse it rather than guess one
        # Every lab of the folder's table has its hints, the earlier chapters' labs (which the folder's
        # tests still run) and an optional exercise that came along with `--from` too.
        for lab in checkpoint.tree_labs or checkpoint.labs:
            if wanted in (lab.id, lab.marker):
                return lab
        listed = ", ".join(lab.id for lab in checkpoint.tree_labs or checkpoint.labs)
        raise ManifestError(
            _("unknown lab {lab!r} in checkpoint {checkpoint}; known labs: {known}").format(
                lab=wanted, checkpoint=checkpoint.id, known=listed
            )
        )
    known = {lab.id: lab for lab in checkpoint.labs}
    broken = syntax_error(folder, checkpoint)
    if broken is not None:
        owner = records.lab_of_line(folder.root / broken[0], broken[1])
        if owner in known:
            return known[owner]
    done = records.read_progress(folder.root, course.package)
    required = [lab for lab in checkpoint.labs if not lab.optional]
    unfinished = [lab for lab in required if done.get(lab.id) != records.DONE]
    last = folder.meta.last_next_lab
    # The optional exercise is never the default while a required lab is unfinished.
    if last in known and (not known[last].optional or not unfinished):
        return known[last]
    return (unfinished or required or checkpoint.labs)[0]


def run(args: argparse.Namespace) -> int:
    """Print the next unseen hint (or the last one again once all are seen) and remember it."""
    folder = open_folder()
    course, checkpoint = folder.made_from()
    if args.lab is None and (broken := syntax_error(folder, checkpoint)) is not None:
        print(
            _(
                "{file}:{line} does not parse ({message}): fix that line first; the hint below is for its lab"
            ).format(file=broken[0], line=broken[1], message=broken[2])
        )
    lab = choose_lab(folder, course, checkpoint, args.lab)
    hints = lab.shown_hints
    total = len(hints)

    def seen_count(meta: FolderMeta) -> int:
        # A count edited by hand (negative, or past the last hint) still means "from the first".
        return max(min(meta.hints.get(lab.id, 0), total), 0)

    already = seen_count(folder.meta)
    if args.all:
        shown = range(max(already, 1))
    else:

        def one_more(meta: dict[str, Any]) -> None:
            # The file as it is now, read typed; only the hints entry is written back.
            now = FolderMeta.from_json(meta)
            meta["hints"] = {**now.hints, lab.id: min(seen_count(now) + 1, total)}

        try:
            folder.update(one_more)  # counts from the file as it is now: another command may have written it
        except OSError as error:
            folder.meta = replace(folder.meta, hints={**folder.meta.hints, lab.id: min(already + 1, total)})
            print(
                _("cannot remember this hint in {path} ({reason}); the next one will repeat it").format(
                    path=folder.relative(folder.meta_path), reason=error.strerror or error
                ),
                file=sys.stderr,
            )
        already = min(seen_count(folder.meta), total)
        shown = range(already - 1, already)
    seen = folder.meta.hints
    for index in shown:
        print(
            _("hint {n}/{total} for Lab {lab} · {title}").format(
                n=index + 1, total=total, lab=lab.id, title=lab.shown_title
            )
        )
        print(f"  {hints[index]}")
    count = seen.get(lab.id, 0)
    if count >= total:
        print(
            _(
                "that was the last hint for Lab {lab}; CONTRACT.md, LAB-GUIDE.md and the notebook explain "
                "the contract"
            ).format(lab=lab.id)
        )
    else:
        print(
            _("run `pi-course hint {lab}` again for hint {n}/{total}").format(
                lab=lab.id, n=count + 1, total=total
            )
        )
    return 0
