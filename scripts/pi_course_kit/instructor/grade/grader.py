"""Grade practice folders: each in a fresh sandboxed copy, always with the kit's own pristine tests."""

from __future__ import annotations

import csv
import json
import os
import queue
import shutil
import stat
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.records import read_records
from pi_course_kit.core.runner import JSON_ENV, pytest_command
from pi_course_kit.core.staging import TESTS_DIR, pytest_ini, stage_tree, test_files
from pi_course_kit.instructor.grade import sandbox
from pi_course_kit.instructor.promises import run_tree

META = Path(".pi-course") / "meta.json"
REPORT = ".pi-course-report.jsonl"
MAX_COPY_BYTES = 20 * 1024 * 1024
MAX_COPY_FILES = 2000
FIRST_UID = 62000  # unprivileged uids, one per parallel slot, so that RLIMIT_NPROC counts per learner

COMPLETE, PARTIAL, NOT_STARTED = "complete", "partial", "not started"
ERROR, TIMEOUT, CRASHED, SKIPPED, SANDBOX_ERROR = "error", "timeout", "crashed", "skipped", "sandbox-error"


@dataclass
class LabScore:
    """One lab of one learner: passed/total against the pristine tests, and a status."""

    id: str
    title: str
    optional: bool
    passed: int
    total: int
    status: str
    first_failure: str = ""


