"""A class of every kind of learner for one checkpoint, as grading records, without grading anything.

The records use the checkpoint's real test ids (read from its focused test files with `ast`, each test
owned by the lab its `pytest.mark.<marker>` names), so the report asks the tests' real questions. The
mutation map names the checkpoint's real mutations, so the instructor's version shows real diffs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course, Lab
from pi_course_kit.instructor.grade.gradebook import (
    COMPLETE,
    ERROR,
    NOT_STARTED,
    PARTIAL,
    SKIPPED,
    TIMEOUT,
    LabScore,
    LearnerRecord,
    TestVerdict,
)
from pi_course_kit.instructor.grade.mutation_map import MutationMap

#: A learner id that must never appear in the class version of the report.
SECRET_LEARNER = "learner-with-a-private-name"


def _marks(decorators: list[ast.expr]) -> set[str]:
    """The last attribute of each decorator: `lab6_1` for `@pytest.mark.lab6_1`."""
    found = set()
    for decorator in decorators:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute):
            found.add(target.attr)
    return found


def tests_by_lab(course: Course, checkpoint: Checkpoint) -> dict[str, list[str]]:
    """lab id -> node ids of its focused tests (top-level and class-level test functions)."""
    by_marker = {lab.marker: lab.id for lab in checkpoint.labs}
    found: dict[str, list[str]] = {lab.id: [] for lab in checkpoint.labs}
    for relative in checkpoint.focused_tests:
        path = course.root / relative
        if not path.is_file():
            continue  # a checkpoint still being written: its report has no tests to name yet
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_marks = {
            target.attr
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            for target in ast.walk(node.value)
            if isinstance(target, ast.Attribute)
        }

        def visit(
            body: list[ast.stmt], prefix: str, marks: set[str], file: str = Path(relative).name
        ) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}::", marks | _marks(node.decorator_list))
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                    "test"
                ):
                    labs = [by_marker[m] for m in _marks(node.decorator_list) | marks if m in by_marker]
                    if labs:
                        found[labs[0]].append(f"tests/{file}::{prefix}{node.name}")

        visit(tree.body, "", module_marks)
    return found


def _record(
    name: str, checkpoint: Checkpoint, tests: dict[str, list[str]], passing: dict[str, int], status: str
) -> LearnerRecord:
    """A record whose lab `id` passes its first `passing[id]` tests (a lab missing from `passing`: none)."""
    labs, verdicts = [], []
    for lab in checkpoint.labs:
        nodes = tests[lab.id]
        passed = min(passing.get(lab.id, 0), len(nodes))
        done = passed == len(nodes) and nodes
        state = "done" if done else "failing" if passed else "not started"
        labs.append(LabScore(lab.id, lab.title, lab.optional, passed, len(nodes), state))
        verdicts += [
            TestVerdict(node, lab.id, "passed" if i < passed else "failed") for i, node in enumerate(nodes)
        ]
    required = [s for s in labs if not s.optional]
    return LearnerRecord(
        learner=name,
        folder=f"/submissions/{name}",
        status=status,
        checkpoint=checkpoint.id,
        passed=sum(s.passed for s in required),
        total=sum(s.total for s in required),
        labs=labs,
        tests=verdicts,
    )


def _all(labs: tuple[Lab, ...], tests: dict[str, list[str]]) -> dict[str, int]:
    return {lab.id: len(tests[lab.id]) for lab in labs}


def sample_class(course: Course, checkpoint: Checkpoint) -> tuple[list[LearnerRecord], MutationMap]:
    """Records of seven learners, and a mutation map naming the checkpoint's mutations for failing tests.

    Everything done (optional labs too); required labs done; the first lab half done with a mistake;
    nothing started; a syntax error; a run out of time; a folder that was not a submission at all.
    """
    tests = tests_by_lab(course, checkpoint)
    required = checkpoint.required_labs
    first = checkpoint.labs[0] if checkpoint.labs else None
    half = {first.id: max(1, len(tests[first.id]) // 2)} if first else {}
    records = [
        _record("all-labs", checkpoint, tests, _all(checkpoint.labs, tests), COMPLETE),
        _record(SECRET_LEARNER, checkpoint, tests, _all(required, tests), COMPLETE),
        _record("half-of-the-first-lab", checkpoint, tests, half, PARTIAL),
        _record("untouched", checkpoint, tests, {}, NOT_STARTED),
        _record("syntax-error", checkpoint, tests, {}, ERROR),
        _record("endless-loop", checkpoint, tests, {}, TIMEOUT),
        _record("not-a-folder", checkpoint, tests, {}, SKIPPED),
    ]
    for record in records[4:]:
        # A run that did not finish has no verdicts and no passed tests.
        record.tests, record.passed = [], 0
        record.labs = [LabScore(s.id, s.title, s.optional, 0, s.total, "not started") for s in record.labs]
    records[4].message = "SyntaxError: invalid syntax (tool.py, line 3)"
    records[5].message = "timed out after 120 s"
    records[6].message = "no pi_course/ folder"
    records[6].checkpoint = None
    failing = tests[first.id][half[first.id] :] if first else []
    names = [mutation.name for mutation in checkpoint.mutations]
    mutations = (
        {node: names[i % len(names) : i % len(names) + 1] for i, node in enumerate(failing)} if names else {}
    )
    return records, mutations
