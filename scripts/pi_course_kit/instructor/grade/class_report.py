"""The class report: one static HTML page with the score distribution, each lab's completion and the most
failed tests, each linked to the named mutation that usually explains it.

Two versions. The instructor's holds each learner's score and the diff of every mutation it names (the
reference solution's code), so it says, on the page and in its title, not to share it. The class
version holds neither and can be posted to the learners.

Every figure comes from `statistics`, as the terminal summary's do; every word goes through the
grading catalog, so the page speaks the course's language.
"""

from __future__ import annotations

import json
import statistics as stats_module
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from markupsafe import Markup
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.markup import Child, el, fragment, trusted
from pi_course_kit.instructor.grade import charts, mutation_map, texts
from pi_course_kit.instructor.grade.gradebook import SCORED, LearnerRecord, points_of
from pi_course_kit.instructor.grade.mutation_map import MutationMap
from pi_course_kit.instructor.grade.questions import question
from pi_course_kit.instructor.grade.statistics import ClassStatistics, main_checkpoint, statistics
from pi_course_kit.instructor.mutate import mutation_diff

TOP = 10
INSTRUCTOR, CLASS = "instructor", "class"
#: The two versions of the page: the instructor's (do not share) and the class's (safe to post).
VERSIONS = (INSTRUCTOR, CLASS)

#: Every word of the page, as a msgid of the grading catalog (English; translated when rendered).
WORDS = {
    "title": "Class grading report",
    "instructor_mark": "instructor's version, do not share",
    "class_mark": "class version",
    "instructor_banner": "Instructor's version: it holds every learner's score and diffs of the reference "
    "solution. Do not share it with learners; the class version (--class-report) is the one to post.",
    "class_banner": "Class version: no solution code, no learner's name or score. Safe to post to the class.",
    "learners": "Learners",
    "graded": "Graded",
    "mean": "Mean score (required labs)",
    "extra": "Extra credit (optional labs)",
    "extra_value": "+{mean} on average (at most +{most})",
    "complete": "Every required lab done",
    "counting": "Every learner of the batch is counted. A submission that could not be scored (it does "
    "not import, it ran out of time, it was not a practice folder) is a 0 in every figure below. Scores "
    "are out of {points}, the points of the required labs; optional labs add extra credit on top.",
    "statuses": "Submissions by status",
    "distribution": "Score distribution",
    "distribution_title": "Required-lab scores of {learners} learners (out of {points})",
    "band": "Score",
    "band_learners": "Number of learners",
    "required": "Required labs",
    "rates_title": "Share of the class that finished each required lab",
    "lab": "Lab",
    "worth": "Worth",
    "credit": "Credit",
    "finished": "Finished",
    "share": "Share",
    "optional": "Optional labs (extra credit)",
    "optional_note": "Optional labs are not part of the {points} points: each adds extra credit. "
    "Their tests are not in the list of most failed tests.",
    "failed": "Most failed tests of the required labs",
    "failed_note": "Ranked first by the learners who had started the lab and still fail the test (a "
    "real mistake, not an untouched stub), then by everyone who fails it; a submission that could not "
    "run fails every test. A common mistake is a named mutation, a typical wrong implementation written "
    "by the course's authors, that makes the test fail.",
    "test": "Test and the question it asks",
    "failed_count": "Fail it",
    "failed_started": "Started the lab, still fail it",
    "mistake": "Common mistake",
    "none_failed": "Every learner passes every test of the required labs.",
    "mutations": "The named mutations above",
    "reproduce": "Reproduce it:",
    "diff_note": "The diff below is the reference solution's code: keep this page to instructors.",
    "each": "Each learner",
    "learner": "Learner",
    "status": "Status",
    "points": "Required points",
    "extra_points": "Extra credit",
    "notes": "Notes",
}


def _(key: str, **values: object) -> str:
    """A word of the page in the grading language, with its {placeholders} filled."""
    text = texts._(WORDS[key])
    return text.format(**values) if values else text


def msgids() -> list[str]:
    """Every msgid the page and its mutation step look up (the catalog must translate each)."""
    return [*WORDS.values(), *mutation_msgids()]


