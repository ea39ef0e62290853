"""Red-team attacks on what grading writes (issue 40, X1 and X2): held-out tests stay held out in every
output a learner sees, while the instructor's own outputs keep the detail.

Learner code runs in the same process as the held-out tests, so it can read their lines and send one
out in an exception. A copy of the fixture course gets a held-out test; one learner's package raises an
ImportError carrying a held-out line as soon as it finds one, another passes every public test and fails
the held-out one. Neither the line nor the held-out test's name may reach the feedback file, Gradescope's
results.json, the Classroom reporter's result or the class version of the class report.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import CollectError
from pi_course_kit.core.records import TestRecord as Record
from pi_course_kit.instructor.grade import class_report, classroom, feedback, gradebook, gradescope, scoring
from pi_course_kit.instructor.grade.gradebook import LearnerRecord
from pi_course_kit.learner import practice

FIXTURE = Path(__file__).with_name("fixture_course")
#: A line only the held-out file holds (split here, so that this module is never mistaken for it).
SECRET = "HELD" + "SECRET-7Q: the held-out answer is 1000"
HELD_NAME = "test_add_from_999_reaches_a_thousand_heldname"
HELD_QUESTION = "From 999, does add reach 1000 (HELD" + "SECRET question)?"
HELD_FILE = "tests/held_out/test_a1_held_out.py"
HELD_SOURCE = f'''"""Held-out test of the fixture's checkpoint a1 (the red team's target)."""

import pytest
from fx_course import Counter

HELD_LINE = "{SECRET}"


@pytest.mark.lab1_1
def {HELD_NAME}() -> None:
    """{HELD_QUESTION}"""
    counter = Counter()
    counter.count = 999
    assert counter.add() == 1000, HELD_LINE
'''

#: Appended to the learner's package __init__: when a file of the tree holds a held-out line (only a
#: graded run has one), the package refuses to import with that line as its message.
EXFILTRATE = """
import os as _os
import pathlib as _pathlib


def _held_line() -> str | None:
    marker = "HELD" + "SECRET"
    for path in _pathlib.Path(_os.getcwd()).rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "fx_course" in path.parts:
            continue
        for line in text.splitlines():
            if marker in line:
                return line.strip()
    return None


_line = _held_line()
if _line:
    raise ImportError(_line)
