"""A teaching file in a subpackage (`pi_course/survival/events.py`) reaches `pi_course/lab.py` with two dots.

build-labs, reset and the notebook's one-line lab box all name and import it from where the file is.
"""

from __future__ import annotations

import ast

import pytest
from pi_course_kit.core.regions import lab_import, strip_solution
from pi_course_kit.learner.reset import restore_labs
from pi_course_kit.notebook.lab_errors import box

SOLUTION = '''"""A module of a subpackage."""

from __future__ import annotations

from typing import Literal


def tag() -> Literal["x"]:
    """The tag."""
    # BEGIN LAB 9.1
    return "x"
    # END LAB 9.1
'''


def test_the_import_has_one_dot_per_level_below_the_package() -> None:
    """Does a top-level module import `.lab`, and one in a subpackage (or deeper) `..lab`, `...lab`?"""
    assert lab_import("pi_course/tool.py") == "from .lab import LabNotImplemented\n"
    assert lab_import("pi_course/survival/events.py") == "from ..lab import LabNotImplemented\n"
    assert lab_import("pi_course/a/b/c.py") == "from ...lab import LabNotImplemented\n"


def test_a_stripped_subpackage_file_imports_the_error_in_its_own_group() -> None:
    """Is the stub's import `from ..lab`, after a blank line that separates it from the standard library's?"""
    starter = strip_solution(SOLUTION, "events.py", import_line=lab_import("pi_course/survival/events.py"))
    assert "from typing import Literal\n\nfrom ..lab import LabNotImplemented\n" in starter
    assert 'raise LabNotImplemented("9.1", "tag")' in starter
    ast.parse(starter)


def test_reset_in_a_subpackage_file_adds_the_two_dot_import() -> None:
    """When a learner's solved subpackage file is reset, does the restored stub import `..lab` in its own
    group?"""
    starter = strip_solution(SOLUTION, "events.py", import_line=lab_import("pi_course/survival/events.py"))
    restored, names = restore_labs(SOLUTION, starter, {"9.1"}, "pi_course/survival/events.py")
    assert names == ["tag"]
    assert "from typing import Literal\n\nfrom ..lab import LabNotImplemented\n" in restored


def test_the_notebook_box_names_a_subpackage_file_with_its_folder(chinese: None) -> None:
    """Does the one-line lab box point at `pi_course/survival/events.py:LINE`, not at the package alone?"""

    class LabNotImplemented(NotImplementedError):
        def __init__(self, lab: str, target: str) -> None:
            super().__init__(f"Lab {lab} not implemented: {target}")
            self.lab, self.target = lab, target

    code = compile(
        "raise LabNotImplemented('9.1', 'tag')", "/home/learner/pi_course/survival/events.py", "exec"
    )
    with pytest.raises(LabNotImplemented) as caught:
        exec(code, {"LabNotImplemented": LabNotImplemented})
    line = box(caught.value, caught.value.__traceback__, "pi_course")
    assert line == "Lab 9.1 未完成：tag · pi_course/survival/events.py:1 · pi-course hint 9.1"
