"""Grade practice folders: each in a fresh sandboxed copy, always with the kit's own pristine tests."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import queue
import random
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_PATH
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.records import (
    BLOCKED,
    DONE,
    FAILING,
    IN_PROGRESS,
    LabInfo,
    TestRecord,
    read_records,
    summarise,
)
from pi_course_kit.core.runner import JSON_ENV, pytest_command
from pi_course_kit.core.staging import TESTS_DIR, pytest_ini, stage_tree, test_files
from pi_course_kit.instructor.grade import bwrap, copying, precompile, sandbox, slots, verdict
from pi_course_kit.instructor.promises import run_tree

META = META_PATH
REPORT = ".pi-course-report.jsonl"
MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_META_BYTES = 64 * 1024
MAX_MESSAGE = 300
FIRST_UID = bwrap.FIRST_UID  # unprivileged uids, one per parallel slot and batch (claimed by lock files)

COMPLETE, PARTIAL, NOT_STARTED = "complete", "partial", "not started"
ERROR, TIMEOUT, CRASHED, SKIPPED, SANDBOX_ERROR = "error", "timeout", "crashed", "skipped", "sandbox-error"
UNGRADABLE, TAMPERING = "ungradable", "tampering"
TAMPERING_FLAG = "tampering: a control test that no honest code can pass was reported as passed; scored 0"
RERUN_FLAG = (
    "re-run once: the first run ended without its report (exit code {code}); graded by the second run"
)
#: Importing the tests and the learner's code may take this share of the wall time when grading (the
#: practice folder's bound is the per-test timeout): on a busy machine an honest import can take longer.
IMPORT_SHARE = 0.5
IMPORT_TIMEOUT_INI = "pi_course_import_timeout"  # the report plugin's ini key (core/report_plugin.py)
# C0/C1 controls (ESC sequences, newlines that would forge a row) and bidirectional overrides.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: object, limit: int = MAX_MESSAGE) -> str:
    """Text from a submission made safe for a terminal or a record: no control characters, capped."""
    value = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)[:limit]


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
    #: Seconds each pristine test that ran took, by node id, as its run reported them (JUnit's testcase time).
    durations: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data."""
        return asdict(self)


@dataclass(frozen=True)
class _Scored:
    """One scored run of a folder, and how its process ended."""

    record: LearnerRecord
    returncode: int

    @property
    def status(self) -> str:
        """The run's status (complete, crashed, ...)."""
        return self.record.status


@dataclass(frozen=True)
class Slot:
    """One parallel grading slot: its sandbox uid (None when not root or unsafe), its folder, its server.

    The slot's learner is staged in `work`/tree, which its sandbox sees read-only at `bwrap.TREE`.
    `server` is None with --unsafe and with a fresh sandbox per learner.
    """

    uid: int | None
    work: Path
    server: slots.SlotServer | None = None

    @property
    def tree(self) -> Path:
        """Where this slot's next learner is staged."""
        return self.work / "tree"


@dataclass(frozen=True)
class Batch:
    """The disguised focused tests every learner of one checkpoint is graded with in this batch.

    Made once per batch with a secret seed: the renamed tests and controls (`verdict.disguise_module`),
    and their compiled bytecode. Runs of different learners never meet (each has its own sandbox, or
    a fork server that ends everything of a run before the next), so one disguise per batch hides as
    much from a forgery as one per run, and the solution is checked against the very same one.
    """

    sources: dict[str, bytes]
    disguises: dict[str, verdict.Disguise]
    compiled: dict[str, bytes]


@dataclass(frozen=True)
class Reference:
    """The pristine focused tests of a checkpoint: which node ids exist and which lab each belongs to."""

    checkpoint: Checkpoint
    labs_of: dict[str, str]
    #: The tests/ files (name -> bytes) the solution was checked with; every learner's tree gets these,
    #: so an edit to the kit's files during a batch never mixes versions (empty: staged from disk).
    files: dict[str, bytes] = field(default_factory=dict)
    batch: Batch | None = None

    def total(self, lab_id: str) -> int:
        """How many pristine tests the lab has."""
        return sum(1 for lab in self.labs_of.values() if lab == lab_id)


