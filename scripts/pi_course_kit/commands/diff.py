"""`pi-course diff 06 [DIR]`: the teaching files, starter (or a practice folder) against the solution."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..diffing import diff_trees, render_diff, render_stat, solution_tree
from ..errors import KitError
from ..instructor import add_manifest_option, load_course


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint, the optional folder, --stat and --color."""
    parser.add_argument("checkpoint", help="checkpoint id, e.g. 06")
    parser.add_argument(
        "dir", nargs="?", type=Path, help="a practice folder to compare (default: the starter)"
    )
    parser.add_argument("--stat", action="store_true", help="only a per-file summary of changed lines")
    parser.add_argument(
        "--color",
        "--colour",
        dest="color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the output: always, never, or auto (only on a terminal; the default)",
    )
    add_manifest_option(parser)


def run(args: argparse.Namespace) -> int:
    """Print the diff; exit 0 (differences are the point, not an error)."""
    course = load_course(args)
    checkpoint = course.checkpoint(args.checkpoint)
    if args.dir is None:
        old_tree, old_label = course.root / checkpoint.starter, checkpoint.starter
    else:
        old_tree = args.dir
        if not old_tree.is_dir():
            raise KitError(
                f"{old_tree}: no such folder; give a practice folder (one that holds {course.package}/)"
            )
        if not (old_tree / course.package).is_dir():
            raise KitError(
                f"{old_tree}: no {course.package}/ inside, so it is not a practice folder; "
                f"make one with `pi-course practice {checkpoint.id} DIR`"
            )
        old_label = str(args.dir).rstrip("/") or "."
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    diffs = diff_trees(
        checkpoint, old_tree, solution_tree(course, checkpoint), old_label, checkpoint.solution
    )
    lines = render_stat(diffs, colour) if args.stat else render_diff(diffs, colour)
    if not any(d.lines for d in diffs):
        print(f"no differences in the teaching files ({', '.join(checkpoint.teaching_files)})")
        return 0
    print("\n".join(lines))
    return 0
