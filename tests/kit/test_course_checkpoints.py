"""The real course, checkpoint by checkpoint: every promise `pi-course verify` makes, and the manifest's data.

Every test here takes its checkpoints from course.toml (see conftest.py), so a new checkpoint adds
cases, not code. The notebooks have their own parametrized tests (test_notebook_checkpoints.py).
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import conftest
import pytest
from conftest import load_real_course
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import promises, verify
from pi_course_kit.instructor.grade.mutation_map import default_cache
from pi_course_kit.learner import practice

#: Everything verify checks except the notebooks, which test_notebook_checkpoints.py runs.
PROMISES = tuple(check for check in verify.CHECKS if check != "notebooks")


def promise_cases() -> list[object]:
    """One case per verify check of every checkpoint, read from course.toml at collection."""
    course = load_real_course()
    if course is None:
        return []
    return [
        pytest.param(cp.id, job.name, id=re.sub(r"[^\w.]+", "-", job.name).strip("-"))
        for cp in course.checkpoints
        for job in verify.jobs(course, cp, PROMISES)
    ]


@functools.cache
def verified(checkpoint_id: str) -> dict[str, verify.Outcome]:
    """Verify one checkpoint, once per session, its checks side by side on this worker's share of the CPUs.

    Under xdist every worker verifies its own checkpoints, one check at a time on a machine with no
    more CPUs than workers: more would crowd it, and a starter's stub that should fail at once could
    then pass its time limit.
    """
    course = load_real_course()
    assert course is not None
    share = verify.cpus() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    outcomes = verify.verify(
        course, [course.checkpoint(checkpoint_id)], PROMISES, workers=max(1, share), cache=default_cache()
    )
    return {outcome.name: outcome for outcome in outcomes}


@pytest.mark.slow
@pytest.mark.parametrize(("checkpoint_id", "promise"), promise_cases())
def test_the_checkpoint_keeps_each_promise_verify_checks(checkpoint_id: str, promise: str) -> None:
    """Does this check of `pi-course verify` hold: starter in sync, given and inherited files equal, solution
    green, starter red lab by lab with the parent green, first red on the first lab, this mutation caught
    with an `edit:` line at the mutated function (or excused in course.toml's `edit_unplaced`)?

    A check that passed before on exactly the same inputs (trees, tests, manifest entry, the kit and the
    tools' versions) is taken from verify's cache; any change to one of them runs it again.
    """
    outcome = verified(checkpoint_id)[promise]
    assert outcome.problems == []


def test_the_checkpoints_own_tests_pass_on_the_solution_and_stop_on_the_starters_stubs(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """The fast tier's check of every checkpoint (`-m "not slow"`): do the checkpoint's own labs' tests all
    pass on its solution, and on its starter each fail on a stub of its lab or an earlier one (an
    observation checkpoint's starter is its target: all pass)?

    Each test of the course runs once on a solution and once on a starter, so this grows with the
    course, not with the square of it; the whole lineage on every tree is verify's (the slow tier).
    """
    course, cp = real_course, each_checkpoint
    own = {lab.id for lab in cp.labs}
    args = ("-m", " or ".join(lab.marker for lab in cp.labs))
    runs = default_cache() / verify.RUNS_FOLDER
    solution = promises.run_tree(course, cp, cp.solution, args, runs=runs)
    assert promises.solution_problems(course, cp, solution) == []
    starter = promises.run_tree(course, cp, cp.starter, args, runs=runs)
    if cp.observation:
        assert promises.solution_problems(course, cp, starter) == []
    else:
        assert promises.starter_problems(course, cp, starter) == []
        assert any(test.outcome == "failed" for test in starter.tests)
    # Only the checkpoint's own labs ran, each of them.
    assert {test.lab for test in solution.tests} == own
    assert {test.lab for test in starter.tests} <= own


# -- the manifest's data, checkpoint by checkpoint ----------------------------------------------------


def test_every_path_the_manifest_names_exists(real_course: Course, each_checkpoint: Checkpoint) -> None:
    """Does every folder and file the checkpoint's manifest entry names exist in the repository?"""
    cp = each_checkpoint
    for folder in (cp.starter, cp.solution):
        assert (real_course.root / folder / real_course.package).is_dir(), folder
    for relative in (*cp.focused_tests, *cp.test_support, cp.notebook):
        assert (real_course.root / relative).is_file(), relative
    for relative in (*cp.teaching_files, *cp.given_files, *cp.solution_only):
        assert (real_course.root / cp.solution / relative).is_file(), relative


def test_every_lab_has_two_chinese_hints_that_hand_out_no_code(each_checkpoint: Checkpoint) -> None:
    """Does each lab offer at least two hints, in Chinese, none of them handing out a `def` or a `return`?"""
    for lab in each_checkpoint.labs:
        assert len(lab.hints) >= 2, lab.id
        for hint in lab.hints:
            assert any("\u4e00" <= char <= "\u9fff" for char in hint), hint
            assert "def " not in hint and "return " not in hint, hint


def test_the_focused_tests_use_exactly_the_labs_markers(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """Are the lab markers used in the checkpoint's focused tests exactly its labs' markers
    (--strict-markers)?"""
    markers = {lab.marker for lab in each_checkpoint.labs}
    used: set[str] = set()
    for relative in each_checkpoint.focused_tests:
        tree = ast.parse((real_course.root / relative).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
                continue
            if node.value.attr == "mark" and (node.attr in markers or re.match(r"lab\d", node.attr)):
                used.add(node.attr)
    assert used == markers


def test_every_lab_has_focused_tests(real_course: Course, each_checkpoint: Checkpoint) -> None:
    """Does every lab of the checkpoint have focused tests of its own?"""
    counts = practice.lab_test_counts(real_course, each_checkpoint)
    assert {lab_id: count for lab_id, count in counts.items() if count == 0} == {}


def _signatures(path: Path) -> dict[str, str]:
    """Every module- and class-level function and class: its arguments (annotations included) and docstring.

    A helper nested inside a lab's body belongs to that body, which the starter leaves to the learner.
    """
    found = {}
    scopes: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while scopes:
        for node in ast.iter_child_nodes(scopes.pop()):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                args = ast.unparse(node.args) if not isinstance(node, ast.ClassDef) else ""
                returns = (
                    ast.unparse(node.returns) if not isinstance(node, ast.ClassDef) and node.returns else ""
                )
                found[node.name] = f"({args}) -> {returns} {ast.get_docstring(node)}"
                if isinstance(node, ast.ClassDef):
                    scopes.append(node)
    return found


def test_the_starter_keeps_every_public_name_signature_and_docstring(
    real_course: Course, lab_checkpoint: Checkpoint
) -> None:
    """Does each teaching file of the starter declare the solution's functions and classes, same signatures
    and docstrings?"""
    for relative in lab_checkpoint.teaching_files:
        starter = _signatures(real_course.root / lab_checkpoint.starter / relative)
        assert starter == _signatures(real_course.root / lab_checkpoint.solution / relative), relative


def test_every_lab_piece_of_the_starter_raises_its_numbered_error(
    real_course: Course, lab_checkpoint: Checkpoint
) -> None:
    """Does the starter raise `LabNotImplemented("N.x", name)` for every name a required lab implements?"""
    source = "".join(
        (real_course.root / lab_checkpoint.starter / relative).read_text(encoding="utf-8")
        for relative in lab_checkpoint.teaching_files
    )
    missing = [
        (lab.id, name)
        for lab in lab_checkpoint.required_labs
        for name in lab.implements
        if f'raise LabNotImplemented("{lab.id}", "{name}")' not in source
    ]
    assert missing == []


def test_the_starter_leaves_the_solution_only_files_to_the_learner(
    real_course: Course, lab_checkpoint: Checkpoint
) -> None:
    """Are the solution-only files (a solved optional exercise) in the solution and absent from the
    starter?"""
    for relative in lab_checkpoint.solution_only:
        assert (real_course.root / lab_checkpoint.solution / relative).is_file()
        assert not (real_course.root / lab_checkpoint.starter / relative).exists()


def test_every_lab_checkpoint_has_named_mutations(lab_checkpoint: Checkpoint) -> None:
    """Does the checkpoint name plausible wrong implementations for its tests to catch (verify runs each)?"""
    assert lab_checkpoint.mutations


#: A row of a contract page's table mapping a course test (file and position) to the kit tests.
COURSE_TEST_ROW = re.compile(
    r"^\|[^|\n]*?(?P<file>[\w-]+\.test\.ts) #(?P<number>\d+)[^|\n]*\|(?P<kit>[^\n]*)$", re.MULTILINE
)


def test_the_contract_page_maps_each_course_test_to_kit_tests_that_exist(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """Is there a Chinese contract page whose table maps the course's tests (`NN-x.test.ts #k`) to kit tests
    that exist in the checkpoint's focused tests?"""
    assert each_checkpoint.contract, f"checkpoint {each_checkpoint.id} names no contract page in course.toml"
    page = (real_course.root / each_checkpoint.contract).read_text(encoding="utf-8")
    assert any("\u4e00" <= char <= "\u9fff" for char in page)
    matches = list(COURSE_TEST_ROW.finditer(page))
    assert matches, (
        f"{each_checkpoint.contract} has no table row naming a course test such as `NN-x.test.ts #1`"
    )
    numbers: dict[str, list[int]] = {}
    for match in matches:
        numbers.setdefault(match["file"], []).append(int(match["number"]))
    # Each course file's tests are numbered in the order they appear, every one of them with its own row.
    assert {name: sorted(found) for name, found in numbers.items()} == {
        name: list(range(1, max(found) + 1)) for name, found in numbers.items()
    }
    # A row may name a held-out test (graded beside the public ones), which lives in tests/held_out/.
    sources = (*each_checkpoint.tree_tests, *each_checkpoint.held_out)
    tests = "".join((real_course.root / relative).read_text(encoding="utf-8") for relative in sources)
    named = {name for match in matches for name in re.findall(r"\btest_\w+", match["kit"])}
    assert named, "the table names no kit test"
    assert sorted(name for name in named if f"def {name}(" not in tests) == []


# -- what a learner of chapter 06 reads ----------------------------------------------------------------

# Every literal message the 06 focused tests hold the learner to, as the tests spell them.
LITERALS_06 = (
    "必须是 string",
    "必须是正整数",
    "参数必须是 object",
    "未知工具",
    "Tool 已存在：echo",
    "Tool echo failed: ",
    "Tool missing failed: 未知工具",
)


def test_the_06_contract_spells_every_literal_message_of_its_tests(real_course: Course) -> None:
    """A deliberate 06 example (what a learner of a real chapter reads): does contract-06.md spell every
    literal message the 06 focused tests expect, byte for byte, and the form of the first red?"""
    checkpoint = real_course.checkpoint("06")
    assert checkpoint.contract is not None
    contract = (real_course.root / checkpoint.contract).read_text(encoding="utf-8")
    tests = "".join(
        (real_course.root / name).read_text(encoding="utf-8") for name in checkpoint.focused_tests
    )
    for literal in LITERALS_06:
        assert literal in tests and literal in contract, literal
    assert "Lab 6.1 not implemented: object_schema" in contract


# -- which worker runs what ------------------------------------------------------------------------


def test_a_checkpoints_tests_of_every_module_go_to_one_worker() -> None:
    """Does the suite's scheduler hand out each checkpoint's cases, from every module, as one group, and
    every other test with its module, so a checkpoint's verify and notebook runs happen once?"""
    # The method xdist asks for each test's scope, on a scheduler built without a running xdist.
    split = conftest.ByGroup.__new__(conftest.ByGroup)._split_scope
    cases = [
        "tests/kit/test_course_checkpoints.py::test_the_checkpoint_keeps_each_promise_verify_checks[17-solution-green]",
        "tests/kit/test_browser.py::test_notebook_opens_in_jupyterlab_goes_idle_and_logs_no_error[17-practice]",
        "tests/kit/test_notebook_checkpoints.py::test_solution_run_has_no_error_outputs[17]",
        "tests/kit/test_browser.py::test_class_report_reads_on_desktop_and_phone[17-class-phone]",
    ]
    assert {split(nodeid) for nodeid in cases} == {"checkpoint-17"}
    assert split("tests/kit/test_notebook_checkpoints.py::test_solution_run_has_no_error_outputs[01]") == (
        "checkpoint-01"
    )
    # Not a checkpoint of the course, or no parameters: the module is the group.
    assert split("tests/kit/test_verify.py::test_a_failure_is_never_remembered") == "tests/kit/test_verify.py"
    assert split("tests/kit/test_odd_invocations.py::test_odd[170-x]") == "tests/kit/test_odd_invocations.py"