class Grader:
    """Grades folders of one course; holds the scratch folder, the uids and the references.

    `unsafe=True` runs learner code with resource limits only (no bubblewrap); refused as root.
    Raises KitError (with the fix) when the sandbox cannot be built here.
    """

    def __init__(
        self,
        course: Course,
        limits: sandbox.Limits,
        jobs: int = 2,
        checkpoint: str | None = None,
        unsafe: bool = False,
        fresh_sandboxes: bool = False,
    ) -> None:
        self.course, self.limits, self.jobs = course, limits, max(1, jobs)
        self.checkpoint_override = checkpoint
        self.unsafe = unsafe
        self.fresh_sandboxes = fresh_sandboxes
        self.root = os.geteuid() == 0
        if unsafe and self.root:
            raise KitError(
                "--unsafe is refused as root: learner code must never run as uid 0; grade without it"
            )
        self.scratch = Path(tempfile.mkdtemp(prefix="pi-course-grade-"))
        os.chmod(self.scratch, 0o711)
        # Plugins and the fork server the grader ships into every sandbox read-only (never inside the learner's copy).
        self.kit_dir = self.scratch / "kit"
        self.kit_dir.mkdir(mode=0o755)
        (self.kit_dir / f"{verdict.ORDER_PLUGIN}.py").write_text(
            verdict.ORDER_PLUGIN_SOURCE, encoding="utf-8"
        )
        slots.install(self.kit_dir)
        self._uids: bwrap.UidPool | None = None
        self.slots: queue.Queue[Slot] = queue.Queue()
        self.all_slots: list[Slot] = []
        self._lock = threading.Lock()
        try:
            if self.root:
                self._uids = bwrap.UidPool(self.jobs)
            uids: list[int | None] = list(self._uids.uids) if self._uids else [None] * self.jobs
            for number, uid in enumerate(uids):
                work = self.scratch / f"slot-{number}"
                work.mkdir(mode=0o755)
                server = None
                if not (unsafe or fresh_sandboxes):
                    log = self.scratch / f"slot-{number}.log"
                    server = slots.SlotServer(
                        work, self.kit_dir, uid, sandbox.RUN_ENV, log, self.course.requires
                    )
                slot = Slot(uid, work, server)
                self.all_slots.append(slot)
                self.slots.put(slot)
            if unsafe:
                self.level, self.probe_message = bwrap.UNSAFE, "no sandbox: resource limits only (--unsafe)"
            else:
                found = bwrap.probe(self.scratch, uids[0])
                self.level, self.probe_message = found.level, found.message
                first = self.all_slots[0].server
                if first is not None:
                    first.ready()  # here, before any learner: a slot that cannot start fails the batch once
        except bwrap.SandboxUnavailable as error:
            self.close()
            raise KitError(f"cannot grade safely: {error}") from None
        except slots.ServerFailed as error:
            self.close()
            raise KitError(
                f"{error}; `--fresh-sandbox` grades without it (one sandbox per learner)"
            ) from None
        except BaseException:
            self.close()
            raise
        self.references: dict[str, Reference] = {}
        self._counter = 0

    def close(self) -> None:
        """Stop the slots' sandboxes, release the uids and remove every copy the grader made."""
        for slot in self.all_slots:
            if slot.server is not None:
                slot.server.stop()
        if self._uids is not None:
            self._uids.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def reference(self, checkpoint: Checkpoint, slot: Slot | None = None) -> Reference:
        """The pristine tests of each lab (one trusted run of the solution) and this batch's disguise."""
        with self._lock:
            if checkpoint.id not in self.references:
                self.references[checkpoint.id] = self._learn(checkpoint)
            reference = self.references[checkpoint.id]
            if reference.batch is None:
                reference = replace(reference, batch=self._disguise(reference))
                if (self.course.root / checkpoint.solution).is_dir():  # an installed kit ships none
                    with self._slot(slot) as chosen:
                        self._check_disguise(reference, chosen)
                self.references[checkpoint.id] = reference
            return reference

    def _learn(self, checkpoint: Checkpoint) -> Reference:
        """Run the solution once (trusted, unsandboxed) to learn the pristine tests of each lab."""
        result = run_tree(self.course, checkpoint, checkpoint.solution)
        failing = [t["nodeid"] for t in result.tests if t["outcome"] != "passed"]
        if not result.tests or failing or result.collect_errors:
            raise KitError(
                f"the solution of checkpoint {checkpoint.id} does not pass its focused tests "
                f"({len(failing)} failing); run `pi-course verify` and fix it before grading"
            )
        labs_of = {t["nodeid"]: t["lab"] for t in result.tests}
        files = {name: path.read_bytes() for name, path in test_files(self.course, checkpoint).items()}
        return Reference(checkpoint, labs_of, files)

    def _disguise(self, reference: Reference) -> Batch:
        """This batch's secret disguise of the checkpoint's focused test modules, compiled once."""
        checkpoint = reference.checkpoint
        files = reference.files or {
            name: path.read_bytes() for name, path in test_files(self.course, checkpoint).items()
        }
        rng = random.Random(secrets.randbits(128))
        sources, disguises = dict(files), {}
        modules = {Path(relative).name for relative in checkpoint.tree_tests}
        for name in sorted(modules):
            text, disguise = verdict.disguise_module(files[name].decode("utf-8"), rng)
            sources[name], disguises[name] = text.encode("utf-8"), disguise
        # The runs of --unsafe see their copy at its real path, not at bwrap.TREE: they compile themselves.
        built = {} if self.unsafe else precompile.compiled(sources, modules, f"{bwrap.TREE}/{TESTS_DIR}")
        return Batch(sources, disguises, built)

    @contextlib.contextmanager
    def _slot(self, slot: Slot | None) -> Iterator[Slot]:
        """The caller's slot, or one borrowed from the pool for the time of the block."""
        if slot is not None:
            yield slot
            return
        borrowed = self.slots.get()
        try:
            yield borrowed
        finally:
            self.slots.put(borrowed)

    def _check_disguise(self, reference: Reference, slot: Slot) -> None:
        """Grade the solution itself, disguised and sandboxed: every test must pass and every control fail.

        A focused test that breaks when renamed or copied would otherwise cost honest learners points.
        """
        checkpoint = reference.checkpoint
        assert reference.batch is not None
        work_root = self._scratch_dir()
        try:
            tree = _stage(self.course, reference, self.course.root / checkpoint.solution, slot.tree)
            out = work_root / "out"
            out.mkdir()
            run = self._run(tree, out, slot, str(secrets.randbits(64)))
            tests, _, _ = _read_report(out / "report.jsonl")
            found = verdict.read_verdicts(tests, reference.batch.disguises, reference.labs_of)
            passed = sum(1 for test in found.by_node.values() if test.get("outcome") == "passed")
            if found.tampering or passed != len(reference.labs_of):
                raise KitError(
                    f"the solution of checkpoint {checkpoint.id} passes {passed} of {len(reference.labs_of)} "
                    f"focused tests once they are disguised for grading (controls passed: {found.controls_passed}, "
                    f"exit {run.returncode}); a test must not depend on its own name or position"
                )
        finally:
            shutil.rmtree(slot.tree, ignore_errors=True)
            shutil.rmtree(work_root, ignore_errors=True)

    def grade_all(
        self, folders: Sequence[Path], on_done: Callable[[LearnerRecord], None] | None = None
    ) -> list[LearnerRecord]:
        """Grade every folder, `jobs` at a time; the records keep the order of `folders`."""
        # The slots' sandboxes start together, before the first learner, so their imports overlap.
        for slot in self.all_slots[: len(folders)]:
            if slot.server is not None:
                slot.server.start()
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
            return self.grade_one(folder, slot)
        except Exception as error:  # one submission never stops the batch, whatever it holds
            record = LearnerRecord(
                learner=copying.shown(folder.name or str(folder)), folder=clean(folder, 4096), status=ERROR
            )
            record.message = clean(f"the grader failed on this folder: {type(error).__name__}: {error}")
            return record
        finally:
            self.slots.put(slot)

    def _scratch_dir(self) -> Path:
        self._counter += 1
        folder = Path(tempfile.mkdtemp(prefix=f"learner-{self._counter:04d}-", dir=self.scratch))
        os.chmod(folder, 0o711)
        return folder

    def grade_one(self, folder: Path, slot: Slot | None = None) -> LearnerRecord:
        """Grade one folder (in `slot`, or one borrowed); a folder that is not a practice folder is skipped."""
        with self._slot(slot) as chosen:
            return self._grade_one(folder, chosen)

    def _grade_one(self, folder: Path, slot: Slot) -> LearnerRecord:
        started = time.perf_counter()
        record = LearnerRecord(
            learner=copying.shown(folder.name or str(folder)),
            folder=clean(folder.absolute(), 4096),
            status=SKIPPED,
        )
        checkpoint = self._practice_checkpoint(folder, record)
        if checkpoint is None:
            return record
        record.checkpoint = checkpoint.id
        try:
            reference = self.reference(checkpoint, slot)
        except (KitError, slots.ServerFailed) as error:
            record.status, record.message = ERROR, str(error)
            return record
        work_root = self._scratch_dir()
        try:
            try:
                record.tests_edited = (
                    [] if _is_bare(folder) else edited_tests(self.course, checkpoint, folder)
                )
                source = work_root / "source"
                source.mkdir()
                copying.copy_package(folder, self.course.package, source)
            except copying.Refused as error:
                record.status, record.message = UNGRADABLE, clean(f"cannot be graded safely: {error}")
                return record
            if record.tests_edited:
                record.flags.append("tests edited (ignored: graded with the kit's own tests)")
            if self.unsafe:
                record.flags.append(
                    "graded with --unsafe: no sandbox, learner code ran with the grader's rights"
                )
            scored = self._run_and_score(record, reference, source, work_root / "first", slot)
            if scored.status == CRASHED:
                # A run can lose its report to the machine (an overloaded host, a killed process), and
                # a learner must not get 0 for that: one re-run, from a fresh copy in a fresh order and
                # a new sandbox, graded exactly like the first, so it can never score more
                # than one honest run; the record says so. A submission that crashes on purpose just
                # crashes twice (one extra run per folder, within the same limits).
                code = scored.returncode
                if slot.server is not None:
                    slot.server.stop()  # whatever went wrong, the second run starts in a new sandbox
                record = self._run_and_score(record, reference, source, work_root / "second", slot).record
                record.flags.append(RERUN_FLAG.format(code=code))
            else:
                record = scored.record
        finally:
            shutil.rmtree(work_root, ignore_errors=True)
            record.seconds = round(time.perf_counter() - started, 2)
        return record

    def _run_and_score(
        self, base: LearnerRecord, reference: Reference, source: Path, work: Path, slot: Slot
    ) -> _Scored:
        """Stage `source` in the slot, run it once in a fresh order and score a copy of `base`."""
        assert reference.batch is not None
        record = replace(base, labs=[], flags=list(base.flags), tests=[])
        work.mkdir()
        try:
            tree = _stage(self.course, reference, source, slot.tree)
            out = work / "out"
            out.mkdir()
            run = self._run(tree, out, slot, str(secrets.randbits(64)))
        finally:
            shutil.rmtree(slot.tree, ignore_errors=True)
        record.sandbox = run.level
        tests, summary_record, collect_errors = _read_report(out / "report.jsonl")
        verdicts = verdict.read_verdicts(tests, reference.batch.disguises, reference.labs_of)
        _score(record, reference, run, verdicts, summary_record, collect_errors)
        return _Scored(record, run.returncode)

    def _run(self, tree: Path, out: Path, slot: Slot, order_seed: str) -> sandbox.Sandboxed:
        """Run the disguised focused tests in `tree`: in the slot's sandbox, or with limits only when unsafe."""
        import_seconds = max(1, int(self.limits.wall_seconds * IMPORT_SHARE))
        args = [
            *pytest_command(
                [
                    "--tb=no",
                    "-p",
                    verdict.ORDER_PLUGIN,
                    "--pi-course-order",
                    order_seed,
                    "-o",
                    f"{IMPORT_TIMEOUT_INI}={import_seconds}",
                ]
            )[1:]
        ]
        if self.unsafe:
            env = sandbox.minimal_env(
                tree, {JSON_ENV: str(out / "report.jsonl"), "PYTHONPATH": str(self.kit_dir)}
            )
            env.pop("VIRTUAL_ENV", None)
            sandbox.prepare_work(tree, None)
            return sandbox.run(
                [sys.executable, *args], tree, env, self.limits, sandbox.LIMITS, out.parent / "output.log"
            )
        if slot.server is not None:
            return slot.server.run(args[2:], self.limits, out)  # without "-m pytest": the server is pytest
        return bwrap.sandboxed(
            slot.work, out, self.kit_dir, args, self.limits, slot.uid, sandbox.RUN_ENV, self.course.requires
        )

    def _practice_checkpoint(self, folder: Path, record: LearnerRecord) -> Checkpoint | None:
        try:
            with copying.open_dir(folder):
                pass
        except copying.Refused:
            record.message = "not a folder; give practice folders made by `pi-course practice`"
            return None
        if self.checkpoint_override and _is_bare(folder):
            return self._bare_checkpoint(folder, record)
        try:
            data = copying.read_file(folder, META.as_posix(), MAX_META_BYTES)
        except copying.Refused as error:
            record.message = clean(f"{META.as_posix()} cannot be read safely: {error}")
            return None
        if data is None:
            record.message = f"not a practice folder: no {META.as_posix()}"
            return None
        package = folder / self.course.package
        if not package.is_dir() or package.is_symlink():
            record.message = f"not a practice folder: no {self.course.package}/"
            return None
        try:
            meta = json.loads(data.decode("utf-8"))
            wanted = self.checkpoint_override or str(meta["checkpoint"])
            return self.course.checkpoint(wanted)
        except (ValueError, KeyError, TypeError) as error:
            record.message = clean(
                f"{META.as_posix()} is unreadable ({error}); recreate it or pass --checkpoint"
            )
        except ManifestError as error:
            record.message = clean(error)
        return None

    def _bare_checkpoint(self, folder: Path, record: LearnerRecord) -> Checkpoint | None:
        # A submission of just pi_course/ (Gradescope, an LMS upload): the checkpoint comes from --checkpoint.
        package = folder / self.course.package
        if package.is_symlink() or not package.is_dir():
            record.message = f"not a submission: {self.course.package}/ is missing or a symbolic link"
            return None
        record.flags.append(f"bare {self.course.package}/ submission (graded as --checkpoint)")
        return self.course.checkpoint(str(self.checkpoint_override))


