"""Execute checkpoint notebooks with nbclient: error reports for tests and `verify`, and stored-output
refresh.

pi-course nbrun --refresh notebooks/06-tool-contract.ipynb
pi-course nbrun --check-fresh notebooks/06-tool-contract.ipynb
pi-course nbrun --errors notebooks/06-tool-contract.ipynb --tree labs/06-tool-contract --allow-lab-errors
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from traitlets.config import Config

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import replace_file
from pi_course_kit.core.i18n import LANG_ENV, _
from pi_course_kit.core.runner import RUN_CACHE_ENV
from pi_course_kit.notebook.checks import RUN_SECONDS
from pi_course_kit.notebook.helpers import TREE_ENV
from pi_course_kit.notebook.tree import course_of

#: The bound on one cell: longer than a progress() cell's own bound on its test run, so that a slow run
#: ends with the cell's own message, never with the kernel's time-out.
CELL_SECONDS = RUN_SECONDS + 60

KERNEL_NAME = "python3"
LAB_ERROR = "LabNotImplemented"
RAISES_TAG = "raises-exception"
REFRESH_COMMAND = "pi-course nbrun --refresh {path}"
TEXT_MIMES = ("text/plain", "text/html", "text/markdown")

# What legitimately changes between two runs of the same notebook on the same code.
_VOLATILE = [
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x…"),
    (re.compile(r"(/private)?/tmp/[^\s'\"<>)]*"), "<tmp>"),
    (re.compile(r"\b1[0-9]{12}\b"), "<ms>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|seconds)\b"), "<duration>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
]


def load(path: Path) -> NotebookNode:
    """Read a notebook (nbformat 4) or raise KitError naming the file."""
    try:
        nb: NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
        return nb
    except FileNotFoundError:
        raise KitError(f"notebook not found: {path}; pass the path of an .ipynb file") from None
    except Exception as error:
        raise KitError(f"{path}: not a readable notebook ({error}); restore it from the repository") from None


def save(nb: NotebookNode, path: Path) -> None:
    """Write a notebook next to `path` and rename it into place, so a failed write loses nothing."""
    replace_file(path, lambda tmp: nbformat.write(nb, tmp))  # type: ignore[no-untyped-call]


def validation_errors(nb: NotebookNode) -> list[str]:
    """nbformat schema problems, one line each (empty when the notebook is valid)."""
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as error:
        return [f"nbformat: {error.message}"]
    return []


def kernel_env(tree: Path | None, near: Path | None = None) -> dict[str, str]:
    """The kernel's environment: this one in the course language, the tree override set (or removed for repo
    mode).

    The course is the one `tree` belongs to, else the one of `near` (default: the current folder).
    """
    env = dict(os.environ)
    env.pop(TREE_ENV, None)
    env.pop("PYTHONPATH", None)  # exactly one tree may be importable in the kernel
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    # Stored outputs are compared across machines: the kernel speaks the course language, whatever the
    # caller's locale or --lang, so a refresh on an English desktop keeps the learner's words.
    env[LANG_ENV] = course_of(tree or near or Path.cwd()).language
    if tree is not None:
        env[TREE_ENV] = str(tree.resolve())
    return env


def execute(
    nb: NotebookNode,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = CELL_SECONDS,
) -> NotebookNode:
    """Run every cell of a copy of `nb` in a fresh `python3` kernel started in `cwd`; errors stay as
    outputs."""
    run = copy.deepcopy(nb)
    # Local sockets rather than loopback TCP: no port another user of the machine can reach, and no
    # plain-text-transport warning from ipykernel in the middle of a run's report. The sockets' path is
    # absolute (the kernel runs in `cwd`) and short (a socket path has about 100 bytes).
    with tempfile.TemporaryDirectory(prefix="pi-course-kernel-") as sockets:
        # Through the config, not a ready manager, so nbclient still owns and shuts down its kernel.
        config = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "k")}})
        client = NotebookClient(
            run,
            config=config,
            timeout=int(timeout),
            startup_timeout=60,
            kernel_name=KERNEL_NAME,
            allow_errors=True,  # keep going, so every offending cell is reported, not just the first
            record_timing=False,
            resources={"metadata": {"path": str(cwd)}},
        )
        try:
            client.execute(env=dict(env) if env is not None else kernel_env(None, cwd))
        except CellTimeoutError as error:
            raise KitError(f"a cell ran longer than {timeout:g} s: {str(error).splitlines()[0]}") from None
        except DeadKernelError as error:
            raise KitError(f"the notebook kernel died: {error}") from None
    return run


def first_line(cell: NotebookNode) -> str:
    """The first line of a cell's source: its `# Step` label for code cells."""
    source = cell.get("source", "")
    return source.strip().splitlines()[0] if source.strip() else ""


