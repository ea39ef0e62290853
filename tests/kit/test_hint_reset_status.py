"""`pi-course hint`, `reset` and `status` inside a practice folder of the fixture course."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from learner_support import make_folder, run_cli, snapshot, solve
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner.reset import restore_labs


def meta(folder: Path) -> dict[str, object]:
    """The folder's meta.json."""
    data: dict[str, object] = json.loads((folder / ".pi-course" / "meta.json").read_text(encoding="utf-8"))
    return data


def bodies(source: str) -> dict[str, str]:
    """Source text of every function and method, by qualified name."""
    tree = ast.parse(source)
    found: dict[str, str] = {}
    for node in tree.body:
        children = node.body if isinstance(node, ast.ClassDef) else [node]
        prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        for child in children:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found[prefix + child.name] = ast.get_source_segment(source, child) or ""
    return found


# -- hint -------------------------------------------------------------------------------------


def test_hints_come_one_more_each_time_and_are_remembered(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Does `hint 1.1` show hint 1, then 2, then repeat the last, counting in meta.json per lab?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder / "fx_course")
    hints = checkpoint.lab("1.1").hints
    for number, hint in enumerate(hints, start=1):
        assert cli.main(["hint", "1.1"]) == 0
        out = capsys.readouterr().out
        assert f"hint {number}/{len(hints)} for Lab 1.1" in out and hint in out
        assert all(other not in out for other in hints if other != hint)
        assert meta(folder)["hints"] == {"1.1": number}
    assert cli.main(["hint", "1.1"]) == 0
    out = capsys.readouterr().out
    assert hints[-1] in out and "last hint" in out
    assert cli.main(["hint", "1.2"]) == 0
    assert checkpoint.lab("1.2").hints[0] in capsys.readouterr().out
    assert meta(folder)["hints"] == {"1.1": len(hints), "1.2": 1}
    assert cli.main(["hint", "1.1", "--all"]) == 0
    out = capsys.readouterr().out
    assert all(hint in out for hint in hints)