@dataclass
class LearnerRecord:
    """Everything the grader found for one folder: one JSON object per learner."""

    learner: str
    folder: str
    status: str
    checkpoint: str | None = None
    passed: int = 0
    total: int = 0
    labs: list[LabScore] = field(default_factory=list)
    tests_edited: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    message: str = ""
    sandbox: str = ""
    seconds: float = 0.0
    #: One verdict per pristine test, in run order: {"nodeid", "lab", "outcome"} ("missing" when it did not run).
    tests: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data."""
        return asdict(self)


@dataclass(frozen=True)
class Slot:
    """One parallel grading slot: its sandbox uid (None when not root) and its fork server."""

    uid: int | None
    server: sandbox.ForkServer


@dataclass(frozen=True)
class Reference:
    """The pristine focused tests of a checkpoint: which node ids exist and which lab each belongs to."""

    checkpoint: Checkpoint
    labs_of: dict[str, str]

    def total(self, lab_id: str) -> int:
        """How many pristine tests the lab has."""
        return sum(1 for lab in self.labs_of.values() if lab == lab_id)


class Grader:
    """Grades folders of one course; holds the scratch folder, the uids and the references."""

    def __init__(
        self, course: Course, limits: sandbox.Limits, jobs: int = 2, checkpoint: str | None = None
    ) -> None:
        self.course, self.limits, self.jobs = course, limits, max(1, jobs)
        self.checkpoint_override = checkpoint
        self.scratch = Path(tempfile.mkdtemp(prefix="pi-course-grade-"))
        os.chmod(self.scratch, 0o711)
        self.root = os.geteuid() == 0
        # One uid and one fork server per parallel slot; a slot serves one learner at a time.
        self.slots: queue.Queue[Slot] = queue.Queue()
        self._servers: list[sandbox.ForkServer] = []
        for index in range(self.jobs):
            server = sandbox.ForkServer(self.scratch / f"fork-server-{index}.log")
            self._servers.append(server)
            self.slots.put(Slot(FIRST_UID + index if self.root else None, server))
        self.level = sandbox.best_level(self.scratch, FIRST_UID) if self.root else sandbox.LIMITS
        self.references: dict[str, Reference] = {}
        self._counter = 0

    def close(self) -> None:
        """Stop the fork servers and remove every copy the grader made."""
        for server in self._servers:
            server.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def reference(self, checkpoint: Checkpoint) -> Reference:
        """Run the solution once (trusted, unsandboxed) to learn the pristine tests of each lab."""
        if checkpoint.id not in self.references:
            result = run_tree(self.course, checkpoint, checkpoint.solution)
            failing = [t["nodeid"] for t in result.tests if t["outcome"] != "passed"]
            if not result.tests or failing or result.collect_errors:
                raise KitError(
                    f"the solution of checkpoint {checkpoint.id} does not pass its focused tests "
                    f"({len(failing)} failing); run `pi-course verify` and fix it before grading"
                )
            labs_of = {t["nodeid"]: t["lab"] for t in result.tests}
            self.references[checkpoint.id] = Reference(checkpoint, labs_of)
        return self.references[checkpoint.id]

    def grade_all(
        self, folders: Sequence[Path], on_done: Callable[[LearnerRecord], None] | None = None
    ) -> list[LearnerRecord]:
        """Grade every folder, `jobs` at a time; the records keep the order of `folders`."""
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            records = []
            for record in pool.map(self._grade_slot, folders):
                records.append(record)
                if on_done:
                    on_done(record)
        return records

    def _grade_slot(self, folder: Path) -> LearnerRecord:
        slot = self.slots.get()
        try:
            return self.grade_one(folder, slot.uid, slot.server)
        finally:
            self.slots.put(slot)

    def _scratch_dir(self) -> Path:
        self._counter += 1
        folder = Path(tempfile.mkdtemp(prefix=f"learner-{self._counter:04d}-", dir=self.scratch))
        os.chmod(folder, 0o711)
        return folder

    def grade_one(
        self, folder: Path, uid: int | None = None, server: sandbox.ForkServer | None = None
    ) -> LearnerRecord:
        """Grade one folder; a folder that is not a practice folder is reported as skipped.

        With a fork server the run forks from it; without one it starts a fresh sandboxed interpreter.
        """
        started = time.perf_counter()
        record = LearnerRecord(
            learner=folder.name or str(folder), folder=str(folder.absolute()), status=SKIPPED
        )
        checkpoint = self._practice_checkpoint(folder, record)
        if checkpoint is None:
            return record
        record.checkpoint = checkpoint.id
        try:
            reference = self.reference(checkpoint)
        except KitError as error:
            record.status, record.message = ERROR, str(error)
            return record
        record.tests_edited = [] if _is_bare(folder) else edited_tests(self.course, checkpoint, folder)
        if record.tests_edited:
            record.flags.append("tests edited (ignored: graded with the kit's own tests)")
        work_root = self._scratch_dir()
        try:
            source = work_root / "source"
            problem = safe_copy(folder / self.course.package, source / self.course.package)
            if problem:
                record.status, record.message = ERROR, problem
                return record
            work = stage_tree(self.course, checkpoint, source, work_root / "tree")
            report = work / REPORT
            report.write_text("", encoding="utf-8")
            sandbox.prepare_work(work, uid, writable=(self.course.package, REPORT))
            env = sandbox.minimal_env(work, {JSON_ENV: str(report)})
            log = work_root / "output.log"
            command = pytest_command(["--tb=no"])
            if server is None:
                run = sandbox.run(command, work, env, self.limits, self.level, log, uid)
            else:
                # The server is this interpreter already running `python -m pytest`: pass what follows.
                assert command[1:3] == ["-m", "pytest"]
                run = server.run(command[3:], work, env, self.limits, self.level, log, uid)
            record.sandbox = run.level
            _score(record, reference, run, report)
        finally:
            shutil.rmtree(work_root, ignore_errors=True)
            record.seconds = round(time.perf_counter() - started, 2)
        return record

    def _practice_checkpoint(self, folder: Path, record: LearnerRecord) -> Checkpoint | None:
        if not folder.is_dir():
            record.message = "not a folder; give practice folders made by `pi-course practice`"
            return None
        meta_path = folder / META
        if self.checkpoint_override and _is_bare(folder) and (folder / self.course.package).is_dir():
            return self._bare_checkpoint(folder, record)
        if not meta_path.is_file() or meta_path.is_symlink():
            record.message = f"not a practice folder: no {META.as_posix()}"
            return None
        package = folder / self.course.package
        if not package.is_dir() or package.is_symlink():
            record.message = f"not a practice folder: no {self.course.package}/"
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            wanted = self.checkpoint_override or str(meta["checkpoint"])
            return self.course.checkpoint(wanted)
        except (ValueError, KeyError, TypeError) as error:
            record.message = f"{META.as_posix()} is unreadable ({error}); recreate it or pass --checkpoint"
        except ManifestError as error:
            record.message = str(error)
        return None

    def _bare_checkpoint(self, folder: Path, record: LearnerRecord) -> Checkpoint | None:
        # A submission of just pi_course/ (Gradescope, an LMS upload): the checkpoint comes from --checkpoint.
        if (folder / self.course.package).is_symlink():
            record.message = f"not a submission: {self.course.package}/ is a symbolic link"
            return None
        record.flags.append(f"bare {self.course.package}/ submission (graded as --checkpoint)")
        return self.course.checkpoint(str(self.checkpoint_override))


def _is_bare(folder: Path) -> bool:
    """A submission without the practice folder's meta.json (only its package, perhaps more)."""
    return not (folder / META).exists()


