"""Each checkpoint notebook as people open it: the repository's copy (the solution's outputs) and a
learner's copy run in a fresh practice folder (the starter), each made once per session.

The solution's run is the committed notebook itself: its outputs come from the solution, and
test_notebook_checkpoints proves they equal a fresh run (`test_stored_outputs_are_fresh`), so running
it again here would only cost time. The starter is seen where a learner sees it, in a practice folder
made by `pi-course practice`: that one run serves the starter's lab boxes, the practice folder's own
checks, the well-formedness test and the browser test. (Running the repository's copy on `labs/` as
well would execute the same starter code a second time, about 25 s per checkpoint.)
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

#: The copies of a notebook that are looked at: the reference solution's (as the repository shows it)
#: and a learner's, run in a fresh practice folder on the starter (before any lab is done).
TREES = ("solution", "practice")
#: Read at collection time: every checkpoint that course.toml gives a notebook, with each tree.
RUNS = [(c.id, tree) for c in real_checkpoints() if c.notebook for tree in TREES]


def executed(checkpoint_id: str, tree: str) -> NotebookNode:
    """A copy of the notebook of `checkpoint_id` as `tree` ("solution" or "practice") shows it."""
    if tree == "solution":
        course = manifest.load(REPO / "course.toml")
        return nbrun.load(course.root / course.checkpoint(checkpoint_id).notebook)
    return practice_run(checkpoint_id)[1]


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
