"""Run the focused tests of a staged tree in its own interpreter and read back the per-lab report."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pi_course_kit.core.locate import kit_cache
from pi_course_kit.core.records import CollectError, LabSummary, NextStep, RunReport, TestRecord

JSON_ENV = "PI_COURSE_REPORT_JSON"
#: Where the focused tests may keep mypy's cache (checkpoint 01 type-checks the learner's code). Runs
#: started here are the machine owner's own (check, verify, mutations, notebooks), so one cache serves
#: them all; graded runs never get it: a learner must not leave a cache behind for the next one.
MYPY_CACHE_ENV = "PI_COURSE_MYPY_CACHE"


@dataclass
class RunResult:
    """What one pytest run in a tree produced: exit code, output, and its records, typed and checked."""

    returncode: int
    output: str
    report: RunReport = field(default_factory=RunReport)
    timed_out: bool = False

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
) -> RunResult:
    """Run pytest in `tree` in another process; never shares this interpreter's sys.modules.

    `command` replaces pytest's usual command line (and then always runs as a subprocess); `launch`
    chooses how pytest's own process is started.
    """
    with tempfile.TemporaryDirectory(prefix="pi-course-report-") as tmp:
        report = Path(tmp) / "report.jsonl"
        run_env = dict(os.environ if env is None else env)
        run_env[JSON_ENV] = str(report)
        run_env.pop("PYTHONPATH", None)
        run_env["PYTHONDONTWRITEBYTECODE"] = "1"
        run_env.setdefault(MYPY_CACHE_ENV, str(kit_cache() / "mypy"))
        if command is not None:
            returncode, output, timed_out = _run_command(command, tree, run_env, timeout)
        else:
            returncode, output, timed_out = launch(args, tree, run_env, timeout)
        lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
    return RunResult(returncode=returncode, output=output, report=RunReport.read(lines), timed_out=timed_out)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
