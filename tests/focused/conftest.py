"""Focused-test configuration: loads the per-lab report that travels with these tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pi_course_i18n  # the standard library only: imported first, it can say "interrupted"
import pytest

try:
    # Loads the Hypothesis profile (learner or grading) for every test module, those that use none of
    # the shared strategies too.
    import strategies  # noqa: F401
    from pi_course_report import ReportPlugin, StubFailures, pytest_addoption
except KeyboardInterrupt:
    # Ctrl-C while Hypothesis (or the report) imports: pytest is not running yet and would show the
    # import's traceback. One line, as `pi-course check` says it, and the shell's code for Ctrl-C.
    sys.stderr.write(pi_course_i18n._("{prog}: interrupted").format(prog="pytest") + "\n")
    raise SystemExit(130) from None

__all__ = ["pytest_addoption"]  # the report's pytest.ini key (the learner's package)


#: The marker a focused test of a lab with several functions carries: the learner's function it checks,
#: where the report sends a failure that no traceback line places (a wrong value, not an exception).
EDITS_MARKER = "edits(function, ...): the learner's function(s) this test checks (where a failure sends them)"


def pytest_configure(config: pytest.Config) -> None:
    """Register the per-lab report and the `edits` marker for this run."""
    config.addinivalue_line("markers", EDITS_MARKER)
    config.pluginmanager.register(ReportPlugin(config), "pi-course-report")
    config.pluginmanager.register(StubFailures(Path(str(config.rootpath))), "pi-course-stub-failures")
    if (Path(str(config.rootpath)) / ".pi-course" / "meta.json").is_file():
        # A practice folder is re-run after every save: keep pytest's rewritten test modules cached
        # in tests/__pycache__ even when the caller asked for no bytecode (the kit's runner does),
        # which saves re-parsing the focused tests on each run.
        sys.dont_write_bytecode = False
