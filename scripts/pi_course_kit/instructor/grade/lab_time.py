"""A pytest plugin of graded runs: one time-out per lab, so a lab that hangs costs that lab only.

The report plugin stops a test at its time limit, and skips the rest of a lab whose own code it
caught looping. A test that waits for something that never comes with none of the learner's code on
the stack (an awaited future nobody resolves, a C call that blocks) leaves no loop to point at, so
every further test of that lab waited its full limit: on a late checkpoint that outlasted the run's
wall time, the grader killed the run, and every lab of the learner scored 0 (issue #37). When
grading, a lab's first test stopped at its time limit is its last: the lab's remaining tests are
skipped (not passed), and the run goes on to the other labs. Loaded by the grader (`-p
pi_course_lab_time`, from the kit folder); standard library and pytest only, as it runs inside the
sandbox. A submission that fakes a time-out only skips its own tests.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Generator
from typing import Any

import pytest

#: The report plugin's time-out (core/report_plugin.py) and pytest-timeout's own.
TIMEOUT_TYPES = ("LearnerTimeout", "Timeout")
LAB_MARKER = re.compile(r"^lab(?P<major>\d+)_(?P<minor>\d+)$")
_LABS: dict[str, str] = {}  # marker -> lab id, from pytest.ini's markers
_TIMED_OUT: dict[str, str] = {}  # lab id -> the node id of its test that ran out of time


def _text(message: str) -> str:
    """The message in the run's language, when the report's catalog is there (it is, in a graded tree)."""
    try:
        catalog = importlib.import_module("pi_course_i18n")  # staged beside the tests
    except ImportError:
        return message
    return str(catalog._(message))


def pytest_configure(config: pytest.Config) -> None:
    """Read which marker is which lab from pytest.ini's marker lines (`lab1_1: 1.1 | title ...`)."""
    for line in config.getini("markers"):
        name, _, rest = str(line).partition(":")
        lab = rest.strip().split("|", 1)[0].strip()
        if lab:
            _LABS[name.strip()] = lab


def _lab_of(item: pytest.Item) -> str | None:
    for mark in item.iter_markers():
        if mark.name in _LABS:
            return _LABS[mark.name]
        if match := LAB_MARKER.match(mark.name):
            return f"{match['major']}.{match['minor']}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose lab already ran out of time once in this run."""
    lab = _lab_of(item)
    if lab is not None and lab in _TIMED_OUT:
        pytest.skip(
            _text(
                "not run: an earlier test of Lab {lab} ran out of time; when grading, a lab gets one time-out"
            ).format(lab=lab)
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Note the lab of a test that a time limit stopped (in setup, call or teardown)."""
    report = yield
    excinfo = call.excinfo
    # A test stopped on an event loop that nothing can wake (the report plugin's `Stuck`) took half a
    # second, not a time limit: the lab's other tests run and show their own results.
    if (
        excinfo is not None
        and getattr(excinfo.value, "waits_forever", False) is not True
        and (excinfo.typename in TIMEOUT_TYPES or str(excinfo.value).startswith("Timeout"))
    ):
        lab = _lab_of(item)
        if lab is not None:
            _TIMED_OUT.setdefault(lab, item.nodeid)
    return report
