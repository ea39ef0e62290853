"""Checkpoint 07 made visible: the loop's event stream, one tool batch in time, and the skipped calls.

Events and messages are read by duck typing (`type`, `event`, `message`, `call`, `call_id`, `result`,
`to_dict()`), so the kit never imports `pi_course`; the notebook passes in what its own tree produced.
Every view renders as HTML through the markup builder and as plain text for a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pi_course_kit.core.markup import el, style
from pi_course_kit.notebook.views import MONO, MUTED, plain
from pi_course_kit.teaching.transcript import ROLE_TEXT, describe

#: How far each kind of loop event is indented: the run's end, a message, a model event, a tool event.
EVENT_DEPTH = {"turn_end": 0, "assistant_message": 1, "model_event": 2}
DEPTH_COLOURS = {0: "#1f2328", 1: "#8250df", 2: "#57606a", 3: "#1a7f37"}


def _detail(event: object) -> str:
    kind = str(getattr(event, "type", "?"))
    if kind == "model_event":
        inner = getattr(event, "event", None)
        name = str(getattr(inner, "type", "?"))
        delta = getattr(inner, "delta", None)
        return f"{name} {delta!r}" if isinstance(delta, str) else name
    if kind == "assistant_message":
        return describe(getattr(event, "message", None))[1]
    if kind == "tool_start":
        call = getattr(event, "call", None)
        return f"{getattr(call, 'name', '?')}#{getattr(call, 'id', '?')}"
    if kind == "tool_progress":
        content = plain(getattr(event, "content", []))
        words = (
            "".join(b.get("text", "") for b in content if isinstance(b, dict))
            if isinstance(content, list)
            else ""
        )
        return f"#{getattr(event, 'call_id', '?')} {words}"
    if kind in ("tool_end", "tool_skipped"):
        role, line = describe(getattr(event, "result", None))
        return f"{ROLE_TEXT.get(role, role)} {line}"
    if kind == "turn_end":
        return f"reason={getattr(event, 'reason', '?')}"
    return ""


def _line(event: object) -> tuple[int, str, str]:
    kind = str(getattr(event, "type", "?"))
    # One event, one line: a multi-line tool result is shown with its line breaks marked.
    return EVENT_DEPTH.get(kind, 3), kind, _detail(event).replace("\n", " ⏎ ")


@dataclass
class LoopTimeline:
    """The events of one run in order, indented: turn_end › assistant_message › model events › tool events."""

    events: Sequence[object]

    def lines(self) -> list[tuple[int, str, str]]:
        """(depth, type, detail) per event."""
        return [_line(event) for event in self.events]

    def __str__(self) -> str:
        return "\n".join(
            f"{number:>2} {'  ' * depth}{kind}{'  ' + detail if detail else ''}"
            for number, (depth, kind, detail) in enumerate(self.lines(), start=1)
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = [
            el(
                "div",
                el("span", number, style=f"color:{MUTED};text-align:right;padding-right:6px"),
                el(
                    "span",
                    el("b", kind, style=f"color:{DEPTH_COLOURS[depth]}"),
                    " ",
                    el("span", detail, style=f"color:{MUTED}"),
                    style=f"padding-left:{depth * 22}px;border-left:2px solid #d0d7de",
                ),
                style=style("display:grid;grid-template-columns:28px 1fr", MONO, "font-size:12px"),
            )
            for number, (depth, kind, detail) in enumerate(self.lines(), start=1)
        ]
        return str(el("div", rows))


def loop_timeline(events: Sequence[object]) -> LoopTimeline:
    """The event stream of a run as an indented timeline."""
    return LoopTimeline(list(events))


@dataclass
class BatchLane:
    """One call of a batch: where it sits in call order, and when (event number) it started and ended."""

    call_id: str
    name: str
    call_index: int
    start: int
    end: int | None
    written: int | None


@dataclass
class BatchView:
    """One tool batch in time: a lane per call from tool_start to tool_end, against call and transcript
    order."""

    lanes: list[BatchLane]
    width: int

    def ends_in_order(self) -> list[str]:
        """The call ids in the order their tool_end arrived."""
        ended = [lane for lane in self.lanes if lane.end is not None]
        return [lane.call_id for lane in sorted(ended, key=lambda lane: lane.end or 0)]

    def written_in_order(self) -> list[str]:
        """The call ids in the order their results stand in the transcript."""
        written = [lane for lane in self.lanes if lane.written is not None]
        return [lane.call_id for lane in sorted(written, key=lambda lane: lane.written or 0)]

    def __str__(self) -> str:
        out = [f"{'call':<14}{'调用顺序':>6}{'开始':>6}{'结束':>6}{'写入':>6}"]
        for lane in self.lanes:
            cells = [lane.call_index + 1, lane.start, lane.end, lane.written]
            out.append(f"{lane.call_id:<14}" + "".join(f"{'-' if c is None else c:>8}" for c in cells))
        out.append("tool_end 顺序（完成顺序）：" + " → ".join(self.ends_in_order()))
        out.append("transcript 顺序（call 顺序）：" + " → ".join(self.written_in_order()))
        return "\n".join(out)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        scale = 100 / max(self.width, 1)
        rows = []
        for lane in self.lanes:
            end = lane.end if lane.end is not None else self.width
            bar = el(
                "div",
                el("span", f"#{lane.start}", style="float:left"),
                el("span", f"#{lane.end}" if lane.end is not None else "…", style="float:right"),
                style=style(
                    "position:absolute;top:2px;height:18px;border-radius:4px",
                    "background:#dafbe1;border:1px solid #1a7f37;color:#116329;padding:0 4px",
                    f"left:{(lane.start - 1) * scale:.1f}%;width:{max(end - lane.start + 1, 1) * scale:.1f}%",
                    "box-sizing:border-box;font-size:11px",
                ),
            )
            rows.append(
                el(
                    "div",
                    el("code", f"{lane.call_index + 1}. {lane.name}#{lane.call_id}", style=MONO),
                    el(
                        "div", bar, style="position:relative;height:22px;background:#f6f8fa;border-radius:4px"
                    ),
                    el(
                        "span",
                        f"写入第 {lane.written} 位" if lane.written is not None else "未写入",
                        style=f"color:{MUTED}",
                    ),
                    style="display:grid;grid-template-columns:180px 1fr 90px;column-gap:8px;margin:3px 0",
                )
            )
        orders = el(
            "div",
            el("div", "tool_end 顺序（完成顺序）：", el("b", " → ".join(self.ends_in_order()))),
            el("div", "transcript 顺序（call 顺序）：", el("b", " → ".join(self.written_in_order()))),
            style=f"color:{MUTED};margin-top:4px",
        )
        note = el("div", "横轴是事件序号：条从该调用的 tool_start 到它的 tool_end。", style=f"color:{MUTED}")
        return str(el("div", note, rows, orders, style="font-size:12px"))


def batch_view(events: Sequence[object], messages: Sequence[object]) -> BatchView:
    """Lanes for the calls of the run's first tool batch, from its events and its final transcript."""
    numbered = list(enumerate(events, start=1))
    starts = [(n, getattr(e, "call", None)) for n, e in numbered if getattr(e, "type", None) == "tool_start"]
    ends: dict[str, int] = {}
    for number, event in numbered:
        if getattr(event, "type", None) == "tool_end":
            data = plain(getattr(event, "result", None))
            call_id = data.get("toolCallId") if isinstance(data, dict) else None
            ends.setdefault(str(call_id), number)
    written: dict[str, int] = {}
    position = 0
    for message in messages:
        data = plain(message)
        if isinstance(data, dict) and data.get("role") == "toolResult":
            position += 1
            written.setdefault(str(data.get("toolCallId")), position)
    lanes = [
        BatchLane(
            call_id=str(getattr(call, "id", "?")),
            name=str(getattr(call, "name", "?")),
            call_index=index,
            start=number,
            end=ends.get(str(getattr(call, "id", "?"))),
            written=written.get(str(getattr(call, "id", "?"))),
        )
        for index, (number, call) in enumerate(starts)
    ]
    return BatchView(lanes, len(numbered))