def _verdicts(reference: Reference, by_node: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Each pristine test's outcome in run order; a test the learner's run did not report is "missing"."""
    return [
        {"nodeid": node, "lab": lab, "outcome": str(by_node.get(node, {}).get("outcome", "missing"))}
        for node, lab in reference.labs_of.items()
    ]


def edited_tests(course: Course, checkpoint: Checkpoint, folder: Path) -> list[str]:
    """The learner's copies of the focused tests (and pytest.ini) that differ from the kit's."""
    edited = []
    for name, source in test_files(course, checkpoint).items():
        mine = folder / TESTS_DIR / name
        shown = f"{TESTS_DIR}/{name}"
        if not mine.is_file() or mine.is_symlink():
            edited.append(f"{shown} (missing)")
        elif mine.read_bytes() != source.read_bytes():
            edited.append(f"{shown} (changed)")
    ini = folder / "pytest.ini"
    if (
        not ini.is_file()
        or ini.is_symlink()
        or ini.read_text(encoding="utf-8", errors="replace") != pytest_ini(checkpoint)
    ):
        edited.append("pytest.ini (changed)" if ini.exists() else "pytest.ini (missing)")
    return edited


def safe_copy(source: Path, dest: Path) -> str | None:
    """Copy regular files only (no symlinks, devices or caches), within size limits; a problem or None."""
    total, count = 0, 0
    dest.mkdir(parents=True)
    for folder, dirs, files in os.walk(source, followlinks=False):
        here = Path(folder)
        target = dest / here.relative_to(source)
        dirs[:] = [d for d in dirs if d not in ("__pycache__",) and not (here / d).is_symlink()]
        for name in dirs:
            (target / name).mkdir()
        for name in files:
            path = here / name
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode) or name.endswith(".pyc"):
                continue  # a symlink could point at the grader's own secrets
            total, count = total + info.st_size, count + 1
            if total > MAX_COPY_BYTES or count > MAX_COPY_FILES:
                return f"pi_course/ is too large to grade (over {MAX_COPY_BYTES // 2**20} MiB or {MAX_COPY_FILES} files)"
            shutil.copyfile(path, target / name, follow_symlinks=False)
    return None


def _read_report(report: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    try:
        lines = report.read_text(encoding="utf-8", errors="replace").splitlines()[:10_000]
        return read_records(lines)
    except (OSError, ValueError, AttributeError, TypeError):
        return [], None, []


def _lab_status(passed: int, total: int, records: list[dict[str, Any]], lab_id: str) -> str:
    if total and passed == total:
        return "done"
    failures = [r for r in records if r.get("outcome") != "passed"]
    if any(r.get("outcome") == "failed" and r.get("exc_lab") is None for r in failures):
        return "failing"
    if passed or any(r.get("exc_lab") == lab_id for r in failures):
        return "failing" if passed else "not started"
    blocked = [r.get("exc_lab") for r in failures if r.get("exc_lab") is not None]
    return f"blocked by {blocked[0]}" if blocked else "not started"


def _flags(texts: Iterable[str]) -> list[str]:
    joined = "\n".join(texts)
    flags = []
    if "MemoryError" in joined:
        flags.append("memory limit reached")
    if "Resource temporarily unavailable" in joined or "BlockingIOError" in joined:
        flags.append("process limit reached")
    if "Timeout" in joined:
        flags.append("a test hit the per-test time limit")
    return flags


def _score(record: LearnerRecord, reference: Reference, run: sandbox.Sandboxed, report: Path) -> None:
    tests, summary, collect_errors = _read_report(report)
    by_node: dict[str, dict[str, Any]] = {}
    for test in tests:
        if isinstance(test, dict) and test.get("nodeid") in reference.labs_of:
            by_node.setdefault(str(test["nodeid"]), test)
    checkpoint = reference.checkpoint
    for lab in checkpoint.labs:
        nodes = [node for node, lab_id in reference.labs_of.items() if lab_id == lab.id]
        records = [by_node[node] for node in nodes if node in by_node]
        # Only a pristine test that ran and passed counts: skipped or missing tests never do.
        passed = sum(1 for r in records if r.get("outcome") == "passed")
        failure = next((r for r in records if r.get("outcome") != "passed"), None)
        message = str(failure.get("message") or failure.get("skip_reason") or "")[:300] if failure else ""
        record.labs.append(
            LabScore(
                lab.id,
                lab.title,
                lab.optional,
                passed,
                len(nodes),
                _lab_status(passed, len(nodes), records, lab.id),
                message,
            )
        )
    required = [score for score in record.labs if not score.optional]
    record.passed = sum(s.passed for s in required)
    record.tests = _verdicts(reference, by_node)
    record.total = sum(s.total for s in required)
    texts = [str(t.get("exc_type", "")) + " " + str(t.get("message", "")) for t in by_node.values()]
    texts += [str(e.get("message", "")) for e in collect_errors if isinstance(e, dict)]
    record.flags += _flags([*texts, run.output[-5000:]])
    if run.setup_failed:
        record.status, record.message = SANDBOX_ERROR, run.output.strip().splitlines()[-1]
    elif run.timed_out:
        record.status = TIMEOUT
        record.message = f"stopped after the wall-time limit of {run.seconds:.0f}s (an endless loop?)"
    elif collect_errors and not by_node:
        record.status = ERROR
        first = collect_errors[0] if isinstance(collect_errors[0], dict) else {}
        where = f" at {first.get('location')}" if first.get("location") else ""
        record.message = f"the package does not import{where}: {first.get('message', '')}"[:300]
    elif summary is None:
        record.status = CRASHED
        record.message = f"the test run ended without its report (exit code {run.returncode})"
    elif record.total and record.passed == record.total:
        record.status = COMPLETE
    else:
        record.status = PARTIAL if record.passed else NOT_STARTED
    if record.status in (TIMEOUT, CRASHED, SANDBOX_ERROR) and not by_node:
        record.flags.append("no test result was recorded")


def summary(records: Sequence[LearnerRecord]) -> dict[str, Any]:
    """The class summary: how many learners per status, and per lab how many finished it."""
    graded = [r for r in records if r.status != SKIPPED]
    labs: dict[str, dict[str, Any]] = {}
    for record in graded:
        for score in record.labs:
            row = labs.setdefault(
                score.id, {"id": score.id, "done": 0, "graded": 0, "mean_passed": 0.0, "total": score.total}
            )
            row["graded"] += 1
            row["done"] += score.status == "done"
            row["mean_passed"] += score.passed
    for row in labs.values():
        row["mean_passed"] = round(row["mean_passed"] / row["graded"], 1) if row["graded"] else 0.0
    return {
        "learners": len(records),
        "graded": len(graded),
        "statuses": dict(Counter(r.status for r in records)),
        "tests_edited": sum(1 for r in records if r.tests_edited),
        "labs": list(labs.values()),
    }


def write_json_lines(path: Path, records: Sequence[LearnerRecord]) -> None:
    """One JSON object per learner and line, so that batches graded apart can simply be concatenated."""
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")


def write_csv(path: Path, records: Sequence[LearnerRecord]) -> None:
    """One row per learner: status, passed/total, then passed and total for each lab."""
    lab_ids = list(dict.fromkeys(score.id for r in records for score in r.labs))
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        header = ["learner", "folder", "checkpoint", "status", "passed", "total"]
        for lab_id in lab_ids:
            header += [f"{lab_id} passed", f"{lab_id} total", f"{lab_id} status"]
        writer.writerow([*header, "tests_edited", "flags", "message"])
        for record in records:
            scores = {score.id: score for score in record.labs}
            row: list[object] = [
                record.learner,
                record.folder,
                record.checkpoint or "",
                record.status,
                record.passed,
                record.total,
            ]
            for lab_id in lab_ids:
                score = scores.get(lab_id)
                row += [score.passed, score.total, score.status] if score else ["", "", ""]
            writer.writerow([*row, "; ".join(record.tests_edited), "; ".join(record.flags), record.message])
