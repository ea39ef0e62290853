"""Who each submission belongs to: ids from a roster CSV, from the path below a submissions root, or the path.

Never a bare folder name: `sub/s1/pi-practice` and `sub/s2/pi-practice` must stay two learners.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_PATH

META = META_PATH
MAX_DEPTH = 4


def normalise(folder: Path, package: str) -> Path:
    """A path given as the bare package folder itself (`.../pi_course`) means the folder that holds it."""
    if folder.name == package and folder.is_dir() and not (folder / package).is_dir():
        return folder.parent
    return folder


def find_submissions(root: Path, package: str, bare: bool) -> list[Path]:
    """Folders below `root` that are submissions: a practice folder, or (with `bare`) one holding the package."""
    if not root.is_dir():
        raise KitError(f"--submissions-root {root}: not a folder; give the folder that holds the submissions")
    found = []
    for folder, dirs, _ in os.walk(root):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        if here != root and ((here / META).is_file() or (bare and (here / package).is_dir())):
            found.append(here)
            dirs[:] = []  # a submission's own folders are not submissions
        elif depth >= MAX_DEPTH:
            dirs[:] = []
        dirs.sort()
    return found


def read_roster(path: Path) -> list[tuple[str, Path]]:
    """(learner id, submission folder) per row of a CSV with `learner` and `submission` columns."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise KitError(f"--roster {path}: cannot read it ({error.strerror}); give a CSV file") from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise KitError(f"--roster {path}: not a readable CSV ({error})") from None
    if not rows or not {"learner", "submission"} <= set(rows[0]):
        raise KitError(
            f"--roster {path}: needs a header row with the columns learner,submission and one row per learner"
        )
    pairs = []
    for number, row in enumerate(rows, 2):
        learner, submission = (row.get("learner") or "").strip(), (row.get("submission") or "").strip()
        if not learner or not submission:
            raise KitError(f"--roster {path}:{number}: learner and submission must both be filled in")
        folder = Path(submission)
        pairs.append((learner, folder if folder.is_absolute() else path.parent / folder))
    return pairs


def _check_unique(pairs: Sequence[tuple[str, Path]], source: str) -> None:
    repeated = sorted(learner for learner, count in Counter(lid for lid, _ in pairs).items() if count > 1)
    if repeated:
        raise KitError(
            f"learner id {repeated[0]!r} is given to more than one submission ({source}); make ids unique"
        )
    folders = Counter(folder.resolve() for _, folder in pairs)
    twice = [folder for folder, count in folders.items() if count > 1]
    if twice:
        raise KitError(f"submission {twice[0]} is listed more than once ({source}); list each folder once")


def assign(
    dirs: Sequence[Path],
    package: str,
    roster: Path | None = None,
    root: Path | None = None,
    bare: bool = False,
) -> list[tuple[str, Path]]:
    """(learner id, folder) for every submission to grade, in the order given (roster order, or sorted)."""
    folders = [normalise(folder, package) for folder in dirs]
    if roster is not None:
        listed = read_roster(roster)
        _check_unique(listed, f"roster {roster}")
        if not folders:
            return listed
        by_folder = {folder.resolve(): learner for learner, folder in listed}
        missing = [folder for folder in folders if folder.resolve() not in by_folder]
        if missing:
            raise KitError(f"{missing[0]} is not in the roster {roster}; add a row for it or leave it out")
        pairs = [(by_folder[folder.resolve()], folder) for folder in folders]
    elif root is not None:
        folders = folders or find_submissions(root, package, bare)
        if not folders:
            raise KitError(f"--submissions-root {root}: no submission found below it")
        pairs = []
        for folder in folders:
            try:
                pairs.append((folder.resolve().relative_to(root.resolve()).as_posix(), folder))
            except ValueError:
                raise KitError(
                    f"{folder} is not below --submissions-root {root}; give folders inside it"
                ) from None
    else:
        if not folders:
            raise KitError("give the folders to grade, or --roster FILE, or --submissions-root DIR")
        pairs = [(os.path.normpath(str(folder)), folder) for folder in folders]
    _check_unique(pairs, "the folders given")
    return pairs