def cell_errors(nb: NotebookNode, *, allow_lab_errors: bool = False, name: str = "notebook") -> list[str]:
    """One line per executed code cell with an error output that is not allowed."""
    problems = []
    for index, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        tagged = RAISES_TAG in cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            ename, evalue = output.get("ename", ""), output.get("evalue", "")
            where = f"{name} cell {index} ({first_line(cell)})"
            if allow_lab_errors and ename == LAB_ERROR:
                if not tagged:
                    problems.append(
                        f"{where}: {ename}: {evalue} — tag the cell '{RAISES_TAG}' so that Run All goes on"
                    )
                continue
            problems.append(f"{where}: {ename}: {evalue}")
    return problems


def notebook_errors(
    notebook: Path,
    tree: Path,
    *,
    package: str,
    allow_lab_errors: bool = False,
    timeout: float = CELL_SECONDS,
    runs: Path | None = None,
) -> list[str]:
    """Execute a copy of `notebook` against `tree`; one line per offending cell, empty when all is fine.

    `tree` must hold the course's `package` (course.toml's [course] package). `timeout` bounds each
    cell. With `allow_lab_errors`, a `LabNotImplemented` in a cell tagged `raises-exception` is
    expected (the starter); any other error is reported. With `runs` (a folder), the notebook's test
    runs reuse a run of the same content from there (`runner.run_tests`).
    """
    notebook, tree = Path(notebook), Path(tree)
    if not (tree / package / "__init__.py").is_file():
        return [f"{tree}: no {package}/__init__.py; pass a tree holding the {package} package"]
    nb = load(notebook)
    problems = [f"{notebook.name}: {line}" for line in validation_errors(nb)]
    env = kernel_env(tree)
    if runs is not None:
        env[RUN_CACHE_ENV] = str(runs)
    try:
        executed = execute(nb, cwd=tree.resolve(), env=env, timeout=timeout)
    except KitError as error:
        return [*problems, f"{notebook.name}: {error}"]
    return problems + cell_errors(executed, allow_lab_errors=allow_lab_errors, name=notebook.name)


def repo_run(notebook: Path, timeout: float = CELL_SECONDS) -> NotebookNode:
    """Execute the notebook the way a reader of the repository does: kernel in its folder, the solution."""
    notebook = Path(notebook).resolve()
    return execute(
        load(notebook), cwd=notebook.parent, env=kernel_env(None, notebook.parent), timeout=timeout
    )


def normalise_text(text: str) -> str:
    """Blank out what changes from run to run: addresses, temp paths, epoch ms, durations, clock times."""
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def _as_text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def comparable_outputs(cell: NotebookNode) -> list[tuple[str, ...]]:
    """A cell's outputs reduced to what a reader sees, with volatile parts blanked."""
    reduced: list[tuple[str, ...]] = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type", "")
        if kind == "stream":
            name, text = output.get("name", ""), _as_text(output.get("text", ""))
            # The kernel may split one print into several stream messages; a reader sees one text.
            if reduced and reduced[-1][:2] == (kind, name):
                text = reduced.pop()[2] + text
            reduced.append((kind, name, text))
            continue
        if kind in ("execute_result", "display_data"):
            data = output.get("data", {})
            for mime in TEXT_MIMES:
                if mime in data:
                    reduced.append((kind, mime, normalise_text(_as_text(data[mime]))))
        elif kind == "error":
            reduced.append((kind, output.get("ename", ""), normalise_text(output.get("evalue", ""))))
    return [(item[0], item[1], normalise_text(item[2])) if item[0] == "stream" else item for item in reduced]


def stale_cells(stored: NotebookNode, fresh: NotebookNode, *, path: str = "notebook") -> list[str]:
    """One line per code cell whose stored outputs differ from a fresh run (volatile parts ignored)."""
    fix = REFRESH_COMMAND.format(path=path)
    stored_code = [cell for cell in stored.cells if cell.cell_type == "code"]
    fresh_code = [cell for cell in fresh.cells if cell.cell_type == "code"]
    if [c.source for c in stored_code] != [c.source for c in fresh_code]:
        return [f"{path}: the executed copy has different cells; run `{fix}`"]
    problems = []
    for number, (old, new) in enumerate(zip(stored_code, fresh_code, strict=True), start=1):
        before, after = comparable_outputs(old), comparable_outputs(new)
        if before != after:
            problems.append(
                f"{path}: code cell {number} ({first_line(old)}) has stale outputs "
                f"({first_difference(before, after)}); run `{fix}`"
            )
    return problems


