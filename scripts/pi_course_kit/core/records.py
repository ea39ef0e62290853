"""The record contract between a test run and every reader: test records, lab summaries, status rules, table.

Standard library only: this file travels into every staged tree as `tests/pi_course_records.py`, where
the report plugin writes records, and the kit (check, grade, notebooks) reads them back with `read_records`.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pi_course_kit.core.i18n import _
else:
    try:  # inside a staged tree the catalog helper travels beside this file
        from pi_course_i18n import _
    except ImportError:  # inside the kit
        from pi_course_kit.core.i18n import _

# A section comment may be indented: the methods of one class can belong to different labs.
LAB_SECTION = re.compile(r"^\s*# ## Lab (?P<lab>\S+)")
LAB_MARKER = re.compile(r"^lab(?P<major>\d+)_(?P<minor>\d+)$")
DONE, FAILING, NOT_STARTED, BLOCKED = "done", "failing", "not started", "blocked"
#: Some of the lab's tests pass; the others still stop on the lab's own stubs.
IN_PROGRESS = "in progress"
#: A required lab this run did not select (e.g. `-m lab6_1`): the report says nothing about its state.
NOT_RUN = "not run"
#: Where a practice folder keeps what earlier runs found, lab by lab (only labs run in full are recorded).
PROGRESS_FILE = Path(".pi-course") / "progress.json"


@dataclass
class LabInfo:
    """A lab as the pytest markers describe it."""

    id: str
    marker: str
    title: str = ""
    optional: bool = False
    inherited: bool = False
    #: The functions and classes the lab asks for, in manifest order.
    implements: tuple[str, ...] = ()


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
    #: The lab owning the deepest learner frame of the failure (time-outs and errors blame it).
    owner_lab: str | None = None
    #: The learner function (qualified name) at `location`.
    function: str | None = None
    #: The test's own question: the first line of its docstring.
    question: str = ""
    #: The smallest readable difference of a failed comparison, one line each.
    diff: list[str] = field(default_factory=list)
    #: Seconds the deciding phase took (pytest's report.duration): the JUnit file's testcase time.
    duration: float = 0.0


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
    #: Tests of this lab the run selected; more than `total` when the run stopped early (-x, --maxfail).
    collected: int = 0

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> LabSummary:
        """A summary row as the closing record of a run carries it (without its test records)."""
        known = {name for name in cls.__dataclass_fields__ if name not in ("records", "first_failure")}
        return cls(**{key: value for key, value in row.items() if key in known})


def parse_marker_line(line: str) -> LabInfo | None:
    """Read a marker registration `lab6_1: 6.1 | title[ | optional]` back into a LabInfo."""
    name, _sep, description = line.partition(":")
    name = name.strip()
    parts = [part.strip() for part in description.split(" | ")]
    if len(parts) >= 2 and parts[0]:
        implements = next(
            (p.removeprefix("implements=") for p in parts[2:] if p.startswith("implements=")), ""
        )
        return LabInfo(
            parts[0],
            name,
            parts[1],
            "optional" in parts[2:],
            "inherited" in parts[2:],
            tuple(n for n in implements.split(",") if n),
        )
    if match := LAB_MARKER.match(name):
        return LabInfo(f"{match['major']}.{match['minor']}", name)
    return None


# -- the owner map: which lab owns a line of the learner's code ----------------------------------


def lab_of_line(path: Path, line: int) -> str | None:
    """The lab whose `# ## Lab X.Y` section holds this line of a pi_course file (the one owner map)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[:line]
    except (OSError, UnicodeDecodeError):
        return None
    for text in reversed(lines):
        if match := LAB_SECTION.match(text):
            return match["lab"]
    return None


def _functions(path: Path) -> tuple[tuple[str, int, int], ...]:
    """(qualified name, first line, last line) of every function of a file; () when it does not parse."""
    try:
        info = path.stat()
    except OSError:
        return ()
    # A red run asks about the same few files dozens of times: parse each version of a file once.
    return _parsed_functions(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=32)
def _parsed_functions(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[str, int, int], ...]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return ()
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{prefix}{child.name}", child.lineno, child.end_lineno or child.lineno))
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return tuple(found)


def function_at(path: Path, line: int) -> str | None:
    """The innermost function (qualified, `ObjectSchema.__init__`) holding a line of a file."""
    holding = [(name, first) for name, first, last in _functions(path) if first <= line <= last]
    return max(holding, key=lambda item: item[1])[0] if holding else None


