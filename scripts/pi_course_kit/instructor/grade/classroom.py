"""GitHub Classroom: the workflow for a learner's repository, and the result its grading reporter reads.

The reporter (classroom-resources/autograding-grading-reporter) takes `runners: ID` and reads the
environment variable `<ID>_RESULTS`: base64 of `{"version": 1, "status", "max_score", "tests": [...]}`,
each test with `name`, `status` ("pass"/"fail"/"error") and `score`; it adds the tests' scores up.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import feedback, workflow_yaml
from pi_course_kit.instructor.grade.gradebook import COMPLETE, SCORED, LearnerRecord, points_of
from pi_course_kit.instructor.promises import run_tree

if TYPE_CHECKING:  # the workflow and the reporter's JSON are written without the grader and its sandbox
    from pi_course_kit.instructor.grade.grader import Grader

RUNNER = "picourse"
#: The kit's extra that `pi-course grade` needs (cli.NEEDS_INSTRUCTOR_EXTRA): without it, grading exits 2
#: and the workflow writes no result.
EXTRA = "instructor"
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"


def _unit(maxima: Sequence[float]) -> Fraction:
    """The largest share of a point that divides every lab's points (1 when they are whole points)."""
    unit = Fraction(1)
    for value in maxima:
        share = Fraction(value).limit_denominator(1000)
        common = math.gcd(unit.numerator * share.denominator, share.numerator * unit.denominator)
        unit = Fraction(common, unit.denominator * share.denominator)
    return unit


def reporter_result(course: Course, record: LearnerRecord) -> dict[str, Any]:
    """The grading reporter's result for one learner: each required lab as one test per point it is worth.

    The reporter reads this result three ways: GitHub Classroom records the sum of the tests' `score`,
    while its log prints passed tests / all tests x 100 and its table passed / all x `max_score`. One
    test per lab made those disagree (one lab of four done: a log of 25/100 for a score of 40). With
    every test worth the same share of a point, the three agree: the lab's points, rounded to that
    share, in passing tests first. Optional labs are left out: extra credit has no place in a
    total the reporter caps at `max_score`.
    """
    points = points_of(course, record)
    required = [row for row in points.labs if not row.optional]
    unit = _unit([row.max_points for row in required if row.max_points > 0])
    counted = record.status in SCORED
    tests: list[dict[str, Any]] = []
    for row in required:
        count = int(Fraction(row.max_points).limit_denominator(1000) / unit)
        earned = Fraction(row.points).limit_denominator(1000) / unit if counted else Fraction(0)
        passed = min(count, int(earned + Fraction(1, 2)))  # half a share or more rounds up
        message = "\n".join(feedback.lab_lines(course, record, row))
        for number in range(count):
            ok = number < passed
            tests.append(
                {
                    "name": f"Lab {row.id} {row.title} · {number + 1}/{count}",
                    "status": "pass" if ok else "fail",
                    "score": float(unit) if ok else 0.0,
                    # The lab's feedback once, on its first failing share; the others point back at it.
                    "message": message if number == passed else f"Lab {row.id}: {passed}/{count}",
                    "line_no": 0,
                    "execution_time": "0s",
                }
            )
    status = "error" if not counted else "pass" if record.status == COMPLETE else "fail"
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
    from pi_course_kit.instructor.grade.grader import Reference

    labs_of = {t.nodeid: t.lab or "" for t in result.report.tests}
    grader.references[checkpoint.id] = Reference(checkpoint, labs_of)


#: Where an exported wheel of the kit is kept in the learner's repository.
WHEEL_DIR = Path(".github") / "pi-course"
#: A commit pin of the kit's repository: a full 40-hex commit, never a branch or tag that can move.
_GIT = re.compile(r"^(?:pi-course-kit\s*@\s*)?(git\+https://[A-Za-z0-9._~:/%+-]+\.git)@([0-9a-f]{40})$")
#: What the shipped example workflow (deploy/github-classroom/classroom.yml) installs: a placeholder of
#: the instructor's own repository and commit, replaced by `--kit` when exporting.
EXAMPLE_KIT = "git+https://github.com/YOUR-ORG/pi-course-kit.git@" + "0" * 40


@dataclass(frozen=True)
class KitSource:
    """How the workflow installs the kit: a bundled wheel checked by sha256, or a commit of a repository."""

    requirement: str
    wheel: Path | None = None
    sha256: str = ""

    def install_script(self) -> str:
        """The `run:` script of the install step, the kit with its instructor extra (what `grade` needs).

        It fails when the wheel's bytes are not the exported ones.
        """
        if self.wheel is None:
            return f"python -m pip install --quiet {shlex.quote(self.requirement)}\n"
        path = self.wheel.as_posix()
        return (
            f"echo {shlex.quote(f'{self.sha256}  {path}')} | sha256sum --check --strict\n"
            f"python -m pip install --quiet {shlex.quote(f'./{path}[{EXTRA}]')}\n"
        )


def kit_source(kit: str | None) -> KitSource:
    """Read `--kit`: a wheel file (bundled, pinned by sha256) or `git+https://...git@<commit>`.

    A bare package name is refused: `pi-course-kit` is not on the package index, and whoever claims
    the name there would run code in every learner's Action.
    """
    if kit is None:
        raise KitError(
            "give --kit: the kit's wheel (python -m pip wheel --no-deps -w dist .), bundled and pinned by "
            "sha256, or git+https://HOST/YOU/REPO.git@COMMIT (your repository, a full commit hash)"
        )
    match = _GIT.match(kit.strip())
    if match:
        return KitSource(f"pi-course-kit[{EXTRA}] @ {match[1]}@{match[2]}")
    path = Path(kit)
    if path.suffix == ".whl" and path.is_file():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return KitSource(path.name, WHEEL_DIR / path.name, digest)
    raise KitError(
        f"--kit {kit!r}: give a wheel file of the kit or git+https://HOST/YOU/REPO.git@COMMIT "
        "(a full 40-hex commit); a package name or a branch can change under the learners"
    )


def workflow(checkpoint: Checkpoint, kit: str | KitSource) -> str:
    """The GitHub Actions workflow for a learner's practice repository of `checkpoint` (dumped by PyYAML)."""
    source = kit if isinstance(kit, KitSource) else kit_source(kit)
    return workflow_yaml.render(checkpoint, source.install_script(), RUNNER)


def write_workflow(checkpoint: Checkpoint, repository: Path, kit: str | None) -> Path:
    """Write the workflow (and the wheel it installs) into a learner's repository; nothing is overwritten."""
    source = kit_source(kit)
    target = repository / WORKFLOW
    if target.exists():
        raise KitError(f"{target} already exists; remove it first if you want it rewritten")
    if source.wheel is not None:
        wheel = repository / source.wheel
        if wheel.exists() and hashlib.sha256(wheel.read_bytes()).hexdigest() != source.sha256:
            raise KitError(f"{wheel} already exists with other content; remove it first")
        wheel.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(str(kit)), wheel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(workflow(checkpoint, source), encoding="utf-8")
    return target
