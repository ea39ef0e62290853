"""The learner's copy of a checkpoint notebook: same cells, no stored outputs, no repository-only cells.

The repository copy keeps the solution's outputs for reading on a code host. A practice folder must not:
they would show the reference answers and a finished lab before the learner has written anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbformat import NotebookNode

# Cells that only make sense in the repository copy (the "outputs come from the solution" banner).
REPO_ONLY_TAG = "repo-only"


def strip(nb: NotebookNode) -> NotebookNode:
    """Remove outputs, execution counts and repository-only cells from `nb` (in place) and return it."""
    nb.cells = [cell for cell in nb.cells if REPO_ONLY_TAG not in cell.get("metadata", {}).get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)
    return nb


def write_learner_copy(source: Path, target: Path) -> None:
    """Write the learner's copy of the notebook `source` to `target` (through a temporary file)."""
    nb: NotebookNode = nbformat.read(source, as_version=4)  # type: ignore[no-untyped-call]
    strip(nb)
    tmp = target.with_name(f".{target.name}.tmp")
    nbformat.write(nb, tmp)  # type: ignore[no-untyped-call]
    os.replace(tmp, target)
