"""Friendly lab errors in a notebook kernel, and the learner's copy of a notebook."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import nbformat
from pi_course_kit.core.manifest import Course
from pi_course_kit.notebook import lab_errors
from pi_course_kit.notebook.learner_copy import REPO_ONLY_TAG, write_learner_copy


class LabNotImplemented(NotImplementedError):
    """Same name, base and attributes as pi_course.LabNotImplemented."""

    def __init__(self, lab: str, target: str) -> None:
        super().__init__(f"Lab {lab} not implemented: {target}")
        self.lab, self.target = lab, target


class FakeShell:
    """Records what the handler asks IPython's shell to show."""

    def __init__(self) -> None:
        self.registered: tuple[tuple[type[BaseException], ...], Any] | None = None
        self.short: list[tuple[str, list[str]]] = []
        self.full: list[str] = []

    def set_custom_exc(self, types: tuple[type[BaseException], ...], handler: Any) -> None:
        self.registered = (types, handler)

    def _showtraceback(self, etype: type[BaseException], value: BaseException, stb: list[str]) -> None:
        self.short.append((etype.__name__, stb))

    def showtraceback(self, exc_tuple: Any, tb_offset: Any = None) -> None:
        self.full.append(exc_tuple[0].__name__)


def raised(error: BaseException) -> tuple[type[BaseException], BaseException, TracebackType | None]:
    try:
        raise error
    except BaseException:
        etype, value, tb = sys.exc_info()
        assert etype is not None and value is not None
        return etype, value, tb


def test_an_unfinished_lab_becomes_one_line_naming_lab_target_place_and_hint() -> None:
    """Does a LabNotImplemented show as
    `Lab 6.1 not finished: object_schema · <file:line> · pi-course hint 6.1`?"""
    shell = FakeShell()
    assert lab_errors.install("pi_course", shell)
    assert shell.registered is not None
    types, handler = shell.registered
    etype, value, tb = raised(LabNotImplemented("6.1", "object_schema"))
    assert issubclass(etype, types)
    handler(shell, etype, value, tb)
    ((name, lines),) = shell.short
    assert name == "LabNotImplemented" and len(lines) == 1
    # Raised from this test file, not from inside a pi_course package: the place falls back to the package.
    assert lines[0] == "Lab 6.1 not finished: object_schema · pi_course · pi-course hint 6.1"
    assert shell.full == []


def test_any_other_error_keeps_its_full_traceback() -> None:
    """Does a plain NotImplementedError (a learner's own) go to the normal traceback, not the box?"""
    shell = FakeShell()
    lab_errors.install("pi_course", shell)
    assert shell.registered is not None
    etype, value, tb = raised(NotImplementedError("mine"))
    shell.registered[1](shell, etype, value, tb)
    assert shell.full == ["NotImplementedError"] and shell.short == []


def test_the_box_points_at_the_line_inside_pi_course(tmp_path: Path) -> None:
    """When the error is raised inside a pi_course module, does the box name that file and line?"""
    package = tmp_path / "pi_course"
    package.mkdir()
    source = "def object_schema():\n    raise Error('6.1', 'object_schema')\n"
    (package / "tool.py").write_text(source, encoding="utf-8")
    namespace: dict[str, Any] = {"Error": LabNotImplemented}
    exec(compile(source, str(package / "tool.py"), "exec"), namespace)
    _, value, tb = raised_from(namespace["object_schema"])
    assert (
        lab_errors.box(value, tb, "pi_course")
        == "Lab 6.1 not finished: object_schema · pi_course/tool.py:2 · pi-course hint 6.1"
    )


def raised_from(function: Any) -> tuple[type[BaseException], BaseException, TracebackType | None]:
    try:
        function()
    except BaseException:
        etype, value, tb = sys.exc_info()
        assert etype is not None and value is not None
        return etype, value, tb
    raise AssertionError("expected an exception")


def test_install_outside_ipython_does_nothing() -> None:
    """In a plain interpreter (no IPython shell), does install() report False instead of failing?"""
    assert lab_errors.install("pi_course") is False


def test_learner_copy_drops_outputs_counts_and_repository_only_cells(tmp_path: Path) -> None:
    """Does the learner's copy keep every other cell's source but no outputs, counts or repo-only cells?"""
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    banner = nbformat.v4.new_markdown_cell("outputs come from the solution")  # type: ignore[no-untyped-call]
    banner.metadata["tags"] = [REPO_ONLY_TAG]
    cell = nbformat.v4.new_code_cell("# Step 1 · x\nprint(1)")  # type: ignore[no-untyped-call]
    cell.execution_count = 3
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="solutions/06\n")]  # type: ignore[no-untyped-call]
    nb.cells = [banner, cell]
    source, target = tmp_path / "repo.ipynb", tmp_path / "learner.ipynb"
    nbformat.write(nb, source)  # type: ignore[no-untyped-call]
    write_learner_copy(source, target)
    copy = nbformat.read(target, as_version=4)  # type: ignore[no-untyped-call]
    assert [c.source for c in copy.cells] == ["# Step 1 · x\nprint(1)"]
    assert copy.cells[0].outputs == [] and copy.cells[0].execution_count is None
    assert "solutions/" not in target.read_text(encoding="utf-8")
    nbformat.validate(copy)
    assert nbformat.read(source, as_version=4).cells[1].outputs  # type: ignore[no-untyped-call]


#: A lab error as a notebook shows it, quoted in a notebook's prose as an example.
QUOTED_LAB_ERROR = re.compile(
    r"Lab (?P<lab>\d+\.\d+) 未完成：(?P<target>\w+) · (?P<path>[\w/]+\.py):(?P<line>\d+) · pi-course hint"
)


def test_every_lab_error_a_notebook_quotes_names_the_line_its_starter_raises_at(real_course: Course) -> None:
    """Where a notebook's prose shows the one line an unfinished lab gives, is it the line the learner
    will really see: the starter's file and the line of that lab's `raise LabNotImplemented`?"""
    quoted = 0
    wrong = []
    for checkpoint in real_course.checkpoints:
        notebook = nbformat.read(real_course.root / checkpoint.notebook, as_version=4)  # type: ignore[no-untyped-call]
        prose = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
        for found in QUOTED_LAB_ERROR.finditer(prose):
            quoted += 1
            lines = (real_course.root / checkpoint.starter / found["path"]).read_text(encoding="utf-8")
            line = lines.splitlines()[int(found["line"]) - 1]
            if f'raise LabNotImplemented("{found["lab"]}", "{found["target"]}")' not in line:
                wrong.append(f"{checkpoint.notebook}: {found.group()} (that line is {line.strip()!r})")
    assert quoted > 0
    assert wrong == []
