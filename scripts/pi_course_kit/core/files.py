"""Writes that never leave half a file or half a folder behind: build next to the target, then rename."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.i18n import _


def describe_os_error(error: OSError) -> str:
    """One line for a failed file operation: which path, what went wrong, and what the learner can do."""
    path = error.filename if error.filename is not None else ""
    advice = {
        errno.EROFS: _("the file system is read-only; work in a folder you can write to"),
        errno.EACCES: _("permission denied; use a folder you can read and write, or fix its permissions"),
        errno.EPERM: _("permission denied; use a folder you can read and write, or fix its permissions"),
        errno.ENOTDIR: _(
            "a file stands where a folder should be; move that file away or choose another path"
        ),
        errno.ENOENT: _("no such file or folder; check the path"),
        errno.ENOSPC: _("no space left on the device; free some space and try again"),
        errno.EDQUOT: _("no space left on the device; free some space and try again"),
    }.get(error.errno or 0)
    reason = advice or _("{reason}; check the path and try again").format(reason=error.strerror or error)
    return f"{path}: {reason}" if path else reason


def current_umask() -> int:
    """The process umask (reading it means setting it; put it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_file(path: Path, write: Callable[[Path], None]) -> None:
    """Let `write` fill a temporary file next to `path`, then rename it over `path` (keeping its mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~current_umask()
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, mode)  # mkstemp makes 0600; the learner's files should look like any other
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """Replace a text file's content in one rename (UTF-8, newlines as given)."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="") as stream:
            stream.write(text)

    replace_file(path, write)


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Replace a JSON file in one rename (indented, UTF-8 kept readable)."""
    write_text_atomically(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def write_folder_atomically(dest: Path, fill: Callable[[Path], None]) -> Path:
    """Let `fill` build a folder next to `dest`, then rename it into place; a failure leaves nothing
    behind."""
    dest = dest.absolute()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise KitError(
            f"cannot create {dest}: a file stands in its path; choose a folder elsewhere"
        ) from None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    except OSError as error:
        raise KitError(
            _("cannot create {dest}: {reason}").format(dest=dest, reason=describe_os_error(error))
        ) from None
    try:
        fill(tmp)
        if dest.exists():
            dest.rmdir()  # only ever an empty folder: callers refuse non-empty ones first
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
