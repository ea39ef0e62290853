"""Compact notebook views: JSON collapsed when long, left-aligned tables, grouped failures, the SVG
diagram."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from pi_course_kit.core import i18n, records
from pi_course_kit.notebook.checks import CheckReport
from pi_course_kit.notebook.views import JsonView, Table
from pi_course_kit.teaching.diagram import Stage, flow


def test_short_json_is_shown_open_and_long_json_collapsed(chinese: None) -> None:
    """Is a short value a monospace <pre>, and a value longer than 12 lines a <details> saying how long it
    is?"""
    short = JsonView({"value": "Pi"})._repr_html_()
    assert short.startswith("<pre") and "monospace" in short and "<details>" not in short
    long = JsonView({f"k{i}": i for i in range(20)}, "twenty keys")._repr_html_()
    assert long.startswith("<details>") and "twenty keys" in long and "（22 行，点击展开）" in long
    assert str(JsonView({"timestamp": 1_700_000_000_000})) == '{\n  "timestamp": "<int ms>"\n}'


def test_table_cells_are_left_aligned_and_none_is_a_dash() -> None:
    """Are header and cells left-aligned, and is None shown as a dash instead of the string "None"?"""
    view = Table(["a", "b"], [["x", None], ["y", {"k": 1}]])
    page = view._repr_html_()
    assert page.count("text-align:left") == 6 and "None" not in page and "—" in page
    assert str(view).splitlines() == ["a  b       ", "x  —       ", 'y  {"k": 1}']


def report(tests: list[dict[str, Any]]) -> CheckReport:
    labs = [{"id": "1.1", "passed": 0, "total": len(tests), "status": "not started", "title": "t"}]
    return CheckReport(
        "1.1",
        "python -m pytest -m lab1_1",
        "./pi_course",
        1,
        [records.LabSummary.from_json(row) for row in labs],
        [records.TestRecord.from_json(test) for test in tests],
        None,
    )


def test_repeated_failure_messages_are_shown_once_with_their_count(chinese: None) -> None:
    """When many tests fail with the same message, does the report show it once with ×N, in Chinese?"""
    same = [
        {"nodeid": f"t::{i}", "outcome": "failed", "message": "Lab 1.1 not implemented: f"} for i in range(5)
    ]
    other = [{"nodeid": "t::x", "outcome": "failed", "message": "other"}]
    text = str(report(same + other))
    assert "✗ ×5 Lab 1.1 not implemented: f" in text and "✗ ×1 other" in text
    assert text.count("not implemented") == 1 and "Lab 1.1：0/6 未开始" in text


def test_check_tables_use_the_reports_status_words_in_the_course_language(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In Chinese, does each row say its status as `pi-course check` does: blocker and optional flag
    included?"""
    monkeypatch.setenv(i18n.LANG_ENV, "zh_CN")
    monkeypatch.setattr(i18n, "_current", None)
    labs: list[dict[str, Any]] = [
        {"id": "1.1", "passed": 2, "total": 2, "status": "done", "title": "a"},
        {"id": "1.2", "passed": 0, "total": 3, "status": "blocked", "blocked_by": "1.1", "title": "b"},
        {"id": "1.3", "passed": 0, "total": 1, "status": "not started", "optional": True, "title": "c"},
    ]
    rows = [records.LabSummary.from_json(row) for row in labs]
    shown = CheckReport("1.2", "python -m pytest -m lab1_2", "./pi_course", 1, rows, [], None)
    text, page = str(shown), shown._repr_html_()
    assert "Lab 1.2：0/3 被 1.1 阻塞" in text.splitlines()
    for words in ("已完成", "被 1.1 阻塞", "未开始（选做）"):
        assert f"  {words}  " in text and f'font-weight:bold">{words}</td>' in page
    for row in labs:
        report_words = records.status_text(
            str(row["status"]), row.get("blocked_by"), bool(row.get("optional"))
        )
        assert report_words in text


def test_diagram_is_valid_svg_with_each_stage_and_each_exit_labelled() -> None:
    """Is the walk drawn as parseable SVG holding every stage, every exit and the lab under each?"""
    diagram = flow(
        [
            Stage("lookup", "registry.get", "Lab A", exit="unknown", exit_lab="Lab C"),
            Stage("parse", "schema.parse", "Lab B", exit="invalid", exit_lab="Lab B"),
            Stage("result", "message", "Lab C"),
        ],
        sink="failed result",
        sink_lab="Lab C",
    )
    root = ET.fromstring(diagram._repr_svg_())
    texts = [node.text for node in root.iter("{http://www.w3.org/2000/svg}text")]
    for label in ("lookup", "parse", "result", "✗ unknown", "✗ invalid", "failed result", "Lab A", "Lab B"):
        assert label in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) == 6
    assert (
        str(diagram)
        == "lookup → parse → result（失败出口：lookup ✗ unknown; parse ✗ invalid ⇒ failed result）"
    )
