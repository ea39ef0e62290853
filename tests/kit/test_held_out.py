"""Held-out tests (course.toml `held_out`): graded beside the public tests, never handed to a learner.

Every checkpoint that names held-out tests in course.toml has its solution graded in the sandbox, and it
must score full points with them counted. Where this module writes a submission tuned to the public
tests (a copy of the solution that only serves the tool names the public test files use, as a learner
hard-coding their answers would), it is graded in the same batch and must pass every public test yet
score below full. Then every place a learner gets course files from is searched for the held-out files.
"""

from __future__ import annotations

import ast
import json
import shutil
import tomllib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, real_checkpoints
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.instructor import export
from pi_course_kit.instructor.grade import held_out
from pi_course_kit.instructor.grade.gradebook import COMPLETE, LearnerRecord, points_of
from pi_course_kit.instructor.grade.grader import Grader
from pi_course_kit.instructor.grade.gradescope import results_for
from pi_course_kit.instructor.grade.sandbox import Limits

#: Literals that only the held-out files write: none may reach anything a learner sees.
SECRETS = ("toolu_held_7Q", "配额已满", "weather_held", "slow_held", "tick_held")


def public_strings(course: Course, checkpoint: Checkpoint) -> frozenset[str]:
    """Every string literal of the public focused tests a checkpoint's tree runs."""
    found: set[str] = set()
    for relative in checkpoint.tree_tests:
        tree = ast.parse((course.root / relative).read_text(encoding="utf-8"))
        found |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
    return frozenset(found)


#: Appended to a solution file: the public answers kept, anything else answered from a table.
CHEATS = {
    "06": (
        "pi_course/tool.py",
        """
_PUBLIC_NAMES = {names!r}
_served_call = execute_tool_call


async def execute_tool_call(call, registry, *, signal=None, report_progress=None):  # type: ignore[no-redef]
    if call.name not in _PUBLIC_NAMES:  # not a name the public tests use: answer as they never check
        return failed_result(call, "未知工具")
    return await _served_call(call, registry, signal=signal, report_progress=report_progress)
""",
    ),
    "07": (
        "pi_course/agent_loop.py",
        """
_PUBLIC_NAMES = {names!r}


def tool_calls(message):  # type: ignore[no-redef]
    # Only the calls the public scripts make are seen; any other is dropped.
    return [block for block in message.content if isinstance(block, ToolCall) and block.name in _PUBLIC_NAMES]
""",
    ),
}


