"""The five-folder class of issue #14, built from real practice folders, for the grading-output tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.instructor.mutate import mutate_source
from pi_course_kit.learner import practice

#: A real mistake in Lab 6.1 for the learner who only did 6.1, so the class report has one to explain.
MISTAKE = "bool-accepted-as-integer"


def _solution(course: Course, checkpoint: Checkpoint, name: str) -> Path:
    return course.root / checkpoint.solution / "pi_course" / name


def with_labs(course: Course, checkpoint: Checkpoint, labs: set[str], mistake: str | None = None) -> str:
    """The solution's tool.py (with a named mutation, if given) with the labs not in `labs` stubbed again."""
    solution = _solution(course, checkpoint, "tool.py").read_text(encoding="utf-8")
    if mistake:
        solution = mutate_source(solution, checkpoint.mutation(mistake))
    stubbed = {lab.id for lab in checkpoint.labs} - labs
    return strip_solution(solution, "tool.py", labs=stubbed)


def make_class(course: Course, checkpoint: Checkpoint, root: Path) -> dict[str, Path]:
    """complete, complete + transfer, only Lab 6.1 (with one mistake), 6.1 and 6.2 with an edited test, untouched.

    Each sits one level down (`root/<name>/pi-practice`), so that bare folder names collide on purpose.
    """
    folders = {}
    for name in ("complete", "transfer", "only-6.1", "edited", "untouched"):
        folder = root / name / "pi-practice"
        folder.parent.mkdir(parents=True)
        practice.create(course, checkpoint, folder)
        folders[name] = folder
    solved = _solution(course, checkpoint, "tool.py")
    shutil.copyfile(solved, folders["complete"] / "pi_course/tool.py")
    shutil.copyfile(solved, folders["transfer"] / "pi_course/tool.py")
    shutil.copyfile(
        _solution(course, checkpoint, "uppercase.py"), folders["transfer"] / "pi_course/uppercase.py"
    )
    only = with_labs(course, checkpoint, {"6.1"}, MISTAKE)
    (folders["only-6.1"] / "pi_course/tool.py").write_text(only, encoding="utf-8")
    (folders["edited"] / "pi_course/tool.py").write_text(
        with_labs(course, checkpoint, {"6.1", "6.2"}), encoding="utf-8"
    )
    test = folders["edited"] / "tests/test_06_tool_contract.py"
    test.write_text(
        test.read_text(encoding="utf-8") + "\n\ndef test_mine():\n    assert True\n", encoding="utf-8"
    )
    return folders
