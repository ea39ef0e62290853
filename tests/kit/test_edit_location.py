"""Planted mistakes: the report's `edit:` line names the function that holds the mistake.

For every required lab of every checkpoint (course.toml's, so a new checkpoint adds data, not code) one of
its named mutations that lies inside one of the lab's own functions is planted in a practice folder at
the solution; the lab's tests then run, and the report's next step must send the learner to that very
function. Most mutations are wrong values, not exceptions: the failure's traceback runs through none of
the learner's code, and the report ranks the functions the test ran, the test's `edits` marker (or a
lab's single function) first. `test_edit_candidates.py` plants every named mutation, not one per lab.

Also here: every focused test of a lab with several functions names, with `@pytest.mark.edits(...)`, a
function of its own lab.
"""

from __future__ import annotations

import ast
import functools
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FX, REPO, load_real_course
from learner_support import run_cli
from pi_course_kit.core import records
from pi_course_kit.core.manifest import Checkpoint, Course, Lab, Mutation
from pi_course_kit.core.runner import run_tests
from pi_course_kit.instructor import prewarmed
from pi_course_kit.instructor.mutate import mutate_source
from pi_course_kit.learner import practice

BEGIN = re.compile(r"#\s*BEGIN LAB (?P<lab>\S+)")


def lab_functions(course: Course, checkpoint: Checkpoint, lab: Lab) -> set[str]:
    """The lab's functions: what it `implements` (a class by its `__init__` too) and every function of
    the solution holding one of its `# BEGIN LAB` regions."""
    names = set(lab.implements) | {f"{name}.__init__" for name in lab.implements}
    for relative in checkpoint.teaching_files:
        path = course.root / checkpoint.solution / relative
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if (match := BEGIN.search(line)) and match["lab"] == lab.id:
                names.add(records.function_at(path, number) or "")
    return names - {""}