def first_difference(before: list[tuple[str, ...]], after: list[tuple[str, ...]]) -> str:
    """The first line a reader would see change, stored against fresh: a load failure or a real change
    shows up here instead of only "stale"."""
    old = [line for item in before for line in item[-1].splitlines()]
    new = [line for item in after for line in item[-1].splitlines()]
    for stored_line, fresh_line in itertools.zip_longest(old, new, fillvalue="(nothing)"):
        if stored_line != fresh_line:
            return f"stored {stored_line.strip()[:160]!r}, now {fresh_line.strip()[:160]!r}"
    # Every text line is the same: what changed is an output's kind, its stream or error name, or its
    # mime type.
    kinds = [item[:2] for item in before], [item[:2] for item in after]
    return f"same text, other outputs: stored {kinds[0]}, now {kinds[1]}"


def _tidy(nb: NotebookNode) -> None:
    """Drop timing metadata and join split stream outputs, so the stored file reads and diffs cleanly."""
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
        outputs = cell.get("outputs", [])
        joined: list[Any] = []
        for output in outputs:
            previous = joined[-1] if joined else None
            if (
                previous is not None
                and output.get("output_type") == "stream"
                and previous.get("output_type") == "stream"
                and previous.get("name") == output.get("name")
            ):
                previous["text"] = _as_text(previous["text"]) + _as_text(output["text"])
                continue
            joined.append(output)
        if cell.cell_type == "code":
            cell["outputs"] = joined
        for output in cell.get("outputs", []):
            if "metadata" in output:
                output["metadata"] = {}


def refresh(notebook: Path, timeout: float = CELL_SECONDS) -> list[str]:
    """Re-execute `notebook` against the solution and store its outputs; returns problems (nothing written
    then)."""
    notebook = Path(notebook)
    executed = repo_run(notebook, timeout=timeout)
    problems = validation_errors(executed) + cell_errors(executed, name=notebook.name)
    if problems:
        return problems
    _tidy(executed)
    save(executed, notebook)
    return []


def freshness_problems(notebook: Path, timeout: float = CELL_SECONDS) -> list[str]:
    """Re-execute `notebook` against the solution and list the cells whose stored outputs are stale."""
    notebook = Path(notebook)
    return stale_cells(load(notebook), repo_run(notebook, timeout=timeout), path=str(notebook))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare --refresh, --check-fresh or --errors, the notebooks, and --tree."""
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--refresh", action="store_true", help=_("re-run against the solution and store outputs")
    )
    action.add_argument("--check-fresh", action="store_true", help=_("fail when stored outputs are stale"))
    action.add_argument(
        "--errors", action="store_true", help=_("run against --tree and list offending cells")
    )
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK")
    parser.add_argument("--tree", type=Path, help=_("folder holding the course's package (with --errors)"))
    parser.add_argument("--allow-lab-errors", action="store_true", help=_("LabNotImplemented is expected"))
    parser.add_argument(
        "--timeout",
        type=float,
        default=CELL_SECONDS,
        help=_("seconds per cell (default {seconds:g})").format(seconds=CELL_SECONDS),
    )


def run(args: argparse.Namespace) -> int:
    """Run the chosen action on each notebook; print one line per problem; exit 1 when any was found."""
    for path in args.notebooks:
        if not path.is_file():
            raise KitError(f"notebook not found: {path}; pass the path of an .ipynb file")
    if args.errors and args.tree is None:
        raise KitError("--errors needs --tree DIR (a folder holding the course's package)")
    # Only --errors runs a given tree; the other actions leave the kernel to find the solution itself.
    package = course_of(args.tree).package if args.errors else ""
    problems: list[str] = []
    for path in args.notebooks:
        started = time.perf_counter()
        if args.refresh:
            found = refresh(path, args.timeout)
            print(f"refreshed {path}" if not found else f"not refreshed {path}: the solution run has errors")
        elif args.check_fresh:
            found = freshness_problems(path, args.timeout)
        else:
            found = notebook_errors(
                path, args.tree, package=package, allow_lab_errors=args.allow_lab_errors, timeout=args.timeout
            )
        # On stderr, so that stdout holds only the problems; benchmarks/README.md records these figures.
        print(f"{path}: executed in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        problems += found
    for line in problems:
        print(line)
    return 1 if problems else 0
