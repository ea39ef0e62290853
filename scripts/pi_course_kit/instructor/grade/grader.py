"""Grade practice folders: each in a fresh sandboxed copy, always with the kit's own pristine tests."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_PATH, migrate_meta
from pi_course_kit.core.i18n import LANG_ENV, _
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.records import FolderMeta, RunReport, TestRecord, clean
from pi_course_kit.core.runner import JSON_ENV, pytest_command
from pi_course_kit.core.runner import cpus as runner_cpus
from pi_course_kit.core.staging import TESTS_DIR, pytest_ini, stage_tree, test_files
from pi_course_kit.instructor.grade import (
    bwrap,
    copying,
    held_out,
    held_plugin,
    precompile,
    proof,
    proof_plugin,
    sandbox,
    scoring,
    slots,
    verdict,
)

# What callers and tests read as `grader.X`: the gradebook's statuses and records, the sandbox's limits.
from pi_course_kit.instructor.grade.gradebook import COMPLETE as COMPLETE
from pi_course_kit.instructor.grade.gradebook import CRASHED as CRASHED
from pi_course_kit.instructor.grade.gradebook import ERROR as ERROR
from pi_course_kit.instructor.grade.gradebook import NOT_STARTED as NOT_STARTED
from pi_course_kit.instructor.grade.gradebook import PARTIAL as PARTIAL
from pi_course_kit.instructor.grade.gradebook import SANDBOX_ERROR as SANDBOX_ERROR
from pi_course_kit.instructor.grade.gradebook import SKIPPED as SKIPPED
from pi_course_kit.instructor.grade.gradebook import TAMPERING as TAMPERING
from pi_course_kit.instructor.grade.gradebook import TIMEOUT as TIMEOUT
from pi_course_kit.instructor.grade.gradebook import UNGRADABLE as UNGRADABLE
from pi_course_kit.instructor.grade.gradebook import LabScore as LabScore
from pi_course_kit.instructor.grade.gradebook import LearnerRecord as LearnerRecord
from pi_course_kit.instructor.grade.held_out import graded as with_held_out
from pi_course_kit.instructor.grade.sandbox import Limits as Limits
from pi_course_kit.instructor.grade.sandbox import MiB as MiB
from pi_course_kit.instructor.grade.scoring import TAMPERING_FLAG as TAMPERING_FLAG
from pi_course_kit.instructor.promises import run_tree

META = META_PATH
REPORT = ".pi-course-report.jsonl"
MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_META_BYTES = 64 * 1024
FIRST_UID = bwrap.FIRST_UID  # unprivileged uids, one per parallel slot and batch (claimed by lock files)

#: A folder whose meta.json names another checkpoint than the one it is graded as, or than the batch's
#: (issue #40, K1): the instructor's --checkpoint decides, the record and the batch summary say so.
OTHER_CHECKPOINT_FLAG = "folder of checkpoint "
OTHER_CHECKPOINT_GIVEN = OTHER_CHECKPOINT_FLAG + "{found}: graded as {graded} (--checkpoint)"
OTHER_CHECKPOINT_BATCH = OTHER_CHECKPOINT_FLAG + "{found}: graded as {found}, the batch is mostly {batch}"
RERUN_FLAG = (
    "re-run once: the first run ended without its report (exit code {code}); graded by the second run"
)
#: Importing the tests and the learner's code may take this share of the wall time when grading (the
#: practice folder's bound is staging.IMPORT_SECONDS): on a busy machine an honest import takes longer.
IMPORT_SHARE = 0.5
IMPORT_TIMEOUT_INI = "pi_course_import_timeout"  # the report plugin's ini key (core/report_plugin.py)
#: The reference run of a checkpoint's solution is tried this many times more when it fails: a loaded
#: machine can fail an honest run, and a failing reference must never reach a learner's score.
REFERENCE_RETRIES = 2
#: The smallest batch whose reference run is traced for the proof by default when no traced reference can
#: be kept (`Grader(keep=None)`): tracing costs the batch about what eight learners of a late checkpoint
#: save (benchmarks/README.md, "Grading 17 against 06"). A kept one is traced once per content and then
#: serves every later batch, so with a store every batch gets the proof.
PROOF_MIN_FOLDERS = 8
HELD_PLUGIN = "pi_course_held"  # held_plugin.py as the kit folder holds it (slots.install)
LAB_TIME_PLUGIN = "pi_course_lab_time"  # lab_time.py: one time-out per lab (issue #37)


class ReferenceFailed(KitError):
    """The solution's reference run kept failing: the batch stops, no learner is scored (issue #37)."""


