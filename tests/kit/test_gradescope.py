"""Gradescope and GitHub Classroom on the fixture course: the autograder bundle run in a temporary /autograder."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import FX, REPO
from packaging.requirements import Requirement
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import export
from pi_course_kit.instructor.grade import bwrap, classroom
from pi_course_kit.instructor.grade.grader import LabScore, LearnerRecord
from pi_course_kit.instructor.grade.gradescope import ROOT_ENV, validate


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, course: Course, checkpoint: Checkpoint) -> Path:
    """`pi-course export gradescope a1 -o autograder.zip --course FIXTURE`, once."""
    out = tmp_path_factory.mktemp("export") / "autograder.zip"
    assert (
        cli.main(["export", "gradescope", checkpoint.id, "-o", str(out), "--course", str(course.root)]) == 0
    )
    return out


def autograder_root(bundle: Path, root: Path) -> Path:
    """A folder laid out as Gradescope lays out /autograder: source/ (the zip), run_autograder, submission/."""
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    shutil.copyfile(root / "source/run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    return root


def run_autograder(root: Path) -> dict[str, Any]:
    """Run `run_autograder` with this root and the test's interpreter; return results.json."""
    # Gradescope sets no PI_COURSE_LANG: the results speak the course's language.
    env = {k: v for k, v in os.environ.items() if k != "PI_COURSE_LANG"}
    env.update({ROOT_ENV: str(root), "PI_COURSE_PYTHON": sys.executable})
    done = subprocess.run(
        ["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results: dict[str, Any] = json.loads((root / "results/results.json").read_text(encoding="utf-8"))
    validate(results)
    return results


def test_the_bundle_holds_setup_run_autograder_the_kit_and_the_pristine_course(
    bundle: Path, checkpoint: Checkpoint
) -> None:
    """Does the zip have setup.sh and run_autograder (executable) at its root, the kit's source and the course?"""
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        run = archive.read("run_autograder").decode()
    assert {"setup.sh", "run_autograder", "requirements.txt", "course/course.toml"} <= names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert "kit/pi_course_kit/instructor/grade/grader.py" in names
    assert f"course/{checkpoint.solution}/fx_course/counter.py" in names
    assert all(f"course/{test}" in names for test in checkpoint.focused_tests)
    assert f"--checkpoint {checkpoint.id}" in run and not any("__pycache__" in name for name in names)


def test_the_autograder_installs_what_grading_imports_as_pyproject_declares_it(course: Course) -> None:
    """Does requirements.txt name the sandbox's packages and the seccomp binding, each as pyproject.toml pins it?"""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert set(export.REQUIREMENTS) <= set(declared["dependencies"])
    names = {Requirement(line).name for line in export.REQUIREMENTS}
    assert names >= {*bwrap.ROOTS, "jsonschema", "pyseccomp"}


@pytest.mark.sandbox
def test_a_complete_submission_scores_full_points(
    bundle: Path, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does an upload of the solution's package (without the optional exercise) score every required point?"""
    root = autograder_root(bundle, tmp_path)
    shutil.copytree(course.root / checkpoint.solution / course.package, root / "submission" / course.package)
    for relative in checkpoint.solution_only:
        (root / "submission" / relative).unlink()
    results = run_autograder(root)
    required = sum(lab.points for lab in checkpoint.required_labs)
    assert results["score"] == required
    assert [t["status"] for t in results["tests"]] == [
        "passed" if not lab.optional else "failed" for lab in checkpoint.labs
    ]
    assert all(t["visibility"] == "visible" and t["output"] for t in results["tests"])


@pytest.mark.sandbox
def test_the_starter_scores_zero(
    bundle: Path, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does the untouched starter, uploaded inside its practice folder, score 0 with every lab failed?"""
    root = autograder_root(bundle, tmp_path)
    package = course.package
    shutil.copytree(course.root / checkpoint.starter / package, root / "submission/my-practice" / package)
    results = run_autograder(root)
    assert results["score"] == 0 and all(
        t["status"] == "failed" and t["score"] == 0 for t in results["tests"]
    )
    # The fixture course speaks English.
    assert "Lab 1.1" in results["tests"][0]["name"] and "not started" in results["tests"][0]["output"]


@pytest.mark.sandbox
def test_a_submission_without_the_package_gets_zero_and_says_why(bundle: Path, tmp_path: Path) -> None:
    """Does an upload without fx_course/ give 0 points and an output naming the missing folder?"""
    root = autograder_root(bundle, tmp_path)
    (root / "submission/notes.txt").write_text("oops", encoding="utf-8")
    results = run_autograder(root)
    assert results["score"] == 0 and results["tests"] == [] and "fx_course/" in results["output"]


@pytest.mark.parametrize(
    "bad",
    [
        {
            "score": 1,
            "tests": [
                {
                    "name": "a",
                    "score": 1,
                    "max_score": 1,
                    "status": "ok",
                    "output": "",
                    "visibility": "visible",
                }
            ],
        },
        {
            "score": 1,
            "tests": [{"name": "a", "score": 1, "max_score": 1, "status": "passed", "visibility": "visible"}],
        },
        {"score": 1, "visibilty": "visible"},
        {"score": "full"},
    ],
)
def test_the_schema_refuses_what_gradescope_would_not_read(bad: dict[str, Any]) -> None:
    """Are a wrong status, a missing output, a misspelt field and a text score each refused?"""
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


def test_export_refuses_a_missing_folder_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is an output in a folder that does not exist refused in one line, with nothing written?"""
    assert cli.main(["export", "gradescope", "a1", "-o", str(tmp_path / "no/ag.zip"), *FX]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_classroom_workflow_runs_the_grader_and_feeds_the_reporter(
    tmp_path: Path, checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is the written workflow valid YAML that grades with --classroom and hands the reporter <ID>_RESULTS?"""
    assert cli.main(["export", "classroom", checkpoint.id, "-o", str(tmp_path), *FX]) == 0
    path = tmp_path / classroom.WORKFLOW
    flow = yaml.safe_load(path.read_text(encoding="utf-8"))
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    grade = next(step for step in steps if step.get("id") == classroom.RUNNER)
    assert f"pi-course grade . --checkpoint {checkpoint.id} --unsafe --classroom" in grade["run"]
    report = steps[-1]
    assert report["uses"].startswith("classroom-resources/autograding-grading-reporter")
    assert report["with"]["runners"] == classroom.RUNNER
    assert f"{classroom.RUNNER.upper()}_RESULTS" in report["env"]
    assert (
        cli.main(["export", "classroom", checkpoint.id, "-o", str(tmp_path), *FX]) == 2
    )  # never overwritten
    assert "already exists" in capsys.readouterr().err


def test_reporter_result_scores_labs_in_points(course: Course, checkpoint: Checkpoint) -> None:
    """Does the reporter's result give max_score = required points and each lab's points as its score?"""
    record = LearnerRecord("me", "/me", "partial", checkpoint.id)
    record.labs = [
        LabScore(lab.id, lab.title, lab.optional, 1 if index == 0 else 0, 2, "failing")
        for index, lab in enumerate(checkpoint.labs)
    ]
    result = classroom.reporter_result(course, record)
    first = checkpoint.labs[0]
    assert result["version"] == 1 and result["status"] == "fail"
    assert result["max_score"] == sum(lab.points for lab in checkpoint.required_labs)
    assert result["tests"][0]["score"] == first.points / 2 and result["tests"][0]["status"] == "fail"
    # The reporter reads the result base64-encoded from the environment: it must survive the round trip.
    assert json.loads(base64.b64decode(base64.b64encode(json.dumps(result).encode()))) == result


def test_the_shipped_classroom_workflow_is_the_one_export_writes(real_course: Course) -> None:
    """Is deploy/github-classroom/classroom.yml exactly what `pi-course export classroom 06` writes today?"""
    shipped = real_course.root / "deploy/github-classroom/classroom.yml"
    workflow = classroom.workflow(real_course.checkpoint("06"), "pi-course-kit")
    assert shipped.read_text(encoding="utf-8") == workflow


@pytest.mark.sandbox
def test_classroom_grading_works_from_a_course_without_solutions(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With only the learner's part of the course (as the installed kit has it), is a finished repository given
    every required point in the reporter's result?"""
    bundled = tmp_path / "course"
    bundled.mkdir()
    shutil.copyfile(course.path, bundled / "course.toml")
    for folder in ("labs", "tests/focused"):
        shutil.copytree(course.root / folder, bundled / folder)
    repo = tmp_path / "repo"
    cli.main(["practice", checkpoint.id, str(repo), "--course", str(course.root)])
    for relative in checkpoint.teaching_files:
        shutil.copyfile(course.root / checkpoint.solution / relative, repo / relative)
    result_file = tmp_path / "result.json"
    args = ["grade", str(repo), "--checkpoint", checkpoint.id, "--classroom", str(result_file)]
    assert cli.main([*args, "--course", str(bundled), "--quiet"]) == 0
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result["max_score"] == sum(lab.points for lab in checkpoint.required_labs)
    assert sum(test["score"] for test in result["tests"]) == result["max_score"]
    assert result["status"] == "pass"
