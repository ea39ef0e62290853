"""The call tracer: it records each stage through the executor it is given, and never changes the objects."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.staging import stage_tree
from pi_course_kit.teaching.trace import CallTrace, outcome_table, side_by_side, trace_call


# The tracer teaches chapter 06's executor: its tests run real 06 trees on purpose (not the fixture course).
@pytest.fixture(scope="session")
def course(real_course: Course) -> Course:
    """The real course: the tracer is a chapter-06 teaching helper."""
    return real_course


@pytest.fixture(scope="session")
def checkpoint(real_course: Course) -> Checkpoint:
    """Checkpoint 06, whose executor the tracer draws."""
    return real_course.checkpoint("06")


# ----------------------------------------------------------------------------- duck-typed stand-ins
# These mimic pi_course's shapes so that the tracer can be tested in the kit process, which must never
# import pi_course itself.


class FakeLabNotImplemented(NotImplementedError):
    """Same name and message shape as pi_course.LabNotImplemented."""

    def __init__(self, lab: str, target: str) -> None:
        super().__init__(f"Lab {lab} not implemented: {target}")


FakeLabNotImplemented.__name__ = "LabNotImplemented"


@dataclass
class Call:
    id: str
    name: str
    arguments: object


@dataclass
class Context:
    call_id: str
    signal: object = None
    report_progress: object = None


@dataclass
class Output:
    content: list[dict[str, str]]
    details: object = None
    is_error: bool | None = None


@dataclass
class Result:
    call_id: str
    name: str
    content: list[dict[str, str]]
    details: object
    is_error: bool
    timestamp: int = 1_700_000_000_000

    def to_dict(self) -> dict[str, object]:
        return {
            "role": "toolResult",
            "toolCallId": self.call_id,
            "toolName": self.name,
            "content": self.content,
            "details": self.details,
            "isError": self.is_error,
            "timestamp": self.timestamp,
        }


class ValueSchema:
    json_schema: ClassVar[dict[str, str]] = {"type": "object"}

    def parse(self, value: object) -> dict[str, str]:
        if not isinstance(value, dict) or not isinstance(value.get("value"), str):
            raise ValueError("必须是 string")
        return {"value": value["value"]}


@dataclass
class FakeTool:
    name: str
    schema: ValueSchema
    execute: Callable[[Any, Any], Awaitable[Output]]
    description: str = "Echo one value"
    runs: list[object] = field(default_factory=list)


def make_echo(fail: bool = False) -> FakeTool:
    tool: FakeTool

    async def execute(params: Any, context: Any) -> Output:
        tool.runs.append(params)
        if fail:
            raise Exception("exploded")
        return Output([{"type": "text", "text": str(params["value"])}], {"source": "echo"})

    tool = FakeTool("echo", ValueSchema(), execute)
    return tool


class Registry:
    def __init__(self, *tools: FakeTool) -> None:
        self.tools = {tool.name: tool for tool in tools}

    def get(self, name: str) -> FakeTool | None:
        return self.tools.get(name)


def failed(call: Any, message: str) -> Result:
    return Result(
        call.id,
        call.name,
        [{"type": "text", "text": f"Tool {call.name} failed: {message}"}],
        {"error": message},
        True,
    )


async def right_executor(
    call: Any, registry: Any, *, signal: object = None, report_progress: object = None
) -> Result:
    tool = registry.get(call.name)
    if tool is None:
        return failed(call, "未知工具")
    try:
        params = tool.schema.parse(call.arguments)
        output = await tool.execute(params, Context(call.id, signal, report_progress))
    except Exception as error:
        return failed(call, str(error))
    return Result(call.id, call.name, output.content, output.details, bool(output.is_error))


async def parse_last_executor(
    call: Any, registry: Any, *, signal: object = None, report_progress: object = None
) -> Result:
    tool = registry.get(call.name)
    try:
        output = await tool.execute(call.arguments, Context(call.id, signal, report_progress))
        tool.schema.parse(call.arguments)
    except Exception as error:
        return failed(call, str(error))
    return Result(call.id, call.name, output.content, output.details, bool(output.is_error))


async def starter_executor(call: Any, registry: Any, **_: object) -> Result:
    raise FakeLabNotImplemented("6.3", "execute_tool_call")


def run(call: Call, registry: Registry, executor: Any = right_executor, **kwargs: Any) -> CallTrace:
    return asyncio.run(trace_call(call, registry, executor=executor, **kwargs))


ECHO_CALL = Call("call-1", "echo", {"value": "Pi", "ignored": "drop me"})


def statuses(trace: CallTrace) -> list[tuple[str, str]]:
    return [(row.stage, row.status) for row in trace.rows()]


# ----------------------------------------------------------------------------- in-process, fakes only


def test_success_records_every_stage_in_order_with_inputs_and_outputs() -> None:
    """Does a successful call show lookup, parse, execute and a paired result, each with what went in and
    out?"""
    trace = run(ECHO_CALL, Registry(make_echo()))
    assert statuses(trace) == [("lookup", "ok"), ("parse", "ok"), ("execute", "ok"), ("result", "returned")]
    rows = {row.stage: row.to_dict() for row in trace.rows()}
    assert rows["parse"]["input"] == {"value": "Pi", "ignored": "drop me"}
    assert rows["parse"]["output"] == {"value": "Pi"}
    assert rows["execute"]["input"] == {
        "parameters": {"value": "Pi"},
        "context": {"call_id": "call-1", "signal": None, "report_progress": None},
    }
    assert rows["result"]["output"]["timestamp"] == "<int ms>"
    assert trace.stopped_at is None and trace.paired and trace.execute_count == 1


def test_bad_arguments_stop_at_parse_and_execute_is_not_reached() -> None:
    """Is parse the red stage for `{"value": 1}`, with execute never reached and the count at 0?"""
    trace = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()))
    assert statuses(trace) == [
        ("lookup", "ok"),
        ("parse", "stopped"),
        ("execute", "not reached"),
        ("result", "returned"),
    ]
    assert trace.stopped_at == "parse" and trace.execute_count == 0 and trace.paired
    assert trace.rows()[1].error == "ValueError: 必须是 string"


def test_unknown_tool_stops_at_lookup_and_keeps_the_requested_name() -> None:
    """Does an unknown name stop at lookup, touch nothing else, and still pair with call-1/missing?"""
    trace = run(Call("call-1", "missing", {}), Registry(make_echo()))
    assert trace.stopped_at == "lookup"
    assert statuses(trace)[1:3] == [("parse", "not reached"), ("execute", "not reached")]
    assert trace.paired and trace.expected_pairing == ("call-1", "missing")


def test_a_tool_exception_stops_at_execute() -> None:
    """Does an exception inside execute mark execute red, after lookup and parse succeeded?"""
    trace = run(ECHO_CALL, Registry(make_echo(fail=True)))
    assert statuses(trace)[:3] == [("lookup", "ok"), ("parse", "ok"), ("execute", "stopped")]
    assert trace.rows()[2].error == "Exception: exploded" and trace.execute_count == 1


def test_an_executor_that_raises_is_shown_not_propagated() -> None:
    """On the starter the executor raises LabNotImplemented: does the trace show it (red) instead of
    raising?"""
    trace = run(ECHO_CALL, Registry(make_echo()), executor=starter_executor)
    assert trace.stopped_at == "executor" and not trace.paired
    last = trace.rows()[-1]
    assert (last.stage, last.status) == ("result", "raised")
    assert last.error == "LabNotImplemented: Lab 6.3 not implemented: execute_tool_call"
    assert "Lab 6.3 not implemented" in str(trace) and "Lab 6.3 not implemented" in trace._repr_html_()


def test_the_wrong_order_is_visible_in_the_rows_and_the_count() -> None:
    """With parse after execute, do the rows read lookup → execute → parse, with one execution for bad
    input?"""
    tool = make_echo()
    trace = run(Call("call-1", "echo", {"value": 1}), Registry(tool), executor=parse_last_executor)
    assert [stage for stage, _ in statuses(trace)] == ["lookup", "execute", "parse", "result"]
    assert trace.execute_count == 1 and tool.runs == [{"value": 1}]


def test_the_traced_objects_are_left_exactly_as_they_were() -> None:
    """After a trace, does the registry still hold the same tool, schema and execute function, arguments
    intact?"""
    tool = make_echo()
    registry = Registry(tool)
    schema, execute = tool.schema, tool.execute
    call = Call("call-1", "echo", {"value": "Pi", "ignored": "drop me"})
    run(call, registry)
    assert registry.get("echo") is tool and tool.schema is schema and tool.execute is execute
    assert call.arguments == {"value": "Pi", "ignored": "drop me"}


def test_the_context_check_reports_whether_the_same_signal_and_callback_arrived() -> None:
    """Does the execute stage say whether the tool got the very signal and callback the caller passed?"""
    signal, progress = object(), print
    trace = run(ECHO_CALL, Registry(make_echo()), signal=signal, report_progress=progress)
    context = trace.rows()[2].to_dict()["input"]["context"]
    assert context == {"call_id": "call-1", "signal": "同一个对象 ✓", "report_progress": "同一个对象 ✓"}


def test_html_marks_only_the_stopping_stage_red() -> None:
    """Does the HTML have exactly one red box, the stage where the call stopped, and grey boxes for the
    rest?"""
    trace = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()))
    page = trace._repr_html_()
    assert page.count("pi-trace-stage pi-trace-stopped") == 1
    assert page.count("pi-trace-not-reached") == 1
    assert page.index("<b>parse</b>") > page.index("<b>lookup</b>")
    red = page.split("pi-trace-stage pi-trace-stopped")[1].split("pi-trace-stage")[0]
    assert "<b>parse</b>" in red and "必须是 string" in red
    assert "call-1/echo 配对 ✓" in page


def test_text_form_marks_the_stop_and_side_by_side_gives_one_line_per_trace() -> None:
    """In a terminal, is the stopped stage flagged, and does a group print one summary line per trace?"""
    good = run(ECHO_CALL, Registry(make_echo()))
    bad = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()))
    assert "[parse] 停在这里  ← 停在这里" in str(bad) and "← 停在这里" not in str(good)
    group = side_by_side(good, bad)
    assert str(group).splitlines() == [good.summary(), bad.summary()]
    assert "parse ✗ → execute ·" in bad.summary()
    assert group._repr_html_().count("execute 运行次数") == 2


def test_parse_box_names_and_marks_the_dropped_key() -> None:
    """Does the parse stage say which undeclared key it dropped, marked in the HTML box?"""
    trace = run(ECHO_CALL, Registry(make_echo()))
    parse = next(row for row in trace.rows() if row.stage == "parse")
    assert parse.note == "丢弃了未声明的键：ignored"
    assert "✂ 丢弃了未声明的键：ignored" in trace._repr_html_()
    clean = run(Call("call-1", "echo", {"value": "Pi"}), Registry(make_echo()))
    assert "丢弃" not in clean._repr_html_()


def test_side_by_side_is_one_grid_with_stages_in_the_same_rows() -> None:
    """Is a group one CSS grid whose cells go row by row, so the N-th stage of each column shares a row?"""
    good = run(ECHO_CALL, Registry(make_echo()))
    bad = run(Call("call-1", "missing", {}), Registry(make_echo()))
    page = side_by_side(good, bad)._repr_html_()
    assert page.count("display:grid") == 1 and "repeat(2,minmax(200px,1fr))" in page
    stages = [chunk.split("</b>")[0] for chunk in page.split("pi-trace-stage ")[1:]]
    order = [part.split("<b>")[1] for part in stages]
    assert order == ["lookup", "lookup", "parse", "parse", "execute", "execute", "result", "result"]


def test_result_box_shows_text_pairing_and_flag_with_the_wire_json_collapsed() -> None:
    """Does the result box show content text, pairing and is_error, with the full JSON inside <details>?"""
    trace = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()))
    result = trace._repr_html_().split("pi-trace-stage pi-trace-returned")[1]
    assert "Tool echo failed: 必须是 string" in result and "call-1/echo 配对 ✓ · is_error=true" in result
    assert result.index("<details>") < result.index("&#34;toolCallId&#34;")


def test_every_rendering_carries_its_colour_legend() -> None:
    """Does a single trace and a group each include the legend that explains the colours?"""
    trace = run(ECHO_CALL, Registry(make_echo()))
    for page in (trace._repr_html_(), side_by_side(trace, trace)._repr_html_()):
        assert "调用停在这里" in page and "已回答，但 is_error=True" in page


def test_outcome_table_has_one_row_per_case() -> None:
    """Does the failure comparison give case, stopped-at stage, content text, is_error and count per trace?"""
    bad = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()), title="bad")
    unknown = run(Call("call-1", "missing", {}), Registry(make_echo()), title="unknown")
    view = outcome_table(bad, unknown)
    assert [list(row) for row in view.rows] == [
        ["bad", "parse", "Tool echo failed: 必须是 string", "true", 0],
        ["unknown", "lookup", "Tool missing failed: 未知工具", "true", 0],
    ]
    assert '<th style="text-align:left' in view._repr_html_()


def test_rendering_has_no_memory_addresses_or_raw_timestamps() -> None:
    """Are outputs stable across runs: no `0x…` addresses and no epoch milliseconds in text or HTML?"""
    trace = run(ECHO_CALL, Registry(make_echo()), signal=object())
    for rendered in (str(trace), trace._repr_html_()):
        assert "0x" not in rendered and "1700000000000" not in rendered


def test_importing_the_kit_helpers_never_imports_pi_course(course: Course, checkpoint: Checkpoint) -> None:
    """With a pi_course importable from the cwd, do trace/notebook/adapters/nbrun leave it unimported?"""
    script = (
        "import sys, pi_course_kit.teaching.trace, pi_course_kit.notebook.helpers, "
        "pi_course_kit.teaching.adapters, pi_course_kit.notebook.nbrun\n"
        "import pi_course_kit.teaching.transcript, pi_course_kit.teaching.wire, "
        "pi_course_kit.teaching.diagram\n"
        "print('pi_course' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=course.root / checkpoint.solution, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ----------------------------------------------------------------------------- real trees, own interpreter

TRACE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pi_course_kit.teaching.trace import trace_call
    import pi_course as pc

    async def echo_run(params, context):
        return pc.ToolOutput(content=[pc.text(params["value"])], details={"source": "echo"})

    async def explode(params, context):
        raise Exception("exploded")

    class Registry:  # duck-typed, so the starter's unfinished ToolRegistry is not needed
        def __init__(self, tool):
            self.tool = tool
        def get(self, name):
            return self.tool if name == self.tool.name else None

    def tools(execute=echo_run):
        if MODE == "solution":
            schema = pc.object_schema({"value": pc.string_value})
            return pc.ToolRegistry([pc.Tool("echo", "Echo one value", schema, execute)])
        return Registry(pc.Tool("echo", "Echo one value", Schema(), execute))

    class Schema:
        def parse(self, value):
            return {"value": value["value"]}

    MODE = sys.argv[1]

    async def main():
        call = pc.ToolCall("call-1", "echo", {"value": "Pi", "ignored": "drop me"})
        traces = {
            "success": await trace_call(call, tools()),
            "bad": await trace_call(pc.ToolCall("call-1", "echo", {"value": 1}), tools()),
            "unknown": await trace_call(pc.ToolCall("call-1", "missing", {}), tools()),
            "raised": await trace_call(call, tools(explode)),
        }
        print(json.dumps({name: t.to_dict() for name, t in traces.items()}, ensure_ascii=False))
        print(json.dumps({"html": traces["success"]._repr_html_()}, ensure_ascii=False))

    asyncio.run(main())
    """
)


