"""Each checkpoint notebook run on the solution, the starter and in a practice folder, once per session.

The solution's run is the committed notebook itself: its outputs come from the solution, and
test_notebook_checkpoints proves they equal a fresh run (`test_stored_outputs_are_fresh`), so running
it again here would only cost time. The starter's run is executed here, once; the well-formedness test
and the browser test share it.
"""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from conftest import REPO, real_checkpoints
from nbformat import NotebookNode
from pi_course_kit.core import manifest
from pi_course_kit.learner import practice
from pi_course_kit.notebook import nbrun

#: The trees a notebook is run on: the reference solution (as the repository shows it) and the starter
#: (what a learner sees before any lab is done).
TREES = ("solution", "starter")
#: Read at collection time: every checkpoint that course.toml gives a notebook, with each tree.
RUNS = [(c.id, tree) for c in real_checkpoints() if c.notebook for tree in TREES]


@cache
def _executed(checkpoint_id: str, tree: str) -> NotebookNode:
    course = manifest.load(REPO / "course.toml")
    checkpoint = course.checkpoint(checkpoint_id)
    path = course.root / checkpoint.notebook
    if tree == "solution":
        return nbrun.load(path)
    starter = (course.root / checkpoint.starter).resolve()
    return nbrun.execute(nbrun.load(path), cwd=starter, env=nbrun.kernel_env(starter))


def executed(checkpoint_id: str, tree: str) -> NotebookNode:
    """A copy of the notebook of `checkpoint_id` executed on `tree` ("solution" or "starter")."""
    return copy.deepcopy(_executed(checkpoint_id, tree))


def rich_outputs(nb: NotebookNode, mime: str) -> Iterator[tuple[str, str]]:
    """(where, data) for every output of `nb` that carries `mime`; `where` names the cell's step."""
    for index, cell in enumerate(nb.cells, start=1):
        for number, output in enumerate(cell.get("outputs", []), start=1):
            data = output.get("data", {}).get(mime)
            if data is not None:
                text = "".join(data) if isinstance(data, list) else str(data)
                yield f"cell {index} ({nbrun.first_line(cell)}) output {number}", text


@cache
def _repo_run(checkpoint_id: str) -> NotebookNode:
    course = manifest.load(REPO / "course.toml")
    return nbrun.repo_run(course.root / course.checkpoint(checkpoint_id).notebook)


def repo_run(checkpoint_id: str) -> NotebookNode:
    """A copy of the notebook executed as a reader of the repository runs it (kernel in notebooks/)."""
    return copy.deepcopy(_repo_run(checkpoint_id))


@cache
def _practice_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="pi-course-notebook-practice-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


@cache
def _practice_run(checkpoint_id: str) -> tuple[Path, NotebookNode]:
    course = manifest.load(REPO / "course.toml")
    checkpoint = course.checkpoint(checkpoint_id)
    folder = practice.create(course, checkpoint, _practice_home() / f"p{checkpoint_id}")
    notebook = folder / Path(checkpoint.notebook).name
    return folder, nbrun.execute(nbrun.load(notebook), cwd=folder, env=nbrun.kernel_env(None))


def practice_run(checkpoint_id: str) -> tuple[Path, NotebookNode]:
    """A fresh practice folder made by `pi-course practice`, and a copy of its notebook run from there.

    The folder is shared by every test that asks for it: treat it as read-only.
    """
    folder, executed = _practice_run(checkpoint_id)
    return folder, copy.deepcopy(executed)
