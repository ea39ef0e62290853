"""The record contract between a test run and every reader: test records, lab summaries, status rules, table.

Standard library only: this file travels into every staged tree as `tests/pi_course_records.py`, where
the report plugin writes records, and the kit (check, grade, notebooks) reads them back with `RunReport.read`.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pi_course_kit.core.i18n import _, wants_english
else:
    try:  # inside a staged tree the catalog helper travels beside this file
        from pi_course_i18n import _, wants_english
    except ImportError:  # inside the kit
        from pi_course_kit.core.i18n import _, wants_english

# A section comment may be indented: the methods of one class can belong to different labs.
LAB_SECTION = re.compile(r"^\s*# ## Lab (?P<lab>\S+)")
LAB_MARKER = re.compile(r"^lab(?P<major>\d+)_(?P<minor>\d+)$")


class Status(StrEnum):
    """A lab's state, as a run finds it: the one status vocabulary of the report, check, grade and
    notebooks."""

    DONE = "done"
    FAILING = "failing"
    NOT_STARTED = "not started"
    #: Every failure stops in another lab's code (`LabSummary.blocked_by` names it).
    BLOCKED = "blocked"
    #: Some of the lab's tests pass; the others still stop on the lab's own stubs.
    IN_PROGRESS = "in progress"
    #: A required lab this run did not select (e.g. `-m lab6_1`): the report says nothing about its state.
    NOT_RUN = "not run"


DONE, FAILING, NOT_STARTED, BLOCKED = Status.DONE, Status.FAILING, Status.NOT_STARTED, Status.BLOCKED
IN_PROGRESS, NOT_RUN = Status.IN_PROGRESS, Status.NOT_RUN
#: The longest message a record keeps (a failure's text, a reason): what a table row or a terminal shows.
MAX_MESSAGE = 300
# C0/C1 controls (ESC sequences, newlines that would forge a row) and bidirectional overrides.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: Where a practice folder keeps what earlier runs found, lab by lab (only labs run in full are recorded).
PROGRESS_FILE = Path(".pi-course") / "progress.json"


def clean(text: object, limit: int = MAX_MESSAGE) -> str:
    """Text read from a run made safe for a terminal or a record: no control characters, capped."""
    value = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)[:limit]


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in "WF"


def first_paragraph(doc: str) -> str:
    """A docstring's first paragraph, its lines joined again: a test's question, a stub's summary.

    A long sentence is wrapped to the line limit in the source. Two wrapped lines join with no space
    where both sides of the break are wide (CJK) characters, as Chinese is written, and with one
    space otherwise (between English words, and between a Chinese and a Latin word, as the course
    spaces them).
    """
    text = ""
    for raw in doc.strip().splitlines():
        line = raw.strip()
        if not line:
            break
        gap = "" if not text or (_wide(text[-1]) and _wide(line[0])) else " "
        text += gap + line
    return text


def status_of(value: object) -> Status | None:
    """A status read from a record, or None when it is not one."""
    try:
        return Status(value) if isinstance(value, str) else None
    except ValueError:
        return None


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
    #: When the test ran several of the learner's functions that may hold the mistake: each as
    #: `path:line (function)`, likeliest first (`function` then names them all, joined by ", ").
    candidates: list[str] = field(default_factory=list)
    #: How many more functions the test ran that may hold it, beyond those named.
    more_candidates: int = 0

    @classmethod
    def from_json(cls, data: object) -> TestRecord:
        """A test record read back from a run, checked and cleaned; raises ValueError when it is not one.

        The run may be a learner's (a graded one is untrusted): every text is made safe and capped, a
        field of the wrong type is dropped to its default, an unknown field is ignored.
        """
        if not isinstance(data, dict) or not isinstance(data.get("nodeid"), str):
            raise ValueError("not a test record")
        duration = data.get("duration")
        finite = isinstance(duration, int | float) and not isinstance(duration, bool) and 0 <= duration < 1e9
        diff = data.get("diff")
        return cls(
            nodeid=clean(data["nodeid"], 4096),
            lab=_optional_text(data, "lab"),
            outcome=clean(data.get("outcome", ""), 20),
            exc_type=_optional_text(data, "exc_type"),
            exc_lab=_optional_text(data, "exc_lab"),
            message=_text(data, "message"),
            location=_optional_text(data, "location"),
            skip_reason=_text(data, "skip_reason"),
            owner_lab=_optional_text(data, "owner_lab"),
            function=_optional_text(data, "function"),
            question=_text(data, "question"),
            diff=[clean(line, 4096) for line in diff if isinstance(line, str)]
            if isinstance(diff, list)
            else [],
            duration=round(float(duration), 6) if finite and isinstance(duration, int | float) else 0.0,
            candidates=_texts(data.get("candidates")),
            more_candidates=min(_count(data, "more_candidates"), 10_000),
        )


def _texts(value: object) -> list[str]:
    """A list of short texts read back from a run (anything else: empty)."""
    return [clean(v, 4096) for v in value[:20] if isinstance(v, str)] if isinstance(value, list) else []


def _text(data: dict[str, Any], name: str, limit: int = 4096) -> str:
    value = data.get(name)
    return clean(value, limit) if isinstance(value, str) else ""


def _count(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _optional_text(data: dict[str, Any], name: str, limit: int = 4096) -> str | None:
    value = data.get(name)
    return clean(value, limit) if isinstance(value, str) else None


@dataclass
class CollectError:
    """A test module that could not be imported: where the learner's code broke, its lab, the error."""

    nodeid: str = ""
    message: str = ""
    location: str | None = None
    lab: str | None = None

    @classmethod
    def from_json(cls, data: object) -> CollectError:
        """A collection error read back from a run, checked and cleaned; ValueError when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("not a collection error")
        return cls(
            _text(data, "nodeid"),
            _text(data, "message"),
            _optional_text(data, "location"),
            _optional_text(data, "lab"),
        )


@dataclass
class LabSummary:
    """One row of the report."""

    id: str
    title: str
    optional: bool
    passed: int = 0
    total: int = 0
    status: Status = Status.NOT_STARTED
    blocked_by: str | None = None
    first_failure: TestRecord | None = None
    records: list[TestRecord] = field(default_factory=list)
    #: Tests of this lab the run selected; more than `total` when the run stopped early (-x, --maxfail).
    collected: int = 0

    @classmethod
    def from_json(cls, row: object) -> LabSummary:
        """A summary row as the closing record of a run carries it (without its test records), checked."""
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError("not a lab summary")
        return cls(
            id=clean(row["id"], 40),
            title=_text(row, "title"),
            optional=row.get("optional") is True,
            status=status_of(row.get("status")) or Status.NOT_STARTED,
            blocked_by=_optional_text(row, "blocked_by", 40),
            passed=_count(row, "passed"),
            total=_count(row, "total"),
            collected=_count(row, "collected"),
        )


@dataclass(frozen=True)
class Carried:
    """Where a `practice --from` folder started: the learner's parent folder and what came from it."""

    folder: str = ""
    checkpoint: str = ""
    #: The learner's own files carried over.
    files: tuple[str, ...] = ()
    #: The learner's parent files that the course supplied instead (this chapter changes them).
    replaced: tuple[str, ...] = ()


