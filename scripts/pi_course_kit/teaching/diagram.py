"""A flow diagram drawn as SVG by code: stages left to right, each failure exit dropping to a shared sink.

No graph library is needed for one row of boxes, and SVG keeps the notebook free of system packages
(graphviz would need the `dot` binary on every learner's machine). The notebook passes the chapter's
stages and labs in; nothing here knows a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from pi_course_kit.core.markup import el

BOX_W, BOX_H, GAP, MARGIN = 196, 58, 40, 16
EXIT_Y, SINK_Y = 150, 250
LOOP_ROOM = 30
FONT = "'Noto Sans CJK SC','PingFang SC','Microsoft YaHei',sans-serif"
GREEN, RED, GREY = "#1a7f37", "#cf222e", "#57606a"
# SVG's camelCase attributes, which no keyword argument can spell.
MARKER_BOX: dict[str, str | int] = {
    "viewBox": "0 0 10 10",
    "refX": 9,
    "refY": 5,
    "markerWidth": 7,
    "markerHeight": 7,
}


@dataclass(frozen=True)
class Stage:
    """One box of the main path; `exit` (with the lab that builds it) is the failure leaving it."""

    name: str
    caption: str
    lab: str = ""
    exit: str = ""
    exit_lab: str = ""


@dataclass
class FlowDiagram:
    """Stages in a row, their failure exits, and the sink every exit reaches (rendered as SVG)."""

    stages: Sequence[Stage]
    sink: str
    sink_lab: str = ""
    sink_target: int | None = -1  # the stage the sink flows back into; None when the sink is the end
    loop: str = ""  # when set, an arrow from the last stage back to the first, labelled with this

    def __str__(self) -> str:
        path = " → ".join(stage.name for stage in self.stages)
        exits = "; ".join(f"{s.name} ✗ {s.exit}" for s in self.stages if s.exit)
        return f"{path}（失败出口：{exits} ⇒ {self.sink}）"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]

    def _x(self, index: int) -> int:
        return MARGIN + index * (BOX_W + GAP)

    def _repr_svg_(self) -> str:
        count = len(self.stages)
        width = self._x(count) - GAP + MARGIN
        height = SINK_Y + BOX_H + MARGIN + (LOOP_ROOM if self.loop else 0)
        markers = [
            el(
                "marker",
                el("path", d="M0,0 L10,5 L0,10 z", fill=colour),
                id=f"arrow-{name}",
                **MARKER_BOX,
                orient="auto-start-reverse",
            )
            for name, colour in (("ok", GREEN), ("bad", RED), ("grey", GREY))
        ]
        out: list[Markup] = [el("defs", markers)]
        # Room above the boxes for the loop-back arrow.
        top = MARGIN + (LOOP_ROOM if self.loop else 0)
        for index, stage in enumerate(self.stages):
            x = self._x(index)
            out.append(_box(x, top, stage.name, stage.caption, stage.lab, GREEN, "#ffffff"))
            if index + 1 < count:
                out.append(_line(x + BOX_W, top + BOX_H // 2, x + BOX_W + GAP, top + BOX_H // 2, "ok"))
            if stage.exit:
                centre = x + BOX_W // 2
                exit_y, sink_y = top + EXIT_Y - MARGIN, top + SINK_Y - MARGIN
                out.append(_line(centre, top + BOX_H, centre, exit_y, "bad"))
                out.append(_box(x, exit_y, "✗ " + stage.exit, "", stage.exit_lab, RED, "#ffebe9", height=44))
                out.append(_line(centre, exit_y + 44, centre, sink_y, "bad"))
        sink_y = top + SINK_Y - MARGIN
        sink_w = (
            self._x(count - 1) - MARGIN if self.sink_target is not None else self._x(count) - GAP - MARGIN
        )
        out.append(_box(MARGIN, sink_y, self.sink, "", self.sink_lab, "#bf8700", "#fff8c5", width=sink_w))
        if self.sink_target is not None:
            target = self._x(self.sink_target % count) + BOX_W // 2
            out.append(_line(MARGIN + sink_w, sink_y + BOX_H // 2, target, sink_y + BOX_H // 2, "grey"))
            out.append(_line(target, sink_y + BOX_H // 2, target, top + BOX_H, "grey"))
        if self.loop:
            first, last = self._x(0) + BOX_W // 2, self._x(count - 1) + BOX_W // 2
            y = MARGIN + 8
            out.append(
                el(
                    "path",
                    d=f"M{last},{top} L{last},{y} L{first},{y} L{first},{top - 2}",
                    fill="none",
                    stroke=GREEN,
                    stroke_width=2,
                    marker_end="url(#arrow-ok)",
                )
            )
            out.append(
                el(
                    "text",
                    self.loop,
                    x=(first + last) // 2,
                    y=y - 2,
                    text_anchor="middle",
                    fill=GREEN,
                    font_size=12,
                )
            )
        svg = el(
            "svg",
            out,
            xmlns="http://www.w3.org/2000/svg",
            width=width,
            height=height,
            **{"viewBox": f"0 0 {width} {height}"},
            font_family=FONT,
            font_size=13,
        )
        return str(svg)


def _line(x1: int, y1: int, x2: int, y2: int, kind: str) -> Markup:
    colour = {"ok": GREEN, "bad": RED, "grey": GREY}[kind]
    return el(
        "line", x1=x1, y1=y1, x2=x2, y2=y2, stroke=colour, stroke_width=2, marker_end=f"url(#arrow-{kind})"
    )


def _box(
    x: int,
    y: int,
    title: str,
    caption: str,
    lab: str,
    border: str,
    fill: str,
    *,
    width: int = BOX_W,
    height: int = BOX_H,
) -> Markup:
    lines = [(title, "bold", "#1f2328")] + [(text, "normal", GREY) for text in (caption, lab) if text]
    step = height / (len(lines) + 1)
    texts = [
        el(
            "text",
            text,
            x=x + width // 2,
            y=f"{y + step * (i + 1) + 4:.0f}",
            text_anchor="middle",
            font_weight=weight,
            fill=colour,
            font_size=13 if i == 0 else 11,
        )
        for i, (text, weight, colour) in enumerate(lines)
    ]
    rect = el("rect", x=x, y=y, width=width, height=height, rx=8, fill=fill, stroke=border, stroke_width=2)
    return Markup(rect + Markup("").join(texts))


def flow(
    stages: Sequence[Stage], sink: str, sink_lab: str = "", sink_target: int | None = -1, loop: str = ""
) -> FlowDiagram:
    """A diagram to return from a notebook cell."""
    return FlowDiagram(list(stages), sink, sink_lab, sink_target, loop)
