"""Checkpoint notebooks: valid, runnable on solution, starter and a practice folder, stored outputs fresh."""

from __future__ import annotations

import copy
import json
import re
import sys
import types
from pathlib import Path

import notebook_runs
import pytest
from nbformat import NotebookNode
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.staging import stage_tree
from pi_course_kit.notebook import helpers as nbhelp
from pi_course_kit.notebook import nbrun
from pi_course_kit.teaching import adapters

#: What `python -m pytest -m lab6_1 -x` in a fresh 06 starter stops on (its first test needs object_schema).
FIRST_RED_06 = "Lab 6.1 not implemented: object_schema"


# Chapter 06's notebook, deliberately: these tests are about what a learner of a real chapter sees in it.
@pytest.fixture(scope="session")
def course(real_course: Course) -> Course:
    """The real course."""
    return real_course


@pytest.fixture(scope="session")
def checkpoint(real_course: Course) -> Checkpoint:
    """Checkpoint 06, whose notebook these tests read and run."""
    return real_course.checkpoint("06")


@pytest.fixture(scope="session")
def notebook_path(course: Course, checkpoint: Checkpoint) -> Path:
    """The checkpoint's notebook in the repository."""
    return course.root / checkpoint.notebook


@pytest.fixture(scope="session")
def stored(notebook_path: Path) -> NotebookNode:
    """The notebook as committed, with the outputs of a solution run."""
    return nbrun.load(notebook_path)


@pytest.fixture(scope="session")
def repo_executed(checkpoint: Checkpoint) -> NotebookNode:
    """The notebook run as a reader of the repository runs it: kernel in notebooks/, no override."""
    return notebook_runs.repo_run(checkpoint.id)


@pytest.fixture(scope="session")
def practice_executed(checkpoint: Checkpoint) -> tuple[Path, NotebookNode]:
    """A fresh practice folder made by `pi-course practice`, its notebook run from that folder's cwd."""
    return notebook_runs.practice_run(checkpoint.id)


def write_small_notebook(path: Path, *cells: tuple[str, bool]) -> None:
    """Write an nbformat 4.5 notebook of code cells given as (source, tagged raises-exception)."""
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{number}",
                "metadata": {"tags": ["raises-exception"]} if tagged else {},
                "source": source,
                "outputs": [],
                "execution_count": None,
            }
            for number, (source, tagged) in enumerate(cells, start=1)
        ],
    }
    path.write_text(json.dumps(nb), encoding="utf-8")


