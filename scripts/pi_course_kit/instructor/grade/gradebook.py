"""The gradebook: learner records and their statuses, points (computed here, once), JSON Lines and CSV.

Every output of a graded class (exports, JUnit, feedback, the class report, statistics, Gradescope,
Classroom) reads these records and imports this module, never the grader and its sandbox.

The CSV is for spreadsheets: UTF-8 with a BOM (without it, Excel on a Chinese system reads it as GBK), and
no cell a spreadsheet would run as a formula (ids and folder names are chosen by learners).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Course, Lab
from pi_course_kit.core.records import Status, clean


class Grade(StrEnum):
    """A learner record's status: how the grading of one folder ended."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    NOT_STARTED = Status.NOT_STARTED.value
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    SKIPPED = "skipped"
    SANDBOX_ERROR = "sandbox-error"
    UNGRADABLE = "ungradable"
    TAMPERING = "tampering"


COMPLETE, PARTIAL, NOT_STARTED = Grade.COMPLETE, Grade.PARTIAL, Grade.NOT_STARTED
ERROR, TIMEOUT, CRASHED, SKIPPED = Grade.ERROR, Grade.TIMEOUT, Grade.CRASHED, Grade.SKIPPED
SANDBOX_ERROR, UNGRADABLE, TAMPERING = Grade.SANDBOX_ERROR, Grade.UNGRADABLE, Grade.TAMPERING
#: Record statuses whose verdicts count; any other (skipped, sandbox-error, ...) scores nothing.
SCORED = (COMPLETE, PARTIAL, NOT_STARTED)
#: A lab's status in the gradebook: the report's (done, failing, not started, blocked), or tampering.
LAB_STATUSES = (Status.DONE, Status.FAILING, Status.NOT_STARTED, Status.BLOCKED, Grade.TAMPERING)
#: Fields that differ between two gradings of the same folder (how long it, and each test, took).
TIMING_FIELDS = ("seconds", "durations")
#: How a test can end in the gradebook: pytest's outcomes, or missing when the learner's run did not report
#: it.
OUTCOMES = ("passed", "failed", "skipped", "error", "missing")


def _text(data: dict[str, Any], name: str, default: str = "", limit: int = 4096) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise TypeError(f"{name} is not a string")
    return clean(value, limit)


