"""Focused tests of checkpoint 01: four demo events as a tagged union, and one runtime boundary.

Lab 1.1 formats every variant and lets the type checker prove that none is forgotten (the course's
`never` check, here `typing.assert_never` checked by mypy). Lab 1.2 lets outside data in only after
checking it. On the starter each test stops on the LabNotImplemented of its own lab.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pi_course import (
    DemoAborted,
    DemoDelta,
    DemoEvent,
    DemoFinished,
    DemoStarted,
    format_event,
    read_delta,
)

INVALID = "invalid delta event"
CHAPTER_DELTA = {"type": "delta", "requestId": "r1", "text": "Pi"}
#: How long the type checker may take on a busy machine (the per-test limit is for the learner's code).
MYPY_SECONDS = 90


def chapter_events() -> list[DemoEvent]:
    """The chapter's four events, in its order."""
    return [
        DemoStarted(request_id="r1"),
        DemoDelta(request_id="r1", text="Pi"),
        DemoFinished(request_id="r1", reason="stop"),
        DemoAborted(request_id="r2"),
    ]


def refusal(value: object) -> str:
    """The message of the ValueError that read_delta raises for `value`."""
    with pytest.raises(ValueError) as caught:
        read_delta(value)
    return str(caught.value)


# -- the type checker, run on a copy of the learner's package -----------------------------------

#: The variant the probe adds to DemoEvent, as the chapter's diagnostic adds `paused`.
PROBE_VARIANT = """import typing as _probe_typing


class DemoPaused:
    type: _probe_typing.Literal["paused"]
    request_id: str


"""


@dataclass(frozen=True)
class MypyReport:
    """What mypy said about events.py, and about a copy of it with one variant more (events_probe.py)."""

    own: list[str]
    probe: list[tuple[int, str]]
    format_lines: range
    output: str


def events_source() -> Path:
    """The learner's pi_course/survival/events.py."""
    spec = importlib.util.find_spec("pi_course.survival.events")
    assert spec is not None and spec.origin, "pi_course.survival.events cannot be found"
    return Path(spec.origin)


def union_definition(tree: ast.Module) -> tuple[ast.stmt, ast.expr]:
    """The statement that defines the DemoEvent union, and its value."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "DemoEvent" for target in node.targets
        ):
            return node, node.value
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "DemoEvent"
            and node.value is not None
        ):
            return node, node.value
    raise AssertionError("events.py must define the union as `DemoEvent = ... | ...`")


def with_extra_variant(source: str) -> str:
    """`source` with a DemoPaused class added to the DemoEvent union (and to nothing else)."""
    statement, value = union_definition(ast.parse(source))
    lines = source.splitlines(keepends=True)
    end = value.end_lineno or value.lineno
    row = lines[end - 1]
    lines[end - 1] = row[: value.end_col_offset] + " | DemoPaused" + row[value.end_col_offset :]
    lines.insert(statement.lineno - 1, PROBE_VARIANT)
    return "".join(lines)


def function_lines(source: str, name: str) -> range:
    """The lines of a top-level function of `source`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    raise AssertionError(f"events.py has no function {name}")


_mypy_runs: dict[str, MypyReport] = {}


def mypy_cache_options() -> list[str]:
    """Where mypy may keep its cache, so that the standard library is analysed once, not on every run.

    The kit's own runs (check, verify, notebooks) name a cache in PI_COURSE_MYPY_CACHE; a practice
    folder keeps one in its .pi-course/. Anywhere else (a graded copy) every run starts cold and
    writes nothing: a cache left there could speak for the next learner's code.
    """
    named = os.environ.get("PI_COURSE_MYPY_CACHE", "")
    state = Path(__file__).resolve().parents[1] / ".pi-course"
    for folder in ([Path(named)] if named else []) + ([state / "mypy-cache"] if state.is_dir() else []):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return [f"--cache-dir={folder}"]
    return ["--no-incremental", f"--cache-dir={os.devnull}"]


