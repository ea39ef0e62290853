"""`scripts/practice` / `pi-course practice`: isolated practice folders, refusals and atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from learner_support import run_cli, snapshot, solve
from pi_course_kit import __version__, cli
from pi_course_kit.core import i18n, records, regions
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.runner import run_tests
from pi_course_kit.learner import practice

#: What `python -m pytest -m lab6_1 -x` in a fresh 06 starter stops on (its first test needs object_schema).
FIRST_RED_06 = "Lab 6.1 not implemented: object_schema"


# A practice folder is what a learner of a real chapter sees: these tests make 06 folders on purpose
# (the engine's side of `practice` runs on the fixture course in test_fixture_course.py and elsewhere).
@pytest.fixture(scope="session")
def course(real_course: Course) -> Course:
    """The real course."""
    return real_course


@pytest.fixture(scope="session")
def checkpoint(real_course: Course) -> Checkpoint:
    """Checkpoint 06: its folder, guide, contract and first red, as a learner gets them."""
    return real_course.checkpoint("06")


@pytest.fixture(scope="module")
def made(
    course: Course, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One folder made by `scripts/practice` under an interpreter that sees no site-packages (no pytest)."""
    dest = tmp_path_factory.mktemp("practice") / "pi-practice"
    done = subprocess.run(
        [sys.executable, "-S", str(course.root / "scripts" / "practice"), "06", str(dest)],
        capture_output=True,
        text=True,
        timeout=60,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
    )
    return dest, done


