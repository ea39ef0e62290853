"""Each checkpoint notebook run on the solution and on the starter, once per test session.

The solution's run is the committed notebook itself: its outputs come from the solution, and
test_notebook_checkpoints proves they equal a fresh run (`test_stored_outputs_are_fresh`), so running
it again here would only cost time. The starter's run is executed here, once; the well-formedness test
and the browser test share it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache

from conftest import REPO, real_checkpoints
from nbformat import NotebookNode
from pi_course_kit.core import manifest
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
