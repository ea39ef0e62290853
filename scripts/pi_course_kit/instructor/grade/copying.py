"""Read and copy a submission through directory descriptors: no link followed, no race won, sizes checked
first.

Every file is opened relative to its already-open parent with O_NOFOLLOW, then checked with fstat on
that very descriptor (regular file, one link, size within limits) before a byte is read, and never
more than the checked size is read. Swapping a folder for a symlink mid-copy makes the open fail
instead of escaping; a hard link to a file elsewhere (nlink > 1) is refused rather than copied.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 20 * 1024 * 1024
MAX_FILES = 2000
MAX_DEPTH = 12
SKIPPED = ("__pycache__", ".pytest_cache", ".mypy_cache", ".hypothesis")
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY


class Refused(Exception):
    """The submission cannot be graded safely; the message names the entry and the reason."""


def shown(name: str) -> str:
    """A name as it may be printed: escapes for control characters and undecodable bytes."""
    return name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:120]


def check_name(name: str, where: str) -> None:
    """Refuse names that cannot be staged or shown safely (undecodable bytes, control characters)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"{where}{shown(name)}: the name is not valid UTF-8; rename it") from None
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise Refused(f"{where}{shown(name)}: the name holds a control character; rename it")


@contextmanager
def open_dir(path: Path | str, dir_fd: int | None = None) -> Iterator[int]:
    """An open directory descriptor for `path` (relative to `dir_fd`), never through a symlink."""
    try:
        handle = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        raise Refused(f"{shown(str(path))}: not a plain folder ({error.strerror})") from None
    try:
        yield handle
    finally:
        os.close(handle)


def _read_checked(dir_fd: int, name: str, limit: int, where: str) -> bytes:
    """The bytes of one regular, singly linked file of at most `limit` bytes."""
    try:
        handle = os.open(name, _FLAGS, dir_fd=dir_fd)
    except OSError as error:
        raise Refused(
            f"{where}{shown(name)}: cannot be opened safely ({error.strerror}; a symlink?)"
        ) from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{where}{shown(name)}: not a regular file (a device, pipe or socket)")
        if info.st_nlink > 1:
            raise Refused(f"{where}{shown(name)}: a hard link to another file; copy the content instead")
        if info.st_size > limit:
            raise Refused(f"{where}{shown(name)}: {info.st_size} bytes, more than the {limit} allowed")
        chunks, left = [], info.st_size + 1
        while left > 0:
            chunk = os.read(handle, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > info.st_size:
            raise Refused(f"{where}{shown(name)}: changed while it was read")
        return data
    finally:
        os.close(handle)


def read_file(folder: Path, relative: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """A small file of a submission, or None when it is missing; Refused when unsafe or too big."""
    parts = relative.split("/")
    with open_dir(folder) as top:
        handle = top
        opened: list[int] = []
        try:
            for part in parts[:-1]:
                try:
                    handle = os.open(part, _DIR_FLAGS, dir_fd=handle)
                except FileNotFoundError:
                    return None
                except OSError as error:
                    raise Refused(f"{relative}: not a plain folder ({error.strerror})") from None
                opened.append(handle)
            try:
                return _read_checked(
                    handle, parts[-1], limit, f"{'/'.join(parts[:-1])}/" if parts[:-1] else ""
                )
            except Refused:
                if not _exists(handle, parts[-1]):
                    return None
                raise
        finally:
            for fd in opened:
                os.close(fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


class Copier:
    """Copies one tree between two directory descriptors within the size and count limits."""

    def __init__(self, ignore: Callable[[str], bool] | None = None) -> None:
        self.total = 0
        self.files = 0
        #: Names skipped wherever they occur (an upload's operating-system litter, for instance).
        self.ignore = ignore

    def copy(self, source_fd: int, dest_fd: int, where: str, depth: int) -> None:
        """Copy every entry of `source_fd` into `dest_fd` (both open folders)."""
        if depth > MAX_DEPTH:
            raise Refused(f"folders nested deeper than {MAX_DEPTH} levels ({shown(where)}...)")
        with os.scandir(source_fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            check_name(name, where)
            if name in SKIPPED or name.endswith(".pyc") or (self.ignore is not None and self.ignore(name)):
                continue
            info = os.stat(name, dir_fd=source_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                with open_dir(name, source_fd) as child:
                    os.mkdir(name, 0o755, dir_fd=dest_fd)
                    with open_dir(name, dest_fd) as child_dest:
                        self.copy(child, child_dest, f"{where}{name}/", depth + 1)
                continue
            if stat.S_ISLNK(info.st_mode):
                raise Refused(f"{where}{shown(name)}: a symbolic link; submit the file itself")
            data = _read_checked(source_fd, name, MAX_FILE_BYTES, where)
            self.total, self.files = self.total + len(data), self.files + 1
            if self.total > MAX_TOTAL_BYTES or self.files > MAX_FILES:
                raise Refused(f"{where}: over {MAX_TOTAL_BYTES // 2**20} MiB or {MAX_FILES} files in all")
            handle = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dest_fd
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle, view) :]
            finally:
                os.close(handle)


def copy_package(folder: Path, package: str, dest: Path) -> None:
    """Copy `folder/package` into `dest/package` (dest must exist); Refused names the problem."""
    with open_dir(folder) as top, open_dir(package, top) as source, open_dir(dest) as target:
        os.mkdir(package, 0o755, dir_fd=target)
        with open_dir(package, target) as copy_dest:
            Copier().copy(source, copy_dest, f"{package}/", 1)


#: What macOS adds to a zip it makes: the AppleDouble folder and files (`__MACOSX/`, `._name`) and
#: Finder's `.DS_Store`. None of it is the learner's work.
MACOS_LITTER = ("__MACOSX", ".DS_Store")


def macos_litter(name: str) -> bool:
    """True for an entry a macOS zip adds beside the learner's files."""
    return name in MACOS_LITTER or name.startswith("._")


def copy_tree(folder: Path, dest: Path, ignore: Callable[[str], bool] | None = None) -> None:
    """Copy the whole of `folder` into the existing empty folder `dest`, within the limits; Refused names
    why."""
    with open_dir(folder) as source, open_dir(dest) as target:
        Copier(ignore).copy(source, target, "", 1)
