"""One Markdown feedback file per learner, in the course language: per lab points, status, question and hint.

Who sees which grading output decides what it may hold:

- **learner-visible**: these feedback files (sent to learners), Gradescope's results.json (built from
  `render` and `lab_lines`), the GitHub Classroom reporter's result (`lab_lines`) and the class version
  of the class report. They go through `learner_view`: a run that graded held-out tests shows no text
  the run reported (learner code ran beside those tests and could copy any of their lines into an
  exception), and a held-out test is only ever "a held-out test of Lab N", never its name or question.
- **the instructor's**: the JSON Lines gradebook, the CSV, the JUnit file (one file for the whole class,
  every learner's name in it) and the instructor's class report keep every detail.

The Markdown is inert: every text that is not the kit's or the course's own (a learner id, a message
read from the run) is written as a code span whose fence is longer than any backtick run in it, so a
CommonMark renderer shows it verbatim, never as an image, a link, emphasis or HTML.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from pi_course_kit.core.manifest import Course, ManifestError
from pi_course_kit.core.records import Status
from pi_course_kit.instructor.grade import texts
from pi_course_kit.instructor.grade.gradebook import (
    COMPLETE,
    LabPoints,
    LearnerRecord,
    Points,
    TestVerdict,
    defuse,
    points_of,
)
from pi_course_kit.instructor.grade.questions import question

#: Most file systems refuse a name over 255 bytes (a CJK character takes 3 in UTF-8): names stay well
#: below, with room for a suffix.
MAX_NAME_BYTES = 200
#: The file beside the feedback files that maps each learner id to its file (UTF-8 with a BOM, for Excel).
INDEX = "index.csv"
#: Characters kept in a file name besides letters, digits and combining marks (CJK stays readable).
_NAME_KEEP = frozenset("-_.@+=~()[]")
#: First characters a name never starts with: a spreadsheet formula (defusedcsv's rule), a hidden file.
_NAME_STRIP = "=+-@._~ "
#: Names Windows refuses whatever their extension.
_WINDOWS_RESERVED = {
    "CON",
    "PRN",
    "AUX",
    "NUL",
    *(f"COM{n}" for n in range(10)),
    *(f"LPT{n}" for n in range(10)),
}
#: An exit status the learner's code chose (os._exit): a byte of its own choosing, never shown in a
#: held-out run.
_EXIT_CODE = re.compile(r"exit code -?\d+")


def _digest(learner: str, length: int = 8) -> str:
    return hashlib.sha256(learner.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def file_name(learner: str) -> str:
    """A readable file name for a learner id: its letters and digits (CJK included), never a path.

    Path separators, control and format characters and anything a file system or shell may mind become
    `_`; a leading `=`, `+`, `-` or `@` (a spreadsheet formula), `.` or `_` is dropped. A name that
    would pass MAX_NAME_BYTES is cut and ends in a short hash of the whole id, so two long ids that share
    their beginning still get two files. Two ids that make the same name are told apart by `file_names`.
    """
    text = unicodedata.normalize("NFC", learner)
    kept = "".join(
        char if char in _NAME_KEEP or unicodedata.category(char)[0] in "LNM" else "_" for char in text
    )
    stem = re.sub(r"_{2,}", "_", kept).lstrip(_NAME_STRIP).rstrip("._~ ") or "learner"
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = f"{stem}_"
    if len(stem.encode("utf-8")) + len(".md") <= MAX_NAME_BYTES:
        return stem + ".md"
    room = MAX_NAME_BYTES - len(".md") - len("~") - 12
    cut = stem.encode("utf-8")[:room].decode("utf-8", "ignore")
    return f"{cut}~{_digest(learner, 12)}.md"


def file_names(learners: Sequence[str]) -> dict[str, str]:
    """Each learner id's feedback file name, distinct within the batch (as a case-blind file system sees it).

    A name is its id's `file_name`; only an id whose name is already taken gets a short hash suffix.
    """
    names: dict[str, str] = {}
    taken: set[str] = set()
    for learner in learners:
        name = file_name(learner)
        stem = name.removesuffix(".md")
        attempt = 0
        while name.casefold() in taken:
            attempt += 1
            salt = learner if attempt == 1 else f"{learner}\0{attempt}"
            name = f"{stem}~{_digest(salt)}.md"
        taken.add(name.casefold())
        names.setdefault(learner, name)
    return names


# -- inert Markdown -----------------------------------------------------------------------------------


def code(text: object) -> str:
    """`text` as an inline code span: shown verbatim by any CommonMark renderer (no link, image, HTML)."""
    value = str(text).replace("\n", " ").replace("\r", " ")
    if not value.strip():
        return "—"
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    if value.startswith("`") or value.endswith("`") or (value.startswith(" ") and value.endswith(" ")):
        # One space on each side, which CommonMark strips again: the span may begin or end with a backtick.
        return f"{fence} {value} {fence}"
    return f"{fence}{value}{fence}"


def code_block(text: object, indent: str = "") -> list[str]:
    """`text` as a fenced code block (lines indented by `indent`), its fence longer than any backtick run."""
    value = str(text)
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return [indent + fence + "text", *(indent + line for line in value.splitlines()), indent + fence]


# -- what a learner may see ---------------------------------------------------------------------------


def learner_view(course: Course, record: LearnerRecord) -> LearnerRecord:
    """The record as learner-visible outputs show it (see the module docstring).

    A lab blocked by anything but a lab of the checkpoint is shown as failing (the blocker is read from the
    run). In a run that graded held-out tests, the run's message and first failures are replaced by a
    sentence of the kit's, and an exit status the learner's code chose is left out of the flags.
    """
    known: set[str] = set()
    if record.checkpoint:
        try:
            known = {lab.id for lab in course.checkpoint(record.checkpoint).tree_labs}
        except ManifestError:  # an unknown checkpoint (another course's gradebook): no blocker is known
            known = set()
    labs = [
        dataclasses.replace(score, status=Status.FAILING, blocked_by=None)
        if score.status == Status.BLOCKED and score.blocked_by not in known
        else score
        for score in record.labs
    ]
    if not record.held_out_run:
        return dataclasses.replace(record, labs=labs)
    return dataclasses.replace(
        record,
        labs=[dataclasses.replace(score, first_failure="") for score in labs],
        message=texts.WITHHELD if record.message else "",
        flags=[_EXIT_CODE.sub("exit code ?", flag) for flag in record.flags],
    )


def first_failing(record: LearnerRecord, lab_id: str) -> TestVerdict | None:
    """The lab's first pristine test that did not pass, in run order: a public one before a held-out one."""
    failing = [t for t in record.tests if t.lab == lab_id and t.outcome != "passed"]
    return next((t for t in failing if not t.held_out), failing[0] if failing else None)


