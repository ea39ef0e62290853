"""The per-lab report that travels with the focused tests, on the fixture course: statuses, the next step,
records."""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import RunReport, Status
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.core.staging import stage_tree
from pi_course_kit.core.staging import test_files as staged_test_files
from pi_course_kit.instructor.promises import run_tree

TEACHING = "fx_course/counter.py"


@pytest.fixture(scope="module")
def solution_run(course: Course, checkpoint: Checkpoint) -> RunResult:
    """Every focused test of a1, run once against its solution in its own interpreter."""
    return run_tree(course, checkpoint, checkpoint.solution)


@pytest.fixture(scope="module")
def starter_run(course: Course, checkpoint: Checkpoint) -> RunResult:
    """Every focused test of a1, run once against its starter in its own interpreter."""
    return run_tree(course, checkpoint, checkpoint.starter)


def partial_tree(course: Course, checkpoint: Checkpoint, tmp: Path, unfinished: set[str]) -> Path:
    """A staged solution whose counter.py has the given labs stubbed out again, as a learner mid-way would
    have."""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp / "tree")
    counter = tree / TEACHING
    counter.write_text(
        strip_solution(counter.read_text(encoding="utf-8"), str(counter), unfinished), encoding="utf-8"
    )
    return tree


def statuses(result: RunResult) -> dict[str, str]:
    """Lab id -> status (with the blocking lab) from a run's summary."""
    return {row.id: row.status + (f" by {row.blocked_by}" if row.blocked_by else "") for row in result.labs}


def test_starter_report_names_the_first_lab_and_where_to_edit(starter_run: RunResult) -> None:
    """On the starter, does the report say 1.1 is not started and point at its first stub in counter.py?"""
    assert statuses(starter_run)["1.1"] == "not started"
    step = starter_run.next_step
    assert step is not None and step.lab == "1.1"
    assert (step.location or "").startswith(f"{TEACHING}:") and step.function == "Counter.add"
    assert step.command == 'python -m pytest -m "lab1_1"'
    assert "pi-course labs" in starter_run.output and "next: Lab 1.1" in starter_run.output


def test_starter_report_shows_a_lab_blocked_by_an_earlier_one(starter_run: RunResult) -> None:
    """When a Lab 1.2 test first trips over Lab 1.1's stub, is 1.2 reported as blocked by 1.1, not as
    failing?"""
    assert statuses(starter_run)["1.2"] == "blocked by 1.1"
    assert not any(status == "failing" for status in statuses(starter_run).values())


def test_the_optional_lab_is_skipped_with_what_to_create(starter_run: RunResult) -> None:
    """While doubler.py is missing, are the optional lab's tests skipped with a reason naming the file?"""
    optional = [t for t in starter_run.tests if t.lab == "extra1"]
    assert optional and all(t.outcome == "skipped" for t in optional)
    assert all("fx_course/doubler.py" in t.skip_reason for t in optional)


def test_solution_report_has_every_lab_done(solution_run: RunResult) -> None:
    """On the solution, is every lab done with passed == total and no next step?"""
    assert all(row.status == "done" and row.passed == row.total for row in solution_run.labs)
    assert solution_run.next_step is None
    assert "next: every required lab is done. Move on to the next checkpoint." in solution_run.output


