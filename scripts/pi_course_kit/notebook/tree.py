"""Which `pi_course` a notebook kernel imports: the override, the practice folder, or the solution.

Only the notebook kernel (its own interpreter) imports `pi_course`; this module never does.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_PATH
from pi_course_kit.notebook import lab_errors

TREE_ENV = "PI_COURSE_TREE"
PACKAGE = "pi_course"
META = META_PATH

_current: Tree | None = None


@dataclass(frozen=True)
class Tree:
    """The folder whose `pi_course` the notebook runs, and how it was found."""

    path: Path
    kind: str  # "practice", "solution", "override"
    shown: str  # what the notebook prints: stable across machines
    checkpoint: str


def _has_package(folder: Path) -> bool:
    return (folder / PACKAGE / "__init__.py").is_file()


def _checkpoint_of(folder: Path, given: str | None) -> str:
    meta = folder / META
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    value = data.get("checkpoint") if isinstance(data, dict) else None
    if isinstance(value, str) and value:
        return value
    if given:
        return given
    raise KitError(f'{folder} has no {META}; name the checkpoint, e.g. use_tree("<id>") as in course.toml')


def find_tree(cwd: Path | None = None, checkpoint: str | None = None) -> Tree:
    """Decide which tree a notebook started in `cwd` runs: env override, practice folder, or the solution."""
    cwd = (cwd or Path.cwd()).resolve()
    override = os.environ.get(TREE_ENV, "").strip()
    if override:
        path = Path(override).expanduser().resolve()
        if not _has_package(path):
            raise KitError(
                f"{TREE_ENV}={override} has no {PACKAGE}/__init__.py; point it at a folder holding {PACKAGE}/ "
                f"or unset it"
            )
        return Tree(path, "override", f"{TREE_ENV} → {path}", _checkpoint_of(path, checkpoint))
    if _has_package(cwd):
        return Tree(cwd, "practice", f"./{PACKAGE}（练习目录：{cwd.name}）", _checkpoint_of(cwd, checkpoint))
    for root in (cwd.parent, cwd):
        if (root / "course.toml").is_file():
            if not checkpoint:
                raise KitError('in the repository, name the checkpoint: use_tree("<id>") as in course.toml')
            course = manifest.load(root / "course.toml")
            solution = course.root / course.checkpoint(checkpoint).solution
            if _has_package(solution):
                shown = os.path.relpath(solution, cwd)
                return Tree(solution, "solution", f"{shown}（仓库里的参考解）", checkpoint)
    raise KitError(
        f"no {PACKAGE} tree found from {cwd}; open the notebook from a practice folder (next to {PACKAGE}/), "
        f"from the repository's notebooks/ folder, or set {TREE_ENV}=/path/to/tree"
    )


def use_tree(checkpoint: str | None = None, *, cwd: Path | None = None, quiet: bool = False) -> Path:
    """Put the notebook's tree first on sys.path, refuse a different `pi_course`, install friendly lab errors."""
    global _current
    tree = find_tree(cwd, checkpoint)
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if tree.path not in origin.parents:
            raise KitError(
                f"a different {PACKAGE} is already imported from {origin.parent}; restart the kernel "
                f"so that {tree.path} is the only one"
            )
    entry = str(tree.path)
    # Remove then insert, so a re-run keeps exactly one entry and it stays first.
    sys.path[:] = [item for item in sys.path if item != entry]
    sys.path.insert(0, entry)
    _current = tree
    lab_errors.install()
    if not quiet:
        print(f"pi_course 来自：{tree.shown}")
    return tree.path


def current_tree() -> Tree:
    """The tree chosen by the last `use_tree()` call in this kernel."""
    if _current is None:
        raise KitError("no tree chosen yet; run the first code cell (use_tree()) before this one")
    return _current