def cheat(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """A bare submission: the solution's package, special-cased to the public tests' tool names."""
    shutil.copytree(course.root / checkpoint.solution / course.package, dest / course.package)
    relative, code = CHEATS[checkpoint.id]
    names = sorted(public_strings(course, checkpoint))
    with (dest / relative).open("a", encoding="utf-8") as handle:
        handle.write(code.format(names=names))
    return dest


#: Read from course.toml at collection: every checkpoint with held-out tests of its own.
HELD_OUT = [checkpoint.id for checkpoint in real_checkpoints() if checkpoint.held_out]


@pytest.fixture(scope="module", params=HELD_OUT)
def graded(
    request: pytest.FixtureRequest, real_course: Course, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Checkpoint, LearnerRecord, LearnerRecord | None]:
    """The solution and, where CHEATS has one, the public-answers copy of one checkpoint, in one batch."""
    checkpoint = real_course.checkpoint(str(request.param))
    root = tmp_path_factory.mktemp(f"held-out-{checkpoint.id}")
    honest = root / "honest"
    shutil.copytree(
        real_course.root / checkpoint.solution / real_course.package, honest / real_course.package
    )
    folders = [honest]
    if checkpoint.id in CHEATS:
        folders.append(cheat(real_course, checkpoint, root / "tuned"))
    grader = Grader(real_course, Limits(wall_seconds=180, cpu_seconds=180), 1, checkpoint.id)
    try:
        records = grader.grade_all(folders)
    finally:
        grader.close()
    return checkpoint, records[0], records[1] if len(records) > 1 else None


def held_out_nodes(record: LearnerRecord) -> list[tuple[str, str]]:
    """(node id, outcome) of the record's held-out tests."""
    return [(t.nodeid, t.outcome) for t in record.tests if "_held_out.py::" in t.nodeid]


@pytest.mark.sandbox
def test_the_solution_scores_full_points_with_the_held_out_tests_counted(
    graded: tuple[Checkpoint, LearnerRecord, LearnerRecord | None], real_course: Course
) -> None:
    """Does the solution pass every public and held-out test of its checkpoint, for every required point?"""
    checkpoint, honest, _ = graded
    own = held_out.lineage_files(real_course, checkpoint)
    nodes = held_out_nodes(honest)
    assert honest.status == COMPLETE, honest.message
    assert {node.split("::")[0].rsplit("/", 1)[-1] for node, _ in nodes} == {Path(f).name for f in own}
    assert nodes and all(outcome == "passed" for _, outcome in nodes)
    points = points_of(real_course, honest)
    assert points.points == points.max_points == sum(lab.points for lab in checkpoint.required_labs)


@pytest.mark.sandbox
@pytest.mark.parametrize("graded", sorted(CHEATS), indirect=True)
def test_hard_coding_the_public_answers_passes_them_all_and_still_scores_below_full(
    graded: tuple[Checkpoint, LearnerRecord, LearnerRecord | None], real_course: Course
) -> None:
    """Does a submission serving only the public tests' tool names pass each public test yet lose points?"""
    _, _, tuned = graded
    assert tuned is not None
    public = [t for t in tuned.tests if "_held_out.py::" not in t.nodeid]
    assert public and all(t.outcome == "passed" for t in public), [
        t.nodeid for t in public if t.outcome != "passed"
    ]
    failed = [node for node, outcome in held_out_nodes(tuned) if outcome != "passed"]
    assert failed, "the held-out tests did not tell the tuned submission apart"
    points = points_of(real_course, tuned)
    assert points.points < points.max_points
    assert tuned.status != COMPLETE
    # What Gradescope shows the learner names no held-out literal.
    shown = json.dumps(results_for(real_course, tuned), ensure_ascii=False)
    assert not [secret for secret in SECRETS if secret in shown]


# -- nothing a learner gets holds a held-out file ---------------------------------------------------


def held_out_files(course: Course) -> dict[str, bytes]:
    """Every held-out file of the course: name -> bytes."""
    found = {Path(p).name: (course.root / p).read_bytes() for c in course.checkpoints for p in c.held_out}
    assert len(found) >= 2
    return found


def leaks(folder: Path, secrets: dict[str, bytes]) -> list[str]:
    """Files below `folder` named like a held-out file, or holding one's bytes or literals."""
    found = []
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        named = path.name in secrets or "held_out" in path.name
        if named or data in secrets.values() or any(s.encode() in data for s in SECRETS):
            found.append(str(path.relative_to(folder)))
    return found


def test_no_practice_folder_or_checkpoint_copy_holds_a_held_out_test(
    real_course: Course, tmp_path: Path
) -> None:
    """Do `pi-course practice 07` and `pi-course checkpoint 07` give folders without any held-out test?"""
    secrets = held_out_files(real_course)
    course = ["--course", str(real_course.root)]
    assert cli.main(["practice", "07", str(tmp_path / "practice"), *course]) == 0
    assert cli.main(["checkpoint", "07", str(tmp_path / "copies"), *course]) == 0
    assert (tmp_path / "copies").is_dir() and any((tmp_path / "copies").rglob("test_07_agent_loop.py"))
    assert leaks(tmp_path / "practice", secrets) == [] and leaks(tmp_path / "copies", secrets) == []


def test_the_wheel_file_list_holds_no_held_out_test(real_course: Course) -> None:
    """Of what pyproject's wheel target puts in the wheel (its packages and force-include), is none held
    out?"""
    target = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]
    wheel = target["targets"]["wheel"]
    sources = [*wheel["packages"], *wheel["force-include"]]
    files = {
        path
        for source in sources
        for path in ([REPO / source] if (REPO / source).is_file() else (REPO / source).rglob("*"))
        if path.is_file()
    }
    secrets = held_out_files(real_course)
    assert files and not [p for p in files if p.name in secrets or p.read_bytes() in secrets.values()]
    assert not any(Path(source).parts[:2] in (("tests",), ("tests", "held_out")) for source in sources)


