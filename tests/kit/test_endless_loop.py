"""One endless loop in a lab function gives one answer naming its line, every time, with no INTERNALERROR."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from learner_support import make_folder, run_cli, solve
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import RunResult, run_tests

LOOP = "while True: pass  # LOOP"
#: A short per-test limit keeps the five runs quick; the outcome, not the time, is what is checked.
LIMIT = ("--timeout", "2")

SLOW_OTHER_LAB = '''
"""A test of another lab that takes a while but ends: it must not be cut short by the loop's lab."""

import time

import pytest


@pytest.mark.lab1_2
def test_slow_but_finite() -> None:
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        pass
'''


@pytest.fixture
def looping(course: Course, checkpoint: Checkpoint, tmp_path: Path) -> tuple[Path, int]:
    """A solved fixture folder whose Counter.add starts with `while True: pass`, and that line's number."""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    counter = folder / "fx_course" / "counter.py"
    text = counter.read_text(encoding="utf-8").replace("        self.count += 1\n", f"        {LOOP}\n", 1)
    counter.write_text(text, encoding="utf-8")
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if "# LOOP" in row)
    return folder, line


def assert_one_answer(result: RunResult, line: int) -> None:
    """Finished, no INTERNALERROR, next step at the loop's line, and no failure without a location."""
    where = f"fx_course/counter.py:{line}"
    assert result.finished and not result.timed_out, result.output[-2000:]
    assert "INTERNALERROR" not in result.output
    assert result.next_step is not None
    assert result.next_step.lab == "1.1" and result.next_step.location == where
    failed = [record for record in result.tests if record.outcome == "failed"]
    assert failed and all(record.location == where for record in failed), failed
    looped = [record for record in failed if record.exc_type == "LearnerTimeout"]
    assert looped and all(where in str(record.message) for record in looped)
    # The loop's own lab stops at its first looping test: the rest are skipped, naming the line.
    lab = [record for record in result.tests if record.lab == "1.1"]
    assert sum(record.outcome == "failed" for record in lab) == 1
    skipped = [record for record in lab if record.outcome == "skipped"]
    assert skipped and all(where in str(record.skip_reason) for record in skipped)


@pytest.mark.slow
def test_a_loop_gives_one_answer_naming_its_line_five_runs_in_a_row(looping: tuple[Path, int]) -> None:
    """Five runs in a row: does each one end with its report, name the loop's line, and never
    INTERNALERROR?"""
    folder, line = looping
    for _run in range(5):
        assert_one_answer(run_tests(folder, list(LIMIT), timeout=120), line)


def test_check_names_the_loop_line_as_the_next_edit(looping: tuple[Path, int]) -> None:
    """Does `pi-course check` print the loop's file:line as the place to edit?"""
    folder, line = looping
    shown = run_cli(["check", *LIMIT], cwd=folder)
    assert shown.returncode == 1
    assert f"edit: fx_course/counter.py:{line} (Counter.add)" in shown.stdout
    assert "INTERNALERROR" not in shown.stdout + shown.stderr
    assert "Traceback" not in shown.stdout + shown.stderr


def test_a_slow_test_of_another_lab_is_not_cut_short_after_a_loop(looping: tuple[Path, int]) -> None:
    """After the loop was found, does a slow but finite test of another lab still run to its end and pass?"""
    folder, line = looping
    (folder / "tests" / "test_slow.py").write_text(SLOW_OTHER_LAB, encoding="utf-8")
    result = run_tests(folder, ["--timeout", "5"], timeout=120)
    assert_one_answer(result, line)
    slow = next(record for record in result.tests if str(record.nodeid).endswith("test_slow_but_finite"))
    assert slow.outcome == "passed", slow


def test_a_loop_is_told_by_its_cpu_before_the_time_limit(looping: tuple[Path, int]) -> None:
    """With pytest.ini's own limit, is the loop stopped because one call spun on the CPU, not at the limit?"""
    folder, line = looping
    result = run_tests(folder, ["-m", "lab1_1"], timeout=120)
    assert_one_answer(result, line)
    (looped,) = [record for record in result.tests if record.exc_type == "LearnerTimeout"]
    assert "spun for" in str(looped.message) and "endless loop in Lab 1.1" in str(looped.message)


MANY_QUICK_CALLS = '''
"""Many quick calls of the learner's code add up to more CPU than one loop may use: that is no loop."""

import time

import pytest

from fx_course import Counter


@pytest.mark.lab1_1
def test_many_quick_calls() -> None:
    counter = Counter()
    spent = time.process_time()
    while time.process_time() - spent < 3.0:
        for _ in range(10_000):
            counter.add()
    assert counter.count > 0
'''


def test_many_quick_calls_are_not_taken_for_a_loop(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a test whose quick calls of learner code add up to seconds of CPU still pass?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    (folder / "tests" / "test_many.py").write_text(MANY_QUICK_CALLS, encoding="utf-8")
    result = run_tests(folder, ["tests/test_many.py", "--timeout", "60"], timeout=120)
    assert result.finished, result.output[-2000:]
    (record,) = result.tests
    assert record.outcome == "passed", record


SECOND_LAB_CALLS_THE_LOOP = '''
"""A test of another lab that calls the function an earlier test already looped in."""

import pytest

from fx_course import Counter


@pytest.mark.lab1_1
def test_first_loop() -> None:
    Counter().add()


@pytest.mark.lab1_2
def test_second_loop_in_the_same_function() -> None:
    Counter().add()
'''
#: The plugin's allowance for one call (report_plugin.LOOP_CPU), which a known loop must not need again.
LOOP_CPU = 2.0


def test_a_loop_already_found_is_stopped_sooner_the_second_time(looping: tuple[Path, int]) -> None:
    """Once a call looped in a function, is the next call of it (from another lab's test) stopped after a
    fraction of the CPU the first one was allowed, so that one mistake does not cost its time twice?"""
    folder, _line = looping
    (folder / "tests" / "test_twice.py").write_text(SECOND_LAB_CALLS_THE_LOOP, encoding="utf-8")
    result = run_tests(folder, ["tests/test_twice.py", "--timeout", "60"], timeout=120)
    assert result.finished, result.output[-2000:]
    spent = {}
    for record in result.tests:
        found = re.search(r"spun for ([\d.]+)s", str(record.message))
        assert record.outcome == "failed" and found, record
        spent[str(record.nodeid).rsplit("::", 1)[-1]] = float(found.group(1))
    assert spent["test_first_loop"] >= LOOP_CPU
    assert spent["test_second_loop_in_the_same_function"] < LOOP_CPU / 2