def _number(value: float) -> str:
    return f"{value:g}"


def lab_lines(course: Course, record: LearnerRecord, row: LabPoints) -> list[str]:
    """One lab's Markdown lines: points, tests, status, and for an unfinished lab its first failing test.

    A held-out test is named "a held-out test of Lab N", without its question (the question is the test).
    """
    record = learner_view(course, record)
    blocked_by = next((s.blocked_by for s in record.labs if s.id == row.id), row.blocked_by)
    status = Status.FAILING if row.status == Status.BLOCKED and blocked_by is None else row.status
    lines = [
        "- "
        + texts.labelled(texts.POINTS, f"{_number(row.points)} / {_number(row.max_points)}")
        + texts.bracketed(texts.credit_rule(row.credit)),
        "- " + texts.labelled(texts.TESTS, f"{row.passed} / {row.total}"),
        "- " + texts.labelled(texts.STATUS, texts.lab_status(status, blocked_by)),
    ]
    failing = first_failing(record, row.id)
    if record.checkpoint is None or failing is None or row.status == Status.DONE:
        return lines
    checkpoint = course.checkpoint(record.checkpoint)
    lab = checkpoint.lab(row.id)
    hint = lab.hints[0] if row.status == Status.NOT_STARTED or len(lab.hints) < 2 else lab.hints[1]
    if failing.held_out:
        named = [
            "- " + texts.labelled(texts.FIRST_FAILING, texts.held_out_test(failing.lab)),
        ]
    else:
        asked = question(course, checkpoint, failing.nodeid) or texts.NO_DOCSTRING
        named = [
            "- " + texts.labelled(texts.FIRST_FAILING, code(failing.nodeid)),
            "  - " + texts.labelled(texts.QUESTION, asked),
        ]
    return [*lines, *named, "  - " + texts.labelled(texts.HINT, hint)]


def _checkpoint(course: Course, checkpoint: str | None) -> str:
    """A checkpoint id as it is shown: the course's own ids plainly, anything else (a gradebook's) inert."""
    if checkpoint is None:
        return "—"
    return checkpoint if checkpoint in {c.id for c in course.checkpoints} else code(checkpoint)


def render(course: Course, record: LearnerRecord, points: Points | None = None) -> str:
    """The feedback page of one learner as Markdown (learner-visible: see the module docstring)."""
    points = points or points_of(course, record)
    shown = learner_view(course, record)
    lines = [
        "# " + texts.labelled(texts.FEEDBACK_TITLE, code(record.learner)),
        "",
        "- " + texts.labelled(texts.CHECKPOINT, _checkpoint(course, record.checkpoint)),
        "- " + texts.labelled(texts.STATUS, texts.record_status(record.status)),
        "- "
        + texts.labelled(texts.TOTAL, f"**{_number(points.points)} / {_number(points.max_points)}**")
        + (
            texts.bracketed(f"{texts.EXTRA} {_number(points.extra)} / {_number(points.max_extra)}")
            if points.max_extra
            else ""
        ),
    ]
    if shown.message:
        # A message of the run is the learner's text: a code block, never Markdown. The kit's own
        # sentence (a held-out run's) is plain text.
        if shown.held_out_run:
            lines.append("- " + texts.labelled(texts.MESSAGE, shown.message))
        else:
            lines += ["- " + texts.labelled(texts.MESSAGE, ""), "", *code_block(shown.message, "  ")]
    if record.tests_edited:
        lines += ["", f"> {texts.EDITED_TESTS}"]
    for row in points.labs:
        optional = texts.bracketed(texts.OPTIONAL) if row.optional else ""
        lines += ["", f"## Lab {row.id} {row.title}{optional}", "", *lab_lines(course, record, row)]
    if record.status == COMPLETE:
        lines += ["", texts.ALL_DONE]
    return "\n".join(lines) + "\n"


def write_all(course: Course, records: Sequence[LearnerRecord], folder: Path) -> list[Path]:
    """Write one feedback file per learner into `folder` (created if missing), and the index; return the
    feedback files' paths.

    The index (`INDEX`) maps each learner id to its file, for a TA matching files to learners; it is the
    instructor's (it names the whole class), like the folder it sits in until the files are handed out.
    """
    folder.mkdir(parents=True, exist_ok=True)
    names = file_names([record.learner for record in records])
    written = []
    for record in records:
        path = folder / names[record.learner]
        path.write_text(render(course, record), encoding="utf-8")
        written.append(path)
    with (folder / INDEX).open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["learner", "file"])
        for record in records:
            writer.writerow([defuse(record.learner), names[record.learner]])
    return written
