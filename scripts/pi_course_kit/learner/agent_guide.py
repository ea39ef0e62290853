"""AGENT-GUIDE.md: how a coding agent that studies beside the learner should help in a practice folder.

Many learners work with a coding agent open next to them. Left alone, an agent writes the answer; this
page, which the learner points it at, asks it to coach instead: one action at a time, the first
failure's layer, hints that grow slowly, never the whole answer. It speaks the run's language, like
the folder's other guides: the kit's lines through the catalog, the chapter's own notes (what to have
the learner predict, what is not taught yet, how to explain the acceptance) from course.toml.

Standard library only, like the rest of `practice`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pi_course_kit.core import i18n
from pi_course_kit.core.i18n import translation
from pi_course_kit.core.manifest import Checkpoint, Course

AGENT_GUIDE = "AGENT-GUIDE.md"


def agent_guide(course: Course, checkpoint: Checkpoint, notebook: str | None) -> str:
    """The guide's Markdown, in the run's language."""
    # The course passed in decides, not the last course loaded (`i18n.wants_english`).
    english = i18n.speaks_english()
    _ = translation(["en" if english else course.language]).gettext
    first = checkpoint.first_lab
    reading = ["LAB-GUIDE.md", "CONTRACT.md" if checkpoint.contract else "", notebook or ""]
    shown = ", ".join(f"`{name}`" for name in reading if name)
    lines = [
        _("# Guide for a coding agent · checkpoint {id}").format(id=checkpoint.id),
        "",
        _(
            "You are helping a learner rebuild `{package}` lab by lab in this folder. The learner writes the "
            "code; your part is to make the next step small and clear."
        ).format(package=course.package),
        "",
        _("## How to help"),
        "",
        _("- Before a test run, ask the learner what they expect it to show; run it once they have guessed."),
        _("- Suggest one action at a time, and let the learner run the tests again before the next one."),
        _(
            "- When tests fail, look at the first failure only and name its layer: a missing name or "
            "signature, a wrong value returned, a wrong error raised, or events in the wrong order. Point at "
            "the file and line that `pi-course check` names."
        ),
        _(
            "- When `edit:` names several functions, the failing test ran them all and cannot tell which one "
            "holds the mistake: go through them with the learner in that order, and do not assume the first "
            "one is wrong."
        ),
        _(
            "- When the learner is stuck, give a little more each time: the file and function, then its "
            "signature and what the contract asks, then pseudo-code, and only at the end a few lines for one "
            "branch."
        ),
        _(
            "- Never paste a whole function or a whole lab's answer, even when asked: offer the next, "
            "smaller hint instead."
        ),
        "",
        _("## Commands you may run here"),
        "",
        _("- `pi-course check`: every lab's state, the first red, and the line to edit next"),
        _("- `pi-course check --lab {lab}` or `python -m pytest -m {marker}`: one lab's tests only").format(
            lab=first.id, marker=first.marker
        ),
        _(
            "- `pi-course hint {lab}`: the course's next hint for a lab (the learner's counter goes up)"
        ).format(lab=first.id),
        _("- `pi-course status`: the files the learner changed, and the hints already seen"),
        "",
        _("## What you must not do"),
        "",
        _(
            "- Do not open, copy or search for the reference solutions (`solutions/` in a course checkout) "
            "or any published answer."
        ),
        _(
            "- Do not edit `tests/`, `pytest.ini` or `conftest.py`, and never skip, delete or weaken a test: "
            "the tests are the contract."
        ),
        _("- Do not paste whole answers, and do not write a lab's code in the learner's place."),
        _(
            "- Do not run `pi-course reset` without asking: it replaces the learner's code (a backup is "
            "kept)."
        ),
        "",
        *_chapter_notes(checkpoint, _, english),
        _("## What to read first"),
        "",
        _(
            "{files}: the labs in order, every message the tests expect, and a walk through the chapter."
        ).format(files=shown),
        "",
    ]
    return "\n".join(lines)


def _chapter_notes(checkpoint: Checkpoint, _: Callable[[str], str], english: bool) -> list[str]:
    """The chapter's own section: what to have the learner predict, what is not taught yet, the acceptance."""
    notes = (checkpoint.agent_notes_en if english else None) or checkpoint.agent_notes
    if notes is None:
        return []
    return [
        _("## This chapter"),
        "",
        _("- Predict first: {text}").format(text=notes.predict),
        _("- Not taught yet, do not bring it in: {text}").format(text=notes.not_yet),
        _("- Explaining the acceptance: {text}").format(text=notes.acceptance),
        "",
    ]


def write_agent_guide(course: Course, checkpoint: Checkpoint, root: Path, notebook: str | None) -> None:
    """Write AGENT-GUIDE.md into a practice folder being made."""
    (root / AGENT_GUIDE).write_text(agent_guide(course, checkpoint, notebook), encoding="utf-8")