def mutated_function(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> str | None:
    """The solution's function holding the first line the mutation changes."""
    path = course.root / checkpoint.solution / mutation.file
    source = path.read_text(encoding="utf-8")
    offset = source.find(mutation.find)
    if offset < 0:
        return None
    offset += len(mutation.find) - len(mutation.find.lstrip())
    return records.function_at(path, source.count("\n", 0, offset) + 1)


@dataclass(frozen=True)
class Planted:
    """A lab and the mutations that lie in its own functions (with that function), in course.toml order."""

    checkpoint: str
    lab: str
    marker: str
    mutations: tuple[tuple[Mutation, str], ...]


@functools.cache
def planted() -> tuple[Planted, ...]:
    """For each required lab, its checkpoint's mutations that lie in one of its functions."""
    course = load_real_course()
    if course is None:
        return ()
    found: list[Planted] = []
    for checkpoint in course.checkpoints:
        for lab in checkpoint.labs:
            if lab.optional:
                continue
            own = lab_functions(course, checkpoint, lab)
            mutations = [
                (mutation, function)
                for mutation in checkpoint.mutations
                if (function := mutated_function(course, checkpoint, mutation)) is not None
                and function in own
            ]
            found.append(Planted(checkpoint.id, lab.id, lab.marker, tuple(mutations)))
    return tuple(found)


@pytest.fixture(scope="module")
def solved_folders() -> dict[str, Path]:
    """One practice folder per checkpoint, at the solution, made on first use and reused by every case."""
    return {}


def solved_folder(course: Course, checkpoint: Checkpoint, cache: dict[str, Path], base: Path) -> Path:
    """The checkpoint's practice folder at the solution (made once per module run)."""
    if checkpoint.id not in cache:
        folder = practice.create(course, checkpoint, base / f"practice-{checkpoint.id}")
        for relative in checkpoint.teaching_files:
            shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
        cache[checkpoint.id] = folder
    return cache[checkpoint.id]


def test_every_required_lab_has_mistakes_to_plant(real_course: Course) -> None:
    """Does every required lab of every checkpoint have a named mutation inside one of its own functions,
    at least 20 labs in all?"""
    empty = [f"{case.checkpoint}/{case.lab}" for case in planted() if not case.mutations]
    assert empty == []
    assert len(planted()) >= 20


def plant(folder: Path, mutation: Mutation, marker: str) -> records.NextStep | None:
    """Plant a mutation, run the lab's tests (first failure only), put the file back; the report's step."""
    target = folder / mutation.file
    original = target.read_text(encoding="utf-8")
    target.write_text(mutate_source(original, mutation), encoding="utf-8")
    try:
        # Forked from a warm interpreter, as verify's mutation runs are: the report is the same, ~1 s sooner.
        result = run_tests(folder, ("-x", "--tb=no", "-m", marker), timeout=300, launch=prewarmed.launch)
    finally:
        target.write_text(original, encoding="utf-8")
    return result.next_step


@pytest.mark.slow
@pytest.mark.parametrize("case", planted(), ids=lambda case: f"{case.checkpoint}-{case.lab}")
def test_the_report_names_the_function_holding_the_mistake(
    case: Planted,
    real_course: Course,
    solved_folders: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With one of the lab's named mistakes planted (the first, in course.toml order, that the lab's own
    tests catch), does the report's next step send the learner to the function holding it?"""
    checkpoint = real_course.checkpoint(case.checkpoint)
    folder = solved_folder(real_course, checkpoint, solved_folders, tmp_path_factory.getbasetemp())
    for mutation, function in case.mutations:
        step = plant(folder, mutation, case.marker)
        if step is None or step.unchecked or step.lab != case.lab:
            continue  # not caught by this lab's own tests (a later lab's tests catch it)
        # A test that checks two functions at once names both; the one holding the mistake must be among
        # them, or enclose the function named (a nested helper is edited as part of its function).
        named = str(step.function).split(", ")
        assert any(name == function or name.startswith(f"{function}.") for name in named), (
            mutation.name,
            step,
        )
        assert str(step.location).startswith(f"{mutation.file}:"), (mutation.name, step)
        return
    pytest.fail(f"none of {[m.name for m, _f in case.mutations]} is caught by the tests of Lab {case.lab}")


def edits_markers(path: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(test name, lab marker, functions its `edits` marker names) of each test of a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            marks: dict[str, tuple[str, ...]] = {}
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                text = ast.unparse(call.func if call else decorator)
                if text.startswith("pytest.mark."):
                    name = text.removeprefix("pytest.mark.")
                    args = call.args if call else []
                    marks[name] = tuple(str(arg.value) for arg in args if isinstance(arg, ast.Constant))
            lab = next((name for name in marks if name != "edits"), None)
            if lab is not None:
                found.append((node.name, lab, marks.get("edits", ())))
    return found


def test_every_test_of_a_lab_with_several_functions_names_one_of_them(real_course: Course) -> None:
    """Does each focused test of a lab that implements several functions name, with `edits`, one of the
    lab's own functions (the one a failure sends the learner to)?"""
    problems = []
    for checkpoint in real_course.checkpoints:
        labs = {lab.marker: lab for lab in checkpoint.labs}
        for relative in checkpoint.focused_tests:
            for test, marker, named in edits_markers(REPO / relative):
                lab = labs.get(marker)
                if lab is None or lab.optional or len(lab.implements) <= 1:
                    continue
                own = lab_functions(real_course, checkpoint, lab)
                if not named or not set(named) <= own:
                    problems.append(f"{relative}::{test} (Lab {lab.id}) names {named!r}")
    assert problems == []


# -- an honest "done": the fixture course ---------------------------------------------------------


def solved(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """A practice folder of the fixture course with every required lab solved (no optional exercise)."""
    folder = practice.create(course, checkpoint, dest)
    for relative in checkpoint.teaching_files:
        shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
    return folder


def optional_offers(output: str) -> int:
    """How many times a run's report offers the optional exercise."""
    return output.count("every required lab is done; if you like, try the optional exercise:")


def test_with_every_required_lab_green_the_optional_exercise_is_offered_once(
    tmp_path: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """Once every required lab passes, does the report say so and offer the optional exercise exactly once?"""
    folder = solved(course, checkpoint, tmp_path / "mine")
    result = run_tests(folder)
    optional = next(lab for lab in checkpoint.labs if lab.optional)
    assert result.next_step is not None and result.next_step.optional is True
    assert result.next_step.lab == optional.id
    assert optional_offers(result.output) == 1


def test_after_the_optional_exercise_alone_the_report_says_everything_is_done(
    tmp_path: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """Every lab green, then the optional exercise written and run alone: is the next step "all done", not
    a required lab "not run"? (A new file of the learner's own cannot change what the other labs found.)"""
    folder = solved(course, checkpoint, tmp_path / "mine")
    assert run_tests(folder).next_step is not None
    for relative in checkpoint.solution_only:
        shutil.copyfile(course.root / checkpoint.solution / relative, folder / relative)
    optional = next(lab for lab in checkpoint.labs if lab.optional)
    result = run_tests(folder, ("-m", optional.marker))
    row = result.lab(optional.id)
    assert row is not None and row.status == records.DONE
    assert result.next_step is None, result.next_step
    assert "every required lab is done" in result.output


def test_after_an_edit_labs_not_rechecked_are_named_and_no_code_is_pointed_at(
    tmp_path: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """After an edit and a run of the last lab alone, does the report name the labs not checked since,
    and ask for a whole run, instead of sending the learner to the first lab's code as if it were undone?"""
    folder = solved(course, checkpoint, tmp_path / "mine")
    run_tests(folder)
    teaching = folder / checkpoint.teaching_files[0]
    teaching.write_text(teaching.read_text(encoding="utf-8") + "# a note of mine\n", encoding="utf-8")
    required = [lab for lab in checkpoint.labs if not lab.optional]
    result = run_tests(folder, ("-m", required[-1].marker))
    step = result.next_step
    assert step is not None
    assert step.unchecked == tuple(lab.id for lab in required[:-1])
    assert (step.location, step.command) == (None, "python -m pytest")
    shown = run_cli(["check", "--lab", required[-1].id], folder)
    assert "not checked since your last change" in shown.stdout
    assert "edit:" not in shown.stdout and "stuck?" not in shown.stdout
    assert run_tests(folder).next_step is not None  # the whole run settles it: only the optional is left
    again = run_tests(folder, ("-m", required[-1].marker)).next_step
    assert again is not None and again.optional is True


def test_the_parents_optional_exercise_comes_along_and_still_runs_by_name(
    tmp_path: Path, course: Course, child: Checkpoint
) -> None:
    """With --from, does the learner's optional exercise come along, is it said so, does `-m` still run
    it in the child folder, and does `hint` know it, while `check` never suggests it?"""
    parent = course.parent_of(child)
    assert parent is not None
    mine = solved(course, parent, tmp_path / "mine")
    for relative in parent.solution_only:
        shutil.copyfile(course.root / parent.solution / relative, mine / relative)
    made = run_cli(["practice", child.id, str(tmp_path / "next"), "--from", "mine", *FX], tmp_path)
    assert made.returncode == 0, made.stderr
    optional = next(lab for lab in parent.labs if lab.optional)
    assert f"python -m pytest -m {optional.marker}" in made.stdout
    folder = tmp_path / "next"
    for relative in child.teaching_files:
        shutil.copyfile(course.root / child.solution / relative, folder / relative)
    alone = run_tests(folder, ("-m", optional.marker))
    row = alone.lab(optional.id)
    assert row is not None and row.total >= 1 and row.status == records.DONE
    hint = run_cli(["hint", optional.id], folder)
    assert hint.returncode == 0 and optional.hints[0] in hint.stdout
    whole = run_cli(["check"], folder)
    assert optional.marker not in whole.stdout and f"Lab {optional.id}" not in whole.stdout
