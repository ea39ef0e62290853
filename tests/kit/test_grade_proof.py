"""The batch's reference proof: a learner's run skips only the tests that would run none of their changes.

`proof.units` splits a module into its skeleton and its units' bodies; `proof_plugin` notes what each
test of a trusted run enters; the grader runs only the tests the proof cannot vouch for. The fixture
course's a2 inherits a1's counter: a learner who left it alone has a1's tests proven, and any way of
changing what those tests run (a body they enter, a patch at import, a docstring) makes them run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURE
from learner_support import solve
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import RUNS_FOLDER
from pi_course_kit.instructor.grade import proof, proof_plugin
from pi_course_kit.instructor.grade.grader import Grader
from pi_course_kit.instructor.grade.sandbox import Limits
from pi_course_kit.learner import practice

BASE = '''"""A module."""

import functools

LIMIT = 3


def helper(value: int = 1) -> int:
    """Add one."""
    return value + 1


class Box:
    """A box."""

    def put(self, value: int) -> int:
        """Put a value."""

        def inner() -> int:
            return value * 2

        return inner()

    @property
    def size(self) -> int:
        return 1

    @size.setter
    def size(self, value: int) -> None:
        pass


if LIMIT:

    def guarded() -> None:
        return None
'''


def shape(source: str) -> tuple[str, dict[str, str]]:
    """The skeleton and unit bodies of one module."""
    return proof.units(source)


def changed(before: str, after: str) -> tuple[bool, set[str]]:
    """(whether the skeleton changed, the units whose bodies changed)."""
    (skeleton_a, bodies_a), (skeleton_b, bodies_b) = shape(before), shape(after)
    names = bodies_a.keys() | bodies_b.keys()
    return skeleton_a != skeleton_b, {name for name in names if bodies_a.get(name) != bodies_b.get(name)}


def test_units_are_functions_and_methods_by_qualified_name() -> None:
    """Are the units the module-level functions and the methods, by qualified name, a function defined
    under an `if` by its plain name, and a property's getter and setter one unit?"""
    _skeleton, bodies = shape(BASE)
    assert set(bodies) == {"helper", "Box.put", "Box.size", "guarded"}


@pytest.mark.parametrize(
    ("before", "after", "units"),
    [
        ("return value + 1", "return value + 2", {"helper"}),
        ("return value * 2", "return value * 3", {"Box.put"}),  # a nested function is its outer unit's
        (
            "    def size(self, value: int) -> None:\n        pass",
            "    def size(self, value: int) -> None:\n        return None",
            {"Box.size"},
        ),
        ("return value + 1", "\n\n    return value + 1", set()),  # lines moved only
    ],
)
def test_a_changed_body_changes_its_unit_alone(before: str, after: str, units: set[str]) -> None:
    """When only statements inside a function change, is the skeleton unchanged and only that unit
    (the outer one for a nested function) changed, and moving lines no change at all?"""
    assert BASE.count(before) == 1
    skeleton_changed, found = changed(BASE, BASE.replace(before, after))
    assert not skeleton_changed
    assert found == units


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('"""Add one."""', '"""Add two."""'),  # a docstring is read without entering the function
        ("value: int = 1", "value: int = 2"),  # defaults are evaluated at import
        ("LIMIT = 3", "LIMIT = 4"),
        ("class Box:", "@functools.total_ordering\nclass Box:"),
        ("\n\nclass Box:", "\n\nhelper = lambda value=1: 0\n\n\nclass Box:"),  # a patch at import
        ("        return 1\n", "        return 1\n\n    def extra(self) -> None:\n        pass\n"),
    ],
)
def test_a_change_outside_the_bodies_changes_the_skeleton(before: str, after: str) -> None:
    """Does a change that runs at import or is readable without a call (a docstring, a default, a
    module-level statement, a decorator, a patch, a new method) change the skeleton?"""
    assert BASE.count(before) == 1
    skeleton_changed, _units = changed(BASE, BASE.replace(before, after))
    assert skeleton_changed


