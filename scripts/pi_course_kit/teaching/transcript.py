"""The agent loop made visible: the transcript growing request by request, and the event stream as a timeline.

Messages and events are read by duck typing (`to_dict()`, `type`, `message`, `call`), so the kit never
imports `pi_course`; the notebook passes in what its own tree produced.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pi_course_kit.notebook.views import MONO, compact, plain

# (border, background) per role; the legend is drawn from the same table.
ROLE_COLOURS = {
    "user": ("#0969da", "#ddf4ff"),
    "assistant": ("#8250df", "#fbefff"),
    "toolResult": ("#1a7f37", "#dafbe1"),
    "toolResult-error": ("#bf8700", "#fff8c5"),
}
ROLE_TEXT = {
    "user": "用户",
    "assistant": "模型回复",
    "toolResult": "工具结果",
    "toolResult-error": "工具结果（is_error）",
}
EVENT_DEPTH = {"agent_start": 0, "agent_end": 0, "turn_start": 1, "turn_end": 1}


def _data(message: object) -> dict[str, Any]:
    data = plain(message)
    return data if isinstance(data, dict) else {"role": "?", "content": data}


def _texts(blocks: object) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return ""
    return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")


def describe(message: object) -> tuple[str, str]:
    """(role key, one line) for a message: who speaks and what a reader needs to see."""
    data = _data(message)
    role = str(data.get("role", "?"))
    if role == "assistant":
        found = data.get("content")
        content: list[Any] = found if isinstance(found, list) else []
        calls = [
            f"{b.get('name')}#{b.get('id')} {compact(b.get('arguments'))}"
            for b in content
            if isinstance(b, dict) and b.get("type") == "toolCall"
        ]
        words = _texts(content)
        parts = ([f"“{words}”"] if words else []) + [f"调用 {call}" for call in calls]
        if data.get("errorMessage"):
            parts.append(f"错误：{data['errorMessage']}")
        return role, f"[{data.get('stopReason')}] " + ("；".join(parts) or "（空）")
    if role == "toolResult":
        key = "toolResult-error" if data.get("isError") else role
        return key, f"↩ {data.get('toolCallId')}/{data.get('toolName')}：{_texts(data.get('content'))}"
    return role, _texts(data.get("content"))


def _chip(message: object, new: bool) -> str:
    role, line = describe(message)
    border, background = ROLE_COLOURS.get(role, ("#57606a", "#f6f8fa"))
    weight = "border-width:2px" if new else "border-width:1px;opacity:0.75"
    label = ROLE_TEXT.get(role, role)
    return (
        f"<div style='border:solid {border};{weight};background:{background};border-radius:6px;"
        f"padding:2px 6px;margin:3px 0'><span style='color:{border};font-weight:bold'>{html.escape(label)}</span> "
        f'<code style="{MONO};white-space:pre-wrap;word-break:break-word">{html.escape(line)}</code></div>'
    )


def role_legend() -> str:
    """Which colour is which role; a thick border marks what is new in that column."""
    items = "".join(
        f"<span style='display:inline-block;margin-right:12px'><span style='display:inline-block;width:12px;"
        f"height:12px;border:2px solid {b};background:{bg};border-radius:3px;vertical-align:middle'></span> "
        f"{html.escape(ROLE_TEXT[role])}</span>"
        for role, (b, bg) in ROLE_COLOURS.items()
    )
    return f"<div style='color:#57606a;margin-bottom:4px'>{items} · 粗边框：这一列新出现的消息</div>"


@dataclass
class TranscriptView:
    """One column per request the provider saw, then the reply it gave, then the run's final transcript."""

    requests: Sequence[object]
    messages: Sequence[object]

    def _columns(self) -> list[tuple[str, list[object], int, str, object]]:
        """(title, messages shown, index of the first new one, note, the reply to that request or None)."""
        histories = [list(getattr(request, "messages", [])) for request in self.requests]
        replies = [
            later[len(now)] if len(later) > len(now) else None for now, later in itertools.pairwise(histories)
        ]
        last_reply = next((m for m in reversed(self.messages) if describe(m)[0] == "assistant"), None)
        replies.append(last_reply)
        columns: list[tuple[str, list[object], int, str, object]] = []
        seen = 0
        for number, (request, history) in enumerate(zip(self.requests, histories, strict=True), start=1):
            tools = [str(getattr(d, "name", "?")) for d in getattr(request, "tools", [])]
            columns.append(
                (
                    f"请求 {number}（模型看到的）",
                    history,
                    seen,
                    "tools：" + "、".join(tools),
                    replies[number - 1],
                )
            )
            seen = len(history)
        columns.append(
            ("运行结束后的 transcript", list(self.messages), seen, f"共 {len(self.messages)} 条", None)
        )
        return columns

    def __str__(self) -> str:
        out = []
        for title, history, seen, note, reply in self._columns():
            out.append(f"{title} · {note}")
            out += [f"  {'+' if i >= seen else ' '} {describe(m)[1]}" for i, m in enumerate(history)]
            if reply is not None:
                out.append(f"  ⇒ 回复 {describe(reply)[1]}")
        return "\n".join(out)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        esc = html.escape
        columns = self._columns()
        cells = "".join(
            f"<div><b>{esc(title)}</b><div style='color:#57606a'>{esc(note)}</div>"
            + "".join(_chip(m, i >= seen) for i, m in enumerate(history))
            + (
                "<div style='color:#57606a;margin-top:6px'>⇒ 模型的回复</div>" + _chip(reply, True)
                if reply is not None
                else ""
            )
            + "</div>"
            for title, history, seen, note, reply in columns
        )
        return (
            f"<div style='font-size:12px'>{role_legend()}<div style='display:grid;"
            f"grid-template-columns:repeat({len(columns)},minmax(220px,1fr));column-gap:12px'>{cells}</div></div>"
        )


