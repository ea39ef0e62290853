"""Learner-code faults never hang or bury the learner: syntax errors, endless loops, sys.exit, os._exit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from learner_support import make_folder, run_cli, solve
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import TestRecord as Record  # not "Test…": pytest would collect it
from pi_course_kit.core.runner import RunResult, run_tests

PROBE = '''
"""Probe tests that call one learner method each; the fault under test lives in fx_course/counter.py."""

import pytest
from hypothesis import given, strategies as st

from fx_course import Counter


@pytest.mark.lab1_1
def test_plain_call():
    assert Counter().add() == 1


@pytest.mark.lab1_1
@given(st.integers(min_value=1, max_value=5))
def test_property_call(number):
    counter = Counter()
    counter.count = number
    assert counter.add() == number + 1


@pytest.mark.lab1_2
def test_reset_call():
    counter = Counter()
    counter.reset()
    assert counter.count == 0


@pytest.mark.lab1_2
def test_the_run_goes_on():
    assert True
'''


def probe_folder(
    course: Course, checkpoint: Checkpoint, root: Path, probe_source: str | None = PROBE
) -> Path:
    """A solved practice folder whose tests/test_probe.py is `probe_source` (None: no probe tests)."""
    folder = make_folder(course, checkpoint, root / "p")
    solve(course, checkpoint, folder)
    if probe_source is not None:
        (folder / "tests" / "test_probe.py").write_text(probe_source, encoding="utf-8")
    return folder


def faulty_folder(
    course: Course,
    checkpoint: Checkpoint,
    root: Path,
    function: str,
    fault: str,
    probe_source: str | None = PROBE,
) -> Path:
    """A solved practice folder whose method `function` starts with `fault`, with `probe_source` as its
    probe tests (by default PROBE)."""
    folder = probe_folder(course, checkpoint, root, probe_source)
    counter = folder / "fx_course" / "counter.py"
    lines = counter.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {function}("))
    indent = " " * (len(lines[start]) - len(lines[start].lstrip()) + 4)
    docstring = next(i for i in range(start, len(lines)) if '"""' in lines[i])
    lines.insert(docstring + 1, f"{indent}{fault}  # FAULT\n")
    counter.write_text("".join(lines), encoding="utf-8")
    return folder


def fault_line(folder: Path) -> int:
    """The line number of the injected fault."""
    text = (folder / "fx_course" / "counter.py").read_text(encoding="utf-8")
    return next(n for n, line in enumerate(text.splitlines(), start=1) if "# FAULT" in line)


def probe(folder: Path, *extra: str) -> RunResult:
    """Run only the probe tests, with a hard outer limit so a regression fails instead of hanging."""
    return run_tests(folder, ["tests/test_probe.py", *extra], timeout=90)


def by_name(result: RunResult) -> dict[str, Record]:
    """Test records keyed by function name."""
    return {str(record.nodeid).split("::")[-1]: record for record in result.tests}