def lab_entry(root: Path, package: str, lab: LabInfo) -> tuple[str, str | None] | None:
    """(`path:line`, function) where a lab starts: its first stub's raise, else its first function, else its heading."""
    pattern = re.compile(rf"LabNotImplemented\(\s*[\"']{re.escape(lab.id)}[\"']")
    wanted = [name for target in lab.implements for name in (target, f"{target}.__init__")]
    heading: tuple[str, str | None] | None = None
    found: list[tuple[int, str, str]] = []
    for path in sorted((root / package).rglob("*.py")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        shown = path.relative_to(root).as_posix()
        for number, text in enumerate(lines, 1):
            if pattern.search(text):
                return f"{shown}:{number}", function_at(path, number)
            if heading is None and (match := LAB_SECTION.match(text)) and match["lab"] == lab.id:
                heading = (f"{shown}:{number}", None)
        found += [
            (wanted.index(name), f"{shown}:{first}", name)
            for name, first, _last in _functions(path)
            if name in wanted
        ]
    if found:
        _rank, where, name = min(found)
        return where, name
    return heading


# -- status rules -------------------------------------------------------------------------------


def blame(record: TestRecord) -> str | None:
    """The lab a failure belongs to: a stub's own lab, else the lab owning the deepest learner frame."""
    return record.exc_lab or record.owner_lab


def summarise(
    labs: list[LabInfo], records: list[TestRecord], collected: dict[str, int] | None = None
) -> list[LabSummary]:
    """Fold test records into one summary per lab, in lab order.

    done: every selected test ran and passed. failing: a test failed in the lab's own code or assertions.
    blocked by X: every failure stops in lab X's code. in progress: some tests pass, the rest stop on
    the lab's own stubs. not started: nothing passes yet and every failure is one of its own stubs.
    """
    rows = {lab.id: LabSummary(lab.id, lab.title, lab.optional) for lab in labs}
    for record in records:
        if record.lab in rows:
            row = rows[record.lab]
            row.records.append(record)
            row.total += 1
            row.passed += record.outcome == "passed"
    for row in rows.values():
        row.collected = max((collected or {}).get(row.id, row.total), row.total)
        failures = [r for r in row.records if r.outcome != "passed"]
        stubs = [r for r in failures if r.exc_lab == row.id]
        other = [r for r in failures if r.outcome != "skipped" and blame(r) not in (None, row.id)]
        real = [r for r in failures if r.outcome == "failed" and r not in stubs and r not in other]
        skipped = [r for r in failures if r.outcome == "skipped"]
        if row.total and not failures:
            row.status = IN_PROGRESS if row.collected > row.total else DONE
        elif real:
            row.status, row.first_failure = FAILING, real[0]
        elif other:
            row.status, row.blocked_by, row.first_failure = BLOCKED, blame(other[0]), other[0]
        elif stubs:
            row.status = IN_PROGRESS if row.passed else NOT_STARTED
            row.first_failure = stubs[0]
        else:  # only skips: an optional exercise nobody has started
            row.status = NOT_STARTED
            row.first_failure = skipped[0] if skipped else None
    return list(rows.values())


# -- the next step ------------------------------------------------------------------------------


def package_fingerprint(root: Path, package: str) -> str:
    """A digest of the learner's package files: a recorded status holds only while they are unchanged."""
    digest = hashlib.sha256()
    folder = root / package
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def read_progress(root: Path, package: str | None = None) -> dict[str, str]:
    """Lab id -> status as recorded by earlier runs in this practice folder ({} elsewhere).

    With `package`, only a record made on the same package files counts: after an edit, a lab the run
    did not select is unknown again, not done (nor failing) on the strength of an older version.
    """
    try:
        data = json.loads((root / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    if package is not None and data.get("fingerprint") != package_fingerprint(root, package):
        return {}
    labs = data.get("labs")
    return {str(k): str(v) for k, v in labs.items()} if isinstance(labs, dict) else {}


def write_progress(root: Path, rows: list[LabSummary], package: str) -> None:
    """Record the labs this run checked in full; only inside a practice folder, never failing the run."""
    if not (root / ".pi-course" / "meta.json").is_file():
        return
    labs = read_progress(root, package)
    for row in rows:
        if row.total and row.collected == row.total:
            labs[row.id] = row.status
    record = {"labs": labs, "fingerprint": package_fingerprint(root, package)}
    with contextlib.suppress(OSError):  # a read-only folder can still be checked
        (root / PROGRESS_FILE).write_text(
            json.dumps(record, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )


def _failure_text(failure: TestRecord | None, lab: str, status: str) -> str:
    if failure is None:
        return _("make its tests pass")
    if failure.outcome == "skipped":
        return failure.skip_reason or _("optional exercise")
    if failure.exc_lab is not None:
        return failure.message + _(" — replace that raise with your implementation")
    name = failure.nodeid.rsplit("::", 1)[-1]
    question = f" — {failure.question}" if failure.question else ""
    if failure.exc_type == "AssertionError" or failure.diff:
        return f"{name}{question}"
    return f"{name}: {failure.message}"


def next_step(
    rows: list[LabSummary],
    labs: list[LabInfo],
    recorded: dict[str, str] | None = None,
    entries: dict[str, tuple[str, str | None]] | None = None,
) -> dict[str, Any] | None:
    """The earliest unfinished required lab (whether this run selected it or not), where to edit, how to re-run.

    None only when every required lab passed in this run or, for labs it did not run, in the folder's
    recorded state. Then the optional exercise is suggested (`optional: True`) until it is done.
    """
    by_id = {row.id: row for row in rows}
    recorded = recorded or {}
    # A lab this run found blocking another is unfinished, whatever an earlier run recorded.
    blocking = {row.blocked_by: row for row in rows if row.status == BLOCKED and row.blocked_by}
    # (lab, this run's row or None, whether the lab is known to be unfinished rather than unchecked)
    pending: list[tuple[LabInfo, LabSummary | None, bool]] = []
    for lab in labs:
        if lab.optional and lab.inherited:
            continue  # an earlier chapter's optional exercise: this tree does not run its tests
        row = by_id.get(lab.id)
        if row is not None and row.total:
            if row.status != DONE:
                pending.append((lab, row, True))
        elif lab.id in blocking:
            pending.append((lab, blocking[lab.id], True))
        elif recorded.get(lab.id) != DONE:
            pending.append((lab, None, lab.id in recorded))
    required = [item for item in pending if not item[0].optional]
    if not required:
        optional = [item for item in pending if item[0].optional]
        if not optional:
            return None
        required = optional[:1]
    # The earliest lab known to be unfinished comes first; a lab nobody checked since the last edit
    # is next only when nothing known is left (so a red in this run is never hidden behind it).
    known = [item for item in required if item[2]]
    lab, row, _known = (known or required)[0]
    if row is not None and row.status == BLOCKED and row.blocked_by:
        if row.blocked_by in by_id and by_id[row.blocked_by].total:
            row = by_id[row.blocked_by]
        lab = next((info for info in labs if info.id == row.blocked_by or info.id == row.id), lab)
    failure = row.first_failure if row is not None else None
    if row is not None and row.id != lab.id:  # the blocked lab's failure stands for its blocker's
        row = LabSummary(lab.id, lab.title, lab.optional, status=FAILING, first_failure=failure, total=1)
    entry = (entries or {}).get(lab.id)
    location = failure.location if failure and failure.location else (entry[0] if entry else None)
    function = failure.function if failure and failure.location else (entry[1] if entry else None)
    status = row.status if row is not None else NOT_RUN
    what = (
        _failure_text(failure, lab.id, status)
        if row is not None
        else _("not checked by this run: it is the next lab to do")
    )
    return {
        "lab": lab.id,
        "title": lab.title,
        "status": status,
        "optional": lab.optional,
        "location": location,
        "function": function,
        "what": what,
        "question": failure.question if failure else "",
        "diff": list(failure.diff) if failure else [],
        "message": failure.message if failure else "",
        "command": f'python -m pytest -m "{lab.marker}"',
    }


# -- rendering ----------------------------------------------------------------------------------


def display_width(text: str) -> int:
    """Columns a string takes in a terminal: CJK wide and fullwidth characters count two."""
    try:
        from wcwidth import wcswidth  # type: ignore[import-untyped,unused-ignore]

        width = int(wcswidth(text))
        if width >= 0:
            return width
    except ImportError:
        pass
    # A staged tree may have pytest and nothing else: fall back to the standard library's East Asian widths.
    return sum(
        2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in text
    )


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` terminal columns."""
    fill = " " * max(width - display_width(text), 0)
    return fill + text if right else text + fill


def status_text(status: str, blocked_by: str | None = None, optional: bool = False) -> str:
    """A lab's status in the learner's language, with its blocker and the optional flag."""
    names = {
        DONE: _("done"),
        FAILING: _("failing"),
        NOT_STARTED: _("not started"),
        BLOCKED: _("blocked"),
        IN_PROGRESS: _("in progress"),
        NOT_RUN: _("not run"),
    }
    text = names.get(status, status)
    if blocked_by:
        text = _("blocked by {lab}").format(lab=blocked_by)
    if optional and status != DONE:
        text += _(" (optional)")
    return text


def count_text(passed: int, total: int, collected: int) -> str:
    """`passed/total`, or `passed/ran of collected` for a run that stopped early."""
    if collected > total:
        return _("{passed}/{ran} of {collected}").format(passed=passed, ran=total, collected=collected)
    return f"{passed}/{total}"


def all_done_text(kind: str = "labs") -> str:
    """The line under the table once nothing is left: an observation checkpoint had nothing to implement."""
    if kind == "observation":
        return _(
            "next: every observation passes. This is an observation chapter with nothing to implement: "
            "predict, run, then break it on purpose and see which test catches it."
        )
    return _("next: every required lab is done. Move on to the next checkpoint.")


def step_lines(step: dict[str, Any] | None, all_done_label: str | None = None) -> list[str]:
    """The next-step lines under the table: what, the test's question and difference, edit, run."""
    if step is None:
        return [all_done_label or all_done_text()]
    lines = []
    if step.get("optional"):
        lines.append(_("every required lab is done; if you like, try the optional exercise:"))
    label = _("optional") if step.get("optional") else _("next")
    status = status_text(step["status"])
    lines.append(
        _("{label}: Lab {lab} ({status}) — {what}").format(
            label=label, lab=step["lab"], status=status, what=step["what"]
        )
    )
    for line in step.get("diff") or []:
        lines.append(_("  diff: {line}").format(line=line))
    if step.get("location"):
        function = f" ({step['function']})" if step.get("function") else ""
        lines.append(_("  edit: {where}").format(where=f"{step['location']}{function}"))
    lines.append(_("  run:  {command}").format(command=step["command"]))
    return lines


def table_lines(rows: list[LabSummary]) -> list[str]:
    """The per-lab table as plain text lines, columns aligned by terminal width (CJK counts two)."""
    header = [_("lab"), _("tests"), _("status"), _("title")]
    cells = [
        [
            row.id,
            count_text(row.passed, row.total, row.collected),
            status_text(row.status, row.blocked_by, row.optional),
            row.title,
        ]
        for row in rows
    ]
    widths = [max(display_width(line[i]) for line in [header, *cells]) for i in range(3)]
    return [
        f"{pad(line[0], widths[0])}  {pad(line[1], widths[1], right=True)}  {pad(line[2], widths[2])}  {line[3]}".rstrip()
        for line in [header, *cells]
    ]


def render(
    rows: list[LabSummary], step: dict[str, Any] | None, stopped_early: bool = False, kind: str = "labs"
) -> list[str]:
    """The report as plain text lines: the table, a note for an early stop, then the next step."""
    lines = table_lines(rows)
    if stopped_early:
        lines.append(
            _("the run stopped early (-x or --maxfail): the counts above are only the tests that ran")
        )
    return lines + step_lines(step, all_done_text(kind))


def record_line(event: str, payload: dict[str, Any]) -> str:
    """One JSON line of the record stream."""
    return json.dumps({"event": event, **payload}, ensure_ascii=False)


def test_record(record: TestRecord) -> str:
    """The JSON line of one test record."""
    return record_line("test", asdict(record))


def summary_line(
    rows: list[LabSummary], step: dict[str, Any] | None, collect_errors: int, stopped_early: bool = False
) -> str:
    """The JSON line that closes a run: one row per lab (without its records) and the next step."""
    labs = [{k: v for k, v in asdict(row).items() if k not in ("records", "first_failure")} for row in rows]
    payload = {"labs": labs, "next": step, "collect_errors": collect_errors, "stopped_early": stopped_early}
    return record_line("summary", payload)


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
