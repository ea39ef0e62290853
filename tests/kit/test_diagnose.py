"""`pi-course diagnose`: named mutations of the solution, and which focused tests catch each one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.mutate import mutation_lab, mutation_problems
from test_build_labs import add_to_checkpoint, copy_repo, snapshot

REQUIRED_LABS = {"6.1", "6.2", "6.3"}


def test_manifest_lists_the_chapter_mutation_and_enough_others(
    course: Course, checkpoint: Checkpoint
) -> None:
    """Does the manifest hold parse-after-execute plus at least eight more, well-formed, over all three labs?"""
    names = [m.name for m in checkpoint.mutations]
    assert "parse-after-execute" in names
    assert len(names) >= 9 and len(set(names)) == len(names)
    assert mutation_problems(course, checkpoint) == []
    assert {mutation_lab(course, checkpoint, m) for m in checkpoint.mutations} >= REQUIRED_LABS


def test_without_a_name_it_lists_the_mutations(
    checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does `diagnose 06` list every mutation with its lab and description?"""
    assert cli.main(["diagnose", "06"]) == 0
    out = capsys.readouterr().out
    for mutation in checkpoint.mutations:
        assert mutation.name in out and mutation.description in out
    assert "[Lab 6.3] the executor runs the tool on the raw arguments" in out


def test_parse_after_execute_is_caught_on_the_execution_count(
    course: Course, checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does diagnosing parse-after-execute show the change, the catching tests, and 2 executions where 1 was expected?"""
    solution = snapshot(course.root / checkpoint.solution)
    assert cli.main(["diagnose", "06", "parse-after-execute"]) == 0
    out = capsys.readouterr().out
    assert "+        output = await tool.execute(call.arguments, context)" in out
    assert "Caught by" in out
    first = out.split("first failing assertion: ", 1)[1].splitlines()[0]
    assert first == "assert 2 == 1"
    assert "[Lab 6.3]" in out
    assert "Expected in the first failing assertion: 'assert 2 == 1' — found: yes" in out
    assert snapshot(course.root / checkpoint.solution) == solution


def test_an_uncaught_mutation_is_reported_with_exit_1(
    course: Course, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does a mutation that changes only a comment come back NOT CAUGHT with exit code 1?"""
    repo = copy_repo(course, tmp_path / "repo")
    manifest = repo / "course.toml"
    manifest.write_text(
        add_to_checkpoint(
            manifest.read_text(encoding="utf-8"),
            "06",
            '\n[[checkpoints.mutations]]\nname = "comment-only"\ndescription = "changes a comment"\n'
            'file = "pi_course/tool.py"\nfind = "# Overwriting would let"\nreplace = "# Replacing would let"\n',
        ),
        encoding="utf-8",
    )
    assert cli.main(["diagnose", "06", "comment-only", "--manifest", str(manifest)]) == 1
    assert "NOT CAUGHT" in capsys.readouterr().out


def test_unknown_mutation_is_refused_listing_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """Is an unknown mutation name refused with exit 2, naming the known ones and how to list them?"""
    assert cli.main(["diagnose", "06", "no-such-mutation"]) == 2
    err = capsys.readouterr().err
    assert "no-such-mutation" in err and "parse-after-execute" in err and "pi-course diagnose 06" in err
