"""The `edit:` line of a realistic mistake names the place that holds it.

course.toml's `[[checkpoints.mutations]]` are the course's realistic mistakes. `pi-course verify` plants
each one that lies in a lab's section of a solution file and runs the tests as a learner does (the
mutated lab first, then the checkpoint's own tests, then the whole tree, each stopping at the first
failure); its check "mutation X caught" also requires the report's next step to name the function
holding the mutated line, alone or among the report's five candidates, unless the mutation says why
not in `edit_unplaced` (see `mutate.unplaced_problem`, run for every checkpoint by
test_course_checkpoints.py). The tests here keep that list short and honest, and check the report's
rules on a few chosen mistakes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import load_real_course
from pi_course_kit.core import i18n, records
from pi_course_kit.core.manifest import Course
from pi_course_kit.core.runner import run_tests
from pi_course_kit.instructor import prewarmed
from pi_course_kit.instructor.mutate import mutate_source, mutated_place, mutation_lab, names_place
from pi_course_kit.learner import practice


def planted() -> list[tuple[str, str]]:
    """(checkpoint, mutation) of every named mutation verify plants: in a lab's section, in a function
    or a module-level definition of the solution."""
    course = load_real_course()
    assert course is not None
    return [
        (checkpoint.id, mutation.name)
        for checkpoint in course.checkpoints
        for mutation in checkpoint.mutations
        if mutation_lab(course, checkpoint, mutation) is not None
        and mutated_place(course, checkpoint, mutation) is not None
    ]


def test_nearly_every_named_mutation_is_planted() -> None:
    """Do the planted mistakes cover nearly every named mutation of the course (at least 90 %, 300 in all),
    so that verify's check speaks for the course and not for a chosen few?"""
    course = load_real_course()
    assert course is not None
    total = sum(len(checkpoint.mutations) for checkpoint in course.checkpoints)
    count = len(planted())
    assert count >= 300 and count >= 0.9 * total, (count, total)


def test_the_mutations_left_unplaced_are_planted_ones_and_few() -> None:
    """Is every mutation that course.toml excuses from the edit-line check (`edit_unplaced`) a planted one,
    and are they few (under 3 % of those planted)?"""
    course = load_real_course()
    assert course is not None
    excused = {
        (checkpoint.id, mutation.name)
        for checkpoint in course.checkpoints
        for mutation in checkpoint.mutations
        if mutation.edit_unplaced
    }
    assert excused <= set(planted())
    assert 0 < len(excused) < 0.03 * len(planted())


@pytest.mark.parametrize(
    ("function", "place", "named"),
    [
        ("read_delta", "read_delta", True),
        ("Agent._emit, Agent._deliver", "Agent._deliver", True),
        ("JsonlSessionStore.read", "JsonlSessionStore.read.read_after", True),  # written inside it
        ("JsonlSessionStore.read.read_after", "JsonlSessionStore.read", True),
        ("recover_jsonl, parse_session_entry", "JsonlSessionStore.open", False),
        ("Agent.get", "Agent.get_state", False),  # a prefix of a name is not the name
    ],
)
def test_an_edit_line_names_a_place_only_by_its_function_or_the_one_around_it(
    function: str, place: str, named: bool
) -> None:
    """Does verify count an edit line as naming a mistake's function exactly when one of its candidates
    is that function, or the function it is written in, or one written inside it?"""
    step = records.NextStep(
        lab="10.5", status=records.Status.FAILING, location="pi_course/session.py:1", function=function
    )
    assert (names_place(step, place) is None) is named
    assert names_place(None, place) is not None


