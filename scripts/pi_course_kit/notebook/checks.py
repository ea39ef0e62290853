"""Run the focused tests from a notebook: one lab (`check`) or every lab of the checkpoint (`progress`).

The tests run on a staged copy of the notebook's tree in their own interpreter; the report is a table.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pi_course_kit.core import manifest, records, runner, staging
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.markup import el, style
from pi_course_kit.notebook.tree import current_tree
from pi_course_kit.notebook.views import MONO

#: One colour per lab status of the records (GitHub's Primer palette: green, red, amber, purple, blue, grey).
STATUS_COLOURS = {
    records.DONE: "#1a7f37",
    records.FAILING: "#cf222e",
    records.NOT_STARTED: "#7d4e00",
    records.BLOCKED: "#8250df",
    records.IN_PROGRESS: "#0969da",
    records.NOT_RUN: "#57606a",
}
MAX_FAILURES = 3
#: The bound on one notebook run of the tests. A late checkpoint runs every earlier chapter's tests too
#: (hundreds, several with real processes and files), over a minute on a busy two-core machine; each
#: test keeps its own per-test timeout, so this only ends a run that stopped making progress.
RUN_SECONDS = 180.0


@dataclass
class CheckReport:
    """Focused tests of one lab (or all labs when `lab` is empty) on the notebook's tree, as a table."""

    lab: str
    command: str
    tree: str
    returncode: int
    labs: list[records.LabSummary]
    tests: list[records.TestRecord]
    next_step: records.NextStep | None
    problem: str = ""

    @property
    def passed(self) -> bool:
        """True when every selected test passed."""
        return self.returncode == 0 and not self.problem and bool(self.tests)

    def status_line(self) -> str:
        """One line: the lab's count and status, or what went wrong."""
        if self.problem:
            return self.problem
        if not self.lab:
            done = sum(row.status == records.DONE for row in self.labs)
            return _("{done}/{total} labs done").format(done=done, total=len(self.labs))
        row = next((r for r in self.labs if r.id == self.lab), None)
        if row is None:
            return _("Lab {lab}: no test ran").format(lab=self.lab)
        return _("Lab {lab}: {passed}/{total} {status}").format(
            lab=self.lab, passed=row.passed, total=row.total, status=self._status(row)
        )

    def failure_groups(self) -> tuple[list[tuple[str, int]], int]:
        """Distinct failure messages with how many tests gave each (first few), and how many more there
        are."""
        counts = Counter(t.message or t.outcome for t in self.tests if t.outcome != "passed")
        groups = counts.most_common()
        return groups[:MAX_FAILURES], max(0, len(groups) - MAX_FAILURES)

    def _status(self, row: records.LabSummary) -> str:
        # The terminal report's words, so the notebook and `pi-course check` name a status alike.
        return records.status_text(row.status, row.blocked_by, row.optional)

    def _next(self) -> str:
        # A green run has nothing left to edit, whatever an optional lab elsewhere says.
        if self.passed:
            return ""
        if self.next_step and self.next_step.location:
            return _("next: edit {where}").format(where=self.next_step.location)
        return ""

    def __str__(self) -> str:
        out = [f"{self.command} · {self.tree}", self.status_line()]
        for row in self.labs:
            tests = f"{row.passed}/{row.total}"
            out.append(f"  {row.id:<9} {tests:>7}  {self._status(row)}  {row.title}")
        groups, more = self.failure_groups()
        out += [f"  ✗ ×{count} {message}" for message, count in groups]
        if more:
            out.append("  " + self._more(more))
        if self._next():
            out.append("  " + self._next())
        return "\n".join(out)

    @staticmethod
    def _more(count: int) -> str:
        return _("…and {count} more kinds of failure").format(count=count)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        cell = "text-align:left;padding:2px 10px 2px 0"
        rows = [
            el(
                "tr",
                el("td", row.id, style=cell),
                el("td", f"{row.passed}/{row.total}", style=cell),
                el(
                    "td",
                    self._status(row),
                    style=style(
                        cell, f"color:{STATUS_COLOURS.get(row.status, '#57606a')}", "font-weight:bold"
                    ),
                ),
                el("td", row.title, style=cell),
            )
            for row in self.labs
        ]
        groups, more = self.failure_groups()
        items = [
            el("li", el("span", "✗", style="color:#cf222e"), f" ×{count} ", el("code", message, style=MONO))
            for message, count in groups
        ]
        if more:
            items.append(el("li", self._more(more)))
        colour = "#1a7f37" if self.passed else "#cf222e"
        head = el("tr", [el("th", h, style=cell) for h in ("Lab", _("tests"), _("status"), _("title"))])
        return str(
            el(
                "div",
                el("div", el("code", self.command, style=MONO), f" · {self.tree}"),
                el("div", el("b", self.status_line()), style=f"color:{colour}"),
                el("table", el("thead", head), el("tbody", rows), style="border-collapse:collapse"),
                el("ul", items, style="margin:4px 0") if items else None,
                el("div", self._next()) if self._next() else None,
                style="font-size:13px",
            )
        )


