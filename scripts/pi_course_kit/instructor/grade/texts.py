"""The learner-facing words of grading outputs, through the kit's gettext catalog (domain pi_course).

The language is the course's (course.toml) unless PI_COURSE_LANG names another: a grader's own
LANG must not turn a class's feedback into English. English, the msgids themselves, is the fallback.
"""

from __future__ import annotations

import gettext
import os
from functools import cache

from pi_course_kit.core import i18n
from pi_course_kit.core.records import Status
from pi_course_kit.instructor.grade.gradebook import Grade


@cache
def _catalog(language: str) -> gettext.NullTranslations:
    return i18n.translation([language])


def language() -> str:
    """The grading language: PI_COURSE_LANG when set, else the course's."""
    return os.environ.get(i18n.LANG_ENV) or i18n.course_language()


def _(message: str) -> str:
    """The message in the grading language."""
    return _catalog(language()).gettext(message)


#: A lab's status as the grader writes it -> msgid.
_LAB_STATUS: dict[str, str] = {
    Status.DONE: "lab done",
    Status.FAILING: "some tests fail",
    Status.NOT_STARTED: "not started",
}

#: A learner record's status -> msgid.
_RECORD_STATUS: dict[str, str] = {
    Grade.COMPLETE: "all labs complete",
    Grade.PARTIAL: "partly complete",
    Grade.NOT_STARTED: "not started",
    Grade.ERROR: "cannot run (the code does not import, or the submission has a problem)",
    Grade.TIMEOUT: "timed out (an endless loop?)",
    Grade.CRASHED: "the test run ended unexpectedly",
    Grade.SKIPPED: "not graded (not a gradable submission)",
    Grade.SANDBOX_ERROR: "the grading environment failed (not your code; tell your instructor)",
}

_CREDIT_RULE = {
    "fraction": "points in proportion to the tests passed",
    "all-or-nothing": "points only when every test passes",
}

#: Attribute name -> msgid; read as `texts.NAME`, translated when read (see __getattr__).
_WORDS = {
    "LEARNERS": "learners",
    "FINISHED_AXIS": "learners who finished the lab (%)",
    "NOTHING_GRADED": "No submission was graded.",
    "FEEDBACK_TITLE": "Grading feedback",
    "CHECKPOINT": "Checkpoint",
    "TOTAL": "Total",
    "EXTRA": "extra credit",
    "STATUS": "Status",
    "POINTS": "Points",
    "TESTS": "Tests",
    "OPTIONAL": "extra credit",
    "FIRST_FAILING": "First failing test",
    "QUESTION": "It asks",
    "HINT": "Hint",
    "MESSAGE": "Note",
    "EDITED_TESTS": "You changed files under tests/; grading always uses the course's own pristine tests, "
    "so your changes do not affect the result.",
    "ALL_DONE": "Every required lab is done.",
    "NO_DOCSTRING": "(this test has no description)",
    "UNREADABLE_UPLOAD": "the upload cannot be read safely",
    "WITHHELD": "details withheld: this checkpoint has held-out tests, so grading shows no text from your "
    "run; run the public tests in your practice folder to see the message",
}


def __getattr__(name: str) -> str:
    # Translated on each read, so a language chosen after import (PI_COURSE_LANG) still applies.
    if name in _WORDS:
        return _(_WORDS[name])
    raise AttributeError(name)


def score_axis(maximum: float) -> str:
    """The score histogram's axis label."""
    return _("score (of {points} points)").format(points=f"{maximum:g}")


def lab_status(status: str, blocked_by: str | None = None) -> str:
    """A lab status in the grading language; a blocked lab names the lab it waits for."""
    if status == Status.BLOCKED and blocked_by:
        return _("blocked by Lab {lab} (finish it first)").format(lab=blocked_by)
    return _(_LAB_STATUS[status]) if status in _LAB_STATUS else status


def record_status(status: str) -> str:
    """A learner record's status in the grading language."""
    return _(_RECORD_STATUS[status]) if status in _RECORD_STATUS else status


def credit_rule(rule: str) -> str:
    """How a lab's points are earned, in the grading language."""
    return _(_CREDIT_RULE[rule]) if rule in _CREDIT_RULE else rule


def labelled(label: str, value: object) -> str:
    """`label: value`, punctuated as the grading language writes it (a full-width colon in Chinese)."""
    return _("{label}: {value}").format(label=label, value=value)


def bracketed(text: object) -> str:
    """` (text)` after a word, punctuated as the grading language writes it (full-width brackets in
    Chinese)."""
    return _(" ({text})").format(text=text)


def list_separator() -> str:
    """What separates the items of a run-in list in the grading language (a full-width semicolon in
    Chinese)."""
    return _("; ")


def held_out_test(lab: str) -> str:
    """How a learner-visible output names a held-out test: only by its lab, never by name or question."""
    return _("a held-out test of Lab {lab}").format(lab=lab)


def no_package(package: str) -> str:
    """What a Gradescope upload without the learner's package is told."""
    return _(
        "no {package}/ folder or .py file was found: upload the whole {package}/ of your practice folder"
    ).format(package=package)


def msgids() -> list[str]:
    """Every msgid this module looks up (the catalog must translate each)."""
    return [
        *_LAB_STATUS.values(),
        *_RECORD_STATUS.values(),
        *_CREDIT_RULE.values(),
        *_WORDS.values(),
        "blocked by Lab {lab} (finish it first)",
        "a held-out test of Lab {lab}",
        "{label}: {value}",
        " ({text})",
        "; ",
        "no {package}/ folder or .py file was found: upload the whole {package}/ of your practice folder",
    ]
