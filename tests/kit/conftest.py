"""Shared fixtures of the kit's own tests: the manifest and one run of each repository tree."""

from __future__ import annotations

import os

import pytest
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import RunResult
from pi_course_kit.instructor.promises import run_tree

# The kit's own tests read the English messages (msgids); tests of the Chinese text ask for it explicitly.
os.environ.setdefault("PI_COURSE_LANG", "en")


@pytest.fixture(scope="session")
def course() -> Course:
    """The kit's own manifest."""
    return manifest.load()


#: What `python -m pytest -m lab6_1 -x` in a fresh 06 starter stops on (its first test needs object_schema).
FIRST_RED_06 = "Lab 6.1 not implemented: object_schema"


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
