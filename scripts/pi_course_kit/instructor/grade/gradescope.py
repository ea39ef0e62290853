"""Gradescope's autograder entry point: grade /autograder/submission through the same Grader and sandbox,
write /autograder/results/results.json to Gradescope's published format (checked against a schema).

`run_autograder` (from `pi-course export gradescope`) runs
`python -m pi_course_kit.instructor.grade.gradescope`. The autograder root is /autograder unless
PI_COURSE_AUTOGRADER_ROOT names another (a test's temporary one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.records import Status
from pi_course_kit.core.schemas import draft_2020_12
from pi_course_kit.instructor.grade import copying, feedback, roster, texts
from pi_course_kit.instructor.grade.gradebook import SANDBOX_ERROR, SKIPPED, LearnerRecord, points_of

if TYPE_CHECKING:  # the results JSON is built without the grader; only `grade` runs it
    from pi_course_kit.instructor.grade.grader import Limits

ROOT_ENV = "PI_COURSE_AUTOGRADER_ROOT"
#: Where setup.sh keeps the solution's traced reference run (`--prepare`), under the autograder root.
REFERENCES = "references"
#: The variables a kept run is keyed by (runner.content_key), set alike in setup.sh's run and in every
#: submission's, whatever Gradescope's two steps inherit: otherwise the kept reference would never match.
STEADY_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
}
#: Unset too: the launcher's own variables (run_autograder sets them, setup.sh does not; read before this).
UNSET_ENV = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "PYTHONHASHSEED", ROOT_ENV, "PI_COURSE_PYTHON")
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
                "required": ["name", "score", "max_score", "output", "visibility"],
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


#: The environment Gradescope's autograder image is (Ubuntu, CPython): markers are read for it, whatever
#: machine the instructor exports from.
TARGET_ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}


def _wanted(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(
        requirement.marker.evaluate({**TARGET_ENVIRONMENT, "extra": extra}) for extra in extras or {""}
    )


def pinned_requirements(requirements: Sequence[str]) -> list[str]:
    """`requirements` and everything they need, each pinned to the version installed here (`name==x.y`).

    The versions the kit was tested with are the ones the autograder image gets: an unpinned line would
    let a release made after the export change how learners are graded. A top-level marker is kept.
    """
    pins: dict[str, str] = {}
    markers: dict[str, str] = {}
    queue = [(Requirement(line), True) for line in requirements]
    while queue:
        requirement, top = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if top and requirement.marker is not None:
            markers[name] = str(requirement.marker)
        if name in pins:
            continue
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise KitError(
                f"cannot pin {requirement.name} for the autograder: it is not installed here; "
                "install the kit (pip install -e .) and export again"
            ) from None
        pins[name] = distribution.version
        extras = frozenset(requirement.extras)
        for text in distribution.requires or []:
            needed = Requirement(text)
            if _wanted(needed, extras):
                queue.append((needed, False))
    return [
        f"{name}=={pins[name]}" + (f"; {markers[name]}" if name in markers else "") for name in sorted(pins)
    ]


def validate(results: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `results` strays from Gradescope's published fields."""
    validator, _schema_error = draft_2020_12()
    validator(RESULTS_SCHEMA).validate(results)


def find_submission(folder: Path, package: str) -> Path | None:
    """The folder holding the learner's package: the submission itself or one folder inside it."""
    if (folder / package).is_dir() or (folder / roster.META).is_file():
        return folder
    found = roster.find_submissions(folder, package, bare=True) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def loose_files(folder: Path) -> tuple[Path, list[str]]:
    """Where an upload's loose `.py` files are, and their names: at the top, or in its one folder.

    Learners often upload the files they edited (`tool.py`) instead of their package folder, or a zip
    whose one folder holds them.
    """
    entries = sorted(entry for entry in folder.iterdir() if not entry.is_symlink())
    modules = [entry.name for entry in entries if entry.is_file() and entry.suffix == ".py"]
    folders = [entry for entry in entries if entry.is_dir()]
    if not modules and len(folders) == 1:
        return loose_files(folders[0]) if folders[0] != folder else (folder, [])
    return folder, modules


def upload_litter(name: str) -> bool:
    """What an upload may carry that is nobody's work: a macOS zip's additions, a venv, a git folder."""
    return copying.macos_litter(name) or name in (".git", ".venv", "venv", ".ipynb_checkpoints")


