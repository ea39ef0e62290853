"""Every named mutation of every checkpoint: the `edit:` line names the place that holds the mistake.

course.toml's `[[checkpoints.mutations]]` are the course's realistic mistakes. Each one that lies in a
lab's section of a solution file is planted in a practice folder at the solution, and the tests run as
a learner runs them: the mutated lab first, then, when it stays green, the checkpoint's own tests, then
the whole folder, each stopping at the first failure. The report's next step must name the function
holding the mutated line (or the module-level name a data line defines), alone or among at most
MAX_NAMED candidates that the failing test ran. A mistake that runs early and shows only in a later
lab's test (9.2's `_emit` caught by 9.3) is the case the traceback's last frame got wrong.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import load_real_course
from pi_course_kit.core import i18n, records
from pi_course_kit.core.manifest import Checkpoint, Course, Mutation
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.instructor import prewarmed
from pi_course_kit.instructor.mutate import mutate_source, mutation_lab
from pi_course_kit.learner import practice

#: How many functions an `edit:` line may name when it cannot tell which one holds the mistake.
MAX_NAMED = 3

#: Named mutations whose function is not yet among the first MAX_NAMED (measured 2026-12-06, issue 39):
#: the test ran more of the learner's functions than that, and the one holding the mistake neither
#: calls nor writes for the functions the test names. A new miss fails the test; one fixed is dropped
#: from here by hand.
KNOWN_MISSES = frozenset(
    {
        "cancelled-reader-not-skipped",  # 02, EventStream._next_waiter
        "cancelled-request-keeps-its-turn",  # 04, ScriptedModel.stream, caught by 4.2
        "partial-shares-content",  # 05, OpenAICompatibleModel._message
        "tools-run-one-after-another",  # 07, run_tool_batch
        "length-runs-the-tools",  # 07, run_agent_loop (7.5) seen from 7.3's end_without_tools
        "model-failure-loses-transcript",  # 09, run_agent_loop seen from 9.2's Agent
        "finite-accepts-nan",  # 10, finite_number
        "unknown-keys-dropped",  # 10, exact_keys
        "json-object-not-copied",  # 10, json_value_at
        "dict-subclass-accepted",  # 10, record_at
        "jsonl-read-bypasses-taint",  # 10, JsonlSessionStore.read.read_after
        "system-opens-no-group-but-is-kept",  # 11, group_interactions
        "summary-free",  # 11, build_context
        "empty-list-omitted",  # 11, compaction_summary_text
        "extension-host-not-wired",  # 13, create_runtime
        "patch-every-prompt",  # 13, system_patch
        "transcripts-not-compared",  # 14, run_eval_case
        "bridge-left-on-global",  # 16, run_worker (the worker process is not traced)
        "call-recorded-ok-before-it-ends",  # 16, Execution._handle_call
        "initialize-cancelled-too",  # 17, McpClient._cancel_pending
    }
)


@dataclass(frozen=True)
class Planted:
    """A mutation, the lab whose section it changes, and the name of the place it changes."""

    mutation: Mutation
    lab: str
    place: str


def mutated_place(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> str | None:
    """The function (or module-level name) of the solution holding the first line the mutation changes."""
    path = course.root / checkpoint.solution / mutation.file
    source = path.read_text(encoding="utf-8")
    offset = source.find(mutation.find)
    if offset < 0:
        return None
    offset += len(mutation.find) - len(mutation.find.lstrip())
    line = source.count("\n", 0, offset) + 1
    return records.function_at(path, line) or records.defined_at(path, line)


@functools.cache
def planted_by_checkpoint() -> dict[str, tuple[Planted, ...]]:
    """Each checkpoint's mutations that change a line of a lab's section (given code is not the learner's)."""
    course = load_real_course()
    if course is None:
        return {}
    found: dict[str, tuple[Planted, ...]] = {}
    for checkpoint in course.checkpoints:
        cases = []
        for mutation in checkpoint.mutations:
            lab = mutation_lab(course, checkpoint, mutation)
            place = mutated_place(course, checkpoint, mutation)
            if lab is not None and place is not None:
                cases.append(Planted(mutation, lab, place))
        found[checkpoint.id] = tuple(cases)
    return found


def test_nearly_every_named_mutation_is_planted() -> None:
    """Do the planted mistakes cover nearly every named mutation of the course (at least 90 %, 300 in all),
    so that the check below speaks for the course and not for a chosen few?"""
    course = load_real_course()
    assert course is not None
    total = sum(len(checkpoint.mutations) for checkpoint in course.checkpoints)
    planted = sum(len(cases) for cases in planted_by_checkpoint().values())
    assert planted >= 300 and planted >= 0.9 * total, (planted, total)


def first_red(folder: Path, checkpoint: Checkpoint, lab_marker: str | None) -> RunResult:
    """Run as a learner does, each run stopping at its first failure: the mutated lab, then the
    checkpoint's own tests, then the whole folder; the first run with a failure is the answer."""
    own = tuple(f"tests/{Path(relative).name}" for relative in checkpoint.focused_tests)
    selections: list[tuple[str, ...]] = [("-m", lab_marker)] if lab_marker else []
    selections += [own, ()]
    result = None
    for selection in selections:
        result = run_tests(folder, ("--tb=no", "-x", *selection), timeout=300, launch=prewarmed.launch)
        if any(test.outcome == "failed" for test in result.report.tests) or result.collect_errors:
            return result
    assert result is not None
    return result


def names_it(step: records.NextStep | None, place: str) -> str | None:
    """Why a next step does not send the learner to `place` (None when it does)."""
    if step is None or step.location is None or not step.function:
        return f"no edit line: {step}"
    named = step.function.split(", ")
    if len(named) > MAX_NAMED:
        return f"{len(named)} functions named: {named}"
    # A nested function is edited as part of the function it is written in, and the other way round.
    if not any(
        name == place or name.startswith(f"{place}.") or place.startswith(f"{name}.") for name in named
    ):
        return f"names {named} at {step.location}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint_id", sorted(planted_by_checkpoint()))
