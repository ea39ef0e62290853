"""Per-lab report for the focused tests: passed/total, a status per lab, and the next step.

Needs pytest and the standard library only, so it works in any folder that has the tests.
Set PI_COURSE_REPORT_JSON=path to also get one JSON record per line (the kit's tools read it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

JSON_ENV = "PI_COURSE_REPORT_JSON"
LAB_SECTION = re.compile(r"^# ## Lab (?P<lab>\S+)")
LAB_MARKER = re.compile(r"^lab(?P<major>\d+)_(?P<minor>\d+)$")

REPEAT_TIMEOUT = 0.5
DONE, FAILING, NOT_STARTED, BLOCKED = "done", "failing", "not started", "blocked"


class LearnerTimeout(BaseException):
    """A test ran past its time limit. A BaseException, so hypothesis does not catch it and replay the loop."""


@dataclass
class LabInfo:
    """A lab as the pytest markers describe it."""

    id: str
    marker: str
    title: str = ""
    optional: bool = False


@dataclass
class TestRecord:
    """The outcome of one focused test, with what the failure says about the labs."""

    nodeid: str
    lab: str | None
    outcome: str
    exc_type: str | None = None
    exc_lab: str | None = None
    message: str = ""
    location: str | None = None
    skip_reason: str = ""


@dataclass
class LabSummary:
    """One row of the report."""

    id: str
    title: str
    optional: bool
    passed: int = 0
    total: int = 0
    status: str = NOT_STARTED
    blocked_by: str | None = None
    first_failure: TestRecord | None = None
    records: list[TestRecord] = field(default_factory=list)


def parse_marker_line(line: str) -> LabInfo | None:
    """Read a marker registration `lab6_1: 6.1 | title[ | optional]` back into a LabInfo."""
    name, _, description = line.partition(":")
    name = name.strip()
    parts = [part.strip() for part in description.split(" | ")]
    if len(parts) >= 2 and parts[0]:
        return LabInfo(parts[0], name, parts[1], "optional" in parts[2:])
    if match := LAB_MARKER.match(name):
        return LabInfo(f"{match['major']}.{match['minor']}", name)
    return None


def lab_of_line(path: Path, line: int) -> str | None:
    """The lab whose `# ## Lab X.Y` section holds this line of a pi_course file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[:line]
    except (OSError, UnicodeDecodeError):
        return None
    for text in reversed(lines):
        if match := LAB_SECTION.match(text):
            return match["lab"]
    return None


def summarise(labs: list[LabInfo], records: list[TestRecord]) -> list[LabSummary]:
    """Fold test records into one summary per lab, in lab order."""
    rows = {lab.id: LabSummary(lab.id, lab.title, lab.optional) for lab in labs}
    for record in records:
        if record.lab in rows:
            row = rows[record.lab]
            row.records.append(record)
            row.total += 1
            row.passed += record.outcome == "passed"
    for row in rows.values():
        failures = [r for r in row.records if r.outcome != "passed"]
        real = [r for r in failures if r.outcome == "failed" and r.exc_lab is None]
        own = [r for r in failures if r.exc_lab == row.id]
        other = [r for r in failures if r.exc_lab not in (None, row.id)]
        if row.total and not failures:
            row.status = DONE
        elif real:
            row.status, row.first_failure = FAILING, real[0]
        elif own or not row.total:
            row.status = NOT_STARTED
            row.first_failure = own[0] if own else (failures[0] if failures else None)
        elif other:
            row.status, row.blocked_by, row.first_failure = BLOCKED, other[0].exc_lab, other[0]
        else:  # only skips: an optional exercise nobody has started
            row.status, row.first_failure = NOT_STARTED, failures[0]
    return list(rows.values())


