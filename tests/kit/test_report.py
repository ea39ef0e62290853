"""The per-lab report that travels with the focused tests: statuses, the next step, and its JSON records."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.core.staging import stage_tree, test_files


def partial_tree(course: Course, checkpoint: Checkpoint, tmp: Path, unfinished: set[str]) -> Path:
    """A staged solution whose tool.py has the given labs stubbed out again, as a learner mid-way would have."""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp / "tree")
    tool = tree / "pi_course" / "tool.py"
    tool.write_text(strip_solution(tool.read_text(encoding="utf-8"), str(tool), unfinished), encoding="utf-8")
    return tree


def statuses(result: RunResult) -> dict[str, str]:
    """Lab id -> status (with the blocking lab) from a run's summary."""
    return {
        row["id"]: row["status"] + (f" by {row['blocked_by']}" if row["blocked_by"] else "")
        for row in result.labs
    }


def test_starter_report_names_lab_6_1_and_where_to_edit(starter_run: RunResult) -> None:
    """On the starter, does the report say 6.1 is not started and point at its first stub in tool.py?"""
    assert statuses(starter_run)["6.1"] == "not started"
    step = starter_run.next_step
    assert step is not None and step["lab"] == "6.1"
    assert step["location"].startswith("pi_course/tool.py:")
    assert step["command"] == 'python -m pytest -m "lab6_1"'
    assert "pi-course labs" in starter_run.output and "next: Lab 6.1" in starter_run.output


def test_starter_report_shows_executor_blocked_by_an_earlier_lab(starter_run: RunResult) -> None:
    """When a Lab 6.3 test first trips over Lab 6.2's stub, is 6.3 reported as blocked by 6.2, not as failing?"""
    assert statuses(starter_run)["6.3"] in ("blocked by 6.1", "blocked by 6.2", "not started")
    assert not any(status == "failing" for status in statuses(starter_run).values())


def test_solution_report_has_every_lab_done(solution_run: RunResult) -> None:
    """On the solution, is every lab done with passed == total and no next step?"""
    assert all(row["status"] == "done" and row["passed"] == row["total"] for row in solution_run.labs)
    assert solution_run.next_step is None
    assert "every lab is done" in solution_run.output


def test_finished_6_1_moves_the_next_step_to_6_2(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With Lab 6.1 solved and 6.2/6.3 still stubs, is 6.1 done and the next step Lab 6.2?"""
    result = run_tests(partial_tree(course, checkpoint, tmp_path, {"6.2", "6.3"}))
    assert statuses(result)["6.1"] == "done"
    assert statuses(result)["6.2"] == "not started"
    assert result.next_step is not None and result.next_step["lab"] == "6.2"


def test_unfinished_registry_blocks_a_solved_executor(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With the executor written but the registry still a stub, is 6.3 blocked by 6.2 and the next step 6.2?"""
    result = run_tests(partial_tree(course, checkpoint, tmp_path, {"6.2"}))
    assert statuses(result)["6.2"] == "not started"
    assert statuses(result)["6.3"] == "blocked by 6.2"
    assert result.next_step is not None and result.next_step["lab"] == "6.2"


def test_a_wrong_answer_is_reported_as_failing_with_its_assertion(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When the learner's code runs but is wrong, is the lab 'failing' and the next step the failed assertion?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / "tree")
    tool = tree / "pi_course" / "tool.py"
    source = tool.read_text(encoding="utf-8")
    wrong = source.replace('raise ValueError(f"Tool 已存在：{tool.name}")', "pass")
    assert wrong != source
    tool.write_text(wrong, encoding="utf-8")
    result = run_tests(tree)
    assert statuses(result)["6.2"] == "failing"
    assert result.next_step is not None and result.next_step["lab"] == "6.2"
    assert result.next_step["status"] == "failing"


@pytest.mark.parametrize("lab", ["6.1", "6.2", "6.3"])
def test_json_records_name_each_test_with_its_lab(starter_run: RunResult, lab: str) -> None:
    """Does every JSON record carry the test's lab, outcome, error lab and a one-line message?"""
    records = [t for t in starter_run.tests if t["lab"] == lab]
    assert records
    for record in records:
        assert record["outcome"] == "failed"
        assert record["message"].startswith("Lab ") and "\n" not in record["message"]


def test_report_plugin_needs_only_pytest_and_the_standard_library(course: Course) -> None:
    """Do the plugin and records that travel with the tests import nothing but pytest, the stdlib and each other?"""
    allowed = set(sys.stdlib_module_names) | {"pytest", "pi_course_report", "pi_course_records"}
    travelling = test_files(course, course.checkpoint("06"))
    for name in ("conftest.py", "pi_course_report.py", "pi_course_records.py"):
        tree = ast.parse(travelling[name].read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert imported <= allowed, (name, imported - allowed)


def test_a_stub_failure_is_one_line_naming_the_stub_and_where_it_is(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """On the starter, is each stub failure one line (the lab error and its file:line) instead of a traceback?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.starter, tmp_path / "tree")
    result = run_tests(tree, ["-m", "lab6_1"])
    assert "Lab 6.1 not implemented: object_schema  (pi_course/tool.py:" in result.output
    assert "raise LabNotImplemented(" not in result.output  # no source excerpt of the stub
    assert result.tests and all(t["exc_lab"] == "6.1" for t in result.tests)
