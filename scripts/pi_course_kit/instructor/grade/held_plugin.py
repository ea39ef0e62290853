"""A pytest plugin of the grading sandbox: held-out test modules served from memory, never from a file.

The grader stages each held-out test module as an empty placeholder (its name only) and hands its
disguised source to the run through an inherited memory file, whose descriptor number is in
`HELD_ENV`. pytest loads this plugin (`-p pi_course_held`) while it reads its options, before any
conftest or test module and so before any learner code: the plugin reads the memory file, closes it
and drops the variable. When pytest then collects a placeholder, the plugin builds the module from
the source it holds (with pytest's assertion rewriting), so no path on the sandbox's disk ever holds a
held-out test, to list or to open. What stays is what no staging can hide from code run in the same
process: the module's objects in memory (see docs/grading-threat-model.md, the residual channel).
Standard library and pytest only: it runs inside the sandbox, where the kit is not installed.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

HELD_ENV = "PI_COURSE_HELD_OUT_FD"
#: The placeholder's whole text: what learner code reads when it opens a held-out module's path.
PLACEHOLDER = b"# A held-out test module: the grader serves it from memory; this file holds none of it.\n"
_HELD: dict[str, bytes] = {}


def _take() -> None:
    """Read the held-out sources from the inherited memory file, then close it for good."""
    number = os.environ.pop(HELD_ENV, "")
    if not number.isdigit():
        return
    fd = int(number)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    found = json.loads(b"".join(chunks).decode("utf-8"))
    _HELD.update({str(name): str(text).encode("utf-8") for name, text in found.items()})


_take()  # at import: pytest imports `-p` plugins before any conftest, test module or learner code


class HeldModule(pytest.Module):
    """A test module built from the source the grader handed over, not imported from its placeholder."""

    def _getobj(self) -> Any:
        name = self.path.stem
        source = _HELD.pop(self.path.name, None)
        if source is None:  # collected twice, or never handed over: whatever ran before stands
            known = sys.modules.get(name)
            if known is None:
                raise self.CollectError(f"held-out module {self.path.name} was not handed to this run")
            return known
        from _pytest.assertion import rewrite

        where = str(self.path)
        tree = ast.parse(source, filename=where)
        rewrite.rewrite_asserts(tree, source, where, self.config)
        code = compile(tree, where, "exec", dont_inherit=True)
        module = types.ModuleType(name)
        module.__file__ = where
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)  # the kit's own test module, disguised
        except BaseException:
            sys.modules.pop(name, None)
            raise
        self.config.pluginmanager.consider_module(module)
        return module


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect a held-out placeholder as the module handed over in memory."""
    if module_path.name in _HELD:
        return HeldModule.from_parent(parent, path=module_path)
    return None
