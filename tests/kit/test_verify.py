"""`pi-course verify` on a copy of the fixture course: each kind of breakage is named, passes are cached."""

from __future__ import annotations

from pathlib import Path

import pytest
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import verify
from pi_course_kit.instructor.mutate import run_mutation
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
    """Does verify's mutation run of a2 start with a2's own tests (which catch it) and stop there, with a1's unrun?"""
    run = run_mutation(course, child, child.mutation("total-left-only"), stop_first=True)
    assert run.caught
    # The mutated lab's own tests run first (-m its marker, -x): one of a2's catches it, a1's never start.
    files = {test.nodeid.split("::")[0] for test in run.result.report.tests}
    assert files == {"tests/test_a2_pair.py"}
