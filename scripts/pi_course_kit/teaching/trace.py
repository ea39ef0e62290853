"""Trace one tool call through the learner's own executor, stage by stage, without touching their code.

The executor receives a wrapping registry; the registry hands out a proxy tool whose `schema.parse`
and `execute` record what they were given and what they returned. Everything else is forwarded.
`pi_course` is never imported here at module import time: the caller passes the objects in (duck
typing), and only the default executor is looked up lazily inside the kernel that runs the trace.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from pi_course_kit.core.markup import el, style
from pi_course_kit.notebook.views import MONO, MUTED, Table, compact, json_html, plain

STAGES = ("lookup", "parse", "execute", "result")
OK, STOPPED, NOT_REACHED, RAISED, RETURNED = "ok", "stopped", "not reached", "raised", "returned"
# What a learner reads for each status (course language; a gettext catalog can take these over).
STATUS_TEXT = {OK: "通过", STOPPED: "停在这里", NOT_REACHED: "未到达", RAISED: "抛出异常", RETURNED: "已返回"}
# (border, background) per kind of box; the legend is drawn from the same table. Text stays dark in
# every box (a stage not reached is marked by its dashed border and italic, not by pale text).
COLOURS = {
    "ok": ("#1a7f37", "#ffffff"),
    "stopped": ("#cf222e", "#ffebe9"),
    "not reached": ("#8c959f", "#f6f8fa"),
    "answered-error": ("#bf8700", "#fff8c5"),
}
LEGEND = {
    "ok": "通过",
    "stopped": "调用停在这里",
    "not reached": "没有走到",
    "answered-error": "已回答，但 is_error=True",
}

Executor = Callable[..., Awaitable[Any]]


@dataclass
class Event:
    """One stage as it happened: what went in, what came out, or the error that stopped it."""

    stage: str
    status: str
    input: object = None
    output: object = None
    error: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Data form used by tests and the text rendering."""
        return {
            "stage": self.stage,
            "status": self.status,
            "input": plain(self.input),
            "output": plain(self.output),
            "error": self.error,
            "note": self.note,
        }


def _error_text(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


class _Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.execute_count = 0

    def add(self, event: Event) -> Event:
        self.events.append(event)
        return event


class _TracingSchema:
    """Stands in for `tool.schema`: records each parse, forwards everything else."""

    def __init__(self, schema: Any, recorder: _Recorder) -> None:
        self._schema = schema
        self._recorder = recorder

    def parse(self, value: object) -> Any:
        # A snapshot, so that a later mutation by learner code cannot rewrite what we show.
        event = self._recorder.add(Event("parse", OK, input=_snapshot(value)))
        try:
            parsed = self._schema.parse(value)
        except Exception as error:
            event.status, event.error = STOPPED, _error_text(error)
            raise
        event.output = _snapshot(parsed)
        if value is parsed:
            event.note = "parse 返回了原对象，而不是新 dict"
        elif isinstance(value, dict) and isinstance(parsed, dict):
            dropped = [str(key) for key in value if key not in parsed]
            if dropped:
                event.note = "丢弃了未声明的键：" + "、".join(dropped)
        return parsed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._schema, name)


class _TracingTool:
    """Stands in for a registered tool: `schema` and `execute` are recorded, the rest forwarded."""

    def __init__(self, tool: Any, recorder: _Recorder, signal: object, progress: object) -> None:
        self._tool = tool
        self._recorder = recorder
        self._signal = signal
        self._progress = progress
        self.schema = _TracingSchema(tool.schema, recorder)

    async def execute(self, parameters: object, context: Any) -> Any:
        recorder = self._recorder
        recorder.execute_count += 1
        event = recorder.add(
            Event(
                "execute", OK, input={"parameters": _snapshot(parameters), "context": self._context(context)}
            )
        )
        try:
            output = await self._tool.execute(parameters, context)
        except Exception as error:
            event.status, event.error = STOPPED, _error_text(error)
            event.note = f"execute 第 {recorder.execute_count} 次运行"
            raise
        event.output = _snapshot(output)
        event.note = f"execute 第 {recorder.execute_count} 次运行"
        return output

    def _context(self, context: Any) -> dict[str, object]:
        def same(name: str, expected: object) -> str | None:
            value = getattr(context, name, None)
            if value is None:
                return None  # shown as JSON null, like any other absent value
            return "同一个对象 ✓" if value is expected else "另一个对象 ✗"

        return {
            "call_id": getattr(context, "call_id", "<missing>"),
            "signal": same("signal", self._signal),
            "report_progress": same("report_progress", self._progress),
        }

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tool, name)


