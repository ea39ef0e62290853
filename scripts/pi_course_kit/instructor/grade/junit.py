"""JUnit XML of a graded class, in the shape pytest's `--junitxml` writes, built from the trusted verdicts.

Not pytest's own file: that one is written by the process that runs the learner's code, so the learner
could rewrite it. The trusted per-test verdicts carry the same facts, written here with the same schema.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from pi_course_kit.core.manifest import Course
from pi_course_kit.instructor.grade.grader import LearnerRecord
from pi_course_kit.instructor.grade.points import points_of


def _case(suite: ET.Element, learner: str, nodeid: str) -> ET.Element:
    file, _, name = nodeid.partition("::")
    module = Path(file).with_suffix("").as_posix().replace("/", ".")
    *classes, test = name.split("::")
    classname = ".".join([learner, module, *classes])
    return ET.SubElement(suite, "testcase", classname=classname, name=test, file=file, time="0.000")


def build(course: Course, records: Sequence[LearnerRecord]) -> ET.Element:
    """One <testsuite> per learner, one <testcase> per pristine test; the learner's points as properties."""
    root = ET.Element("testsuites", name="pi-course grade")
    totals: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    host = socket.gethostname()
    for record in records:
        counts: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        suite = ET.SubElement(
            root, "testsuite", name=record.learner, hostname=host, time=f"{record.seconds:.3f}"
        )
        points = points_of(course, record)
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("status", record.status),
            ("checkpoint", record.checkpoint or ""),
            ("points", f"{points.points:g}"),
            ("max_points", f"{points.max_points:g}"),
            ("extra_points", f"{points.extra:g}"),
        ):
            ET.SubElement(props, "property", name=key, value=value)
        messages = {score.id: score.first_failure for score in record.labs}
        for verdict in record.tests:
            case = _case(suite, record.learner, verdict["nodeid"])
            counts["tests"] += 1
            outcome = verdict["outcome"]
            if outcome == "skipped":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="skipped tests never count as passed")
            elif outcome == "missing":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=f"the test did not run ({record.status})")
            elif outcome != "passed":
                counts["failures"] += 1
                # The lab's first failure message belongs to its first failing test only.
                message = messages.pop(verdict["lab"], "") or "failed"
                ET.SubElement(case, "failure", message=message)
        if not record.tests:
            case = ET.SubElement(suite, "testcase", classname=record.learner, name="grading", time="0.000")
            counts["tests"] += 1
            counts["errors"] += 1
            ET.SubElement(case, "error", message=f"{record.status}: {record.message}".strip(": "))
        for key, count in counts.items():
            suite.set(key, str(count))
            totals[key] += count
    for key, total in totals.items():
        root.set(key, str(total))
    ET.indent(root)
    return root


def write(path: Path, course: Course, records: Sequence[LearnerRecord]) -> None:
    """Write the class's JUnit XML file."""
    ET.ElementTree(build(course, records)).write(path, encoding="utf-8", xml_declaration=True)