def next_step(rows: list[LabSummary]) -> dict[str, Any] | None:
    """The first required lab that is not done, where to edit, and how to re-run it."""
    pending = [r for r in rows if r.status != DONE and r.total]
    required = [r for r in pending if not r.optional] or pending
    if not required:
        return None
    row = required[0]
    target = row
    if row.status == BLOCKED and row.blocked_by:
        target = next((r for r in rows if r.id == row.blocked_by), row)
    failure = target.first_failure
    marker = _marker_for(target.id, rows)
    if failure and failure.outcome == "skipped":
        what = failure.skip_reason or "optional exercise"
    elif target.status == NOT_STARTED:
        stub = (
            failure.message
            if failure and failure.exc_lab == target.id
            else f"Lab {target.id} not implemented"
        )
        what = f"{stub} — replace that raise with your implementation"
    else:
        what = failure.message if failure else "make its tests pass"
    return {
        "lab": target.id,
        "title": target.title,
        "status": target.status,
        "location": failure.location if failure else None,
        "what": what,
        "command": f'python -m pytest -m "{marker}"',
    }


_MARKERS: dict[str, str] = {}


def _marker_for(lab_id: str, rows: list[LabSummary]) -> str:
    return _MARKERS.get(lab_id, "lab" + lab_id.replace(".", "_"))


def render(rows: list[LabSummary], step: dict[str, Any] | None) -> list[str]:
    """The report as plain text lines."""
    width = max([len(r.id) for r in rows] + [3])
    lines = [f"{'lab':<{width}}  {'tests':>7}  {'status':<18}  title"]
    for row in rows:
        status = row.status + (f" by {row.blocked_by}" if row.blocked_by else "")
        if row.optional and row.status != DONE:
            status += " (optional)"
        lines.append(f"{row.id:<{width}}  {f'{row.passed}/{row.total}':>7}  {status:<18}  {row.title}")
    if step is None:
        lines.append("next: every lab is done. Try the transfer exercise or move on to the next checkpoint.")
    else:
        lines.append(f"next: Lab {step['lab']} ({step['status']}) — {step['what']}")
        if step["location"]:
            lines.append(f"  edit: {step['location']}")
        lines.append(f"  run:  {step['command']}")
    return lines


@contextmanager
def _refusing_os_exit() -> Iterator[None]:
    """Make os._exit raise instead of killing pytest before the report is written."""
    real_exit = os._exit

    def refuse_exit(status: int) -> NoReturn:
        raise RuntimeError(f"learner code called os._exit({status}); a tool must return, not end the process")

    os._exit = refuse_exit
    try:
        yield
    finally:
        os._exit = real_exit


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def learner_location(excinfo: pytest.ExceptionInfo[BaseException], root: Path) -> str | None:
    """The deepest traceback line inside the learner's pi_course, as `path:line`."""
    for entry in reversed(excinfo.traceback):
        path = Path(str(entry.path))
        if "pi_course" in path.parts:
            try:
                shown = path.relative_to(root)
            except ValueError:
                shown = path
            return f"{shown}:{entry.lineno + 1}"
    return None


def stub_lab(error: BaseException) -> str | None:
    """The lab of a `LabNotImplemented` (matched by name: this plugin never imports pi_course), else None."""
    lab = getattr(error, "lab", None)
    is_stub = any(cls.__name__ == "LabNotImplemented" for cls in type(error).__mro__)
    return lab if is_stub and isinstance(lab, str) else None


