"""The learner's copy of a checkpoint notebook: same cells, no stored outputs, no repository-only cells.

The repository copy keeps the solution's outputs for reading on a code host. A practice folder must not:
they would show the reference answers and a finished lab before the learner has written anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_course_kit.core.files import replace_file, write_text_atomically

if TYPE_CHECKING:
    from nbformat import NotebookNode

# Cells that only make sense in the repository copy (the "outputs come from the solution" banner).
REPO_ONLY_TAG = "repo-only"


#: Notebook-level metadata a run leaves behind (the widgets' stored state): the solution's, not the learner's.
RUN_METADATA = ("widgets",)


def strip(nb: NotebookNode) -> NotebookNode:
    """Remove outputs, execution counts and repository-only cells from `nb` (in place) and return it."""
    nb.cells = [cell for cell in nb.cells if REPO_ONLY_TAG not in cell.get("metadata", {}).get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)
    for key in RUN_METADATA:
        nb.get("metadata", {}).pop(key, None)
    return nb


def strip_json(data: dict[str, Any]) -> dict[str, Any]:
    """`strip` on the plain JSON of an nbformat-4 notebook (standard library only: the wheel's build uses
    it)."""
    data["cells"] = [c for c in data["cells"] if REPO_ONLY_TAG not in c.get("metadata", {}).get("tags", [])]
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cell.get("metadata", {}).pop("execution", None)
    for key in RUN_METADATA:
        data.get("metadata", {}).pop(key, None)
    return data


def learner_text(source: Path) -> str:
    """The learner's copy of the notebook `source` as text, written the way nbformat writes notebooks."""
    data = strip_json(json.loads(source.read_text(encoding="utf-8")))
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def write_learner_copy(source: Path, target: Path) -> None:
    """Write the learner's copy of the notebook `source` to `target` (through a temporary file)."""
    try:
        import nbformat
    except ImportError:
        # `scripts/practice` runs on the standard library alone, before the kit is installed; a notebook
        # is JSON, so its outputs can be dropped without nbformat there.
        write_text_atomically(target, learner_text(source))
        return
    nb: NotebookNode = nbformat.read(source, as_version=4)  # type: ignore[no-untyped-call]
    strip(nb)
    replace_file(target, lambda tmp: nbformat.write(nb, tmp))  # type: ignore[no-untyped-call]
