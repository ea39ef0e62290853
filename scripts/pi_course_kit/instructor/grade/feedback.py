"""One Markdown feedback file per learner, in the course language: per lab points, status, question and hint."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from pi_course_kit.core.manifest import Course
from pi_course_kit.core.records import Status
from pi_course_kit.instructor.grade import texts
from pi_course_kit.instructor.grade.gradebook import COMPLETE, LabPoints, LearnerRecord, Points, points_of
from pi_course_kit.instructor.grade.questions import question

#: Most file systems refuse a name over 255 bytes; a percent-encoded CJK character takes 9, so a
#: 31-character Chinese folder name was already too long. Names stay well below, room for a suffix.
MAX_NAME_BYTES = 200


def file_name(learner: str) -> str:
    """A file name for a learner id: percent-encoded, so distinct ids (with slashes) never collide.

    A name that would pass MAX_NAME_BYTES is cut (never inside a %XX escape) and ends in a short hash of
    the whole id, so two long ids that share their beginning still get two files.
    """
    name = quote(learner, safe="-_.@")  # ASCII only: one byte per character
    if len(name) + len(".md") <= MAX_NAME_BYTES:
        return name + ".md"
    digest = hashlib.sha256(learner.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    cut = name[: MAX_NAME_BYTES - len(".md") - len(digest) - 1]
    cut = re.sub(r"%[0-9A-Fa-f]?$", "", cut)
    return f"{cut}~{digest}.md"


def first_failing(record: LearnerRecord, lab_id: str) -> str | None:
    """The node id of the lab's first pristine test that did not pass, in run order."""
    return next((t.nodeid for t in record.tests if t.lab == lab_id and t.outcome != "passed"), None)


def _number(value: float) -> str:
    return f"{value:g}"


def lab_lines(course: Course, record: LearnerRecord, row: LabPoints) -> list[str]:
    """One lab's Markdown lines: points, tests, status, and for an unfinished lab its first failing test."""
    lines = [
        "- "
        + texts.labelled(texts.POINTS, f"{_number(row.points)} / {_number(row.max_points)}")
        + texts.bracketed(texts.credit_rule(row.credit)),
        "- " + texts.labelled(texts.TESTS, f"{row.passed} / {row.total}"),
        "- " + texts.labelled(texts.STATUS, texts.lab_status(row.status, row.blocked_by)),
    ]
    failing = first_failing(record, row.id)
    if record.checkpoint is None or failing is None or row.status == Status.DONE:
        return lines
    checkpoint = course.checkpoint(record.checkpoint)
    lab = checkpoint.lab(row.id)
    asked = question(course, checkpoint, failing) or texts.NO_DOCSTRING
    hint = lab.hints[0] if row.status == Status.NOT_STARTED or len(lab.hints) < 2 else lab.hints[1]
    return [
        *lines,
        "- " + texts.labelled(texts.FIRST_FAILING, f"`{failing}`"),
        "  - " + texts.labelled(texts.QUESTION, asked),
        "  - " + texts.labelled(texts.HINT, hint),
    ]


def render(course: Course, record: LearnerRecord, points: Points | None = None) -> str:
    """The feedback page of one learner as Markdown."""
    points = points or points_of(course, record)
    lines = [
        "# " + texts.labelled(texts.FEEDBACK_TITLE, record.learner),
        "",
        "- " + texts.labelled(texts.CHECKPOINT, record.checkpoint or "—"),
        "- " + texts.labelled(texts.STATUS, texts.record_status(record.status)),
        "- "
        + texts.labelled(texts.TOTAL, f"**{_number(points.points)} / {_number(points.max_points)}**")
        + (
            texts.bracketed(f"{texts.EXTRA} {_number(points.extra)} / {_number(points.max_extra)}")
            if points.max_extra
            else ""
        ),
    ]
    if record.message:
        lines.append("- " + texts.labelled(texts.MESSAGE, record.message))
    if record.tests_edited:
        lines += ["", f"> {texts.EDITED_TESTS}"]
    for row in points.labs:
        optional = texts.bracketed(texts.OPTIONAL) if row.optional else ""
        lines += ["", f"## Lab {row.id} {row.title}{optional}", "", *lab_lines(course, record, row)]
    if record.status == COMPLETE:
        lines += ["", texts.ALL_DONE]
    return "\n".join(lines) + "\n"


def write_all(course: Course, records: Sequence[LearnerRecord], folder: Path) -> list[Path]:
    """Write one feedback file per learner into `folder` (created if missing); return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for record in records:
        path = folder / file_name(record.learner)
        path.write_text(render(course, record), encoding="utf-8")
        written.append(path)
    return written
