"""`pi-course practice 06 DIR`: make an isolated practice folder from a checkpoint's starter."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from .. import manifest, practice


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint and the destination folder."""
    parser.add_argument("checkpoint", help="checkpoint id or slug, e.g. 06")
    parser.add_argument("dir", type=Path, help="new (or empty) folder to create, e.g. ~/pi-practice")


def run(args: argparse.Namespace) -> int:
    """Create the folder and print the next steps."""
    course = manifest.load()
    checkpoint = course.checkpoint(args.checkpoint)
    dest = practice.create(course, checkpoint, args.dir)
    kit_installed = importlib.util.find_spec("pytest") is not None
    print("\n".join(practice.next_steps(course, checkpoint, dest, kit_installed)))
    return 0
