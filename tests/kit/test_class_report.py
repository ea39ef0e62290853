"""The class report: the same figures as the terminal and the gradebook, one scale, optional labs apart,
charts with a title and a text table, the course language, and two versions (one safe to post)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import html5lib
import pytest
from pi_course_kit.cli import main
from pi_course_kit.core import i18n
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import class_report, cli, gradebook, mutation_map, texts
from pi_course_kit.instructor.grade.statistics import statistics
from sample_class import SECRET_LEARNER, sample_class

NS = {"h": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}


def parsed(page: str) -> ET.Element:
    """The page as an ElementTree, parsed as a browser parses it."""
    root: ET.Element = html5lib.parse(page)
    return root


def text_of(node: ET.Element | None) -> str:
    """All the text inside `node` ("" for no node)."""
    return "".join(node.itertext()).strip() if node is not None else ""


def one(root: ET.Element, path: str) -> ET.Element:
    """The first element at `path` (namespaces h: HTML, s: SVG); fails the test when there is none."""
    found = root.find(path, NS)
    assert found is not None, path
    return found


def cards(page: str) -> dict[str, str]:
    """Each card's label -> the value in bold."""
    return {
        (card.text or "").strip(): text_of(card.find("h:b", NS))
        for card in parsed(page).iterfind(".//h:div[@class='card']", NS)
    }


