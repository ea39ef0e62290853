"""Helpers used inside a checkpoint notebook: pick the tree, run a lab's checks inline, render values.

Only the notebook kernel (its own interpreter) imports `pi_course`; this module never does.
"""

from __future__ import annotations

import html
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_course_kit.core import manifest, runner, staging
from pi_course_kit.core.errors import KitError

TREE_ENV = "PI_COURSE_TREE"
PACKAGE = "pi_course"
META = Path(".pi-course") / "meta.json"
DEFAULT_CHECKPOINT = "06"

_current: Tree | None = None


@dataclass(frozen=True)
class Tree:
    """The folder whose `pi_course` the notebook runs, and how it was found."""

    path: Path
    kind: str  # "practice", "solution", "override"
    shown: str  # what the notebook prints: stable across machines
    checkpoint: str


def _has_package(folder: Path) -> bool:
    return (folder / PACKAGE / "__init__.py").is_file()


def _checkpoint_of(folder: Path, default: str) -> str:
    meta = folder / META
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
    value = data.get("checkpoint") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else default


def find_tree(cwd: Path | None = None, checkpoint: str = DEFAULT_CHECKPOINT) -> Tree:
    """Decide which tree a notebook started in `cwd` runs: env override, practice folder, or the solution."""
    cwd = (cwd or Path.cwd()).resolve()
    override = os.environ.get(TREE_ENV, "").strip()
    if override:
        path = Path(override).expanduser().resolve()
        if not _has_package(path):
            raise KitError(
                f"{TREE_ENV}={override} has no {PACKAGE}/__init__.py; point it at a folder holding {PACKAGE}/ "
                f"or unset it"
            )
        return Tree(path, "override", f"{TREE_ENV} → {path}", _checkpoint_of(path, checkpoint))
    if _has_package(cwd):
        return Tree(cwd, "practice", f"./{PACKAGE}（练习目录：{cwd.name}）", _checkpoint_of(cwd, checkpoint))
    for root in (cwd.parent, cwd):
        if (root / "course.toml").is_file():
            course = manifest.load(root / "course.toml")
            solution = course.root / course.checkpoint(checkpoint).solution
            if _has_package(solution):
                shown = os.path.relpath(solution, cwd)
                return Tree(solution, "solution", f"{shown}（仓库里的参考解）", checkpoint)
    raise KitError(
        f"no {PACKAGE} tree found from {cwd}; open the notebook from a practice folder (next to {PACKAGE}/), "
        f"from the repository's notebooks/ folder, or set {TREE_ENV}=/path/to/tree"
    )


def use_tree(checkpoint: str = DEFAULT_CHECKPOINT, *, cwd: Path | None = None, quiet: bool = False) -> Path:
    """Put the notebook's tree first on sys.path, refuse a different `pi_course` already imported, report it."""
    global _current
    tree = find_tree(cwd, checkpoint)
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if tree.path not in origin.parents:
            raise KitError(
                f"a different {PACKAGE} is already imported from {origin.parent}; restart the kernel "
                f"so that {tree.path} is the only one"
            )
    entry = str(tree.path)
    # Remove then insert, so a re-run keeps exactly one entry and it stays first.
    sys.path[:] = [item for item in sys.path if item != entry]
    sys.path.insert(0, entry)
    _current = tree
    if not quiet:
        print(f"pi_course 来自：{tree.shown}")
    return tree.path


def current_tree() -> Tree:
    """The tree chosen by the last `use_tree()` call in this kernel."""
    if _current is None:
        raise KitError("no tree chosen yet; run the first code cell (use_tree()) before this one")
    return _current


# ---------------------------------------------------------------------------- rendering


