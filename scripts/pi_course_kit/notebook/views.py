"""Compact views for notebook outputs: JSON (collapsed when long) and small tables, HTML plus plain text.

Every view renders as HTML in Jupyter and as plain text in a terminal; both are stored outputs, so
neither may hold a memory address or a raw timestamp.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from pi_course_kit.core.i18n import _
from pi_course_kit.core.markup import el, style

# A CSS value may hold quotes: the builder escapes it inside a double-quoted attribute.
MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'Noto Sans Mono CJK SC',monospace"
PRE = f"margin:2px 0;{MONO};font-size:12px;white-space:pre-wrap;word-break:break-word"
#: Secondary text: 6:1 on white and on the light panels (#f6f8fa), above the 4.5:1 that text needs.
MUTED = "#57606a"
# Longer than this, JSON goes into a collapsed <details> block (one tool result, 16 lines, stays open).
OPEN_LINES = 16


def plain(value: object) -> object:
    """Turn messages, outputs and dataclasses into JSON-like data; `timestamp` becomes `<int ms>`."""
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return plain(value.to_dict())
    if isinstance(value, dict):
        return {
            str(key): (_timestamp(item) if key == "timestamp" else plain(item)) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    fields = getattr(value, "__dataclass_fields__", None)
    if isinstance(fields, dict):
        return {name: plain(getattr(value, name)) for name in fields if not callable(getattr(value, name))}
    # Never a default repr: it would print a memory address into the stored outputs.
    return f"<{type(value).__name__}>"


def _timestamp(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return "<int ms>"
    return f"<{type(value).__name__}: not int ms>"


def dumps(value: object) -> str:
    """Pretty JSON of `plain(value)`, Chinese kept readable."""
    return json.dumps(plain(value), ensure_ascii=False, indent=2)


def compact(value: object) -> str:
    """One-line JSON of `plain(value)`."""
    return json.dumps(plain(value), ensure_ascii=False)


def json_html(value: object, summary: str = "", *, open_lines: int = OPEN_LINES) -> Markup:
    """Monospace JSON; longer than `open_lines`, collapsed under a one-line summary."""
    text = dumps(value)
    body = el("pre", text, style=PRE)
    lines = text.count("\n") + 1
    if lines <= open_lines:
        return body
    label = summary or compact(value)[:80]
    return el(
        "details",
        el(
            "summary",
            label,
            " ",
            el("span", _(" ({lines} lines, click to open)").format(lines=lines), style=f"color:{MUTED}"),
            style=style("cursor:pointer", MONO, "font-size:12px"),
        ),
        body,
    )


@dataclass
class JsonView:
    """One value as JSON: collapsed in Jupyter when long, whole in a terminal."""

    value: object
    summary: str = ""

    def __str__(self) -> str:
        return dumps(self.value)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        return str(json_html(self.value, self.summary))


def cell_text(value: object) -> str:
    """How a table cell shows a value: strings as they are, None as an em dash, the rest as JSON."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return compact(value)


@dataclass
class Table:
    """A small left-aligned table: a header row and rows of values."""

    headers: Sequence[str]
    rows: Sequence[Sequence[object]]
    caption: str = ""

    def __str__(self) -> str:
        cells = [[cell_text(v) for v in row] for row in self.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self.headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True))
        out = ([self.caption] if self.caption else []) + [line]
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
        return "\n".join(out)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        cell = "text-align:left;padding:2px 10px 2px 0;vertical-align:top"
        caption = el("caption", self.caption, style="text-align:left") if self.caption else None
        head = el("thead", el("tr", [el("th", h, style=cell) for h in self.headers]))
        body = el(
            "tbody",
            [el("tr", [el("td", cell_text(v), style=style(cell, MONO)) for v in row]) for row in self.rows],
        )
        return str(el("table", caption, head, body, style="border-collapse:collapse;font-size:12px"))


def display(view: object) -> None:
    """Show a view as a cell output in IPython, or print it elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display as ipython_display
    except ImportError:
        print(view)
        return
    if get_ipython() is None:
        print(view)
        return
    ipython_display(view)  # type: ignore[no-untyped-call]


def show(value: object, summary: str = "") -> None:
    """Show a message, output or dict as JSON (timestamp hidden; collapsed when long)."""
    display(JsonView(value, summary))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], caption: str = "") -> Table:
    """A small table to return from a cell."""
    return Table(headers, rows, caption)