def _count(data: dict[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name} is not a count")
    return value


def _texts(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise TypeError(f"{name} is not a list")
    return [clean(item, 4096) for item in value]


@dataclass
class LabScore:
    """One lab of one learner: passed/total against the pristine tests, and a status."""

    id: str
    title: str
    optional: bool
    passed: int
    total: int
    status: str
    first_failure: str = ""
    #: The lab whose code every failure stops in, when the status is blocked.
    blocked_by: str | None = None

    @property
    def status_text(self) -> str:
        """The status as a spreadsheet cell shows it: `blocked by 6.1` names the blocker."""
        return f"blocked by {self.blocked_by}" if self.status == Status.BLOCKED else str(self.status)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabScore:
        """A lab score back from JSON, checked; an older kit's `blocked by X` status is split in two."""
        status = _text(data, "status", limit=40)
        blocked_by = data.get("blocked_by")
        if status.startswith("blocked by "):
            status, blocked_by = Status.BLOCKED, status.removeprefix("blocked by ")
        if status not in LAB_STATUSES:
            raise ValueError(f"unknown lab status {status!r}")
        return cls(
            id=_text(data, "id", limit=40),
            title=_text(data, "title"),
            optional=bool(data.get("optional", False)),
            passed=_count(data, "passed"),
            total=_count(data, "total"),
            status=status,
            first_failure=_text(data, "first_failure"),
            blocked_by=clean(blocked_by, 40) if blocked_by is not None else None,
        )


@dataclass(frozen=True)
class TestVerdict:
    """One pristine test's verdict for one learner, in run order."""

    __test__ = False  # not a pytest test class

    nodeid: str
    lab: str
    outcome: str
    #: A held-out test (course.toml `held_out`): a learner-visible output never names it.
    held_out: bool = False
    #: Passed by the batch's reference proof without running: the test runs none of the learner's changes.
    proven: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestVerdict:
        """A verdict back from JSON, checked."""
        outcome = _text(data, "outcome", limit=20)
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        held_out, proven = data.get("held_out", False), data.get("proven", False)
        if not isinstance(held_out, bool) or not isinstance(proven, bool):
            raise TypeError("held_out or proven is not true or false")
        return cls(_text(data, "nodeid"), _text(data, "lab", limit=40), outcome, held_out, proven)


@dataclass
class LearnerRecord:
    """Everything the grader found for one folder: one JSON object per learner."""

    learner: str
    folder: str
    status: str
    checkpoint: str | None = None
    passed: int = 0
    total: int = 0
    labs: list[LabScore] = field(default_factory=list)
    tests_edited: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    message: str = ""
    sandbox: str = ""
    #: How the run's memory was held to --memory: "cgroup", "proc" or "per-process" (sandbox.MEMORY_*).
    memory: str = ""
    seconds: float = 0.0
    #: One verdict per pristine test, in run order ("missing" when it did not run).
    tests: list[TestVerdict] = field(default_factory=list)
    #: Seconds each pristine test that ran took, by node id, as its run reported them (JUnit's testcase time).
    durations: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data."""
        return asdict(self)

    @property
    def held_out_run(self) -> bool:
        """Whether the run graded held-out tests: then all of its text is learner-controlled and secret.

        Learner code ran in the same process as the held-out tests and can read them, so any text the run
        reported (failure and import messages, locations) may carry a held-out line. Outputs a learner
        sees show none of it (see `feedback.learner_view`); the instructor's keep it.
        """
        return any(test.held_out for test in self.tests)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LearnerRecord:
        """A record back from its JSON object (as `write_json_lines` wrote it), checked and cleaned."""
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        status = _text(data, "status", limit=40)
        if status not in set(Grade):
            raise ValueError(f"unknown status {status!r}")
        checkpoint = data.get("checkpoint")
        labs, tests, durations = data.get("labs", []), data.get("tests", []), data.get("durations", {})
        if not isinstance(labs, list) or not isinstance(tests, list) or not isinstance(durations, dict):
            raise TypeError("labs, tests or durations has the wrong type")
        seconds = data.get("seconds", 0.0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError("seconds is not a number")
        return cls(
            learner=_text(data, "learner"),
            folder=_text(data, "folder"),
            status=status,
            checkpoint=clean(checkpoint, 40) if checkpoint is not None else None,
            passed=_count(data, "passed"),
            total=_count(data, "total"),
            labs=[LabScore.from_json(lab) for lab in labs],
            tests_edited=_texts(data, "tests_edited"),
            flags=_texts(data, "flags"),
            message=_text(data, "message"),
            sandbox=_text(data, "sandbox", limit=200),
            memory=_text(data, "memory", limit=40),
            seconds=float(seconds),
            tests=[TestVerdict.from_json(test) for test in tests],
            durations={
                clean(node, 4096): float(value)
                for node, value in durations.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            },
        )


def record_from_json(data: dict[str, Any]) -> LearnerRecord:
    """A LearnerRecord back from its JSON object (as `write_json_lines` wrote it)."""
    return LearnerRecord.from_json(data)


# -- points ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabPoints:
    """One lab's points for one learner."""

    id: str
    title: str
    points: float
    max_points: float
    optional: bool
    credit: str
    passed: int
    total: int
    status: str
    blocked_by: str | None = None

    @property
    def status_text(self) -> str:
        """The status as a spreadsheet cell shows it: `blocked by 6.1` names the blocker."""
        return f"blocked by {self.blocked_by}" if self.status == Status.BLOCKED else str(self.status)


@dataclass(frozen=True)
class Points:
    """One learner's points: required labs make max_points; optional labs add extra credit."""

    points: float
    max_points: float
    extra: float
    max_extra: float
    labs: tuple[LabPoints, ...] = field(default=())

    @property
    def score(self) -> float:
        """Required points plus extra credit: what a gradebook records."""
        return round(self.points + self.extra, 2)


def lab_points(lab: Lab, passed: int, total: int) -> float:
    """Points for a lab with `passed` of `total` pristine tests passing, by the lab's credit rule."""
    if total <= 0 or lab.points <= 0:
        return 0.0
    if lab.credit == "all-or-nothing":
        return lab.points if passed == total else 0.0
    return round(lab.points * passed / total, 2)


def points_of(course: Course, record: LearnerRecord) -> Points:
    """A learner's points; a record that was not graded (skipped, sandbox error, ...) scores 0 of the
    maximum."""
    checkpoint = course.checkpoint(record.checkpoint) if record.checkpoint else None
    labs = checkpoint.labs if checkpoint else ()
    scores = {score.id: score for score in record.labs}
    counted = record.status in SCORED
    rows = []
    for lab in labs:
        score = scores.get(lab.id)
        passed, total = (score.passed, score.total) if score else (0, 0)
        earned = lab_points(lab, passed, total) if counted else 0.0
        status, blocked_by = (score.status, score.blocked_by) if score else (record.status, None)
        rows.append(
            LabPoints(
                lab.id,
                lab.title,
                earned,
                lab.points,
                lab.optional,
                lab.credit,
                passed,
                total,
                status,
                blocked_by,
            )
        )
    required = [row for row in rows if not row.optional]
    extra = [row for row in rows if row.optional]
    return Points(
        points=round(sum(row.points for row in required), 2),
        max_points=round(sum(row.max_points for row in required), 2),
        extra=round(sum(row.points for row in extra), 2),
        max_extra=round(sum(row.max_points for row in extra), 2),
        labs=tuple(rows),
    )


# -- the class at a glance ------------------------------------------------------------------------


@dataclass(frozen=True)
class LabOverview:
    """One lab across the graded class: how many finished it, and the mean of tests passed."""

    id: str
    done: int
    graded: int
    mean_passed: float
    total: int


@dataclass(frozen=True)
class ClassSummary:
    """The class at a glance: learners per status, and per lab how many finished it."""

    learners: int
    graded: int
    statuses: dict[str, int]
    tests_edited: int
    labs: tuple[LabOverview, ...]


def summary(records: Sequence[LearnerRecord]) -> ClassSummary:
    """The class summary: how many learners per status, and per lab how many finished it."""
    graded = [r for r in records if r.status != SKIPPED]
    scores: dict[str, list[LabScore]] = {}
    for record in graded:
        for score in record.labs:
            scores.setdefault(score.id, []).append(score)
    labs = tuple(
        LabOverview(
            lab_id,
            sum(1 for s in rows if s.status == Status.DONE),
            len(rows),
            round(sum(s.passed for s in rows) / len(rows), 1),
            rows[0].total,
        )
        for lab_id, rows in scores.items()
    )
    return ClassSummary(
        learners=len(records),
        graded=len(graded),
        statuses=dict(Counter(str(r.status) for r in records)),
        tests_edited=sum(1 for r in records if r.tests_edited),
        labs=labs,
    )


# -- on disk --------------------------------------------------------------------------------------


def write_json_lines(path: Path, records: Sequence[LearnerRecord]) -> None:
    """One JSON object per learner and line, so that batches graded apart can simply be concatenated."""
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            data = {
                **record.to_json(),
                "learner": clean(record.learner, 4096),
                "folder": clean(record.folder, 4096),
            }
            # U+2028/U+2029 inside a string are escaped: many line readers split on them.
            line = (
                json.dumps(data, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            )
            handle.write(line + "\n")


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
                records.append(LearnerRecord.from_json(json.loads(line)))
            except (ValueError, TypeError, AttributeError) as error:
                raise KitError(
                    f"{path}:{number}: not a grading record ({error}); give files written by "
                    "`pi-course grade --json`"
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
                row += [lab.points, lab.passed, lab.total, lab.status_text] if lab else ["", "", "", ""]
            row += ["; ".join(record.tests_edited), "; ".join(record.flags), record.message]
            writer.writerow([defuse(cell) for cell in row])