@pytest.mark.slow
def test_a_type_error_in_a_later_lab_is_blamed_on_the_lab_that_owns_the_line(
    real_course: Course, tmp_path: Path
) -> None:
    """01's `text-not-checked` makes mypy fail, and mypy's test belongs to Lab 1.1: does the whole run's
    next step follow mypy's own `events.py:N` to Lab 1.2 and `read_delta`, not to 1.1's `format_event`?"""
    checkpoint = real_course.checkpoint("01")
    mutation = next(m for m in checkpoint.mutations if m.name == "text-not-checked")
    folder = practice.create(real_course, checkpoint, tmp_path / "mine")
    for relative in checkpoint.teaching_files:
        shutil.copyfile(real_course.root / checkpoint.solution / relative, folder / relative)
    target = folder / mutation.file
    target.write_text(mutate_source(target.read_text(encoding="utf-8"), mutation), encoding="utf-8")
    result = run_tests(folder, ("--tb=no", "-k", "mypy_finds_nothing_wrong"), launch=prewarmed.launch)
    failed = [test for test in result.report.tests if test.outcome == "failed"]
    assert [test.lab for test in failed] == ["1.1"]  # the test is 1.1's; the line is 1.2's
    step = result.next_step
    assert step is not None and (step.lab, step.function) == ("1.2", "read_delta"), step
    assert str(step.location).startswith(f"{mutation.file}:")
    row = result.lab("1.1")
    assert row is not None and row.blocked_by == "1.2"


@pytest.mark.parametrize(
    ("language", "header"),
    [("en", "  edit: the test ran 5 of your functions"), ("zh_CN", "  修改：这个测试运行了你的 5 个")],
)
def test_candidates_are_named_in_order_with_how_many_more(language: str, header: str) -> None:
    """When the test ran several functions that may hold the mistake, does the step name each on a line
    of its own, in the report's order, and say how many more it ran, in the run's language?"""
    i18n.use(language)
    step = records.NextStep(
        lab="9.3",
        status=records.Status.FAILING,
        location="pi_course/agent.py:310",
        function="Agent._deliver, Agent._emit, Agent.get_state",
        candidates=(
            "pi_course/agent.py:310 (Agent._deliver)",
            "pi_course/agent.py:238 (Agent._emit)",
            "pi_course/agent.py:214 (Agent.get_state)",
        ),
        more_candidates=2,
        command='python -m pytest -m "lab9_3"',
    )
    lines = records.step_lines(step)
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    assert [line.strip() for line in lines[at + 1 : at + 4]] == list(step.candidates)
    assert "2" in lines[at + 4] and "agent.py" not in lines[at + 4]
    assert sum("Agent." in line for line in lines) == 3  # each candidate once, no single `edit:` line too


def excused() -> list[tuple[str, str]]:
    """(checkpoint, mutation) of every mutation course.toml excuses from the edit-line check."""
    course = load_real_course()
    assert course is not None
    return [(c.id, m.name) for c in course.checkpoints for m in c.mutations if m.edit_unplaced]


@pytest.mark.slow
@pytest.mark.parametrize(("checkpoint_id", "name"), excused())
def test_after_a_green_run_the_function_changed_since_is_named_first(
    real_course: Course, tmp_path: Path, checkpoint_id: str, name: str
) -> None:
    """Where the ranking alone cannot place a mistake, and the failing test passed before in this folder,
    does the first red after the mistake is planted name the function that changed since, first, and say
    that it changed?"""
    checkpoint = real_course.checkpoint(checkpoint_id)
    mutation = next(m for m in checkpoint.mutations if m.name == name)
    place = mutated_place(real_course, checkpoint, mutation)
    assert place is not None
    folder = practice.create(real_course, checkpoint, tmp_path / "mine")
    for relative in checkpoint.teaching_files:
        shutil.copyfile(real_course.root / checkpoint.solution / relative, folder / relative)
    own = tuple(f"tests/{Path(test).name}" for test in checkpoint.focused_tests)
    green = run_tests(folder, (*own, "--tb=no"), launch=prewarmed.launch)
    assert green.report.tests and all(test.outcome == "passed" for test in green.report.tests)
    target = folder / mutation.file
    target.write_text(mutate_source(target.read_text(encoding="utf-8"), mutation), encoding="utf-8")
    red = run_tests(folder, (*own, "--tb=no"), launch=prewarmed.launch)
    # The first red: the first test that fails, in the order the tests ran.
    failed = next(test for test in red.report.tests if test.outcome == "failed")
    assert failed.function, failed
    first = failed.function.split(", ")[0]
    assert first == place or first.startswith(f"{place}.") or place.startswith(f"{first}."), failed.function
    # And the line says why it comes first (in the run's language: the kit's runner asks for English).
    mark = "changed since this test last passed"
    assert failed.candidates and failed.candidates[0].endswith(f"; {mark})"), failed.candidates
    assert not any(mark in where for where in failed.candidates[1:])
