"""`pi-course`: the learner's and the instructor's command line. Each command lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, Protocol

from pi_course_kit import __version__
from pi_course_kit.core import extras, i18n
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import ManifestError

# name -> (module under pi_course_kit, one-line help). Modules are imported only when used,
# so that `pi-course check` starts fast.
COMMANDS: dict[str, tuple[str, str]] = {
    # lineage is practice's entry: it adds `--from` (your own parent folder) to practice's starter copy.
    "practice": ("learner.lineage", "make an isolated practice folder from a checkpoint's starter"),
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
    "run": ("learner.run", "run your own pi_course as an agent against a model (offline by default)"),
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


#: Commands that need the `instructor` extra (grading's sandbox filter, charts, JUnit, YAML).
NEEDS_INSTRUCTOR_EXTRA = {"grade", "export"}


def missing_extra(extra: str) -> list[str]:
    """The distributions of `extra` that are not installed, read from the kit's own metadata (pyproject)."""
    try:
        requirements = importlib.metadata.requires("pi-course-kit") or []
    except importlib.metadata.PackageNotFoundError:
        return []  # run from a source tree without installing: nothing to compare with
    missing = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if f'extra == "{extra}"' not in marker.replace("'", '"'):
            continue
        if "sys_platform" in marker and f'sys_platform == "{sys.platform}"' not in marker.replace("'", '"'):
            continue
        name = re.split(r"[\s<>=!~\[]", spec.strip(), maxsplit=1)[0]
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def _load(name: str) -> Command:
    if name in NEEDS_INSTRUCTOR_EXTRA and (missing := missing_extra("instructor")):
        # Never `pip install 'pi-course-kit[instructor]'`: the name is not on the index (anyone could claim
        # it).
        install = extras.install_command("instructor")
        raise KitError(
            i18n._(
                "`pi-course {command}` needs the kit's instructor extra ({missing} missing): "
                "add it from the kit you installed: `{install}`"
            ).format(command=name, missing=", ".join(missing), install=install)
            if install
            else i18n._(
                "`pi-course {command}` needs the kit's instructor extra ({missing} missing): install the kit "
                "again from your wheel, `python -m pip install '{wheel}[instructor]'`, or run `bash "
                "scripts/bootstrap --instructor` in the kit's checkout (the kit is not on the package index)"
            ).format(
                command=name,
                missing=", ".join(missing),
                wheel=f"dist/pi_course_kit-{__version__}-py3-none-any.whl",
            )
        )
    module: Command = importlib.import_module(f"pi_course_kit.{COMMANDS[name][0]}")
    return module


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (what was wrong, where to look) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print `prog: error: message; see prog --help` on one line and exit 2."""
        line = i18n._("{prog}: error: {message}; see `{prog} --help`").format(prog=self.prog, message=message)
        self.exit(2, line + "\n")


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The top-level parser; only the chosen command's module is imported."""
    parser = OneLineParser(prog="pi-course", description=i18n._("pi-course teaching kit"))
    parser.add_argument(
        "--version",
        action="version",
        version=f"pi-course {__version__}",
        # argparse fixes this default at import time, before the run's catalog is chosen.
        help=i18n._("show program's version number and exit"),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (_, summary) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=i18n._(summary), description=i18n._(summary))
        if name == chosen:
            _load(name).add_arguments(command_parser)
    return parser


def _take_language(argv: list[str]) -> list[str]:
    """Apply and remove `--lang LANG` or `--lang=LANG` (before or after the command; not after `--`)."""
    end = argv.index("--") if "--" in argv else len(argv)
    for index, arg in enumerate(argv[:end]):
        if arg == "--lang" or arg.startswith("--lang="):
            value = arg.partition("=")[2] if "=" in arg else (argv[index + 1] if index + 1 < end else "")
            rest = argv[:index] + argv[index + (1 if "=" in arg else 2) :]
            break
    else:
        return argv
    if not value:
        raise KitError(i18n._("--lang needs a language, e.g. `--lang en`"))
    if not i18n.is_known(value):
        known = sorted({"en", *(p.name for d in i18n.locale_dirs() if d.is_dir() for p in d.iterdir())})
        raise KitError(
            i18n._("unknown language {value!r} for --lang; choose one of: {known}").format(
                value=value, known=", ".join(known)
            )
        )
    i18n.use(value)
    return rest


def _manifest_nearby() -> Path | None:
    """The course.toml a command would use, if one is found (its language comes before the manifest)."""
    from pi_course_kit.core.locate import course_root

    try:
        return course_root() / "course.toml"
    except KitError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pi-course` console command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    i18n.prepare_cli(_manifest_nearby())
    try:
        argv = _take_language(argv)
        parser = build_parser(argv)  # imports the chosen command, which may lack its extra
    except KitError as error:
        print(i18n._("{prog}: error: {message}").format(prog="pi-course", message=error), file=sys.stderr)
        return 2
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
        prog = f"pi-course {args.command}"
        print(i18n._("{prog}: error: {message}").format(prog=prog, message=error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(i18n._("{prog}: interrupted").format(prog=f"pi-course {args.command}"), file=sys.stderr)
        return 130
    except OSError as error:
        # The last resort for a file the command could not read or write (read-only, no permission):
        # one line naming the path and what to do, where no command gave a more specific one.
        from pi_course_kit.core.files import describe_os_error

        prog = f"pi-course {args.command}"
        print(
            i18n._("{prog}: error: {message}").format(prog=prog, message=describe_os_error(error)),
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
