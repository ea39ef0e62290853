"""Shared fixtures of the kit's own tests, which come in two kinds.

- **Engine and CLI tests** run on the fixture course (`tests/kit/fixture_course`, package `fx_course`,
  checkpoints a1 and a2, a2's parent being a1): the fixtures `course`, `checkpoint` (a1) and `child` (a2).
  Instructor commands get `*FX` (`--course` the fixture). Nothing there depends on the real chapters.
- **Course tests** check the real course's content (`real_course`) and take their checkpoints from
  course.toml: a test that asks for `each_checkpoint` runs once per checkpoint, one that asks for
  `lab_checkpoint` once per checkpoint whose learner rebuilds labs (not an observation checkpoint), so a
  new checkpoint adds data, not test code.

A test that grades in the bubblewrap sandbox carries the `sandbox` marker; where the grader's own probe
says the sandbox cannot run here, it is skipped with the probe's one-line fix as the reason.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pi_course_kit.core import i18n, manifest, runner
from pi_course_kit.core.locate import kit_cache
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import verify
from pi_course_kit.instructor.grade import bwrap
from xdist.scheduler import LoadScopeScheduling

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler.protocol import Scheduling

# The kit's own tests read the English messages (msgids); tests of the Chinese text ask for it explicitly.
os.environ.setdefault("PI_COURSE_LANG", "en")
# Property tests in the practice folders these tests make run the grading profile (a fixed seed), not the
# learner's quick random one: a kit test must not depend on the examples a run happens to draw.
os.environ.setdefault("PI_COURSE_HYPOTHESIS", "grading")
# The notebooks' test runs (in their kernels) use verify's store of whole-tree runs: a progress cell on
# a tree whose content verify (or another notebook) already ran reads that run back instead of running
# the lineage again. The store is keyed by everything a run reads (see core/runner.py).
os.environ.setdefault(runner.RUN_CACHE_ENV, str(kit_cache() / verify.RUNS_FOLDER))


@pytest.fixture(autouse=True)
def _each_test_starts_in_the_kit_tests_language() -> Iterator[None]:
    """Undo a language switch after each test: `--lang` (and i18n.use) set the environment for good.

    Without this, a test that ran the CLI in-process with `--lang zh_CN` left every later test of the
    session speaking Chinese, and the results depended on the order the tests ran in.
    """
    saved = (os.environ.get(i18n.LANG_ENV), i18n.course_language())
    yield
    if saved[0] is None:
        os.environ.pop(i18n.LANG_ENV, None)
    else:
        os.environ[i18n.LANG_ENV] = saved[0]
    i18n.set_course_language(saved[1])


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test reads the Chinese text of the kit (the real course's language)."""
    monkeypatch.setenv(i18n.LANG_ENV, "zh_CN")
    i18n.use(None)


REPO = Path(__file__).resolve().parents[2]
#: The small course the engine and CLI tests run on.
FIXTURE = Path(__file__).with_name("fixture_course")
#: Instructor commands' option naming the fixture course.
FX = ("--course", str(FIXTURE))
SANDBOX_MARKER = "sandbox: grades in the bubblewrap sandbox; skipped, with the fix, where it cannot run here"