def test_the_gradescope_bundle_holds_held_out_tests_only_in_the_grading_course(
    real_course: Course, tmp_path: Path
) -> None:
    """Does the 07 autograder zip carry the held-out tests of 06 and 07 under course/ and nowhere else?"""
    out = tmp_path / "autograder.zip"
    assert cli.main(["export", "gradescope", "07", "-o", str(out), "--course", str(real_course.root)]) == 0
    secrets = held_out_files(real_course)
    with zipfile.ZipFile(out) as archive:
        holding = sorted(name for name in archive.namelist() if archive.read(name) in secrets.values())
    expected = held_out.lineage_files(real_course, real_course.checkpoint("07"))
    assert holding == sorted(f"course/{path}" for path in expected)
    assert (
        export.bundle_files(real_course, real_course.checkpoint("06"))
        .keys()
        .isdisjoint({f"course/{p}" for p in real_course.checkpoint("07").held_out})
    )


def test_grading_an_installed_course_without_held_out_files_uses_the_public_tests(
    real_course: Course,
) -> None:
    """Without the solution (the installed kit's course), is the checkpoint graded with its public tests
    alone?"""
    checkpoint = real_course.checkpoint("07")
    graded_checkpoint = held_out.graded(real_course, checkpoint)
    assert graded_checkpoint.tree_tests[-2:] == tuple(held_out.lineage_files(real_course, checkpoint))
    bare = replace(checkpoint, solution="no-such-solution")
    assert held_out.graded(real_course, bare) == bare


def test_a_missing_held_out_file_in_a_checkout_stops_grading_in_one_line(
    real_course: Course, tmp_path: Path
) -> None:
    """In a checkout whose held-out file is gone, does grading refuse, naming the file, instead of scoring
    less?"""
    checkpoint = replace(real_course.checkpoint("06"), held_out=("tests/held_out/test_gone_held_out.py",))
    course = replace(
        real_course, checkpoints=tuple(c if c.id != "06" else checkpoint for c in real_course.checkpoints)
    )
    with pytest.raises(KitError, match=r"test_gone_held_out\.py is named in course\.toml but missing"):
        held_out.graded(course, checkpoint)


@pytest.mark.parametrize(
    "line",
    [
        'held_out = ["tests/focused/test_x.py"]',
        'held_out = ["tests/held_out/notes.txt"]',
        'held_out = ["tests/held_out/sub/test_x.py"]',
        'held_out = ["tests/held_out/test_00_prologue.py"]',
        "held_out = [1]",
    ],
)
def test_a_bad_held_out_path_is_refused_in_one_line(line: str, tmp_path: Path) -> None:
    """Is a held-out path outside tests/held_out/, not a test_*.py, or named like a public test refused?"""
    text = (REPO / "course.toml").read_text(encoding="utf-8")
    marker = 'contract = "docs/contract-00.md"\n'
    assert marker in text
    (tmp_path / "course.toml").write_text(text.replace(marker, marker + line + "\n", 1), encoding="utf-8")
    with pytest.raises(ManifestError) as raised:
        manifest.load(tmp_path / "course.toml")
    assert "held_out" in str(raised.value) and "\n" not in str(raised.value)


def test_the_held_out_tests_are_kit_style_focused_tests(real_course: Course) -> None:
    """Does every held-out test carry exactly one lab marker of its checkpoint and ask its question in
    Chinese?"""
    for checkpoint in real_course.checkpoints:
        markers = {lab.marker for lab in checkpoint.tree_labs}
        for relative in checkpoint.held_out:
            tree = ast.parse((real_course.root / relative).read_text(encoding="utf-8"))
            tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
            assert tests
            for node in tests:
                labs = [
                    d.attr
                    for d in node.decorator_list
                    if isinstance(d, ast.Attribute) and d.attr.startswith("lab")
                ]
                assert len(labs) == 1 and labs[0] in markers, node.name
                doc = ast.get_docstring(node) or ""
                assert any("\u4e00" <= ch <= "\u9fff" for ch in doc), node.name


def test_a_held_out_file_runs_nowhere_but_in_grading(real_course: Course) -> None:
    """Is no held-out file among any checkpoint's tree tests (what practice, verify and notebooks run)?"""
    for checkpoint in real_course.checkpoints:
        assert not set(checkpoint.tree_tests) & set(held_out.lineage_files(real_course, checkpoint))
    assert held_out.lineage_files(real_course, real_course.checkpoint("07")) == (
        "tests/held_out/test_06_tool_contract_held_out.py",
        "tests/held_out/test_07_agent_loop_held_out.py",
    )