@dataclass(frozen=True)
class _Failure:
    """Why one attempt at the reference run failed: the first failing test and what hints at the cause."""

    test: str
    outcome: str
    timed_out: bool
    detail: str = ""


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
    #: The held-out test modules (name -> disguised source): staged as placeholders (`sources` holds
    #: held_plugin.PLACEHOLDER for each) and handed to each run in memory, never written to its tree.
    held: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Reference:
    """The pristine focused tests of a checkpoint: which node ids exist and which lab each belongs to."""

    checkpoint: Checkpoint
    labs_of: dict[str, str]
    #: The tests/ files (name -> bytes) the solution was checked with; every learner's tree gets these,
    #: so an edit to the kit's files during a batch never mixes versions (empty: staged from disk).
    files: dict[str, bytes] = field(default_factory=dict)
    batch: Batch | None = None
    #: What each test of the trusted run entered (`proof`): the tests a learner's run need not repeat.
    #: None for a reference learned elsewhere (Classroom's starter reference): every test then runs.
    proof: proof.Proof | None = None
    #: True when the trusted run was read back from the store (`Grader.keep`), not run for this batch.
    kept: bool = False

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
        proof: bool | None = None,
        keep: Path | None = None,
    ) -> None:
        self.course, self.limits, self.jobs = course, limits, max(1, jobs)
        #: Where trusted reference runs are kept by content (`runner.run_tests(reuse=)`): a later batch of
        #: the same solution, tests, kit and interpreter reads its reference (and proof) back instead of
        #: running it. Never with --unsafe, where learner code runs as the instructor and could write there.
        self.keep = None if unsafe else keep
        self.checkpoint_override = checkpoint
        self.unsafe = unsafe
        self.fresh_sandboxes = fresh_sandboxes
        #: Whether a learner's run skips the tests the batch's reference proof vouches for (`proof`);
        #: None: `prepare` decides: on with a store (`keep`), else by the batch's size (PROOF_MIN_FOLDERS).
        self.proof_choice = proof
        self.use_proof = bool(proof)
        self.root = os.geteuid() == 0
        if unsafe and self.root:
            raise KitError(
                "--unsafe is refused as root: learner code must never run as uid 0; grade without it"
            )
        self.scratch = Path(tempfile.mkdtemp(prefix="pi-course-grade-"))
        # As root, a tmpfs of its own, so no mount inside a sandbox names a host path (issue #40, H3).
        self.private_scratch = not unsafe and bwrap.private_scratch(self.scratch)
        os.chmod(self.scratch, 0o700)  # no other local user may enter: the staged trees are in it
        if not unsafe:
            bwrap.copy_site(self.scratch, self.course.requires)
        # Plugins and the fork server the grader ships into every sandbox read-only (never inside the
        # learner's copy).
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
                self.level, self.probe_message = (
                    bwrap.UNSAFE,
                    _("no sandbox: resource limits only (--unsafe)"),
                )
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
        #: slot folder -> the held-out modules its next run gets in memory (set where it is staged).
        self._held: dict[Path, dict[str, bytes]] = {}
        #: The checkpoint most folders of the batch are of (`prepare`), when no --checkpoint decides.
        self.batch_checkpoint: str | None = None

    def close(self) -> None:
        """Stop the slots' sandboxes, release the uids and remove every copy the grader made."""
        for slot in self.all_slots:
            if slot.server is not None:
                slot.server.stop()
        if self._uids is not None:
            self._uids.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.private_scratch:
            bwrap.release_scratch(self.scratch)
            with contextlib.suppress(OSError):
                os.rmdir(self.scratch)

    def reference(self, checkpoint: Checkpoint, slot: Slot | None = None) -> Reference:
        """The pristine tests of each lab (one trusted run of the solution) and this batch's disguise.

        Both runs of the solution (trusted and unsandboxed, then disguised in a slot) are retried
        REFERENCE_RETRIES times when they fail; when they still fail, ReferenceFailed names the first
        failing test and the likely cause, and the batch must stop: it is the instructor's problem.
        """
        with self._lock:
            known = self.references.get(checkpoint.id)
            if known is not None and known.batch is not None:
                return known
            failures: list[_Failure] = []
            for _attempt in range(1 + REFERENCE_RETRIES):
                # A reference set from outside (classroom's starter reference) is not learned again.
                found = known if known is not None else self._learn(checkpoint)
                if isinstance(found, _Failure):
                    failures.append(found)
                    continue
                reference = replace(found, batch=self._disguise(found))
                if (self.course.root / checkpoint.solution).is_dir():  # an installed kit ships none
                    with self._slot(slot) as chosen:
                        failure = self._check_disguise(reference, chosen)
                    if failure is not None:
                        failures.append(failure)
                        continue
                self.references[checkpoint.id] = reference
                return reference
            raise ReferenceFailed(_reference_error(checkpoint, failures))

    def prepare(self, folders: Sequence[Path]) -> None:
        """Run the reference of every checkpoint these folders will be graded as, before any learner.

        Raises ReferenceFailed (the batch stops) when one keeps failing; no learner has been run by then.
        """
        if self.proof_choice is None:
            self.use_proof = self.keep is not None or len(folders) >= PROOF_MIN_FOLDERS
        wanted: dict[str, Checkpoint] = {}
        counts: dict[str, int] = {}
        for folder in folders:
            probe = LearnerRecord(learner="", folder="", status=SKIPPED)
            with contextlib.suppress(KitError, ManifestError, OSError):
                found = self._practice_checkpoint(folder, probe)
                if found is not None:
                    wanted.setdefault(found.id, found)
                    counts[found.id] = counts.get(found.id, 0) + 1
        if counts and self.checkpoint_override is None:
            order = [checkpoint.id for checkpoint in self.course.checkpoints]
            self.batch_checkpoint = max(counts, key=lambda cid: (counts[cid], order.index(cid)))
        for checkpoint in wanted.values():
            self.reference(checkpoint)

    def proof_note(self) -> str:
        """How this batch's learners are proven, for the instructor's header line (after `prepare`)."""
        references = list(self.references.values())
        if not self.use_proof or not any(reference.proof for reference in references):
            return _("every test runs")
        if all(reference.kept for reference in references):
            return _(
                "the tests the solution's traced run proves are skipped; that run was kept from an earlier "
                "batch"
            )
        return _("the tests the solution's traced run proves are skipped; that run is kept for later batches")

    def _learn(self, checkpoint: Checkpoint) -> Reference | _Failure:
        """Run the solution once (trusted, unsandboxed) to learn the pristine tests of each lab."""
        checkpoint = with_held_out(self.course, checkpoint)  # the public tests plus the held-out ones
        traced = self.use_proof and proof_plugin.loadable()
        language = os.environ.get(LANG_ENV)
        result = run_tree(
            self.course,
            checkpoint,
            checkpoint.solution,
            ("-p", proof_plugin.__name__) if traced else (),
            runs=self.keep,
            extra_env={LANG_ENV: language} if language else None,
            outputs=(proof_plugin.PROOF_ENV,) if traced else (),
        )
        traces = proof.read_traces(result.outputs.get(proof_plugin.PROOF_ENV, "").splitlines())
        tests = result.report.tests
        failing = [t for t in tests if t.outcome != "passed"]
        if failing:
            first = failing[0]
            timed_out = result.timed_out or "timeout" in first.message.lower()
            return _Failure(first.nodeid, first.outcome, timed_out, first.message or first.skip_reason)
        if not result.tests or result.collect_errors:
            errors = result.report.collect_errors
            where = errors[0].nodeid if errors else _("(no test ran)")
            detail = errors[0].message if errors else f"exit {result.returncode}"
            return _Failure(where, "error", result.timed_out, detail)
        labs_of = {t.nodeid: t.lab or "" for t in tests}
        files = {name: path.read_bytes() for name, path in test_files(self.course, checkpoint).items()}
        found = None
        if traced:  # an untraced run proves nothing: the package is not even read
            shape = proof.PackageShape.read(self.course.root / checkpoint.solution / self.course.package)
            passed = {node: trace for node, trace in traces.items() if node in labs_of}
            found = proof.Proof(shape, passed) if shape is not None else None
        return Reference(checkpoint, labs_of, files, proof=found, kept=result.reused)

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
        # Held-out modules never reach a run's disk: a placeholder there, the source in memory (held_plugin).
        # With --unsafe there is no sandbox to keep them from: they are staged like the public tests.
        graded = set(checkpoint.tree_tests)
        names = {Path(p).name for p in held_out.lineage_files(self.course, checkpoint) if p in graded}
        held = {} if self.unsafe else {name: sources[name] for name in sorted(names)}
        sources.update(dict.fromkeys(held, held_plugin.PLACEHOLDER))
        # The runs of --unsafe see their copy at its real path, not at bwrap.TREE: they compile themselves.
        public = {name: data for name, data in sources.items() if name not in held}
        built = (
            {}
            if self.unsafe
            else precompile.compiled(public, modules - set(held), f"{bwrap.TREE}/{TESTS_DIR}")
        )
        return Batch(sources, disguises, built, held)

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

    def _check_disguise(self, reference: Reference, slot: Slot) -> _Failure | None:
        """Grade the solution itself, disguised and sandboxed: every test must pass and every control fail.

        A focused test that breaks when renamed or copied would otherwise cost honest learners points.
        Returns why it failed (the first test that did not pass), or None.
        """
        assert reference.batch is not None
        work_root = self._scratch_dir()
        try:
            tree = _stage(self.course, reference, self.course.root / reference.checkpoint.solution, slot.tree)
            self._held[slot.work] = reference.batch.held
            out = work_root / "out"
            out.mkdir()
            try:
                run = self._run(tree, out, slot, str(secrets.randbits(64)))
            except slots.ServerFailed as error:
                return _Failure(_("(the grading sandbox)"), "error", False, str(error))
            ran = _read_report(out / "report.jsonl")
            found = verdict.read_verdicts(ran.tests, reference.batch.disguises, reference.labs_of)
            passed = sum(1 for test in found.by_node.values() if test.outcome == "passed")
            if found.tampering or passed != len(reference.labs_of):
                failing = [(node, test) for node, test in found.by_node.items() if test.outcome != "passed"]
                missing = [node for node in reference.labs_of if node not in found.by_node]
                if failing:
                    node, test = failing[0]
                    timed_out = run.timed_out or "timeout" in test.message.lower()
                    return _Failure(node, test.outcome, timed_out, test.message)
                detail = _(
                    "disguised for grading: controls passed: {controls}, exit {code}; "
                    "a test must not depend on its own name or position"
                ).format(controls=found.controls_passed, code=run.returncode)
                return _Failure(missing[0] if missing else _("(a control)"), "missing", run.timed_out, detail)
            return None
        finally:
            shutil.rmtree(slot.tree, ignore_errors=True)
            shutil.rmtree(work_root, ignore_errors=True)

    def grade_all(
        self, folders: Sequence[Path], on_done: Callable[[LearnerRecord], None] | None = None
    ) -> list[LearnerRecord]:
        """Grade every folder, `jobs` at a time; the records keep the order of `folders`.

        The references run first (`prepare`): one that keeps failing raises ReferenceFailed before
        any learner is graded.
        """
        self.prepare(folders)
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
        except ReferenceFailed:
            raise  # the instructor's problem: the batch stops, no learner is scored from it
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
        os.chmod(folder, 0o700)
        return folder

    def grade_one(self, folder: Path, slot: Slot | None = None) -> LearnerRecord:
        """Grade one folder (in `slot`, or one borrowed); a folder that is not a practice folder is
        skipped."""
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
        # A failing reference is the instructor's problem, never a learner's score: ReferenceFailed
        # (and any other error of the reference) stops the batch instead of landing in this record.
        reference = self.reference(checkpoint, slot)
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
        proven = self._proven(reference, source)
        work.mkdir()
        try:
            tree = _stage(self.course, reference, source, slot.tree)
            self._held[slot.work] = reference.batch.held
            out = work / "out"
            out.mkdir()
            skipped = verdict.disguised_nodes(sorted(proven), reference.batch.disguises)
            if not slots.request_fits(_deselect(skipped)):
                # A list too long for one message to the sandbox's server: every test runs instead,
                # which is never wrong about the learner (a lost request would score a crash).
                proven, skipped = frozenset(), []
            run = self._run(tree, out, slot, str(secrets.randbits(64)), skipped)
        finally:
            shutil.rmtree(slot.tree, ignore_errors=True)
        record.sandbox, record.memory = run.level, run.memory
        ran = _read_report(out / "report.jsonl")
        verdicts = verdict.read_verdicts(ran.tests, reference.batch.disguises, reference.labs_of)
        by_node = dict(verdicts.by_node)
        if ran.finished:
            # The grader's own proof, not the run's word: a proven test would have run the very code that
            # passed in the reference. A run that did not finish keeps its crash (scoring says why).
            by_node.update({node: TestRecord(node, reference.labs_of[node], "passed") for node in proven})
        else:
            proven = frozenset()
        found = scoring.Found(by_node, verdicts.tampering, ran.finished, ran.collect_errors)
        scoring.score(record, reference.checkpoint, reference.labs_of, run, found, proven)
        return _Scored(record, run.returncode)

    def _proven(self, reference: Reference, source: Path) -> frozenset[str]:
        """The public tests the learner's run need not repeat (`proof`); held-out tests always run."""
        if reference.proof is None or not self.use_proof:
            return frozenset()
        held = scoring.held_out_nodes(reference.checkpoint, reference.labs_of)
        candidates = [node for node in reference.labs_of if node not in held]
        return reference.proof.proven(source / self.course.package, candidates)

    def _run(
        self, tree: Path, out: Path, slot: Slot, order_seed: str, skipped: Sequence[str] = ()
    ) -> sandbox.Sandboxed:
        """Run the disguised focused tests in `tree`, but for `skipped` (node ids): in the slot's sandbox,
        or with limits only when unsafe."""
        import_seconds = max(1, int(self.limits.wall_seconds * IMPORT_SHARE))
        held = self._held.pop(slot.work, {})
        args = [
            *pytest_command(
                [
                    "--tb=no",
                    "-p",
                    verdict.ORDER_PLUGIN,
                    "--pi-course-order",
                    order_seed,
                    "-p",
                    LAB_TIME_PLUGIN,
                    "-o",
                    f"{IMPORT_TIMEOUT_INI}={import_seconds}",
                    *(["-p", HELD_PLUGIN] if held else []),
                    *_deselect(skipped),
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
        bundle = json.dumps({name: data.decode("utf-8") for name, data in held.items()}).encode("utf-8")
        if slot.server is not None:
            # without "-m pytest": the server is pytest
            return slot.server.run(args[2:], self.limits, out, bundle if held else None)
        return bwrap.sandboxed(
            slot.work,
            out,
            self.kit_dir,
            args,
            self.limits,
            slot.uid,
            sandbox.RUN_ENV,
            self.course.requires,
            bundle if held else None,
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
            meta = FolderMeta.from_json(migrate_meta(json.loads(data.decode("utf-8")), META.as_posix()))
            graded = self.course.checkpoint(self.checkpoint_override or meta.checkpoint)
            found = clean(meta.checkpoint, 40)
            if found != graded.id:
                record.flags.append(OTHER_CHECKPOINT_GIVEN.format(found=found, graded=graded.id))
            elif self.batch_checkpoint not in (None, graded.id):
                record.flags.append(OTHER_CHECKPOINT_BATCH.format(found=found, batch=self.batch_checkpoint))
            return graded
        except (ValueError, AttributeError, TypeError) as error:
            record.message = clean(
                f"{META.as_posix()} is unreadable ({error}); recreate it or pass --checkpoint"
            )
        except (KitError, ManifestError) as error:  # a newer kit's folder, an unknown checkpoint
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


def _reference_error(checkpoint: Checkpoint, failures: Sequence[_Failure]) -> str:
    """The instructor's one line when the reference keeps failing: the test and the likely cause.

    A time-out points at the time limit, tries that failed differently at the load; the same failure
    every time points at the solution or its test.
    """
    failure = failures[-1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cpus = runner_cpus()
    if any(found.timed_out for found in failures):
        cause = _("a time limit (load average {load:.1f} on {cpus} CPU(s)); raise --timeout or grade later")
    elif len({(found.test, found.outcome, found.detail) for found in failures}) > 1:
        cause = _("load (load average {load:.1f} on {cpus} CPU(s)); grade when the machine is quieter")
    else:
        cause = _(
            "the solution or its test (the same failure every time); run `pi-course verify {checkpoint}`"
        )
    detail = clean(failure.detail, 200).splitlines()[0] if failure.detail.strip() else ""
    return _(
        "the reference run of checkpoint {checkpoint}'s solution failed {tries} times, so no learner was "
        "graded: {test} {outcome}{detail}; likely cause: {cause}"
    ).format(
        checkpoint=checkpoint.id,
        tries=len(failures),
        test=failure.test,
        outcome=failure.outcome,
        detail=f" ({detail})" if detail else "",
        cause=cause.format(load=load, cpus=cpus, checkpoint=checkpoint.id),
    )


def _deselect(nodes: Sequence[str]) -> list[str]:
    """The pytest options that leave `nodes` out of a run."""
    return [arg for node in nodes for arg in ("--deselect", node)]


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


def _read_report(report: Path) -> RunReport:
    """The run's records (test records still disguised), read up to a size cap and checked as they are read.

    A line that is not a record is dropped, not fatal: the file is written where learner code runs.
    """
    try:
        with report.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES)
    except OSError:
        return RunReport()
    return RunReport.read(data.decode("utf-8", "replace").splitlines()[:20_000])
