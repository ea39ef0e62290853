"""`pi-course`: the learner's and the instructor's command line. Each command lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, Protocol

from pi_course_kit import __version__
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import ManifestError

# name -> (module under pi_course_kit, one-line help). Modules are imported only when used,
# so that `pi-course check` starts fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "practice": ("learner.practice", "make an isolated practice folder from a checkpoint's starter"),
    "checkpoint": (
        "learner.checkpoint",
        "show a checkpoint's card and materialise parent/ and target/ copies",
    ),
    "check": (
        "learner.check",
        "run the focused tests here and show per-lab progress (--watch to re-run on save)",
    ),
    "watch": (
        "learner.guide",
        "guided mode: one lab at a time, re-run on save (keys: h hint, l list, r reset, q quit)",
    ),
    "hint": ("learner.hint", "show the next hint for a lab"),
    "reset": ("learner.reset", "restore a lab's stubs, keeping a backup of your version"),
    "status": ("learner.status", "show where you stand in this practice folder"),
    "build-labs": ("instructor.build_labs", "regenerate every starter in labs/ from solutions/"),
    "diff": ("instructor.diff", "diff the teaching files: starter or a practice folder against the solution"),
    "diagnose": (
        "instructor.diagnose",
        "apply a named mutation to a copy of the solution and show which tests catch it",
    ),
    "verify": ("instructor.verify", "check that the whole course holds together (instructors)"),
    "grade": ("instructor.grade.cli", "grade practice folders in sandboxed copies (instructors)"),
    "export": ("instructor.export", "export grading for Gradescope or GitHub Classroom (instructors)"),
    "nbrun": ("notebook.nbrun", "execute a checkpoint notebook, or refresh its stored outputs (instructors)"),
}


class Command(Protocol):
    """What a command module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's arguments."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command; return the exit code."""


def _load(name: str) -> Command:
    module: Command = importlib.import_module(f"pi_course_kit.{COMMANDS[name][0]}")
    return module


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (what was wrong, where to look) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print `prog: error: message; see prog --help` on one line and exit 2."""
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The top-level parser; only the chosen command's module is imported."""
    parser = OneLineParser(prog="pi-course", description="pi-course teaching kit")
    parser.add_argument("--version", action="version", version=f"pi-course {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (_, summary) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=summary, description=summary)
        if name == chosen:
            _load(name).add_arguments(command_parser)
    return parser


def _take_language(argv: list[str]) -> list[str]:
    """Apply and remove a leading `--lang LANG` (e.g. `--lang en`): the learner's language for every message."""
    if len(argv) >= 2 and argv[0] == "--lang":
        from pi_course_kit.core.i18n import is_known, locale_dirs, use

        if not is_known(argv[1]):
            known = sorted({"en", *(p.name for d in locale_dirs() if d.is_dir() for p in d.iterdir())})
            raise KitError(f"unknown language {argv[1]!r} for --lang; choose one of: {', '.join(known)}")
        use(argv[1])
        return argv[2:]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pi-course` console command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = _take_language(argv)
    except KitError as error:
        print(f"pi-course: error: {error}", file=sys.stderr)
        return 2
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _load(args.command).run(args)
    except BrokenPipeError:
        # `pi-course diff 06 | head`: the reader left. Point stdout at devnull so the interpreter's
        # final flush does not raise again (the recipe from the `signal` module's documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KitError, ManifestError) as error:
        print(f"pi-course {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pi-course {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