@dataclass(frozen=True)
class FailedTest:
    """A pristine test and how many learners fail it: all of them, and those who had started its lab."""

    nodeid: str
    lab: str
    failed: int
    failed_started: int
    started: int
    #: A held-out test: the class version names it only by its lab.
    held_out: bool = False


def most_failed(
    records: Sequence[LearnerRecord], labs: Sequence[str] | None = None, top: int = TOP
) -> list[FailedTest]:
    """The tests (of `labs`, default all) failed most by learners who had started their lab, then overall.

    Every learner counts: a test fails for a learner unless their run passed it, so a submission that
    could not run fails them all (without having started any lab).
    """
    labs_of: dict[str, str] = {}
    held_out: set[str] = set()
    for record in records:
        for verdict in record.tests:
            labs_of.setdefault(verdict.nodeid, verdict.lab)
            if verdict.held_out:
                held_out.add(verdict.nodeid)
    nodes = [node for node, lab in labs_of.items() if labs is None or lab in labs]
    order = {node: index for index, node in enumerate(nodes)}
    failed: Counter[str] = Counter()
    failed_started: Counter[str] = Counter()
    started: Counter[str] = Counter()
    for record in records:
        begun = {score.id for score in record.labs if score.passed > 0}
        passed = {v.nodeid for v in record.tests if v.outcome == "passed"}
        for node in nodes:
            was_started = labs_of[node] in begun
            started[node] += was_started
            if node not in passed:
                failed[node] += 1
                failed_started[node] += was_started
    ranked = sorted(
        (node for node in nodes if failed[node]),
        key=lambda node: (-failed_started[node], -failed[node], order[node]),
    )
    return [
        FailedTest(node, labs_of[node], failed[node], failed_started[node], started[node], node in held_out)
        for node in ranked[:top]
    ]


STYLE = """
:root { color-scheme: light; }
body { font-family: system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif;
       margin: 2rem auto; max-width: 64rem; color: #1f2328; background: #ffffff; line-height: 1.5;
       padding: 0 1rem; overflow-wrap: anywhere; }
h1 { font-size: 1.6rem; line-height: 1.3; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d0d7de; }
.banner { border-radius: 6px; padding: .6rem 1rem; font-weight: 600; }
.banner.instructor { background: #ffebe9; color: #82071e; border: 2px solid #cf222e; }
.banner.class { background: #dafbe1; color: #116329; border: 1px solid #1a7f37; }
.note { color: #57606a; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { border-bottom: 1px solid #d0d7de; padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.n { text-align: right; white-space: nowrap; } td.k { white-space: nowrap; }
/* A header wraps between words, never inside one ("Wort h"); long ids still wrap anywhere. */
th { overflow-wrap: normal; word-break: normal; hyphens: manual; }
code { font-size: .85rem; word-break: break-all; }
pre { background: #f6f8fa; padding: .6rem; white-space: pre-wrap; overflow-wrap: anywhere;
      font-size: .85rem; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; }
.card { background: #f6f8fa; border-radius: 6px; padding: .6rem 1rem; min-width: 9rem; }
.card b { display: block; font-size: 1.4rem; }
figure { margin: 1rem 0; } figcaption { font-weight: 600; margin-bottom: .4rem; }
.chart-and-table { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.chart-and-table figure { flex: 1 1 24rem; min-width: 0; }
.chart-and-table table { flex: 0 1 14rem; width: auto; }
svg { max-width: 100%; height: auto; display: block; }
@media (max-width: 40rem) {
  body { margin: 1rem auto; }
  .cards { display: grid; grid-template-columns: 1fr 1fr; gap: .6rem; } .card { min-width: 0; }
  .chart-and-table table { flex: 1 1 100%; }
  table.stack thead { display: none; }
  table.stack, table.stack tbody, table.stack tr, table.stack td { display: block; width: 100%; }
  table.stack tr { border-bottom: 1px solid #d0d7de; padding: .3rem 0; }
  table.stack td { border: none; padding: .1rem 0; text-align: left; white-space: normal; }
  table.stack td::before { content: attr(data-label) "："; color: #57606a; }
}
"""


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Child]],
    numeric: Sequence[int] = (),
    *,
    stack: bool = True,
    keep: Sequence[int] = (),
) -> Markup:
    """A table; with `stack`, its rows become labelled lines on a phone (a wide table cannot fit there).

    Cells in the `numeric` columns align right; cells in the `keep` columns do not wrap.
    """
    head = el("thead", el("tr", [el("th", header, scope="col") for header in headers]))
    body = el(
        "tbody",
        [
            el(
                "tr",
                [
                    el(
                        "td",
                        cell,
                        data_label=headers[i] if stack else None,
                        class_="n" if i in numeric else "k" if i in keep else None,
                    )
                    for i, cell in enumerate(row)
                ],
            )
            for row in rows
        ],
    )
    return el("table", head, body, class_="stack" if stack else None)


