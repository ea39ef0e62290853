"""A stub raised inside `@given` is not shrunk or explained: one call, whatever the machine's load.

Issue #26: the starter's lab 6.1 was `failing` in one grading shard and `not started` in the batch,
with 0 passed both times. A held-out 6.1 property calls the lab's piece inside `@given`; on the starter
Hypothesis then shrank and explained a stub failure (about 100 calls of the stub, 1.7-2.5 s of CPU).
On the loaded machine that crossed the 10 s per-test limit, and the time-out, raised inside
Hypothesis's engine (`IndexError: pop from empty list`) or in the stub's line, is no stub: a real
failure. Checkpoints 07 and 09-14 have such public properties too. The report plugin now runs a test
whose lab (or an earlier lab) still has a stub without Hypothesis's shrink and explain phases.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import run_tests
from pi_course_kit.core.staging import staged

CALLS_ENV = "PI_COURSE_STUB_CALLS"


#: Where the property is decorated: inside the test, when it runs (after the plugin narrowed the profile),
#: or at module level, when the test file is imported (as every real focused test is).
PLACES = ("inside", "module")


def _property(lab_marker: str, place: str) -> str:
    """A property of lab 1.1 that writes down how often it ran; `place` says where `@given` is applied."""
    body = f"""
    CALLS.append(start)
    with open(os.environ["{CALLS_ENV}"], "w") as out:
        out.write(str(len(CALLS)))
    counter = Counter()
    counter.count = start
    assert counter.add() == start + 1
"""
    if place == "module":  # the test itself is the property, decorated when its file is imported
        test = f"@pytest.mark.{lab_marker}\n@given(st.integers(min_value=0, max_value=10**6))\n"
        test += f"def test_adding_works_for_any_start(start: int) -> None:{body}"
    else:  # the test decorates a property when it runs, and calls it
        inner = "@given(st.integers(min_value=0, max_value=10**6))\ndef check(start: int) -> None:" + body
        test = f"@pytest.mark.{lab_marker}\ndef test_adding_works_for_any_start() -> None:\n"
        test += textwrap.indent(inner, "    ") + "\n    check()\n"
    return (
        "\n\nimport os  # noqa: E402\n"
        "import hypothesis  # noqa: E402  (the real course's conftest imports it with its strategies)\n"
        "from hypothesis import given, strategies as st  # noqa: E402\n\n"
        f"CALLS: list[int] = []\n\n\n{test}"
    )


def property_run(
    course: Course, checkpoint: Checkpoint, tree: str, tmp_path: Path, place: str, *args: str
) -> tuple[int, str]:
    """Run a property test that calls lab 1.1's `Counter.add` inside `@given`: (its calls, the lab's
    status)."""
    root = tmp_path / "course"
    shutil.copytree(course.root, root)
    test = root / checkpoint.focused_tests[0]
    lab = checkpoint.labs[0]
    test.write_text(test.read_text(encoding="utf-8") + _property(lab.marker, place), encoding="utf-8")
    copy = manifest.load(root / course.path.name)
    calls = tmp_path / "calls"
    with staged(copy, copy.checkpoint(checkpoint.id), root / tree) as folder:
        env = {**os.environ, CALLS_ENV: str(calls), "PI_COURSE_HYPOTHESIS": "grading"}
        result = run_tests(folder, ("--tb=no", "-k", "adding_works", *args), env=env)
    row = next(row for row in result.report.labs if row.id == lab.id)
    return int(calls.read_text(encoding="utf-8")), row.status


@pytest.mark.parametrize("place", PLACES)
def test_a_stub_inside_given_is_called_once_and_the_lab_is_not_started(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, place: str
) -> None:
    """On the starter, is the stub inside `@given` called once (no shrinking, no explaining), the lab not
    started, whether the property was decorated when the test ran or when its file was imported?"""
    calls, status = property_run(course, checkpoint, checkpoint.starter, tmp_path, place)
    assert calls <= 2 and status == "not started"  # the first example, and Hypothesis's replay of it


@pytest.mark.parametrize("place", PLACES)
def test_a_real_failure_inside_given_is_still_shrunk(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, place: str
) -> None:
    """Once the lab has no stub left, does Hypothesis still shrink a real failure (many calls, lab
    failing)?"""
    (tmp_path / "wrong").mkdir()
    source = course.root / checkpoint.solution
    shutil.copytree(source, tmp_path / "wrong" / "tree")
    counter = tmp_path / "wrong" / "tree" / "fx_course" / "counter.py"
    text = counter.read_text(encoding="utf-8")
    counter.write_text(
        text.replace("self.count += 1", "self.count += 1 if self.count < 5 else 2"), encoding="utf-8"
    )
    assert text != counter.read_text(encoding="utf-8")
    calls, status = property_run(course, checkpoint, str(tmp_path / "wrong" / "tree"), tmp_path, place)
    assert calls > 5 and status == "failing"
