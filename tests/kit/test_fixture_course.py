"""The engine on a small course of its own (like rustlings' test course): two checkpoints, a2's parent a1.

Nothing in the engine names these checkpoints or the package `fx_course`, so everything here (and every
engine test that runs on this course) also proves that adding a checkpoint needs no engine change.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURE
from learner_support import CLI, run_cli
from pi_course_kit.core import i18n

ENGINE = Path(__file__).resolve().parents[2] / "scripts" / "pi_course_kit"
#: What a checkpoint fact of the real course looks like in code: an id, a lab id, a marker.
CHAPTER_FACT = re.compile(r"\b0[67]\b|\blab[67]_\d|\b[67]\.\d\b|transfer6")


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture course."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "course"))


def test_committed_fixture_starters_are_what_build_labs_generates(tmp_path: Path) -> None:
    """Are the fixture's labs/ exactly what `build-labs` writes from its solutions?"""
    done = run_cli(["build-labs", "--check", "--course", str(FIXTURE)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_build_labs_writes_every_starter_of_a_fresh_course(course_copy: Path) -> None:
    """With labs/ deleted, does build-labs write every starter, stubs numbered by lab?"""
    shutil.rmtree(course_copy / "labs")
    course_copy.joinpath("labs").mkdir()
    assert run_cli(["build-labs", "--course", str(course_copy)], course_copy).returncode == 0
    counter = (course_copy / "labs/a1-counter/fx_course/counter.py").read_text(encoding="utf-8")
    assert 'raise LabNotImplemented("1.1", "Counter.add")' in counter
    assert 'raise LabNotImplemented("1.2", "Counter.reset")' in counter
    pair = (course_copy / "labs/a2-pair/fx_course/pair.py").read_text(encoding="utf-8")
    assert 'raise LabNotImplemented("2.2", "Pair.total")' in pair
    inherited = (course_copy / "labs/a2-pair/fx_course/counter.py").read_bytes()
    assert inherited == (course_copy / "solutions/a1-counter/fx_course/counter.py").read_bytes()


def test_verify_passes_on_the_fixture_course(course_copy: Path) -> None:
    """Does every promise hold for both fixture checkpoints: sync, lineage, green, red, first red,
    mutations?"""
    done = run_cli(["verify", "--course", str(course_copy)], course_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "ok   a2 inherited files equal the parent's solution",
        "ok   a2 starter red, lab by lab",
        "ok   a2 starter stops first on Lab 2.1 not implemented: …",
        "ok   a2 mutation total-left-only caught",
        "ok   a1 mutation add-two caught",
    ):
        assert line in done.stdout


def test_verify_fails_when_an_inherited_file_drifts_from_the_parent(course_copy: Path) -> None:
    """When a2's copy of counter.py differs from a1's solution, does verify name the file and the fix?"""
    drifted = course_copy / "solutions/a2-pair/fx_course/counter.py"
    drifted.write_text(drifted.read_text(encoding="utf-8") + "\n# drift\n", encoding="utf-8")
    done = run_cli(["verify", "--course", str(course_copy), "--check", "parents"], course_copy)
    assert done.returncode == 1
    assert "FAIL a2 inherited files equal the parent's solution" in done.stdout
    assert "solutions/a2-pair/fx_course/counter.py differs from the parent's" in done.stdout


def test_a_child_listed_before_its_parent_is_refused(course_copy: Path) -> None:
    """Is a parent that is not an earlier checkpoint a one-line manifest error?"""
    manifest = course_copy / "course.toml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace('parent = "a1"', 'parent = "a9"'), encoding="utf-8"
    )
    done = run_cli(["verify", "--course", str(course_copy)], course_copy)
    assert done.returncode == 2
    assert "'checkpoints[1].parent' is 'a9', which is not an earlier checkpoint" in done.stderr
    assert "Traceback" not in done.stderr


def test_practice_folder_of_the_child_starts_red_on_its_first_lab_with_the_parent_green(
    tmp_path: Path, course_copy: Path
) -> None:
    """Does a fresh a2 folder run a1's tests green and stop first on `Lab 2.1 not implemented`?"""
    made = run_cli(["practice", "a2", str(tmp_path / "p"), "--course", str(course_copy)], tmp_path)
    assert made.returncode == 0, made.stderr
    red = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path / "p",
        capture_output=True,
        text=True,
        timeout=300,
        env={"PI_COURSE_REPORT_JSON": str(tmp_path / "report.jsonl"), "PATH": "/usr/bin:/bin"},
    )
    assert red.returncode == 1
    records = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    tests = {r["nodeid"].split("::")[1]: r for r in records if r["event"] == "test"}
    assert tests["test_add_counts_one_at_a_time"]["outcome"] == "passed"
    assert tests["test_reset_goes_back_to_zero"]["outcome"] == "passed"
    assert tests["test_a_pair_has_two_separate_counters"]["message"] == "Lab 2.1 not implemented: Pair"
    hint = run_cli(["hint"], tmp_path / "p")
    assert hint.returncode == 0 and "make two counters" in hint.stdout


