"""Friendly lab errors in a notebook: an unfinished lab shows one line, every other error its traceback.

Installed by the notebook's set-up cell through IPython's custom exception hook. The error still
reaches the kernel's error output (same `ename`/`evalue`), so `nbrun --errors --allow-lab-errors`
and Run All with the `raises-exception` tag behave as before; only the traceback lines shrink.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from pi_course_kit.core.i18n import _

LAB_ERROR = "LabNotImplemented"
#: The msgid of the one-line box (its translation in the catalog: the kernel speaks the course's language).
BOX = "Lab {lab} not finished: {target} · {where} · pi-course hint {lab}"


def is_lab_error(error: BaseException) -> bool:
    """True for the course package's LabNotImplemented, recognised by class name so the kit never imports
    it."""
    return any(cls.__name__ == LAB_ERROR for cls in type(error).__mro__)


def _where(tb: TracebackType | None, package: str) -> str:
    """`pi_course/tool.py:96`: the deepest frame in the package that is not the error class itself.

    A file of a subpackage keeps its folders: `pi_course/survival/events.py:90`.
    """
    found = ""
    for frame in traceback.extract_tb(tb):
        parts = Path(frame.filename).parts
        if package in parts[:-1] and parts[-1] != "lab.py":
            start = len(parts) - 1 - parts[::-1].index(package)
            found = f"{'/'.join(parts[start:])}:{frame.lineno}"
    return found or package


def box(error: BaseException, tb: TracebackType | None, package: str) -> str:
    """The one line a learner sees for an unfinished lab raised in the course package `package`."""
    lab = str(getattr(error, "lab", "") or "?")
    target = str(getattr(error, "target", "") or error)
    return _(BOX).format(lab=lab, target=target, where=_where(tb, package))


def _handler_for(package: str) -> Callable[..., None]:
    # IPython hands the handler only the shell and the exception, so the package rides in the closure.
    def handler(
        shell: Any,
        etype: type[BaseException],
        value: BaseException,
        tb: TracebackType | None,
        tb_offset: Any = None,
    ) -> None:
        if not is_lab_error(value):
            # A learner's own bug needs the whole traceback.
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return
        # _showtraceback is the kernel's one place that emits the error output (ename, evalue, lines).
        shell._showtraceback(etype, value, [box(value, tb, package)])

    return handler


def install(package: str, shell: Any = None) -> bool:
    """Route LabNotImplemented (a NotImplementedError) to the one-line box; False outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((NotImplementedError,), _handler_for(package))
    return True