# The last full run per tree, with the fingerprint of the code and tests it ran on. In a "Run All",
# progress() runs every test once and the check() cells that follow read their lab from it: one pytest
# run instead of one per cell. Any edit to the tree or to the tests changes the fingerprint.
_last_full: dict[Path, tuple[str, CheckReport]] = {}


def fingerprint(course: Course, checkpoint: Checkpoint, tree: Path) -> str:
    """A digest of everything a run depends on: the tree's package, the tests, the manifest."""
    digest = hashlib.sha256()
    package = tree / course.package
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [course.root / name for name in (*checkpoint.tree_tests, *checkpoint.tree_support)]
    files.append(course.path)
    for path in files:
        digest.update(str(path).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
    return digest.hexdigest()


def _lab_view(full: CheckReport, lab_id: str, command: str) -> CheckReport:
    """One lab's part of a full run, shaped like a run of that lab's marker alone."""
    tests = [test for test in full.tests if test.lab == lab_id]
    passed = bool(tests) and all(test.outcome == "passed" for test in tests)
    nxt = full.next_step if full.next_step and not passed else None
    return replace(
        full,
        lab=lab_id,
        command=command,
        returncode=0 if passed else 1,
        labs=[row for row in full.labs if row.id == lab_id],
        tests=tests,
        next_step=nxt,
    )


def _run(lab_id: str, timeout: float) -> CheckReport:
    tree = current_tree()
    course = manifest.load()
    checkpoint = course.checkpoint(tree.checkpoint)
    args = ["--tb=no"]
    command = "python -m pytest"
    if lab_id:
        marker = checkpoint.lab(lab_id).marker
        args = ["-m", marker, *args]
        command += f" -m {marker}"
    stamp = fingerprint(course, checkpoint, tree.path)
    cached = _last_full.get(tree.path)
    if cached is not None and cached[0] == stamp and not cached[1].problem:
        return _lab_view(cached[1], lab_id, command) if lab_id else cached[1]
    with staging.staged(course, checkpoint, tree.path) as folder:
        # No tracebacks: the table comes from the report plugin, and formatting dozens of starter
        # tracebacks took seconds. The terminal command shown to the learner keeps them.
        # Where the kit's own checks set a run cache (verify, the kit's suite), a run of exactly this
        # content made by verify or another notebook is read back instead of run again.
        result = runner.run_tests(folder, args, timeout=timeout, reuse=runner.run_cache_from_env())
    problem = ""
    if result.timed_out:
        problem = _("the tests did not finish within {seconds:g} s").format(seconds=timeout)
    elif result.collect_errors:
        problem = _("the tests cannot be collected: {message}").format(
            message=result.collect_errors[0].message
        )
    elif not result.finished:
        problem = _("pytest ended without a report (exit code {code})").format(code=result.returncode)
    report = CheckReport(
        lab=lab_id,
        command=command,
        tree=tree.shown,
        returncode=result.returncode,
        labs=result.labs,
        tests=result.tests,
        next_step=result.next_step,
        problem=problem,
    )
    if not lab_id:
        _last_full[tree.path] = (stamp, report)
    return report


def check(lab_id: str, *, timeout: float = RUN_SECONDS) -> CheckReport:
    """Run one lab's focused tests on the notebook's tree and report them (reusing a full run of the same
    code)."""
    return _run(lab_id, timeout)


def progress(*, timeout: float = RUN_SECONDS) -> CheckReport:
    """Run every focused test of the notebook's checkpoint once: one table with every lab."""
    return _run("", timeout)