def plain(value: object) -> object:
    """Turn messages, outputs and dataclasses into JSON-like data; `timestamp` becomes `<int ms>`."""
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return plain(value.to_dict())
    if isinstance(value, dict):
        return {
            str(key): (_timestamp(item) if key == "timestamp" else plain(item)) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    fields = getattr(value, "__dataclass_fields__", None)
    if isinstance(fields, dict):
        return {name: plain(getattr(value, name)) for name in fields if not callable(getattr(value, name))}
    # Never a default repr: it would print a memory address into the stored outputs.
    return f"<{type(value).__name__}>"


def _timestamp(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return "<int ms>"
    return f"<{type(value).__name__}: not int ms>"


def dumps(value: object) -> str:
    """Pretty JSON of `plain(value)`, Chinese kept readable."""
    return json.dumps(plain(value), ensure_ascii=False, indent=2)


def compact(value: object) -> str:
    """One-line JSON of `plain(value)`."""
    return json.dumps(plain(value), ensure_ascii=False)


def show(value: object) -> None:
    """Print a message, output or dict the way the chapter writes it (timestamp hidden)."""
    print(dumps(value))


# ---------------------------------------------------------------------------- inline checks

MAX_FAILURES = 5
STATUS_COLOURS = {"done": "#1a7f37", "failing": "#cf222e", "not started": "#9a6700", "blocked": "#8250df"}


@dataclass
class CheckReport:
    """The focused tests of one lab, run on the notebook's tree; renders as a table."""

    lab: str
    marker: str
    tree: str
    returncode: int
    labs: list[dict[str, Any]]
    tests: list[dict[str, Any]]
    next_step: dict[str, Any] | None
    problem: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every selected test passed."""
        return self.returncode == 0 and not self.problem and bool(self.tests)

    def _status_line(self) -> str:
        if self.problem:
            return self.problem
        row = next((r for r in self.labs if r["id"] == self.lab), None)
        if row is None:
            return f"Lab {self.lab}: no test ran"
        return f"Lab {self.lab}: {row['passed']}/{row['total']} {row['status']}"

    def failures(self) -> list[dict[str, Any]]:
        """The tests that did not pass, in run order."""
        return [test for test in self.tests if test["outcome"] != "passed"]

    def _shown_failures(self) -> tuple[list[tuple[str, str]], int]:
        failed = self.failures()
        shown = [(test["nodeid"].rpartition("::")[2], test["message"] or test["outcome"]) for test in failed]
        return shown[:MAX_FAILURES], max(0, len(failed) - MAX_FAILURES)

    def __str__(self) -> str:
        out = [f"check({self.lab!r}) · python -m pytest -m {self.marker} · {self.tree}", self._status_line()]
        for row in self.labs:
            blocked = f" by {row['blocked_by']}" if row.get("blocked_by") else ""
            tests = f"{row['passed']}/{row['total']}"
            out.append(f"  {row['id']:<9} {tests:>7}  {row['status'] + blocked:<16} {row['title']}")
        shown, more = self._shown_failures()
        out += [f"  ✗ {name} — {message}" for name, message in shown]
        if more:
            out.append(f"  … and {more} more failing")
        if self.next_step and self.next_step.get("location"):
            out.append(f"  next: edit {self.next_step['location']}")
        return "\n".join(out)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        esc = html.escape
        rows = []
        for row in self.labs:
            colour = STATUS_COLOURS.get(row["status"], "#57606a")
            blocked = f" by {esc(str(row['blocked_by']))}" if row.get("blocked_by") else ""
            rows.append(
                f"<tr><td>{esc(row['id'])}</td><td>{row['passed']}/{row['total']}</td>"
                f"<td style='color:{colour};font-weight:bold'>{esc(row['status'])}{blocked}</td>"
                f"<td>{esc(row['title'])}</td></tr>"
            )
        shown, more = self._shown_failures()
        items = [
            f"<li><span style='color:#cf222e'>✗</span> {esc(n)} — <code>{esc(m)}</code></li>"
            for n, m in shown
        ]
        if more:
            items.append(f"<li>… and {more} more failing</li>")
        nxt = ""
        if self.next_step and self.next_step.get("location"):
            nxt = f"<div>next: edit <code>{esc(self.next_step['location'])}</code></div>"
        colour = "#1a7f37" if self.passed else "#cf222e"
        return (
            "<div style='font-family:sans-serif;font-size:13px'>"
            f"<div><b>check({esc(repr(self.lab))})</b> · <code>python -m pytest -m {esc(self.marker)}</code>"
            f" · {esc(self.tree)}</div><div style='color:{colour}'><b>{esc(self._status_line())}</b></div>"
            "<table><tr><th>lab</th><th>tests</th><th>status</th><th>title</th></tr>"
            f"{''.join(rows)}</table><ul style='margin:4px 0'>{''.join(items)}</ul>{nxt}</div>"
        )


def check(lab_id: str, *, timeout: float = 60.0) -> CheckReport:
    """Run one lab's focused tests on the notebook's tree (staged copy, own interpreter) and report them."""
    tree = current_tree()
    course = manifest.load()
    checkpoint = course.checkpoint(tree.checkpoint)
    lab = checkpoint.lab(lab_id)
    with staging.staged(course, checkpoint, tree.path) as folder:
        # No tracebacks: the table comes from the report plugin, and formatting dozens of starter
        # tracebacks took seconds. The terminal command shown to the learner keeps them.
        result = runner.run_tests(folder, ["-m", lab.marker, "--tb=no"], timeout=timeout)
    problem = ""
    if result.timed_out:
        problem = f"the tests of Lab {lab_id} did not finish within {timeout:g} s"
    elif result.collect_errors:
        problem = f"the tests cannot be collected: {result.collect_errors[0].get('message', '')}"
    elif not result.finished:
        problem = f"pytest ended without a report (exit {result.returncode})"
    return CheckReport(
        lab=lab_id,
        marker=lab.marker,
        tree=tree.shown,
        returncode=result.returncode,
        labs=result.labs,
        tests=result.tests,
        next_step=result.next_step,
        problem=problem,
    )
