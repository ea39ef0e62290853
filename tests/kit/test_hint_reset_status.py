"""`pi-course hint`, `reset` and `status` inside a practice folder."""

from __future__ import annotations

import ast
import json
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
    """Does `hint 6.1` show hint 1, then 2, then 3, then repeat the last, counting in meta.json per lab?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder / "pi_course")
    hints = checkpoint.lab("6.1").hints
    for number, hint in enumerate(hints, start=1):
        assert cli.main(["hint", "6.1"]) == 0
        out = capsys.readouterr().out
        assert f"hint {number}/{len(hints)} for Lab 6.1" in out and hint in out
        assert all(other not in out for other in hints if other != hint)
        assert meta(folder)["hints"] == {"6.1": number}
    assert cli.main(["hint", "6.1"]) == 0
    out = capsys.readouterr().out
    assert hints[-1] in out and "last hint" in out
    assert cli.main(["hint", "6.2"]) == 0
    assert checkpoint.lab("6.2").hints[0] in capsys.readouterr().out
    assert meta(folder)["hints"] == {"6.1": len(hints), "6.2": 1}
    assert cli.main(["hint", "6.1", "--all"]) == 0
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
    assert "known labs: 6.1, 6.2, 6.3" in capsys.readouterr().err
    assert snapshot(folder) == before


# -- reset ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def starter_text(course: Course, checkpoint: Checkpoint) -> str:
    """The starter's teaching file."""
    return (course.root / checkpoint.starter / "pi_course" / "tool.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def solution_text(course: Course, checkpoint: Checkpoint) -> str:
    """The solution's teaching file."""
    return (course.root / checkpoint.solution / "pi_course" / "tool.py").read_text(encoding="utf-8")


def test_reset_restores_one_lab_and_backs_up_the_learner_version(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    starter_text: str,
    solution_text: str,
) -> None:
    """After `reset 6.2` on a solved file: are 6.2's bodies the starter's, 6.1/6.3 kept, and a backup saved?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    monkeypatch.chdir(folder)
    assert cli.main(["reset", "6.2"]) == 0
    out = capsys.readouterr().out
    backups = list((folder / ".pi-course" / "backups").iterdir())
    assert len(backups) == 1 and backups[0].name in out
    assert (backups[0] / "pi_course" / "tool.py").read_text(encoding="utf-8") == solution_text
    now = bodies((folder / "pi_course" / "tool.py").read_text(encoding="utf-8"))
    starter, solution = bodies(starter_text), bodies(solution_text)
    for name in now:
        if name.startswith("ToolRegistry."):
            assert now[name] == starter[name], name
        else:
            assert now[name] == solution[name], name
    # A second reset makes a second, separate backup.
    assert cli.main(["reset", "6.2"]) == 0
    assert len(list((folder / ".pi-course" / "backups").iterdir())) == 2


def test_reset_state_runs_red_on_the_reset_lab_only(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `reset 6.2` on the solution, is 6.1 still done, 6.2 not started and its red the next step?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    solve(course, checkpoint, folder)
    monkeypatch.chdir(folder)
    assert cli.main(["reset", "6.2"]) == 0
    done = run_cli(["check"], cwd=folder)
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line[:1].isdigit()}
    assert "done" in rows["6.1"]
    assert "not started" in rows["6.2"]
    assert "blocked by 6.2" in rows["6.3"]
    assert "next: Lab 6.2 (not started) — Lab 6.2 not implemented: ToolRegistry" in done.stdout
    assert "run:  python -m pytest -m lab6_2" in done.stdout


def test_resetting_every_lab_of_the_solution_gives_the_starter(starter_text: str, solution_text: str) -> None:
    """Reset lab by lab, does the solution's tool.py become exactly the starter's?"""
    text = solution_text
    for lab in ("6.1", "6.2", "6.3"):
        text, names = restore_labs(text, starter_text, {lab}, "tool.py")
        assert names
    assert text == starter_text


def test_reset_keeps_learner_comments_outside_the_lab_and_handles_one_liners(starter_text: str) -> None:
    """Are a one-line def, a comment inside the body and a different docstring all replaced, other code kept?"""
    learner = starter_text.replace(
        "    def get(self, name: str) -> Tool[Any, Any] | None:\n"
        '        """Return the very tool registered under this name, or None."""\n'
        '        raise LabNotImplemented("6.2", "ToolRegistry.get")\n',
        "    def get(self, name: str) -> Tool[Any, Any] | None: return self._tools.get(name)\n",
    ).replace(
        '        """Add a tool; refuse a name that is already taken."""\n'
        '        raise LabNotImplemented("6.2", "ToolRegistry.register")\n',
        "        # my plan: check then store\n        self._tools[tool.name] = tool\n        # trailing thought\n",
    )
    learner += "\n\n# my own helper, outside every lab\nMY_CONSTANT = 42\n"
    assert learner != starter_text
    restored, _ = restore_labs(learner, starter_text, {"6.2"}, "tool.py")
    assert restored == starter_text + "\n\n# my own helper, outside every lab\nMY_CONSTANT = 42\n"


def test_reset_refuses_a_file_that_does_not_parse(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With a syntax error in tool.py, does `reset 6.1` exit 2 naming the line, touching nothing; does --all work?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    tool = folder / "pi_course" / "tool.py"
    broken = tool.read_text(encoding="utf-8") + "\ndef oops(:\n"
    tool.write_text(broken, encoding="utf-8")
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    assert cli.main(["reset", "6.1"]) == 2
    err = capsys.readouterr().err
    assert "pi_course/tool.py:" in err and "reset --all" in err
    assert snapshot(folder) == before
    assert cli.main(["reset", "--all"]) == 0
    assert tool.read_bytes() == (course.root / checkpoint.starter / "pi_course" / "tool.py").read_bytes()
    (backup,) = (folder / ".pi-course" / "backups").iterdir()
    assert (backup / "pi_course" / "tool.py").read_text(encoding="utf-8") == broken


def test_reset_of_a_lab_without_stubs_is_refused(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Does resetting the optional transfer lab (new code, no stubs) exit 2 and leave files alone?"""
    folder = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    assert cli.main(["reset", "transfer6"]) == 2
    assert "no stubs" in capsys.readouterr().err
    assert cli.main(["reset"]) == 2
    assert snapshot(folder) == before


def test_restore_refuses_when_a_lab_function_was_deleted(starter_text: str) -> None:
    """If the learner deleted a lab's function, does restore raise KitError rather than guess?"""
    learner = starter_text.replace("def failed_result(", "def renamed_result(")
    with pytest.raises(KitError, match="failed_result"):
        restore_labs(learner, starter_text, {"6.3"}, "tool.py")


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
    assert "checkpoint 06" in out and "none yet" in out
    solve(course, checkpoint, folder)
    (folder / "pi_course" / "uppercase.py").write_text("# mine\n", encoding="utf-8")
    (folder / "LAB-GUIDE.md").unlink()
    (folder / "pi_course" / "__pycache__").mkdir(exist_ok=True)
    (folder / "pi_course" / "__pycache__" / "tool.cpython-311.pyc").write_bytes(b"cache")
    assert cli.main(["hint", "6.3"]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--no-run"]) == 0
    out = capsys.readouterr().out
    assert "modified pi_course/tool.py" in out
    assert "added    pi_course/uppercase.py" in out
    assert "deleted  LAB-GUIDE.md" in out
    assert "__pycache__" not in out
    assert "hints seen: Lab 6.3 1" in out


def test_status_runs_the_tests_and_shows_the_table(solved_status: str) -> None:
    """Does plain `status` also run the tests and show each lab's row?"""
    assert "modified pi_course/tool.py" in solved_status
    assert any(line.startswith("6.3 ") and "done" in line for line in solved_status.splitlines())


@pytest.fixture(scope="module")
def solved_status(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of `pi-course status` in a solved folder."""
    folder = make_folder(course, checkpoint, tmp_path_factory.mktemp("status") / "p")
    solve(course, checkpoint, folder)
    done = run_cli(["status"], cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
