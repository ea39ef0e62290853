"""JUnit XML of a graded class, built from the trusted verdicts, in the schema CI servers read.

Not pytest's own file: that one is written by the process that runs the learner's code, so the learner
could rewrite it. The trusted per-test verdicts carry the same facts. The file is written with
`junitparser` to the Jenkins JUnit schema (xunit-plugin's junit-10.xsd, kept in tests/kit/data), which
GitLab and CodeGrade also read: no `file` on a testcase, no `skipped` on <testsuites>. It also holds to
the older Jenkins schema (dtkit's junit-4.xsd, the widely copied "jenkins-junit.xsd"), whose <skipped>
is a plain string: a skipped test's reason is its text, with no attribute.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from pi_course_kit.core.manifest import Course
from pi_course_kit.instructor.grade.gradebook import LearnerRecord, points_of

#: Characters XML 1.0 cannot hold at all (not even as a character reference): a learner's message with
#: one of them would make the whole file unreadable, so each is written as a visible escape instead.
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

SKIPPED_MESSAGE = "skipped tests never count as passed"


def xml_text(text: object) -> str:
    """Text that any XML 1.0 parser accepts: each illegal character becomes `\\uXXXX`."""
    return _XML_ILLEGAL.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))


def _seconds(record: LearnerRecord, nodeid: str) -> float:
    """The test's duration as its run reported it, kept within the learner's whole run (0 if unknown)."""
    seconds = record.durations.get(nodeid, 0.0)
    return round(min(max(seconds, 0.0), record.seconds), 6) if seconds == seconds else 0.0


def _set_time(element: TestCase | TestSuite | JUnitXml, seconds: float, places: int = 3) -> None:
    """Write a time in plain decimal notation: the schema's pattern refuses Python's `1e-05`."""
    element._elem.set("time", f"{max(seconds, 0.0):.{places}f}")


def _case(learner: str, nodeid: str, seconds: float) -> TestCase:
    file, _, name = nodeid.partition("::")
    module = Path(file).with_suffix("").as_posix().replace("/", ".")
    *classes, test = name.split("::")
    classname = ".".join([learner, module, *classes])
    case = TestCase(xml_text(test), xml_text(classname))
    # Microseconds: a quick focused test takes less than the millisecond pytest's own file would show.
    _set_time(case, seconds, places=6)
    return case


def _result(kind: type[Failure | Error], message: str, type_: str) -> Failure | Error:
    """A failure/error element whose message is also its text (the part most viewers show)."""
    result = kind(xml_text(message), xml_text(type_))
    result.text = xml_text(message)
    return result


def _skipped(reason: str) -> Skipped:
    """A skipped element: its reason as text only (junit-4.xsd allows no `message` or `type` on it)."""
    result = Skipped()
    result.text = xml_text(reason)
    return result


def _suite(course: Course, record: LearnerRecord, host: str) -> TestSuite:
    suite = TestSuite(xml_text(record.learner))
    suite.hostname = xml_text(host)
    points = points_of(course, record)
    for key, value in (
        ("status", record.status),
        ("checkpoint", record.checkpoint or ""),
        ("points", f"{points.points:g}"),
        ("max_points", f"{points.max_points:g}"),
        ("extra_points", f"{points.extra:g}"),
        # Tests the batch's run of the solution proved (passed without running here: time 0).
        ("proven_tests", str(sum(verdict.proven for verdict in record.tests))),
    ):
        suite.add_property(key, xml_text(value))
    messages = {score.id: score.first_failure for score in record.labs}
    # A test that never ran did not run for the record's reason (e.g. the SyntaxError that stopped the
    # import): each such case says it, so a learner opening any one of them sees why.
    not_run = f"the test did not run ({record.status})" + (f": {record.message}" if record.message else "")
    for verdict in record.tests:
        case = _case(record.learner, verdict.nodeid, _seconds(record, verdict.nodeid))
        outcome = verdict.outcome
        if outcome == "skipped":
            case.result = [_skipped(SKIPPED_MESSAGE)]
        elif outcome == "missing":
            case.result = [_result(Error, not_run, record.status)]
        elif outcome != "passed":
            # The lab's first failure message belongs to its first failing test only.
            message = messages.pop(verdict.lab, "") or "failed"
            case.result = [_result(Failure, message, outcome)]
        suite.add_testcase(case)
    if not record.tests:
        case = TestCase("grading", xml_text(record.learner))
        _set_time(case, record.seconds)
        reason = f"{record.status}: {record.message}".strip(": ")
        case.result = [_result(Error, reason, record.status)]
        suite.add_testcase(case)
    return suite


def build(course: Course, records: Sequence[LearnerRecord]) -> JUnitXml:
    """One <testsuite> per learner, one <testcase> per pristine test; the learner's points as properties."""
    root = JUnitXml("pi-course grade")
    host = socket.gethostname()
    suites = [_suite(course, record, host) for record in records]
    for suite in suites:
        root.add_testsuite(suite)
    root.update_statistics()  # type: ignore[no-untyped-call]  # junitparser leaves it unannotated
    # A suite's time is the learner's whole run (sandbox start included), not only its tests' sum.
    for suite, record in zip(suites, records, strict=True):
        _set_time(suite, record.seconds)
    _set_time(root, sum(max(record.seconds, 0.0) for record in records))
    # The Jenkins schema has no `skipped` on <testsuites> (each <testsuite> carries its own count).
    root._elem.attrib.pop("skipped", None)
    return root


def write(path: Path, course: Course, records: Sequence[LearnerRecord]) -> None:
    """Write the class's JUnit XML file (UTF-8, indented)."""
    root = build(course, records)
    tree = ET.ElementTree(root._elem)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