def _imported(path: Path, package: Path) -> set[Path]:
    """The files of `package` that the module at `path` imports, relatively or by the package's name."""
    here = path.relative_to(package).with_suffix("").parts[:-1]  # the module's own package
    wanted: list[tuple[str, ...]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == package.name
        ):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = tuple(node.module.split(".")) if node.module else ()
            else:
                base, module = (), tuple((node.module or "").split(".")[1:])
            wanted += [base + module, *(base + module + (alias.name,) for alias in node.names)]
        elif isinstance(node, ast.Import):
            wanted += [
                tuple(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == package.name
            ]
    found = set()
    for parts in wanted:
        for candidate in (
            package.joinpath(*parts, "__init__.py"),
            package.joinpath(*parts[:-1], f"{parts[-1]}.py") if parts else None,
        ):
            if candidate is not None and candidate.is_file():
                found.add(candidate)
    return found


def checked_files() -> dict[str, Path]:
    """events.py and every file of the package it imports, followed through theirs: what mypy must read
    to check events.py (path inside the package -> file).

    Only these are copied for mypy, not the whole package: no other file can change what mypy says about
    events.py, and a check that reads only them depends only on them (a whole copy made every file of
    a late checkpoint an input of this lab's test).
    """
    package = events_source().parents[1]
    todo, seen = [events_source()], set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += sorted(_imported(path, package))
    return {path.relative_to(package).as_posix(): path for path in sorted(seen)}


def mypy_report() -> MypyReport:
    """Run mypy once per version of the files it reads, on a copy holding them and the probe."""
    files = checked_files()
    package_name = events_source().parents[1].name
    digest = hashlib.sha256()
    for relative, path in files.items():
        digest.update(relative.encode() + b"\0" + path.read_bytes())
    key = digest.hexdigest()
    if key in _mypy_runs:
        return _mypy_runs[key]
    assert importlib.util.find_spec("mypy") is not None, "mypy is not installed; `pip install mypy`"
    with tempfile.TemporaryDirectory(prefix="pi-course-mypy-") as tmp:
        copy = Path(tmp) / package_name
        for relative, path in files.items():
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy / relative)
        for folder in (copy, *(f for f in copy.rglob("*") if f.is_dir())):
            (folder / "__init__.py").touch()  # a package it does not import is an empty one to mypy
        probe_source = with_extra_variant((copy / "survival" / "events.py").read_text(encoding="utf-8"))
        (copy / "survival" / "events_probe.py").write_text(probe_source, encoding="utf-8")
        # MYPYPATH would add folders to the check; the interpreter's own path (PYTHONPATH included) stays.
        env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file=",
                *mypy_cache_options(),
                "--no-error-summary",
                "--hide-error-context",
                "--no-color-output",
                "--no-pretty",
                f"{package_name}/survival/events.py",
                f"{package_name}/survival/events_probe.py",
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=MYPY_SECONDS,
        )
    output = done.stdout + done.stderr
    line = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: (?P<message>.*)$", re.MULTILINE)
    errors = [(m["file"].replace("\\", "/"), int(m["line"]), m["message"]) for m in line.finditer(output)]
    if done.returncode not in (0, 1) or (done.returncode == 1 and not errors):
        last = " | ".join(output.strip().splitlines()[-3:])  # the report shows one line: keep the end
        raise AssertionError(f"mypy did not run (exit {done.returncode}): {last}")
    report = MypyReport(
        own=[f"events.py:{n}: {msg}" for file, n, msg in errors if file.endswith("/events.py")],
        probe=[(n, msg) for file, n, msg in errors if file.endswith("/events_probe.py")],
        format_lines=function_lines(probe_source, "format_event"),
        output=output.strip(),
    )
    _mypy_runs[key] = report
    return report


# -- Lab 1.1 · format_event -------------------------------------------------------------------


@pytest.mark.lab1_1
def test_the_finished_states_cover_every_event() -> None:
    """四种事件交给 format_event，是否按原顺序得到
    `start r1`、`delta r1 Pi`、`finish r1 stop`、`abort r2`？"""
    assert [format_event(event) for event in chapter_events()] == [
        "start r1",
        "delta r1 Pi",
        "finish r1 stop",
        "abort r2",
    ]


