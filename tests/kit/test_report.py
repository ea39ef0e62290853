"""The per-lab report that travels with the focused tests: statuses, the next step, and its JSON records."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.core.staging import stage_tree
from pi_course_kit.core.staging import test_files as staged_test_files


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
    assert "next: every required lab is done. Move on to the next checkpoint." in solution_run.output


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


def _imported(node: ast.AST) -> set[str]:
    """Top-level module names one import statement names."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.module:
        return {node.module.split(".")[0]}
    return set()


def _required_imports(tree: ast.Module, present: set[str]) -> set[str]:
    """Modules a file needs at run time when only `present` can be imported.

    An import inside `try: ... except ImportError:` is optional. The handler's fallback imports run
    only when the guarded import fails, so they are needed only if that one may be missing.
    Imports under `if TYPE_CHECKING:` never run.
    """
    required: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Try) and any(
            isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError")
            for handler in node.handlers
        ):
            guarded = {name for child in node.body for name in _imported(child)}
            for child in [*node.body, *node.orelse, *node.finalbody]:
                if not _imported(child):
                    visit(child)
            if not guarded <= present:
                for handler in node.handlers:
                    for child in handler.body:
                        visit(child)
            return
        required.update(_imported(node))
        for sub in ast.iter_child_nodes(node):
            visit(sub)

    visit(tree)
    return required


def test_report_plugin_needs_only_pytest_and_the_standard_library(course: Course) -> None:
    """Do the files that travel with the tests need only pytest, the stdlib and each other (others optional)?"""
    travelling = staged_test_files(course, course.checkpoint("06"))
    own = {name.removesuffix(".py") for name in travelling if name.startswith("pi_course_")}
    assert {"pi_course_report", "pi_course_records", "pi_course_i18n"} <= own
    allowed = set(sys.stdlib_module_names) | {"pytest"} | own
    for name in ("conftest.py", "pi_course_report.py", "pi_course_records.py", "pi_course_i18n.py"):
        required = _required_imports(ast.parse(travelling[name].read_text(encoding="utf-8")), allowed)
        assert required <= allowed, (name, required - allowed)


def test_required_imports_skip_optional_fallback_and_type_only_imports() -> None:
    """Does the import scan skip guarded, type-only and unreachable fallback imports, and keep the rest?"""
    source = (
        "import json\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mypy_only\n"
        "try:\n    import wcwidth\nexcept ImportError:\n    pass\n"
        "try:\n    import json as j\nexcept ImportError:\n    import never_reached\n"
        "try:\n    import maybe\nexcept ImportError:\n    import fallback_mod\n"
        "try:\n    import risky\nexcept ValueError:\n    pass\n"
        "def f():\n    import inner\n"
    )
    required = _required_imports(ast.parse(source), {"json", "typing"})
    assert required == {"json", "typing", "fallback_mod", "risky", "inner"}
