"""Run the focused tests of a staged tree in its own interpreter and read back the per-lab report."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pi_course_kit.core.files import write_text_atomically
from pi_course_kit.core.locate import kit_cache
from pi_course_kit.core.records import CollectError, LabSummary, NextStep, RunReport, TestRecord

JSON_ENV = "PI_COURSE_REPORT_JSON"
#: Where the focused tests may keep mypy's cache (checkpoint 01 type-checks the learner's code). Runs
#: started here are the machine owner's own (check, verify, mutations, notebooks), so one cache serves
#: them all; graded runs never get it: a learner must not leave a cache behind for the next one.
MYPY_CACHE_ENV = "PI_COURSE_MYPY_CACHE"
#: A folder where whole runs are remembered by their content (`remembered`); set, the notebooks' test
#: runs use it too (the kit's own suite sets it, so a notebook's progress cell reuses verify's run).
RUN_CACHE_ENV = "PI_COURSE_RUN_CACHE"
#: The folder of the kit's cache where its own trusted runs are kept (verify's, the grader's references).
RUNS_FOLDER = "runs"


@dataclass
class RunResult:
    """What one pytest run in a tree produced: exit code, output, and its records, typed and checked."""

    returncode: int
    output: str
    report: RunReport = field(default_factory=RunReport)
    timed_out: bool = False
    #: True when the result was read back from an earlier run of the same content (`run_tests(reuse=)`).
    reused: bool = False
    #: The text of each file the run was asked to write (`run_tests(outputs=)`), by its variable's name.
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def tests(self) -> list[TestRecord]:
        return self.report.tests

    @property
    def labs(self) -> list[LabSummary]:
        return self.report.labs

    @property
    def next_step(self) -> NextStep | None:
        return self.report.next

    @property
    def collect_errors(self) -> list[CollectError]:
        return self.report.collect_errors

    @property
    def finished(self) -> bool:
        """The run wrote its closing summary."""
        return self.report.finished

    @property
    def crashed(self) -> bool:
        """True when the run ended without the report's closing summary (killed, os._exit, timeout)."""
        return self.timed_out or not self.finished

    def lab(self, lab_id: str) -> LabSummary | None:
        """The summary row of one lab, if the run reached it."""
        return next((row for row in self.labs if row.id == lab_id), None)


def cpus() -> int:
    """How many CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pytest_command(args: Sequence[str] = ()) -> list[str]:
    """The interpreter command that runs pytest for a tree."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


#: How a run's pytest starts: (pytest's arguments, folder, environment, time limit) -> (exit code, output,
#: timed out). The default is a fresh interpreter; `instructor.prewarmed` forks one that has pytest loaded.
Launch = Callable[[Sequence[str], Path, dict[str, str], float], tuple[int, str, bool]]


def run_in_subprocess(
    args: Sequence[str], tree: Path, env: dict[str, str], timeout: float
) -> tuple[int, str, bool]:
    """Start `python -m pytest` in a fresh interpreter: the default `Launch`."""
    return _run_command(pytest_command(args), tree, env, timeout)


