"""The agent loop made visible: the transcript growing request by request (the loop's events: loop_views).

Messages and events are read by duck typing (`to_dict()`, `type`, `message`, `call`), so the kit never
imports `pi_course`; the notebook passes in what its own tree produced.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from pi_course_kit.core.markup import el, style
from pi_course_kit.notebook.views import MONO, MUTED, compact, plain

# (border, background, text) per role; the legend is drawn from the same table. The text colour is a
# darker shade of the border, at least 4.5:1 on the background and on white.
ROLE_COLOURS = {
    "user": ("#0969da", "#ddf4ff", "#0550ae"),
    "assistant": ("#8250df", "#fbefff", "#6639ba"),
    "toolResult": ("#1a7f37", "#dafbe1", "#116329"),
    "toolResult-error": ("#bf8700", "#fff8c5", "#7d4e00"),
}
OTHER_ROLE = ("#57606a", "#f6f8fa", "#1f2328")
ROLE_TEXT = {
    "user": "用户",
    "assistant": "模型回复",
    "toolResult": "工具结果",
    "toolResult-error": "工具结果（is_error）",
}


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


def _chip(message: object, new: bool) -> Markup:
    role, line = describe(message)
    border, background, text = ROLE_COLOURS.get(role, OTHER_ROLE)
    # New in this column: thick border on the role's tint. Seen before: thin border on white, so the
    # eye finds the new messages while the old ones keep their full contrast.
    box = (
        f"border:2px solid {border};background:{background}"
        if new
        else f"border:1px solid {border};background:#ffffff"
    )
    return el(
        "div",
        el("span", ROLE_TEXT.get(role, role), style=f"color:{text};font-weight:bold"),
        " ",
        el("code", line, style=style(MONO, "color:#1f2328;white-space:pre-wrap;word-break:break-word")),
        style=style(box, "border-radius:6px;padding:2px 6px;margin:3px 0"),
    )


def role_legend() -> Markup:
    """Which colour is which role; a thick border marks what is new in that column."""
    items = [
        el(
            "span",
            el(
                "span",
                style=f"display:inline-block;width:12px;height:12px;border:2px solid {border};"
                f"background:{background};border-radius:3px;vertical-align:middle",
            ),
            " ",
            ROLE_TEXT[role],
            style="display:inline-block;margin-right:12px",
        )
        for role, (border, background, _) in ROLE_COLOURS.items()
    ]
    return el("div", items, " · 粗边框：这一列新出现的消息", style=f"color:{MUTED};margin-bottom:4px")


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
        columns = self._columns()
        cells = [
            el(
                "div",
                el("b", title),
                el("div", note, style=f"color:{MUTED}"),
                [_chip(m, i >= seen) for i, m in enumerate(history)],
                [el("div", "⇒ 模型的回复", style=f"color:{MUTED};margin-top:6px"), _chip(reply, True)]
                if reply is not None
                else None,
            )
            for title, history, seen, note, reply in columns
        ]
        grid = el(
            "div",
            cells,
            style=f"display:grid;grid-template-columns:repeat({len(columns)},minmax(220px,1fr));column-gap:12px",
        )
        return str(el("div", role_legend(), grid, style="font-size:12px"))


def transcript_view(requests: Sequence[object], messages: Sequence[object]) -> TranscriptView:
    """The requests a provider recorded and the messages a run returned, side by side."""
    return TranscriptView(list(requests), list(messages))
