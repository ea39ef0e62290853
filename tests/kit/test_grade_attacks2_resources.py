"""Red team, second series: a run's CPU time and memory count as one whole, not per process.

Per-process limits (setrlimit) let five children hold five times the memory limit, and sixty busy
processes use sixty times the CPU time. The slot's fork server sums every process of the run while
it lasts and stops the whole run when the sum exceeds the run's limit; these tests check what that
accounting did (which limit stopped the run), never how long anything took. Under root the module
runs again as a fresh unprivileged user.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import grader as grading
from pi_course_kit.instructor.grade.sandbox import Limits, MiB, Sandboxed
from test_grade import TEACHING, make_learner
from test_grade_attacks2_sandbox import own_flags, run_as_new_user

ROOT = os.geteuid() == 0
INNER = "PI_COURSE_ATTACKS2_RESOURCES_INNER"
CPU_SECONDS = 8  # per run, for all its processes together; an honest run of the fixture needs ~1 s
pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

# Five children, each far below the per-process limit of 512 MiB, together far above it.
FIVE_CHILDREN = """
import os as _os
import time as _time

_children = []
for _ in range(5):
    _pid = _os.fork()
    if _pid == 0:
        _held = []
        try:
            for _ in range(20):
                _held.append(b"x" * (10 << 20))  # written, so resident: 200 MiB per child
        except MemoryError:
            pass
        _time.sleep(60)
        _os._exit(0)
    _children.append(_pid)
for _pid in _children:
    _os.waitpid(_pid, 0)
"""

# Sixty busy processes, each far below its own CPU limit, together far above the run's.
SIXTY_BUSY = """
import os as _os

_children = []
for _ in range(60):
    try:
        _pid = _os.fork()
    except OSError:  # the process limit: as many as it allows
        break
    if _pid == 0:
        while True:
            pass
    _children.append(_pid)
for _pid in _children:
    _os.waitpid(_pid, 0)
"""

ATTACKS = {"five-children": FIVE_CHILDREN, "sixty-busy": SIXTY_BUSY}


@pytest.fixture(scope="module")
def accounted(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Each attacker and an honest learner after it, in one slot; records and every run's outcome."""
    root = tmp_path_factory.mktemp("accounting")
    folders = []
    for name, attack in ATTACKS.items():
        attacker = make_learner(course, checkpoint, root / name, labs_from_solution=True)
        tool = attacker / TEACHING
        tool.write_text(tool.read_text(encoding="utf-8") + attack, encoding="utf-8")
        folders += [
            attacker,
            make_learner(course, checkpoint, root / f"after-{name}", labs_from_solution=True),
        ]
    limits = Limits(wall_seconds=60, cpu_seconds=CPU_SECONDS, memory_bytes=512 * MiB)
    grader = grading.Grader(course, limits, jobs=1)
    runs: list[Sandboxed] = []
    real_run = grader._run

    def run(
        tree: Path, out: Path, slot: grading.Slot, order_seed: str, skipped: Sequence[str] = ()
    ) -> Sandboxed:
        runs.append(real_run(tree, out, slot, order_seed, skipped))
        return runs[-1]

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(grader, "_run", run)
        try:
            grader.reference(checkpoint)
            found: dict[str, Any] = {}
            for folder in folders:
                first = len(runs)
                found[folder.name] = {"record": grader.grade_one(folder), "runs": runs[first:]}
            yield found
        finally:
            grader.close()


def test_five_children_are_held_to_the_memory_limit_of_the_whole_run(accounted: dict[str, Any]) -> None:
    """Five children of 200 MiB each under --memory 512: is every run of it stopped for the whole run's
    memory, and graded no better than a crash?"""
    graded = accounted["five-children"]
    assert [run.stopped for run in graded["runs"]] == ["memory"] * len(graded["runs"]) != []
    assert graded["record"].status == grading.CRASHED
    assert graded["record"].passed == 0


def test_sixty_busy_processes_are_stopped_at_the_run_s_cpu_time(accounted: dict[str, Any]) -> None:
    """Sixty busy processes, each far below its own CPU limit: is the run stopped for the CPU time of all of
    them together, as a timeout?"""
    graded = accounted["sixty-busy"]
    assert [run.stopped for run in graded["runs"]] == ["cpu"]
    assert graded["record"].status == grading.TIMEOUT


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_learner_after_a_stopped_run_is_graded_in_full(accounted: dict[str, Any], attack: str) -> None:
    """After a run stopped for its memory or CPU, is the next learner complete, with no limit touched?"""
    graded = accounted[f"after-{attack}"]
    assert (graded["record"].status, own_flags(graded["record"])) == (grading.COMPLETE, [])
    assert [run.stopped for run in graded["runs"]] == [""]


@pytest.mark.skipif(not ROOT or bool(os.environ.get(INNER)), reason="creates a user: needs root")
def test_the_accounting_holds_for_an_unprivileged_instructor(tmp_path: Path) -> None:
    """Run as a fresh unprivileged user, does this module pass there too?"""
    done = run_as_new_user(Path(__file__).resolve(), INNER, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout
    # Only the test that starts the user is skipped there: none of the attacks.
    assert re.search(r"\b1 skipped", done.stdout), done.stdout[-2000:]