@dataclass(frozen=True)
class FolderMeta:
    """A practice folder's `.pi-course/meta.json`, as read (`core.folder` checks its format first)."""

    checkpoint: str
    slug: str = "?"
    kit_version: str = "?"
    created: str = "?"
    kind: str = "labs"
    teaching_files: tuple[str, ...] = ()
    #: sha256 of each file as it was shipped, by relative path.
    files: dict[str, str] = field(default_factory=dict)
    #: How many hints of each lab the learner has seen.
    hints: dict[str, int] = field(default_factory=dict)
    carried: Carried | None = None
    #: The lab the last check named as the next step (where `hint` starts when no lab is named).
    last_next_lab: str | None = None

    @classmethod
    def from_json(cls, data: object) -> FolderMeta:
        """The metadata read back, checked: ValueError without a checkpoint; a malformed field is dropped."""
        if not isinstance(data, dict) or not isinstance(data.get("checkpoint"), str | int):
            raise ValueError("no checkpoint")

        def texts(value: object) -> tuple[str, ...]:
            return (
                tuple(clean(v, 4096) for v in value if isinstance(v, str)) if isinstance(value, list) else ()
            )

        files, hints, carried = data.get("files"), data.get("hints"), data.get("from")
        return cls(
            checkpoint=clean(data["checkpoint"], 40),
            slug=_text(data, "slug", 200) or "?",
            kit_version=_text(data, "kit_version", 200) or "?",
            created=_text(data, "created", 200) or "?",
            kind=_text(data, "kind", 40) or "labs",
            teaching_files=texts(data.get("teaching_files")),
            files={str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {},
            hints={str(k): v for k, v in hints.items() if isinstance(v, int) and not isinstance(v, bool)}
            if isinstance(hints, dict)
            else {},
            carried=Carried(
                _text(carried, "folder"),
                _text(carried, "checkpoint", 40),
                texts(carried.get("files")),
                texts(carried.get("replaced")),
            )
            if isinstance(carried, dict)
            else None,
            last_next_lab=_optional_text(data, "last_next_lab", 40),
        )


def parse_marker_line(line: str) -> LabInfo | None:
    """Read a marker registration `lab6_1: 6.1 | title[ | optional]` back into a LabInfo."""
    name, _sep, description = line.partition(":")
    name = name.strip()
    parts = [part.strip() for part in description.split(" | ")]
    if len(parts) >= 2 and parts[0]:
        implements = next(
            (p.removeprefix("implements=") for p in parts[2:] if p.startswith("implements=")), ""
        )
        english = next((p.removeprefix("title_en=") for p in parts[2:] if p.startswith("title_en=")), "")
        return LabInfo(
            parts[0],
            name,
            english if english and wants_english() else parts[1],
            "optional" in parts[2:],
            "inherited" in parts[2:],
            tuple(n for n in implements.split(",") if n),
        )
    if match := LAB_MARKER.match(name):
        return LabInfo(f"{match['major']}.{match['minor']}", name)
    return None


# -- the owner map: which lab owns a line of the learner's code ----------------------------------


def lab_at(lines: list[str], line: int) -> str | None:
    """The lab whose `# ## Lab X.Y` section holds line `line` (1-based) of a file's lines: the one owner map.

    It lives here, not in `regions`, because it travels into every staged tree with this file;
    `regions` exports it for the kit.
    """
    for text in reversed(lines[:line]):
        if match := LAB_SECTION.match(text):
            return match["lab"]
    return None


def lab_of_line(path: Path, line: int) -> str | None:
    """The lab whose `# ## Lab X.Y` section holds this line of a file of the learner's package."""
    try:
        return lab_at(path.read_text(encoding="utf-8").splitlines(), line)
    except (OSError, UnicodeDecodeError):
        return None


def _functions(path: Path) -> tuple[tuple[str, int, int, int], ...]:
    """(qualified name, `def` line, last line, first decorator line or the `def` line) of every function of
    a file; () when it does not parse."""
    try:
        info = path.stat()
    except OSError:
        return ()
    # A red run asks about the same few files dozens of times: parse each version of a file once.
    return _parsed_functions(str(path), info.st_mtime_ns, info.st_size)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while the body runs, when the body parses Python source.

    CPython 3.11 raises SystemError ("AST constructor recursion depth mismatch") when a collection
    inside a parse runs a finalizer that parses again (a learner's never-retrieved task exception is
    logged with a rendered traceback): the nested parse resets the outer one's depth count.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@functools.lru_cache(maxsize=32)
def _parsed_functions(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[str, int, int, int], ...]:
    try:
        source = Path(path).read_text(encoding="utf-8")
        with collector_paused():
            tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, SystemError):
        return ()
    found: list[tuple[str, int, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                top = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append((f"{prefix}{child.name}", child.lineno, child.end_lineno or child.lineno, top))
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return tuple(found)


def function_at(path: Path, line: int) -> str | None:
    """The innermost function (qualified, `ObjectSchema.__init__`) holding a line of a file."""
    holding = [(name, first) for name, first, last, _top in _functions(path) if first <= line <= last]
    return max(holding, key=lambda item: item[1])[0] if holding else None


def function_line(path: Path, name: str) -> int | None:
    """The `def` line of a function of a file by qualified name (`Agent._emit`), None when it has none."""
    return next((first for qualified, first, _last, _top in _functions(path) if qualified == name), None)


def function_span(path: Path, name: str) -> tuple[int, int] | None:
    """The lines a function of a file takes by qualified name, its decorators included; None if none."""
    return next(((top, last) for qualified, _first, last, top in _functions(path) if qualified == name), None)


def module_data(path: Path) -> tuple[tuple[str, int], ...]:
    """(name, line) of every module-level name a file assigns (`_TRACE = (...)`), in source order."""
    try:
        info = path.stat()
    except OSError:
        return ()
    return _parsed_data(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=32)
def _parsed_data(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[str, int], ...]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, SystemError):
        return ()
    found: list[tuple[str, int]] = []
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        found.extend((target.id, node.lineno) for target in targets if isinstance(target, ast.Name))
    return tuple(found)


def defined_at(path: Path, line: int) -> str | None:
    """The module-level name a line outside every function defines (`_TRACE = (...)`), if any."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                return node.name
            names = [target.id for target in targets if isinstance(target, ast.Name)]
            return names[0] if names else None
    return None


#: A stub's raise, `LabNotImplemented("1.2", …)`: group 1 is its lab.
STUB_RAISE = re.compile(r"LabNotImplemented\(\s*[\"']([^\"']+)[\"']")


@dataclass(frozen=True)
class _LabMarks:
    """Where one file mentions labs: each lab's first stub line, its first `# ## Lab` heading, and every
    lab whose stub the file raises (a raise wrapped over two lines counts here, not as a line)."""

    stub_lines: dict[str, int]
    heading_lines: dict[str, int]
    stubbed: frozenset[str]


def _lab_marks(path: Path) -> _LabMarks | None:
    try:
        info = path.stat()
    except OSError:
        return None
    # The summary asks where each of up to ~70 labs starts: scan each version of a file once, not per lab.
    return _scanned_marks(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=64)
def _scanned_marks(path: str, _mtime_ns: int, _size: int) -> _LabMarks | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    stub_lines: dict[str, int] = {}
    heading_lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        for match in STUB_RAISE.finditer(line):
            stub_lines.setdefault(match[1], number)
        if heading := LAB_SECTION.match(line):
            heading_lines.setdefault(heading["lab"], number)
    return _LabMarks(stub_lines, heading_lines, frozenset(m[1] for m in STUB_RAISE.finditer(text)))


def _package_marks(root: Path, package: str) -> list[tuple[Path, _LabMarks]]:
    """The scanned files of the learner's package, in path order."""
    return [(path, marks) for path in sorted((root / package).rglob("*.py")) if (marks := _lab_marks(path))]


def lab_entry(root: Path, package: str, lab: LabInfo) -> tuple[str, str | None] | None:
    """(`path:line`, function) where a lab starts: its first stub's raise, else its first function, else its
    heading."""
    wanted = [name for target in lab.implements for name in (target, f"{target}.__init__")]
    files = _package_marks(root, package)
    for path, marks in files:
        if (number := marks.stub_lines.get(lab.id)) is not None:
            return f"{path.relative_to(root).as_posix()}:{number}", function_at(path, number)
    found = [
        (wanted.index(name), f"{path.relative_to(root).as_posix()}:{first}", name)
        for path, _marks in files
        for name, first, _last, _top in _functions(path)
        if name in wanted
    ]
    if found:
        _rank, where, name = min(found)
        return where, name
    return next(
        (
            (f"{path.relative_to(root).as_posix()}:{marks.heading_lines[lab.id]}", None)
            for path, marks in files
            if lab.id in marks.heading_lines
        ),
        None,
    )


def function_entry(root: Path, package: str, name: str) -> tuple[str, str] | None:
    """(`path:line`, function) of a function of the learner's package, by qualified name.

    A class name stands for its `__init__`; the first file (in path order) that defines it wins.
    """
    for path in sorted((root / package).rglob("*.py")):
        for qualified, first, _last, _top in _functions(path):
            if qualified in (name, f"{name}.__init__"):
                return f"{path.relative_to(root).as_posix()}:{first}", qualified
    return None


def edit_target(lab: LabInfo | None, named: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The functions a failing test of `lab` sends the learner to edit, the first one first.

    The test's own `edits` marker names them (`named`: usually one; a test that checks two functions
    at once names both); a lab that implements exactly one function needs no marker. Empty when
    neither says (the report then falls back to the lab's first stub).
    """
    if named:
        return named
    if lab is not None and len(lab.implements) == 1:
        return lab.implements[:1]
    return ()


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


def package_files(root: Path, package: str) -> dict[str, str]:
    """sha256 of each file of the learner's package, by path relative to the package."""
    folder = root / package
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            files[path.relative_to(folder).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _stale_labs(
    root: Path, package: str, recorded: dict[str, str], order: list[str], optional: set[str]
) -> set[str] | None:
    """The labs whose recorded status the edits since that record may have changed; None: every lab.

    A lab's tests run its own code and the code of the labs before it, so an edited file that holds
    `# ## Lab X` sections unsettles X and every lab after it. A file of the learner's own that no other
    file names (the optional exercise's `uppercase.py`) unsettles only the optional labs; any other
    edit, or a removed file, unsettles everything.
    """
    folder = root / package
    current = package_files(root, package)
    changed = [rel for rel, digest in current.items() if recorded.get(rel) != digest]
    if any(rel not in current for rel in recorded):
        return None
    texts: dict[str, str] = {}
    for rel in current:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts[rel] = (folder / rel).read_text(encoding="utf-8")
    stale: set[str] = set()
    for rel in changed:
        sections = [m["lab"] for line in texts.get(rel, "").splitlines() if (m := LAB_SECTION.match(line))]
        if sections:
            if any(lab not in order for lab in sections):
                return None
            stale.update(order[min(order.index(lab) for lab in sections) :])
            continue
        stem = Path(rel).stem
        named = re.compile(rf"\b{re.escape(stem)}\b")
        if stem == "__init__" or any(named.search(text) for other, text in texts.items() if other != rel):
            return None
        stale.update(optional)
    return stale


def read_progress(root: Path, package: str | None = None) -> dict[str, str]:
    """Lab id -> status as recorded by earlier runs in this practice folder ({} elsewhere).

    With `package`, only what the edits since a record cannot have changed counts (see `_stale_labs`):
    a lab the run did not select is unknown again after an edit to its code or an earlier lab's, not
    done (nor failing) on the strength of an older version.
    """
    try:
        data = json.loads((root / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    labs = data.get("labs")
    found = {str(k): str(v) for k, v in labs.items()} if isinstance(labs, dict) else {}
    if package is None:
        return found
    files, order, optional = data.get("files"), data.get("order"), data.get("optional")
    if not (isinstance(files, dict) and isinstance(order, list) and isinstance(optional, list)):
        # An older record: it holds only while the package is byte for byte the same.
        return found if data.get("fingerprint") == package_fingerprint(root, package) else {}
    stale = _stale_labs(
        root,
        package,
        {str(k): str(v) for k, v in files.items()},
        [str(i) for i in order],
        set(map(str, optional)),
    )
    return {} if stale is None else {lab: status for lab, status in found.items() if lab not in stale}


def write_progress(
    root: Path, rows: list[LabSummary], package: str, labs_info: list[LabInfo] | None = None
) -> None:
    """Record the labs this run checked in full; only inside a practice folder, never failing the run.

    `labs_info` (the tree's labs, in order) lets a later edit unsettle only the labs it can reach.
    """
    if not (root / ".pi-course" / "meta.json").is_file():
        return
    labs = read_progress(root, package)
    for row in rows:
        if row.total and row.collected == row.total:
            labs[row.id] = row.status
    record: dict[str, Any] = {"labs": labs, "fingerprint": package_fingerprint(root, package)}
    if labs_info is not None:
        record["files"] = package_files(root, package)
        record["order"] = [lab.id for lab in labs_info]
        record["optional"] = [lab.id for lab in labs_info if lab.optional]
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
    if failure.exc_type == "AssertionError" or failure.diff or not failure.message:
        return f"{name}{question}"
    # The test's question (in the run's language) comes first; what stopped it follows.
    if question:
        return _("{name}{question} ({message})").format(name=name, question=question, message=failure.message)
    return f"{name}: {failure.message}"


def next_step(
    rows: list[LabSummary],
    labs: list[LabInfo],
    recorded: dict[str, str] | None = None,
    entries: dict[str, tuple[str, str | None]] | None = None,
    stubbed: set[str] | None = None,
) -> dict[str, Any] | None:
    """The earliest unfinished required lab (whether this run selected it or not), where to edit, how to
    re-run.

    A lab this run did not select is known to be unfinished when the folder's record says so or one of
    its stubs (`stubbed`) still raises. When every required lab left is merely unchecked since an edit,
    the step says that (`unchecked`: their ids) and asks for a whole run, pointing at no code. None only
    when every required lab passed in this run or, for labs it did not run, in the folder's recorded
    state. Then the optional exercise is offered (`optional: True`) until it is done.
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
            pending.append((lab, None, lab.id in recorded or lab.id in (stubbed or set())))
    required = [item for item in pending if not item[0].optional]
    if required and not any(item[2] for item in required):
        return _unchecked_step(rows, [item[0] for item in required])
    if not required:
        optional = [item for item in pending if item[0].optional]
        if not optional:
            return None
        required = optional[:1]
    # A lab this run found unfinished comes first: the step speaks of what the learner just ran. Else
    # the earliest lab known to be unfinished (an earlier run's record, a stub); a lab nobody checked
    # since the last edit is next only when nothing known is left.
    ran = [item for item in required if item[1] is not None and item[1].id == item[0].id]
    known = [item for item in required if item[2]]
    lab, row, _known = (ran or known or required)[0]
    if row is not None and row.status == BLOCKED and row.blocked_by:
        blocked_by = row.blocked_by
        blocker = by_id.get(blocked_by)
        red = blocker is not None and blocker.total > 0 and blocker.status != DONE
        if red and blocker is not None:
            row = blocker
        # The blocker is named only when it is known to be unfinished: red in this run, recorded red, a
        # stub of its own, or its code looping. Never a lab that is green, nor one nobody ran since the
        # last edit that merely raised on what a later lab gave it: then the blocked lab itself is next.
        failure = row.first_failure
        stuck = failure is not None and (
            failure.exc_type == "LearnerTimeout" or failure.exc_lab == blocked_by
        )
        # A blocker later than the blocked lab owns the very line the failure names (a checker's
        # `file:line`, such as mypy's, in a later lab's code): that line is where the mistake is.
        order = [info.id for info in labs]
        later = blocked_by in order and lab.id in order and order.index(blocked_by) > order.index(lab.id)
        unfinished = recorded.get(blocked_by, DONE) != DONE or blocked_by in (stubbed or set())
        if red or stuck or later or unfinished:
            lab = next((info for info in labs if info.id == blocked_by), lab)
    failure = row.first_failure if row is not None else None
    if row is not None and row.id != lab.id:  # the blocked lab's failure stands for its blocker's
        row = LabSummary(lab.id, lab.title, lab.optional, status=FAILING, first_failure=failure, total=1)
    entry = (entries or {}).get(lab.id)
    location = failure.location if failure and failure.location else (entry[0] if entry else None)
    function = failure.function if failure and failure.location else (entry[1] if entry else None)
    status = row.status if row is not None else NOT_RUN
    if row is not None:
        what = _failure_text(failure, lab.id, status)
    elif lab.optional:
        what = lab.title or _("optional exercise")
    else:
        what = _("not checked by this run: it is the next lab to do")
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
        "candidates": list(failure.candidates) if failure and failure.location else [],
        "more_candidates": failure.more_candidates if failure and failure.location else 0,
    }


def _unchecked_step(rows: list[LabSummary], unchecked: list[LabInfo]) -> dict[str, Any]:
    """The step when nothing is known to be unfinished, but required labs went unchecked since an edit."""
    ids = [lab.id for lab in unchecked]
    names = ", ".join(ids) if len(ids) <= 6 else f"{', '.join(ids[:3])} … {ids[-1]} ({len(ids)})"
    what = (
        _("every lab this run checked passes; not checked since your last change: {labs}").format(labs=names)
        if any(row.total for row in rows)
        else _("not checked since your last change: {labs}").format(labs=names)
    )
    return {
        "lab": unchecked[0].id,
        "title": unchecked[0].title,
        "status": NOT_RUN,
        "optional": False,
        "unchecked": [lab.id for lab in unchecked],
        "location": None,
        "function": None,
        "what": what,
        "question": "",
        "diff": [],
        "message": "",
        "command": "python -m pytest",
    }


def stubbed_labs(root: Path, package: str, labs: list[LabInfo]) -> set[str]:
    """The labs with a `LabNotImplemented` stub still raising somewhere in the learner's package."""
    wanted = {lab.id for lab in labs}
    return {lab for _path, marks in _package_marks(root, package) for lab in marks.stubbed if lab in wanted}


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
    names: dict[str, str] = {
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


def step_lines(step: NextStep | None, all_done_label: str | None = None) -> list[str]:
    """The next-step lines under the table: what, the test's question and difference, edit, run."""
    if step is None:
        return [all_done_label or all_done_text()]
    if step.unchecked:
        return [
            _("next: {what}").format(what=step.what),
            _("  run:  {command}").format(command=step.command),
        ]
    lines = []
    if step.optional:
        lines.append(_("every required lab is done; if you like, try the optional exercise:"))
    label = _("optional") if step.optional else _("next")
    lines.append(
        _("{label}: Lab {lab} ({status}) — {what}").format(
            label=label, lab=step.lab, status=status_text(step.status), what=step.what
        )
    )
    for line in step.diff:
        lines.append(_("  diff: {line}").format(line=line))
    if step.candidates:
        lines.extend(edit_candidate_lines(step.candidates, step.more_candidates))
    elif step.location:
        function = f" ({step.function})" if step.function else ""
        lines.append(_("  edit: {where}").format(where=f"{step.location}{function}"))
    lines.append(_("  run:  {command}").format(command=step.command))
    return lines


def edit_candidate_lines(candidates: tuple[str, ...], more: int = 0) -> list[str]:
    """The `edit:` lines when the failing test ran several functions that may hold the mistake."""
    lines = [
        _(
            "  edit: the test ran {count} of your functions that may hold the mistake; look at them in this "
            "order:"
        ).format(count=len(candidates) + more)
    ]
    lines.extend(f"        {where}" for where in candidates)
    if more:
        lines.append(_("        … and {count} more").format(count=more))
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
        f"{pad(line[0], widths[0])}  {pad(line[1], widths[1], right=True)}  {pad(line[2], widths[2])}  "
        f"{line[3]}".rstrip()
        for line in [header, *cells]
    ]


def render(
    rows: list[LabSummary], step: NextStep | None, stopped_early: bool = False, kind: str = "labs"
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


@dataclass(frozen=True)
class NextStep:
    """The next step of a run, as its closing summary carries it (`next_step` writes it)."""

    lab: str
    title: str = ""
    status: Status = Status.NOT_RUN
    optional: bool = False
    location: str | None = None
    function: str | None = None
    what: str = ""
    question: str = ""
    diff: tuple[str, ...] = ()
    message: str = ""
    command: str = ""
    #: The required labs not checked since the last edit, when that is all that is left.
    unchecked: tuple[str, ...] = ()
    #: The functions the failing test ran that may hold the mistake (`path:line (function)`), when
    #: it cannot say which one; and how many more it ran than are named.
    candidates: tuple[str, ...] = ()
    more_candidates: int = 0

    @classmethod
    def from_json(cls, data: object) -> NextStep:
        """The step read back, checked and cleaned; ValueError when it names no lab."""
        if not isinstance(data, dict) or not isinstance(data.get("lab"), str):
            raise ValueError("not a next step")

        def texts(value: object) -> tuple[str, ...]:
            return (
                tuple(clean(v, 4096) for v in value if isinstance(v, str)) if isinstance(value, list) else ()
            )

        return cls(
            lab=clean(data["lab"], 40),
            title=_text(data, "title"),
            status=status_of(data.get("status")) or Status.NOT_RUN,
            optional=data.get("optional") is True,
            location=_optional_text(data, "location"),
            function=_optional_text(data, "function"),
            what=_text(data, "what"),
            question=_text(data, "question"),
            diff=texts(data.get("diff")),
            message=_text(data, "message"),
            command=_text(data, "command"),
            unchecked=texts(data.get("unchecked")),
            candidates=tuple(_texts(data.get("candidates"))),
            more_candidates=min(_count(data, "more_candidates"), 10_000),
        )


@dataclass
class RunReport:
    """A whole record stream, typed: test records, lab rows, the next step, collection errors."""

    tests: list[TestRecord] = field(default_factory=list)
    labs: list[LabSummary] = field(default_factory=list)
    next: NextStep | None = None
    collect_errors: list[CollectError] = field(default_factory=list)
    #: The run wrote its closing summary (a run without one was killed or ended itself).
    finished: bool = False
    stopped_early: bool = False

    @classmethod
    def read(cls, lines: list[str]) -> RunReport:
        """Read a record stream; a line that is not a record (the stream may be a learner's) is dropped."""
        report = cls()
        for line in lines:
            try:
                record = json.loads(line) if line.strip() else None
                event = record.get("event") if isinstance(record, dict) else None
                if event == "test":
                    report.tests.append(TestRecord.from_json(record))
                elif event == "collect_error":
                    report.collect_errors.append(CollectError.from_json(record))
                elif event == "summary" and isinstance(record, dict):
                    rows, step = record.get("labs"), record.get("next")
                    report.labs = (
                        [LabSummary.from_json(row) for row in rows] if isinstance(rows, list) else []
                    )
                    report.next = NextStep.from_json(step) if step is not None else None
                    report.finished, report.stopped_early = True, record.get("stopped_early") is True
            except (ValueError, RecursionError):
                continue
        return report
