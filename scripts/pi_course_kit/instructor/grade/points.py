"""Points from verdicts: each lab's points from course.toml, fraction or all-or-nothing; optional labs add extra."""

from __future__ import annotations

from dataclasses import dataclass, field

from pi_course_kit.core.manifest import Course, Lab
from pi_course_kit.instructor.grade.grader import COMPLETE, NOT_STARTED, PARTIAL, LabScore, LearnerRecord

#: Record statuses whose verdicts count; any other (skipped, sandbox-error, ...) scores nothing.
SCORED = (COMPLETE, PARTIAL, NOT_STARTED)


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


def _lab(course: Course, checkpoint_id: str | None, score: LabScore) -> Lab | None:
    for checkpoint in course.checkpoints:
        if checkpoint_id in (None, checkpoint.id):
            for lab in checkpoint.tree_labs or checkpoint.labs:
                if lab.id == score.id:
                    return lab
    return None


def points_of(course: Course, record: LearnerRecord) -> Points:
    """A learner's points; a record that was not graded (skipped, sandbox error, ...) scores 0 of the maximum."""
    checkpoint = course.checkpoint(record.checkpoint) if record.checkpoint else None
    labs = checkpoint.labs if checkpoint else ()
    scores = {score.id: score for score in record.labs}
    counted = record.status in SCORED
    rows = []
    for lab in labs:
        score = scores.get(lab.id)
        passed, total = (score.passed, score.total) if score else (0, 0)
        earned = lab_points(lab, passed, total) if counted else 0.0
        status = score.status if score else record.status
        rows.append(
            LabPoints(lab.id, lab.title, earned, lab.points, lab.optional, lab.credit, passed, total, status)
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