def prepare(upload: Path, course: Course, checkpoint: Checkpoint, work: Path) -> Path | None:
    """A clean folder to grade from what the learner uploaded, in `work`; None when it holds no code.

    The upload is first copied without what a macOS zip adds (`__MACOSX/`, `._*`, `.DS_Store`),
    through the grader's safe copy (no link followed, sizes checked). A package folder, a practice
    folder or one folder holding either is graded as it is; loose `.py` files (at the top or in the
    upload's one folder) are laid over the checkpoint's starter package, in its top level.
    """
    clean = work / "upload"
    clean.mkdir()
    copying.copy_tree(upload, clean, upload_litter)
    found = find_submission(clean, course.package)
    if found is not None:
        return found
    where, modules = loose_files(clean)
    if not modules:
        return None
    assembled = work / "assembled"
    shutil.copytree(
        course.root / checkpoint.starter / course.package,
        assembled / course.package,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for name in modules:
        shutil.copyfile(where / name, assembled / course.package / name)
    return assembled


def results_for(course: Course, record: LearnerRecord) -> dict[str, Any]:
    """results.json for one graded record: one Gradescope test per lab, scored in points.

    Students see it: everything in it is learner-visible (feedback's module docstring says what that
    withholds in a run with held-out tests).
    """
    points = points_of(course, record)
    tests = []
    for number, row in enumerate(points.labs, 1):
        extra = texts.bracketed(texts.OPTIONAL) if row.optional else ""
        test: dict[str, Any] = {
            "name": f"Lab {row.id} {row.title}{extra}",
            "number": str(number),
            "score": row.points,
            "max_score": 0.0 if row.optional else row.max_points,
            "status": "passed" if row.status == Status.DONE else "failed",
            "output": "\n".join(feedback.lab_lines(course, record, row)),
            "output_format": "md",
            "visibility": "visible",
            "tags": [f"lab:{row.id}", *(["extra-credit"] if row.optional else [])],
        }
        if row.optional and row.status != Status.DONE:
            # Extra credit is never a failure: with no status, Gradescope shows 0/0 as not failed, and
            # the points join the score above the maximum once the exercise is done.
            del test["status"]
        tests.append(test)
    return {
        "score": points.score,
        "execution_time": record.seconds,
        "output": feedback.render(course, record, points),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        # Learner-visible: the flags as feedback.learner_view shows them (no byte a held-out run chose).
        "extra_data": {
            "status": record.status,
            "flags": feedback.learner_view(course, record).flags,
            "checkpoint": record.checkpoint,
        },
        "tests": tests,
    }


def not_graded(message: str) -> dict[str, Any]:
    """results.json for a submission that could not be graded: 0 points, and what to do, in the output."""
    return {"score": 0.0, "output": message, "output_format": "text", "visibility": "visible", "tests": []}


def grade(root: Path, course: Course, checkpoint_id: str, limits: Limits) -> tuple[dict[str, Any], bool]:
    """Grade `root/submission`; the results and whether grading itself worked."""
    checkpoint = course.checkpoint(checkpoint_id)
    with tempfile.TemporaryDirectory(prefix="pi-course-upload-") as work:
        try:
            submission = prepare(root / "submission", course, checkpoint, Path(work))
        except copying.Refused as error:
            return not_graded(texts.labelled(texts.UNREADABLE_UPLOAD, error)), True
        if submission is None:
            return not_graded(texts.no_package(course.package)), True
        from pi_course_kit.instructor.grade.grader import Grader

        grader = Grader(course, limits, 1, checkpoint_id, keep=_kept(root))
        try:
            record = grader.grade_all([submission])[0]
        finally:
            grader.close()
    record.learner = "submission"
    if record.status in (SKIPPED, SANDBOX_ERROR):
        shown = feedback.learner_view(course, record).message  # students see it: nothing a held-out run said
        return not_graded(texts.labelled(texts.record_status(record.status), shown)), False
    return results_for(course, record), True


def _kept(root: Path) -> Path | None:
    """The folder of setup.sh's kept reference, when it kept one: the grader then reads it back and uses its
    proof. Without one, nothing is traced (a submission graded alone would pay for it, and lose it)."""
    folder = root / REFERENCES
    return folder if any(folder.glob("run-*.json")) else None


def prepare_reference(root: Path, course: Course, checkpoint_id: str, limits: Limits) -> None:
    """Run the solution's reference once, traced, and keep it under `root` (setup.sh's `--prepare`)."""
    from pi_course_kit.instructor.grade.grader import Grader

    grader = Grader(course, limits, 1, checkpoint_id, proof=True, keep=root / REFERENCES)
    try:
        grader.reference(course.checkpoint(checkpoint_id))
    finally:
        grader.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Grade the submission and write results.json; exit 1 when the grading environment itself failed."""
    parser = argparse.ArgumentParser(prog="run_autograder", description=__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV, "/autograder")))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--memory", type=int, default=1024, help="MiB")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="setup.sh: run and keep the solution's traced reference, grade nothing",
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    os.environ.update(STEADY_ENV)
    for name in UNSET_ENV:
        os.environ.pop(name, None)
    from pi_course_kit.instructor.grade.grader import Limits, MiB

    limits = Limits(
        wall_seconds=args.timeout,
        memory_bytes=args.memory * MiB,
        cpu_seconds=max(1, int(args.timeout)),
        processes=64,
    )
    if args.prepare:
        try:
            course = manifest.load(root / "source" / "course" / "course.toml")
            prepare_reference(root, course, args.checkpoint, limits)
        except (KitError, ManifestError) as error:
            print(f"setup: the solution's reference was not kept: {error}", file=sys.stderr)
            return 1
        print(f"setup: kept the solution's traced reference in {root / REFERENCES}")
        return 0
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