def traced(course: Course, checkpoint: Checkpoint, tree: str, mode: str, tmp_path: Path) -> dict[str, Any]:
    folder = stage_tree(course, checkpoint, course.root / tree, tmp_path / mode)
    (folder / "trace_script.py").write_text(TRACE_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "trace_script.py", mode], cwd=folder, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    data: dict[str, Any] = json.loads(lines[0])
    data["html"] = json.loads(lines[1])["html"]
    return data


def test_solution_traces_match_the_chapter(course: Course, checkpoint: Checkpoint, tmp_path: Path) -> None:
    """Through the solution's own executor, does each call stop where the chapter says and pair with
    call-1?"""
    data = traced(course, checkpoint, checkpoint.solution, "solution", tmp_path)
    assert {name: data[name]["stopped_at"] for name in ("success", "bad", "unknown", "raised")} == {
        "success": None,
        "bad": "parse",
        "unknown": "lookup",
        "raised": "execute",
    }
    assert all(data[name]["paired"] for name in ("success", "bad", "unknown", "raised"))
    assert [data[name]["execute_count"] for name in ("success", "bad", "unknown", "raised")] == [1, 0, 0, 1]
    result = data["success"]["rows"][-1]["output"]
    assert result == {
        "role": "toolResult",
        "toolCallId": "call-1",
        "toolName": "echo",
        "content": [{"type": "text", "text": "Pi"}],
        "details": {"source": "echo"},
        "isError": False,
        "timestamp": "<int ms>",
    }
    assert data["bad"]["rows"][1]["error"] == "ValidationError: 必须是 string"
    assert "pi-trace-stopped" not in data["html"]


def test_starter_trace_shows_the_executor_lab_error(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """On the starter, does every trace end in a red `raised` result naming Lab 6.3, without the script
    crashing?"""
    data = traced(course, checkpoint, checkpoint.starter, "starter", tmp_path)
    for name in ("success", "bad", "unknown", "raised"):
        assert data[name]["stopped_at"] == "executor"
        last = data[name]["rows"][-1]
        assert last["status"] == "raised"
        assert last["error"] == "LabNotImplemented: Lab 6.3 not implemented: execute_tool_call"


@pytest.mark.parametrize("executor", [right_executor, parse_last_executor])
def test_both_stand_in_executors_answer_every_call(executor: Any) -> None:
    """Do the stand-in executors used above really answer a bad call with a paired failed result?"""
    trace = run(Call("call-1", "echo", {"value": 1}), Registry(make_echo()), executor=executor)
    assert trace.paired and trace.rows()[-1].to_dict()["output"]["isError"] is True