def _run_command(
    command: Sequence[str], tree: Path, env: dict[str, str], timeout: float
) -> tuple[int, str, bool]:
    try:
        done = subprocess.run(
            list(command),
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as expired:
        return -9, _text(expired.stdout) + _text(expired.stderr), True
    return done.returncode, done.stdout + done.stderr, False


def run_tests(
    tree: Path,
    args: Sequence[str] = (),
    *,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    launch: Launch = run_in_subprocess,
    reuse: Path | None = None,
    outputs: Sequence[str] = (),
) -> RunResult:
    """Run pytest in `tree` in another process; never shares this interpreter's sys.modules.

    `command` replaces pytest's usual command line (and then always runs as a subprocess); `launch`
    chooses how pytest's own process is started. With `reuse` (a folder), a run of exactly the same
    content is read back from there instead of run again, and a run that may be reused is kept there
    (see `content_key` and `remembered`). Each name in `outputs` is an environment variable the run gets,
    naming a scratch file for a plugin to write (the grader's proof); its text comes back in
    `RunResult.outputs` and is kept with the run.
    """
    run_env = dict(os.environ if env is None else env)
    run_env.pop("PYTHONPATH", None)
    run_env["PYTHONDONTWRITEBYTECODE"] = "1"
    run_env.setdefault(MYPY_CACHE_ENV, str(kit_cache() / "mypy"))
    stored = None
    if reuse is not None and command is None:
        stored = reuse / f"run-{content_key(tree, args, run_env, outputs)}.json"
        if (earlier := _recall(stored)) is not None:
            return earlier
    with tempfile.TemporaryDirectory(prefix="pi-course-report-") as tmp:
        report = Path(tmp) / "report.jsonl"
        run_env[JSON_ENV] = str(report)
        written = {name: Path(tmp) / f"output-{index}" for index, name in enumerate(outputs)}
        run_env.update({name: str(path) for name, path in written.items()})
        if command is not None:
            returncode, output, timed_out = _run_command(command, tree, run_env, timeout)
        else:
            returncode, output, timed_out = launch(args, tree, run_env, timeout)
        lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
        kept = {
            name: path.read_text(encoding="utf-8") if path.exists() else "" for name, path in written.items()
        }
    result = RunResult(
        returncode=returncode,
        output=output,
        report=RunReport.read(lines),
        timed_out=timed_out,
        outputs=kept,
    )
    if stored is not None and remembered(result):
        record = {"returncode": returncode, "output": output, "lines": lines, "outputs": kept}
        # A store that cannot be written (read-only, another user's) only means the run is not kept.
        with contextlib.suppress(OSError):
            stored.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(stored, json.dumps(record, ensure_ascii=False))
            _prune(stored.parent)
    return result


# -- runs remembered by content -----------------------------------------------------------------------
#
# A run's records are a function of what it reads: the staged tree (the package, the tests, their
# support, the kit's report plugin and catalogs that travel into tests/, pytest.ini), pytest's
# arguments, the environment variables the tests and the report read, and the interpreter with its
# installed distributions. `content_key` digests all of them, so any change to one runs the tests again.
#
# Why the whole tree, and not each test module with the files it imported: measured on the course,
# importing any test module runs the package's __init__.py, which imports every module of the package
# (each checkpoint's __init__ re-exports its names). A test of chapter 05 run in tree 17 therefore
# reads 17's __init__.py and mcp.py as well, and its result may depend on them (a module body runs on
# import). Recorded per module, every read set would be the whole package (and pytest imports every
# test module before the first test runs, so "what is in sys.modules after the module's tests" is the
# whole package too): per-module keys would cost a tracing hook in every run and find no more equal
# contents than the whole tree does. What they cannot find does not exist: no two checkpoints share
# the files a parent test reads, since each has its own __init__.py. The equal contents are the same
# tree run in several places: verify's solution run and the solution notebook's progress cells, and
# verify's starter run and a fresh practice folder's progress cells (its package is the starter's).
#
# Only a deterministic run is kept: it finished, and every test passed, was skipped, or failed on a
# lab's stub (LabNotImplemented, raised at once). Any other failure (a time limit on a loaded machine,
# a crash) is never remembered, so it runs again where it is next asked for.

#: Bumped when what is stored, or what the key covers, changes.
_CACHE_FORMAT = "2"
#: Folders of a tree that hold derived data (caches), never an input.
_DERIVED = {"__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache"}
#: Variables that name this run's own scratch files, or the notebook's tree choice (`notebook.tree`'s
#: PI_COURSE_TREE, read by the kernel's helpers before the run is staged, never by a test run).
_PER_RUN = {JSON_ENV, MYPY_CACHE_ENV, RUN_CACHE_ENV, "PI_COURSE_TREE", "PI_COURSE_PREWARMED"}
#: Other variables that choose how the tests or the report behave: the language, the locale, time.
_READ_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "PATH", "PYTHONHASHSEED", "TZ")


