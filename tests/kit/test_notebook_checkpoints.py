"""Every checkpoint notebook named in course.toml: valid, fresh, runnable, friendly on the starter, clean in
practice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import notebook_runs
import pytest
from nbformat import NotebookNode
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import practice
from pi_course_kit.notebook import nbrun
from pi_course_kit.notebook.learner_copy import REPO_ONLY_TAG


@pytest.fixture(scope="module")
def course(real_course: Course) -> Course:
    """The real course: these tests run every checkpoint notebook course.toml names."""
    return real_course


# Read at collection time so that each checkpoint with a notebook gets its own tests.
WITH_NOTEBOOK = [c.id for c in manifest.load().checkpoints if c.notebook]
BOX = re.compile(r"^Lab \S+ 未完成：\S+ · pi_course/[\w/]+\.py:\d+ · pi-course hint \S+$")
PROGRESS_ROW = re.compile(r"^\s+(\S+)\s+\d+/\d+\s+(\S+)", re.MULTILINE)


@pytest.fixture(scope="module", params=WITH_NOTEBOOK)
def cp(request: pytest.FixtureRequest, course: Course) -> Checkpoint:
    """One checkpoint that has a notebook."""
    return course.checkpoint(request.param)


@pytest.fixture(scope="module")
def path(course: Course, cp: Checkpoint) -> Path:
    """The checkpoint's notebook in the repository."""
    return course.root / cp.notebook


@pytest.fixture(scope="module")
def stored(path: Path) -> NotebookNode:
    """The notebook as committed."""
    return nbrun.load(path)


@pytest.fixture(scope="module")
def repo_run(cp: Checkpoint) -> NotebookNode:
    """The notebook run as a reader of the repository runs it (the solution); shared across test files."""
    return notebook_runs.repo_run(cp.id)


@pytest.fixture(scope="module")
def fresh_practice(course: Course, cp: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A practice folder made by `pi-course practice`, untouched."""
    return practice.create(course, cp, tmp_path_factory.mktemp("practice") / f"p{cp.id}")


def code_cells(nb: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def output_text(cell: NotebookNode) -> str:
    """Everything a reader can see in a cell's outputs, as one string."""
    return json.dumps(cell.get("outputs", []), ensure_ascii=False)


# ----------------------------------------------------------------------------- stored notebook, no kernel


def test_notebook_is_valid_and_each_code_cell_names_its_step(stored: NotebookNode, cp: Checkpoint) -> None:
    """Is the notebook valid nbformat, does each code cell start with `# Step`, the first naming its
    checkpoint?"""
    assert nbrun.validation_errors(stored) == []
    cells = code_cells(stored)
    assert all(cell.source.startswith("# Step ") and " · " in cell.source.splitlines()[0] for cell in cells)
    assert f'use_tree("{cp.id}")' in cells[0].source
    assert stored.metadata["kernelspec"]["name"] == nbrun.KERNEL_NAME


def test_repository_copy_says_its_outputs_come_from_the_solution(stored: NotebookNode) -> None:
    """Is the first cell a repository-only note that the stored outputs are the reference solution's?"""
    first = stored.cells[0]
    assert REPO_ONLY_TAG in first.metadata.get("tags", []) and "参考解" in first.source


def test_stored_outputs_hold_no_volatile_values(stored: NotebookNode) -> None:
    """Are the committed outputs free of raw timestamps, addresses and temp paths, and not empty?"""
    outputs = [out for cell in code_cells(stored) for out in cell.outputs]
    assert outputs, "committed without outputs; run " + nbrun.REFRESH_COMMAND
    raw = json.dumps(outputs, ensure_ascii=False)
    assert nbrun.normalise_text(raw) == raw


def test_fresh_practice_copy_has_no_outputs_and_never_names_solutions(
    fresh_practice: Path, path: Path
) -> None:
    """In a new practice folder, is the notebook free of stored outputs, of the banner, and of
    `solutions/`?"""
    nb = nbrun.load(fresh_practice / path.name)
    assert [out for cell in code_cells(nb) for out in cell.outputs] == []
    assert all(REPO_ONLY_TAG not in cell.metadata.get("tags", []) for cell in nb.cells)
    assert "solutions/" not in (fresh_practice / path.name).read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- executed


@pytest.mark.slow
def test_solution_run_has_no_error_outputs(repo_run: NotebookNode, cp: Checkpoint) -> None:
    """Run from the repository, does every cell finish without an error, on that checkpoint's solution?"""
    assert nbrun.cell_errors(repo_run) == []
    assert cp.solution in output_text(code_cells(repo_run)[0])


@pytest.mark.slow
def test_stored_outputs_are_fresh(cp: Checkpoint, stored: NotebookNode, repo_run: NotebookNode) -> None:
    """Do the committed outputs equal a fresh solution run (volatile parts aside)?"""
    assert nbrun.stale_cells(stored, repo_run, path=cp.notebook) == []


@pytest.mark.slow
def test_starter_errors_are_one_line_lab_boxes(path: Path, course: Course, cp: Checkpoint) -> None:
    """On the starter, in a fresh practice folder, is every error an expected lab error in a tagged cell,
    shown as one line, not a traceback?"""
    if cp.observation:
        pytest.skip(f"{cp.id} is an observation checkpoint: its starter is its target, with no lab to show")
    # The practice folder's run is shared with the well-formedness and browser tests: executed once per
    # session.
    executed = notebook_runs.executed(cp.id, "practice")
    assert nbrun.validation_errors(executed) == []
    assert nbrun.cell_errors(executed, allow_lab_errors=True, name=path.name) == []
    errors = [out for cell in code_cells(executed) for out in cell.outputs if out.output_type == "error"]
    assert errors, "the starter's unfinished labs should show up"
    for error in errors:
        assert error.ename == nbrun.LAB_ERROR
        assert len(error.traceback) == 1 and BOX.match(error.traceback[0]), error.traceback


@pytest.mark.slow
def test_practice_run_shows_its_own_code_and_no_lab_of_its_own_done(path: Path, cp: Checkpoint) -> None:
    """Run in a fresh practice folder, does it name that folder, never `solutions/`, no own lab done, the
    parent's done?"""
    if cp.observation:
        pytest.skip(f"{cp.id} is an observation checkpoint: every step is done from the start, by design")
    fresh_practice, executed = notebook_runs.practice_run(cp.id)
    cells = code_cells(executed)
    assert f"练习目录：{fresh_practice.name}" in output_text(cells[0])
    assert all("solutions/" not in output_text(cell) for cell in cells)
    own = {lab.id for lab in cp.tree_labs if not lab.inherited}
    carried = {lab.id for lab in cp.tree_labs if lab.inherited and not lab.optional}
    progress = [c for c in cells if "progress()" in c.source]
    assert progress, "the notebook has a progress cell"
    for cell in progress:
        text = "".join(out.data["text/plain"] for out in cell.outputs if "data" in out)
        rows = dict(PROGRESS_ROW.findall(text))
        assert own <= set(rows), text
        # The terminal report's words for `done` (the kernel speaks the course language, Chinese).
        assert all(rows[lab] != "已完成" for lab in own), text
        assert all(rows[lab] == "已完成" for lab in carried), text
