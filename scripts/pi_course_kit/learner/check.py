"""`pi-course check [--lab 6.1] [--watch]`: run the focused tests here and show per-lab progress."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from pi_course_kit.core import records
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import PracticeFolder, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.core.runner import RunResult, run_tests

STATUS_STYLE: dict[str, str] = {
    records.DONE: "green",
    records.FAILING: "red",
    records.NOT_STARTED: "yellow",
    records.IN_PROGRESS: "yellow",
    records.BLOCKED: "magenta",
}
# Beyond the per-test timeout (pytest-timeout, in pytest.ini), a whole run that still does not end
# (learner code that swallows even the timeout) is killed from outside after this long.
RUN_TIMEOUT = 120.0
#: The largest per-test limit accepted (a day): a timer cannot be set to infinity.
MAX_TIMEOUT = 86400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare --lab, --watch, --poll and --timeout."""
    parser.add_argument("--lab", help=_("run only this lab's tests, e.g. 6.1"))
    parser.add_argument(
        "--watch", action="store_true", help=_("re-run whenever a file is saved (Ctrl-C stops)")
    )
    parser.add_argument(
        "--poll",
        action="store_true",
        help=_("with --watch: poll for changes (for file systems without events)"),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=_("per-test time limit (default: pytest.ini's timeout)"),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=_("also print pytest's own output"))


def lab_marker(folder: PracticeFolder, lab_id: str) -> str:
    """The pytest marker of a lab of this folder's checkpoint, or a KitError listing the labs."""
    # The folder's one lab table is its course.toml snapshot.
    _course, checkpoint = folder.made_from()
    for lab in checkpoint.labs:
        if lab_id in (lab.id, lab.marker):
            return lab.marker
    # An earlier chapter's optional exercise (carried over by --from) can still be run by name.
    for info in checkpoint.tree_labs:
        if info.optional and info.inherited and lab_id in (info.id, info.marker):
            return info.marker
    known = ", ".join(lab.id for lab in checkpoint.labs)
    raise KitError(
        _("unknown lab {lab!r} in checkpoint {checkpoint}; known labs: {known}").format(
            lab=lab_id, checkpoint=folder.checkpoint_id, known=known
        )
    )


def pytest_args(folder: PracticeFolder, lab: str | None, timeout: float | None) -> list[str]:
    """The pytest arguments for one check run."""
    args = []
    if lab is not None:  # `--lab ""` is a typo to report, not "every lab"
        args += ["-m", lab_marker(folder, lab)]
    if timeout is not None:
        if not 0 < timeout < MAX_TIMEOUT:  # also refuses nan and inf, which no timer can be set to
            raise KitError(
                _("--timeout must be a positive number of seconds, got {value}").format(value=timeout)
            )
        args += ["--timeout", f"{timeout:g}"]
    return args


def short(folder: PracticeFolder, location: str | None) -> str | None:
    """A `path:line` location relative to the folder root, as the learner would open it."""
    if not location:
        return None
    path, sep, line = location.rpartition(":")
    if not sep or not line.isdigit():
        return location
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = folder.root / candidate
    return f"{folder.relative(candidate)}:{line}"


def explain(folder: PracticeFolder, result: RunResult, elapsed: float) -> tuple[list[str], list[str]]:
    """Lines before and after the per-lab table: problems first, then the next step."""
    before: list[str] = []
    after: list[str] = []
    report = result.report
    for error in report.collect_errors:
        where = short(folder, error.location) or error.nodeid or "tests"
        lab = _(" (in Lab {lab})").format(lab=error.lab) if error.lab else ""
        before.append(
            _("cannot import your code: {where}{lab}: {message}").format(
                where=where, lab=lab, message=error.message
            )
        )
        before.append(_("  fix that line first; no lab can run until the package imports"))
    if result.timed_out:
        before.append(
            _(
                "the test run did not finish within {seconds} s and was stopped: probably an endless loop "
                "that also swallows the per-test timeout (a bare `except:`?)"
            ).format(seconds=f"{RUN_TIMEOUT:g}")
        )
    elif not result.finished:
        before.append(
            _(
                "the test run ended without its report (exit code {code}): something ended the "
                "process, e.g. os._exit() or a crash while importing pi_course"
            ).format(code=result.returncode)
        )
        before += ["  " + line for line in result.output.strip().splitlines()[-12:]]
    if not result.crashed and not result.tests and not result.collect_errors:
        after.append(_("no tests ran; check the --lab you asked for"))
        return before, after
    if result.crashed or result.collect_errors:
        return before, after
    if not report.labs:
        # Tests ran, but none was a lab's: the folder's pytest.ini no longer declares the labs. Never "done".
        after.append(
            _(
                "no test that ran belongs to a lab: this folder's pytest.ini no longer declares them; "
                "`pi-course reset --kit` puts the kit's pytest.ini back (your code is not touched)"
            )
        )
        return before, after
    if any(row.collected > row.total for row in report.labs):
        after.append(
            _("the run stopped early (-x or --maxfail): the counts above are only the tests that ran")
        )
    step = report.next
    if step is not None and step.location:
        step = dataclasses.replace(step, location=short(folder, step.location))
    lines = records.step_lines(step, records.all_done_text(folder.meta.kind))
    if step is not None and step.unchecked:
        # Nothing is known to be unfinished: a whole run settles it, no lab to edit or hint for.
        lines[-1] += _("   (or: pi-course check)")
    elif step is not None:
        lines = [line.replace('"', "") for line in lines]
        lines[-1] += _("   (or: pi-course check --lab {lab})").format(lab=step.lab)
        lines.append(_("  stuck? pi-course hint {lab}").format(lab=step.lab))
    return before, after + lines


