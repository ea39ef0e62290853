"""`pi-course hint [LAB]`: show the next hint for a lab; how far you got is remembered in the folder."""

from __future__ import annotations

import argparse

from pi_course_kit.core import manifest
from pi_course_kit.core.folder import PracticeFolder, open_folder
from pi_course_kit.core.manifest import Checkpoint, Lab


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the lab and --all."""
    parser.add_argument("lab", nargs="?", help="lab id, e.g. 6.1 (default: the lab `check` pointed to last)")
    parser.add_argument("--all", action="store_true", help="show again every hint you have already seen")


def choose_lab(folder: PracticeFolder, checkpoint: Checkpoint, wanted: str | None) -> Lab:
    """The lab asked for, else the one the last check pointed to, else the first lab."""
    if wanted:
        return checkpoint.lab(wanted)
    last = folder.meta.get("last_next_lab")
    known = {lab.id for lab in checkpoint.labs}
    return checkpoint.lab(last) if last in known else checkpoint.labs[0]


def run(args: argparse.Namespace) -> int:
    """Print the next unseen hint (or the last one again once all are seen) and remember it."""
    folder = open_folder()
    checkpoint = manifest.load(folder.course_path).checkpoint(folder.checkpoint_id)
    lab = choose_lab(folder, checkpoint, args.lab)
    seen: dict[str, int] = folder.meta.setdefault("hints", {})
    total = len(lab.hints)
    already = min(int(seen.get(lab.id, 0)), total)
    if args.all:
        shown = range(max(already, 1))
    else:
        shown = range(min(already + 1, total) - 1, min(already + 1, total))
        seen[lab.id] = min(already + 1, total)
        folder.save()
    for index in shown:
        print(f"hint {index + 1}/{total} for Lab {lab.id} · {lab.title}")
        print(f"  {lab.hints[index]}")
    count = int(seen.get(lab.id, 0))
    if count >= total:
        print(f"that was the last hint for Lab {lab.id}; LAB-GUIDE.md and the notebook explain the contract")
    else:
        print(f"run `pi-course hint {lab.id}` again for hint {count + 1}/{total}")
    return 0
