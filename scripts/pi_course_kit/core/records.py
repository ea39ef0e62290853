"""The record contract between a test run and every reader: test records, lab summaries, status rules, table.

Standard library only: this file travels into every staged tree as `tests/pi_course_records.py`, where
the report plugin writes records, and the kit (check, grade, notebooks) reads them back with `read_records`.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LAB_SECTION = re.compile(r"^# ## Lab (?P<lab>\S+)")
LAB_MARKER = re.compile(r"^lab(?P<major>\d+)_(?P<minor>\d+)$")
DONE, FAILING, NOT_STARTED, BLOCKED = "done", "failing", "not started", "blocked"


@dataclass
class LabInfo:
    """A lab as the pytest markers describe it."""

    id: str
    marker: str
    title: str = ""
    optional: bool = False
    inherited: bool = False


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
        return LabInfo(parts[0], name, parts[1], "optional" in parts[2:], "inherited" in parts[2:])
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


def register_markers(labs: list[LabInfo]) -> None:
    """Remember each lab's marker, for the commands that re-run one lab."""
    for lab in labs:
        _MARKERS[lab.id] = lab.marker


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


def record_line(event: str, payload: dict[str, Any]) -> str:
    """One JSON line of the record stream."""
    return json.dumps({"event": event, **payload}, ensure_ascii=False)


def test_record(record: TestRecord) -> str:
    """The JSON line of one test record."""
    return record_line("test", asdict(record))


def summary_line(rows: list[LabSummary], step: dict[str, Any] | None, collect_errors: int) -> str:
    """The JSON line that closes a run: one row per lab (without its records) and the next step."""
    labs = [{k: v for k, v in asdict(row).items() if k not in ("records", "first_failure")} for row in rows]
    return record_line("summary", {"labs": labs, "next": step, "collect_errors": collect_errors})


def read_records(
    lines: list[str],
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    """Split a record stream into test records, the closing summary and collection errors."""
    tests, errors, summary = [], [], None
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        event = record.pop("event", None)
        if event == "test":
            tests.append(record)
        elif event == "collect_error":
            errors.append(record)
        elif event == "summary":
            summary = record
    return tests, summary, errors


def read_record_file(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    """`read_records` of a file; a missing file is an empty stream."""
    return read_records(path.read_text(encoding="utf-8").splitlines() if path.exists() else [])
