"""Root without CAP_SYS_ADMIN (a default container, Gradescope's): grading still builds its sandbox.

bwrap cannot build namespaces as such a root, and learner code must never run as uid 0. The grader
then drops to the slot's unprivileged uid and lets bwrap make an unprivileged user namespace, with
every bound file opened by the grader and passed as a descriptor. Proven here under
`capsh --drop=cap_sys_admin`: a complete learner scores full points, the starter none, and the run
saw neither uid 0 nor a capability.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import FX, REPO
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import bwrap
from pi_course_kit.instructor.grade.gradescope import ROOT_ENV, validate
from test_grade import TEACHING, make_learner
from test_grade_attacks2_sandbox import interpreter_reachable

ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.slow,
    pytest.mark.sandbox,
    pytest.mark.skipif(not ROOT, reason="drops CAP_SYS_ADMIN from root: needs root"),
    # Where root has no CAP_SYS_ADMIN to begin with, every sandbox test of the suite already grades this way.
    pytest.mark.skipif(
        not bwrap.root_builds_namespaces(),
        reason="root has no CAP_SYS_ADMIN here: the whole suite runs without it",
    ),
    pytest.mark.skipif(shutil.which("capsh") is None, reason="capsh is missing: apt-get install libcap2-bin"),
]

# Appended to the complete learner: fails its import if the run is uid 0 or holds any capability.
NO_PRIVILEGE = """
import os as _os

_STATUS = dict(_l.split(":", 1) for _l in open("/proc/self/status").read().splitlines() if ":" in _l)
if (
    _os.getuid() == 0
    or _os.geteuid() == 0
    or any(int(_STATUS[_s], 16) for _s in ("CapPrm", "CapEff", "CapAmb"))
):
    raise RuntimeError("PRIVILEGED " + _STATUS["Uid"] + " " + _STATUS["CapEff"])
"""
GRADE = "import sys; from pi_course_kit import cli; sys.exit(cli.main(sys.argv[1:]))"


def without_sys_admin(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `command` as root with CAP_SYS_ADMIN dropped from every set (bounding included).

    In a private mount namespace made first (with CAP_SYS_ADMIN still there) where the interpreter is
    open to every user, as in a container whose Python lives under /usr: the slot's uid must reach it.
    """
    line = " ".join(shlex.quote(part) for part in command)
    dropped = f"exec capsh --drop=cap_sys_admin -- -c {shlex.quote('exec ' + line)}"
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            interpreter_reachable(tmp_path) + dropped,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PI_COURSE_LANG": "en"},
    )


def test_root_without_cap_sys_admin_grades_a_complete_learner_in_full(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """As root without CAP_SYS_ADMIN, is a complete learner graded complete with every test, in the bubblewrap
    sandbox, and the starter at 0?"""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    status = without_sys_admin(["grep", "^CapEff", "/proc/self/status"], tmp_path / "first")
    assert not int(status.stdout.split()[1], 16) >> 21 & 1, status.stdout  # CAP_SYS_ADMIN is gone
    complete = make_learner(course, checkpoint, tmp_path / "complete", labs_from_solution=True)
    tool = complete / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + NO_PRIVILEGE, encoding="utf-8")
    starter = make_learner(course, checkpoint, tmp_path / "starter")
    grades = tmp_path / "grades.jsonl"
    done = without_sys_admin(
        [sys.executable, "-c", GRADE, "grade", str(complete), str(starter), "--json", str(grades), *FX],
        tmp_path / "second",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "root without CAP_SYS_ADMIN drops privileges first" in done.stdout + done.stderr
    records = {Path(r["folder"]).name: r for r in map(json.loads, grades.read_text().splitlines())}
    first = records["complete"]
    assert (first["status"], first["message"], first["sandbox"]) == ("complete", "", "bwrap")
    assert first["passed"] == first["total"] > 0
    assert (records["starter"]["status"], records["starter"]["passed"]) == ("not started", 0)


def test_the_gradescope_bundle_grades_a_complete_learner_in_full_without_cap_sys_admin(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Run as Gradescope runs it, as root without CAP_SYS_ADMIN, does the bundle give a complete upload every
    point?"""
    bundle = tmp_path / "autograder.zip"
    export = [sys.executable, "-c", GRADE, "export", "gradescope", checkpoint.id, "-o", str(bundle), *FX]
    assert subprocess.run(export, capture_output=True, text=True, timeout=300).returncode == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    shutil.copyfile(root / "source/run_autograder", root / "run_autograder")
    shutil.copytree(course.root / checkpoint.solution / course.package, root / "submission" / course.package)
    # Full points also prove that the learner's code ran with no uid 0 and no capability.
    tool = root / "submission" / TEACHING
    tool.write_text(tool.read_text(encoding="utf-8") + NO_PRIVILEGE, encoding="utf-8")
    (tmp_path / "ns").mkdir()
    done = without_sys_admin(
        [
            "env",
            f"{ROOT_ENV}={root}",
            f"PI_COURSE_PYTHON={sys.executable}",
            "bash",
            str(root / "run_autograder"),
        ],
        tmp_path / "ns",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((root / "results/results.json").read_text(encoding="utf-8"))
    validate(results)
    # The solution's package holds the optional exercise too: every required point, and the extra credit.
    assert results["score"] == sum(lab.points for lab in checkpoint.labs) > 0
    assert [test.get("status") for test in results["tests"]] == ["passed"] * len(checkpoint.labs)
