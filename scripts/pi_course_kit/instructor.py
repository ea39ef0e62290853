"""Options shared by the instructor commands: which manifest (and so which repository) to work on."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import manifest
from .errors import KitError
from .manifest import Checkpoint, Course


def add_manifest_option(parser: argparse.ArgumentParser) -> None:
    """Add `--manifest PATH` and `--root DIR`; the repository is the manifest's folder."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--manifest",
        type=Path,
        metavar="PATH",
        help="course.toml to use (default: the kit's own); its folder is the repository",
    )
    group.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="repository folder holding course.toml (same as --manifest DIR/course.toml)",
    )


def load_course(args: argparse.Namespace) -> Course:
    """Load the manifest chosen by `--manifest`/`--root`, or the kit's own."""
    path: Path | None = getattr(args, "manifest", None)
    root: Path | None = getattr(args, "root", None)
    if root is not None:
        if not root.is_dir():
            raise KitError(f"--root {root}: not a folder; give the repository folder that holds course.toml")
        path = root / "course.toml"
    if path is not None and path.is_dir():
        path = path / "course.toml"
    return manifest.load(path.resolve() if path is not None else None)


def checkpoints(course: Course, checkpoint_id: str | None) -> list[Checkpoint]:
    """The chosen checkpoint, or every checkpoint when none is named."""
    if checkpoint_id is None:
        return list(course.checkpoints)
    return [course.checkpoint(checkpoint_id)]
