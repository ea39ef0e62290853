"""Gradescope's autograder entry point: grade /autograder/submission through the same Grader and sandbox,
write /autograder/results/results.json to Gradescope's published format (checked against a schema).

`run_autograder` (from `pi-course export gradescope`) runs `python -m pi_course_kit.instructor.grade.gradescope`.
The autograder root is /autograder unless PI_COURSE_AUTOGRADER_ROOT names another (a test's temporary one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Course, ManifestError
from pi_course_kit.instructor.grade import feedback, roster, texts
from pi_course_kit.instructor.grade.grader import SANDBOX_ERROR, SKIPPED, Grader, LearnerRecord
from pi_course_kit.instructor.grade.points import points_of
from pi_course_kit.instructor.grade.sandbox import Limits, MiB

ROOT_ENV = "PI_COURSE_AUTOGRADER_ROOT"
VISIBILITY = ["hidden", "after_due_date", "after_published", "visible"]
FORMATS = ["text", "html", "simple_format", "md", "ansi"]

#: The fields of results.json as Gradescope's autograder specification publishes them
#: (gradescope-autograders.readthedocs.io/en/latest/specs/); unknown fields are refused, to catch typos.
RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": {"enum": FORMATS},
        "test_output_format": {"enum": FORMATS},
        "test_name_format": {"enum": FORMATS},
        "visibility": {"enum": VISIBILITY},
        "stdout_visibility": {"enum": VISIBILITY},
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "score", "max_score", "status", "output", "visibility"],
                "properties": {
                    "score": {"type": "number"},
                    "max_score": {"type": "number", "minimum": 0},
                    "status": {"enum": ["passed", "failed"]},
                    "name": {"type": "string", "minLength": 1},
                    "name_format": {"enum": FORMATS},
                    "number": {"type": "string"},
                    "output": {"type": "string"},
                    "output_format": {"enum": FORMATS},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "visibility": {"enum": VISIBILITY},
                    "extra_data": {"type": "object"},
                },
            },
        },
        "leaderboard": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "value"],
                "properties": {"name": {"type": "string"}, "value": {}, "order": {"enum": ["asc", "desc"]}},
            },
        },
    },
}


def validate(results: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `results` strays from Gradescope's published fields."""
    jsonschema.validate(results, RESULTS_SCHEMA)


def find_submission(folder: Path, package: str) -> Path | None:
    """The folder holding the learner's package: the submission itself or one folder inside it."""
    if (folder / package).is_dir() or (folder / roster.META).is_file():
        return folder
    found = roster.find_submissions(folder, package, bare=True) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def results_for(course: Course, record: LearnerRecord) -> dict[str, Any]:
    """results.json for one graded record: one Gradescope test per lab, scored in points."""
    points = points_of(course, record)
    tests = []
    for number, row in enumerate(points.labs, 1):
        extra = f"（{texts.OPTIONAL}）" if row.optional else ""
        tests.append(
            {
                "name": f"Lab {row.id} {row.title}{extra}",
                "number": str(number),
                "score": row.points,
                "max_score": 0.0 if row.optional else row.max_points,
                "status": "passed" if row.status == "done" else "failed",
                "output": "\n".join(feedback.lab_lines(course, record, row)),
                "output_format": "md",
                "visibility": "visible",
                "tags": [f"lab:{row.id}", *(["extra-credit"] if row.optional else [])],
            }
        )
    return {
        "score": points.score,
        "execution_time": record.seconds,
        "output": feedback.render(course, record, points),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"status": record.status, "flags": record.flags, "checkpoint": record.checkpoint},
        "tests": tests,
    }


def not_graded(message: str) -> dict[str, Any]:
    """results.json for a submission that could not be graded: 0 points, and what to do, in the output."""
    return {"score": 0.0, "output": message, "output_format": "text", "visibility": "visible", "tests": []}


def grade(root: Path, course: Course, checkpoint_id: str, limits: Limits) -> tuple[dict[str, Any], bool]:
    """Grade `root/submission`; the results and whether grading itself worked."""
    submission = find_submission(root / "submission", course.package)
    if submission is None:
        message = (
            f"没有找到 {course.package}/ 文件夹：请把练习文件夹里的 {course.package}/ 整个上传"
            f"（No {course.package}/ folder was found in the submission; upload your {course.package}/ folder.）"
        )
        return not_graded(message), True
    grader = Grader(course, limits, 1, checkpoint_id)
    try:
        record = grader.grade_all([submission])[0]
    finally:
        grader.close()
    record.learner = "submission"
    if record.status in (SKIPPED, SANDBOX_ERROR):
        return not_graded(f"{texts.record_status(record.status)}：{record.message}"), False
    return results_for(course, record), True


def main(argv: Sequence[str] | None = None) -> int:
    """Grade the submission and write results.json; exit 1 when the grading environment itself failed."""
    parser = argparse.ArgumentParser(prog="run_autograder", description=__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV, "/autograder")))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--memory", type=int, default=1024, help="MiB")
    args = parser.parse_args(argv)
    root: Path = args.root
    limits = Limits(
        wall_seconds=args.timeout,
        memory_bytes=args.memory * MiB,
        cpu_seconds=max(1, int(args.timeout)),
        processes=64,
    )
    try:
        course = manifest.load(root / "source" / "course" / "course.toml")
        results, worked = grade(root, course, args.checkpoint, limits)
    except (KitError, ManifestError) as error:
        results, worked = not_graded(f"autograder setup problem, tell the instructor: {error}"), False
    validate(results)
    (root / "results").mkdir(parents=True, exist_ok=True)
    out = root / "results" / "results.json"
    out.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"score {results['score']:g}; wrote {out}" + ("" if worked else " (grading failed; see output)"))
    return 0 if worked else 1


if __name__ == "__main__":
    sys.exit(main())
