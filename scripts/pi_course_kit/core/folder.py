"""A practice folder on disk: find its root from any subfolder, read and update `.pi-course/meta.json`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import describe_os_error, write_json_atomically
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import FolderMeta

META_DIR = ".pi-course"
META_FILE = "meta.json"
#: Held (flock) around every read-modify-write of meta.json, so two commands never interleave their writes.
META_LOCK = "meta.lock"
#: A pristine copy of the kit's own files (tests/, pytest.ini, the guides), kept for `reset --kit`.
KIT_DIR = "kit"
#: Where a practice folder keeps its metadata, relative to its root.
META_PATH = Path(META_DIR) / META_FILE
STARTER_DIR = "starter"
BACKUP_DIR = "backups"
#: 2: the lab table is no longer copied into meta.json; the folder's course.toml snapshot is the one.
META_FORMAT = 2
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
    """A practice folder: its root and the metadata written when it was made, typed (`FolderMeta`)."""

    root: Path
    meta: FolderMeta

    @property
    def meta_path(self) -> Path:
        """Where meta.json lives."""
        return self.root / META_DIR / META_FILE

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint this folder practises, e.g. "06"."""
        return self.meta.checkpoint

    @property
    def starter_dir(self) -> Path:
        """The pristine starter copy of the teaching files, kept for `reset`."""
        return self.root / META_DIR / STARTER_DIR

    @property
    def course_path(self) -> Path | None:
        """The manifest this folder was made from (its own snapshot), or None for an older folder."""
        path = self.root / META_DIR / COURSE_SNAPSHOT
        return path if path.is_file() else None

    def made_from(self) -> tuple[Course, Checkpoint]:
        """The course this folder was made from (its snapshot; the installed one for an older folder), and
        the checkpoint it practises: the one lab table check, watch, hint and reset all read."""
        course = manifest.load(self.course_path)
        return course, course.checkpoint(self.checkpoint_id)

    def relative(self, path: Path) -> str:
        """A path as the learner sees it from the folder root."""
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply `change` to the metadata as it is on disk now, and write it back (one read-modify-write).

        Every writer goes through here: a command that opened the folder minutes ago (watch) must not
        write back its stale copy over what another command (hint) recorded since. The lock orders
        concurrent writers; the rename means a crash mid-write leaves the old file. Raises OSError
        where the folder cannot be written (read-only), KitError where meta.json became unreadable.
        """
        with _meta_lock(self.root / META_DIR):
            current = read_meta(self.meta_path)
            change(current)
            write_json_atomically(self.meta_path, current)
        self.meta = FolderMeta.from_json(current)

    @property
    def packages(self) -> set[str]:
        """The top folders of the teaching files: the learner's package (e.g. `pi_course`)."""
        return {Path(name).parts[0] for name in self.meta.teaching_files if name}

    def kit_files(self) -> list[str]:
        """The files the kit shipped that are never the learner's: everything outside their package."""
        shipped = self.meta.files
        packages = self.packages
        return sorted(name for name in shipped if Path(name).parts[0] not in packages)

    def missing_test_files(self) -> list[str]:
        """Shipped test machinery (tests/, pytest.ini) that is gone: without it no check can run."""
        needed = [name for name in self.kit_files() if name == "pytest.ini" or name.startswith("tests/")]
        missing = [name for name in needed if not (self.root / name).is_file()]
        if any(name.startswith("tests/") for name in missing) and not (self.root / "tests").is_dir():
            return ["tests/", *(name for name in missing if not name.startswith("tests/"))]
        return missing

    def changes(self) -> dict[str, list[str]]:
        """Files modified, deleted and added since the folder was made (by sha256)."""
        shipped = self.meta.files
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
        try:
            if (folder / META_DIR / META_FILE).is_file():
                return folder
        except OSError as error:  # a folder we may not look into (no x permission)
            raise KitError(
                _("cannot look for a practice folder in {folder}: {reason}").format(
                    folder=folder, reason=describe_os_error(error)
                )
            ) from None
    raise KitError(
        _(
            "{here} is not inside a practice folder (no {meta} above it); make one with "
            "`pi-course practice CHECKPOINT DIR` (`pi-course checkpoint` lists them) and cd into it"
        ).format(here=here, meta=f"{META_DIR}/{META_FILE}")
    )


