"""Which course package a notebook kernel imports: the override, the practice folder, or the solution.

Only the notebook kernel (its own interpreter) imports the package; this module never does. Its name
comes from the course manifest the tree belongs to (`Course.package`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import COURSE_SNAPSHOT, META_DIR, META_PATH
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import MANIFEST, course_manifest
from pi_course_kit.core.manifest import Course
from pi_course_kit.core.records import FolderMeta
from pi_course_kit.notebook import lab_errors

TREE_ENV = "PI_COURSE_TREE"
META = META_PATH

_current: Tree | None = None


@dataclass(frozen=True)
class Tree:
    """The folder whose course package the notebook runs, and how it was found."""

    path: Path
    kind: str  # "practice", "solution", "override"
    shown: str  # what the notebook prints: stable across machines
    checkpoint: str
    package: str  # the course's package, e.g. "pi_course", from the manifest the tree belongs to


def course_of(folder: Path) -> Course:
    """The course a tree belongs to: a practice folder's snapshot, the nearest course.toml above, or the
    located one."""
    folder = folder.resolve()
    # A practice folder keeps the manifest it was made from; the kit's own may since have moved on.
    snapshot = folder / META_DIR / COURSE_SNAPSHOT
    if snapshot.is_file():
        return manifest.load(snapshot)
    for root in (folder, *folder.parents):
        if (root / MANIFEST).is_file():
            return manifest.load(root / MANIFEST)
    return manifest.load(course_manifest())


def _has_package(folder: Path, package: str) -> bool:
    return (folder / package / "__init__.py").is_file()


def _checkpoint_of(folder: Path, given: str | None) -> str:
    meta = folder / META
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    with contextlib.suppress(ValueError):  # no checkpoint in it
        if value := FolderMeta.from_json(data).checkpoint:
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
        package = course_of(path).package
        if not _has_package(path, package):
            raise KitError(
                f"{TREE_ENV}={override} has no {package}/__init__.py; point it at a folder holding "
                f"{package}/ or unset it"
            )
        return Tree(path, "override", f"{TREE_ENV} → {path}", _checkpoint_of(path, checkpoint), package)
    course = course_of(cwd)
    package = course.package
    if _has_package(cwd, package):
        shown = _("./{package} (practice folder: {folder})").format(package=package, folder=cwd.name)
        return Tree(cwd, "practice", shown, _checkpoint_of(cwd, checkpoint), package)
    # The repository itself: the notebook sits in notebooks/ (or at the root) of the course checkout.
    if course.path.name == MANIFEST and course.root in (cwd.parent, cwd):
        if not checkpoint:
            raise KitError('in the repository, name the checkpoint: use_tree("<id>") as in course.toml')
        solution = course.root / course.checkpoint(checkpoint).solution
        if _has_package(solution, package):
            shown = os.path.relpath(solution, cwd)
            shown = _("{path} (the repository's reference solution)").format(path=shown)
            return Tree(solution, "solution", shown, checkpoint, package)
    raise KitError(
        f"no {package} tree found from {cwd}; open the notebook from a practice folder (next to {package}/), "
        f"from the repository's notebooks/ folder, or set {TREE_ENV}=/path/to/tree"
    )


def use_tree(checkpoint: str | None = None, *, cwd: Path | None = None, quiet: bool = False) -> Path:
    """Put the notebook's tree first on sys.path, refuse another copy of its package, install friendly lab
    errors."""
    global _current
    tree = find_tree(cwd, checkpoint)
    loaded = sys.modules.get(tree.package)
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if tree.path not in origin.parents:
            raise KitError(
                f"a different {tree.package} is already imported from {origin.parent}; restart the kernel "
                f"so that {tree.path} is the only one"
            )
    entry = str(tree.path)
    # Remove then insert, so a re-run keeps exactly one entry and it stays first.
    sys.path[:] = [item for item in sys.path if item != entry]
    sys.path.insert(0, entry)
    _current = tree
    lab_errors.install(tree.package)
    if not quiet:
        print(_("{package} from: {tree}").format(package=tree.package, tree=tree.shown))
    return tree.path


def current_tree() -> Tree:
    """The tree chosen by the last `use_tree()` call in this kernel."""
    if _current is None:
        raise KitError("no tree chosen yet; run the first code cell (use_tree()) before this one")
    return _current