def _stage(course: Course, reference: Reference, source: Path, dest: Path) -> Path:
    """Stage a tree with the batch's disguised copies of the kit's test files, and their bytecode."""
    assert reference.batch is not None
    shutil.rmtree(dest, ignore_errors=True)
    tree = stage_tree(course, reference.checkpoint, source, dest, reference.batch.sources)
    tests = tree / TESTS_DIR
    if reference.batch.compiled:
        (tests / "__pycache__").mkdir(exist_ok=True)
    for name, data in reference.batch.compiled.items():
        (tests / name).write_bytes(data)
    return tree


def _is_bare(folder: Path) -> bool:
    """A submission without the practice folder's meta.json (only its package, perhaps more)."""
    return not os.path.lexists(folder / META)


def _verdicts(reference: Reference, by_node: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Each pristine test's outcome in run order; a test the learner's run did not report is "missing"."""
    return [
        {"nodeid": node, "lab": lab, "outcome": clean(by_node.get(node, {}).get("outcome", "missing"), 20)}
        for node, lab in reference.labs_of.items()
    ]


def _durations(reference: Reference, by_node: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each pristine test's reported duration, when it is a finite number of seconds >= 0."""
    found = {}
    for node in reference.labs_of:
        value = by_node.get(node, {}).get("duration")
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
            found[node] = round(float(value), 6)
    return found


def edited_tests(course: Course, checkpoint: Checkpoint, folder: Path) -> list[str]:
    """The learner's copies of the focused tests (and pytest.ini) that differ from the kit's.

    Only code counts: a translation catalog from an older kit (a folder made before an upgrade) is no edit.
    """
    edited = []
    for name, source in test_files(course, checkpoint).items():
        if not name.endswith(".py"):
            continue
        shown = f"{TESTS_DIR}/{name}"
        expected = source.read_bytes()
        try:
            mine = copying.read_file(folder, shown, len(expected))
        except copying.Refused:
            edited.append(f"{shown} (changed)")
            continue
        if mine is None:
            edited.append(f"{shown} (missing)")
        elif mine != expected:
            edited.append(f"{shown} (changed)")
    wanted = pytest_ini(course, checkpoint).encode("utf-8")
    try:
        ini = copying.read_file(folder, "pytest.ini", len(wanted))
    except copying.Refused:
        ini = b"\0"
    if ini != wanted:
        edited.append("pytest.ini (changed)" if ini is not None else "pytest.ini (missing)")
    return edited


def _read_report(report: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    """The run's records, read up to a size cap; a line that is not a record is dropped, not fatal."""
    try:
        with report.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES)
    except OSError:
        return [], None, []
    tests: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    summary_record: dict[str, Any] | None = None
    for line in data.decode("utf-8", "replace").splitlines()[:20_000]:
        try:
            found, closing, collect = read_records([line])
        except (ValueError, AttributeError, TypeError):
            continue
        tests += [t for t in found if isinstance(t, dict)]
        errors += [e for e in collect if isinstance(e, dict)]
        summary_record = closing if isinstance(closing, dict) else summary_record
    return tests, summary_record, errors


def _lab_status(passed: int, total: int, found: list[dict[str, Any]], lab: LabInfo) -> str:
    """The lab's status by the report's own rules (records.summarise), in the gradebook's words."""
    if total and passed == total:
        return "done"
    known = set(TestRecord.__dataclass_fields__)
    tests = [TestRecord(**{k: v for k, v in r.items() if k in known}) for r in found if "nodeid" in r]
    row = summarise([lab], [replace(t, lab=lab.id) for t in tests])[0]
    if row.status == BLOCKED and row.blocked_by:
        return f"blocked by {clean(row.blocked_by, 20)}"
    # Tests that never reported count as failures here, so a lab with any pass is failing, not done.
    if row.status in (FAILING, IN_PROGRESS, DONE) or passed:
        return "failing"
    return "not started"


def _observed_flags(run: sandbox.Sandboxed) -> list[str]:
    """Flags from what the grader itself saw (exit status, its own clock), never from learner output."""
    flags = []
    signals = {
        -9: "killed (SIGKILL)",
        137: "killed (SIGKILL)",
        -24: "CPU time limit reached",
        152: "CPU time limit reached",
    }
    if run.returncode in signals and not run.timed_out:
        flags.append(signals[run.returncode])
    if run.returncode in (-25, 153):
        flags.append("file size limit reached")
    return flags


def _score(
    record: LearnerRecord,
    reference: Reference,
    run: sandbox.Sandboxed,
    verdicts: verdict.Verdicts,
    summary_record: dict[str, Any] | None,
    collect_errors: list[dict[str, Any]],
) -> None:
    by_node = verdicts.by_node
    checkpoint = reference.checkpoint
    for lab in checkpoint.labs:
        nodes = [node for node, lab_id in reference.labs_of.items() if lab_id == lab.id]
        records = [by_node[node] for node in nodes if node in by_node]
        # Only a pristine test that ran and passed counts: skipped or missing tests never do.
        passed = 0 if verdicts.tampering else sum(1 for r in records if r.get("outcome") == "passed")
        failure = next((r for r in records if r.get("outcome") != "passed"), None)
        message = clean(failure.get("message") or failure.get("skip_reason") or "") if failure else ""
        status = (
            "tampering"
            if verdicts.tampering
            else _lab_status(
                passed, len(nodes), records, LabInfo(lab.id, lab.marker, lab.title, lab.optional)
            )
        )
        record.labs.append(LabScore(lab.id, lab.title, lab.optional, passed, len(nodes), status, message))
    required = [score for score in record.labs if not score.optional]
    record.passed = sum(s.passed for s in required)
    # The parent checkpoint's labs earn nothing here, but the parent must stay green: say when it is not.
    inherited = [lab.id for lab in checkpoint.tree_labs if lab.inherited and not lab.optional]
    broken = [
        lab_id
        for lab_id in inherited
        if any(
            by_node.get(node, {}).get("outcome") != "passed"
            for node, owner in reference.labs_of.items()
            if owner == lab_id
        )
    ]
    if broken and not verdicts.tampering:
        record.flags.append(f"parent labs not green: {', '.join(broken)}")
    record.tests = _verdicts(reference, {} if verdicts.tampering else by_node)
    record.durations = _durations(reference, {} if verdicts.tampering else by_node)
    record.total = sum(s.total for s in required)
    # MemoryError is read from the structured verdict of a graded test, never from printed text.
    if any(str(t.get("exc_type", "")) == "MemoryError" for t in by_node.values()):
        record.flags.append("memory limit reached")
    record.flags += _observed_flags(run)
    if verdicts.tampering:
        record.status, record.message = TAMPERING, ""
        record.flags.append(TAMPERING_FLAG)
    elif run.timed_out:
        record.status = TIMEOUT
        record.message = f"stopped after the wall-time limit of {run.seconds:.0f}s (an endless loop?)"
    elif collect_errors and not by_node:
        record.status = ERROR
        first = collect_errors[0]
        where = f" at {clean(first.get('location'), 200)}" if first.get("location") else ""
        record.message = clean(f"the package does not import{where}: {first.get('message', '')}")
    elif summary_record is None:
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
            data = {
                **record.to_json(),
                "learner": clean(record.learner, 4096),
                "folder": clean(record.folder, 4096),
            }
            # U+2028/U+2029 inside a string are escaped: many line readers split on them.
            line = (
                json.dumps(data, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            )
            handle.write(line + "\n")


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
                clean(record.learner, 4096),
                clean(record.folder, 4096),
                record.checkpoint or "",
                record.status,
                record.passed,
                record.total,
            ]
            for lab_id in lab_ids:
                score = scores.get(lab_id)
                row += [score.passed, score.total, score.status] if score else ["", "", ""]
            writer.writerow([*row, "; ".join(record.tests_edited), "; ".join(record.flags), record.message])
