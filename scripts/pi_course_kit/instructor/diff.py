"""Unified diffs of a checkpoint's teaching files: starter or a practice folder against the solution."""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import BEGIN, END
from pi_course_kit.instructor.options import add_manifest_option, load_course

RED, GREEN, CYAN, BOLD, RESET = "\033[31m", "\033[32m", "\033[36m", "\033[1m", "\033[0m"


@dataclass(frozen=True)
class FileDiff:
    """The diff of one teaching file."""

    relative: str
    lines: tuple[str, ...]
    added: int
    removed: int
    missing: bool = False


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        return [f"<{path.name} is not UTF-8 text>\n"]


def without_markers(lines: list[str]) -> list[str]:
    """Drop the `# BEGIN LAB` / `# END LAB` lines: build metadata that no learner's file has."""
    return [line for line in lines if not (BEGIN.match(line) or END.match(line))]


def diff_trees(
    checkpoint: Checkpoint, old_tree: Path, new_tree: Path, old_label: str, new_label: str, context: int = 3
) -> list[FileDiff]:
    """Diff each teaching file of `old_tree` against the same file of `new_tree` (lab markers left out)."""
    diffs = []
    for relative in checkpoint.teaching_files:
        old_path = old_tree / relative
        old, new = without_markers(_read(old_path)), without_markers(_read(new_tree / relative))
        lines = []
        for line in difflib.unified_diff(
            old, new, f"{old_label}/{relative}", f"{new_label}/{relative}", n=context
        ):
            lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        text = "".join(lines).splitlines()
        added = sum(1 for line in text if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in text if line.startswith("-") and not line.startswith("---"))
        diffs.append(FileDiff(relative, tuple(text), added, removed, missing=not old_path.is_file()))
    return diffs


def colourise(line: str) -> str:
    """Colour one unified-diff line the way git does."""
    if line.startswith(("+++", "---")):
        return f"{BOLD}{line}{RESET}"
    if line.startswith("@@"):
        return f"{CYAN}{line}{RESET}"
    if line.startswith("+"):
        return f"{GREEN}{line}{RESET}"
    if line.startswith("-"):
        return f"{RED}{line}{RESET}"
    return line


def render_diff(diffs: list[FileDiff], colour: bool) -> list[str]:
    """The full unified diff, optionally coloured."""
    out: list[str] = []
    for diff in diffs:
        out.extend(colourise(line) if colour else line for line in diff.lines)
    return out


def render_stat(diffs: list[FileDiff], colour: bool, width: int = 40) -> list[str]:
    """A `git diff --stat`-like summary: changed lines per file and the totals."""
    out = []
    name_width = max((len(d.relative) for d in diffs), default=0)
    biggest = max((d.added + d.removed for d in diffs), default=0)
    for diff in diffs:
        changed = diff.added + diff.removed
        scale = min(1.0, width / biggest) if biggest else 1.0
        plus, minus = "+" * round(diff.added * scale), "-" * round(diff.removed * scale)
        if colour:
            plus, minus = f"{GREEN}{plus}{RESET}", f"{RED}{minus}{RESET}"
        note = " (missing)" if diff.missing else ""
        out.append(f" {diff.relative:<{name_width}} | {changed:>4} {plus}{minus}{note}")
    files = sum(1 for d in diffs if d.lines)
    added, removed = sum(d.added for d in diffs), sum(d.removed for d in diffs)
    out.append(
        _(" {files} file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)").format(
            files=files, added=added, removed=removed
        )
    )
    return out


def solution_tree(course: Course, checkpoint: Checkpoint) -> Path:
    """The folder holding the checkpoint's solution `pi_course`."""
    return course.root / checkpoint.solution


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint, the optional folder, --stat and --color."""
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help=_("checkpoint id, e.g. 06"))
    parser.add_argument(
        "dir",
        nargs="?",
        type=Path,
        metavar="DIR",
        help=_("a practice folder to compare (default: the starter)"),
    )
    parser.add_argument("--stat", action="store_true", help=_("only a per-file summary of changed lines"))
    parser.add_argument(
        "--color",
        "--colour",
        dest="color",
        choices=("auto", "always", "never"),
        default="auto",
        help=_("colour the output: always, never, or auto (only on a terminal; the default)"),
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
                _("{folder}: no such folder; give a practice folder (one that holds {package}/)").format(
                    folder=old_tree, package=course.package
                )
            )
        if not (old_tree / course.package).is_dir():
            raise KitError(
                _(
                    "{folder}: no {package}/ inside, so it is not a practice folder; "
                    "make one with `pi-course practice {id} DIR`"
                ).format(folder=old_tree, package=course.package, id=checkpoint.id)
            )
        old_label = str(args.dir).rstrip("/") or "."
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    diffs = diff_trees(
        checkpoint, old_tree, solution_tree(course, checkpoint), old_label, checkpoint.solution
    )
    lines = render_stat(diffs, colour) if args.stat else render_diff(diffs, colour)
    if not any(d.lines for d in diffs):
        print(
            _("no differences in the teaching files ({files})").format(
                files=", ".join(checkpoint.teaching_files)
            )
        )
        return 0
    print("\n".join(lines))
    return 0
