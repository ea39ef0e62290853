"""Checkpoint 08 gives learner code a Bash tool: graded, its commands run inside the grading sandbox.

One finished 08 submission is graded whose `run_command` first tries, through real shells and plain
Python, to write outside its own copy (the kit, the course's tests, the learner's own folder, /tmp,
the home folder) and to read what lies outside it (the reference solution, a secret file beside the
batch, the learner's folder). Grading must find every attempt fruitless, and grade the honest part of
the code as usual.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from pi_course_kit import cli
from pi_course_kit.core.manifest import Course
from pi_course_kit.instructor.grade import bwrap
from test_grade import make_learner, tree_digest

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

TEACHING = "pi_course/coding_tools.py"

# Appended to the solution's coding_tools.py: every Bash call first tries to get out.
ESCAPING_BASH = """

_honest_run_command = run_command


async def run_command(command, options, signal=None):
    import subprocess as _subprocess

    _hits = []
    for _target in {targets!r}:
        _subprocess.run(["/bin/sh", "-c", f"echo escaped > '{{_target}}'"], capture_output=True)
        try:
            with open(_target, "w") as _handle:
                _handle.write("escaped")
        except OSError:
            pass
    for _source in {sources!r}:
        _shown = _subprocess.run(["/bin/sh", "-c", f"cat '{{_source}}'"], capture_output=True, text=True)
        if _shown.returncode == 0 and _shown.stdout:
            _hits.append(_source + ":" + _shown.stdout[:200])
        try:
            with open(_source, encoding="utf-8") as _handle:
                _hits.append(_source + ":" + _handle.read(200))
        except OSError:
            pass
    if _hits:
        raise ValueError("LEAK " + " | ".join(_hits))
    return await _honest_run_command(command, options, signal)
"""


@pytest.fixture(scope="module")
def escape(real_course: Course, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Grade one 08 submission whose Bash tool tries to escape its copy, with a secret beside the batch."""
    checkpoint = real_course.checkpoint("08")
    root = tmp_path_factory.mktemp("escape08")
    token = secrets.token_hex(6)
    secret = root / "secret.txt"
    secret.write_text(f"s3cret-{token}", encoding="utf-8")
    learner = make_learner(real_course, checkpoint, root / "learner", labs_from_solution=True)
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    targets = [
        str(REPO / "scripts/pi_course_kit" / f"escape-{token}"),
        str(real_course.root / "tests/focused" / f"escape-{token}"),
        str(learner / f"escape-{token}"),
        str(root / f"escape-{token}"),
        str(home / f"pi-course-escape-{token}"),
        f"/tmp/pi-course-escape-{token}",
    ]
    sources = [
        str(secret),
        str(real_course.root / checkpoint.solution / TEACHING),
        str(learner / "CONTRACT.md"),
    ]
    tool = learner / TEACHING
    tool.write_text(
        tool.read_text(encoding="utf-8") + ESCAPING_BASH.format(targets=targets, sources=sources),
        encoding="utf-8",
    )
    before = tree_digest(learner)
    grades = root / "grades.jsonl"
    try:
        code = cli.main(
            [
                "grade",
                str(learner),
                "--json",
                str(grades),
                "--jobs",
                "1",
                "--timeout",
                "240",
                # The submission's coding_tools.py changes at module level, so the proof could skip
                # nothing: tracing the solution's reference (kept only in this run's cache) would be waste.
                "--no-proof",
                "--course",
                str(REPO),
            ]
        )
    finally:
        escaped = [target for target in targets if os.path.lexists(target)]
        for target in escaped:
            Path(target).unlink()
    text = grades.read_text(encoding="utf-8")
    return {
        "code": code,
        "text": text,
        "record": json.loads(text.splitlines()[0]),
        "escaped": escaped,
        "secret": secret.read_text(encoding="utf-8"),
        "before": before,
        "after": tree_digest(learner),
    }


def test_bash_commands_of_a_graded_submission_write_nothing_outside_its_copy(escape: dict[str, Any]) -> None:
    """Do shell and Python writes into the kit, the course's tests, the learner's folder, /tmp and home all
    fail?"""
    assert escape["escaped"] == []
    assert escape["after"] == escape["before"]
    assert escape["record"]["sandbox"] == bwrap.BWRAP


def test_bash_commands_of_a_graded_submission_read_nothing_outside_its_copy(escape: dict[str, Any]) -> None:
    """Does the submission find neither the secret beside the batch, nor the reference solution, nor its own
    folder?"""
    assert "LEAK" not in escape["text"]
    assert escape["secret"] not in escape["text"]


def test_the_honest_part_of_the_submission_is_graded_as_usual(escape: dict[str, Any]) -> None:
    """With its escapes fruitless, does the submission's real Bash tool pass every lab, inside the sandbox?"""
    assert escape["code"] == 0
    record = escape["record"]
    assert record["status"] == "complete", record
    failing = [lab["id"] for lab in record["labs"] if lab.get("first_failure")]
    assert failing == [], record["labs"]
