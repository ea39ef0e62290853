"""The foundation's promises: solution green, starter red lab by lab, parent files shared, trees isolated."""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import RunResult
from pi_course_kit.instructor import promises as checks

MIN_FOCUSED_TESTS = 25


def test_solution_passes_every_focused_test(
    course: Course, checkpoint: Checkpoint, solution_run: RunResult
) -> None:
    """Does every focused test, transfer exercise included, pass on the solution?"""
    assert checks.solution_problems(course, checkpoint, solution_run) == []
    assert solution_run.returncode == 0


def test_there_are_enough_focused_tests_for_every_lab(
    checkpoint: Checkpoint, solution_run: RunResult
) -> None:
    """Are there at least 25 focused tests, and does every lab of the manifest have some?"""
    per_lab = Counter(test["lab"] for test in solution_run.tests)
    assert sum(per_lab.values()) >= MIN_FOCUSED_TESTS
    assert set(per_lab) == {lab.id for lab in checkpoint.labs}


def test_starter_fails_every_test_with_its_own_or_an_earlier_lab(
    course: Course, checkpoint: Checkpoint, starter_run: RunResult
) -> None:
    """Does every focused test fail on the starter with a LabNotImplemented of its lab or an earlier one?"""
    assert checks.starter_problems(course, checkpoint, starter_run) == []
    required = [t for t in starter_run.tests if t["lab"] != "transfer6"]
    assert required and all(t["outcome"] == "failed" for t in required)
    assert all(t["exc_type"] == "LabNotImplemented" for t in required)


def test_starter_skips_the_transfer_exercise_with_a_reason(starter_run: RunResult) -> None:
    """While uppercase.py is missing, are the transfer tests skipped with a reason that says what to create?"""
    transfer = [t for t in starter_run.tests if t["lab"] == "transfer6"]
    assert transfer and all(t["outcome"] == "skipped" for t in transfer)
    assert all("uppercase.py" in t["skip_reason"] for t in transfer)


def test_each_lab_is_first_stopped_by_its_own_error(starter_run: RunResult) -> None:
    """On the starter, does each required lab's first test fail with that very lab's error?"""
    first: dict[str, str | None] = {}
    for test in starter_run.tests:
        first.setdefault(test["lab"], test["exc_lab"])
    assert first["6.1"] == "6.1"
    assert first["6.2"] in ("6.1", "6.2")
    assert first["6.3"] in ("6.1", "6.2", "6.3")


def test_first_red_of_lab_6_1_is_object_schema(course: Course, checkpoint: Checkpoint) -> None:
    """Does `pytest -m lab6_1 -x` on the starter stop first on `Lab 6.1 not implemented: object_schema`?"""
    assert checks.first_red_problems(course, checkpoint) == []


def test_parent_files_are_identical_in_starter_and_solution(course: Course, checkpoint: Checkpoint) -> None:
    """Are messages.py, lab.py and __init__.py the same bytes in starter and solution?"""
    assert checks.given_file_problems(course, checkpoint) == []


def test_starter_is_generated_from_the_solution(course: Course, checkpoint: Checkpoint) -> None:
    """Is labs/ exactly what `pi-course build-labs` writes? If not, that command is the fix."""
    assert checks.stale_starter_problems(course, checkpoint) == []


def test_starter_has_no_transfer_solution(course: Course, checkpoint: Checkpoint) -> None:
    """Does the starter leave the optional uppercase tool to the learner?"""
    for relative in checkpoint.solution_only:
        assert (course.root / checkpoint.solution / relative).is_file()
        assert not (course.root / checkpoint.starter / relative).exists()


def test_starter_declares_every_public_name_of_the_solution(course: Course, checkpoint: Checkpoint) -> None:
    """Does the starter's tool.py declare the same public functions, classes and signatures as the solution?"""

    def signatures(path: Path) -> dict[str, str]:
        found = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                args = ast.unparse(node.args) if not isinstance(node, ast.ClassDef) else ""
                found[node.name] = f"{args} {ast.get_docstring(node)}"
        return found

    for relative in checkpoint.teaching_files:
        assert signatures(course.root / checkpoint.starter / relative) == signatures(
            course.root / checkpoint.solution / relative
        )


def test_every_lab_piece_of_the_starter_raises_its_numbered_error(
    course: Course, checkpoint: Checkpoint
) -> None:
    """Does the starter raise `LabNotImplemented("6.x", name)` for every name the manifest says a lab implements?"""
    source = (course.root / checkpoint.starter / "pi_course/tool.py").read_text(encoding="utf-8")
    for lab in checkpoint.required_labs:
        for name in lab.implements:
            assert f'raise LabNotImplemented("{lab.id}", "{name}")' in source, (lab.id, name)


def test_the_kit_process_never_imports_a_pi_course_tree() -> None:
    """Has this interpreter stayed clear of every pi_course tree (each ran in its own subprocess)?"""
    assert "pi_course" not in sys.modules