def test_the_stdlib_only_interpreter_really_lacks_pytest() -> None:
    """Is `python -S` a fair stand-in for a bare python3 without pytest?"""
    done = subprocess.run([sys.executable, "-S", "-c", "import pytest"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'pytest'" in done.stderr


def test_practice_runs_without_the_kit_installed(made: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Does `python3 scripts/practice 06 DIR` succeed with the standard library alone?"""
    dest, done = made
    assert done.returncode == 0, done.stderr
    assert (dest / ".pi-course" / "meta.json").is_file()


def test_practice_prints_the_next_steps(
    made: tuple[Path, subprocess.CompletedProcess[str]], checkpoint: Checkpoint
) -> None:
    """Does practice end by saying where to cd, what to run and which red to expect?"""
    dest, done = made
    assert "next steps:" in done.stdout
    assert f"cd {dest.resolve()}" in done.stdout
    assert "python -m pytest -m lab6_1" in done.stdout
    assert checkpoint.first_red_prefix in done.stdout
    # Made by a python without pytest, so the steps start by installing the kit.
    assert "scripts/bootstrap" in done.stdout


def test_the_next_steps_comments_start_in_one_column_in_both_languages(tmp_path: Path) -> None:
    """Do the `# …` comments of the next steps line up, for a lab folder and an observation one, in Chinese
    (wide characters) and in English?"""
    for checkpoint, language in (("14", "zh_CN"), ("00", "zh_CN"), ("06", "en")):
        dest = tmp_path / f"{checkpoint}-{language}"
        done = run_cli(["--lang", language, "practice", checkpoint, str(dest)], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        commented = [line for line in done.stdout.splitlines() if line.startswith("  ") and "# " in line]
        assert len(commented) >= 4, done.stdout
        assert len({records.display_width(line.split("# ")[0]) for line in commented}) == 1, commented


def test_folder_holds_the_starter_tests_and_config(
    made: tuple[Path, subprocess.CompletedProcess[str]], course: Course, checkpoint: Checkpoint
) -> None:
    """Is the folder's pi_course the starter byte for byte, with the focused tests, plugin and pytest.ini?"""
    dest, _ = made
    starter = course.root / checkpoint.starter / course.package
    for path in starter.rglob("*.py"):
        assert (dest / course.package / path.relative_to(starter)).read_bytes() == path.read_bytes()
    for relative in (*checkpoint.focused_tests, *checkpoint.test_support):
        assert (dest / "tests" / Path(relative).name).read_bytes() == (course.root / relative).read_bytes()
    ini = (dest / "pytest.ini").read_text(encoding="utf-8")
    assert "pythonpath = ." in ini and "--disable-plugin-autoload" in ini and "-p pytest_timeout" in ini
    for lab in checkpoint.labs:
        assert f"{lab.marker}: {lab.id} |" in ini


def test_notebook_is_copied_to_the_root_when_the_kit_has_one(
    made: tuple[Path, subprocess.CompletedProcess[str]], course: Course, checkpoint: Checkpoint
) -> None:
    """Is the notebook at the folder root exactly when the kit has one, with its cells and none of its
    outputs?"""
    dest, _ = made
    source = course.root / checkpoint.notebook
    copied = dest / Path(checkpoint.notebook).name
    if source.is_file():
        kit_cells = [
            cell
            for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]
            if "repo-only" not in cell.get("metadata", {}).get("tags", [])
        ]
        learner_cells = json.loads(copied.read_text(encoding="utf-8"))["cells"]
        assert [(c["cell_type"], "".join(c["source"])) for c in learner_cells] == [
            (c["cell_type"], "".join(c["source"])) for c in kit_cells
        ]
        # The kit's copy shows the solution's outputs; the learner's must not give them away.
        assert any(c.get("outputs") for c in kit_cells)
        code = [c for c in learner_cells if c["cell_type"] == "code"]
        assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
        assert copied.name in (dest / "LAB-GUIDE.md").read_text(encoding="utf-8")
    else:
        assert not copied.exists()


def test_lab_guide_walks_through_every_lab(
    made: tuple[Path, subprocess.CompletedProcess[str]], course: Course, checkpoint: Checkpoint
) -> None:
    """Does LAB-GUIDE.md list each lab in order, with its command, its hint command and the first red?"""
    dest, _ = made
    guide = (dest / "LAB-GUIDE.md").read_text(encoding="utf-8")
    # The titles as the folder's own run chose them: this course's language, the run's PI_COURSE_LANG.
    # (The last course any earlier test loaded, the fixture course maybe, set the process's default.)
    i18n.set_course_language(course.language)
    positions = [guide.index(lab.shown_title) for lab in checkpoint.labs]  # the run's language
    assert positions == sorted(positions)
    for lab in checkpoint.labs:
        assert f"python -m pytest -m {lab.marker}" in guide
        assert f"pi-course hint {lab.id}" in guide
    assert "Lab 6.1 not implemented: " in guide
    assert "`ToolRegistry.register`, at `pi_course/tool.py:" in guide


# Every literal message the 06 focused tests hold the learner to, as the tests spell them.
LITERALS_06 = (
    "必须是 string",
    "必须是正整数",
    "参数必须是 object",
    "未知工具",
    "Tool 已存在：echo",
    "Tool echo failed: ",
    "Tool missing failed: 未知工具",
    "Lab 6.1 not implemented: object_schema",
)


def test_folder_holds_the_contract_with_every_literal_message(
    made: tuple[Path, subprocess.CompletedProcess[str]], course: Course, checkpoint: Checkpoint
) -> None:
    """Does a fresh folder hold CONTRACT.md, linked from LAB-GUIDE.md, with every message the focused tests
    expect?"""
    dest, _ = made
    contract = (dest / "CONTRACT.md").read_text(encoding="utf-8")
    tests = "".join((course.root / name).read_text(encoding="utf-8") for name in checkpoint.focused_tests)
    for literal in LITERALS_06:
        # The red's form lives in the starter, not in the focused tests.
        if not literal.startswith("Lab "):
            assert literal in tests, literal
        assert literal in contract, literal
    guide = (dest / "LAB-GUIDE.md").read_text(encoding="utf-8")
    assert "(CONTRACT.md)" in guide.split("## ", 1)[0]  # linked near the top, before the first section


LITERALS_07 = (
    "Tool call was not executed because the model response was truncated.",
    "Tool call was not executed because the model returned stop with a tool call.",
    "unexpected-stop",
    "ScriptedModel 没有更多响应",
    "maxSteps",
)


def test_a_07_folder_holds_its_own_contract(course: Course, tmp_path: Path) -> None:
    """Does a fresh 07 folder hold 07's CONTRACT.md, with the skipped-call and limit messages its tests
    expect?"""
    checkpoint = course.checkpoint("07")
    tests = "".join((course.root / name).read_text(encoding="utf-8") for name in checkpoint.focused_tests)
    dest = practice.create(course, checkpoint, tmp_path / "p07")
    contract = (dest / "CONTRACT.md").read_text(encoding="utf-8")
    for literal in LITERALS_07:
        assert literal in tests, literal
        assert literal in contract, literal
    assert "(CONTRACT.md)" in (dest / "LAB-GUIDE.md").read_text(encoding="utf-8")


def test_meta_records_checkpoint_version_and_hashes(
    made: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Does meta.json name the checkpoint and kit version and hash every shipped file correctly (bytecode,
    a cache, aside)?"""
    dest, _ = made
    meta = json.loads((dest / ".pi-course" / "meta.json").read_text(encoding="utf-8"))
    assert meta["checkpoint"] == "06" and meta["kit_version"] == __version__
    shipped = {
        p.relative_to(dest).as_posix()
        for p in dest.rglob("*")
        if p.is_file() and not {".pi-course", "__pycache__"} & set(p.parts)
    }
    assert set(meta["files"]) == shipped
    for name, digest in meta["files"].items():
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == digest


def test_folder_permissions_follow_the_umask(made: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Is the folder readable like any other new folder (not left private by the temporary-folder step)?"""
    dest, _ = made
    umask = os.umask(0)
    os.umask(umask)
    assert dest.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (dest / ".pi-course" / "meta.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_pytest_in_the_folder_fails_first_on_lab_6_1(
    made: tuple[Path, subprocess.CompletedProcess[str]], checkpoint: Checkpoint
) -> None:
    """Does `python -m pytest -m lab6_1` there stop on `Lab 6.1 not implemented` in the folder's own
    tool.py?"""
    dest, _ = made
    result = run_tests(dest, ["-m", "lab6_1", "-x"], timeout=120, command=None)
    assert result.returncode == 1
    first = result.tests[0]
    assert first.message == FIRST_RED_06
    assert (first.location or "").startswith("pi_course/tool.py:")  # relative: inside this folder
    assert result.next_step is not None and result.next_step.lab == "6.1"
    assert "Lab 6.1 not implemented: object_schema" in result.output
    assert 'python -m pytest -m "lab6_1"' in result.output
    guide = (dest / "LAB-GUIDE.md").read_text(encoding="utf-8")
    stub_line = next(line for line in guide.splitlines() if line.startswith("- `object_schema`"))
    assert f"at `{first.location}`" in stub_line  # the guide names the red's function and line


def test_plain_pytest_command_works_in_the_folder(
    made: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Does the learner's literal command (`python -m pytest -m lab6_1`, no kit flags) show the report?"""
    dest, _ = made
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "lab6_1", "-x"],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Lab 6.1 not implemented: object_schema" in done.stdout
    assert "pi-course labs" in done.stdout and "next: Lab 6.1" in done.stdout
    assert not (dest / ".pytest_cache").exists()


def test_copying_the_solution_turns_every_lab_green(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With the solution's tool.py copied in, do all required labs pass in the folder?"""
    dest = practice.create(course, checkpoint, tmp_path / "done")
    solve(course, checkpoint, dest)
    result = run_tests(dest, timeout=300)
    assert result.finished and not result.collect_errors
    required = {lab.id for lab in checkpoint.required_labs}
    rows = {row.id: row for row in result.labs}
    assert required <= set(rows)
    assert all(rows[lab].status == "done" and rows[lab].total > 0 for lab in required)


def test_console_command_makes_a_folder(tmp_path: Path, course: Course) -> None:
    """Does `pi-course practice 06 DIR` work as a console command too?"""
    done = run_cli(["practice", "06", str(tmp_path / "p")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / "pi_course" / "tool.py").is_file()
    # Made with the kit installed: no bootstrap step needed.
    assert "scripts/bootstrap" not in done.stdout


def test_an_existing_empty_folder_is_used(course: Course, checkpoint: Checkpoint, tmp_path: Path) -> None:
    """Is an empty existing DIR accepted and filled?"""
    dest = tmp_path / "empty"
    dest.mkdir()
    practice.create(course, checkpoint, dest)
    assert (dest / "LAB-GUIDE.md").is_file()


# -- refusals ---------------------------------------------------------------------------------


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = cli.main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    return err


def test_refuses_a_non_empty_folder_and_leaves_it_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does practice refuse a non-empty folder, exit 2, and change nothing in it or beside it?"""
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("my notes", encoding="utf-8")
    before, around = snapshot(tmp_path), sorted(os.listdir(tmp_path))
    err = _refused(["practice", "06", str(dest)], capsys)
    assert "not empty" in err and str(dest) in err
    assert snapshot(tmp_path) == before and sorted(os.listdir(tmp_path)) == around


def test_refuses_a_file_in_the_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Does practice refuse a DIR that is an existing file, leaving the file as it was?"""
    dest = tmp_path / "afile"
    dest.write_text("keep", encoding="utf-8")
    _refused(["practice", "06", str(dest)], capsys)
    assert dest.read_text(encoding="utf-8") == "keep"


@pytest.mark.parametrize("tree", ["labs", "solutions"])
def test_refuses_a_folder_inside_labs_or_solutions(
    tree: str, course: Course, checkpoint: Checkpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does practice refuse a DIR inside labs/ or solutions/ and leave those trees untouched?"""
    root = course.root / tree
    before = snapshot(root)
    err = _refused(["practice", "06", str(root / checkpoint.slug / "new-practice")], capsys)
    assert f"{tree}/" in err
    assert snapshot(root) == before
    assert not (root / checkpoint.slug / "new-practice").exists()
    assert not any(p.name.startswith(".new-practice.tmp-") for p in (root / checkpoint.slug).iterdir())


def test_refuses_an_unknown_checkpoint_listing_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], course: Course
) -> None:
    """Does an unknown checkpoint exit 2, name the known checkpoints and create nothing?"""
    err = _refused(["practice", "99", str(tmp_path / "p")], capsys)
    assert "'99'" in err and all(cp.id in err for cp in course.checkpoints)
    assert list(tmp_path.iterdir()) == []


# -- atomic write -----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_fill_that_fails_half_way_leaves_nothing(
    error: BaseException,
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If writing the folder fails after the files are copied, is there no folder and no temp dir left?"""

    def broken(*args: object, **kwargs: object) -> str:
        raise error

    monkeypatch.setattr(practice, "lab_guide", broken)  # runs after pi_course and tests are copied
    with pytest.raises(type(error)):
        practice.create(course, checkpoint, tmp_path / "p")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_fill_keeps_an_empty_target_folder(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If DIR existed empty and the fill fails, is DIR still there, still empty, with no temp dir beside
    it?"""
    dest = tmp_path / "empty"
    dest.mkdir()

    def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(practice, "lab_guide", broken)
    with pytest.raises(RuntimeError):
        practice.create(course, checkpoint, dest)
    assert [p.name for p in tmp_path.iterdir()] == ["empty"] and list(dest.iterdir()) == []


def test_two_saves_of_one_length_within_a_second_run_the_second(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """After a run has cached the learner's module, does a second save of the same length in the same
    mtime second (`value >= 1` made `value >= 2`) run the new code, not the first save's bytecode?"""
    folder = practice.create(course, checkpoint, tmp_path / "mine")
    solve(course, checkpoint, folder)
    teaching = folder / checkpoint.teaching_files[0]
    first = run_tests(folder, ("-m", "lab6_1"))
    assert first.returncode == 0, first.output
    stamp = teaching.stat().st_mtime_ns
    source = teaching.read_text(encoding="utf-8")
    assert source.count("value >= 1") == 1
    teaching.write_text(source.replace("value >= 1", "value >= 2"), encoding="utf-8")
    os.utime(teaching, ns=(stamp, stamp))  # the size and the mtime of the save the first run cached
    second = run_tests(folder, ("-m", "lab6_1"))
    assert any(test.outcome == "failed" for test in second.report.tests), second.output


def test_a_stub_s_wrapped_summary_is_read_whole() -> None:
    """Does the lab guide's summary of a stub keep the whole first paragraph of its docstring, where
    that paragraph is wrapped over two lines, and leave out what follows it?"""
    source = '''\
def parse(text: str) -> str:
    """Parse the edit's arguments into a batch, refusing an empty
    list of edits.

    Details the guide does not show.
    """
    raise LabNotImplemented("8.4", "parse")
'''
    (stub,) = regions.find_stubs(source)
    assert stub.doc == "Parse the edit's arguments into a batch, refusing an empty list of edits."
