"""The class's figures, computed in one place for the terminal summary and the class report.

Every learner of the batch (every roster row) is counted. A submission that could not be scored (it
does not import, it timed out, it was not a gradable folder, ...) is a 0 in every figure, never left
out: leaving it out once made the report's mean higher than the gradebook's. Scores are on one scale,
the required labs' points; optional labs add extra credit, counted apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import DONE
from pi_course_kit.instructor.grade.gradebook import COMPLETE, SKIPPED, LearnerRecord, points_of

#: How many equal bands the score distribution has.
BANDS = 10


@dataclass(frozen=True)
class LabRate:
    """How many learners of the class finished one lab."""

    id: str
    title: str
    optional: bool
    points: float
    credit: str
    done: int
    learners: int

    @property
    def rate(self) -> float:
        """The share of the class that finished the lab (0 for an empty class)."""
        return self.done / self.learners if self.learners else 0.0


@dataclass(frozen=True)
class ClassStatistics:
    """The class's figures: counts, the score of every learner on one scale, and each lab's rate."""

    learners: int
    #: Submissions the grader ran (every status but skipped): what the terminal calls graded.
    graded: int
    complete: int
    statuses: dict[str, int]
    #: The scale: the sum of the required labs' points.
    required_max: float
    #: The most extra credit the optional labs can add.
    extra_max: float
    #: Each learner's required-lab points, in batch order; 0 when the submission could not be scored.
    scores: tuple[float, ...]
    #: Each learner's extra credit, in batch order.
    extras: tuple[float, ...]
    labs: tuple[LabRate, ...]

    @property
    def mean(self) -> float:
        """The class's mean score on the required scale, every learner counted."""
        return round(sum(self.scores) / len(self.scores), 2) if self.scores else 0.0

    @property
    def mean_extra(self) -> float:
        """The class's mean extra credit, every learner counted."""
        return round(sum(self.extras) / len(self.extras), 2) if self.extras else 0.0

    def bands(self) -> list[tuple[float, float, int]]:
        """(low, high, learners) for BANDS equal bands of the scale; the last band includes its top."""
        top = self.required_max if self.required_max > 0 else 1.0
        edges = [round(top * i / BANDS, 2) for i in range(BANDS + 1)]
        counts = [0] * BANDS
        for score in self.scores:
            index = min(int(min(max(score, 0.0), top) / top * BANDS), BANDS - 1)
            counts[index] += 1
        return [(edges[i], edges[i + 1], counts[i]) for i in range(BANDS)]


def main_checkpoint(course: Course, records: Sequence[LearnerRecord]) -> Checkpoint | None:
    """The checkpoint most records were graded against (None when no record names one)."""
    ids = Counter(record.checkpoint for record in records if record.checkpoint)
    return course.checkpoint(ids.most_common(1)[0][0]) if ids else None


def statistics(course: Course, records: Sequence[LearnerRecord]) -> ClassStatistics:
    """The figures of a batch of records, every learner counted."""
    checkpoint = main_checkpoint(course, records)
    labs = checkpoint.labs if checkpoint else ()
    points = [points_of(course, record) for record in records]
    rates = tuple(
        LabRate(
            lab.id,
            lab.title,
            lab.optional,
            lab.points,
            lab.credit,
            sum(1 for r in records for s in r.labs if s.id == lab.id and s.status == DONE),
            len(records),
        )
        for lab in labs
    )
    return ClassStatistics(
        learners=len(records),
        graded=sum(1 for record in records if record.status != SKIPPED),
        complete=sum(1 for record in records if record.status == COMPLETE),
        statuses=dict(Counter(record.status for record in records)),
        required_max=round(sum(lab.points for lab in labs if not lab.optional), 2),
        extra_max=round(sum(lab.points for lab in labs if lab.optional), 2),
        scores=tuple(p.points for p in points),
        extras=tuple(p.extra for p in points),
        labs=rates,
    )
