"""Who each submission belongs to: ids from a roster CSV, from the path below a submissions root, or the path.

Never a bare folder name: `sub/s1/pi-practice` and `sub/s2/pi-practice` must stay two learners.
A roster row that cannot be graded (a blank cell, a repeated id or folder) and a folder below the
submissions root that holds no submission still get a row in every output, with the reason: a learner
must never vanish from the gradebook because of one bad cell.
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_PATH

META = META_PATH
MAX_DEPTH = 4
COLUMNS = ("learner", "submission")


@dataclass(frozen=True)
class Submission:
    """One row of the class: a learner id, its folder, and why it cannot be graded ("" when it can)."""

    learner: str
    folder: Path
    problem: str = ""


def normalise(folder: Path, package: str) -> Path:
    """A path given as the bare package folder itself (`.../pi_course`) means the folder that holds it."""
    if folder.name == package and folder.is_dir() and not (folder / package).is_dir():
        return folder.parent
    return folder


def find_submissions(root: Path, package: str, bare: bool) -> list[Path]:
    """Folders below `root` that are submissions: a practice folder, or (with `bare`) one holding the
    package."""
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


def with_every_folder(root: Path, found: Sequence[Path]) -> list[Path]:
    """`found` plus each folder right below `root` that holds none of them, sorted.

    Every folder there is somebody's: one holding no submission (empty, or loose .py files) is handed on
    as it is, so the grader gives it a row with its reason instead of the class silently losing it.
    """
    extra = [
        child
        for child in root.iterdir()
        if child.is_dir()
        and not child.is_symlink()
        and not child.name.startswith(".")
        and not any(folder.is_relative_to(child) for folder in found)
    ]
    return sorted([*found, *extra])


def _delimiter(first_line: str) -> str:
    """`,` or `;` (what Excel writes where the decimal mark is a comma): whichever splits out both columns."""
    for delimiter in (",", ";"):
        names = {cell.strip().lower() for cell in first_line.split(delimiter)}
        if set(COLUMNS) <= names:
            return delimiter
    return ","


def read_roster(path: Path) -> list[Submission]:
    """One Submission per row of a CSV with `learner` and `submission` columns (any case, `,` or `;`).

    A row with a blank cell, or repeating an earlier row's id or folder, becomes a Submission with its
    problem; only a file without the two columns is refused as a whole.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
        first_line = text.lstrip("\r\n").split("\n", 1)[0]
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(first_line)))
    except OSError as error:
        raise KitError(f"--roster {path}: cannot read it ({error.strerror}); give a CSV file") from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise KitError(f"--roster {path}: not a readable CSV ({error})") from None
    header = [cell.strip().lower() for cell in rows[0]] if rows else []
    if not set(COLUMNS) <= set(header) or len(rows) < 2:
        raise KitError(
            f"--roster {path}: needs a header row with the columns learner,submission and one row per learner"
        )
    at_learner, at_submission = header.index("learner"), header.index("submission")
    found: list[Submission] = []
    ids: dict[str, int] = {}
    folders: dict[Path, int] = {}
    for number, row in enumerate(rows[1:], 2):
        cells = [*row, "", ""]
        learner, submission = cells[at_learner].strip(), cells[at_submission].strip()
        if not learner and not submission:
            continue  # an empty line of the spreadsheet is nobody
        # A blank submission cell is no folder at all (Path() is written as an empty cell).
        folder = (
            Path(submission) if Path(submission).is_absolute() or not submission else path.parent / submission
        )
        where = f"roster row {number}"
        problem = ""
        if not learner or not submission:
            missing = "learner id" if not learner else "submission folder"
            problem = f"{where}: the {missing} is blank; fill in both learner and submission"
        elif learner in ids:
            problem = f"{where}: learner id {learner!r} is already on row {ids[learner]}; make ids unique"
        elif folder.resolve() in folders:
            problem = f"{where}: submission {submission} is already listed on row {folders[folder.resolve()]}"
        else:
            ids[learner] = number
            folders[folder.resolve()] = number
        if problem:
            # Its own id, so the row stays apart from the learner it repeats (and from every other row).
            learner = f"{learner or submission} ({where})"
        found.append(Submission(learner, folder, problem))
    return found


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


def plan(
    dirs: Sequence[Path],
    package: str,
    roster: Path | None = None,
    root: Path | None = None,
    bare: bool = False,
) -> list[Submission]:
    """Every row of the class, in the order given (roster order, or sorted); some may carry a problem."""
    folders = [normalise(folder, package) for folder in dirs]
    if roster is not None:
        listed = read_roster(roster)
        if not folders:
            return listed
        by_folder = {entry.folder.resolve(): entry.learner for entry in listed if not entry.problem}
        missing = [folder for folder in folders if folder.resolve() not in by_folder]
        if missing:
            raise KitError(f"{missing[0]} is not in the roster {roster}; add a row for it or leave it out")
        pairs = [(by_folder[folder.resolve()], folder) for folder in folders]
    elif root is not None:
        folders = folders or with_every_folder(root, find_submissions(root, package, bare))
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
    return [Submission(learner, folder) for learner, folder in pairs]


def assign(
    dirs: Sequence[Path],
    package: str,
    roster: Path | None = None,
    root: Path | None = None,
    bare: bool = False,
) -> list[tuple[str, Path]]:
    """(learner id, folder) for every submission to grade; the first row with a problem is refused."""
    entries = plan(dirs, package, roster, root, bare)
    bad = next((entry for entry in entries if entry.problem), None)
    if bad is not None:
        raise KitError(f"--roster {roster}: {bad.problem}")
    return [(entry.learner, entry.folder) for entry in entries]