def pytest_configure(config: pytest.Config) -> None:
    """Register the `sandbox` marker (the suite runs with --strict-markers)."""
    config.addinivalue_line("markers", SANDBOX_MARKER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that grades the real course in the sandbox is `slow`: the fast tier (`-m "not slow"`)
    grades on the fixture course only.

    Grading a real checkpoint runs its whole lineage in a sandbox for each graded folder (06, 07 and
    14's held-out gradings took 88-182 s of a suite run); the fast tier checks each checkpoint's solution
    and starter once instead (test_course_checkpoints.py).
    """
    slow = pytest.mark.slow
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.get_closest_marker("sandbox") is not None and "real_course" in fixtures:
            item.add_marker(slow)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject's addopts): one worker per usable CPU, two on two cores.

    A worker used to wait about a third of its time (a browser page going quiet, a kernel settling, a
    time limit running out), and a third worker on two cores filled it. The waits are now for what
    each page or kernel needs, so one worker per core keeps both busy without crowding them, which is
    what the tests' own time limits assume. A number in PYTEST_XDIST_AUTO_NUM_WORKERS still wins
    (xdist's own rule).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return runner.cpus()


@functools.cache
def sandbox_problem() -> str | None:
    """Why grading cannot build its sandbox here, in the grader's own words and with its fix; None if it
    can."""
    uids = bwrap.UidPool(1) if os.geteuid() == 0 else None
    try:
        with tempfile.TemporaryDirectory(prefix="pi-course-kit-probe-") as scratch:
            bwrap.probe(Path(scratch), uids.uids[0] if uids else None)
    except bwrap.SandboxUnavailable as error:
        return str(error)
    finally:
        if uids is not None:
            uids.close()
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a `sandbox` test, before its fixtures grade anything, where the sandbox cannot run."""
    if item.get_closest_marker("sandbox") is not None and (problem := sandbox_problem()):
        pytest.skip(f"the grading sandbox cannot run here: {problem}")


# -- the fixture course: engine and CLI tests ---------------------------------------------------------


@pytest.fixture(scope="session")
def course() -> Course:
    """The fixture course (package `fx_course`): what the engine and CLI tests run on."""
    return manifest.load(FIXTURE / "course.toml")


@pytest.fixture(scope="session")
def checkpoint(course: Course) -> Checkpoint:
    """The fixture's first checkpoint, a1: no parent, labs 1.1 and 1.2 and the optional extra1."""
    return course.checkpoint("a1")


@pytest.fixture(scope="session")
def child(course: Course) -> Checkpoint:
    """The fixture's second checkpoint, a2, whose parent is a1."""
    return course.checkpoint("a2")


# -- the real course: course tests, parametrized over course.toml -------------------------------------


@functools.cache
def load_real_course() -> Course | None:
    """The real course.toml, read once at collection; None if it does not load (test_manifest says why)."""
    try:
        return manifest.load(REPO / "course.toml")
    except manifest.ManifestError:
        return None


def real_checkpoints() -> tuple[Checkpoint, ...]:
    """The checkpoints of the real course.toml, in its order."""
    course = load_real_course()
    return course.checkpoints if course is not None else ()


def rebuilds_labs(checkpoint: Checkpoint) -> bool:
    """True where the learner rebuilds the checkpoint's labs from stubs (so its starter must be red)."""
    return bool(checkpoint.labs) and not getattr(checkpoint, "observation", False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give `each_checkpoint` every checkpoint of course.toml and `lab_checkpoint` those with labs to
    rebuild."""
    for name, chosen in (
        ("each_checkpoint", real_checkpoints()),
        ("lab_checkpoint", tuple(cp for cp in real_checkpoints() if rebuilds_labs(cp))),
    ):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, chosen, ids=[cp.id for cp in chosen], scope="session")


def xdist_group(nodeid: str) -> str:
    """The group of tests that one xdist worker runs together: the test's checkpoint's, else its module's.

    A checkpoint's cases share its verify run, its notebook runs and its graded folders (made once per
    process); every other test stays with its module, whose fixtures (a graded class) are built once
    per worker that runs the module. The checkpoint is read from the node id, whose parameters begin
    with it (`[17]`, `[17-practice]`, `[17-solution-green]`): the controller that hands out the tests
    sees node ids only.
    """
    module, _, name = nodeid.partition("::")
    params = name[name.find("[") + 1 : -1] if name.endswith("]") and "[" in name else ""
    for checkpoint in real_checkpoints():
        if params == checkpoint.id or params.startswith(f"{checkpoint.id}-"):
            return f"checkpoint-{checkpoint.id}"
    return module


# xdist ships no type information: its scheduler is `Any` to mypy.
class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scheduler by scope, with `xdist_group` as the scope of each test."""

    def _split_scope(self, nodeid: str) -> str:
        return xdist_group(nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`--dist loadgroup` (pyproject's addopts) hands out whole `xdist_group`s, each to one worker.

    Why not xdist's own loadgroup: it groups by `xdist_group` marks, which it turns into a suffix of each
    node id, and pytest 9.2 no longer lets it change a node id (pytest-xdist issue 1386). Every test was
    then a group of its own, and a checkpoint's verify and notebook runs were repeated on each worker
    that got one of its tests.
    """
    return ByGroup(config, log) if config.getvalue("dist") == "loadgroup" else None


@pytest.fixture(scope="session")
def real_course() -> Course:
    """The real course: course.toml at the root of the kit's checkout."""
    return manifest.load(REPO / "course.toml")
