"""Grading outputs for the five-folder class (fixture course): points, feedback, JUnit, CSV and the class
report."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import FX
from grade_class import MISTAKE, make_class
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import texts
from pi_course_kit.instructor.grade.feedback import INDEX, file_name, file_names
from pi_course_kit.instructor.grade.gradebook import LabScore, LearnerRecord, lab_points, points_of
from pi_course_kit.instructor.grade.questions import question


@pytest.fixture(scope="module")
def graded(
    course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Grade the class once with every output, in the course's language (the kit's tests default to
    English)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PI_COURSE_LANG", "zh_CN")
        return grade_class(course, checkpoint, tmp_path_factory.mktemp("class"))


def grade_class(course: Course, checkpoint: Checkpoint, root: Path) -> dict[str, Any]:
    """Make the five-folder class below `root` and grade it with every output."""
    make_class(course, checkpoint, root / "sub")
    out = root / "out"
    out.mkdir()
    code = cli.main(
        [
            "grade",
            "--submissions-root",
            str(root / "sub"),
            "--json",
            str(out / "grades.jsonl"),
            "--csv",
            str(out / "grades.csv"),
            "--junit",
            str(out / "junit.xml"),
            "--feedback",
            str(out / "feedback"),
            "--report",
            str(out / "class.html"),
            "--mutations",
            "--mutation-cache",
            str(root / "cache"),
            "--jobs",
            "2",
            "--quiet",
            *FX,
        ]
    )
    lines = (out / "grades.jsonl").read_text(encoding="utf-8").splitlines()
    return {"code": code, "out": out, "records": {r["learner"]: r for r in map(json.loads, lines)}}


def out(graded: dict[str, Any]) -> Path:
    """The folder holding the outputs."""
    folder = graded["out"]
    assert isinstance(folder, Path)
    return folder


def csv_rows(graded: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The CSV rows by learner id."""
    with (out(graded) / "grades.csv").open(encoding="utf-8-sig") as handle:
        return {row["learner"]: row for row in csv.DictReader(handle)}


@pytest.mark.sandbox
def test_submissions_below_a_root_are_found_and_named_by_their_path(graded: dict[str, Any]) -> None:
    """Are the five pi-practice folders found below the root, graded, and named apart by their paths?"""
    assert graded["code"] == 0
    assert sorted(graded["records"]) == [
        "complete/pi-practice",
        "edited/pi-practice",
        "mistake/pi-practice",
        "transfer/pi-practice",
        "untouched/pi-practice",
    ]


@pytest.mark.sandbox
def test_points_follow_the_manifest_with_partial_credit_and_extra_credit(graded: dict[str, Any]) -> None:
    """Do points come from course.toml: 100 for complete, +10 extra for the optional lab, fractions for
    1.2?"""
    rows = csv_rows(graded)
    assert (
        rows["complete/pi-practice"]["points"] == "100.0"
        and rows["complete/pi-practice"]["extra_points"] == "0.0"
    )
    assert (
        rows["transfer/pi-practice"]["score"] == "110.0"
        and rows["transfer/pi-practice"]["max_points"] == "100.0"
    )
    assert rows["edited/pi-practice"]["points"] == "50.0"
    assert rows["untouched/pi-practice"]["points"] == "0.0"
    mistake = rows["mistake/pi-practice"]
    passed, total = int(mistake["1.2 passed"]), int(mistake["1.2 total"])
    assert 0 < passed < total  # the learner's one mistake fails some of 1.2's tests
    assert float(mistake["1.2 points"]) == round(50 * passed / total, 2)
    assert float(mistake["points"]) == 50 + float(mistake["1.2 points"])


def test_all_or_nothing_lab_scores_zero_until_every_test_passes(
    course: Course, checkpoint: Checkpoint
) -> None:
    """Does an all-or-nothing lab give 0 for 2 of 3 tests and its full points for 3 of 3, while fraction labs
    scale?"""
    transfer = next(lab for lab in checkpoint.labs if lab.credit == "all-or-nothing")
    fraction = next(lab for lab in checkpoint.labs if lab.credit == "fraction" and lab.points)
    assert lab_points(transfer, 2, 3) == 0.0 and lab_points(transfer, 3, 3) == transfer.points
    assert lab_points(fraction, 1, 2) == fraction.points / 2 and lab_points(fraction, 0, 0) == 0.0


