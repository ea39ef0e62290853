"""The gradebook on disk: learner records as JSON Lines (read back for merging), and a CSV with points.

The CSV is for spreadsheets: UTF-8 with a BOM (without it, Excel on a Chinese system reads it as GBK), and
no cell a spreadsheet would run as a formula (ids and folder names are chosen by learners).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Course
from pi_course_kit.instructor.grade.grader import LabScore, LearnerRecord
from pi_course_kit.instructor.grade.points import points_of

#: Fields that differ between two gradings of the same folder (how long it, and each test, took).
TIMING_FIELDS = ("seconds", "durations")


def record_from_json(data: dict[str, Any]) -> LearnerRecord:
    """A LearnerRecord back from its JSON object (as `write_json_lines` wrote it)."""
    fields = dict(data)
    fields["labs"] = [LabScore(**lab) for lab in fields.get("labs", [])]
    return LearnerRecord(**fields)


def read_json_lines(paths: Iterable[Path]) -> list[LearnerRecord]:
    """Every record of these JSON Lines files, in file order; a bad line names its file and line."""
    records = []
    for path in paths:
        try:
            # Split on "\n" only: str.splitlines() also splits on U+2028/U+2029, which an older kit wrote
            # unescaped inside strings (a folder name holding one made the whole gradebook unreadable).
            lines = path.read_text(encoding="utf-8").split("\n")
        except OSError as error:
            raise KitError(
                f"{path}: cannot read it ({error.strerror}); give a file written by --json"
            ) from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(record_from_json(json.loads(line)))
            except (ValueError, TypeError, AttributeError) as error:
                raise KitError(
                    f"{path}:{number}: not a grading record ({error}); give files written by `pi-course grade --json`"
                ) from None
    return records


#: First characters that make a spreadsheet read a cell as a formula (OWASP's CSV-injection list, the rule
#: of the `defusedcsv` package): such a text cell gets a leading apostrophe, which Excel and LibreOffice
#: show as plain text. Implemented here rather than imported: the rule is one line, and the package
#: replaces the whole csv module.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def defuse(cell: object) -> object:
    """A text cell that cannot run as a formula; numbers stay numbers."""
    if isinstance(cell, str) and cell.startswith(FORMULA_START):
        return "'" + cell
    return cell


def class_checkpoint(records: Sequence[LearnerRecord], given: str | None = None) -> str | None:
    """The checkpoint the class was graded against: the one given, else the most common among the records."""
    if given is not None:
        return given
    counts = Counter(record.checkpoint for record in records if record.checkpoint)
    return counts.most_common(1)[0][0] if counts else None


def write_csv(
    path: Path, course: Course, records: Sequence[LearnerRecord], checkpoint: str | None = None
) -> None:
    """One row per learner: id, status, points (required, extra, maximum), then per lab points and counts.

    A record graded against no checkpoint (skipped, say) scores 0 of the class checkpoint's maximum
    (`checkpoint`, or the most common one), never 0/0: a gradebook divides by it.
    """
    lab_ids = list(dict.fromkeys(score.id for r in records for score in r.labs))
    default = class_checkpoint(records, checkpoint)
    with path.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        header = [
            "learner",
            "folder",
            "checkpoint",
            "status",
            "score",
            "points",
            "max_points",
            "extra_points",
        ]
        header += ["passed", "total"]
        for lab_id in lab_ids:
            header += [f"{lab_id} points", f"{lab_id} passed", f"{lab_id} total", f"{lab_id} status"]
        writer.writerow([*header, "tests_edited", "flags", "message"])
        for record in records:
            scored = record if record.checkpoint else dataclasses.replace(record, checkpoint=default)
            points = points_of(course, scored)
            by_lab = {row.id: row for row in points.labs}
            row: list[object] = [record.learner, record.folder, record.checkpoint or "", record.status]
            row += [points.score, points.points, points.max_points, points.extra, record.passed, record.total]
            for lab_id in lab_ids:
                lab = by_lab.get(lab_id) if record.labs else None
                row += [lab.points, lab.passed, lab.total, lab.status] if lab else ["", "", "", ""]
            row += ["; ".join(record.tests_edited), "; ".join(record.flags), record.message]
            writer.writerow([defuse(cell) for cell in row])
