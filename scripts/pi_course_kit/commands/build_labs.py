"""`pi-course build-labs [CHECKPOINT] [--check]`: regenerate the starters in labs/ from solutions/."""

from __future__ import annotations

import argparse

from ..build_labs import LabMarkerError, build, stale_files
from ..errors import KitError
from ..instructor import add_manifest_option, checkpoints, load_course


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the optional checkpoint, `--check` and the manifest option."""
    parser.add_argument("checkpoint", nargs="?", help="only this checkpoint (default: every checkpoint)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 listing the starter files that are stale"
    )
    add_manifest_option(parser)


def run(args: argparse.Namespace) -> int:
    """Rewrite stale starters (or, with --check, only list them)."""
    course = load_course(args)
    stale: list[str] = []
    try:
        for checkpoint in checkpoints(course, args.checkpoint):
            if args.check:
                stale += [f"{checkpoint.starter}/{rel}" for rel in stale_files(course, checkpoint)]
            else:
                changed = build(course, checkpoint)
                for rel in changed:
                    print(f"wrote {checkpoint.starter}/{rel}")
                print(f"{checkpoint.starter}: {len(changed)} file(s) regenerated from {checkpoint.solution}")
    except LabMarkerError as error:
        raise KitError(f"{error}; nothing was written for that checkpoint") from None
    if not args.check:
        return 0
    if stale:
        print(f"{len(stale)} starter file(s) are stale; run `pi-course build-labs` to regenerate them:")
        for path in stale:
            print(f"  {path}")
        return 1
    print("every starter is in sync with its solution")
    return 0
