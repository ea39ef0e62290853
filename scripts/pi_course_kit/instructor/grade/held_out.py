"""Held-out tests: focused tests the learner never receives, graded beside the public ones.

A checkpoint's `held_out` files (course.toml, under tests/held_out/) live in the course checkout only:
no practice folder, checkpoint copy or wheel carries them (staging reads `tree_tests`, which never names
them). Grading runs the checkpoint as `graded()` returns it: the same labs, with the held-out files of
its whole lineage appended to its tests, so they are learned from the solution, disguised, staged and
scored exactly like the public tests, each under the lab its marker names. Hard-coding the public
tests' answers then no longer scores full points.
"""

from __future__ import annotations

from dataclasses import replace

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course


def lineage_files(course: Course, checkpoint: Checkpoint) -> tuple[str, ...]:
    """The held-out files of the checkpoint and its ancestors, oldest first."""
    chain = [checkpoint]
    while (parent := course.parent_of(chain[0])) is not None:
        chain.insert(0, parent)
    return tuple(dict.fromkeys(path for member in chain for path in member.held_out))


def graded(course: Course, checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint as the grader runs it: its tests plus the held-out tests found in the checkout.

    A course without the checkpoint's solution (the installed kit's learner part) has no held-out files
    either, by design, and grades with the public tests alone. In a checkout, a named file that is
    missing is an error: grading without it would silently score a different test set.
    """
    files = lineage_files(course, checkpoint)
    if not files:
        return checkpoint
    if not (course.root / checkpoint.solution).is_dir():
        return checkpoint
    missing = [path for path in files if not (course.root / path).is_file()]
    if missing:
        raise KitError(
            f"held-out test {missing[0]} is named in {course.path.name} but missing; restore it or remove it"
        )
    return replace(checkpoint, tree_tests=tuple(dict.fromkeys((*checkpoint.tree_tests, *files))))
