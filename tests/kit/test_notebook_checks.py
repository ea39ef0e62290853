"""Inline checks in a notebook (fixture course): one full run serves the lab checks that follow, until the
code changes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from learner_support import make_folder
from pi_course_kit.core import records, runner
from pi_course_kit.core.locate import ROOT_ENV
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.notebook import checks
from pi_course_kit.notebook import helpers as nbhelp


@pytest.mark.slow
def test_lab_checks_reuse_a_full_run_of_the_same_code_and_rerun_after_an_edit(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After progress(), does check() answer from that run, and run pytest again once a file changed?"""
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    monkeypatch.setenv(ROOT_ENV, str(course.root))  # the course the notebook's checks locate
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(checks, "_last_full", {})
    practice = make_folder(course, checkpoint, tmp_path / "practice")
    nbhelp.use_tree(checkpoint.id, cwd=practice, quiet=True)
    calls: list[list[str]] = []
    real = runner.run_tests

    def counted(tree: Path, args: Any = (), **kwargs: Any) -> runner.RunResult:
        calls.append(list(args))
        return real(tree, args, **kwargs)

    monkeypatch.setattr(runner, "run_tests", counted)
    first = checkpoint.labs[0]
    full = checks.progress()
    lab = checks.check(first.id)
    assert len(calls) == 1 and "-m" not in calls[0]
    assert [row.id for row in lab.labs] == [first.id]
    assert lab.tests and all(test.lab == first.id for test in lab.tests)
    assert lab.command == f"python -m pytest -m {first.marker}" and not lab.passed
    assert {row.id for row in full.labs} >= {first.id}
    edited = practice / checkpoint.teaching_files[0]
    edited.write_text(edited.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    checks.check(first.id)
    assert len(calls) == 2 and calls[1][:2] == ["-m", first.marker]


def test_each_lab_status_gets_its_own_colour_in_the_notebook_table() -> None:
    """Does the HTML table colour every status the records know differently (none falls back to grey)?"""
    statuses = [
        records.DONE,
        records.FAILING,
        records.NOT_STARTED,
        records.BLOCKED,
        records.IN_PROGRESS,
        records.NOT_RUN,
    ]
    rows = [
        {"id": f"9.{n}", "passed": 0, "total": 1, "status": status, "title": status}
        for n, status in enumerate(statuses)
    ]
    report = checks.CheckReport(
        "", "python -m pytest", "tree", 1, [records.LabSummary.from_json(r) for r in rows], [], None
    )
    page = report._repr_html_()
    colours = [page.split(f">9.{n}<", 1)[1].split("color:", 1)[1][:7] for n in range(len(statuses))]
    assert len(set(colours)) == len(statuses), dict(zip(statuses, colours, strict=True))
