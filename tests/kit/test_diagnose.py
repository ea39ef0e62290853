"""`pi-course diagnose` on the fixture course: named mutations, and which focused tests catch each one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FX
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.mutate import mutation_lab, mutation_problems
from test_build_labs import add_to_checkpoint, copy_repo, snapshot


def test_mutations_are_well_formed_and_placed_in_their_labs(course: Course, checkpoint: Checkpoint) -> None:
    """Are the fixture's mutations well-formed, each found in the `# ## Lab` section it breaks (indented in a
    class too)?"""
    assert mutation_problems(course, checkpoint) == []
    assert [mutation_lab(course, checkpoint, m) for m in checkpoint.mutations] == ["1.1", "1.2"]


def test_without_a_name_it_lists_the_mutations(
    checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does `diagnose a1` list every mutation with its lab and description?"""
    assert cli.main(["diagnose", "a1", *FX]) == 0
    out = capsys.readouterr().out
    for mutation in checkpoint.mutations:
        assert mutation.name in out and mutation.description in out
    assert "[Lab 1.1] add counts two at a time" in out


def test_a_mutation_is_shown_with_its_catching_tests_and_first_assertion(
    course: Course, checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does diagnosing add-two show the change, the catching tests, and the expected first assertion?"""
    solution = snapshot(course.root / checkpoint.solution)
    assert cli.main(["diagnose", "a1", "add-two", *FX]) == 0
    out = capsys.readouterr().out
    assert "+        self.count += 2" in out and "-        self.count += 1" in out
    assert "Caught by" in out and "test_add_counts_one_at_a_time" in out and "[Lab 1.1]" in out
    first = out.split("first failing assertion: ", 1)[1].splitlines()[0]
    assert first == "assert [2, 4] == [1, 2]"
    assert "Expected in the first failing assertion: 'assert [2, 4] == [1, 2]' — found: yes" in out
    assert snapshot(course.root / checkpoint.solution) == solution


def test_an_uncaught_mutation_is_reported_with_exit_1(
    course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a mutation that changes only a docstring come back NOT CAUGHT with exit code 1?"""
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
    assert cli.main(["diagnose", "a1", "docstring-only", "--manifest", str(manifest)]) == 1
    assert "NOT CAUGHT" in capsys.readouterr().out


def test_unknown_mutation_is_refused_listing_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """Is an unknown mutation name refused with exit 2, naming the known ones and how to list them?"""
    assert cli.main(["diagnose", "a1", "no-such-mutation", *FX]) == 2
    err = capsys.readouterr().err
    assert "no-such-mutation" in err and "add-two" in err and "pi-course diagnose a1" in err
