"""The course's promises as checks: each returns a list of problems, empty when the promise holds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pi_course_kit.core.i18n import LANG_ENV
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import TestRecord
from pi_course_kit.core.regions import find_regions, find_stubs
from pi_course_kit.core.runner import RunResult, run_tests
from pi_course_kit.core.staging import staged
from pi_course_kit.instructor import prewarmed
from pi_course_kit.instructor.build_labs import stale_files


def _earlier_or_same(checkpoint: Checkpoint, lab_id: str | None) -> set[str]:
    """The lab ids that may legitimately stop a test of `lab_id` on the starter."""
    order = [lab.id for lab in checkpoint.labs]
    if lab_id not in order:
        return set()
    return set(order[: order.index(lab_id) + 1])


def run_tree(
    course: Course,
    checkpoint: Checkpoint,
    tree: str,
    args: tuple[str, ...] = (),
    *,
    runs: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    outputs: tuple[str, ...] = (),
) -> RunResult:
    """Run the focused tests against one of the repository's trees, staged in a temporary folder.

    With `runs` (a folder), a run of the same content is reused from there (`runner.run_tests`), and
    the run speaks the course's language unless `extra_env` names one: the notebooks' kernels do, so
    that verify's run of a tree and a notebook's progress cell on the same tree are one content, run
    once. `outputs` is passed on to `run_tests`.
    """
    env = None
    if runs is not None or extra_env:
        env = {**os.environ, **(extra_env or {})}
        if runs is not None and LANG_ENV not in (extra_env or {}):
            env[LANG_ENV] = course.language
    with staged(course, checkpoint, course.root / tree) as folder:
        # Only the JSON records are read; drawing ~100 tracebacks would cost seconds.
        return run_tests(
            folder, ("--tb=no", *args), env=env, launch=prewarmed.launch, reuse=runs, outputs=outputs
        )


def _tests(result: RunResult) -> list[TestRecord]:
    """The run's test records, read back checked."""
    return result.report.tests


def solution_problems(
    course: Course, checkpoint: Checkpoint, result: RunResult | None = None, *, runs: Path | None = None
) -> list[str]:
    """Every focused test passes on the solution (skips count as problems)."""
    result = result or run_tree(course, checkpoint, checkpoint.solution, runs=runs)
    where = f"{checkpoint.solution}"
    if result.collect_errors:
        return [
            f"{where}: the focused tests cannot be collected: {e.message}"
            for e in result.report.collect_errors
        ]
    if not result.tests:
        return [
            f"{where}: no focused test ran (exit {result.returncode}); check "
            f"{', '.join(checkpoint.focused_tests)}"
        ]
    problems = [
        f"{where}: {t.nodeid} {t.outcome}: {t.message or t.skip_reason}; fix the solution or the test"
        for t in _tests(result)
        if t.outcome != "passed"
    ]
    if result.returncode != 0 and not problems:
        problems.append(
            f"{where}: pytest exited {result.returncode}: {result.output.strip().splitlines()[-1:]}"
        )
    return problems


def starter_problems(
    course: Course, checkpoint: Checkpoint, result: RunResult | None = None, *, runs: Path | None = None
) -> list[str]:
    """Every test of the checkpoint's own labs fails on the starter with its lab's (or an earlier lab's)
    LabNotImplemented; every test of an inherited lab passes, since the parent state is its target."""
    result = result or run_tree(course, checkpoint, checkpoint.starter, runs=runs)
    where = checkpoint.starter
    if result.collect_errors:
        return [
            f"{where}: the starter does not import cleanly: {e.message}" for e in result.report.collect_errors
        ]
    if not result.tests:
        return [f"{where}: no focused test ran (exit {result.returncode})"]
    problems = []
    optional = {lab.id for lab in checkpoint.labs if lab.optional}
    inherited = {lab.id for lab in checkpoint.tree_labs if lab.inherited}
    for test in _tests(result):
        allowed = _earlier_or_same(checkpoint, test.lab)
        if test.lab in inherited:
            if test.outcome != "passed":
                problems.append(
                    f"{where}: {test.nodeid} (inherited Lab {test.lab}) {test.outcome} on the starter: "
                    f"{test.message}; the parent state must be the parent's target"
                )
        elif test.lab is None:
            problems.append(
                f"{where}: {test.nodeid} carries no lab marker; tag it with one of the lab markers"
            )
        elif test.outcome == "skipped" and test.lab in optional:
            continue
        elif test.outcome == "passed":
            problems.append(f"{where}: {test.nodeid} passes on the starter; it must need Lab {test.lab}")
        elif test.exc_lab not in allowed:
            got = f"Lab {test.exc_lab}'s LabNotImplemented" if test.exc_lab else test.exc_type
            problems.append(
                f"{where}: {test.nodeid} (Lab {test.lab}) fails with {got} ({test.message}); "
                f"it must fail with LabNotImplemented of Lab {test.lab} or an earlier lab"
            )
    return problems


