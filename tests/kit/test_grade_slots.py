"""Grading slots: one sandbox and fork server per job slot, replaced whenever a run leaves traces."""

from __future__ import annotations

import json
import marshal
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.assertion import rewrite
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.staging import TESTS_DIR
from pi_course_kit.instructor.grade import bwrap, sandbox, slots
from pi_course_kit.instructor.grade import cli as grade_cli
from pi_course_kit.instructor.grade import grader as grading
from pi_course_kit.instructor.grade.sandbox import Limits
from test_grade import TEACHING, make_learner, partial_tool

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

LINGER = """
import os as _os
import time as _time

if _os.fork() == 0:
    _os.setsid()
    _time.sleep(300)
    _os._exit(0)
"""


SEES = """
import os as _os
import sys as _sys

raise RuntimeError(
    "SEES " + _os.getcwd() + " " + _os.environ.get("PWD", "") + " " + str(_os.getuid() != 0)
    + " " + ",".join(sorted(_os.environ)) + " " + _os.environ["HOME"] + _os.environ["TMPDIR"]
    + " " + ":".join(_sys.path[:3])
)
"""


@pytest.fixture(scope="module")
def grader(course: Course, checkpoint: Checkpoint) -> Iterator[grading.Grader]:
    """One grader with a single slot, its batch prepared."""
    made = grading.Grader(course, Limits(wall_seconds=60, cpu_seconds=60), jobs=1)
    made.reference(checkpoint)
    yield made
    made.close()


def the_slot(grader: grading.Grader) -> grading.Slot:
    """The grader's only slot."""
    [slot] = grader.all_slots
    assert slot.server is not None
    return slot


def test_honest_learners_are_all_served_by_one_sandbox(
    grader: grading.Grader, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Are a finished, a partial and an untouched learner graded right, one after another, by the slot's first
    sandbox?"""
    slot = the_slot(grader)
    starts = slot.server.starts if slot.server else 0
    complete = make_learner(course, checkpoint, tmp_path / "complete", labs_from_solution=True)
    partial = make_learner(course, checkpoint, tmp_path / "partial")
    (partial / TEACHING).write_text(partial_tool(course, checkpoint), encoding="utf-8")
    untouched = make_learner(course, checkpoint, tmp_path / "untouched")
    records = grader.grade_all([complete, partial, untouched])
    assert [r.status for r in records] == [grading.COMPLETE, grading.PARTIAL, grading.NOT_STARTED]
    assert all(r.flags == [] for r in records)
    assert slot.server is not None and slot.server.starts == max(starts, 1)


def test_a_run_that_leaves_a_process_behind_gets_the_next_learner_a_new_sandbox(
    grader: grading.Grader, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When a learner's run leaves a sleeping daemon, does the next learner run in a fresh sandbox, graded
    complete?"""
    slot = the_slot(grader)
    lingering = make_learner(course, checkpoint, tmp_path / "lingering", labs_from_solution=True)
    tool = lingering / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + LINGER, encoding="utf-8")
    following = make_learner(course, checkpoint, tmp_path / "following", labs_from_solution=True)
    first = grader.grade_one(lingering, slot)
    assert slot.server is not None and slot.server.process is None  # ended with the lingering run
    second = grader.grade_one(following, slot)
    assert (first.status, second.status, second.flags) == (grading.COMPLETE, grading.COMPLETE, [])