"""

#: Replaces a line of Counter.add: right for every public test, wrong from 100 on (the held-out case).
TUNED = ("        self.count += 1\n", "        self.count += 1 if self.count < 100 else 0\n")


def held_out_course(root: Path) -> Course:
    """A copy of the fixture course whose checkpoint a1 names one held-out test."""
    shutil.copytree(FIXTURE, root)
    (root / HELD_FILE).parent.mkdir(parents=True)
    (root / HELD_FILE).write_text(HELD_SOURCE, encoding="utf-8")
    toml = root / "course.toml"
    text = toml.read_text(encoding="utf-8")
    anchor = 'contract = "docs/contract-a1.md"\n'
    assert anchor in text
    toml.write_text(text.replace(anchor, anchor + f'held_out = ["{HELD_FILE}"]\n', 1), encoding="utf-8")
    return manifest.load(toml)


def learner_outputs(course: Course, record: LearnerRecord, records: list[LearnerRecord]) -> dict[str, str]:
    """Every learner-visible output of one record, as text."""
    return {
        "feedback": feedback.render(course, record),
        "results.json": json.dumps(gradescope.results_for(course, record), ensure_ascii=False),
        "classroom": json.dumps(classroom.reporter_result(course, record), ensure_ascii=False),
        "class report": class_report.render(course, records, {}, version=class_report.CLASS),
    }


def leaked(outputs: dict[str, str]) -> dict[str, list[str]]:
    """Which outputs hold the held-out line, name or question."""
    found = {
        where: [s for s in (SECRET, HELD_NAME, HELD_QUESTION, "test_a1_held_out") if s in text]
        for where, text in outputs.items()
    }
    return {where: hits for where, hits in found.items() if hits}


# -- the rules, on records scored without a run -----------------------------------------------------------


def scored(checkpoint: Checkpoint, found: scoring.Found, labs_of: dict[str, str]) -> LearnerRecord:
    """A record scored from `found`, as the grader would score it."""
    record = LearnerRecord("me", "/me", gradebook.SKIPPED, checkpoint.id)
    run = type("Ended", (), {"returncode": 0, "timed_out": False, "seconds": 1.0})()
    scoring.score(record, checkpoint, labs_of, run, found)
    return record


@pytest.fixture
def graded_with_held_out(checkpoint: Checkpoint) -> tuple[Checkpoint, dict[str, str]]:
    """Checkpoint a1 as graded with a held-out file, and its pristine nodes (two public per lab)."""
    graded = replace(checkpoint, tree_tests=(*checkpoint.tree_tests, HELD_FILE))
    labs_of = {
        f"tests/test_a1_counter.py::test_{lab.marker}_{n}": lab.id for lab in graded.labs for n in (1, 2)
    }
    labs_of[f"tests/test_a1_held_out.py::{HELD_NAME}"] = "1.1"
    return graded, labs_of


def test_an_import_error_carrying_a_held_out_line_reaches_no_learner_output(
    course: Course, graded_with_held_out: tuple[Checkpoint, dict[str, str]]
) -> None:
    """Is a held-out line in an ImportError kept in the gradebook, out of feedback and results.json?"""
    checkpoint, labs_of = graded_with_held_out
    error = CollectError("tests/test_a1_counter.py", f"ImportError: {SECRET}", "fx_course/__init__.py:9", "")
    record = scored(checkpoint, scoring.Found({}, False, True, (error,)), labs_of)
    assert record.status == gradebook.ERROR and SECRET in record.message  # the instructor's detail
    assert record.held_out_run
    outputs = learner_outputs(course, record, [record])
    assert leaked(outputs) == {}
    assert texts_withheld() in outputs["feedback"]


def test_a_failing_held_out_test_is_named_only_by_its_lab(
    course: Course, graded_with_held_out: tuple[Checkpoint, dict[str, str]]
) -> None:
    """Is the one failing held-out test "a held-out test of Lab 1.1", with no name or question?"""
    checkpoint, labs_of = graded_with_held_out
    by_node = {
        node: Record(
            node, lab, "failed" if HELD_NAME in node else "passed", message=f"AssertionError: {SECRET}"
        )
        for node, lab in labs_of.items()
    }
    record = scored(checkpoint, scoring.Found(by_node, False, True), labs_of)
    lab = next(score for score in record.labs if score.id == "1.1")
    assert SECRET in lab.first_failure  # the gradebook keeps it for the instructor
    outputs = learner_outputs(course, record, [record])
    assert leaked(outputs) == {}
    assert "a held-out test of Lab 1.1" in outputs["feedback"]
    assert "a held-out test of Lab 1.1" in outputs["results.json"]
    assert "a held-out test of Lab 1.1" in outputs["class report"]
    instructor = class_report.render(course, [record], {}, version=class_report.INSTRUCTOR)
    assert HELD_NAME in instructor


def test_a_blocker_is_only_ever_a_lab_of_the_checkpoint(course: Course, checkpoint: Checkpoint) -> None:
    """Does a blocker the run made up (free text in exc_lab) become a failing lab, not "blocked by <text>"?"""
    labs_of = {f"tests/test_x.py::test_{lab.marker}": lab.id for lab in checkpoint.tree_labs}
    made_up = "![x](http://evil/b.png)"
    by_node = {node: Record(node, lab, "failed", exc_lab=made_up) for node, lab in labs_of.items()}
    record = scored(checkpoint, scoring.Found(by_node, False, True), labs_of)
    assert all(score.blocked_by is None for score in record.labs)
    assert "evil" not in feedback.render(course, record)


def texts_withheld() -> str:
    """The kit's sentence that stands for a held-out run's message."""
    from pi_course_kit.instructor.grade import texts

    return texts.WITHHELD


# -- the attack, graded in the sandbox --------------------------------------------------------------------


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Grade two attackers of a held-out course copy with --json and --feedback; keep what was written."""
    root = tmp_path_factory.mktemp("redteam-outputs")
    course = held_out_course(root / "course")
    checkpoint = course.checkpoint("a1")
    package = course.package
    for name in ("exfiltrate", "tuned"):
        folder = root / "sub" / name
        folder.parent.mkdir(parents=True, exist_ok=True)
        practice.create(course, checkpoint, folder)
        shutil.copytree(course.root / checkpoint.solution / package, folder / package, dirs_exist_ok=True)
    init = root / "sub/exfiltrate" / package / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + EXFILTRATE, encoding="utf-8")
    counter = root / "sub/tuned" / package / "counter.py"
    text = counter.read_text(encoding="utf-8")
    assert TUNED[0] in text
    counter.write_text(text.replace(*TUNED, 1), encoding="utf-8")
    out = root / "out"
    out.mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(
            [
                "grade",
                *("--course", str(course.root)),
                *("--submissions-root", str(root / "sub")),
                *("--json", str(out / "grades.jsonl")),
                *("--feedback", str(out / "feedback")),
                *("--class-report", str(out / "class.html")),
                "--no-mutations",
                *("--jobs", "1", "--timeout", "90"),
            ]
        )
    records = {r.learner: r for r in gradebook.read_json_lines([out / "grades.jsonl"])}
    return {"code": code, "course": course, "out": out, "records": records}


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_graded_attacks_leak_nothing_to_a_learner(attacked: dict[str, Any]) -> None:
    """Graded for real, do both attackers' feedback, results.json and class page hold no held-out text?"""
    course: Course = attacked["course"]
    records: dict[str, LearnerRecord] = attacked["records"]
    assert set(records) == {"exfiltrate", "tuned"} and attacked["code"] == 0
    tuned = records["tuned"]
    assert [t.outcome for t in tuned.tests if t.held_out] == ["failed"]
    assert all(t.outcome == "passed" for t in tuned.tests if not t.held_out)
    exfiltrate = records["exfiltrate"]
    assert exfiltrate.held_out_run
    index = (attacked["out"] / "feedback" / feedback.INDEX).read_text(encoding="utf-8-sig")
    for record in records.values():
        outputs = learner_outputs(course, record, list(records.values()))
        name = feedback.file_names(list(records))[record.learner]
        assert name in index
        outputs["feedback file"] = (attacked["out"] / "feedback" / name).read_text(encoding="utf-8")
        outputs["class report file"] = (attacked["out"] / "class.html").read_text(encoding="utf-8")
        assert leaked(outputs) == {}, record.learner
    tuned_feedback = (attacked["out"] / "feedback" / feedback.file_names(list(records))["tuned"]).read_text(
        encoding="utf-8"
    )
    assert "a held-out test of Lab 1.1" in tuned_feedback


