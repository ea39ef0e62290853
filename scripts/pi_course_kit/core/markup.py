"""Well-formed HTML (and SVG) from Python values: a small element builder on top of `markupsafe`.

Every view of the kit builds its markup here instead of in f-strings. An attribute is always written
in double quotes with its value escaped, and text is always escaped unless it is already `Markup`, so
a value that holds a quote (a CSS font name, a learner's message) can never end an attribute early.
An f-string once put `'Noto Sans Mono CJK SC'` inside `style='…'`: the broken attribute held
JupyterLab's sanitizer for minutes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypeAlias

from markupsafe import Markup, escape

#: What an element may hold: text (escaped), markup (kept), numbers, nothing, or an iterable of these.
Child: TypeAlias = "Markup | str | int | float | Iterable[Child] | None"
#: An attribute value: text (escaped), a number, True (the bare attribute), False or None (left out).
Value: TypeAlias = "str | int | float | bool | None"

#: HTML elements that have no end tag.
VOID = frozenset({"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})
_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
_ATTRIBUTE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_.:-]*$")


def _name(keyword: str) -> str:
    # class_ -> class, aria_label -> aria-label; names that are not valid attribute names are refused.
    name = keyword.rstrip("_").replace("_", "-")
    if not _ATTRIBUTE.match(name):
        raise ValueError(f"not an attribute name: {keyword!r}")
    return name


def attributes(values: Mapping[str, Value]) -> Markup:
    """` name="value"` for each attribute, in the given order; True is the bare name, False/None none."""
    out = []
    for keyword, value in values.items():
        if value is None or value is False:
            continue
        name = _name(keyword)
        out.append(f" {name}" if value is True else f' {name}="{escape(str(value))}"')
    return Markup("".join(out))


def _children(children: Iterable[Child]) -> Iterable[str]:
    for child in children:
        if child is None:
            continue
        if isinstance(child, Markup):
            yield str(child)
        elif isinstance(child, str):
            yield str(escape(child))
        elif isinstance(child, int | float):
            yield str(child)
        else:
            yield from _children(child)


def fragment(*children: Child) -> Markup:
    """Several pieces of markup side by side, with the text among them escaped."""
    return Markup("".join(_children(children)))


def el(tag: str, *children: Child, **attrs: Value) -> Markup:
    """One element: `el("td", "x", style="color:#1f2328", class_="n")` is `<td style="…" class="n">x</td>`.

    Keyword names become attribute names (`class_` is `class`, `aria_label` is `aria-label`); for names
    Python cannot spell, pass a mapping with `**{"viewBox": "0 0 10 10"}`.
    """
    if not _TAG.match(tag):
        raise ValueError(f"not a tag name: {tag!r}")
    opening = f"<{tag}{attributes(attrs)}>"
    if tag.lower() in VOID:
        if children:
            raise ValueError(f"<{tag}> is a void element and cannot hold content")
        return Markup(opening)
    return Markup(f"{opening}{fragment(*children)}</{tag}>")


def style(*declarations: str | None) -> str:
    """Join CSS declarations (`"color:#1f2328"`, …) with `;`, skipping empty ones."""
    return ";".join(d for d in declarations if d)


def trusted(text: str) -> Markup:
    """Markup from a trusted producer (matplotlib's SVG), kept as it is; never for outside text."""
    return Markup(text)