def test_finished_first_lab_moves_the_next_step_to_the_second(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With Lab 1.1 solved and 1.2 still a stub, is 1.1 done and the next step Lab 1.2?"""
    result = run_tests(partial_tree(course, checkpoint, tmp_path, {"1.2"}))
    assert statuses(result)["1.1"] == "done"
    assert statuses(result)["1.2"] == "not started"
    assert result.next_step is not None and result.next_step.lab == "1.2"


def test_an_unfinished_earlier_lab_blocks_a_solved_later_one(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With reset written but add still a stub, is 1.2 blocked by 1.1 and the next step 1.1?"""
    result = run_tests(partial_tree(course, checkpoint, tmp_path, {"1.1"}))
    assert statuses(result)["1.1"] == "not started"
    assert statuses(result)["1.2"] == "blocked by 1.1"
    assert result.next_step is not None and result.next_step.lab == "1.1"


def test_a_wrong_answer_is_reported_as_failing_with_its_assertion(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """When the learner's code runs but is wrong, is the lab 'failing' and the next step the failed
    assertion?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / "tree")
    counter = tree / TEACHING
    source = counter.read_text(encoding="utf-8")
    counter.write_text(source.replace("self.count += 1", "self.count += 2"), encoding="utf-8")
    result = run_tests(tree)
    assert statuses(result)["1.1"] == "failing"
    step = result.next_step
    assert step is not None and (step.lab, step.status) == ("1.1", "failing")
    assert (
        step.what.startswith("test_add_counts_one_at_a_time")
        and step.question == "Does add return 1, then 2?"
    )
    # Under CI=true pytest does not truncate the explanation, so more lines may follow the first.
    assert step.message == "assert [2, 4] == [1, 2]" and step.diff[0] == "At index 0 diff: 2 != 1"


@pytest.mark.parametrize("lab", ["1.1", "1.2"])
def test_json_records_name_each_test_with_its_lab(starter_run: RunResult, lab: str) -> None:
    """Does every JSON record carry the test's lab, outcome, error lab and a one-line message?"""
    records = [t for t in starter_run.tests if t.lab == lab]
    assert records
    for record in records:
        assert record.outcome == "failed" and record.exc_lab in ("1.1", lab)
        assert record.message.startswith("Lab ") and "\n" not in record.message


def test_an_import_error_keeps_its_location_and_lab_in_a_package_not_named_pi_course(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With a NameError at import time in fx_course/counter.py, does the report name that file, line and
    lab?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / "tree")
    counter = tree / TEACHING
    lines = counter.read_text(encoding="utf-8").splitlines()
    at = next(n for n, line in enumerate(lines) if line.strip().startswith("# ## Lab 1.2")) + 1
    lines.insert(at, "    undefined_name  # broken at import")
    counter.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_tests(tree)
    (error,) = result.collect_errors
    assert error.location == f"{TEACHING}:{at + 1}" and error.lab == "1.2"
    assert "NameError" in error.message


@pytest.mark.parametrize("named", [True, False], ids=["named-in-pytest-ini", "found-by-its-lab-py"])
def test_an_import_error_keeps_its_location_and_lab_whatever_the_package_is_called(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, named: bool
) -> None:
    """With the package renamed (and even unnamed in pytest.ini), does an import error keep its file, line and
    lab?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / "tree")
    (tree / "fx_course").rename(tree / "renamed_pkg")
    for test in (tree / "tests").glob("test_*.py"):
        test.write_text(
            test.read_text(encoding="utf-8").replace("fx_course", "renamed_pkg"), encoding="utf-8"
        )
    ini = (tree / "pytest.ini").read_text(encoding="utf-8").replace("fx_course", "renamed_pkg")
    if not named:
        ini = "".join(line for line in ini.splitlines(keepends=True) if "pi_course_package" not in line)
    (tree / "pytest.ini").write_text(ini, encoding="utf-8")
    counter = tree / "renamed_pkg/counter.py"
    lines = counter.read_text(encoding="utf-8").splitlines()
    at = next(n for n, line in enumerate(lines) if line.strip().startswith("# ## Lab 1.2")) + 1
    lines.insert(at, "    undefined_name  # broken at import")
    counter.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (error,) = run_tests(tree).report.collect_errors
    assert (error.location, error.lab) == (f"renamed_pkg/counter.py:{at + 1}", "1.2")
    assert "NameError" in error.message


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
    """Do the files that travel with the tests need only pytest, the stdlib and each other (others
    optional)?"""
    travelling = staged_test_files(course, course.checkpoint("a2"))
    own = {name.removesuffix(".py") for name in travelling if name.startswith("pi_course_")}
    assert {"pi_course_report", "pi_course_records", "pi_course_i18n"} <= own
    # `_pytest` is pytest's own package (the report reruns a failed test with its runtestprotocol).
    allowed = set(sys.stdlib_module_names) | {"pytest", "_pytest"} | own
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


def test_a_record_stream_reads_back_typed_and_garbage_is_dropped(starter_run: RunResult) -> None:
    """Does a real run's stream read back as typed records (RunReport), a forged or broken line left out?"""
    summary = {
        "labs": [asdict(row) for row in starter_run.labs],
        "next": asdict(starter_run.next_step) if starter_run.next_step else None,
        "collect_errors": 0,
        "stopped_early": False,
    }
    lines = [
        *(json.dumps({"event": "test", **asdict(test)}) for test in starter_run.tests),
        "not json",
        json.dumps({"event": "test", "outcome": "passed"}),  # no node id: not a test record
        json.dumps({"event": "test", "nodeid": "t::x", "message": "\x1b[2J", "duration": "long"}),
        json.dumps({"event": "summary", **summary}),
    ]
    report = RunReport.read(lines)
    assert report.finished and not report.collect_errors
    assert [t.nodeid for t in report.tests] == [t.nodeid for t in starter_run.tests] + ["t::x"]
    assert (report.tests[-1].message, report.tests[-1].duration) == ("\\x1b[2J", 0.0)
    assert [(row.id, row.status, row.blocked_by) for row in report.labs] == [
        (row.id, Status(row.status), row.blocked_by) for row in starter_run.labs
    ]
    assert report.next is not None and report.next.lab == "1.1" and report.next.status == Status.NOT_STARTED
    assert not RunReport.read(lines[:-1]).finished


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("zh_CN", ["第 2 项不同：2 != 5", "左边多一项：4"]),  # a Chinese ordinal counts from 1
        ("en", ["At index 1 diff: 2 != 5", "Left contains one more item: 4"]),
    ],
)
def test_pytest_s_own_words_for_a_difference_come_in_the_run_s_language(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, language: str, expected: list[str]
) -> None:
    """Does a list difference read "第 2 项不同：…" (counted from 1) in a Chinese run, as pytest wrote it in
    English?"""
    tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / "tree")
    marker = checkpoint.labs[0].marker
    (tree / "tests" / "test_zz_difference.py").write_text(
        f"import pytest\n\n\n@pytest.mark.{marker}\ndef test_lists() -> None:\n"
        "    assert [1, 2, 3, 4] == [1, 5, 3]\n",
        encoding="utf-8",
    )
    run = run_tests(
        tree, ("-m", marker, "tests/test_zz_difference.py"), env={**os.environ, "PI_COURSE_LANG": language}
    )
    failed = [test for test in run.report.tests if test.outcome == "failed"]
    assert len(failed) == 1
    assert [line for line in expected if line in failed[0].diff] == expected, failed[0].diff


def test_a_failed_test_runs_again_for_the_edit_line_only_outside_grading(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Is a lab's first failure run a second time (traced, for the `edit:` line) in a learner's run, and
    only once in a graded run, which shows no `edit:` line and must not run learner code twice?"""
    calls: dict[bool, int] = {}
    for grading in (False, True):
        tree = stage_tree(course, checkpoint, course.root / checkpoint.solution, tmp_path / f"tree-{grading}")
        counter, log = tree / TEACHING, tmp_path / f"calls-{grading}.txt"
        wrong = f"open({str(log)!r}, 'a').write('reset\\n')\n        self.count = 1\n        # END LAB 1.2"
        source = counter.read_text(encoding="utf-8")
        counter.write_text(source.replace("self.count = 0\n        # END LAB 1.2", wrong), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "PI_COURSE_GRADING"}
        if grading:
            env["PI_COURSE_GRADING"] = "1"
        result = run_tests(tree, ("-m", "lab1_2"), env=env)
        assert statuses(result)["1.2"].startswith("failing"), result.output
        calls[grading] = log.read_text(encoding="utf-8").count("reset")
    # The same tests ran in both; only the learner's run ran its first failure once more.
    assert calls[False] == calls[True] + 1, calls
