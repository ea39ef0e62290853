"""Named mutations of a solution: apply one to a staged copy and see which focused tests catch it."""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pi_course_kit.core import records
from pi_course_kit.core.i18n import LANG_ENV
from pi_course_kit.core.manifest import Checkpoint, Course, Mutation
from pi_course_kit.core.records import TestRecord
from pi_course_kit.core.regions import lab_at
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.core.staging import TESTS_DIR, stage_tree
from pi_course_kit.instructor import prewarmed


class MutationError(ValueError):
    """A mutation cannot be applied as written; the message says which and why."""


def _solution_file(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> Path:
    return course.root / checkpoint.solution / mutation.file


def mutate_source(source: str, mutation: Mutation) -> str:
    """Replace the mutation's `find` text, which must occur exactly once, by its `replace` text."""
    count = source.count(mutation.find)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise MutationError(
            f"mutation {mutation.name!r}: its find text {where} in {mutation.file}; "
            "it must match exactly once, so edit find in course.toml"
        )
    return source.replace(mutation.find, mutation.replace)


def mutation_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Static checks of the manifest's mutations: unique names, existing files, `find` matching once."""
    problems: list[str] = []
    seen: set[str] = set()
    for mutation in checkpoint.mutations:
        if mutation.name in seen:
            problems.append(f"mutation {mutation.name!r} is listed twice in checkpoint {checkpoint.id}")
        seen.add(mutation.name)
        path = _solution_file(course, checkpoint, mutation)
        if not path.is_file():
            problems.append(
                f"mutation {mutation.name!r}: {checkpoint.solution}/{mutation.file} does not exist"
            )
            continue
        if mutation.find == mutation.replace:
            problems.append(f"mutation {mutation.name!r}: replace equals find, so it changes nothing")
        try:
            mutate_source(path.read_text(encoding="utf-8"), mutation)
        except MutationError as error:
            problems.append(str(error))
    return problems


def _found(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> tuple[Path, str, int] | None:
    """The solution file, its text and where the mutation's `find` text starts in it (None: not found)."""
    path = _solution_file(course, checkpoint, mutation)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError:
        return None
    offset = source.find(mutation.find)
    return (path, source, offset) if offset >= 0 else None


def mutation_lab(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> str | None:
    """The lab whose `# ## Lab X` section holds the mutated text, if the file has sections."""
    found = _found(course, checkpoint, mutation)
    if found is None:
        return None
    _path, source, offset = found
    return lab_at(source.splitlines(), source.count("\n", 0, offset) + 1)


def mutated_place(course: Course, checkpoint: Checkpoint, mutation: Mutation) -> str | None:
    """The function (or module-level name) of the solution holding the first line the mutation changes."""
    found = _found(course, checkpoint, mutation)
    if found is None:
        return None
    path, source, offset = found
    offset += len(mutation.find) - len(mutation.find.lstrip())
    line = source.count("\n", 0, offset) + 1
    return records.function_at(path, line) or records.defined_at(path, line)


def names_place(step: records.NextStep | None, place: str) -> str | None:
    """Why a run's next step does not send the learner to `place` (None when it does).

    The `edit:` line names one function, or up to five candidates the failing test ran; a nested
    function is edited as part of the function it is written in, and the other way round.
    """
    if step is None or step.location is None or not step.function:
        return "it shows no edit line"
    named = step.function.split(", ")
    if not any(
        name == place or name.startswith(f"{place}.") or place.startswith(f"{name}.") for name in named
    ):
        return f"its edit line names {', '.join(named)} at {step.location}"
    return None


def mutation_diff(course: Course, checkpoint: Checkpoint, mutation: Mutation, context: int = 2) -> list[str]:
    """The mutation as a short unified diff of the solution file."""
    path = _solution_file(course, checkpoint, mutation)
    before = path.read_text(encoding="utf-8")
    after = mutate_source(before, mutation)
    name = f"{checkpoint.solution}/{mutation.file}"
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"{name} (solution)",
            f"{name} ({mutation.name})",
            n=context,
        )
    ]


@dataclass
class MutationRun:
    """The focused tests' verdict on one mutation."""

    mutation: Mutation
    result: RunResult
    catches: list[TestRecord] = field(default_factory=list)

    @property
    def caught(self) -> bool:
        """At least one focused test failed (a crash or a collection error also counts as caught)."""
        return bool(self.catches) or bool(self.result.collect_errors) or self.result.crashed

    @property
    def first_message(self) -> str:
        """The first failing assertion's first line, or what stopped the run."""
        if self.catches:
            return self.catches[0].message
        if self.result.collect_errors:
            return self.result.report.collect_errors[0].message
        return "the run ended without a report" if self.result.crashed else ""

    def expect_problem(self) -> str | None:
        """Why the first failing assertion does not show the manifest's `expect` text, if it does not."""
        expect = self.mutation.expect
        if not expect or not self.caught:
            return None
        if expect in self.first_message:
            return None
        return (
            f"mutation {self.mutation.name!r}: the first failing assertion is {self.first_message!r}, "
            f"which does not contain the expected {expect!r}; update expect in course.toml or the tests"
        )


def run_mutation(
    course: Course,
    checkpoint: Checkpoint,
    mutation: Mutation,
    *,
    timeout: float = 300.0,
    stop_first: bool = False,
) -> MutationRun:
    """Stage the solution in a temporary folder, apply the mutation there and run the focused tests.

    With `stop_first` the run ends at the first failure (enough to know it is caught, and quicker).
    """
    with tempfile.TemporaryDirectory(prefix=f"pi-course-mutation-{mutation.name}-") as tmp:
        tree = stage_tree(
            course, checkpoint, course.root / checkpoint.solution, Path(tmp) / "tree", precompiled=True
        )
        target = tree / mutation.file
        if not target.is_file():
            raise MutationError(f"mutation {mutation.name!r}: {mutation.file} is not in the staged tree")
        target.write_text(mutate_source(target.read_text(encoding="utf-8"), mutation), encoding="utf-8")
        # The plugin's records carry each failure's message; pytest's own tracebacks would only cost time.
        narrower: list[tuple[str, ...]] = []
        if stop_first:
            # The mutated lab's own tests first: they are the ones meant to catch it, and a run of one
            # marker collects only the test files that use it (the report plugin skips the others).
            lab = mutation_lab(course, checkpoint, mutation)
            narrower += [("-m", known.marker) for known in checkpoint.labs if known.id == lab][:1]
            if checkpoint.tree_tests != checkpoint.focused_tests:
                # Then the checkpoint's own tests alone: a change to its own solution is what they test,
                # so the run need not pass every parent's test before it gets to them. Only a mutation
                # they miss costs a run of the whole lineage.
                narrower.append(
                    tuple(f"{TESTS_DIR}/{Path(relative).name}" for relative in checkpoint.focused_tests)
                )
        # `expect` quotes pytest's own words (`DID NOT RAISE`), which a Chinese report translates: the
        # runs speak English, so a mutation is judged alike whatever language verify is read in.
        env = {**os.environ, LANG_ENV: "en"}
        for selection in narrower:
            result = run_tests(
                tree, ("--tb=no", "-x", *selection), timeout=timeout, env=env, launch=prewarmed.launch
            )
            if _failed(result) or result.collect_errors or result.crashed:
                return MutationRun(mutation, result, _failed(result))
        whole = ("--tb=no", "-x") if stop_first else ("--tb=no",)
        result = run_tests(tree, whole, timeout=timeout, env=env, launch=prewarmed.launch)
    return MutationRun(mutation, result, _failed(result))


def _failed(result: RunResult) -> list[TestRecord]:
    """The run's failed tests, as records."""
    return [test for test in result.report.tests if test.outcome == "failed"]


def unplaced_problem(course: Course, checkpoint: Checkpoint, run: MutationRun) -> str | None:
    """The verify message for a caught mutation whose first red does not send the learner to its place.

    A mutation in a lab's section is a learner's realistic mistake: the report's `edit:` line must name
    the function holding it. The few the report cannot place say why in course.toml
    (`edit_unplaced`); one of those that the report now places is reported too, so the list stays true.
    """
    mutation = run.mutation
    if not run.caught or mutation_lab(course, checkpoint, mutation) is None:
        return None
    place = mutated_place(course, checkpoint, mutation)
    if place is None:
        return None
    problem = names_place(run.result.next_step, place)
    if problem is not None and not mutation.edit_unplaced:
        return (
            f"mutation {mutation.name!r} is caught, but its first red sends the learner elsewhere: "
            f"the mistake is in {place}, and {problem}; fix the report, or say why in edit_unplaced"
        )
    if problem is None and mutation.edit_unplaced:
        return (
            f"mutation {mutation.name!r}: its first red now names {place}, where the mistake is; "
            "remove its edit_unplaced from course.toml"
        )
    return None


def survived_problem(run: MutationRun, checkpoint: Checkpoint) -> str | None:
    """The verify message for a mutation that no focused test catches, if it survived."""
    if run.caught:
        return None
    files = ", ".join(checkpoint.focused_tests)
    return (
        f"mutation {run.mutation.name!r} ({run.mutation.description}) is caught by no focused test "
        f"({len(run.result.tests)} ran); add a test to {files} that fails on it"
    )
