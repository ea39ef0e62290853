"""The five-folder class of issue #14, built from fixture-course practice folders, for the grading-output
tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.instructor.mutate import mutate_source
from pi_course_kit.learner import practice

#: A real mistake in Lab 1.2 for the learner who made one, so the class report has one to explain.
MISTAKE = "reset-to-one"
TEACHING = "fx_course/counter.py"


def with_labs(course: Course, checkpoint: Checkpoint, labs: set[str], mistake: str | None = None) -> str:
    """The solution's counter.py (with a named mutation, if given) with the labs not in `labs` stubbed
    again."""
    solution = (course.root / checkpoint.solution / TEACHING).read_text(encoding="utf-8")
    if mistake:
        solution = mutate_source(solution, checkpoint.mutation(mistake))
    stubbed = {lab.id for lab in checkpoint.labs} - labs
    return strip_solution(solution, "counter.py", labs=stubbed)


def make_class(course: Course, checkpoint: Checkpoint, root: Path) -> dict[str, Path]:
    """complete, complete + the optional exercise, a mistake in Lab 1.2, only 1.1 with an edited test,
    untouched.

    Each sits one level down (`root/<name>/pi-practice`), so that bare folder names collide on purpose.
    """
    folders = {}
    for name in ("complete", "transfer", "mistake", "edited", "untouched"):
        folder = root / name / "pi-practice"
        folder.parent.mkdir(parents=True)
        practice.create(course, checkpoint, folder)
        folders[name] = folder
    solved = course.root / checkpoint.solution / TEACHING
    shutil.copyfile(solved, folders["complete"] / TEACHING)
    shutil.copyfile(solved, folders["transfer"] / TEACHING)
    for relative in checkpoint.solution_only:
        shutil.copyfile(course.root / checkpoint.solution / relative, folders["transfer"] / relative)
    (folders["mistake"] / TEACHING).write_text(
        with_labs(course, checkpoint, {"1.1", "1.2"}, MISTAKE), encoding="utf-8"
    )
    (folders["edited"] / TEACHING).write_text(with_labs(course, checkpoint, {"1.1"}), encoding="utf-8")
    test = folders["edited"] / "tests/test_a1_counter.py"
    test.write_text(
        test.read_text(encoding="utf-8") + "\n\ndef test_mine():\n    assert True\n", encoding="utf-8"
    )
    return folders