class StubFailures:
    """Reports a test stopped by an unfinished lab's stub in one line instead of a full traceback.

    On a fresh starter dozens of tests stop on the same few `raise LabNotImplemented(...)` lines;
    one line each (what is missing, and where) reads better and skips seconds of traceback rendering.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> pytest.TestReport | None:
        """Build the compact report for a stub failure; leave every other outcome to pytest."""
        when = call.when
        if when == "collect" or call.excinfo is None or stub_lab(call.excinfo.value) is None:
            return None
        where = learner_location(call.excinfo, self.root)
        text = f"{_first_line(str(call.excinfo.value))}" + (f"  ({where})" if where else "")
        sections = [(f"Captured {key} {when}", content) for when, key, content in item._report_sections]
        return pytest.TestReport(
            item.nodeid,
            item.location,
            dict.fromkeys(item.keywords, 1),
            "failed",
            text,
            when,
            sections,
            call.duration,
            call.start,
            call.stop,
            item.user_properties,
        )


class ReportPlugin:
    """Collects one TestRecord per focused test and prints the per-lab table at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.root = Path(str(config.rootpath))
        self.labs = [lab for line in config.getini("markers") if (lab := parse_marker_line(str(line)))]
        for lab in self.labs:
            _MARKERS[lab.id] = lab.marker
        self.records: list[TestRecord] = []
        self.collect_errors: list[dict[str, Any]] = []
        self.looped_labs: set[str | None] = set()
        self.json_path = os.environ.get(JSON_ENV)
        if self.json_path:
            Path(self.json_path).write_text("", encoding="utf-8")

    # -- recording -------------------------------------------------------------

    def _emit(self, record: dict[str, Any]) -> None:
        if self.json_path:
            # One line per event, flushed at once: a run killed half-way still leaves its records.
            with open(self.json_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _lab_of(self, item: pytest.Item) -> str | None:
        known = {lab.marker: lab.id for lab in self.labs}
        for mark in item.iter_markers():
            if mark.name in known:
                return known[mark.name]
            if match := LAB_MARKER.match(mark.name):
                return f"{match['major']}.{match['minor']}"
        return None

    def _location(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
        """The deepest traceback line inside the learner's pi_course, as `path:line`."""
        return learner_location(excinfo, self.root)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """Arm pytest-timeout's signal timer with a handler that ends the test, naming its lab."""
        usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        if getattr(settings, "method", None) != "signal" or not usable:
            return None  # pytest-timeout's own timer (thread method) takes over
        lab = self._lab_of(item)
        limit = float(settings.timeout)
        if lab in self.looped_labs:
            # One endless loop in a lab usually stalls all its tests: do not make the learner wait for each.
            limit = min(limit, REPEAT_TIMEOUT)

        def stop(signum: int, frame: object) -> None:
            raise LearnerTimeout(f"Timeout (>{limit:g}s): stopped, probably an endless loop in Lab {lab}")

        def cancel() -> None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

        item.cancel_timeout = cancel  # type: ignore[attr-defined]
        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, limit)
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """Turn os._exit() in learner code (setup, call or teardown) into a failure so the report prints."""
        with _refusing_os_exit():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """While importing the tests (and so pi_course), refuse os._exit and shorten import errors."""
        with _refusing_os_exit():
            try:
                report: pytest.CollectReport = yield
            except SystemExit as exit_:
                # pytest lets SystemExit out of collection and dies with INTERNALERROR; make it a failure.
                frames = [
                    f'File "{frame.f_code.co_filename}", line {line}'
                    for frame, line in traceback.walk_tb(exit_.__traceback__)
                ]
                text = "\n".join(
                    [*frames, f"E   SystemExit: learner code called sys.exit({exit_.code!r}) while importing"]
                )
                report = pytest.CollectReport(collector.nodeid, "failed", text, [])
        if report.failed:
            entry = self._describe_collect_error(report)
            report._pi_entry = entry  # type: ignore[attr-defined]
            if entry["location"]:
                # pytest would show importlib's frames; the learner needs the line and the lab only.
                lab = f" (Lab {entry['lab']})" if entry["lab"] else ""
                report.longrepr = f"{entry['location']}{lab}: {entry['message']}\n{entry['excerpt']}".rstrip()
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Record the phase that decides the test's outcome."""
        report: pytest.TestReport = yield
        decisive = report.when == "call" or report.outcome != "passed"
        if decisive and not getattr(item, "_pi_recorded", False):
            item._pi_recorded = True  # type: ignore[attr-defined]
            record = TestRecord(report.nodeid, self._lab_of(item), report.outcome)
            if report.skipped:
                longrepr = report.longrepr
                record.skip_reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
                record.skip_reason = record.skip_reason.removeprefix("Skipped: ")
            elif call.excinfo is not None:
                error = call.excinfo.value
                record.exc_type = type(error).__name__
                if isinstance(error, LearnerTimeout):
                    self.looped_labs.add(record.lab)
                record.exc_lab = stub_lab(error)
                record.message = _first_line(str(error)) or record.exc_type
                if isinstance(error, SystemExit):
                    record.message = (
                        f"learner code called sys.exit({error.code!r}); a tool must return or raise, "
                        "not end the process"
                    )
                if record.exc_type == "Failed" and "Timeout" in record.message:
                    record.message = (
                        f"{record.message}: stopped, probably an endless loop in Lab {record.lab}"
                    )
                record.location = self._location(call.excinfo)
            self.records.append(record)
            self._emit({"event": "test", **asdict(record)})
        return report

    def _describe_collect_error(self, report: pytest.CollectReport) -> dict[str, Any]:
        """Where an import of the tests failed: pi_course file:line, its lab, the error in one line."""
        text = str(report.longrepr)
        location, lab, excerpt = None, None, ""
        matches = re.findall(r'File "([^"]*\bpi_course[/\\][^"]*)", line (\d+)', text) or re.findall(
            r"(\S*\bpi_course[/\\]\S*\.py):(\d+)", text
        )
        if matches:
            raw, number = matches[-1]  # the innermost frame: where the learner's code broke
            path, line = Path(raw), int(number)
            full = path if path.is_absolute() else self.root / path
            try:
                shown = full.resolve().relative_to(self.root.resolve())
            except ValueError:
                shown = full
            location = f"{shown.as_posix()}:{line}"
            lab = lab_of_line(full, line)
            try:
                excerpt = "    " + full.read_text(encoding="utf-8").splitlines()[line - 1].strip()
            except (OSError, UnicodeDecodeError, IndexError):
                excerpt = ""
        error_lines = [
            line for line in text.splitlines() if re.match(r"^E\s+\w*(Error|Exception|Exit)", line)
        ]
        message = error_lines[-1].lstrip("E").strip() if error_lines else _first_line(text)
        return {
            "event": "collect_error",
            "nodeid": report.nodeid,
            "message": message,
            "location": location,
            "lab": lab,
            "excerpt": excerpt,
        }

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Report a test module that cannot even be imported (a syntax error, say) in one line."""
        if not report.failed:
            return
        entry = getattr(report, "_pi_entry", None) or self._describe_collect_error(report)
        entry = {key: value for key, value in entry.items() if key != "excerpt"}
        self.collect_errors.append(entry)
        self._emit(entry)

    # -- reporting -------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """Print the per-lab table and the next step after pytest's own summary."""
        # Outermost wrapper: the table comes after pytest's list of failed tests, where the learner looks.
        result = yield
        self._summary(terminalreporter)
        return result

    def _summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("pi-course labs")
        for error in self.collect_errors:
            where = error["location"] or error["nodeid"]
            lab = f" (in Lab {error['lab']})" if error["lab"] else ""
            write(f"cannot import the tests: {where}{lab}: {error['message']}")
            write("  fix that line first; no lab can run until the package imports")
        if self.collect_errors and not self.records:
            self._emit(
                {"event": "summary", "labs": [], "next": None, "collect_errors": len(self.collect_errors)}
            )
            return
        rows = [row for row in summarise(self.labs, self.records) if row.total]
        step = next_step(rows)
        for line in render(rows, step):
            write(line)
        self._emit(
            {
                "event": "summary",
                "labs": [
                    {
                        key: value
                        for key, value in asdict(row).items()
                        if key not in ("records", "first_failure")
                    }
                    for row in rows
                ],
                "next": step,
                "collect_errors": len(self.collect_errors),
            }
        )