def test_a_course_speaks_its_own_language_when_no_one_names_one(tmp_path: Path, course_copy: Path) -> None:
    """With no PI_COURSE_LANG and a C locale, do the report and the CLI speak the fixture's `en`, not the real
    course's Chinese?"""
    quiet = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    made = run_cli(["practice", "a1", str(tmp_path / "p"), "--course", str(course_copy)], tmp_path)
    assert made.returncode == 0, made.stderr
    assert i18n.folder_language(tmp_path / "p") == "en"
    assert "pi_course_language = en" in (tmp_path / "p/pytest.ini").read_text(encoding="utf-8")
    report = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        cwd=tmp_path / "p",
        capture_output=True,
        text=True,
        timeout=300,
        env=quiet,
    )
    assert "next: Lab 1.1 (not started)" in report.stdout, report.stdout[-2000:]
    check = subprocess.run(
        [*CLI, "check"],
        cwd=tmp_path / "p",
        capture_output=True,
        text=True,
        timeout=300,
        env=quiet,
    )
    assert "next: Lab 1.1 (not started)" in check.stdout, check.stdout[-2000:] + check.stderr[-2000:]
    # The real course, the same way, stays Chinese: the language is the course's, not the engine's.
    real = subprocess.run(
        [*CLI, "practice", "06", str(tmp_path / "zh")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**quiet, "PI_COURSE_ROOT": str(ENGINE.parents[1])},
    )
    assert real.returncode == 0, real.stderr
    assert i18n.folder_language(tmp_path / "zh" / "tests") == "zh_CN"


def test_practice_from_the_learners_own_parent_folder(tmp_path: Path, course_copy: Path) -> None:
    """Once a1 is solved in the learner's folder, does `practice a2 --from` carry their counter.py over?"""
    assert (
        run_cli(["practice", "a1", str(tmp_path / "a1"), "--course", str(course_copy)], tmp_path).returncode
        == 0
    )
    refused = run_cli(["practice", "a2", "a2", "--from", "a1", "--course", str(course_copy)], tmp_path)
    assert refused.returncode == 2 and "Lab 1.1" in refused.stderr and "Lab 1.2" in refused.stderr
    solved = (course_copy / "solutions/a1-counter/fx_course/counter.py").read_text(encoding="utf-8")
    (tmp_path / "a1/fx_course/counter.py").write_text(solved + "# mine\n", encoding="utf-8")
    made = run_cli(["practice", "a2", "a2", "--from", "a1", "--course", str(course_copy)], tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "a2/fx_course/counter.py").read_text(encoding="utf-8").endswith("# mine\n")


def _string_constants(source: str) -> list[tuple[int, str]]:
    """Every string constant of a module that is not a docstring, with its line."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_engine_holds_no_chapter_facts() -> None:
    """Does no engine string name a checkpoint, lab or marker of the real course (only examples in help)?"""
    found = [
        f"{path.relative_to(ENGINE)}:{line}: {text[:80]!r}"
        for path in sorted(ENGINE.rglob("*.py"))
        for line, text in _string_constants(path.read_text(encoding="utf-8"))
        if CHAPTER_FACT.search(text) and "e.g." not in text and "0.7.0" not in text
    ]
    assert found == []


def test_the_kit_process_never_imports_a_course_package() -> None:
    """Has this interpreter stayed clear of every course tree, real or fixture (each ran in its own
    subprocess)?"""
    assert "pi_course" not in sys.modules and "fx_course" not in sys.modules
