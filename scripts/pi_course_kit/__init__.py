"""The pi-course kit engine: manifest, staging, checking and grading. Never imported by pi_course."""

import sys
from pathlib import Path
from types import TracebackType

__version__ = "0.7.0"


def _interrupted(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
    """Ctrl-C while `pi-course` starts up, before its command's own handler is in place: one line, no
    traceback."""
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    try:
        from pi_course_kit.core.i18n import _

        line = _("{prog}: interrupted").format(prog="pi-course")
    except BaseException:  # a second Ctrl-C, or an unreadable catalog: the plain line will do
        line = "pi-course: interrupted"
    print(line, file=sys.stderr)


# Only for the command line (the console script, or `python -m pi_course_kit.cli` while it is located):
# a program that imports the kit as a library keeps its own way of reporting an interrupt.
if sys.excepthook is sys.__excepthook__ and Path(sys.argv[0] if sys.argv else "").name in ("pi-course", "-m"):
    sys.excepthook = _interrupted