def first_red_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """`pytest -m <first lab> -x` on the starter stops first on a stub of that lab."""
    first = checkpoint.first_lab
    result = run_tree(course, checkpoint, checkpoint.starter, ("-m", first.marker, "-x"))
    failed = [t for t in _tests(result) if t.outcome == "failed"]
    if not failed:
        return [f"{checkpoint.starter}: `pytest -m {first.marker} -x` stopped on no failure"]
    stubs = {
        f"{checkpoint.first_red_prefix} {stub.target}"
        for relative in checkpoint.teaching_files
        for stub in find_stubs((course.root / checkpoint.starter / relative).read_text(encoding="utf-8"))
        if stub.lab == first.id
    }
    if failed[0].message not in stubs:
        return [
            f"{checkpoint.starter}: `pytest -m {first.marker} -x` stops first on {failed[0].message!r}, "
            f"not on a stub of Lab {first.id} ({checkpoint.first_red_prefix} …)"
        ]
    return []


def observation_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """An observation checkpoint's teaching files mark no lab region and raise no stub: its starter is its
    target."""
    problems = []
    for relative in checkpoint.teaching_files:
        solution = course.root / checkpoint.solution / relative
        if not solution.is_file():
            problems.append(f"{checkpoint.solution}/{relative}: teaching file missing")
            continue
        source = solution.read_text(encoding="utf-8")
        if find_regions(source, str(solution)) or find_stubs(source, str(solution)):
            problems.append(
                f"{checkpoint.solution}/{relative} marks lab regions or raises LabNotImplemented, but "
                f"checkpoint {checkpoint.id} is an observation checkpoint (nothing to implement); remove "
                'them, or drop `kind = "observation"`'
            )
    return problems


def inherited_file_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Inherited files equal the parent checkpoint's solution, byte for byte."""
    parent = course.parent_of(checkpoint)
    if parent is None:
        return []
    problems = []
    for relative in checkpoint.inherited_files:
        mine, theirs = course.root / checkpoint.solution / relative, course.root / parent.solution / relative
        if not mine.is_file() or not theirs.is_file() or mine.read_bytes() != theirs.read_bytes():
            problems.append(
                f"{checkpoint.solution}/{relative} differs from the parent's {parent.solution}/{relative}; "
                f"copy the parent's file (cp {parent.solution}/{relative} {checkpoint.solution}/{relative})"
            )
    return problems


def given_file_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """The given files are byte-identical in starter and solution."""
    problems = []
    for relative in checkpoint.given_files:
        starter, solution = (
            course.root / checkpoint.starter / relative,
            course.root / checkpoint.solution / relative,
        )
        if not starter.is_file() or not solution.is_file():
            missing = starter if not starter.is_file() else solution
            problems.append(
                f"{missing.relative_to(course.root)}: given file missing; run `pi-course build-labs`"
            )
        elif starter.read_bytes() != solution.read_bytes():
            problems.append(
                f"{checkpoint.starter}/{relative} differs from {checkpoint.solution}/{relative}; "
                "edit the solution's copy and run `pi-course build-labs`"
            )
    return problems


def stale_starter_problems(course: Course, checkpoint: Checkpoint) -> list[str]:
    """The starter is exactly what build-labs generates from the solution."""
    return [
        f"{checkpoint.starter}/{relative} is stale (not generated from {checkpoint.solution}); "
        "run `pi-course build-labs`"
        for relative in stale_files(course, checkpoint)
    ]