def _section(name: str, heading: str, *content: Child) -> Markup:
    """One part of the page: its heading and content, addressable as #name."""
    return el("section", el("h2", heading), *content, id=name)


def _cards(stats: ClassStatistics) -> Markup:
    cards = [
        (_("learners"), str(stats.learners)),
        (_("graded"), str(stats.graded)),
        (_("mean"), f"{stats.mean:g} / {stats.required_max:g}"),
        (_("complete"), str(stats.complete)),
    ]
    if stats.extra_max:
        cards.append(
            (_("extra"), _("extra_value", mean=f"{stats.mean_extra:g}", most=f"{stats.extra_max:g}"))
        )
    return el(
        "div", [el("div", label, el("b", value), class_="card") for label, value in cards], class_="cards"
    )


def _distribution(stats: ClassStatistics) -> Markup:
    if not stats.learners:
        return el("p", texts.NOTHING_GRADED)
    title = _("distribution_title", learners=stats.learners, points=f"{stats.required_max:g}")
    bands = stats.bands()
    chart = charts.score_histogram(
        bands,
        texts.score_axis(stats.required_max),
        texts.LEARNERS,
        title=title,
        caption_id="distribution-title",
    )
    rows: list[list[Child]] = [[f"{low:g}–{high:g}", count] for low, high, count in bands]
    return el(
        "div",
        el("figure", el("figcaption", title, id="distribution-title"), chart),
        _table([_("band"), _("band_learners")], rows, numeric=(1,), stack=False),
        class_="chart-and-table",
    )


def _lab_rows(stats: ClassStatistics, optional: bool) -> list[list[Child]]:
    return [
        [
            f"Lab {lab.id} {lab.title}",
            f"{lab.points:g}",
            texts.credit_rule(lab.credit),
            f"{lab.done} / {lab.learners}",
            f"{lab.rate:.0%}",
        ]
        for lab in stats.labs
        if lab.optional == optional
    ]


def _labs(stats: ClassStatistics) -> Markup:
    required = [lab for lab in stats.labs if not lab.optional]
    optional = [lab for lab in stats.labs if lab.optional]
    headers = [_("lab"), _("worth"), _("credit"), _("finished"), _("share")]
    out: list[Markup] = []
    if required and stats.learners:
        chart = charts.pass_rates(
            [f"Lab {lab.id}" for lab in required],
            [lab.rate for lab in required],
            texts.FINISHED_AXIS,
            title=_("rates_title"),
            caption_id="rates-title",
        )
        out.append(el("figure", el("figcaption", _("rates_title"), id="rates-title"), chart))
    out.append(_table(headers, _lab_rows(stats, False), numeric=(1, 3, 4)))
    if not optional:
        return _section("labs", _("required"), out)
    return fragment(
        _section("labs", _("required"), out),
        _section(
            "optional",
            _("optional"),
            el("p", _("optional_note", points=f"{stats.required_max:g}"), class_="note"),
            _table(headers, _lab_rows(stats, True), numeric=(1, 3, 4)),
        ),
    )


def _description(checkpoint: Checkpoint, name: str) -> str:
    return next((m.description for m in checkpoint.mutations if m.name == name), "")


