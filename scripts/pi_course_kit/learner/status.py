"""`pi-course status`: where you stand in this practice folder: labs, changed files, hints, backups."""

from __future__ import annotations

import argparse

from pi_course_kit import __version__
from pi_course_kit.core.folder import BACKUP_DIR, META_DIR, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.learner import check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare --no-run."""
    parser.add_argument(
        "--no-run", action="store_true", help=_("do not run the tests; show files and hints only")
    )


def run(args: argparse.Namespace) -> int:
    """Print the folder's facts, what changed since it was made, and (unless --no-run) the lab table."""
    folder = open_folder()
    meta = folder.meta
    print(_("practice folder {root}").format(root=folder.root))
    print(
        _("  checkpoint {id} ({slug}), made {created}").format(
            id=meta.checkpoint, slug=meta.slug, created=meta.created
        )
    )
    made_with = meta.kit_version
    note = (
        ""
        if made_with == __version__
        else _(" (this kit is {version}; the tests may differ)").format(version=__version__)
    )
    print(_("  made with pi-course kit {version}").format(version=made_with) + note)
    changes = folder.changes()
    if any(changes.values()):
        print(_("files changed since the folder was made:"))
        for kind in ("modified", "added", "deleted"):
            for name in changes[kind]:
                print(f"  {_(kind):<8} {name}")
    else:
        print(_("files changed since the folder was made: none yet (start with LAB-GUIDE.md)"))
    hints = {lab: count for lab, count in meta.hints.items() if count}
    if hints:
        print(_("hints seen: ") + ", ".join(f"Lab {lab} {count}" for lab, count in sorted(hints.items())))
    backups = folder.root / META_DIR / BACKUP_DIR
    saved = sorted(p.name for p in backups.iterdir()) if backups.is_dir() else []
    if saved:
        print(
            _("backups (from `pi-course reset`): {count}, latest {path}").format(
                count=len(saved), path=f"{META_DIR}/{BACKUP_DIR}/{saved[-1]}"
            )
        )
    if args.no_run:
        return 0
    print()
    result = check.run_once(folder, [], verbose=False)
    return 0 if check.passed(result) else 1