class _TracingRegistry:
    """Handed to the executor in place of the registry: records each lookup."""

    def __init__(self, registry: Any, recorder: _Recorder, signal: object, progress: object) -> None:
        self._registry = registry
        self._recorder = recorder
        self._signal = signal
        self._progress = progress

    def get(self, name: str) -> Any:
        event = self._recorder.add(Event("lookup", OK, input=name))
        try:
            tool = self._registry.get(name)
        except Exception as error:
            event.status, event.error = STOPPED, _error_text(error)
            raise
        if tool is None:
            event.status, event.output = STOPPED, None
            event.note = "registry 里没有这个名字"
            return None
        event.output = f"Tool {getattr(tool, 'name', '?')}"
        return _TracingTool(tool, self._recorder, self._signal, self._progress)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)


def _snapshot(value: object) -> object:
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


@dataclass
class CallTrace:
    """The stages one call went through; renders as HTML boxes in Jupyter and as text in a terminal."""

    title: str
    call: dict[str, object]
    events: list[Event]
    execute_count: int
    result: object = None
    raised: str = ""
    expected_pairing: tuple[str, str] = ("", "")
    stop_index: int | None = field(default=None)

    @property
    def stopped_at(self) -> str | None:
        """The stage where the call stopped (lookup, parse, execute, or `executor` when it raised)."""
        if self.raised:
            return "executor"
        if self.stop_index is None:
            return None
        return self.events[self.stop_index].stage

    @property
    def paired(self) -> bool:
        """True when the result answers the call: same call id and tool name."""
        data = plain(self.result)
        if not isinstance(data, dict):
            return False
        return (data.get("toolCallId"), data.get("toolName")) == self.expected_pairing

    def rows(self) -> list[Event]:
        """Events in the order they happened, then the stages never reached, then the result."""
        rows = list(self.events)
        seen = {event.stage for event in rows}
        rows += [Event(stage, NOT_REACHED) for stage in STAGES[:3] if stage not in seen]
        if self.raised:
            rows.append(Event("result", RAISED, error=self.raised, note="executor 抛出了异常，没有返回结果"))
        else:
            data = plain(self.result)
            error_flag = isinstance(data, dict) and data.get("isError") is True
            call_id, name = self.expected_pairing
            pairing = f"{call_id}/{name} " + ("配对 ✓" if self.paired else "未配对 ✗")
            note = pairing + (" · is_error=True" if error_flag else "")
            rows.append(Event("result", RETURNED, output=self.result, note=note))
        return rows

    def to_dict(self) -> dict[str, Any]:
        """Data form: the call, each row, where it stopped, the execution count and the pairing."""
        return {
            "title": self.title,
            "call": self.call,
            "rows": [row.to_dict() for row in self.rows()],
            "stopped_at": self.stopped_at,
            "execute_count": self.execute_count,
            "paired": self.paired,
        }

    def content_text(self) -> str:
        """The text blocks of the result's content, joined: what the model reads next."""
        data = plain(self.result)
        if not isinstance(data, dict):
            return ""
        blocks = data.get("content")
        if not isinstance(blocks, list):
            return ""
        return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))

    def is_error(self) -> object:
        """The result's isError flag (None when there is no result)."""
        data = plain(self.result)
        return data.get("isError") if isinstance(data, dict) else None

    def summary(self) -> str:
        """One line: each stage with its mark, e.g. `lookup ✓ → parse ✗ → execute · → result ✓`."""
        marks = {OK: "✓", STOPPED: "✗", NOT_REACHED: "·", RAISED: "✗", RETURNED: "✓"}
        parts = [f"{row.stage} {marks[row.status]}" for row in self.rows()]
        call_id, name = self.expected_pairing
        tail = f"执行 {self.execute_count} 次，" + (f"配对 {call_id}/{name}" if self.paired else "未配对")
        return f"{self.title}: " + " → ".join(parts) + f"（{tail}）"

    def _shown(self, row: Event) -> list[tuple[str, object]]:
        """The in/out values worth printing for a row (a lookup that found nothing shows `out: null`)."""
        shown = [("输入", row.input)] if row.input is not None else []
        if row.output is not None or (row.stage == "lookup" and row.status != NOT_REACHED):
            shown.append(("输出", row.output))
        return shown

    def __str__(self) -> str:
        lines = [f"追踪 · {self.title}", f"  调用 {compact(self.call)}"]
        for row in self.rows():
            stop = "  ← 停在这里" if row.status in (STOPPED, RAISED) else ""
            lines.append(f"[{row.stage}] {STATUS_TEXT[row.status]}{stop}")
            if row.stage == "result" and row.status == RETURNED:
                lines.append(f"    正文  {self.content_text()}")
            else:
                lines += [f"    {label}  {compact(value)}" for label, value in self._shown(row)]
            if row.error:
                lines.append(f"    错误  {row.error}")
            if row.note:
                lines.append(f"    说明  {row.note}")
        lines.append(f"execute 运行次数：{self.execute_count}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        return render_grid([self])

    def _kind(self, row: Event) -> str:
        if row.status in (STOPPED, RAISED):
            return "stopped"
        if row.status == NOT_REACHED:
            return "not reached"
        if row.status == RETURNED and self.is_error() is True:
            # An error answer is not where the call stopped: amber, not red.
            return "answered-error"
        return "ok"

    def _box(self, row: Event, first: bool) -> Markup:
        kind = self._kind(row)
        border, background = COLOURS[kind]
        reached = row.status != NOT_REACHED
        parts: list[Markup] = [el("b", row.stage), Markup(" "), el("i", STATUS_TEXT[row.status])]
        if row.stage == "result" and row.status == RETURNED:
            call_id, name = self.expected_pairing
            pairing = f"{call_id}/{name} " + ("配对 ✓" if self.paired else "未配对 ✗")
            parts += [
                el("div", "正文 ", el("code", self.content_text(), style=MONO)),
                el("div", f"{pairing} · is_error={compact(self.is_error())}"),
                json_html(self.result, "完整的 toolResult（wire JSON）", open_lines=0),
            ]
        else:
            parts += [
                el(
                    "div",
                    el("span", label, style=f"color:{MUTED}"),
                    " ",
                    el(
                        "code",
                        compact(value),
                        style=style(MONO, "white-space:pre-wrap;word-break:break-word"),
                    ),
                )
                for label, value in self._shown(row)
            ]
            if row.note:
                # The dropped keys are the chapter's point: mark them, do not just mention them.
                dropped = row.note.startswith("丢弃")
                note_style = "color:#cf222e;font-weight:bold" if dropped else f"color:{MUTED}"
                parts.append(el("div", "✂ " if dropped else "", row.note, style=note_style))
        if row.error:
            parts.append(el("div", el("b", row.error), style="color:#cf222e"))
        arrow = None if first else el("div", "↓", style=f"text-align:center;color:{MUTED};line-height:1")
        box = el(
            "div",
            parts,
            class_=f"pi-trace-stage pi-trace-{row.status.replace(' ', '-')}",
            style=style(
                f"border:2px {'solid' if reached else 'dashed'} {border};background:{background}",
                "color:#1f2328" if reached else f"color:{MUTED};font-style:italic",
                "border-radius:6px;padding:4px 6px;flex:1;box-sizing:border-box",
            ),
        )
        # A flex column: the box grows to the row's height, so boxes of one row end on one line.
        return el("div", arrow, box, style="display:flex;flex-direction:column")


def legend() -> Markup:
    """The colour legend, as part of every rendered trace."""
    items = [
        el(
            "span",
            el(
                "span",
                style=f"display:inline-block;width:12px;height:12px;border:2px "
                f"{'dashed' if kind == NOT_REACHED else 'solid'} {COLOURS[kind][0]};"
                f"background:{COLOURS[kind][1]};border-radius:3px;vertical-align:middle",
            ),
            " ",
            text,
            style="display:inline-block;margin-right:12px",
        )
        for kind, text in LEGEND.items()
    ]
    return el("div", items, style=f"margin:2px 0 6px 0;color:{MUTED}")


def render_grid(traces: Sequence[CallTrace]) -> str:
    """Traces as the columns of one CSS grid: row N of every column is the N-th stage, so stages line up."""
    columns = [trace.rows() for trace in traces]
    depth = max(len(rows) for rows in columns)
    cells = [
        el(
            "div",
            el("b", t.title),
            el("div", el("code", compact(t.call), style=style(MONO, f"color:{MUTED};word-break:break-word"))),
        )
        for t in traces
    ]
    for index in range(depth):
        for trace, rows in zip(traces, columns, strict=True):
            cells.append(trace._box(rows[index], index == 0) if index < len(rows) else el("div"))
    cells += [el("div", "execute 运行次数：", el("b", t.execute_count)) for t in traces]
    grid = el(
        "div",
        cells,
        style=f"display:grid;grid-template-columns:repeat({len(traces)},minmax(200px,1fr));"
        f"column-gap:10px;row-gap:2px;align-items:stretch;max-width:{len(traces) * 480}px",
    )
    return str(el("div", legend(), grid, style="font-size:12px;overflow-x:auto"))


@dataclass
class TraceGroup:
    """Several traces side by side (one grid in Jupyter, one summary line each in a terminal)."""

    traces: Sequence[CallTrace]

    def __str__(self) -> str:
        return "\n".join(trace.summary() for trace in self.traces)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        return render_grid(self.traces)


def outcome_table(*traces: CallTrace) -> Table:
    """One row per trace: case | stopped at | content text | is_error | executions."""
    return Table(
        ["情况", "停在", "content 正文", "is_error", "execute 次数"],
        [
            [t.title, t.stopped_at or "—（成功）", t.content_text(), compact(t.is_error()), t.execute_count]
            for t in traces
        ],
    )


def side_by_side(*traces: CallTrace) -> TraceGroup:
    """Show traces next to each other."""
    return TraceGroup(list(traces))


def _default_executor() -> Executor:
    # Imported here, in the kernel that runs the trace, never when the kit is imported.
    module = importlib.import_module("pi_course")
    executor: Executor = module.execute_tool_call
    return executor


async def trace_call(
    call: Any,
    registry: Any,
    *,
    title: str = "",
    executor: Executor | None = None,
    signal: object = None,
    report_progress: object = None,
) -> CallTrace:
    """Run `call` through the executor (default: `pi_course.execute_tool_call`) and record every stage."""
    run = executor or _default_executor()
    recorder = _Recorder()
    proxy = _TracingRegistry(registry, recorder, signal, report_progress)
    call_data = {"id": getattr(call, "id", None), "name": getattr(call, "name", None)}
    call_data["arguments"] = _snapshot(getattr(call, "arguments", None))
    result: object = None
    raised = ""
    try:
        result = await run(call, proxy, signal=signal, report_progress=report_progress)
    except Exception as error:
        # The learner's executor should never raise; the trace shows it instead of crashing the cell.
        raised = _error_text(error)
    stop = next((i for i, event in enumerate(recorder.events) if event.status == STOPPED), None)
    return CallTrace(
        title=title or f"{call_data['name']} {compact(call_data['arguments'])}",
        call=call_data,
        events=recorder.events,
        execute_count=recorder.execute_count,
        result=result,
        raised=raised,
        expected_pairing=(str(call_data["id"]), str(call_data["name"])),
        stop_index=stop,
    )
