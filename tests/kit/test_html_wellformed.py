"""Every HTML output of every notebook, and the class report, parsed by a conforming HTML parser (html5lib).

Checking strings in the HTML let a broken attribute through: a quote inside `style='…'` froze
JupyterLab's sanitizer. Here each piece of markup is parsed the way a browser parses it, and any
parse error fails the test, with where it is.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import html5lib
import pytest
from notebook_runs import RUNS, executed, rich_outputs
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import class_report
from sample_class import sample_class


def html_problems(markup: str, *, document: bool = False) -> list[str]:
    """html5lib's parse errors for `markup` (a whole page, or a fragment as a cell output is), one line
    each."""
    parser = html5lib.HTMLParser(strict=False)
    if document:
        parser.parse(markup)
    else:
        parser.parseFragment(markup, container="div")
    lines = markup.splitlines()
    problems = []
    for (line, column), code, data in parser.errors:
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        near = source[max(0, column - 60) : column + 20]
        problems.append(f"{line}:{column} {code} {data or ''} near …{near}…")
    return problems


def svg_problems(markup: str) -> list[str]:
    """An SVG output must be well-formed XML (Jupyter shows it as an image)."""
    try:
        ET.fromstring(markup)
    except ET.ParseError as error:
        return [f"not well-formed XML: {error}"]
    return []


def test_the_parser_rejects_the_quote_that_froze_jupyterlab() -> None:
    """Does the check catch a CSS font name in quotes inside a single-quoted style attribute, and pass its
    fix?"""
    broken = "<table><tr><td style='font-family:Menlo,'Noto Sans Mono CJK SC',monospace'>x</td></tr></table>"
    fixed = (
        '<table><tr><td style="font-family:Menlo,&#39;Noto Sans Mono CJK SC&#39;,monospace">'
        "x</td></tr></table>"
    )
    assert any("attribute" in problem for problem in html_problems(broken))
    assert html_problems(fixed) == []
    assert svg_problems("<svg><text x='1'>a</svg>") != [] and svg_problems("<svg><text>a</text></svg>") == []


@pytest.mark.slow
@pytest.mark.parametrize(("checkpoint_id", "tree"), RUNS)
def test_every_notebook_output_parses_without_an_error(checkpoint_id: str, tree: str) -> None:
    """As the repository shows it and as run in a fresh practice folder, does every HTML output parse cleanly,
    and every SVG as XML?"""
    nb = executed(checkpoint_id, tree)
    problems = [
        f"{where}: {problem}"
        for where, markup in rich_outputs(nb, "text/html")
        for problem in html_problems(markup)
    ]
    problems += [
        f"{where}: {problem}"
        for where, markup in rich_outputs(nb, "image/svg+xml")
        for problem in svg_problems(markup)
    ]
    assert problems == []
    assert any(True for _ in rich_outputs(nb, "text/html")), "no HTML output to check"


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_class_report_parses_as_a_document_without_an_error(
    real_course: Course, each_checkpoint: Checkpoint, version: str
) -> None:
    """Does each version of the class report, for a class of every kind of learner, parse as one clean
    page?"""
    records, mutations = sample_class(real_course, each_checkpoint)
    page = class_report.render(real_course, records, mutations, version=version)
    assert page.startswith("<!DOCTYPE html>")
    assert html_problems(page, document=True) == []