def render(folder: PracticeFolder, result: RunResult, elapsed: float, title: str) -> None:
    """Print the table and the next step: with rich on a terminal, plain text otherwise."""
    before, after = explain(folder, result, elapsed)
    rows = result.report.labs
    if sys.stdout.isatty():
        try:
            _render_rich(title, before, rows, after)
            return
        except ImportError:
            pass
    print(title)
    for line in before:
        print(line)
    if rows:
        print("\n".join(records.table_lines(rows)))
    for line in after:
        print(line)


def _count(row: records.LabSummary) -> str:
    return records.count_text(row.passed, row.total, row.collected or row.total)


def _status(row: records.LabSummary) -> str:
    return records.status_text(row.status, row.blocked_by, row.optional)


def _render_rich(title: str, before: list[str], rows: list[records.LabSummary], after: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    console.print(Text(title, style="bold"))
    for line in before:
        console.print(Text(line, style="red"))
    if rows:
        # rich measures cells by terminal width, so CJK titles and statuses stay aligned.
        table = Table(show_edge=False, pad_edge=False)
        for name, justify in (
            (_("lab"), "left"),
            (_("tests"), "right"),
            (_("status"), "left"),
            (_("title"), "left"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for row in rows:
            style = STATUS_STYLE.get(row.status, "")
            table.add_row(row.id, _count(row), Text(_status(row), style=style), row.title)
        console.print(table)
    for line in after:
        console.print(Text(line, style="bold cyan" if not line.startswith(" ") else ""))


def require_test_files(folder: PracticeFolder) -> None:
    """Refuse to run, saying what is gone and how to get it back, when the kit's tests/ or pytest.ini are
    missing."""
    missing = folder.missing_test_files()
    if missing:
        raise KitError(
            _(
                "{files} missing from this practice folder: they are the kit's test files, not yours; "
                "`pi-course reset --kit` puts them back (your code is not touched)"
            ).format(files=", ".join(missing[:3]) + (" …" if len(missing) > 3 else ""))
        )


def run_once(folder: PracticeFolder, args: list[str], verbose: bool, header: str = "") -> RunResult:
    """Run the tests once, print the report and remember the next lab in meta.json."""
    require_test_files(folder)
    started = time.monotonic()
    result = run_tests(folder.root, args, timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    if verbose:
        print(result.output)
    title = _("pi-course check · checkpoint {id} · {root} ({seconds:.1f} s)").format(
        id=folder.checkpoint_id, root=folder.root, seconds=elapsed
    )
    title += header
    render(folder, result, elapsed, title)
    if result.report.next is not None:
        lab = result.report.next.lab
        with contextlib.suppress(OSError, KitError):  # a read-only folder can still be checked
            folder.update(lambda meta: meta.__setitem__("last_next_lab", lab))
    return result


def passed(result: RunResult) -> bool:
    """Did every selected required lab pass, with nothing broken?"""
    if result.crashed or result.collect_errors or not result.tests or not result.report.labs:
        return False
    return all(row.status == records.DONE for row in result.report.labs if not row.optional)


def _stop_on_term(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def watch_loop(folder: PracticeFolder, args: list[str], verbose: bool, poll: bool) -> int:
    """Run, then re-run on every save until Ctrl-C (or SIGTERM)."""
    from pi_course_kit.learner.watch import changes, needs_polling

    signal.signal(signal.SIGTERM, _stop_on_term)
    polling = needs_polling(folder.root, forced=poll)
    mode = _("polling") if polling else _("file events")
    interactive = sys.stdout.isatty()
    runs = 0
    try:
        changed: set[str] = set()
        stream = changes(folder.root, polling)
        while True:
            runs += 1
            if interactive:
                print("\033[2J\033[H", end="")
            stamp = datetime.datetime.now().strftime("%H:%M:%S")
            names = ", ".join(sorted(folder.relative(Path(p)) for p in changed))
            line = _("── run {n} · {time}").format(n=runs, time=stamp)
            print(line + (_(" · changed: {names}").format(names=names) if names else ""), flush=True)
            run_once(folder, args, verbose)
            print(
                _("watching {root} for saves ({mode}); Ctrl-C to stop").format(root=folder.root, mode=mode),
                flush=True,
            )
            changed = next(stream)
    except KeyboardInterrupt:
        print(_("stopped watching"), flush=True)
        return 0


def run(args: argparse.Namespace) -> int:
    """Run the checks once or in watch mode."""
    folder = open_folder()
    test_args = pytest_args(folder, args.lab, args.timeout)
    if args.watch:
        return watch_loop(folder, test_args, args.verbose, args.poll)
    return 0 if passed(run_once(folder, test_args, args.verbose)) else 1
