"""Gradescope and GitHub Classroom on the fixture course: the autograder bundle run in a temporary
/autograder."""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import FX, REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pi_course_kit import cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor import export
from pi_course_kit.instructor.grade import bwrap, classroom, proof_plugin
from pi_course_kit.instructor.grade.gradebook import LabScore, LearnerRecord, points_of
from pi_course_kit.instructor.grade.gradescope import REFERENCES, ROOT_ENV, validate


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, course: Course, checkpoint: Checkpoint) -> Path:
    """`pi-course export gradescope a1 -o autograder.zip --course FIXTURE`, once."""
    out = tmp_path_factory.mktemp("export") / "autograder.zip"
    assert (
        cli.main(["export", "gradescope", checkpoint.id, "-o", str(out), "--course", str(course.root)]) == 0
    )
    return out


def autograder_root(bundle: Path, root: Path) -> Path:
    """A folder laid out as Gradescope lays out /autograder: source/ (the zip), run_autograder,
    submission/."""
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
    """Does the zip have setup.sh and run_autograder (executable) at its root, the kit's source and the
    course?"""
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
    """Does requirements.txt name the sandbox's packages and the seccomp binding, each as pyproject.toml pins
    it?"""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    allowed = {*declared["dependencies"], *declared["optional-dependencies"]["instructor"]}
    assert set(export.REQUIREMENTS) <= allowed
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
    # The optional lab not done is extra credit left, not a failed test: 0 of 0, with no status.
    assert [t.get("status") for t in results["tests"]] == [
        "passed" if not lab.optional else None for lab in checkpoint.labs
    ]
    assert all(t["visibility"] == "visible" and t["output"] for t in results["tests"])


def kept(root: Path) -> dict[str, tuple[int, str]]:
    """The runs setup.sh's `--prepare` kept under `root`: name -> (mtime in ns, its proof trace)."""
    found = {}
    for path in sorted((root / REFERENCES).glob("run-*.json")):
        outputs = json.loads(path.read_text(encoding="utf-8")).get("outputs", {})
        found[path.name] = (path.stat().st_mtime_ns, str(outputs.get(proof_plugin.PROOF_ENV, "")))
    return found


