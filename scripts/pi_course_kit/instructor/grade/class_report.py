"""The class report: one static HTML page with the score distribution, pass rate per lab and the most
failed tests, each linked to the named mutation that usually explains it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import charts, texts
from pi_course_kit.instructor.grade.grader import LearnerRecord
from pi_course_kit.instructor.grade.mutation_map import MutationMap
from pi_course_kit.instructor.grade.points import SCORED, points_of
from pi_course_kit.instructor.grade.questions import question
from pi_course_kit.instructor.mutate import mutation_diff

TOP = 10


@dataclass(frozen=True)
class FailedTest:
    """A pristine test and how many graded learners it failed: all of them, and those who had started its lab."""

    nodeid: str
    lab: str
    failed: int
    failed_started: int
    started: int


def most_failed(records: Sequence[LearnerRecord], top: int = TOP) -> list[FailedTest]:
    """The tests failed most often by learners who had started their lab (a real mistake, not a stub), then overall."""
    failed: Counter[str] = Counter()
    failed_started: Counter[str] = Counter()
    started: Counter[str] = Counter()
    labs: dict[str, str] = {}
    order: dict[str, int] = {}
    for record in records:
        if record.status not in SCORED:
            continue
        begun = {score.id for score in record.labs if score.passed > 0}
        for verdict in record.tests:
            node, lab = verdict["nodeid"], verdict["lab"]
            labs.setdefault(node, lab)
            order.setdefault(node, len(order))
            started[node] += lab in begun
            if verdict["outcome"] != "passed":
                failed[node] += 1
                failed_started[node] += lab in begun
    ranked = sorted(failed, key=lambda node: (-failed_started[node], -failed[node], order[node]))
    return [
        FailedTest(node, labs[node], failed[node], failed_started[node], started[node])
        for node in ranked[:top]
    ]


def _checkpoint_of(course: Course, records: Sequence[LearnerRecord]) -> Checkpoint | None:
    ids = Counter(record.checkpoint for record in records if record.checkpoint)
    return course.checkpoint(ids.most_common(1)[0][0]) if ids else None


STYLE = """
body { font-family: system-ui, "Noto Sans CJK SC", "PingFang SC", sans-serif; margin: 2rem auto; max-width: 64rem;
       color: #1d2430; line-height: 1.5; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d8dee8; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { border-bottom: 1px solid #e3e7ee; padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f5f9; } td.n { text-align: right; white-space: nowrap; }
code { font-size: .85rem; word-break: break-all; } pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; } .card { background: #f3f5f9; border-radius: 6px; padding: .6rem 1rem; }
.card b { display: block; font-size: 1.4rem; } svg { max-width: 100%; height: auto; }
"""


def render(course: Course, records: Sequence[LearnerRecord], mutations: MutationMap | None = None) -> str:
    """The whole page as HTML text; `mutations` maps test node ids to the mutations that fail them."""
    mutations = mutations or {}
    checkpoint = _checkpoint_of(course, records)
    graded = [record for record in records if record.status in SCORED]
    points = [points_of(course, record) for record in graded]
    maximum = max((p.max_points + p.max_extra for p in points), default=0.0)
    required = max((p.max_points for p in points), default=0.0)
    scores = [p.score for p in points]
    mean = sum(scores) / len(scores) if scores else 0.0
    statuses = Counter(texts.record_status(record.status) for record in records)
    out = [
        "<!DOCTYPE html>",
        f'<html lang="{escape(texts.language().replace("_", "-"))}"><head><meta charset="utf-8">',
        f"<title>班级评分报告 · {escape(course.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>班级评分报告 · {escape(course.title)}</h1>",
    ]
    if checkpoint:
        out.append(f"<p>{texts.CHECKPOINT} {escape(checkpoint.id)}：{escape(checkpoint.title)}</p>")
    out.append('<div class="cards">')
    for label, value in (
        ("提交", str(len(records))),
        ("已评分", str(len(graded))),
        ("平均分（含附加分）", f"{mean:.1f} / {required:g}"),
        ("全部完成", str(sum(record.status == "complete" for record in records))),
    ):
        out.append(f'<div class="card">{label}<b>{escape(value)}</b></div>')
    out.append("</div>")
    out.append("<p>" + "；".join(f"{escape(k)} {v}" for k, v in sorted(statuses.items())) + "</p>")

    out.append('<h2 id="distribution">分数分布</h2>')
    out.append(
        charts.score_histogram(scores, maximum, texts.score_axis(maximum), texts.LEARNERS)
        if graded
        else f"<p>{texts.NOTHING_GRADED}</p>"
    )

    out.append('<h2 id="labs">各实验完成率</h2>')
    lab_rows = checkpoint.labs if checkpoint else ()
    rates = []
    for lab in lab_rows:
        done = sum(1 for record in graded for s in record.labs if s.id == lab.id and s.status == "done")
        rates.append(done / len(graded) if graded else 0.0)
    if lab_rows and graded:
        out.append(charts.pass_rates([f"Lab {lab.id}" for lab in lab_rows], rates, texts.FINISHED_AXIS))
    out.append("<table><tr><th>实验</th><th>分值</th><th>计分</th><th>完成</th></tr>")
    for lab, rate in zip(lab_rows, rates, strict=True):
        optional = f"（{texts.OPTIONAL}）" if lab.optional else ""
        out.append(
            f"<tr><td>Lab {escape(lab.id)} {escape(lab.title)}{optional}</td><td class=n>{lab.points:g}</td>"
            f"<td>{texts.credit_rule(lab.credit)}</td><td class=n>{rate:.0%}</td></tr>"
        )
    out.append("</table>")

    failing = most_failed(records)
    out.append(f'<h2 id="failed">未通过最多的 {len(failing)} 个测试</h2>')
    out.append(
        "<p>排序：先按“已开始该实验却仍未通过”的人数（真正的错误，而不是尚未动手的桩函数），再按未通过总人数。"
        "“常见错误”是让这个测试失败的命名变异（课程作者预先写好的典型错误）。</p>"
    )
    out.append(
        "<table><tr><th>#</th><th>测试与它的问题</th><th>实验</th><th>未通过</th><th>已开始仍未通过</th><th>常见错误</th></tr>"
    )
    linked: list[str] = []
    for rank, test in enumerate(failing, 1):
        asked = question(course, checkpoint, test.nodeid) if checkpoint else ""
        names = mutations.get(test.nodeid, [])[:2]
        linked += [name for name in names if name not in linked]
        mistake = "<br>".join(
            f'<a href="#mutation-{escape(name)}">{escape(name)}</a>：{escape(_description(checkpoint, name))}'
            for name in names
        )
        out.append(
            f"<tr><td class=n>{rank}</td><td><code>{escape(test.nodeid)}</code><br>{escape(asked)}</td>"
            f"<td>Lab {escape(test.lab)}</td><td class=n>{test.failed} / {len(graded)}</td>"
            f"<td class=n>{test.failed_started} / {test.started}</td><td>{mistake or '—'}</td></tr>"
        )
    out.append("</table>")
    if linked and checkpoint:
        out.append('<h2 id="mutations">涉及的命名变异</h2>')
        for name in linked:
            mutation = checkpoint.mutation(name)
            diff = "\n".join(mutation_diff(course, checkpoint, mutation))
            out.append(
                f'<h3 id="mutation-{escape(name)}">{escape(name)}</h3><p>{escape(mutation.description)}</p>'
                f"<p>复现：<code>pi-course diagnose {escape(checkpoint.id)} {escape(name)}</code></p>"
                f"<pre>{escape(diff)}</pre>"
            )
    out.append('<h2 id="learners">每位学习者</h2>')
    out.append("<table><tr><th>学习者</th><th>状态</th><th>得分</th><th>附加分</th><th>备注</th></tr>")
    for record in records:
        p = points_of(course, record)
        notes = "; ".join([*([record.message] if record.message else []), *record.flags])
        out.append(
            f"<tr><td>{escape(record.learner)}</td><td>{escape(texts.record_status(record.status))}</td>"
            f"<td class=n>{p.points:g} / {p.max_points:g}</td><td class=n>{p.extra:g}</td><td>{escape(notes)}</td></tr>"
        )
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def _description(checkpoint: Checkpoint | None, name: str) -> str:
    if checkpoint is None:
        return ""
    return next((m.description for m in checkpoint.mutations if m.name == name), "")


def write(
    path: Path, course: Course, records: Sequence[LearnerRecord], mutations: Mapping[str, list[str]] | None
) -> None:
    """Write the class report to `path`."""
    path.write_text(render(course, records, dict(mutations or {})), encoding="utf-8")