TRACED_TESTS = """
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pi_course

ROOT = Path(__file__).parents[1]
SERVER = []


@pytest.fixture(scope="module")
def shared():
    return pi_course.for_the_module()


def test_plain():
    assert pi_course.outer() == 2


def test_thread():
    found = []
    worker = threading.Thread(target=lambda: found.append(pi_course.in_a_thread()))
    worker.start()
    worker.join()
    assert found == [3]


def test_first_user(shared):
    assert shared == 4


def test_second_user(shared):
    assert shared == 4


def test_spawns():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_child_imports():
    subprocess.run([sys.executable, "-c", "import pi_course"], check=True, cwd=ROOT)


def test_reads_the_sources():
    assert "def outer" in (Path(pi_course.__file__)).read_text(encoding="utf-8")


def test_starts_a_server():
    serve = "import sys, pi_course; print(pi_course.outer(), flush=True); sys.stdin.read()"
    command = [sys.executable, "-c", serve]
    SERVER.append(subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    assert SERVER[0].stdout.readline() == b"2\\n"


def test_asks_the_server():
    server = SERVER.pop()
    server.stdin.close()
    assert server.wait() == 0


def test_forks():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_preexec():
    subprocess.run(["true"], preexec_fn=pi_course.in_a_thread, check=True)
"""

TRACED_PACKAGE = """
def inner():
    return 2


def outer():
    return inner()


def in_a_thread():
    return 3


def for_the_module():
    return 4
"""


def test_the_plugin_notes_what_each_test_enters_and_what_its_processes_read(tmp_path: Path) -> None:
    """Does the trusted run's plugin note, per test, the package functions it entered (those a worker
    thread ran too, and a module fixture's for each test using it) and the package files that it or a
    process it started opened (and, for a test that talks to a process an earlier test left running,
    what that process read), and mark as opaque a test that forks this interpreter or runs a function
    in a child before its program?"""
    (tmp_path / "pi_course").mkdir()
    (tmp_path / "pi_course" / "__init__.py").write_text(TRACED_PACKAGE, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_traced.py").write_text(TRACED_TESTS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    lines = tmp_path / "proof.jsonl"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env[proof_plugin.PROOF_ENV] = str(lines)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", proof_plugin.__name__, "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    traces = {
        node.split("::")[1]: trace
        for node, trace in proof.read_traces(lines.read_text().splitlines()).items()
    }
    unit = "pi_course/__init__.py::"
    assert traces["test_plain"].units == {f"{unit}outer", f"{unit}inner"}
    assert traces["test_thread"].units == {f"{unit}in_a_thread"}
    assert traces["test_first_user"].units == traces["test_second_user"].units == {f"{unit}for_the_module"}
    assert [name for name, trace in traces.items() if trace.opaque] == ["test_forks", "test_preexec"]
    read = {name for name, trace in traces.items() if trace.files}
    assert read == {
        "test_child_imports",
        "test_reads_the_sources",
        "test_starts_a_server",
        "test_asks_the_server",
    }
    assert all(traces[name].files == {"pi_course/__init__.py"} for name in read)


def package_of(root: Path, files: dict[str, str]) -> Path:
    """A package folder `pkg` under `root` with the given modules."""
    package = root / "pkg"
    package.mkdir(parents=True)
    for name, text in files.items():
        (package / name).write_text(text, encoding="utf-8")
    return package


WORKER = "def work():\n    return 1\n"
CALLER = "def call():\n    return 2\n"


@pytest.mark.parametrize(
    ("learner_worker", "learner_caller", "proven"),
    [
        (WORKER, CALLER, {"reads-worker", "enters-caller"}),  # the solution's package
        (WORKER, CALLER.replace("2", "3"), {"reads-worker"}),  # a body the other test entered
        (WORKER.replace("1", "0"), CALLER, {"enters-caller"}),  # a body only a child process ran
    ],
)
def test_a_test_whose_process_read_a_changed_file_is_never_proven(
    tmp_path: Path, learner_worker: str, learner_caller: str, proven: set[str]
) -> None:
    """A child process runs code the tracer never sees: is a test whose processes read a file proven
    only while the learner's file is byte for byte the solution's, even when no unit it entered in
    this process changed?"""
    ours = proof.PackageShape.read(package_of(tmp_path / "ours", {"worker.py": WORKER, "caller.py": CALLER}))
    assert ours is not None
    traces = {
        "reads-worker": proof.Trace("reads-worker", frozenset(), frozenset({"pkg/worker.py"}), False),
        "enters-caller": proof.Trace("enters-caller", frozenset({"pkg/caller.py::call"}), frozenset(), False),
    }
    learner = package_of(tmp_path / "theirs", {"worker.py": learner_worker, "caller.py": learner_caller})
    assert proof.Proof(ours, traces).proven(learner, traces) == proven


# -- grading the fixture course's a2, whose a1 counter is inherited -----------------------------------


