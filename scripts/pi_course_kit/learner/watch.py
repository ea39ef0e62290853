"""Wait for the learner to save a file: `watchfiles` events, or polling where the file system sends none."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pi_course_kit.core.folder import NOISE

WATCHED_SUFFIXES = (".py", ".ini", ".toml")
POLL_ENV = "PI_COURSE_WATCH_POLL"
# Network, VM-shared and FUSE file systems often deliver no inotify events for edits made elsewhere.
EVENTLESS_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "vboxsf",
        "vmhgfs",
        "drvfs",
        "fuse.sshfs",
        "fuse.vmhgfs-fuse",
    }
)


def relevant(path: str, root: Path) -> bool:
    """Is a changed path one that should trigger a re-run (source or config, outside caches)?"""
    try:
        parts = Path(path).resolve().relative_to(root).parts
    except ValueError:
        return False
    return bool(parts) and parts[-1].endswith(WATCHED_SUFFIXES) and not any(part in NOISE for part in parts)


def mount_type(path: Path, mounts: str = "/proc/mounts") -> str | None:
    """The file system type of the mount holding `path` (Linux only; None elsewhere)."""
    try:
        table = Path(mounts).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    best, kind = "", None
    target = str(path.resolve())
    for line in table:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def needs_polling(root: Path, forced: bool = False) -> bool:
    """Poll when asked to, when watchfiles is missing, or on a file system that sends no events."""
    if forced or os.environ.get(POLL_ENV, "") not in ("", "0"):
        return True
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return True
    return mount_type(root) in EVENTLESS_FS


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every watched file under `root`."""
    state: dict[str, tuple[int, int]] = {}
    for current, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in NOISE]
        for name in files:
            if name.endswith(WATCHED_SUFFIXES):
                path = os.path.join(current, name)
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                state[path] = (info.st_mtime_ns, info.st_size)
    return state


def poll_changes(
    root: Path, interval: float = 0.3, sleep: Callable[[float], None] = time.sleep
) -> Iterator[set[str]]:
    """Yield the set of changed, added or deleted watched files, checking every `interval` seconds."""
    before = snapshot(root)
    while True:
        sleep(interval)
        after = snapshot(root)
        changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
        before = after
        if changed:
            yield changed


def event_changes(root: Path) -> Iterator[set[str]]:
    """Yield sets of changed watched files as the operating system reports them."""
    import watchfiles

    def keep(_change: object, path: str) -> bool:
        return relevant(path, root)

    for batch in watchfiles.watch(root, watch_filter=keep, debounce=300, step=50, force_polling=False):
        yield {path for _change, path in batch}


def changes(root: Path, poll: bool) -> Iterator[set[str]]:
    """Changed files under `root`, by events or by polling."""
    root = root.resolve()
    return poll_changes(root) if poll else event_changes(root)
