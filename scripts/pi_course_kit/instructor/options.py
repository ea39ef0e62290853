"""Options shared by the instructor commands: which manifest (and so which repository) to work on."""

from __future__ import annotations

import argparse
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import course_manifest
from pi_course_kit.core.manifest import Checkpoint, Course


def add_manifest_option(parser: argparse.ArgumentParser) -> None:
    """Add `--course DIR` (alias `--root`) and `--manifest PATH`; the course is the manifest's folder."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--manifest",
        type=Path,
        metavar="PATH",
        help=_("course.toml to use (default: the kit's own); its folder is the repository"),
    )
    group.add_argument(
        "--course",
        "--root",
        dest="root",
        type=Path,
        metavar="DIR",
        help=_(
            "course checkout holding course.toml and solutions/ (default: PI_COURSE_ROOT, "
            "then a checkout above the current folder, then the kit's own checkout)"
        ),
    )


def load_course(args: argparse.Namespace) -> Course:
    """Load the manifest chosen by `--course`/`--manifest`, or the checkout that `locate` finds."""
    path: Path | None = getattr(args, "manifest", None)
    root: Path | None = getattr(args, "root", None)
    if root is not None:
        if not root.is_dir():
            raise KitError(
                _("--course {root}: not a folder; give the course checkout that holds course.toml").format(
                    root=root
                )
            )
        path = root / "course.toml"
    if path is not None and path.is_dir():
        path = path / "course.toml"
    if path is None:
        path = course_manifest(need_solutions=True)
    return manifest.load(path.resolve())


def checkpoints(course: Course, checkpoint_id: str | None) -> list[Checkpoint]:
    """The chosen checkpoint, or every checkpoint when none is named."""
    if checkpoint_id is None:
        return list(course.checkpoints)
    return [course.checkpoint(checkpoint_id)]
