"""Shared fixtures of the kit's own tests: the manifest and one run of each repository tree."""

from __future__ import annotations

import pytest
from pi_course_kit import manifest
from pi_course_kit.checks import run_tree
from pi_course_kit.manifest import Checkpoint, Course
from pi_course_kit.runner import RunResult


@pytest.fixture(scope="session")
def course() -> Course:
    """The kit's own manifest."""
    return manifest.load()


@pytest.fixture(scope="session")
def checkpoint(course: Course) -> Checkpoint:
    """Checkpoint 06, the one this kit ports."""
    return course.checkpoint("06")


@pytest.fixture(scope="session")
def solution_run(course: Course, checkpoint: Checkpoint) -> RunResult:
    """Every focused test, run once against the solution in its own interpreter."""
    return run_tree(course, checkpoint, checkpoint.solution)


@pytest.fixture(scope="session")
def starter_run(course: Course, checkpoint: Checkpoint) -> RunResult:
    """Every focused test, run once against the starter in its own interpreter."""
    return run_tree(course, checkpoint, checkpoint.starter)