def _failed(
    course: Course,
    checkpoint: Checkpoint | None,
    records: Sequence[LearnerRecord],
    mutations: MutationMap,
    version: str,
) -> tuple[Markup, list[str]]:
    """The most failed tests of the required labs, and the mutations they name (in order)."""
    required = [lab.id for lab in checkpoint.labs if not lab.optional] if checkpoint else None
    failing = most_failed(records, required)
    note = el("p", _("failed_note"), class_="note")
    if not failing:
        empty = _("none_failed") if records else texts.NOTHING_GRADED
        return _section("failed", _("failed"), note, el("p", empty)), []
    linked: list[str] = []
    rows: list[list[Child]] = []
    for rank, test in enumerate(failing, 1):
        # The class version is learner-visible: a held-out test is named by its lab alone (no name, no
        # question, no mistake that would say what it checks).
        hidden = test.held_out and version != INSTRUCTOR
        asked = question(course, checkpoint, test.nodeid) if checkpoint and not hidden else ""
        names = [
            name
            for name in ([] if hidden else mutations.get(test.nodeid, [])[:2])
            if checkpoint and _description(checkpoint, name)
        ]
        linked += [name for name in names if name not in linked]
        mistakes = [
            fragment(
                el("br") if index else None,
                el("a", name, href=f"#mutation-{name}") if version == INSTRUCTOR else el("code", name),
                texts.labelled("", _description(checkpoint, name) if checkpoint else ""),
            )
            for index, name in enumerate(names)
        ]
        rows.append(
            [
                rank,
                texts.held_out_test(test.lab)
                if hidden
                else fragment(el("code", test.nodeid), el("br") if asked else None, asked),
                f"Lab {test.lab}",
                f"{test.failed} / {len(records)}",
                f"{test.failed_started} / {test.started}",
                fragment(mistakes) if mistakes else "—",
            ]
        )
    headers = ["#", _("test"), _("lab"), _("failed_count"), _("failed_started"), _("mistake")]
    return _section("failed", _("failed"), note, _table(headers, rows, numeric=(0, 3, 4), keep=(2,))), linked


def _mutations(course: Course, checkpoint: Checkpoint, names: Sequence[str]) -> Markup:
    out: list[Markup] = [el("p", _("diff_note"), class_="note")]
    for name in names:
        mutation = checkpoint.mutation(name)
        diff = "\n".join(mutation_diff(course, checkpoint, mutation))
        out += [
            el("h3", name, id=f"mutation-{name}"),
            el("p", mutation.description),
            el("p", _("reproduce"), " ", el("code", f"pi-course diagnose {checkpoint.id} {name}")),
            el("pre", diff),
        ]
    return _section("mutations", _("mutations"), out)


def _learners(course: Course, records: Sequence[LearnerRecord]) -> Markup:
    rows = []
    for record in records:
        p = points_of(course, record)
        notes = "; ".join([*([record.message] if record.message else []), *record.flags])
        rows.append(
            [
                record.learner,
                texts.record_status(record.status),
                f"{p.points:g} / {p.max_points:g}",
                f"+{p.extra:g}",
                notes or "—",
            ]
        )
    headers = [_("learner"), _("status"), _("points"), _("extra_points"), _("notes")]
    return _section("learners", _("each"), _table(headers, rows, numeric=(2, 3)))


def render(
    course: Course,
    records: Sequence[LearnerRecord],
    mutations: MutationMap | None = None,
    *,
    version: str = INSTRUCTOR,
) -> str:
    """The whole page as HTML text; `mutations` maps test node ids to the mutations that fail them."""
    if version not in VERSIONS:
        raise ValueError(f"unknown report version {version!r}; one of {', '.join(VERSIONS)}")
    mutations = mutations or {}
    checkpoint = main_checkpoint(course, records)
    stats = statistics(course, records)
    instructor = version == INSTRUCTOR
    mark = _("instructor_mark") if instructor else _("class_mark")
    # The whole course's title (course.toml's [course] title, or title_en in English), never one checkpoint's.
    heading = f"{_('title')} · {course.shown_title}"
    statuses = texts.list_separator().join(
        f"{texts.record_status(k)} {v}" for k, v in sorted(stats.statuses.items())
    )
    failed, linked = _failed(course, checkpoint, records, mutations, version)
    body: list[Markup | None] = [
        el(
            "p",
            _("instructor_banner" if instructor else "class_banner"),
            class_=f"banner {version}",
            role="note",
        ),
        el("h1", heading),
        el("p", texts.labelled(f"{texts.CHECKPOINT} {checkpoint.id}", checkpoint.title))
        if checkpoint
        else None,
        _cards(stats),
        el("p", _("counting", points=f"{stats.required_max:g}"), class_="note"),
        el("p", texts.labelled(_("statuses"), statuses)) if statuses else None,
        _section("distribution", _("distribution"), _distribution(stats)),
        _labs(stats),
        failed,
        _mutations(course, checkpoint, linked) if instructor and linked and checkpoint else None,
        _learners(course, records) if instructor else None,
    ]
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        # An instructor's page may end up on a web server by mistake: keep it out of search engines.
        el("meta", name="robots", content="noindex") if instructor else None,
        el("title", heading + texts.bracketed(mark)),
        # The stacked table's cell labels end with the language's colon (CSS content, a JSON-quoted string).
        el("style", trusted(STYLE.replace('"："', json.dumps(texts.labelled("", ""), ensure_ascii=False)))),
    )
    # One line per section, so that the page's source reads (and diffs) section by section.
    lines = [part for section in body if section is not None for part in (section, Markup("\n"))]
    page = el("html", head, el("body", Markup("\n"), lines), lang=texts.language().replace("_", "-"))
    return f"<!DOCTYPE html>\n{page}\n"


