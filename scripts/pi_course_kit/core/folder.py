"""A practice folder on disk: find its root from any subfolder, read and update `.pi-course/meta.json`."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import write_json_atomically

META_DIR = ".pi-course"
META_FILE = "meta.json"
#: Where a practice folder keeps its metadata, relative to its root.
META_PATH = Path(META_DIR) / META_FILE
STARTER_DIR = "starter"
BACKUP_DIR = "backups"
META_FORMAT = 1
#: The folder keeps the manifest it was made from, so hint/reset/check work wherever the kit is installed.
COURSE_SNAPSHOT = "course.toml"
# Folders that tools create while the learner works; never part of what was shipped or changed.
NOISE = frozenset(
    {META_DIR, "__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", ".mypy_cache"}
)


def sha256_file(path: Path) -> str:
    """The hex sha256 of one file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tracked_files(root: Path) -> list[str]:
    """Every file under `root` (posix relative paths, sorted), skipping caches and the kit's own folder."""
    found: list[str] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in NOISE)
        base = Path(current)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                continue
            found.append((base / name).relative_to(root).as_posix())
    return sorted(found)


def hash_files(root: Path, names: Iterable[str]) -> dict[str, str]:
    """Map each relative path to the sha256 of its content."""
    return {name: sha256_file(root / name) for name in names}


@dataclass
class PracticeFolder:
    """A practice folder: its root and the metadata written when it was made."""

    root: Path
    meta: dict[str, Any]

    @property
    def meta_path(self) -> Path:
        """Where meta.json lives."""
        return self.root / META_DIR / META_FILE

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint this folder practises, e.g. "06"."""
        return str(self.meta["checkpoint"])

    @property
    def starter_dir(self) -> Path:
        """The pristine starter copy of the teaching files, kept for `reset`."""
        return self.root / META_DIR / STARTER_DIR

    @property
    def course_path(self) -> Path | None:
        """The manifest this folder was made from (its own snapshot), or None for an older folder."""
        path = self.root / META_DIR / COURSE_SNAPSHOT
        return path if path.is_file() else None

    def relative(self, path: Path) -> str:
        """A path as the learner sees it from the folder root."""
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def save(self) -> None:
        """Write meta.json atomically: a crash mid-write leaves the old file."""
        write_json_atomically(self.meta_path, self.meta)

    def changes(self) -> dict[str, list[str]]:
        """Files modified, deleted and added since the folder was made (by sha256)."""
        shipped: dict[str, str] = self.meta.get("files", {})
        now = tracked_files(self.root)
        modified = [
            name for name in now if name in shipped and sha256_file(self.root / name) != shipped[name]
        ]
        deleted = [name for name in shipped if not (self.root / name).is_file()]
        added = [name for name in now if name not in shipped]
        return {"modified": modified, "deleted": sorted(deleted), "added": added}


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding `.pi-course/meta.json`."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / META_DIR / META_FILE).is_file():
            return folder
    raise KitError(
        f"{here} is not inside a practice folder (no {META_DIR}/{META_FILE} above it); "
        "make one with `pi-course practice CHECKPOINT DIR` (`pi-course checkpoint` lists them) and cd into it"
    )


def open_folder(start: Path | None = None) -> PracticeFolder:
    """Find and read the practice folder that holds `start` (default: the current directory)."""
    root = find_root(start)
    path = root / META_DIR / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise KitError(
            f"{path}: cannot read the practice metadata ({error}); make a fresh folder with `pi-course practice`"
        ) from None
    if not isinstance(meta, dict) or "checkpoint" not in meta:
        raise KitError(f"{path}: has no 'checkpoint' key; make a fresh folder with `pi-course practice`")
    return PracticeFolder(root, meta)