@contextlib.contextmanager
def _meta_lock(meta_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `.pi-course/meta.lock` (where the platform has flock)."""
    try:
        import fcntl
    except ImportError:  # no flock: the atomic rename alone still keeps the file whole
        yield
        return
    handle = os.open(meta_dir / META_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


def read_meta(path: Path) -> dict[str, Any]:
    """The metadata in `path`, or a KitError saying it is unreadable and what to do."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KitError(
            _(
                "{path}: cannot read the practice metadata ({error}); make a fresh folder with "
                "`pi-course practice`"
            ).format(path=path, error=error)
        ) from None
    if not isinstance(meta, dict) or "checkpoint" not in meta:
        raise KitError(
            _("{path}: has no 'checkpoint' key; make a fresh folder with `pi-course practice`").format(
                path=path
            )
        )
    damaged = [key for key, valid in _META_SHAPE.items() if key in meta and not valid(meta[key])]
    if damaged:
        raise KitError(
            _("{path}: the entry {keys} is damaged; make a fresh folder with `pi-course practice`").format(
                path=path, keys=", ".join(damaged)
            )
        )
    return migrate_meta(meta, path)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item for item in value)


#: What the commands rely on in meta.json, checked when it is read: a hand-edited file fails in one line.
_META_SHAPE: dict[str, Callable[[object], bool]] = {
    "checkpoint": lambda value: isinstance(value, str),
    "teaching_files": _strings,
    "files": lambda value: isinstance(value, dict) and all(isinstance(key, str) and key for key in value),
}


def _from_format_0(meta: dict[str, Any]) -> None:
    """Format 0 (no `format` key, the first kits): the same fields, some of them not yet written."""
    meta.setdefault("files", {})
    meta.setdefault("hints", {})


def _from_format_1(meta: dict[str, Any]) -> None:
    """Format 1 kept a copy of the lab table; the folder's course.toml snapshot is the only one now."""
    meta.pop("labs", None)


#: Format N -> the step that brings metadata of format N to N + 1 (in memory; written by the next update).
MIGRATIONS = {0: _from_format_0, 1: _from_format_1}


def migrate_meta(meta: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """Metadata in this kit's format: an older folder's is migrated, a newer kit's is refused."""
    found = meta.get("format", 0)
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise KitError(
            _(
                "{path}: cannot read the practice metadata ({error}); make a fresh folder with "
                "`pi-course practice`"
            ).format(path=path, error=f"format {found!r}")
        )
    if found > META_FORMAT:
        raise KitError(
            _(
                "{path} was made by a newer pi-course kit (format {found}, this kit reads up to {known}): "
                "upgrade the kit, then run the command again"
            ).format(path=path, found=found, known=META_FORMAT)
        )
    for version in range(found, META_FORMAT):
        MIGRATIONS[version](meta)
    meta["format"] = META_FORMAT
    return meta


def keep_kit_copy(root: Path, package: str) -> None:
    """Copy every file of a folder being made, outside the learner's package, into `.pi-course/kit/`.

    Those files (tests/, pytest.ini, the guides, the notebook) are the kit's, never the learner's:
    `pi-course reset --kit` puts them back from this copy when they are deleted or changed.
    """
    kit = root / META_DIR / KIT_DIR
    for name in tracked_files(root):
        if Path(name).parts[0] != package:
            (kit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, kit / name)


def write_new_meta(root: Path, meta: dict[str, Any]) -> None:
    """The first meta.json of a folder being made (in its temporary place, before anyone can read it)."""
    write_json_atomically(root / META_DIR / META_FILE, meta)


def open_folder(start: Path | None = None) -> PracticeFolder:
    """Find and read the practice folder that holds `start` (default: the current directory)."""
    root = find_root(start)
    return PracticeFolder(root, FolderMeta.from_json(read_meta(root / META_DIR / META_FILE)))