def test_the_edit_line_names_the_place_of_every_named_mutation(
    checkpoint_id: str, real_course: Course, tmp_path: Path
) -> None:
    """For each named mutation of the checkpoint, planted in a folder at the solution, does the first red
    run's `edit:` line name the function holding the mistake, alone or among at most three candidates
    (but for the few listed in KNOWN_MISSES)?"""
    checkpoint = real_course.checkpoint(checkpoint_id)
    folder = practice.create(real_course, checkpoint, tmp_path / "mine")
    for relative in checkpoint.teaching_files:
        shutil.copyfile(real_course.root / checkpoint.solution / relative, folder / relative)
    markers = {lab.id: lab.marker for lab in checkpoint.labs}
    misses = []
    for case in planted_by_checkpoint()[checkpoint_id]:
        target = folder / case.mutation.file
        original = target.read_text(encoding="utf-8")
        target.write_text(mutate_source(original, case.mutation), encoding="utf-8")
        try:
            result = first_red(folder, checkpoint, markers.get(case.lab))
        finally:
            target.write_text(original, encoding="utf-8")
        problem = names_it(result.next_step, case.place)
        if problem is not None and case.mutation.name not in KNOWN_MISSES:
            failed = [test.nodeid for test in result.report.tests if test.outcome == "failed"]
            misses.append(
                f"{case.mutation.name} (Lab {case.lab}, in {case.place}): {problem}; failed: {failed}"
            )
    assert misses == []


def test_the_known_misses_are_named_mutations_of_the_course() -> None:
    """Is every mutation left out of the check above one of the course's named mutations, and are they
    few (under 6 % of those planted)?"""
    planted = {case.mutation.name for cases in planted_by_checkpoint().values() for case in cases}
    assert planted >= KNOWN_MISSES
    assert len(KNOWN_MISSES) < 0.06 * len(planted)


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