@pytest.mark.lab1_1
def test_a_finished_event_names_its_reason() -> None:
    """reason 为 `length` 的 finished 事件，是否格式化为 `finish r1 length`？"""
    assert format_event(DemoFinished(request_id="r1", reason="length")) == "finish r1 length"


@pytest.mark.lab1_1
def test_each_variant_reads_only_its_own_fields() -> None:
    """任意 request_id 与 text：每种事件是否只用自己的字段，原样写进 `<动作> <id>[ <数据>]`？"""
    assert format_event(DemoDelta("r 1", "a b")) == "delta r 1 a b"
    from hypothesis import given  # imported here, so that a run of Lab 1.2 alone never loads hypothesis
    from strategies import short_text

    @given(request_id=short_text, text=short_text)
    def check(request_id: str, text: str) -> None:
        assert format_event(DemoStarted(request_id)) == f"start {request_id}"
        assert format_event(DemoDelta(request_id, text)) == f"delta {request_id} {text}"
        assert format_event(DemoFinished(request_id, "stop")) == f"finish {request_id} stop"
        assert format_event(DemoAborted(request_id)) == f"abort {request_id}"

    check()


@pytest.mark.lab1_1
def test_each_variant_carries_its_own_tag() -> None:
    """每种事件的 `type` 是否默认就是课程的标签，格式化时按这个标签选分支？"""
    events = chapter_events()
    assert [event.type for event in events] == ["started", "delta", "finished", "aborted"]
    assert [format_event(event).split()[0] for event in events] == ["start", "delta", "finish", "abort"]


@pytest.mark.lab1_1
def test_an_event_outside_the_union_is_refused_at_run_time() -> None:
    """一个不属于 DemoEvent 的事件（比如 paused）是否被 assert_never 拒绝（AssertionError），而不是悄悄得到一
    行文字？"""

    @dataclass
    class Paused:
        request_id: str
        type: str = "paused"

    assert format_event(DemoAborted("r2")) == "abort r2"
    with pytest.raises(AssertionError):
        format_event(Paused("r3"))  # type: ignore[arg-type]


@pytest.mark.lab1_1
@pytest.mark.timeout(MYPY_SECONDS + 30)
def test_mypy_finds_nothing_wrong_in_events_py() -> None:
    """mypy 检查你的 pi_course/survival/events.py，是否一个错误也没有（相当于课程里 tsc 的 build 通过）？"""
    assert format_event(DemoStarted("r1")) == "start r1"
    report = mypy_report()
    assert report.own == [], "mypy reports:\n" + "\n".join(report.own)


@pytest.mark.lab1_1
@pytest.mark.timeout(MYPY_SECONDS + 30)
def test_mypy_reports_a_forgotten_variant_inside_format_event() -> None:
    """给 DemoEvent 加一个 format_event 没处理的 paused 成员后，mypy 是否在 format_event 里报出它
    （assert_never 那一行）？"""
    assert format_event(DemoAborted("r2")) == "abort r2"
    report = mypy_report()
    inside = [msg for line, msg in report.probe if line in report.format_lines and "DemoPaused" in msg]
    assert inside, (
        "after adding a DemoPaused variant to DemoEvent, mypy reported nothing about it inside format_event; "
        "end format_event with `assert_never(event)` once every variant is handled. mypy said:\n"
        + (report.output or "(nothing)")
    )


# -- Lab 1.2 · read_delta ---------------------------------------------------------------------


@pytest.mark.lab1_2
def test_unknown_input_must_cross_the_runtime_boundary() -> None:
    """合法的外部 delta 经过 read_delta 后是否格式化为 `delta r1 Pi`，而 text 为 42 的是否被拒绝（invalid
    delta event）？"""
    assert format_event(read_delta({"type": "delta", "requestId": "r1", "text": "Pi"})) == "delta r1 Pi"
    with pytest.raises(ValueError, match=INVALID):
        read_delta({"type": "delta", "requestId": "r1", "text": 42})


