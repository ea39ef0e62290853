"""`pi-course verify` on a copy of the fixture course: each kind of breakage is named, passes are cached."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from learner_support import make_folder
from pi_course_kit import cli
from pi_course_kit.core import manifest, runner
from pi_course_kit.core.locate import ROOT_ENV
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import promises, verify
from pi_course_kit.instructor.mutate import run_mutation, unplaced_problem
from pi_course_kit.notebook import checks
from pi_course_kit.notebook import helpers as nbhelp
from test_build_labs import add_to_checkpoint, copy_repo


def test_a_hand_edited_starter_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a starter edited by hand fail verify, naming the file and `pi-course build-labs`?"""
    repo = copy_repo(course, tmp_path / "repo")
    counter = repo / checkpoint.starter / "fx_course/counter.py"
    counter.write_text(
        counter.read_text(encoding="utf-8").replace("Counts up from zero.", "Counts.", 1), encoding="utf-8"
    )
    assert cli.main(["verify", "--root", str(repo), "--check", "sync", "--check", "parents"]) == 1
    out = capsys.readouterr().out
    assert "FAIL a1 starters in sync with solutions" in out
    assert f"{checkpoint.starter}/fx_course/counter.py is stale" in out and "pi-course build-labs" in out
    assert "ok   a1 given files equal in starter and solution" in out