def test_hint_for_an_unknown_lab_is_refused(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Does `hint 9.9` exit 2 listing the labs, and leave meta.json unchanged?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    assert cli.main(["hint", "9.9"]) == 2
    assert "known labs: 1.1, 1.2, extra1" in capsys.readouterr().err
    assert snapshot(folder) == before


# -- reset ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def starter_text(course: Course, checkpoint: Checkpoint) -> str:
    """The starter's teaching file."""
    return (course.root / checkpoint.starter / "fx_course" / "counter.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def solution_text(course: Course, checkpoint: Checkpoint) -> str:
    """The solution's teaching file."""
    return (course.root / checkpoint.solution / "fx_course" / "counter.py").read_text(encoding="utf-8")


def test_reset_restores_one_lab_and_backs_up_the_learner_version(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    starter_text: str,
    solution_text: str,
) -> None:
    """After `reset 1.2` on a solved file: is 1.2's body the starter's, 1.1's kept, and a backup saved?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    monkeypatch.chdir(folder)
    assert cli.main(["reset", "1.2"]) == 0
    out = capsys.readouterr().out
    backups = list((folder / ".pi-course" / "backups").iterdir())
    assert len(backups) == 1 and backups[0].name in out
    assert (backups[0] / "fx_course" / "counter.py").read_text(encoding="utf-8") == solution_text
    now = bodies((folder / "fx_course" / "counter.py").read_text(encoding="utf-8"))
    starter, solution = bodies(starter_text), bodies(solution_text)
    assert set(now) == {"Counter.__init__", "Counter.add", "Counter.reset"}
    for name in now:
        assert now[name] == (starter if name == "Counter.reset" else solution)[name], name
    # A second reset makes a second, separate backup.
    assert cli.main(["reset", "1.2"]) == 0
    assert len(list((folder / ".pi-course" / "backups").iterdir())) == 2


def test_reset_state_runs_red_on_the_reset_lab_only(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `reset 1.1` on the solution, is 1.1 not started, 1.2 blocked by it and 1.1's red the next
    step?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    monkeypatch.chdir(folder)
    assert cli.main(["reset", "1.1"]) == 0
    done = run_cli(["check"], cwd=folder)
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line[:1].isdigit()}
    assert "not started" in rows["1.1"]
    assert "blocked by 1.1" in rows["1.2"]
    assert "next: Lab 1.1 (not started) — Lab 1.1 not implemented: Counter.add" in done.stdout
    assert "run:  python -m pytest -m lab1_1" in done.stdout


def test_resetting_every_lab_of_the_solution_gives_the_starter(course: Course, child: Checkpoint) -> None:
    """Reset lab by lab, does a2's solved pair.py become exactly the starter's?"""
    solution = (course.root / child.solution / "fx_course/pair.py").read_text(encoding="utf-8")
    starter = (course.root / child.starter / "fx_course/pair.py").read_text(encoding="utf-8")
    text = solution
    for lab in ("2.1", "2.2"):
        text, names = restore_labs(text, starter, {lab}, "pair.py")
        assert names
    assert text == starter


def test_reset_keeps_learner_comments_outside_the_lab_and_handles_one_liners(starter_text: str) -> None:
    """Are a one-line def, a comment inside the body and a different docstring all replaced, other code
    kept?"""
    learner = starter_text.replace(
        "    def reset(self) -> None:\n"
        '        """Go back to zero."""\n'
        '        raise LabNotImplemented("1.2", "Counter.reset")\n',
        "    def reset(self) -> None: self.count = 0\n",
    ).replace(
        '        """Count one more and return the new count."""\n'
        '        raise LabNotImplemented("1.1", "Counter.add")\n',
        "        # my plan: add then return\n        self.count += 1\n        return self.count\n"
        "        # trailing thought\n",
    )
    learner += "\n\n# my own helper, outside every lab\nMY_CONSTANT = 42\n"
    assert learner != starter_text
    restored, _ = restore_labs(learner, starter_text, {"1.1", "1.2"}, "counter.py")
    assert restored == starter_text + "\n\n# my own helper, outside every lab\nMY_CONSTANT = 42\n"


def test_reset_refuses_a_file_that_does_not_parse(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With a syntax error in counter.py, does `reset 1.1` exit 2 naming the line, touching nothing; does
    --all work?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    counter = folder / "fx_course" / "counter.py"
    broken = counter.read_text(encoding="utf-8") + "\ndef oops(:\n"
    counter.write_text(broken, encoding="utf-8")
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    assert cli.main(["reset", "1.1"]) == 2
    err = capsys.readouterr().err
    assert "fx_course/counter.py:" in err and "reset --all" in err
    assert snapshot(folder) == before
    assert cli.main(["reset", "--all"]) == 0
    assert (
        counter.read_bytes() == (course.root / checkpoint.starter / "fx_course" / "counter.py").read_bytes()
    )
    (backup,) = (folder / ".pi-course" / "backups").iterdir()
    assert (backup / "fx_course" / "counter.py").read_text(encoding="utf-8") == broken


def test_reset_of_a_lab_without_stubs_is_refused(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Does resetting the optional lab (new code, no stubs) exit 2 and leave files alone?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    assert cli.main(["reset", "extra1"]) == 2
    assert "no stubs" in capsys.readouterr().err
    assert cli.main(["reset"]) == 2
    assert snapshot(folder) == before


def test_restore_refuses_when_a_lab_function_was_deleted(starter_text: str) -> None:
    """If the learner deleted a lab's function, does restore raise KitError rather than guess?"""
    learner = starter_text.replace("def reset(", "def renamed(")
    with pytest.raises(KitError, match="reset"):
        restore_labs(learner, starter_text, {"1.2"}, "counter.py")


# -- status -----------------------------------------------------------------------------------


def test_status_lists_files_changed_since_the_folder_was_made(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Does status say nothing changed at first, then list a modified, an added and a deleted file?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder)
    assert cli.main(["status", "--no-run"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint a1" in out and "none yet" in out
    solve(course, checkpoint, folder)
    (folder / "fx_course" / "doubler.py").write_text("# mine\n", encoding="utf-8")
    (folder / "LAB-GUIDE.md").unlink()
    (folder / "fx_course" / "__pycache__").mkdir(exist_ok=True)
    (folder / "fx_course" / "__pycache__" / "counter.cpython-311.pyc").write_bytes(b"cache")
    assert cli.main(["hint", "1.2"]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--no-run"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"modified\s+fx_course/counter\.py", out)
    assert re.search(r"added\s+fx_course/doubler\.py", out)
    assert re.search(r"deleted\s+LAB-GUIDE\.md", out)
    assert "__pycache__" not in out
    assert "hints seen: Lab 1.2 1" in out


def test_status_runs_the_tests_and_shows_the_table(solved_status: str) -> None:
    """Does plain `status` also run the tests and show each lab's row?"""
    assert "modified fx_course/counter.py" in solved_status
    assert any(line.startswith("1.2 ") and "done" in line for line in solved_status.splitlines())


@pytest.fixture(scope="module")
def solved_status(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of `pi-course status` in a solved folder."""
    folder = make_folder(course, checkpoint, tmp_path_factory.mktemp("status") / "p")
    solve(course, checkpoint, folder)
    done = run_cli(["status"], cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# -- the kit's own files ------------------------------------------------------------------------


def test_deleted_tests_are_named_and_reset_kit_puts_them_back(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With tests/ and pytest.ini deleted: does check say what is missing and what to run, and reset --kit
    restore them?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    shipped = snapshot(folder)
    mine = (folder / "fx_course" / "counter.py").read_bytes()
    for name in ("tests", "pytest.ini", "LAB-GUIDE.md", "AGENT-GUIDE.md"):
        path = folder / name
        if path.is_dir():
            for child in sorted(path.rglob("*"), reverse=True):
                child.unlink() if child.is_file() else child.rmdir()
            path.rmdir()
        else:
            path.unlink()
    refused = run_cli(["check"], cwd=folder)
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1 and "tests/, pytest.ini missing" in lines[0] and "pi-course reset --kit" in lines[0]
    )
    assert "os._exit" not in refused.stdout + refused.stderr
    restored = run_cli(["reset", "--kit"], cwd=folder)
    assert restored.returncode == 0, restored.stderr
    assert "pytest.ini" in restored.stdout and "tests/test_a1_counter.py" in restored.stdout
    assert {k: v for k, v in snapshot(folder).items() if not k.startswith(".pi-course/")} == {
        k: v for k, v in shipped.items() if not k.startswith(".pi-course/")
    }
    assert (folder / "fx_course" / "counter.py").read_bytes() == mine  # the learner's code untouched
    assert run_cli(["check"], cwd=folder).returncode == 0


def test_reset_all_also_restores_a_changed_kit_file(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """After the learner edits a test file, does `reset --all` put the shipped test back (and back the edit
    up)?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    test_file = folder / "tests" / "test_a1_counter.py"
    shipped = test_file.read_bytes()
    test_file.write_text("# emptied by the learner\n", encoding="utf-8")
    done = run_cli(["reset", "--all"], cwd=folder)
    assert done.returncode == 0, done.stderr
    assert test_file.read_bytes() == shipped
    kit_backups = [p for p in (folder / ".pi-course" / "backups").iterdir() if p.name.endswith("-kit")]
    assert len(kit_backups) == 1
    assert (
        (kit_backups[0] / "tests" / "test_a1_counter.py").read_text(encoding="utf-8").startswith("# emptied")
    )
    again = run_cli(["reset", "--kit"], cwd=folder)
    assert again.returncode == 0 and "nothing to put back" in again.stdout


# -- the companion-agent guide --------------------------------------------------------------------


def test_a_fresh_folder_has_an_agent_guide_naming_the_commands(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a fresh practice folder hold AGENT-GUIDE.md, naming what the agent may run and must not touch?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    guide = (folder / "AGENT-GUIDE.md").read_text(encoding="utf-8")
    for command in ("`pi-course check`", "`pi-course hint 1.1`", "`python -m pytest -m lab1_1`"):
        assert command in guide, command
    for forbidden in ("`solutions/`", "`tests/`"):
        assert forbidden in guide, forbidden
    assert "one action at a time" in guide
    # The fixture course is English: no line of the guide is in Chinese.
    assert not any("\u4e00" <= char <= "\u9fff" for char in guide)


@pytest.mark.usefixtures("chinese")
def test_a_chinese_course_gets_its_agent_guide_in_chinese(real_course: Course, tmp_path: Path) -> None:
    """In a Chinese run, is the agent guide of the (Chinese) course in Chinese, with the chapter's own
    notes?"""
    lab_checkpoint = next(cp for cp in real_course.checkpoints if not cp.observation)
    folder = make_folder(real_course, lab_checkpoint, tmp_path / "p")
    guide = (folder / "AGENT-GUIDE.md").read_text(encoding="utf-8")
    assert "陪学 Agent 指南" in guide and "一次只建议一个动作" in guide
    assert f"`pi-course hint {lab_checkpoint.first_lab.id}`" in guide
    assert "How to help" not in guide
    notes = lab_checkpoint.agent_notes
    assert notes is not None
    for line in (
        f"- 先预测：{notes.predict}",
        f"- 暂不讲，不要引入：{notes.not_yet}",
        f"- 验收解释：{notes.acceptance}",
    ):
        assert line in guide.splitlines(), line


def test_an_english_run_gets_the_agent_guide_and_the_chapter_notes_in_english(
    real_course: Course, tmp_path: Path
) -> None:
    """With --lang en, is every line of the agent guide English, the chapter's notes included?"""
    for checkpoint in (real_course.checkpoints[0], real_course.checkpoints[-1]):
        folder = make_folder(real_course, checkpoint, tmp_path / checkpoint.id)
        guide = (folder / "AGENT-GUIDE.md").read_text(encoding="utf-8")
        notes = checkpoint.agent_notes_en
        assert notes is not None
        assert f"- Predict first: {notes.predict}" in guide.splitlines()
        assert f"- Explaining the acceptance: {notes.acceptance}" in guide.splitlines()
        assert not any("\u4e00" <= char <= "\u9fff" for char in guide), checkpoint.id