def code_cells(nb: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def stream_text(cell: NotebookNode) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")


# ----------------------------------------------------------------------------- structure, no kernel


def test_the_notebook_walks_the_chapter_in_order(stored: NotebookNode) -> None:
    """Do the sections come in the chapter's order, from the echo call to the comparison with upstream?"""
    text = "\n".join(cell.source for cell in stored.cells)
    landmarks = [
        "echo_call = ToolCall(",
        "make_echo_schema().json_schema",
        "def make_request_schema",
        'check("6.1")',
        "ValidatorLike(Protocol",
        "show(make_tools().definitions())",
        "provider_tools(",
        'check("6.2")',
        "AbortController()",
        "explode",
        "trace_call(",
        'check("6.3")',
        "execute_parse_last",
        "uppercase",
        "TypeBox",
    ]
    positions = [text.find(mark) for mark in landmarks]
    assert -1 not in positions, [m for m, p in zip(landmarks, positions, strict=True) if p == -1]
    assert positions == sorted(positions)


# ----------------------------------------------------------------------------- executed notebooks


@pytest.mark.slow
def test_solution_run_shows_each_trace_stopping_where_the_chapter_says(repo_executed: NotebookNode) -> None:
    """Does the side-by-side trace cell show parse, lookup and execute as the stops of the three failures?"""
    cell = next(c for c in code_cells(repo_executed) if "side_by_side(" in c.source and "explode" in c.source)
    plain = "".join(out.data["text/plain"] for out in cell.outputs if "data" in out)
    assert "成功: lookup ✓ → parse ✓ → execute ✓ → result ✓（执行 1 次，配对 call-1/echo）" in plain
    assert "参数类型错: lookup ✓ → parse ✗ → execute · → result ✓（执行 0 次" in plain
    assert (
        "工具名不存在: lookup ✗ → parse · → execute · → result ✓（执行 0 次，配对 call-1/missing）" in plain
    )
    assert "工具抛异常: lookup ✓ → parse ✓ → execute ✗" in plain
    html = "".join(out.data["text/html"] for out in cell.outputs if "data" in out)
    assert html.count("pi-trace-stage pi-trace-stopped") == 3


@pytest.mark.slow
def test_practice_folder_runs_its_own_code(
    checkpoint: Checkpoint, practice_executed: tuple[Path, NotebookNode]
) -> None:
    """From a fresh practice folder, does the notebook import that folder's pi_course and show its lab
    errors?"""
    folder, executed = practice_executed
    cells = code_cells(executed)
    assert f"练习目录：{folder.name}" in stream_text(cells[0])
    strict = nbrun.cell_errors(executed)
    assert strict, "the starter's unfinished labs should show up as errors"
    assert all("LabNotImplemented: Lab 6." in line for line in strict)
    assert strict[0].endswith(FIRST_RED_06)
    assert nbrun.cell_errors(executed, allow_lab_errors=True) == []


@pytest.mark.slow
def test_practice_check_cell_reports_the_lab_as_not_started(
    practice_executed: tuple[Path, NotebookNode],
) -> None:
    """Does `check("6.1")` in a fresh practice folder render the per-lab table with 6.1 not started?"""
    _, executed = practice_executed
    cell = next(c for c in code_cells(executed) if 'check("6.1")' in c.source)
    plain = "".join(out.data["text/plain"] for out in cell.outputs if "data" in out)
    html = "".join(out.data["text/html"] for out in cell.outputs if "data" in out)
    assert "Lab 6.1：0/" in plain and "未开始" in plain
    assert "<table" in html and "Lab 6.1 not implemented" in html
    # Many tests fail on the same stub: each message is shown once, with its count.
    shown = re.findall(r"<code[^>]*>(Lab 6\.1 not implemented: \w+)</code>", html)
    assert shown and len(shown) == len(set(shown))


@pytest.mark.slow
def test_notebook_errors_names_each_offending_cell(
    tmp_path: Path, course: Course, checkpoint: Checkpoint
) -> None:
    """Does notebook_errors give one line per bad cell: a plain error, and a lab error in an untagged cell?"""
    path = tmp_path / "small.ipynb"
    write_small_notebook(
        path,
        ("# Step 1 · tagged\nfrom pi_course import object_schema\nobject_schema({})", True),
        ("# Step 2 · untagged\nobject_schema({})", False),
        ("# Step 3 · typo\nundefined_name", False),
    )
    lines = nbrun.notebook_errors(
        path, course.root / checkpoint.starter, package=course.package, allow_lab_errors=True
    )
    assert len(lines) == 2
    assert lines[0].startswith("small.ipynb cell 2 (# Step 2 · untagged): LabNotImplemented")
    assert "raises-exception" in lines[0]
    assert lines[1] == "small.ipynb cell 3 (# Step 3 · typo): NameError: name 'undefined_name' is not defined"
    strict = nbrun.notebook_errors(path, course.root / checkpoint.starter, package=course.package)
    assert len(strict) == 3


# ----------------------------------------------------------------------------- nbrun without a kernel


def test_stale_outputs_are_reported_with_the_refresh_command(stored: NotebookNode) -> None:
    """When one stored output differs, is exactly that cell reported, with the command that refreshes it?"""
    fresh = copy.deepcopy(stored)
    cell = next(c for c in code_cells(fresh) if c.outputs and c.outputs[0].output_type == "stream")
    cell.outputs[0].text = cell.outputs[0].text + "changed\n"
    lines = nbrun.stale_cells(stored, fresh, path="notebooks/x.ipynb")
    assert len(lines) == 1
    assert cell.source.splitlines()[0] in lines[0]
    assert "pi-course nbrun --refresh notebooks/x.ipynb" in lines[0]
    # The line says what changed: nothing was stored where the fresh run printed `changed`.
    assert "stored '(nothing)', now 'changed'" in lines[0]


def test_execution_counts_and_volatile_text_do_not_count_as_stale(stored: NotebookNode) -> None:
    """Do execution counts, memory addresses, temp paths, epoch ms and durations leave a notebook fresh?"""
    fresh = copy.deepcopy(stored)
    stored_copy = copy.deepcopy(stored)
    for one, other in zip(code_cells(fresh), code_cells(stored_copy), strict=True):
        one.execution_count = 99
        noise = [
            "at 0x7f3a2b1c9d10 /tmp/pi-course-abc/tree 1764700000123 in 0.52s\n",
            "at 0x55aa11bb22cc /tmp/xyz 1764700009999 in 3s\n",
        ]
        one.outputs.append({"output_type": "stream", "name": "stdout", "text": noise[0]})
        other.outputs.append({"output_type": "stream", "name": "stdout", "text": noise[1]})
    assert nbrun.stale_cells(stored_copy, fresh) == []


def test_nbrun_command_refuses_bad_input_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Does the nbrun command answer a missing notebook or a missing --tree with one line and exit code 2?"""
    assert cli.main(["nbrun", "--check-fresh", str(tmp_path / "missing.ipynb")]) == 2
    assert capsys.readouterr().err.strip().startswith("pi-course nbrun: error: notebook not found")
    real = tmp_path / "real.ipynb"
    write_small_notebook(real, ("# Step 1 · nothing\npass", False))
    assert cli.main(["nbrun", "--errors", str(real)]) == 2
    assert "--tree" in capsys.readouterr().err


def test_notebook_errors_refuses_a_folder_without_pi_course(tmp_path: Path, notebook_path: Path) -> None:
    """Given a tree without pi_course, does notebook_errors say so in one line instead of starting a
    kernel?"""
    lines = nbrun.notebook_errors(notebook_path, tmp_path, package="pi_course")
    assert lines == [f"{tmp_path}: no pi_course/__init__.py; pass a tree holding the pi_course package"]


# ----------------------------------------------------------------------------- notebook helpers


def test_find_tree_from_notebooks_folder_picks_the_solution(
    course: Course, checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started in the repository's notebooks/ folder, does the notebook choose the solution tree?"""
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    tree = nbhelp.find_tree(course.root / "notebooks", checkpoint.id)
    assert tree.path == (course.root / checkpoint.solution).resolve()
    assert tree.kind == "solution" and tree.shown.startswith("../solutions/06-tool-contract")
    # The engine never guesses a checkpoint: a notebook in the repository has to name its own.
    with pytest.raises(KitError, match=r"name the checkpoint: use_tree"):
        nbhelp.find_tree(course.root / "notebooks")


def test_find_tree_prefers_the_override_then_a_practice_folder(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Is PI_COURSE_TREE used first, a cwd holding pi_course next, and a bad override refused clearly?"""
    practice = stage_tree(course, checkpoint, course.root / checkpoint.starter, tmp_path / "practice")
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    assert nbhelp.find_tree(practice, checkpoint.id).kind == "practice"
    monkeypatch.setenv(nbhelp.TREE_ENV, str(course.root / checkpoint.solution))
    assert nbhelp.find_tree(practice, checkpoint.id).path == (course.root / checkpoint.solution).resolve()
    monkeypatch.setenv(nbhelp.TREE_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(KitError, match=r"PI_COURSE_TREE=.*has no pi_course/__init__\.py"):
        nbhelp.find_tree(practice)
    monkeypatch.delenv(nbhelp.TREE_ENV)
    with pytest.raises(KitError, match="no pi_course tree found"):
        nbhelp.find_tree(tmp_path)


def test_use_tree_puts_the_tree_first_and_refuses_another_imported_pi_course(
    course: Course,
    checkpoint: Checkpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Is the tree first on sys.path exactly once, and is a pi_course from elsewhere refused with a clear
    error?"""
    monkeypatch.delenv(nbhelp.TREE_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    practice = stage_tree(course, checkpoint, course.root / checkpoint.starter, tmp_path / "practice")
    assert nbhelp.use_tree(checkpoint.id, cwd=practice) == practice.resolve()
    nbhelp.use_tree(checkpoint.id, cwd=practice)
    assert sys.path[0] == str(practice.resolve()) and sys.path.count(str(practice.resolve())) == 1
    assert "(practice folder: practice)" in capsys.readouterr().out  # the kit tests run in English
    # A stand-in module object: the kit process itself never imports the real pi_course.
    other = types.ModuleType("pi_course")
    other.__file__ = str(course.root / checkpoint.solution / "pi_course" / "__init__.py")
    monkeypatch.setitem(sys.modules, "pi_course", other)
    with pytest.raises(KitError, match=r"a different pi_course is already imported .*restart the kernel"):
        nbhelp.use_tree(checkpoint.id, cwd=practice)


def test_show_hides_the_timestamp_and_never_prints_an_address(capsys: pytest.CaptureFixture[str]) -> None:
    """Does show() print a result with `<int ms>` for the timestamp and a type name for opaque objects?"""
    nbhelp.show({"toolCallId": "call-1", "timestamp": 1764700000123, "details": object()})
    out = capsys.readouterr().out
    assert '"timestamp": "<int ms>"' in out and '"details": "<object>"' in out and "0x" not in out


# ----------------------------------------------------------------------------- provider adapters

ECHO = {
    "name": "echo",
    "description": "Echo one value",
    "parameters": {
        "type": "object",
        "properties": {"value": {"type": "string"}},
        "required": ["value"],
        "additionalProperties": False,
    },
}


def test_adapters_give_the_openai_and_anthropic_tool_formats() -> None:
    """Does one definition become an OpenAI function tool and an Anthropic tool with the same schema copy?"""
    openai, anthropic = adapters.to_openai(ECHO), adapters.to_anthropic(ECHO)
    assert openai == {"type": "function", "function": ECHO}
    assert anthropic == {"name": "echo", "description": "Echo one value", "input_schema": ECHO["parameters"]}
    assert openai["function"]["parameters"] is not ECHO["parameters"]
    assert anthropic["input_schema"] is not ECHO["parameters"]


def test_meta_schema_check_accepts_echo_and_names_what_is_wrong_otherwise() -> None:
    """Does the 2020-12 meta-schema check pass echo, and name the path of an invalid type and a non-object
    top?"""
    view = adapters.provider_tools([ECHO])
    assert view.valid and view.verdicts() == ["✓ echo：符合 JSON Schema 2020-12"]
    bad = {"type": "object", "properties": {"value": {"type": "text"}}}
    assert adapters.schema_problems(bad)[0].startswith(
        "不是合法的 JSON Schema 2020-12（位置 properties/value/type）"
    )
    assert adapters.schema_problems({"type": "string"}) == [
        '工具参数的顶层必须是 "type": "object"，现在是 \'string\''
    ]
    broken = adapters.provider_tools([{**ECHO, "parameters": bad}])
    assert not broken.valid and "✗ echo" in str(broken) and "#cf222e" in broken._repr_html_()


def test_adapters_refuse_something_that_is_not_a_definition() -> None:
    """Is a value without name/description/parameters refused with a message naming what is needed?"""
    with pytest.raises(TypeError, match="need str name, str description and dict parameters"):
        adapters.to_openai({"name": "echo"})
