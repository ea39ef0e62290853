"""GitHub Classroom: the workflow for a learner's repository, and the result its grading reporter reads.

The reporter (classroom-resources/autograding-grading-reporter) takes `runners: ID` and reads the
environment variable `<ID>_RESULTS`: base64 of `{"version": 1, "status", "max_score", "tests": [...]}`,
each test with `name`, `status` ("pass"/"fail"/"error") and `score`; it adds the tests' scores up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import feedback, workflow_yaml
from pi_course_kit.instructor.grade.grader import Grader, LearnerRecord, Reference
from pi_course_kit.instructor.grade.points import SCORED, points_of
from pi_course_kit.instructor.promises import run_tree

RUNNER = "picourse"
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"


def reporter_result(course: Course, record: LearnerRecord) -> dict[str, Any]:
    """The grading reporter's result for one learner: one test per lab, scored in points."""
    points = points_of(course, record)
    tests = [
        {
            "name": f"Lab {row.id} {row.title}",
            "status": "pass" if row.status == "done" else "fail",
            "score": row.points,
            "message": "\n".join(feedback.lab_lines(course, record, row)),
            "line_no": 0,
            "execution_time": "0s",
        }
        for row in points.labs
    ]
    status = "error" if record.status not in SCORED else "pass" if record.status == "complete" else "fail"
    return {"version": 1, "status": status, "max_score": points.max_points, "tests": tests}


def write_result(path: Path, course: Course, records: Sequence[LearnerRecord]) -> None:
    """Write the reporter's JSON for the one graded repository (the workflow base64-encodes it)."""
    if len(records) != 1:
        raise KitError(f"--classroom grades one repository at a time, got {len(records)} submissions")
    path.write_text(json.dumps(reporter_result(course, records[0]), ensure_ascii=False), encoding="utf-8")


def use_starter_reference(grader: Grader, course: Course, checkpoint: Checkpoint) -> None:
    """Learn the pristine tests from the starter when no solution ships (the installed kit's bundled course).

    Every test is collected on the starter too (it fails there with LabNotImplemented), so its node ids and
    labs are the solution's; what the learner's code passes is still judged by the same Grader.
    """
    if (course.root / checkpoint.solution).is_dir() or checkpoint.id in grader.references:
        return
    result = run_tree(course, checkpoint, checkpoint.starter)
    if not result.tests or result.collect_errors:
        raise KitError(f"the focused tests of checkpoint {checkpoint.id} cannot be collected on its starter")
    labs_of = {str(t["nodeid"]): str(t["lab"]) for t in result.tests}
    grader.references[checkpoint.id] = Reference(checkpoint, labs_of)


def workflow(checkpoint: Checkpoint, kit: str) -> str:
    """The GitHub Actions workflow for a learner's practice repository of `checkpoint` (dumped by PyYAML)."""
    return workflow_yaml.render(checkpoint, kit, RUNNER)