def test_syntax_error_is_one_line_with_its_lab(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is a syntax error in counter.py reported as file:line and its lab, without importlib/pytest frames?"""
    folder = faulty_folder(course, checkpoint, tmp_path, "reset", "return self +", probe_source=None)
    line = fault_line(folder)
    result = run_tests(folder, timeout=90)
    assert result.finished and not result.tests
    (error,) = result.collect_errors
    assert error.location == f"fx_course/counter.py:{line}"
    assert error.lab == "1.2"
    assert "SyntaxError" in error.message
    assert "_bootstrap" not in result.output and "_pytest" not in result.output
    shown = run_cli(["check"], cwd=folder / "tests")
    assert shown.returncode == 1
    assert f"cannot import your code: fx_course/counter.py:{line} (in Lab 1.2): SyntaxError" in shown.stdout


def test_endless_loop_is_stopped_per_test_naming_the_lab(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is an endless loop stopped by the per-test timeout, naming the lab, its lab's other tests not run into
    it?"""
    folder = faulty_folder(course, checkpoint, tmp_path, "add", "while True: pass")
    started = time.monotonic()
    result = probe(folder, "--timeout", "1")
    assert time.monotonic() - started < 60
    assert result.finished and not result.timed_out
    records = by_name(result)
    where = f"fx_course/counter.py:{fault_line(folder)}"
    assert records["test_plain_call"].outcome == "failed"
    assert "Timeout" in str(records["test_plain_call"].message)
    assert "endless loop in Lab 1.1" in str(records["test_plain_call"].message)
    assert records["test_plain_call"].location == where
    # The hypothesis test of the same lab would run into the same loop: it is skipped, naming the line.
    assert records["test_property_call"].outcome == "skipped"
    assert where in str(records["test_property_call"].skip_reason)
    assert records["test_reset_call"].outcome == "passed"
    assert records["test_the_run_goes_on"].outcome == "passed"
    assert result.next_step is not None and result.next_step.lab == "1.1"


WAITING_PROBE = """
import asyncio

import pytest

from fx_course import Counter


@pytest.mark.lab1_1
def test_waits_on_the_learner():
    asyncio.run(Counter().add())
"""


#: Keeps a second thread alive, which could still hand the loop a callback: the wait is not provably
#: stuck, so only the time limit ends it.
OTHER_THREAD = "import threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start()"


def waited_message(course: Course, checkpoint: Checkpoint, root: Path, fault: str, limit: str) -> str:
    """The failure message of WAITING_PROBE's test when Counter.add starts with `fault`, under `limit` s."""
    folder = faulty_folder(course, checkpoint, root, "add", fault, WAITING_PROBE)
    result = probe(folder, "--timeout", limit)
    assert result.finished and not result.timed_out
    waited = by_name(result)["test_waits_on_the_learner"]
    assert waited.outcome == "failed"
    return str(waited.message)


def test_a_wait_that_never_ends_is_told_from_an_endless_loop(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When the time limit passes while no learner code runs (a wait that never ends, with another thread
    alive), does the message say so, naming the lab but no line, instead of a loop "stopped at" nowhere?"""
    fault = f"{OTHER_THREAD}; import asyncio; return asyncio.Event().wait()"
    message = waited_message(course, checkpoint, tmp_path, fault, "1")
    assert message.startswith("Timeout (>1s): the test did not finish while none of your code")
    assert "Lab 1.1 probably waits for something that never comes" in message
    assert "stopped at" not in message


def test_a_loop_that_nothing_can_wake_fails_long_before_the_time_limit(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When the learner's code awaits what no one will ever deliver (no timer, no file, no other thread),
    does the test fail as stuck, naming the lab, instead of sitting out a time limit of a minute?"""
    message = waited_message(
        course, checkpoint, tmp_path, "import asyncio; return asyncio.Event().wait()", "60"
    )
    assert message.startswith("Stuck: the test waits, and no timer, file or other thread is left")
    assert "Lab 1.1 probably waits for something that never comes" in message
    assert "Timeout" not in message


WAKING_PROBE = """
import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

#: Longer than the plugin's look at a stuck loop (half a second): each wait below ends only after it.
LATER = 1.2


async def _woken_by_a_thread():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    threading.Timer(LATER, lambda: loop.call_soon_threadsafe(done.set_result, "thread")).start()
    return await done


async def _woken_by_a_child_writing():
    reader, writer = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-c", f"import os, time; time.sleep({LATER}); os.write({writer.fileno()}, b'x')"],
        pass_fds=[writer.fileno()],
    )
    writer.close()
    try:
        incoming, _ = await asyncio.open_connection(sock=reader)
        return (await incoming.read(1)).decode()
    finally:
        child.wait()


async def _woken_by_a_signal():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, done.set_result, "signal")
    kill = f"import os, signal, time; time.sleep({LATER}); os.kill({os.getpid()}, signal.SIGUSR1)"
    child = subprocess.Popen([sys.executable, "-c", kill])
    try:
        return await done
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        child.wait()


async def _woken_by_a_subprocess():
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", f"import time; time.sleep({LATER})")
    return await child.wait()


@pytest.mark.lab1_1
@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (_woken_by_a_thread, "thread"),
        (_woken_by_a_child_writing, "x"),
        (_woken_by_a_signal, "signal"),
        (_woken_by_a_subprocess, 0),
    ],
)
def test_woken(wait, expected):
    assert asyncio.run(wait()) == expected
"""


def test_waits_that_something_will_end_are_never_taken_for_stuck(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """A loop with nothing ready can still be woken: by another thread, a file a child writes to, a signal
    it handles, a subprocess it waits for. Does each such wait, longer than the look at a stuck loop,
    pass?"""
    folder = probe_folder(course, checkpoint, tmp_path, WAKING_PROBE)
    result = probe(folder, "--timeout", "30")
    assert result.finished and not result.timed_out
    assert {name: record.outcome for name, record in by_name(result).items()} == {
        "test_woken[_woken_by_a_thread-thread]": "passed",
        "test_woken[_woken_by_a_child_writing-x]": "passed",
        "test_woken[_woken_by_a_signal-signal]": "passed",
        "test_woken[_woken_by_a_subprocess-0]": "passed",
    }, [record.message for record in result.tests]


@pytest.mark.parametrize(("pause", "runs"), [(0.0, 2), (1.5, 2), (4.5, 1)], ids=["computes", "gate", "waits"])
def test_a_failure_that_waited_is_not_run_again_to_be_traced(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, pause: float, runs: int
) -> None:
    """Is a failed test run a second time (traced) unless it waited out a long limit: a red that sleeps
    4.5 s comes back once, its edit line still naming the lab's function, while a quick red and one
    that waits 1.5 s (a gate) are traced?"""
    calls = tmp_path / "calls.log"
    fault = f"open({str(calls)!r}, 'a').write('x'); __import__('time').sleep({pause}); return -1"
    folder = faulty_folder(course, checkpoint, tmp_path, "add", fault)
    result = probe(folder, "-k", "test_plain_call")
    record = by_name(result)["test_plain_call"]
    assert record.outcome == "failed"
    assert calls.read_text(encoding="utf-8") == "x" * runs
    assert str(record.function).split(", ")[0] == "Counter.add"


QUEUED_PROBE = """
import os, subprocess, sys, time

import pytest
from pi_course_report import _run_queue_seconds


@pytest.mark.lab1_1
def test_time_queued_for_a_cpu_is_counted():
    # This process and a busy child share one CPU: half of each slice is spent waiting in the queue.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        before, cpu = _run_queue_seconds(), time.process_time()
        while time.process_time() - cpu < 0.6:
            pass
        queued = _run_queue_seconds() - before
    finally:
        rival.kill()
        rival.wait()
    assert queued > 0.2, queued
"""


def test_the_time_a_test_spent_queued_for_a_cpu_is_measured(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does the report read how long a test sat in the run queue (so that a loaded machine is not taken
    for a test that waited): with a busy rival on its one CPU, 0.6 s of work queues more than 0.2 s?"""
    folder = probe_folder(course, checkpoint, tmp_path, QUEUED_PROBE)
    record = by_name(probe(folder))["test_time_queued_for_a_cpu_is_counted"]
    assert record.outcome == "passed", record.message


@pytest.mark.parametrize("fault", ["import sys; sys.exit(3)", "raise SystemExit", "import os; os._exit(3)"])
def test_exiting_inside_a_test_still_ends_in_a_report(
    fault: str, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does sys.exit()/os._exit() in learner code fail that test with a plain message, and the report still
    print?"""
    folder = faulty_folder(course, checkpoint, tmp_path, "reset", fault)
    result = probe(folder)
    assert result.finished
    records = by_name(result)
    failed = records["test_reset_call"]
    assert failed.outcome == "failed"
    kind = "os._exit" if "os._exit" in fault else "sys.exit"
    assert f"learner code called {kind}(" in str(failed.message)
    assert failed.location == f"fx_course/counter.py:{fault_line(folder)}"
    assert records["test_the_run_goes_on"].outcome == "passed"
    assert "pi-course labs" in result.output


@pytest.mark.parametrize("fault", ["import sys; sys.exit(4)", "import os; os._exit(4)"])
def test_exiting_while_importing_is_a_located_import_error(
    fault: str, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does exiting at import time become an import error at file:line in its lab, not a dead run?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    counter = folder / "fx_course" / "counter.py"
    text = counter.read_text(encoding="utf-8")
    marker = "    # ## Lab 1.2"  # in the class body: it runs while the module is imported
    counter.write_text(text.replace(marker, f"{marker}\n    {fault}  # FAULT", 1), encoding="utf-8")
    result = run_tests(folder, timeout=90)
    assert result.finished and "INTERNALERROR" not in result.output
    (error,) = result.collect_errors
    assert error.location == f"fx_course/counter.py:{fault_line(folder)}"
    assert error.lab == "1.2"
    assert ("sys.exit(4)" if "sys" in fault else "os._exit(4)") in error.message


FINALIZER_PROBE = '''
"""A failure rendered while garbage waits whose finalizer fails (as an asyncio test can leave behind)."""

import gc

import pytest

#: Enough garbage to outlast the collections between the test's end and its failure's rendering.
LEFT = [20000]


class Cycle:
    """Garbage that, collected, fails in its finalizer (pytest renders that traceback on the spot) and
    leaves the next such garbage behind."""

    def __init__(self):
        self.me = self

    def __del__(self):
        if LEFT[0] > 0:
            LEFT[0] -= 1
            Cycle()
            self.share = [LEFT[0] / 0]


@pytest.mark.lab1_1
def test_fails_while_garbage_waits():
    Cycle()
    gc.set_threshold(1)  # a collection at every allocation, the parse of the failure's source included
    assert [1, 2, 3] == [1, 2, 4]
'''


def test_a_failure_rendered_during_a_collection_is_reported_not_an_internal_error(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """On CPython 3.11, a collection inside pytest's parse of a failing test's source could run a finalizer
    whose traceback parses again, and the run ended in `SystemError: AST constructor recursion depth
    mismatch` (an INTERNALERROR; seen with a 9.2 mistake on the second run of a folder). Does the
    failure come back as an ordinary one instead?"""
    folder = probe_folder(course, checkpoint, tmp_path, FINALIZER_PROBE)
    result = probe(folder)
    assert result.finished and "INTERNALERROR" not in result.output, result.output[-3000:]
    (record,) = result.tests
    assert record.outcome == "failed" and "[1, 2, 3] == [1, 2, 4]" in str(record.message), record
