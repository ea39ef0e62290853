"""The notebook engine on a course whose package is not `pi_course`: the name comes from course.toml alone."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import nbformat
import pytest
from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Course
from pi_course_kit.learner import practice
from pi_course_kit.notebook import checks, lab_errors, nbrun
from pi_course_kit.notebook import helpers as nbhelp
from pi_course_kit.notebook.tree import course_of

FIXTURE = Path(__file__).with_name("fixture_course")
#: Not `pi_course`: any place that still assumed the real course's name would miss this package.
PACKAGE = "counting"


@pytest.fixture
def renamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Course:
    """A copy of the fixture course whose package is `counting` (not `fx_course`): folders, course.toml and
    imports renamed."""
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = Path(shutil.copytree(FIXTURE, tmp_path / "course"))
    for folder in sorted(root.rglob("fx_course")):
        folder.rename(folder.with_name(PACKAGE))
    toml = root / "course.toml"
    text = toml.read_text(encoding="utf-8")
    text = text.replace('package = "fx_course"', f'package = "{PACKAGE}"').replace(
        '"fx_course/', f'"{PACKAGE}/'
    )
    toml.write_text(text, encoding="utf-8")
    for test in (root / "tests" / "focused").glob("test_*.py"):
        source = test.read_text(encoding="utf-8")
        test.write_text(source.replace("fx_course", PACKAGE), encoding="utf-8")
    course = manifest.load(toml)
    assert course.package == PACKAGE and not list(root.rglob("fx_course"))
    return course


def test_find_tree_knows_each_kind_of_tree_by_the_courses_package(renamed: Course, tmp_path: Path) -> None:
    """Are a practice folder, the repository's solution and an override found by `counting/`, not
    `pi_course/`?"""
    checkpoint = renamed.checkpoint("a1")
    folder = practice.create(renamed, checkpoint, tmp_path / "mine")
    # A kit checkout elsewhere has moved on: the folder's own course.toml snapshot still names the package.
    assert course_of(folder).package == PACKAGE
    tree = nbhelp.find_tree(folder)
    assert (tree.kind, tree.package, tree.checkpoint) == ("practice", PACKAGE, "a1")
    assert tree.shown == f"./{PACKAGE} (practice folder: mine)"
    solution = nbhelp.find_tree(renamed.root / "notebooks", "a1")
    assert (solution.kind, solution.path) == ("solution", (renamed.root / checkpoint.solution).resolve())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(nbhelp.TREE_ENV, str(renamed.root / checkpoint.starter))
        override = nbhelp.find_tree(folder, "a1")
    assert (override.kind, override.package) == ("override", PACKAGE)


def test_use_tree_guards_the_courses_package_only(
    renamed: Course, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does use_tree name `counting`, refuse another `counting`, and leave an unrelated `pi_course` alone?"""
    folder = practice.create(renamed, renamed.checkpoint("a1"), tmp_path / "mine")
    unrelated = types.ModuleType("pi_course")
    unrelated.__file__ = str(tmp_path / "elsewhere" / "pi_course" / "__init__.py")
    monkeypatch.setitem(sys.modules, "pi_course", unrelated)
    assert nbhelp.use_tree(cwd=folder) == folder.resolve()
    assert capsys.readouterr().out.startswith(f"{PACKAGE} from: ./{PACKAGE}")
    other = types.ModuleType(PACKAGE)
    other.__file__ = str(renamed.root / "solutions" / "a1-counter" / PACKAGE / "__init__.py")
    monkeypatch.setitem(sys.modules, PACKAGE, other)
    with pytest.raises(KitError, match=f"a different {PACKAGE} is already imported"):
        nbhelp.use_tree(cwd=folder)


def test_the_lab_box_points_into_the_courses_package(renamed: Course) -> None:
    """Raised inside `counting/counter.py`, does the one-line box name that file and line?"""
    starter = renamed.root / renamed.checkpoint("a1").starter
    sys.path.insert(0, str(starter))
    try:
        module = __import__(PACKAGE)
        with pytest.raises(NotImplementedError) as raised:
            module.Counter().add()
    finally:
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]
    line = lab_errors.box(raised.value, raised.tb, PACKAGE)
    source = (starter / PACKAGE / "counter.py").read_text(encoding="utf-8").splitlines()
    where = next(n for n, text in enumerate(source, start=1) if '"1.1", "Counter.add"' in text)
    assert line == f"Lab 1.1 not finished: Counter.add · {PACKAGE}/counter.py:{where} · pi-course hint 1.1"


def test_the_check_fingerprint_follows_edits_in_the_courses_package(renamed: Course, tmp_path: Path) -> None:
    """Does an edit to `counting/counter.py` change the fingerprint that lets check() reuse a full run?"""
    checkpoint = renamed.checkpoint("a1")
    folder = practice.create(renamed, checkpoint, tmp_path / "mine")
    before = checks.fingerprint(renamed, checkpoint, folder)
    counter = folder / PACKAGE / "counter.py"
    counter.write_text(counter.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert checks.fingerprint(renamed, checkpoint, folder) != before


def test_nbrun_refuses_a_tree_without_the_courses_package(renamed: Course, tmp_path: Path) -> None:
    """Given the course's package name, does notebook_errors ask for `counting/`, and refuse a `pi_course/`
    tree?"""
    wrong = tmp_path / "wrong"
    (wrong / "pi_course").mkdir(parents=True)
    (wrong / "pi_course" / "__init__.py").write_text("", encoding="utf-8")
    notebook = renamed.root / renamed.checkpoint("a1").notebook
    assert nbrun.notebook_errors(notebook, wrong, package=PACKAGE) == [
        f"{wrong}: no {PACKAGE}/__init__.py; pass a tree holding the {PACKAGE} package"
    ]


@pytest.mark.slow
def test_a_notebook_runs_on_a_course_with_another_package(renamed: Course, tmp_path: Path) -> None:
    """In a real kernel, does use_tree find the `counting` starter and show its lab error as the one-line
    box?"""
    starter = renamed.root / renamed.checkpoint("a1").starter
    nb: Any = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    setup = 'from pi_course_kit.notebook.helpers import use_tree\ntree = use_tree("a1")'
    unfinished = nbformat.v4.new_code_cell(f"from {PACKAGE} import Counter\nCounter().add()")  # type: ignore[no-untyped-call]
    unfinished.metadata["tags"] = [nbrun.RAISES_TAG]
    nb.cells = [nbformat.v4.new_code_cell(setup), unfinished]  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "other.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert nbrun.notebook_errors(path, starter, package=renamed.package, allow_lab_errors=True) == []
    executed = nbrun.execute(nbrun.load(path), cwd=starter, env=nbrun.kernel_env(starter))
    first = "".join(out.get("text", "") for out in executed.cells[0].outputs)
    assert first.startswith(f"{PACKAGE} from: {nbhelp.TREE_ENV} → {starter.resolve()}")
    (error,) = executed.cells[1].outputs
    assert error.ename == nbrun.LAB_ERROR
    assert error.traceback[0].startswith(f"Lab 1.1 not finished: Counter.add · {PACKAGE}/counter.py:")