def write(
    path: Path,
    course: Course,
    records: Sequence[LearnerRecord],
    mutations: Mapping[str, list[str]] | None,
    *,
    version: str = INSTRUCTOR,
) -> None:
    """Write one version of the class report to `path`."""
    path.write_text(render(course, records, dict(mutations or {}), version=version), encoding="utf-8")


# -- the mutation map, computed where it is asked for -----------------------------------------------------


def run_estimate(records: Sequence[LearnerRecord], checkpoint_id: str) -> float | None:
    """Seconds one run of a checkpoint's tests took in this batch: the median of its graded learners' runs."""
    seconds = [
        r.seconds for r in records if r.checkpoint == checkpoint_id and r.status in SCORED and r.seconds > 0
    ]
    return stats_module.median(seconds) if seconds else None


def mutations_for(
    course: Course, records: Sequence[LearnerRecord], cache: Path | None = None, out: TextIO | None = None
) -> MutationMap:
    """The mutation map of every checkpoint graded in `records` (`grade --mutations`).

    A map already cached for the course's state is read at once. A missing one costs one run of the
    checkpoint's tests per named mutation: a line on `out` (stderr) says so first, with an estimate (the
    mutations times a learner's run in this batch), and a progress bar follows the runs.
    """
    stream = out if out is not None else sys.stderr
    found: MutationMap = {}
    for checkpoint_id in dict.fromkeys(r.checkpoint for r in records if r.checkpoint):
        checkpoint = course.checkpoint(checkpoint_id)
        hit = mutation_map.cached(course, checkpoint, cache)
        found.update(hit if hit is not None else _computed(course, checkpoint, records, cache, stream))
    return found


def _computed(
    course: Course, checkpoint: Checkpoint, records: Sequence[LearnerRecord], cache: Path | None, out: TextIO
) -> MutationMap:
    """Compute (and cache) one checkpoint's map, announced with its cost, under a progress bar."""
    count = len(checkpoint.mutations)
    folder = mutation_map.cache_path(course, checkpoint, cache).parent
    each = run_estimate(records, checkpoint.id)
    msgids = mutation_msgids()
    line = texts._(msgids[0] if each is None else msgids[1]).format(
        count=count,
        checkpoint=checkpoint.id,
        folder=folder,
        minutes=f"{count * each / 60:.1f}" if each is not None else "",
        seconds=f"{each:.1f}" if each is not None else "",
    )
    print(line, file=out, flush=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=out)) as progress:
        task = progress.add_task(checkpoint.id, total=count)

        def advance(done: int, total: int, name: str) -> None:
            progress.update(task, completed=done, total=total, description=f"{checkpoint.id} {name}")

        found = mutation_map.load_or_compute(course, checkpoint, cache, progress=advance)
        progress.update(task, completed=count, description=checkpoint.id)
    return found


def mutation_msgids() -> list[str]:
    """The msgids of the mutation step's announcement (the catalog must translate each)."""
    return [
        "class report: running the {count} named mutations of checkpoint {checkpoint} once, "
        "one test run each, to link failed tests to common mistakes (cached in {folder})",
        "class report: running the {count} named mutations of checkpoint {checkpoint} once, "
        "about {minutes} min ({count} x {seconds}s, a learner's run each), to link failed tests "
        "to common mistakes (cached in {folder})",
    ]