@pytest.fixture(autouse=True)
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report in the course's language (the kit's tests otherwise read English)."""
    monkeypatch.setenv(i18n.LANG_ENV, "zh_CN")


#: (checkpoint id, version) -> the page for the sample class: drawing the charts is the slow part.
_pages: dict[tuple[str, str], str] = {}


def render(course: Course, checkpoint: Checkpoint, version: str = class_report.INSTRUCTOR) -> str:
    """The report of the sample class of `checkpoint` (rendered once per session and version)."""
    key = (checkpoint.id, version)
    if key not in _pages:
        records, mutations = sample_class(course, checkpoint)
        _pages[key] = class_report.render(course, records, mutations, version=version)
    return _pages[key]


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_an_empty_batch_gives_a_clean_page_that_says_so(real_course: Course, version: str) -> None:
    """With no record at all, does each version still parse cleanly and say that nothing was graded?"""
    page = class_report.render(real_course, [], version=version)
    parser = html5lib.HTMLParser(strict=False)
    parser.parse(page)
    assert parser.errors == [] and texts.NOTHING_GRADED in page and "<svg" not in page


def test_every_word_of_the_page_is_translated() -> None:
    """Is every msgid the page looks up translated in the zh_CN catalog?"""
    assert [m for m in class_report.msgids() if texts._(m) == m] == []


def test_cards_terminal_and_gradebook_give_the_same_figures(
    real_course: Course, each_checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Do the report's cards, the terminal summary and the CSV gradebook agree: learners, graded, mean,
    scale?"""
    records, _ = sample_class(real_course, each_checkpoint)
    figures = statistics(real_course, records)
    shown = cards(render(real_course, each_checkpoint))
    assert shown[texts._(class_report.WORDS["learners"])] == str(len(records)) == str(figures.learners)
    assert shown[texts._(class_report.WORDS["graded"])] == str(figures.graded)
    assert shown[texts._(class_report.WORDS["mean"])] == f"{figures.mean:g} / {figures.required_max:g}"
    cli._print_summary(real_course, records)
    terminal = capsys.readouterr().out
    # The terminal speaks the same language as the page (the course's, here).
    head = i18n._("class: {folders} folder(s), {graded} graded: {statuses}").split("{statuses}")[0]
    assert terminal.splitlines()[0].startswith(head.format(folders=len(records), graded=figures.graded))
    mean = i18n._(
        "  mean score {mean:g}/{most:g} over all {learners} learner(s) (a submission that could not be "
        "scored counts 0)"
    )
    assert mean.format(mean=figures.mean, most=figures.required_max, learners=len(records)) in terminal
    gradebook.write_csv(tmp_path / "grades.csv", real_course, records)
    with (tmp_path / "grades.csv").open(encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(records)
    assert round(sum(float(row["points"]) for row in rows) / len(rows), 2) == figures.mean


def test_a_submission_that_cannot_run_is_a_zero_everywhere(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """Is the syntax-error learner in the distribution (first band), in the mean and listed at 0?"""
    records, _ = sample_class(real_course, each_checkpoint)
    figures = statistics(real_course, records)
    assert sum(count for _, _, count in figures.bands()) == len(records)
    assert figures.bands()[0][2] >= 4  # untouched, syntax error, timeout, not a folder
    scored = [record for record in records if record.status == "error"]
    assert scored and figures.scores[records.index(scored[0])] == 0.0
    page = render(real_course, each_checkpoint)
    row = next(r for r in parsed(page).iterfind(".//h:tr", NS) if "syntax-error" in text_of(r))
    assert f"0 / {figures.required_max:g}" in text_of(row)


def test_one_scale_in_every_place(real_course: Course, each_checkpoint: Checkpoint) -> None:
    """Are the mean, each learner's points, the bands and the axis all out of the required labs' points?"""
    records, _ = sample_class(real_course, each_checkpoint)
    page = render(real_course, each_checkpoint)
    scale = sum(lab.points for lab in each_checkpoint.labs if not lab.optional)
    assert cards(page)[texts._(class_report.WORDS["mean"])].endswith(f" / {scale:g}")
    learners = one(parsed(page), ".//h:section[@id='learners']//h:table")
    points = [text_of(row.findall("h:td", NS)[2]) for row in learners.iterfind(".//h:tbody/h:tr", NS)]
    assert len(points) == len(records) and all(p.endswith(f" / {scale:g}") for p in points[:-1])
    assert statistics(real_course, records).bands()[-1][1] == (scale or 1.0)
    assert texts.score_axis(scale) in page and texts.score_axis(scale + 1) not in page


def test_optional_labs_are_shown_apart_and_never_lead_the_failed_tests(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """Are optional labs in their own section, and are only required labs' tests in the most-failed table?"""
    page = render(real_course, each_checkpoint, class_report.INSTRUCTOR)
    root = parsed(page)
    optional = [lab.id for lab in each_checkpoint.labs if lab.optional]
    assert (root.find(".//h:section[@id='optional']", NS) is not None) == bool(optional)
    failed = root.find(".//h:section[@id='failed']//h:table", NS)
    labs_listed = set()
    if failed is not None:
        for row in failed.iterfind(".//h:tbody/h:tr", NS):
            labs_listed.add(text_of(row.findall("h:td", NS)[2]).removeprefix("Lab "))
    assert labs_listed.isdisjoint(optional)


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_each_chart_has_a_title_and_a_text_table(
    real_course: Course, each_checkpoint: Checkpoint, version: str
) -> None:
    """Is each chart an image named by its visible caption, with a <title>, and followed by a table of its
    numbers?"""
    root = parsed(render(real_course, each_checkpoint, version))
    figures = list(root.iterfind(".//h:figure", NS))
    assert figures
    for figure in figures:
        caption = figure.find("h:figcaption", NS)
        svg = figure.find("s:svg", NS)
        assert caption is not None and svg is not None and text_of(caption)
        assert svg.get("role") == "img" and svg.get("aria-labelledby") == caption.get("id")
        assert text_of(svg.find("s:title", NS)) == text_of(caption)
    tables = [text_of(t) for t in root.iterfind(".//h:table", NS)]
    assert len(tables) >= len(figures)


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_the_page_reads_on_a_phone_and_speaks_the_course_language(
    real_course: Course, each_checkpoint: Checkpoint, version: str
) -> None:
    """Does each version have a viewport tag, lang="zh-CN", and no English word of the report's own?"""
    page = render(real_course, each_checkpoint, version)
    root = parsed(page)
    assert one(root, ".//h:meta[@name='viewport']").get("content") == "width=device-width, initial-scale=1"
    assert root.get("lang") == "zh-CN"
    # Every piece of text the page shows on its own: a word the report forgot to translate would be one.
    pieces = {(piece or "").strip() for node in root.iter() for piece in (node.text, node.tail)}
    assert [msgid for msgid in class_report.msgids() if msgid in pieces] == []
    assert texts._(class_report.WORDS["title"]) in page


def solution_only_lines(course: Course, checkpoint: Checkpoint) -> list[str]:
    """Lines of the solution's teaching files that the starter does not have: the code a learner writes."""
    lines = []
    for name in checkpoint.teaching_files:
        starter = (course.root / checkpoint.starter / name).read_text(encoding="utf-8").splitlines()
        solution = (course.root / checkpoint.solution / name).read_text(encoding="utf-8").splitlines()
        known = {line.strip() for line in starter}
        lines += [line.strip() for line in solution if len(line.strip()) >= 16 and line.strip() not in known]
    return lines


def test_the_class_version_holds_no_solution_code_and_no_learner(
    real_course: Course, each_checkpoint: Checkpoint
) -> None:
    """Is the class version free of solution lines, diffs, diagnose commands and learner ids, and marked
    safe?"""
    page = render(real_course, each_checkpoint, class_report.CLASS)
    text = text_of(parsed(page))
    leaked = [line for line in solution_only_lines(real_course, each_checkpoint) if line in text]
    assert leaked == []
    assert SECRET_LEARNER not in page and "syntax-error" not in page and "pi-course diagnose" not in page
    assert texts._(class_report.WORDS["class_banner"]) in text


def test_the_instructors_version_says_do_not_share(real_course: Course, each_checkpoint: Checkpoint) -> None:
    """Does the instructor's version say "do not share" in its title and banner, and carry the learners and
    diffs?"""
    page = render(real_course, each_checkpoint, class_report.INSTRUCTOR)
    root = parsed(page)
    mark = texts._(class_report.WORDS["instructor_mark"])
    assert mark in text_of(one(root, ".//h:title"))
    banner = one(root, ".//h:p[@role='note']")
    assert texts._(class_report.WORDS["instructor_banner"]) == text_of(banner)
    assert SECRET_LEARNER in page
    if each_checkpoint.mutations and each_checkpoint.labs:
        one(root, ".//h:pre")


def test_grade_writes_both_versions_where_asked(
    real_course: Course, each_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Do --report and --class-report write the instructor's and the class version, each to its own file?"""
    records, _ = sample_class(real_course, each_checkpoint)
    args = argparse.Namespace(
        json=None,
        csv=None,
        junit=None,
        feedback=None,
        classroom=None,
        checkpoint=None,
        report=tmp_path / "instructor.html",
        class_report=tmp_path / "class.html",
        no_mutations=True,
        mutation_cache=None,
    )
    cli.write_outputs(args, real_course, records)
    assert texts._(class_report.WORDS["instructor_mark"]) in (tmp_path / "instructor.html").read_text(
        encoding="utf-8"
    )
    shared = (tmp_path / "class.html").read_text(encoding="utf-8")
    assert texts._(class_report.WORDS["class_banner"]) in shared and SECRET_LEARNER not in shared


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_the_page_is_titled_with_the_whole_courses_title(real_course: Course, version: str) -> None:
    """Do the <title> and <h1> carry course.toml's [course] title in the run's language, and no
    checkpoint's?"""
    written = tomllib.loads((real_course.root / "course.toml").read_text(encoding="utf-8"))["course"]
    title = written["title_en"] if i18n.wants_english() else written["title"]
    checkpoint = real_course.checkpoints[-1]
    root = parsed(render(real_course, checkpoint, version))
    for heading in (text_of(one(root, ".//h:title")), text_of(one(root, ".//h:h1"))):
        assert title in heading and checkpoint.title not in heading


def outputs_args(tmp_path: Path, **options: object) -> argparse.Namespace:
    """What `grade --report FILE` passes to write_outputs, with `options` on top."""
    args = argparse.Namespace(
        json=None,
        csv=None,
        junit=None,
        feedback=None,
        classroom=None,
        checkpoint=None,
        report=tmp_path / "instructor.html",
        class_report=None,
        mutations=False,
        no_mutations=False,
        mutation_cache=tmp_path / "cache",
    )
    vars(args).update(options)
    return args


def test_the_mutation_step_runs_only_when_asked(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Does `--report` alone write the page without running a single mutation (no links), and --help say what
    --mutations costs?"""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a mutation ran without --mutations")

    monkeypatch.setattr(mutation_map, "compute", refuse)
    records, _ = sample_class(course, checkpoint)
    cli.write_outputs(outputs_args(tmp_path), course, records)
    page = (tmp_path / "instructor.html").read_text(encoding="utf-8")
    assert 'href="#mutation-' not in page and not (tmp_path / "cache").exists()
    monkeypatch.setenv(i18n.LANG_ENV, "en")
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit):
        main(["grade", "--help"])
    helped = " ".join(shown.getvalue().split())
    assert "--mutations" in helped and "once per mutation" in helped and "progress bar" in helped


def test_the_mutation_step_says_what_it_costs_and_shows_its_progress(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --mutations and no cached map, is the step announced with its count and an estimate, does a
    progress bar reach every mutation, and is a second report silent (cached)?"""
    monkeypatch.setenv(i18n.LANG_ENV, "en")
    records, _ = sample_class(course, checkpoint)
    for record in records:
        record.seconds = 1.5
    shown = io.StringIO()
    cli.write_outputs(outputs_args(tmp_path, mutations=True), course, records)  # stderr: not captured here
    assert 'href="#mutation-' in (tmp_path / "instructor.html").read_text(encoding="utf-8")
    for cached in (tmp_path / "cache").iterdir():
        cached.unlink()
    found = class_report.mutations_for(course, records, tmp_path / "cache", shown)
    count = len(checkpoint.mutations)
    announced = shown.getvalue()
    assert f"running the {count} named mutations of checkpoint {checkpoint.id}" in announced
    assert f"about {count * 1.5 / 60:.1f} min ({count} x 1.5s" in announced
    assert f"{count}/{count}" in announced  # the progress bar, finished
    assert found and all(names for names in found.values())
    again = io.StringIO()
    assert class_report.mutations_for(course, records, tmp_path / "cache", again) == found
    assert again.getvalue() == ""