@pytest.mark.sandbox
def test_setup_keeps_the_traced_reference_and_each_submission_reads_it_back(
    bundle: Path, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does setup.sh's step keep the solution's traced run, and does each submission read it back (no run
    kept anew, although run_autograder's variables differ from setup's), the solution still scoring every
    required point and a wrong body losing some, as the kept proof decides?"""
    root = autograder_root(bundle, tmp_path)
    with zipfile.ZipFile(bundle) as archive:
        setup = archive.read("setup.sh").decode()
    # setup.sh's own step, with this test's interpreter for the venv's and its root for /autograder.
    [step] = [line for line in setup.replace("\\\n", "").splitlines() if "--prepare" in line]
    assert f"--checkpoint {checkpoint.id} --root /autograder --prepare" in step
    step = step.replace("/autograder/venv/bin/python", shlex.quote(sys.executable))
    step = step.replace("/autograder", shlex.quote(str(root))).replace(" || echo", " ; exit $? #")
    # Other variables than run_autograder's: Gradescope's two steps need not inherit the same.
    env = {k: v for k, v in os.environ.items() if k not in ("PI_COURSE_LANG", ROOT_ENV)}
    env.update({"LC_ALL": "C", "TZ": "Europe/Paris"})
    prepared = subprocess.run(
        ["bash", "-c", step], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    before = kept(root)
    assert len(before) == 1 and all(trace for _, trace in before.values())
    package = course.package
    shutil.copytree(course.root / checkpoint.solution / package, root / "submission" / package)
    assert run_autograder(root)["score"] == sum(lab.points for lab in checkpoint.labs)
    assert kept(root) == before
    # A wrong body in a lab's function: the tests that enter it run, and fail.
    counter = root / "submission" / package / "counter.py"
    counter.write_text(counter.read_text(encoding="utf-8").replace("self.count += 1", "self.count += 2"))
    full = sum(lab.points for lab in checkpoint.labs)
    assert run_autograder(root)["score"] < full
    # What decides is the kept trace: one that says each test entered nothing proves every test, the wrong
    # body too. That is why it lives under /autograder, where no submission can write.
    [name] = before
    stored = json.loads((root / REFERENCES / name).read_text(encoding="utf-8"))
    lines = [json.loads(line) for line in stored["outputs"][proof_plugin.PROOF_ENV].splitlines()]
    blank = [{**line, "units": [], "files": []} for line in lines]
    stored["outputs"][proof_plugin.PROOF_ENV] = "".join(json.dumps(line) + "\n" for line in blank)
    (root / REFERENCES / name).write_text(json.dumps(stored), encoding="utf-8")
    assert run_autograder(root)["score"] == full


def test_the_bundle_s_requirements_are_pinned_to_exact_versions_with_what_they_need(
    bundle: Path, course: Course
) -> None:
    """Is every line of requirements.txt `name==version` (the versions installed here), dependencies
    included?"""
    with zipfile.ZipFile(bundle) as archive:
        lines = archive.read("requirements.txt").decode().splitlines()
    parsed = [Requirement(line) for line in lines]
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in parsed), lines
    names = {canonicalize_name(r.name) for r in parsed}
    wanted = [Requirement(line).name for line in (*export.REQUIREMENTS, *course.requires)]
    assert {canonicalize_name(name) for name in wanted} <= names
    # What they need is pinned too (pytest needs pluggy, httpx needs httpcore), at the installed version.
    assert {"pluggy", "httpcore"} <= names
    assert f"pytest=={metadata.version('pytest')}" in lines
    assert any(line.startswith("pyseccomp==") and "sys_platform" in line for line in lines)


def macos_zip(course: Course, checkpoint: Checkpoint, zip_path: Path) -> None:
    """A zip as macOS's Finder makes it: the folder, `__MACOSX/` AppleDouble twins, `._` files and
    `.DS_Store`."""
    package = course.root / checkpoint.solution / course.package
    with zipfile.ZipFile(zip_path, "w") as archive:
        for path in sorted(package.rglob("*.py")):
            if path.relative_to(package).as_posix() in [p.split("/", 1)[1] for p in checkpoint.solution_only]:
                continue
            name = f"my work/{course.package}/{path.relative_to(package).as_posix()}"
            archive.writestr(name, path.read_bytes())
            folder, _, base = name.rpartition("/")
            archive.writestr(f"__MACOSX/{folder}/._{base}", b"\x00\x05\x16\x07 AppleDouble")
            archive.writestr(f"{folder}/._{base}", b"\x00\x05\x16\x07 AppleDouble")
        archive.writestr("my work/.DS_Store", b"\x00\x00\x00\x01Bud1")


@pytest.mark.sandbox
def test_a_macos_zip_with_its_litter_scores_full_points(
    bundle: Path, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a zip made on macOS (one folder, __MACOSX/, ._ files, .DS_Store), unpacked as Gradescope does,
    score full?"""
    root = autograder_root(bundle, tmp_path / "ag")
    macos_zip(course, checkpoint, tmp_path / "upload.zip")
    with zipfile.ZipFile(tmp_path / "upload.zip") as archive:
        archive.extractall(root / "submission")
    results = run_autograder(root)
    assert results["score"] == sum(lab.points for lab in checkpoint.required_labs), results["output"]


@pytest.mark.sandbox
def test_loose_files_at_the_top_are_graded_over_the_starter_with_extra_credit(
    bundle: Path, course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Do the edited files uploaded loose (no package folder) score every point, the optional one as extra
    credit?"""
    root = autograder_root(bundle, tmp_path)
    for relative in (*checkpoint.teaching_files, *checkpoint.solution_only):
        source = course.root / checkpoint.solution / relative
        shutil.copyfile(source, root / "submission" / source.name)
    results = run_autograder(root)
    required = sum(lab.points for lab in checkpoint.required_labs)
    extra = sum(lab.points for lab in checkpoint.labs if lab.optional)
    assert extra > 0 and results["score"] == required + extra, results["output"]
    optional = [t for t, lab in zip(results["tests"], checkpoint.labs, strict=True) if lab.optional]
    assert [(t["status"], t["score"], t["max_score"]) for t in optional] == [("passed", extra, 0.0)]
    assert all("extra-credit" in t["tags"] for t in optional)


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
        t.get("status") == ("failed" if not lab.optional else None) and t["score"] == 0
        for t, lab in zip(results["tests"], checkpoint.labs, strict=True)
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
    kit = ["--kit", classroom.EXAMPLE_KIT]
    assert cli.main(["export", "classroom", checkpoint.id, "-o", str(tmp_path), *kit, *FX]) == 0
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
        cli.main(["export", "classroom", checkpoint.id, "-o", str(tmp_path), *kit, *FX]) == 2
    )  # never overwritten
    assert "already exists" in capsys.readouterr().err


def reporter_totals(result: dict[str, Any]) -> tuple[float, float, float]:
    """The three totals autograding-grading-reporter computes from one runner's result (its src/ files):
    the recorded score (notify-classroom.js: the sum of `score`), the log line (console-results.js: passed
    tests / all tests x 100) and the table (aggregate-results.js: passed / all x max_score)."""
    tests = result["tests"]
    passed = sum(1 for test in tests if test["status"] == "pass")
    recorded = sum(test["score"] for test in tests)
    # Both logs print with toFixed(2).
    return (
        recorded,
        round(passed / len(tests) * 100, 2),
        round(passed / len(tests) * (result["max_score"] or 1), 2),
    )


def test_the_reporter_logs_the_score_it_records_for_one_lab_of_four(real_course: Course) -> None:
    """With lab 6.1 (40 points) done and the rest not, do the reporter's log, table and recorded score all say
    40?"""
    checkpoint = real_course.checkpoint("06")
    record = LearnerRecord("me", "/me", "partial", checkpoint.id)
    record.labs = [
        LabScore(
            lab.id,
            lab.title,
            lab.optional,
            5 if lab.id == "6.1" else 0,
            5,
            "done" if lab.id == "6.1" else "failing",
        )
        for lab in checkpoint.labs
    ]
    result = classroom.reporter_result(real_course, record)
    assert result["max_score"] == 100
    assert reporter_totals(result) == (40, 40, 40)
    # Each test is one point; the lab's feedback sits on its first failing test.
    assert {test["score"] for test in result["tests"]} == {0, 1}
    first_failing = next(test for test in result["tests"] if test["status"] == "fail")
    assert first_failing["name"].startswith("Lab 6.2") and "Lab 6.2" not in first_failing["message"][:6]


@pytest.mark.parametrize(("passed", "total"), [(0, 3), (1, 3), (2, 3), (3, 3), (1, 7)])
def test_reporter_totals_agree_for_any_partial_credit(
    course: Course, checkpoint: Checkpoint, passed: int, total: int
) -> None:
    """For any share of a lab's tests passed, do the reporter's three totals agree with each other, within a
    point?"""
    record = LearnerRecord("me", "/me", "partial", checkpoint.id)
    record.labs = [
        LabScore(lab.id, lab.title, lab.optional, passed if index == 0 else total, total, "failing")
        for index, lab in enumerate(checkpoint.labs)
    ]
    result = classroom.reporter_result(course, record)
    recorded, logged, table = reporter_totals(result)
    assert result["max_score"] == sum(lab.points for lab in checkpoint.required_labs) == 100
    assert recorded == logged == table
    points = points_of(course, record)
    assert abs(recorded - points.points) <= 0.5
    assert result["status"] == "fail"
    # The reporter reads the result base64-encoded from the environment: it must survive the round trip.
    assert json.loads(base64.b64decode(base64.b64encode(json.dumps(result).encode()))) == result


@pytest.mark.parametrize(
    "kit",
    [
        "pi-course-kit",
        "pi-course-kit==0.7.0",
        "git+https://github.com/me/pi-course-kit.git@main",
        "git+https://github.com/me/pi-course-kit.git@v0.7.0",
        "https://example.com/pi_course_kit-0.7.0-py3-none-any.whl",
        "git+https://github.com/me/kit.git@" + "0" * 40 + "\nrun: rm -rf ~",
    ],
)
def test_a_kit_that_is_a_package_name_or_a_moving_ref_is_refused(
    kit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is a package name, a branch, a tag, an unbundled URL or a forged line refused, with nothing written?"""
    assert cli.main(["export", "classroom", "a1", "-o", str(tmp_path), "--kit", kit, *FX]) == 2
    assert "--kit" in capsys.readouterr().err and not (tmp_path / ".github").exists()
    assert cli.main(["export", "classroom", "a1", "-o", str(tmp_path), *FX]) == 2  # no --kit at all


def test_a_wheel_kit_is_bundled_and_the_workflow_refuses_other_bytes(tmp_path: Path) -> None:
    """Is --kit WHEEL copied into the repository and checked by sha256 before pip installs it?"""
    wheel = tmp_path / "pi_course_kit-0.7.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 the instructor's own build")
    repo = tmp_path / "repo"
    repo.mkdir()
    assert cli.main(["export", "classroom", "a1", "-o", str(repo), "--kit", str(wheel), *FX]) == 0
    flow = yaml.safe_load((repo / classroom.WORKFLOW).read_text(encoding="utf-8"))
    install = flow["jobs"]["run-autograding-tests"]["steps"][2]["run"]
    bundled = repo / classroom.WHEEL_DIR / wheel.name
    assert bundled.read_bytes() == wheel.read_bytes()
    check, pip = install.splitlines()
    assert "sha256sum --check --strict" in check
    assert shlex.split(pip)[-1] == f"./.github/pi-course/{wheel.name}[instructor]"  # what grading needs
    assert subprocess.run(["bash", "-c", check], cwd=repo, capture_output=True).returncode == 0
    bundled.write_bytes(b"PK\x03\x04 someone else's build")
    assert subprocess.run(["bash", "-c", check], cwd=repo, capture_output=True).returncode != 0


def test_a_commit_pinned_repository_kit_is_installed_by_that_commit(a_commit: str = "ab" * 20) -> None:
    """Is git+https://...git@<40 hex> installed as `pi-course-kit @` that exact commit, quoted for the
    shell?"""
    source = classroom.kit_source(f"git+https://git.example.edu/course/pi-course-kit.git@{a_commit}")
    assert (
        source.requirement
        == f"pi-course-kit[instructor] @ git+https://git.example.edu/course/pi-course-kit.git@{a_commit}"
    )
    assert shlex.split(source.install_script()) == [
        "python",
        "-m",
        "pip",
        "install",
        "--quiet",
        source.requirement,
    ]


def test_the_shipped_classroom_workflow_is_the_one_export_writes(real_course: Course) -> None:
    """Is deploy/github-classroom/classroom.yml exactly what `pi-course export classroom 06` writes today?"""
    shipped = real_course.root / "deploy/github-classroom/classroom.yml"
    workflow = classroom.workflow(real_course.checkpoint("06"), classroom.EXAMPLE_KIT)
    assert shipped.read_text(encoding="utf-8") == workflow


@pytest.mark.sandbox
def test_classroom_grading_works_from_a_course_without_solutions(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With only the learner's part of the course (as the installed kit has it), is a finished repository
    given every required point in the reporter's result?"""
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
