"""The class report's charts, drawn with matplotlib (Agg) as SVG text to embed inline in the page."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Sequence

XML_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)


def _svg(figure: object) -> str:
    from matplotlib.figure import Figure

    assert isinstance(figure, Figure)
    buffer = io.StringIO()
    with warnings.catch_warnings():
        # matplotlib measures labels with its own font, which may lack CJK glyphs; the SVG keeps them as
        # text (svg.fonttype "none") and the browser draws them with its fonts, so the warning says nothing.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        # No date and a fixed id salt, so the same class always gives the same page.
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return XML_PROLOGUE.sub("", buffer.getvalue(), count=1)


def _figure(width: float, height: float) -> object:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "pi-course"
    # Text stays text in the SVG, so the browser draws the labels (Chinese included) with its own fonts.
    matplotlib.rcParams["svg.fonttype"] = "none"
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=96)


def score_histogram(scores: Sequence[float], maximum: float, xlabel: str, ylabel: str) -> str:
    """A histogram of the learners' scores from 0 to `maximum`, as an SVG element."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = _figure(6.4, 3.0)
    assert isinstance(figure, Figure)
    axes = figure.add_subplot()
    top = maximum if maximum > 0 else 1.0
    bins = [top * i / 10 for i in range(11)]
    clipped = [min(max(score, 0.0), top) for score in scores]
    axes.hist(clipped, bins=bins, color="#3b7dd8", edgecolor="white")
    axes.set_xlim(0, top)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure)


def pass_rates(labels: Sequence[str], rates: Sequence[float], xlabel: str) -> str:
    """A horizontal bar per lab: the share of graded learners who finished it, as an SVG element."""
    from matplotlib.figure import Figure

    figure = _figure(6.4, 0.5 + 0.45 * max(1, len(labels)))
    assert isinstance(figure, Figure)
    axes = figure.add_subplot()
    positions = list(range(len(labels)))
    bars = axes.barh(positions, [rate * 100 for rate in rates], color="#2e9e6b")
    axes.bar_label(bars, labels=[f"{rate:.0%}" for rate in rates], padding=3)
    axes.set_yticks(positions, labels=list(labels))
    axes.invert_yaxis()
    axes.set_xlim(0, 110)
    axes.set_xlabel(xlabel)
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure)