def test_a_record_that_was_not_graded_scores_nothing(course: Course, checkpoint: Checkpoint) -> None:
    """Does a timed-out record score 0 even when some of its labs show passed tests?"""
    lab = checkpoint.labs[0]
    record = LearnerRecord("x", "/x", "sandbox-error", checkpoint.id)
    record.labs = [LabScore(lab.id, lab.title, lab.optional, 5, 5, "done")]
    points = points_of(course, record)
    assert points.points == 0.0 and points.max_points == sum(lab.points for lab in checkpoint.required_labs)


@pytest.mark.sandbox
def test_feedback_names_the_first_failing_test_its_question_and_the_hint(
    graded: dict[str, Any], course: Course, checkpoint: Checkpoint
) -> None:
    """Does the feedback of the learner with a mistake give the first failing test, its docstring and a
    hint?"""
    text = (out(graded) / "feedback" / file_name("mistake/pi-practice")).read_text(encoding="utf-8")
    record = graded["records"]["mistake/pi-practice"]
    failing = next(t["nodeid"] for t in record["tests"] if t["lab"] == "1.2" and t["outcome"] != "passed")
    assert f"`{failing}`" in text
    asked = question(course, checkpoint, failing)
    assert asked and asked in text
    lab = checkpoint.lab("1.2")
    assert any(hint in text for hint in lab.hints)
    assert "有测试未通过" in text and "得分" in text


@pytest.mark.sandbox
def test_every_learner_gets_a_feedback_file_and_a_finished_one_is_told_so(graded: dict[str, Any]) -> None:
    """Is there one feedback file per learner (colliding folder names kept apart), the complete one saying
    done?"""
    files = sorted(p.name for p in (out(graded) / "feedback").iterdir() if p.name != INDEX)
    assert files == sorted(file_names(list(graded["records"])).values())
    complete = (out(graded) / "feedback" / file_name("complete/pi-practice")).read_text(encoding="utf-8")
    assert "全部完成" in complete and "100 / 100" in complete


@pytest.mark.sandbox
def test_edited_tests_are_mentioned_in_the_feedback(graded: dict[str, Any]) -> None:
    """Is the learner who edited a test told that the pristine tests were used?"""
    text = (out(graded) / "feedback" / file_name("edited/pi-practice")).read_text(encoding="utf-8")
    assert "原始测试" in text and "50 / 100" in text


@pytest.mark.sandbox
def test_junit_has_one_suite_per_learner_and_counts_the_failures(graded: dict[str, Any]) -> None:
    """Does the JUnit file hold a testsuite per learner whose failures match the failed verdicts?"""
    root = ET.parse(out(graded) / "junit.xml").getroot()
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == set(graded["records"])
    for learner, record in graded["records"].items():
        suite = suites[learner]
        failed = sum(1 for t in record["tests"] if t["outcome"] == "failed")
        assert int(suite.get("failures", "-1")) == failed == len(suite.findall("testcase/failure"))
        assert int(suite.get("tests", "-1")) == len(record["tests"])
    untouched = suites["untouched/pi-practice"]
    points = {p.get("name"): p.get("value") for p in untouched.iter("property")}
    assert points["points"] == "0" and points["max_points"] == "100"


@pytest.mark.sandbox
def test_class_report_shows_charts_pass_rates_and_linked_mistakes(graded: dict[str, Any]) -> None:
    """Does the report embed two SVG charts, a pass rate per lab and link the 1.2 mistake to its mutation?"""
    html = (out(graded) / "class.html").read_text(encoding="utf-8")
    assert html.count("<svg") == 2
    for lab in ("1.1", "1.2", "extra1"):
        assert f"Lab {lab}" in html
    assert f'href="#mutation-{MISTAKE}"' in html and f'id="mutation-{MISTAKE}"' in html
    assert f"pi-course diagnose a1 {MISTAKE}" in html
    # The tests failed by a learner who had started the lab rank first: the mistake's tests lead the table.
    table = html[html.index('id="failed"') :]
    rank = '<td data-label="#" class="n">{}</td>'
    first_row = table[table.index(rank.format(1)) : table.index(rank.format(2))]
    assert f"#mutation-{MISTAKE}" in first_row and "Lab 1.2" in first_row


def test_every_grading_word_has_a_chinese_translation_and_english_stays_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Is each msgid of the grading outputs translated in the zh_CN catalog, with English when
    PI_COURSE_LANG=en?"""
    monkeypatch.setenv("PI_COURSE_LANG", "zh_CN")
    assert [m for m in texts.msgids() if texts._(m) == m] == []
    monkeypatch.setenv("PI_COURSE_LANG", "en")
    assert texts.FEEDBACK_TITLE == "Grading feedback"