def transcript_view(requests: Sequence[object], messages: Sequence[object]) -> TranscriptView:
    """The requests a provider recorded and the messages a run returned, side by side."""
    return TranscriptView(list(requests), list(messages))


def _event_line(event: object) -> tuple[int, str, str]:
    kind = str(getattr(event, "type", "?"))
    depth = EVENT_DEPTH.get(kind, 2)
    detail = ""
    call = getattr(event, "call", None)
    message = getattr(event, "message", None)
    if call is not None:
        detail = f"{getattr(call, 'name', '?')}#{getattr(call, 'id', '?')}"
    if message is not None:
        role, line = describe(message)
        detail = (detail + " → " if detail else "") + f"{ROLE_TEXT.get(role, role)} {line}"
    if kind.startswith("tool_execution") or (kind == "message_end" and "工具结果" in detail):
        depth = 3
    return depth, kind, detail


@dataclass
class Timeline:
    """The events of a run in order, indented by level: agent › turn › message › tool execution."""

    events: Sequence[object]

    def __str__(self) -> str:
        return "\n".join(
            f"{number:>2} {'  ' * depth}{kind}{'  ' + detail if detail else ''}"
            for number, (depth, kind, detail) in enumerate(map(_event_line, self.events), start=1)
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        esc = html.escape
        colours = {0: "#1f2328", 1: "#0969da", 2: "#8250df", 3: "#1a7f37"}
        rows = "".join(
            f"<div style='display:grid;grid-template-columns:28px 1fr;{MONO};font-size:12px'>"
            f"<span style='color:#8c959f;text-align:right;padding-right:6px'>{number}</span>"
            f"<span style='padding-left:{depth * 22}px;border-left:2px solid #d0d7de'>"
            f"<b style='color:{colours[depth]}'>{esc(kind)}</b> <span style='color:#57606a'>{esc(detail)}</span>"
            "</span></div>"
            for number, (depth, kind, detail) in enumerate(map(_event_line, self.events), start=1)
        )
        return f"<div>{rows}</div>"


def timeline(events: Sequence[object]) -> Timeline:
    """The event stream of a run as an indented timeline."""
    return Timeline(list(events))