@dataclass
class SkippedView:
    """The calls a run answered without running them: id, tool, reason and the text the model will read."""

    rows: list[tuple[str, str, str, str]]
    reason: str

    def __str__(self) -> str:
        lines = [f"运行结束：{self.reason} · skipped 结果 {len(self.rows)} 条"]
        lines += [f"  {call_id} {name} [{why}] {words}" for call_id, name, why, words in self.rows]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        head = el(
            "tr",
            [
                el("th", h, style="text-align:left;padding:2px 8px")
                for h in ("call", "工具", "reason", "正文")
            ],
        )
        body = [
            el(
                "tr",
                el("td", el("code", call_id), style="padding:2px 8px"),
                el("td", name, style="padding:2px 8px"),
                el("td", el("b", why, style="color:#7d4e00"), style="padding:2px 8px"),
                el("td", words, style="padding:2px 8px"),
            )
            for call_id, name, why, words in self.rows
        ]
        caption = el(
            "caption", f"运行结束：{self.reason} · skipped 结果 {len(self.rows)} 条", style="text-align:left"
        )
        return str(el("table", caption, head, body, style="font-size:12px;border-collapse:collapse"))


def skipped_view(result: object) -> SkippedView:
    """The skipped tool results of a run's transcript (`result.messages`), with the run's reason."""
    rows = []
    for message in getattr(result, "messages", []):
        data = plain(message)
        if not isinstance(data, dict) or data.get("role") != "toolResult":
            continue
        details = data.get("details")
        if not isinstance(details, dict) or details.get("skipped") is not True:
            continue
        content = data.get("content")
        words = (
            "".join(b.get("text", "") for b in content if isinstance(b, dict))
            if isinstance(content, list)
            else ""
        )
        rows.append(
            (str(data.get("toolCallId")), str(data.get("toolName")), str(details.get("reason")), words)
        )
    return SkippedView(rows, str(getattr(result, "reason", "?")))
