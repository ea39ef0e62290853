"""The gradebook on disk: learner records as JSON Lines (read back for merging), and a CSV with points."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Course
from pi_course_kit.instructor.grade.grader import LabScore, LearnerRecord
from pi_course_kit.instructor.grade.points import points_of

#: Fields that differ between two gradings of the same folder (how long it took).
TIMING_FIELDS = ("seconds",)


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
            lines = path.read_text(encoding="utf-8").splitlines()
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


def write_csv(path: Path, course: Course, records: Sequence[LearnerRecord]) -> None:
    """One row per learner: id, status, points (required, extra, maximum), then per lab points and counts."""
    lab_ids = list(dict.fromkeys(score.id for r in records for score in r.labs))
    with path.open("w", encoding="utf-8", newline="") as handle:
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
            points = points_of(course, record)
            by_lab = {row.id: row for row in points.labs}
            row: list[object] = [record.learner, record.folder, record.checkpoint or "", record.status]
            row += [points.score, points.points, points.max_points, points.extra, record.passed, record.total]
            for lab_id in lab_ids:
                lab = by_lab.get(lab_id)
                row += [lab.points, lab.passed, lab.total, lab.status] if lab else ["", "", "", ""]
            writer.writerow([*row, "; ".join(record.tests_edited), "; ".join(record.flags), record.message])