def test_a_solution_that_breaks_a_test_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a solution that counts wrong fail verify, naming a failing focused test?"""
    repo = copy_repo(course, tmp_path / "repo")
    counter = repo / checkpoint.solution / "fx_course/counter.py"
    source = counter.read_text(encoding="utf-8")
    counter.write_text(source.replace("self.count += 1", "self.count += 3"), encoding="utf-8")
    assert cli.main(["verify", "a1", "--root", str(repo), "--check", "solution", "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "FAIL a1 solution green" in out
    assert "tests/test_a1_counter.py::test_add_counts_one_at_a_time failed" in out


def test_a_mutation_no_test_catches_fails_verify(
    course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a mutation that survives every focused test fail verify, naming the mutation?"""
    repo = copy_repo(course, tmp_path / "repo")
    manifest = repo / "course.toml"
    manifest.write_text(
        add_to_checkpoint(
            manifest.read_text(encoding="utf-8"),
            "a1",
            '\n[[checkpoints.mutations]]\nname = "docstring-only"\ndescription = "changes a docstring"\n'
            'file = "fx_course/counter.py"\nfind = "Go back to zero."\nreplace = "Back to zero."\n',
        ),
        encoding="utf-8",
    )
    assert cli.main(["verify", "a1", "--root", str(repo), "--check", "mutations", "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "ok   a1 mutation add-two caught" in out
    assert "FAIL a1 mutation docstring-only caught" in out
    assert "'docstring-only' (changes a docstring) is caught by no focused test" in out


def test_a_mutation_whose_text_is_gone_fails_verify(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the solution no longer contains a mutation's find text, does verify say so?"""
    repo = copy_repo(course, tmp_path / "repo")
    counter = repo / checkpoint.solution / "fx_course/counter.py"
    counter.write_text(
        counter.read_text(encoding="utf-8").replace("self.count += 1", "self.count = self.count + 1"),
        encoding="utf-8",
    )
    assert cli.main(["verify", "--root", str(repo), "--check", "mutations-static"]) == 1
    out = capsys.readouterr().out
    assert "mutation 'add-two': its find text does not occur in fx_course/counter.py" in out


def test_a_passed_check_is_remembered_until_one_of_its_inputs_changes(
    course: Course, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is a passed check taken from the cache on a second run, run again after a test file changes, and
    never taken from it with --no-cache?"""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = copy_repo(course, tmp_path / "repo")
    args = ["verify", "a2", "--root", str(repo), "--check", "solution", "--check", "mutations"]
    assert cli.main(args) == 0
    first = capsys.readouterr().out
    assert "ok   a2 solution green  (" in first and "cached" not in first
    assert cli.main(args) == 0
    assert "ok   a2 solution green  (cached: passed before on the same inputs)" in capsys.readouterr().out
    # A parent's test is an input of the child's checks: editing it runs them again.
    test = repo / "tests/focused/test_a1_counter.py"
    test.write_text(test.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert cli.main(args) == 0
    assert "cached" not in capsys.readouterr().out
    assert cli.main([*args, "--no-cache"]) == 0
    assert "cached" not in capsys.readouterr().out


def test_a_failure_is_never_remembered(course: Course, checkpoint: Checkpoint, tmp_path: Path) -> None:
    """Does a check that failed run again next time, even on the same inputs?"""
    repo = copy_repo(course, tmp_path / "repo")
    counter = repo / checkpoint.solution / "fx_course/counter.py"
    counter.write_text(counter.read_text(encoding="utf-8").replace("+= 1", "+= 3"), encoding="utf-8")
    copied = manifest.load(repo / "course.toml")
    for _ in range(2):
        (outcome,) = verify.verify(copied, [copied.checkpoint("a1")], ["solution"], cache=tmp_path / "cache")
        assert not outcome.ok and not outcome.cached


def test_checks_run_one_per_usable_cpu_by_default(
    course: Course, checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --jobs, does verify run its checks in a pool of one worker per CPU this process may use?"""
    sizes: list[int] = []

    class Pool:
        def __init__(self, max_workers: int) -> None:
            sizes.append(max_workers)

        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def map(self, run: object, jobs: list[verify.Job]) -> list[verify.Outcome]:
            return [verify.Outcome(job.name) for job in jobs]

    monkeypatch.setattr(verify, "ThreadPoolExecutor", Pool)
    monkeypatch.setattr(verify, "cpus", lambda: 3)
    verify.verify(course, [checkpoint], ["solution"])
    verify.verify(course, [checkpoint], ["solution"], workers=1)
    assert sizes == [3, 1]


def test_a_mutation_run_stops_in_the_checkpoints_own_tests_before_the_parents(
    course: Course, child: Checkpoint
) -> None:
    """Does verify's mutation run of a2 start with a2's own tests (which catch it) and stop there, with a1's
    unrun?"""
    run = run_mutation(course, child, child.mutation("total-left-only"), stop_first=True)
    assert run.caught
    # The mutated lab's own tests run first (-m its marker, -x): one of a2's catches it, a1's never start.
    files = {test.nodeid.split("::")[0] for test in run.result.report.tests}
    assert files == {"tests/test_a2_pair.py"}


def test_a_mutation_excused_from_the_edit_line_that_the_report_places_fails_verify(
    course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When course.toml says the edit line cannot place a mutation (`edit_unplaced`) but its first red
    names the mutated function, does verify ask to remove the excuse, so the list stays true?"""
    repo = copy_repo(course, tmp_path / "repo")
    path = repo / "course.toml"
    text = path.read_text(encoding="utf-8")
    assert text.count('replace = "self.count += 2"\n') == 1
    path.write_text(
        text.replace('replace = "self.count += 2"\n', 'replace = "self.count += 2"\nedit_unplaced = "why"\n'),
        encoding="utf-8",
    )
    assert cli.main(["verify", "a1", "--root", str(repo), "--check", "mutations", "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "FAIL a1 mutation add-two caught" in out
    assert "'add-two': its first red now names Counter.add, where the mistake is" in out
    assert "remove its edit_unplaced from course.toml" in out
    assert "ok   a1 mutation reset-to-one caught" in out


def test_a_caught_mutation_whose_edit_line_names_another_function_is_a_problem(
    course: Course, checkpoint: Checkpoint
) -> None:
    """Is a mutation caught with an edit line elsewhere than its function a verify problem naming both
    places, and the same run with the right edit line none?"""
    run = run_mutation(course, checkpoint, checkpoint.mutation("add-two"), stop_first=True)
    assert run.caught and unplaced_problem(course, checkpoint, run) is None
    step = run.result.report.next
    assert step is not None and step.function is not None and "Counter.add" in step.function
    run.result.report.next = dataclasses.replace(step, function="Counter.reset")
    problem = unplaced_problem(course, checkpoint, run)
    assert problem is not None
    assert "the mistake is in Counter.add, and its edit line names Counter.reset at" in problem
    assert "say why in edit_unplaced" in problem


# -- whole-tree runs kept by content ------------------------------------------------------------------


def test_a_run_is_reused_for_the_same_content_and_run_again_after_any_input_changes(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is verify's solution run read back for a tree of the same content, and run again once a test file,
    a package file or a new file in the package changes what the run would read?"""
    repo = copy_repo(course, tmp_path / "repo")
    copied = manifest.load(repo / "course.toml")
    cp, runs = copied.checkpoint(checkpoint.id), tmp_path / "runs"
    first = promises.run_tree(copied, cp, cp.solution, runs=runs)
    again = promises.run_tree(copied, cp, cp.solution, runs=runs)
    assert not first.reused and again.reused
    assert [(t.nodeid, t.outcome) for t in again.tests] == [(t.nodeid, t.outcome) for t in first.tests]
    assert again.labs == first.labs and again.returncode == first.returncode == 0
    test = repo / "tests/focused/test_a1_counter.py"
    test.write_text(test.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert not promises.run_tree(copied, cp, cp.solution, runs=runs).reused
    assert promises.run_tree(copied, cp, cp.solution, runs=runs).reused
    (repo / cp.solution / "fx_course/extra_module.py").write_text("VALUE = 1\n", encoding="utf-8")
    assert not promises.run_tree(copied, cp, cp.solution, runs=runs).reused
    # Other arguments are another run.
    assert not promises.run_tree(copied, cp, cp.solution, ("-m", cp.first_lab.marker), runs=runs).reused


def test_only_a_run_whose_failures_are_lab_stubs_is_kept(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is a starter run (every failure a LabNotImplemented) kept, and a run with any other failure never,
    so that a failure that may come from a loaded machine runs again where it is next asked for?"""
    repo = copy_repo(course, tmp_path / "repo")
    copied = manifest.load(repo / "course.toml")
    cp, runs = copied.checkpoint(checkpoint.id), tmp_path / "runs"
    starter = promises.run_tree(copied, cp, cp.starter, runs=runs)
    assert any(t.outcome == "failed" for t in starter.tests)
    assert promises.run_tree(copied, cp, cp.starter, runs=runs).reused
    counter = repo / cp.solution / "fx_course/counter.py"
    counter.write_text(counter.read_text(encoding="utf-8").replace("+= 1", "+= 3"), encoding="utf-8")
    for _ in range(2):
        wrong = promises.run_tree(copied, cp, cp.solution, runs=runs)
        assert not wrong.reused and any(t.outcome == "failed" and not t.exc_lab for t in wrong.tests)
    assert len(list(runs.iterdir())) == 1


def test_the_content_key_covers_arguments_and_the_variables_a_run_reads(tmp_path: Path) -> None:
    """Does the key change with a file, a new file, the arguments and a PI_COURSE_ or locale variable, and
    stay the same for the run's own scratch paths and for caches inside the tree?"""
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/__init__.py").write_text("X = 1\n", encoding="utf-8")
    env = {"PI_COURSE_LANG": "zh_CN", "HOME": "/home/a"}
    key = runner.content_key(tree, ("--tb=no",), env)
    assert runner.content_key(tree, ("--tb=no",), {**env, "HOME": "/home/b"}) == key
    assert runner.content_key(tree, ("--tb=no",), {**env, runner.JSON_ENV: "/tmp/x.jsonl"}) == key
    (tree / "pkg/__pycache__").mkdir()
    (tree / "pkg/__pycache__/__init__.cpython.pyc").write_bytes(b"\0")
    assert runner.content_key(tree, ("--tb=no",), env) == key
    assert runner.content_key(tree, ("--tb=no", "-x"), env) != key
    assert runner.content_key(tree, ("--tb=no",), {**env, "PI_COURSE_LANG": "en"}) != key
    assert runner.content_key(tree, ("--tb=no",), {**env, "PI_COURSE_HYPOTHESIS": "learner"}) != key
    assert runner.content_key(tree, ("--tb=no",), {**env, "LC_ALL": "C"}) != key
    # A run asked to write an output file (the grader's proof) is another run; where it writes is not read.
    traced = runner.content_key(tree, ("--tb=no",), env, ("PI_COURSE_PROOF",))
    assert traced != key
    assert (
        runner.content_key(tree, ("--tb=no",), {**env, "PI_COURSE_PROOF": "/tmp/p"}, ("PI_COURSE_PROOF",))
        == traced
    )
    (tree / "pkg/new.py").write_text("", encoding="utf-8")
    assert runner.content_key(tree, ("--tb=no",), env) != key


def test_the_content_key_covers_the_file_of_a_plugin_loaded_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin named with `-p` is code the run reads from outside its tree: does editing its file change
    the key (an editable kit's proof plugin), while `-p no:NAME` reads nothing?"""
    tree, plugins = tmp_path / "tree", tmp_path / "plugins"
    tree.mkdir()
    plugins.mkdir()
    (plugins / "kit_plugin_probe.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(plugins))
    forms = [("-p", "kit_plugin_probe"), ("-pkit_plugin_probe",), ("-p", "no:kit_plugin_probe")]
    before = [runner.content_key(tree, args, {}) for args in forms]
    (plugins / "kit_plugin_probe.py").write_text("X = 2\n", encoding="utf-8")
    after = [runner.content_key(tree, args, {}) for args in forms]
    assert after[0] != before[0] and after[1] != before[1]
    assert after[2] == before[2]


#: A plugin whose hook writes each passed test's id to the file PI_COURSE_TRACE_OUT names, as the
#: grader's proof plugin writes its trace.
OUTPUT_PLUGIN = """
import os


def pytest_runtest_logreport(report):
    out = os.environ.get("PI_COURSE_TRACE_OUT")
    if out and report.when == "call" and report.passed:
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(report.nodeid + "\\n")
"""


def test_a_runs_output_file_comes_back_and_is_kept_with_the_run(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does the file a run's plugin writes come back with its records, and come back again, unrun, from
    the store, while a run that was not asked for it neither writes nor finds it?"""
    repo = copy_repo(course, tmp_path / "repo")
    copied = manifest.load(repo / "course.toml")
    cp, runs, name = copied.checkpoint(checkpoint.id), tmp_path / "runs", "PI_COURSE_TRACE_OUT"
    (repo / cp.solution / "fx_course/trace_out.py").write_text(OUTPUT_PLUGIN, encoding="utf-8")
    args = ("-p", "fx_course.trace_out")
    first = promises.run_tree(copied, cp, cp.solution, args, runs=runs, outputs=(name,))
    written = first.outputs[name].splitlines()
    assert not first.reused and sorted(written) == sorted(t.nodeid for t in first.tests) != []
    again = promises.run_tree(copied, cp, cp.solution, args, runs=runs, outputs=(name,))
    assert again.reused and again.outputs == first.outputs
    plain = promises.run_tree(copied, cp, cp.solution, args, runs=runs)
    assert not plain.reused and plain.outputs == {}


def test_a_notebook_progress_run_reads_back_verifys_run_of_the_same_content(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a fresh practice folder, does the notebook's progress() read back verify's starter run (the same
    package, tests and language) instead of running the tests again?"""
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    monkeypatch.setenv(ROOT_ENV, str(course.root))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(checks, "_last_full", {})
    runs = tmp_path / "runs"
    monkeypatch.setenv(runner.RUN_CACHE_ENV, str(runs))
    verified = promises.run_tree(course, checkpoint, checkpoint.starter, runs=runs)
    assert not verified.reused and len(list(runs.iterdir())) == 1
    practice = make_folder(course, checkpoint, tmp_path / "practice")
    nbhelp.use_tree(checkpoint.id, cwd=practice, quiet=True)
    seen: list[runner.RunResult] = []
    real = runner.run_tests

    def spied(tree: Path, args: Any = (), **kwargs: Any) -> runner.RunResult:
        seen.append(real(tree, args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(runner, "run_tests", spied)
    report = checks.progress()
    assert [result.reused for result in seen] == [True]
    assert [(t.nodeid, t.outcome) for t in report.tests] == [(t.nodeid, t.outcome) for t in verified.tests]
    assert len(list(runs.iterdir())) == 1


def test_a_store_keeps_only_its_newest_runs(tmp_path: Path) -> None:
    """Once a store holds more runs than it keeps, are the oldest removed and the newest left?"""
    for age in range(5):
        path = tmp_path / f"run-{age}.json"
        path.write_text("{}", encoding="utf-8")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    runner._prune(tmp_path, keep=2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run-0.json", "run-1.json"]


def test_a_store_that_cannot_be_written_only_keeps_nothing(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When the store's folder cannot be made (a file stands in its place), does the run still report its
    records, keeping nothing?"""
    blocked = tmp_path / "runs"
    blocked.write_text("not a folder", encoding="utf-8")
    result = promises.run_tree(course, checkpoint, checkpoint.solution, runs=blocked)
    assert result.finished and result.tests and not result.reused
    assert blocked.read_text(encoding="utf-8") == "not a folder"