@pytest.mark.lab1_2
def test_read_delta_builds_a_new_delta_from_the_checked_fields_only() -> None:
    """read_delta 是否返回一个新的 DemoDelta：只带 requestId 与 text，多余的键留在外面，输入本身不被改动？"""
    raw: dict[str, Any] = {**CHAPTER_DELTA, "extra": "stay outside", "reason": "stop"}
    before = dict(raw)
    event = read_delta(raw)
    assert event == DemoDelta(request_id="r1", text="Pi")
    assert type(event) is DemoDelta
    assert event.to_dict() == CHAPTER_DELTA
    assert list(event.to_dict()) == ["type", "requestId", "text"]
    assert raw == before


@pytest.mark.lab1_2
def test_the_refusal_message_is_exactly_the_courses() -> None:
    """被拒绝时，异常是否是 ValueError，消息一字不差地是 `invalid delta event`？"""
    assert refusal({"type": "delta", "requestId": "r1", "text": 42}) == INVALID


@pytest.mark.lab1_2
@pytest.mark.parametrize(
    "value",
    [None, "delta", 42, True, ["delta", "r1", "Pi"], [CHAPTER_DELTA], ("delta",), DemoDelta("r1", "Pi")],
    ids=["none", "string", "number", "bool", "list", "list-of-delta", "tuple", "a-delta-object"],
)
def test_anything_but_a_dict_is_refused(value: object) -> None:
    """None、字符串、数字、列表、元组，甚至一个 DemoDelta 对象：不是 dict 的外部值是否都被拒绝？"""
    assert refusal(value) == INVALID


@pytest.mark.lab1_2
@pytest.mark.parametrize("tag", ["started", "Delta", "delta ", "", None, 1], ids=repr)
def test_the_type_tag_must_be_delta(tag: object) -> None:
    """type 不是字符串 `delta`（别的事件、大小写不同、带空格、空、None、数字）时，是否都被拒绝？"""
    assert refusal({"type": tag, "requestId": "r1", "text": "Pi"}) == INVALID
    assert refusal({"requestId": "r1", "text": "Pi"}) == INVALID


@pytest.mark.lab1_2
@pytest.mark.parametrize("bad", [None, 1, 1.5, b"r1", ["r1"], {"id": "r1"}], ids=repr)
def test_request_id_and_text_must_both_be_strings(bad: object) -> None:
    """requestId 或 text 缺失、为 None、数字、bytes、列表或 dict 时，是否都被拒绝？"""
    assert refusal({"type": "delta", "requestId": bad, "text": "Pi"}) == INVALID
    assert refusal({"type": "delta", "requestId": "r1", "text": bad}) == INVALID
    assert refusal({"type": "delta", "text": "Pi"}) == INVALID
    assert refusal({"type": "delta", "requestId": "r1"}) == INVALID


@pytest.mark.lab1_2
def test_any_well_formed_delta_crosses_with_exactly_its_two_fields() -> None:
    """任意字符串 requestId 与 text，外加任意多余的键：read_delta 是否正好得到 DemoDelta(request_id,
    text)？"""
    assert read_delta({**CHAPTER_DELTA, "requestId": ""}) == DemoDelta(request_id="", text="Pi")
    from hypothesis import given
    from hypothesis import strategies as st
    from strategies import json_values, short_text

    @given(request_id=short_text, text=short_text, extra=st.dictionaries(short_text, json_values, max_size=3))
    def check(request_id: str, text: str, extra: dict[str, Any]) -> None:
        raw = {**extra, "type": "delta", "requestId": request_id, "text": text}
        assert read_delta(raw) == DemoDelta(request_id=request_id, text=text)

    check()


@pytest.mark.lab1_2
def test_a_text_that_is_not_a_string_never_crosses() -> None:
    """text 是任意非字符串的 JSON 值，或整个输入根本不是对象时，read_delta 是否总是拒绝？"""
    assert refusal({"type": "delta", "requestId": "r1", "text": ["Pi"]}) == INVALID
    from hypothesis import given
    from strategies import json_values, not_objects

    @given(text=json_values.filter(lambda value: not isinstance(value, str)), other=not_objects)
    def check(text: object, other: object) -> None:
        assert refusal({"type": "delta", "requestId": "r1", "text": text}) == INVALID
        assert refusal(other) == INVALID

    check()