#: A 1.1 test that runs the counter in another interpreter, loading counter.py alone: the trusted run's
#: tracer never sees `Counter.add` entered, only the file opened.
CHILD_TEST = '''

@pytest.mark.lab1_1
def test_a_child_interpreter_counts_one() -> None:
    """Run by another interpreter, does add count one?"""
    import subprocess
    import sys

    import fx_course

    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('c', sys.argv[1]); "
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
        "print(module.Counter().add())"
    )
    path = fx_course.counter.__file__
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Grade a2 folders once, in a copy of the fixture course with a 1.1 test that runs the counter in a
    child interpreter: complete, with a wrong inherited body, with a patch at import, and with their
    own (different) a2 code."""
    root = tmp_path_factory.mktemp("proof")
    shutil.copytree(FIXTURE, root / "course", ignore=shutil.ignore_patterns("__pycache__"))
    tests = root / "course" / "tests" / "focused" / "test_a1_counter.py"
    tests.write_text(tests.read_text(encoding="utf-8") + CHILD_TEST, encoding="utf-8")
    course = manifest.load(root / "course" / "course.toml")
    child = course.checkpoint("a2")
    folders = {}
    for name in ("complete", "wrong-body", "patched", "own-code", "docstring"):
        folders[name] = practice.create(course, child, root / name)
        solve(course, child, folders[name])
    counter = folders["wrong-body"] / "fx_course" / "counter.py"
    counter.write_text(counter.read_text(encoding="utf-8").replace("self.count += 1", "self.count += 2"))
    pair = folders["patched"] / "fx_course" / "pair.py"
    pair.write_text(pair.read_text(encoding="utf-8") + "\n\nCounter.add = lambda self: 0  # type: ignore\n")
    own = folders["own-code"] / "fx_course" / "pair.py"
    own.write_text(
        own.read_text(encoding="utf-8").replace(
            "self.left = Counter()", "self.left = Counter()  # mine\n        self.left.count = 0"
        )
    )
    told = folders["docstring"] / "fx_course" / "counter.py"
    told.write_text(told.read_text(encoding="utf-8").replace('"""Go back to zero."""', '"""Back to zero."""'))
    out = root / "grades.jsonl"
    # Five folders: fewer than the default's batch size, so --proof asks for the proof.
    options = ["--json", str(out), "--jobs", "2", "--proof", "--course", str(root / "course")]
    code = cli.main(["grade", *map(str, folders.values()), *options])
    records = {
        Path(r["folder"]).name: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())
    }
    return {"code": code, "records": records}


def proven_labs(record: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Lab id -> (tests proven, tests) of one record."""
    found: dict[str, tuple[int, int]] = {}
    for test in record["tests"]:
        proven, total = found.get(test["lab"], (0, 0))
        found[test["lab"]] = (proven + int(test["proven"]), total + 1)
    return found


@pytest.mark.sandbox
def test_a_complete_learner_runs_none_of_the_tests_the_proof_vouches_for(graded: dict[str, Any]) -> None:
    """Is a folder identical to the solution complete, with every public test proven (passed, not run)?"""
    record = graded["records"]["complete"]
    assert record["status"] == "complete"
    assert all(test["proven"] and test["outcome"] == "passed" for test in record["tests"])


@pytest.mark.sandbox
def test_own_code_runs_its_own_labs_and_the_untouched_parent_is_proven(graded: dict[str, Any]) -> None:
    """With their own a2 code, are the a1 tests proven and the a2 tests that enter it run (and passed)?"""
    record = graded["records"]["own-code"]
    assert record["status"] == "complete"
    labs = proven_labs(record)
    assert labs["1.1"][0] == labs["1.1"][1] > 0 and labs["1.2"][0] == labs["1.2"][1] > 0
    assert labs["2.1"][0] == 0  # Pair.__init__ changed: its tests ran
    assert not any(test["proven"] for test in record["tests"] if test["outcome"] != "passed")


@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["wrong-body", "patched"])
def test_a_broken_parent_is_never_hidden_behind_the_proof(graded: dict[str, Any], name: str) -> None:
    """A parent function with a wrong body, or patched at import by the learner's own file: do the parent's
    tests run and fail (none proven), so the record flags the parent as not green?"""
    record = graded["records"][name]
    adds = [test for test in record["tests"] if test["lab"] == "1.1"]
    assert adds and not any(test["proven"] for test in adds)
    assert any(test["outcome"] == "failed" for test in adds)
    assert any(flag.startswith("parent labs not green: 1.1") for flag in record["flags"])


CHILD_NODE = "tests/test_a1_counter.py::test_a_child_interpreter_counts_one"


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("name", "proven", "outcome"), [("own-code", True, "passed"), ("wrong-body", False, "failed")]
)
def test_a_parent_file_only_a_child_process_reads_is_proven_only_while_untouched(
    graded: dict[str, Any], name: str, proven: bool, outcome: str
) -> None:
    """A child interpreter runs the inherited counter where the tracer cannot see: is its test proven
    while the learner left counter.py as it was, and run (and failed) once its body is wrong?"""
    [test] = [test for test in graded["records"][name]["tests"] if test["nodeid"] == CHILD_NODE]
    assert (test["proven"], test["outcome"]) == (proven, outcome)


@pytest.mark.sandbox
def test_a_changed_docstring_proves_nothing(graded: dict[str, Any]) -> None:
    """A docstring can be read without a call: does changing one make every test run (none proven)?"""
    record = graded["records"]["docstring"]
    assert record["status"] == "complete"
    assert not any(test["proven"] for test in record["tests"])


@pytest.mark.sandbox
def test_without_a_store_a_small_batch_is_not_traced_unless_asked(
    course: Course, child: Checkpoint, tmp_path: Path
) -> None:
    """Tracing the reference costs about what eight learners save: with nowhere to keep the traced run, does
    a batch of one run every test (none proven)?"""
    folder = practice.create(course, child, tmp_path / "alone")
    solve(course, child, folder)
    grader = Grader(course, Limits(wall_seconds=120), 1, child.id)
    try:
        [record] = grader.grade_all([folder])
    finally:
        grader.close()
    assert record.status == "complete"
    assert record.tests and not any(test.proven for test in record.tests)


def kept_references(cache: Path) -> list[Path]:
    """The kept runs in the kit's cache under `cache` that carry a proof trace."""
    found = []
    for path in sorted((cache / "pi-course" / RUNS_FOLDER).glob("run-*.json")):
        if json.loads(path.read_text(encoding="utf-8")).get("outputs", {}).get(proof_plugin.PROOF_ENV):
            found.append(path)
    return found


@pytest.mark.sandbox
def test_a_batch_of_one_gets_the_proof_from_the_reference_kept_by_content(
    course: Course,
    child: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Graded alone, does a complete folder get the proof, its traced reference kept in the kit's cache;
    does the next batch read that reference back instead of running it (a trace edited in the store is
    what it uses), and does a changed test file make it run and keep a new one?"""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    root = tmp_path / "course"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    copied = manifest.load(root / "course.toml")
    folders = []
    for name in ("first", "second", "third"):
        folders.append(practice.create(copied, copied.checkpoint(child.id), tmp_path / name))
        solve(copied, copied.checkpoint(child.id), folders[-1])

    def grade(folder: Path, note: str) -> dict[str, Any]:
        out = tmp_path / f"{folder.name}.jsonl"
        capsys.readouterr()
        assert cli.main(["grade", str(folder), "--json", str(out), "--jobs", "1", "--course", str(root)]) == 0
        # The header says where the proof came from.
        assert f"reference proof: the tests the solution's traced run proves are skipped; {note}" in (
            capsys.readouterr().out
        )
        records: list[dict[str, Any]] = [
            json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()
        ]
        [record] = records
        assert record["status"] == "complete"
        return record

    first = grade(folders[0], "that run is kept for later batches")
    assert first["tests"] and all(test["proven"] for test in first["tests"])
    [kept] = kept_references(cache)
    # Drop one test's trace from the kept reference: a batch that reads it back must run that test.
    stored = json.loads(kept.read_text(encoding="utf-8"))
    lines = stored["outputs"][proof_plugin.PROOF_ENV].splitlines()
    dropped = json.loads(lines[0])["nodeid"]
    stored["outputs"][proof_plugin.PROOF_ENV] = "\n".join(lines[1:]) + "\n"
    kept.write_text(json.dumps(stored), encoding="utf-8")
    second = grade(folders[1], "that run was kept from an earlier batch")
    ran = {test["nodeid"] for test in second["tests"] if not test["proven"]}
    assert ran == {dropped}
    assert kept_references(cache) == [kept]
    # Another test file is another content: its reference runs, traced, and is kept beside the first.
    tests = root / "tests" / "focused" / "test_a1_counter.py"
    tests.write_text(tests.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    third = grade(folders[2], "that run is kept for later batches")
    assert all(test["proven"] for test in third["tests"])
    assert len(kept_references(cache)) == 2