def test_a_server_that_died_between_learners_costs_no_run(
    grader: grading.Grader, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """If the slot's sandbox is killed between two learners, is the next one still graded by a single,
    unflagged run?"""
    slot = the_slot(grader)
    assert slot.server is not None
    slot.server.ready()
    assert slot.server.process is not None
    os.killpg(slot.server.process.pid, signal.SIGKILL)
    slot.server.process.wait()
    folder = make_learner(course, checkpoint, tmp_path / "after-a-death", labs_from_solution=True)
    record = grader.grade_one(folder, slot)
    assert (record.status, record.flags) == (grading.COMPLETE, [])


def test_the_batch_compiles_its_disguised_tests_once_for_the_path_every_run_sees(
    grader: grading.Grader, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does every disguised test module come with a rewritten pyc that this pytest accepts, named for the
    sandbox path?"""
    batch = grader.reference(checkpoint).batch
    assert batch is not None
    for relative in checkpoint.tree_tests:
        name = Path(relative).name
        pyc_name = f"__pycache__/{name[:-3]}{rewrite.PYC_TAIL}"
        assert pyc_name in batch.compiled, name
        source, pyc = tmp_path / name, tmp_path / "module.pyc"
        source.write_bytes(batch.sources[name])
        pyc.write_bytes(batch.compiled[pyc_name])
        code = rewrite._read_pyc(source, pyc)
        assert code is not None
        assert rewrite._read_pyc(source.with_name("other.py"), pyc) is None  # bound to its source
        # The disguised names are in the compiled module; the public ones are not.
        assert set(batch.disguises[name].names) <= set(code.co_names)
        assert not set(batch.disguises[name].names.values()) & set(code.co_names)
        # Tracebacks name the file where every run sees it.
        assert marshal.loads(batch.compiled[pyc_name][16:]).co_filename == f"{bwrap.TREE}/{TESTS_DIR}/{name}"


def test_a_fresh_sandbox_per_learner_grades_the_same(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does --fresh-sandbox (one sandbox per learner, no fork server) give the same records as the default
    slots?"""
    complete = make_learner(course, checkpoint, tmp_path / "complete", labs_from_solution=True)
    untouched = make_learner(course, checkpoint, tmp_path / "untouched")
    # What learner code sees of its process, told through the one channel it has: an import error.
    probe = make_learner(course, checkpoint, tmp_path / "probe", labs_from_solution=True)
    tool = probe / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + SEES, encoding="utf-8")
    found = {}
    for mode in ([], ["--fresh-sandbox"]):
        out = tmp_path / f"grades{len(mode)}.jsonl"
        folders = [str(complete), str(untouched), str(probe)]
        code = cli.main(["grade", *folders, "--json", str(out), "--quiet", *mode, *FX])
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        found[bool(mode)] = (
            code,
            [(r["status"], r["passed"], r["flags"], r["sandbox"], r["message"]) for r in records],
        )
    assert found[False] == found[True]
    complete_row, untouched_row, probe_row = found[False][1]
    assert complete_row[0] == grading.COMPLETE and complete_row[1] > 0
    assert untouched_row[:2] == (grading.NOT_STARTED, 0)
    assert "SEES" in probe_row[4] and "/grade/work/tree" in probe_row[4]


def test_fresh_sandbox_and_unsafe_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is `--fresh-sandbox --unsafe` refused in one line before anything is graded?"""
    code = cli.main(["grade", str(tmp_path), "--fresh-sandbox", "--unsafe"])
    err = capsys.readouterr().err
    assert code != 0 and "--fresh-sandbox and --unsafe" in err and len(err.strip().splitlines()) == 1


def test_a_slot_that_cannot_start_stops_grading_before_any_learner_with_the_way_out(
    course: Course, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the fork server cannot start (an old bwrap, say), does the grader refuse at once, naming
    --fresh-sandbox?"""

    def broken(*args: object, **kwargs: object) -> list[str]:
        return ["/bin/sh", "-c", "echo 'bwrap: Unknown option --as-pid-1' >&2; exit 1"]

    monkeypatch.setattr(bwrap, "server_command", broken)
    with pytest.raises(KitError) as raised:
        grading.Grader(course, Limits(wall_seconds=30), jobs=1)
    message = str(raised.value)
    assert "Unknown option --as-pid-1" in message and "--fresh-sandbox" in message
    assert "\n" not in message


ONLY_ALLOWED_MODULES = """
import os
import sys
import sysconfig

import hypothesis.strategies
import pytest
from hypothesis import given


@given(hypothesis.strategies.integers())
def test_every_module_comes_from_the_allow_list(number):
    stdlib = sysconfig.get_paths()["stdlib"]
    outside = sorted(
        module.__file__
        for module in list(sys.modules.values())
        if getattr(module, "__file__", None)
        and not module.__file__.startswith(("/grade/", os.getcwd()))
        and (not module.__file__.startswith(stdlib) or "-packages" in module.__file__)
    )
    assert not outside, " ".join(outside)
"""


#: About 100 KB of `--deselect` options: what the reference proof of a late checkpoint sends (19's list
#: is over 64 KB), to nodes that do not exist.
LONG_DESELECT = [
    arg for i in range(1000) for arg in ("--deselect", f"test_modules.py::test_{i:04d}_{'x' * 60}")
]


@pytest.mark.parametrize("extra", [[], LONG_DESELECT], ids=["plain", "long-deselect"])
def test_a_run_imports_nothing_from_outside_the_bound_packages(tmp_path: Path, extra: list[str]) -> None:
    """In a slot, do pytest, its plugins and hypothesis load only from the bound site-packages (never the
    base Python's), also for a request whose arguments are longer than 64 KB?"""
    kit, work = tmp_path / "kit", tmp_path / "work"
    kit.mkdir()
    (work / "tree").mkdir(parents=True)
    slots.install(kit)
    (work / "tree/test_modules.py").write_text(ONLY_ALLOWED_MODULES, encoding="utf-8")
    server = slots.SlotServer(
        work, kit, bwrap.FIRST_UID if os.geteuid() == 0 else None, sandbox.RUN_ENV, tmp_path / "log"
    )
    try:
        out = tmp_path / "out"
        out.mkdir()
        args = [
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_timeout",
            "--disable-plugin-autoload",
            "--tb=short",
            *extra,
        ]
        assert slots.request_fits(args)
        run = server.run(args, Limits(wall_seconds=60), out)
    finally:
        server.stop()
    assert run.returncode == 0, run.output[-3000:]
    assert "1 passed" in run.output


def test_a_request_too_long_for_one_message_is_not_sent() -> None:
    """Is a 100 KB argument list one request, and one past the sender's buffer not (the grader then runs
    every test rather than lose the run)?"""
    assert len("".join(LONG_DESELECT)) > 1 << 16 and slots.request_fits(LONG_DESELECT)
    assert not slots.request_fits(LONG_DESELECT * 2)


def test_by_default_one_slot_per_usable_cpu_and_never_more_than_submissions(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --jobs, does grading use one slot per CPU it may run on, but no more slots than submissions?"""
    assert grade_cli.cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(grade_cli, "cpus", lambda: 3)  # as on a machine with three CPUs to use
    root = tmp_path / "submissions"
    for name in ("a", "b", "c", "d"):
        make_learner(course, checkpoint, root / name / "pi-practice")
    assert cli.main(["grade", "--submissions-root", str(root), *FX]) == 0
    assert "4 submission(s), 3 at a time" in capsys.readouterr().out
    assert cli.main(["grade", str(root / "a" / "pi-practice"), *FX]) == 0
    assert "1 submission(s), 1 at a time" in capsys.readouterr().out
