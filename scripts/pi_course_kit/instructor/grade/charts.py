"""The class report's charts, drawn with matplotlib (Agg) as SVG text to embed inline in the page.

Each chart is an image with a title (`<title>`, and `role="img"` with `aria-labelledby` pointing at the
page's caption); the page puts the same numbers in a text table next to it.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Sequence

from markupsafe import Markup, escape

from pi_course_kit.core.markup import trusted

XML_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
SVG_START = re.compile(r"<svg\b([^>]*)>")
#: Dark enough on white for text (the charts' labels and the bars' own labels).
TEXT = "#1f2328"
BAR = "#0969da"


def _svg(figure: object, title: str, caption_id: str) -> Markup:
    from matplotlib.figure import Figure

    assert isinstance(figure, Figure)
    buffer = io.StringIO()
    with warnings.catch_warnings():
        # matplotlib measures labels with its own font, which may lack CJK glyphs; the SVG keeps them as
        # text (svg.fonttype "none") and the browser draws them with its fonts, so the warning says nothing.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        # No date and a fixed id salt, so the same class always gives the same page.
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    svg = XML_PROLOGUE.sub("", buffer.getvalue(), count=1)
    # The image's accessible name is the caption the page shows above it; <title> carries it in the file.
    head = f'role="img" aria-labelledby="{escape(caption_id)}"'
    return trusted(
        SVG_START.sub(lambda m: f"<svg {head}{m.group(1)}><title>{escape(title)}</title>", svg, count=1)
    )


def _figure(width: float, height: float) -> object:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "pi-course"
    # Text stays text in the SVG, so the browser draws the labels (Chinese included) with its own fonts.
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["text.color"] = TEXT
    matplotlib.rcParams["axes.labelcolor"] = TEXT
    matplotlib.rcParams["xtick.color"] = TEXT
    matplotlib.rcParams["ytick.color"] = TEXT
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=96)


def score_histogram(
    bands: Sequence[tuple[float, float, int]], xlabel: str, ylabel: str, *, title: str, caption_id: str
) -> Markup:
    """One bar per score band (low, high, learners), as an SVG element titled `title`."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = _figure(5.2, 2.8)
    assert isinstance(figure, Figure)
    axes = figure.add_subplot()
    lows = [low for low, _, _ in bands]
    widths = [high - low for low, high, _ in bands]
    axes.bar(lows, [count for _, _, count in bands], width=widths, align="edge", color=BAR, edgecolor="white")
    axes.set_xlim(bands[0][0] if bands else 0, bands[-1][1] if bands else 1)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure, title, caption_id)


def pass_rates(
    labels: Sequence[str], rates: Sequence[float], xlabel: str, *, title: str, caption_id: str
) -> Markup:
    """A horizontal bar per lab: the share of the class who finished it (0–100 %), as an SVG element."""
    from matplotlib.figure import Figure

    figure = _figure(5.2, 0.5 + 0.4 * max(1, len(labels)))
    assert isinstance(figure, Figure)
    axes = figure.add_subplot()
    positions = list(range(len(labels)))
    bars = axes.barh(positions, [rate * 100 for rate in rates], color=BAR)
    # The labels may stand beyond 100 %: the figure grows to hold them, the axis stays 0–100.
    axes.bar_label(bars, labels=[f"{rate:.0%}" for rate in rates], padding=3, clip_on=False)
    axes.set_yticks(positions, labels=list(labels))
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.set_xlabel(xlabel)
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure, title, caption_id)