@functools.cache
def _interpreter() -> str:
    """The interpreter and every installed distribution with its version, as one digest."""
    import importlib.metadata  # only where runs are kept: the learner's runs never pay for the import

    hasher = hashlib.sha256(f"{sys.version}\0{sys.prefix}".encode())
    installed = sorted(
        f"{dist.metadata['Name']} {dist.version}" for dist in importlib.metadata.distributions()
    )
    hasher.update("\n".join(installed).encode())
    return hasher.hexdigest()


def content_key(tree: Path, args: Sequence[str], env: Mapping[str, str], outputs: Sequence[str] = ()) -> str:
    """A digest of everything a run of pytest in `tree` reads (see the comment above).

    `outputs` names the variables that will point at the run's own scratch files: their names are read
    (a plugin turns on when one is set), never their values.
    """
    hasher = hashlib.sha256(f"{_CACHE_FORMAT}\0{_interpreter()}\0".encode())
    hasher.update(json.dumps([list(args), sorted(outputs)]).encode())
    chosen = {
        name: value
        for name, value in env.items()
        if (name.startswith("PI_COURSE_") and name not in _PER_RUN and name not in outputs)
        or name.startswith("HYPOTHESIS")
        or name in _READ_ENV
    }
    hasher.update(json.dumps(chosen, sort_keys=True).encode())
    # A plugin loaded by name (`-p module`, the grader's proof plugin) is code the run reads from outside
    # the tree: its file is part of the key, so an edited plugin (an editable kit) never reads back a
    # run it did not make.
    for plugin in _named_plugins(args):
        hasher.update(b"\0plugin\0" + plugin.encode())
        source = _plugin_file(plugin)
        hasher.update(hashlib.sha256(source.read_bytes()).digest() if source is not None else b"-")
    files = sorted(
        path
        for path in tree.rglob("*")
        if path.is_file() and not _DERIVED & set(path.relative_to(tree).parts)
    )
    for path in files:
        hasher.update(b"\0" + path.relative_to(tree).as_posix().encode() + b"\0")
        hasher.update(hashlib.sha256(path.read_bytes()).digest())
    return hasher.hexdigest()[:32]


def _named_plugins(args: Sequence[str]) -> list[str]:
    """The modules `-p NAME` (or `-pNAME`) loads; `no:` names switch a plugin off and load nothing."""
    found, rest = [], iter(args)
    for arg in rest:
        if not arg.startswith("-p"):
            continue
        name = next(rest, "") if arg == "-p" else arg[2:]
        if name and not name.startswith("no:"):
            found.append(name)
    return found


def _plugin_file(name: str) -> Path | None:
    """The file a plugin module is loaded from, or None when it is not a file this interpreter finds."""
    import importlib.util  # only where runs are kept

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and Path(origin).is_file() else None


def remembered(result: RunResult) -> bool:
    """True when a run's records may stand for every run of the same content (see above)."""
    return (
        result.finished
        and not result.timed_out
        and not result.collect_errors
        and bool(result.tests)
        and all(
            test.outcome in ("passed", "skipped") or (test.outcome == "failed" and test.exc_lab)
            for test in result.tests
        )
    )


def _recall(path: Path) -> RunResult | None:
    """The run kept at `path`, or None when there is none (or it cannot be read back whole)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = RunResult(
            returncode=int(data["returncode"]),
            output=str(data["output"]),
            report=RunReport.read([str(line) for line in data["lines"]]),
            reused=True,
            outputs={str(name): str(text) for name, text in dict(data.get("outputs", {})).items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return result if remembered(result) else None


#: How many runs a store keeps; the oldest go first (a whole course's verify keeps about 40).
KEPT_RUNS = 400


def _prune(folder: Path, keep: int = KEPT_RUNS) -> None:
    """Remove the oldest runs beyond `keep`, so a store used for months stays small."""
    try:
        runs = sorted(folder.glob("run-*.json"), key=lambda path: path.stat().st_mtime)
    except OSError:  # another process removed one while we looked: the next store tries again
        return
    for path in runs[: max(0, len(runs) - keep)]:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def run_cache_from_env() -> Path | None:
    """The folder RUN_CACHE_ENV names, or None when it is unset (runs are then never reused)."""
    value = os.environ.get(RUN_CACHE_ENV, "").strip()
    return Path(value) if value else None


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