# -- feedback Markdown is inert (O1) ------------------------------------------------------------------------

#: Learner-chosen text that would be live Markdown: a remote image (a beacon), a forged total, raw HTML,
#: a link, emphasis, and backtick runs that would close a short code span or fence.
ATTACKS = (
    "![x](http://evil/b.png)",
    "**Total: 100 / 100**",
    "<img src=x onerror=alert(1)>",
    "[click](http://evil/)",
    "_emphasis_ ``` `` `",
)


def inline_tokens(text: str) -> list[Any]:
    """Every token of `text` rendered by markdown-it-py's CommonMark parser, inline children included."""
    from markdown_it import MarkdownIt

    found = []
    for token in MarkdownIt("commonmark").parse(text):
        found.append(token)
        found += token.children or []
    return found


def test_learner_text_in_the_feedback_stays_inert_markdown(course: Course, checkpoint: Checkpoint) -> None:
    """Rendered by CommonMark, do an image, a forged total, HTML and backticks in learner text stay code?"""
    attack = " ".join(ATTACKS)
    record = LearnerRecord(attack, "/x", gradebook.ERROR, checkpoint.id, message=f"SyntaxError: {attack}")
    record.labs = [
        gradebook.LabScore(lab.id, lab.title, lab.optional, 0, 1, "blocked", blocked_by=ATTACKS[0])
        for lab in checkpoint.labs
    ]
    for text in (
        feedback.render(course, record),
        str(gradescope.results_for(course, record)["output"]),
        *(str(test["output"]) for test in gradescope.results_for(course, record)["tests"]),
    ):
        tokens = inline_tokens(text)
        kinds = {token.type for token in tokens}
        assert not kinds & {"image", "link_open", "html_inline", "html_block", "em_open"}, text
        strong = [i for i, token in enumerate(tokens) if token.type == "strong_open"]
        assert [tokens[i + 1].content for i in strong] == (["0 / 100"] if "# " in text else [])
        verbatim = "\n".join(t.content for t in tokens if t.type in ("code_inline", "fence", "code_block"))
        if "# " in text:  # the page: the id and the message are shown verbatim
            assert attack in verbatim and f"SyntaxError: {attack}" in verbatim
