"""Load `course.toml` into dataclasses; a malformed manifest names the file, the key and the fault."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pi_course_kit.core import i18n

FORMAT_VERSION = 2
CREDIT_RULES = ("fraction", "all-or-nothing")
#: "labs": the learner rebuilds marked bodies of the target. "observation": the learner runs, predicts
#: and breaks the target on purpose; the starter is the target and its labs are observation steps.
KINDS = ("labs", "observation")


class ManifestError(Exception):
    """The manifest cannot be used; the message names file, key and what to fix."""


@dataclass(frozen=True)
class Lab:
    """One lab of a checkpoint, e.g. 6.1, with its pytest marker and hints."""

    id: str
    marker: str
    title: str
    implements: tuple[str, ...]
    hints: tuple[str, ...]
    optional: bool = False
    #: Points in a grade; an optional lab's points are extra credit.
    points: float = 0.0
    #: "fraction": points times the share of the lab's tests passed; "all-or-nothing": full points or 0.
    credit: str = "fraction"
    #: True where the lab belongs to an earlier checkpoint and is only re-checked here.
    inherited: bool = False
    #: The title and hints in English, for a run in English of a course in another language (optional).
    title_en: str = ""
    hints_en: tuple[str, ...] = ()

    @property
    def shown_title(self) -> str:
        """The title in the run's language: `title_en` when the run speaks English and the course does not."""
        return self.title_en if self.title_en and i18n.wants_english() else self.title

    @property
    def shown_hints(self) -> tuple[str, ...]:
        """The hints in the run's language: `hints_en` when the run speaks English and the course does not."""
        return self.hints_en if self.hints_en and i18n.wants_english() else self.hints


@dataclass(frozen=True)
class AgentNotes:
    """A chapter's notes for a companion agent (AGENT-GUIDE.md), in one language."""

    #: What to have the learner predict before a run.
    predict: str
    #: What the chapter does not teach yet: the agent must not bring it in.
    not_yet: str
    #: How to explain what passing the labs proves.
    acceptance: str


#: The manifest keys of a checkpoint's agent notes, in AgentNotes's field order (`_en` added for English).
AGENT_NOTE_KEYS = ("agent_predict", "agent_not_yet", "agent_acceptance")


@dataclass(frozen=True)
class Mutation:
    """A named, readable change to a solution file that the focused tests must catch."""

    name: str
    description: str
    file: str
    find: str
    replace: str
    expect: str = ""
    #: Why the report's `edit:` line cannot yet name the function this mutation changes (empty: it must).
    edit_unplaced: str = ""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: its parent (starter) and target (solution) trees and its labs."""

    id: str
    slug: str
    title: str
    starter: str
    solution: str
    teaching_files: tuple[str, ...]
    given_files: tuple[str, ...]
    solution_only: tuple[str, ...]
    focused_tests: tuple[str, ...]
    test_support: tuple[str, ...]
    notebook: str
    labs: tuple[Lab, ...]
    mutations: tuple[Mutation, ...] = field(default=())
    #: The checkpoint whose target is this one's parent state, e.g. "06" for 07.
    parent: str | None = None
    #: Given files that must stay byte-identical to the parent checkpoint's solution.
    inherited_files: tuple[str, ...] = ()
    #: The learner's contract page (Chinese): every literal message and behaviour the tests hold them to.
    contract: str | None = None
    #: Filled in by `load`: the parent's labs (re-checked here; its optional ones are left out of runs)
    #: and then this checkpoint's own.
    tree_labs: tuple[Lab, ...] = ()
    #: Filled in by `load`: every focused test file a tree of this checkpoint runs, the parent's first.
    tree_tests: tuple[str, ...] = ()
    #: Filled in by `load`: the test support files of the whole lineage.
    tree_support: tuple[str, ...] = ()
    #: One of KINDS. An observation checkpoint has nothing to implement: its starter is its solution.
    kind: str = "labs"
    #: The title in English, for a run in English of a course in another language (optional).
    title_en: str = ""
    #: Held-out focused tests (under tests/held_out/): graded beside the public ones, never given to learners.
    held_out: tuple[str, ...] = ()
    #: The chapter's notes for a companion agent, in the course's language and in English (optional).
    agent_notes: AgentNotes | None = None
    agent_notes_en: AgentNotes | None = None

    @property
    def shown_title(self) -> str:
        """The title in the run's language: `title_en` when the run speaks English and the course does not."""
        return self.title_en if self.title_en and i18n.wants_english() else self.title

    @property
    def observation(self) -> bool:
        """True for a checkpoint the learner observes (run, predict, break) instead of rebuilding."""
        return self.kind == "observation"

    def lab(self, lab_id: str) -> Lab:
        """Return the lab with this id, or raise ManifestError listing the known ones."""
        for lab in self.labs:
            if lab.id == lab_id:
                return lab
        known = ", ".join(lab.id for lab in self.labs)
        raise ManifestError(
            i18n._("unknown lab {lab!r} in checkpoint {checkpoint}; known labs: {known}").format(
                lab=lab_id, checkpoint=self.id, known=known
            )
        )

    def mutation(self, name: str) -> Mutation:
        """Return the mutation with this name, or raise ManifestError listing the known ones."""
        for mutation in self.mutations:
            if mutation.name == name:
                return mutation
        known = ", ".join(m.name for m in self.mutations) or "none"
        raise ManifestError(f"unknown mutation {name!r} in checkpoint {self.id}; known mutations: {known}")

    @property
    def required_labs(self) -> tuple[Lab, ...]:
        """The labs that count towards finishing the checkpoint (not the optional ones)."""
        return tuple(lab for lab in self.labs if not lab.optional)

    @property
    def first_lab(self) -> Lab:
        """The lab a fresh practice folder starts with."""
        return self.labs[0]

    @property
    def first_red_prefix(self) -> str:
        """How the first red of a fresh starter begins; the stub's name follows (derived, never stored)."""
        return f"Lab {self.first_lab.id} not implemented:"


@dataclass(frozen=True)
class Course:
    """The whole manifest."""

    path: Path
    format_version: int
    title: str
    package: str
    language: str
    checkpoints: tuple[Checkpoint, ...]
    #: Distributions the learner's package imports beyond the standard library (the grading sandbox
    #: binds them beside the test tools).
    requires: tuple[str, ...] = ()
    #: The title in English, for a run in English of a course in another language (optional).
    title_en: str = ""

    @property
    def shown_title(self) -> str:
        """The title in the run's language: `title_en` when the run speaks English and the course does not.

        Asked of the course itself, not of the last course loaded (`i18n.wants_english`), so that a process
        that loaded another course (the kit's tests, the fixture) still titles this one right.
        """
        english = i18n.speaks_english() and not self.language.lower().startswith("en")
        return self.title_en if self.title_en and english else self.title

    @property
    def root(self) -> Path:
        """The kit repository that the manifest's relative paths start from."""
        return self.path.parent

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """Return a checkpoint by id ("06") or slug; raise ManifestError listing the known ones."""
        for checkpoint in self.checkpoints:
            if checkpoint_id in (checkpoint.id, checkpoint.slug):
                return checkpoint
        known = ", ".join(c.id for c in self.checkpoints)
        raise ManifestError(
            i18n._("unknown checkpoint {checkpoint!r}; known checkpoints: {known}").format(
                checkpoint=checkpoint_id, known=known
            )
        )

    def parent_of(self, checkpoint: Checkpoint) -> Checkpoint | None:
        """The checkpoint whose solution is `checkpoint`'s parent state, if any."""
        return self.checkpoint(checkpoint.parent) if checkpoint.parent else None

    def find_lab(self, lab_id: str) -> tuple[Checkpoint, Lab]:
        """Find a lab by id across all checkpoints."""
        for checkpoint in self.checkpoints:
            for lab in checkpoint.labs:
                if lab.id == lab_id:
                    return checkpoint, lab
        known = ", ".join(lab.id for c in self.checkpoints for lab in c.labs)
        raise ManifestError(
            i18n._("unknown lab {lab!r}; known labs: {known}").format(lab=lab_id, known=known)
        )


class _Reader:
    """Typed access to one TOML table, with errors that say where the fault is."""

    def __init__(self, path: Path, table: dict[str, Any], where: str) -> None:
        self.path, self.table, self.where = path, table, where

    def _fail(self, key: str, problem: str) -> ManifestError:
        return ManifestError(f"{self.path}: key '{self.where}{key}' {problem}")

    def text(self, key: str, default: str | None = None, allow_empty: bool = False) -> str:
        value = self.table.get(key, default)
        if value is None:
            raise self._fail(key, "is missing; add it as a string")
        if not isinstance(value, str) or not (value.strip() or allow_empty):
            raise self._fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def texts(self, key: str, minimum: int = 0) -> tuple[str, ...]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise self._fail(key, f"must be a list of non-empty strings, got {value!r}")
        if len(value) < minimum:
            raise self._fail(key, f"needs at least {minimum} entries, has {len(value)}")
        return tuple(value)

    def number(self, key: str) -> float:
        value = self.table.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self._fail(key, f"must be a number >= 0, got {value!r}")
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.table.get(key, choices[0])
        if value not in choices:
            raise self._fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if key in self.table else None

    def flag(self, key: str) -> bool:
        value = self.table.get(key, False)
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def tables(self, key: str) -> list[_Reader]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self._fail(key, "must be an array of tables ([[...]])")
        return [_Reader(self.path, item, f"{self.where}{key}[{i}].") for i, item in enumerate(value)]


def _lab(reader: _Reader) -> Lab:
    return Lab(
        id=reader.text("id"),
        marker=reader.text("marker"),
        title=reader.text("title"),
        implements=reader.texts("implements", minimum=1),
        hints=reader.texts("hints", minimum=2),
        optional=reader.flag("optional"),
        points=reader.number("points"),
        credit=reader.choice("credit", CREDIT_RULES),
        title_en=reader.text("title_en", default="", allow_empty=True),
        hints_en=reader.texts("hints_en"),
    )


def _mutation(reader: _Reader) -> Mutation:
    return Mutation(
        name=reader.text("name"),
        description=reader.text("description"),
        file=reader.text("file"),
        find=reader.text("find"),
        replace=reader.text("replace", default="", allow_empty=True),
        expect=reader.text("expect", default="", allow_empty=True),
        edit_unplaced=reader.text("edit_unplaced", default="", allow_empty=True),
    )


HELD_OUT_DIR = "tests/held_out/"


def _held_out(reader: _Reader) -> tuple[str, ...]:
    """The held-out test files: `tests/held_out/test_*.py`, each named once, never a public focused test."""
    paths = reader.texts("held_out")
    public = {Path(test).name for test in reader.texts("focused_tests")}
    for path in paths:
        name = path[len(HELD_OUT_DIR) :]
        if (
            not path.startswith(HELD_OUT_DIR)
            or "/" in name
            or not (name.startswith("test_") and name.endswith(".py"))
        ):
            raise reader._fail("held_out", f"names {path!r}; give files {HELD_OUT_DIR}test_*.py")
        if name in public or paths.count(path) > 1:
            raise reader._fail("held_out", f"names {path!r} twice or as a public test; name each file once")
    return paths


def _agent_notes(reader: _Reader, suffix: str) -> AgentNotes | None:
    """The agent notes under the keys AGENT_NOTE_KEYS + `suffix`: all three, or none."""
    keys = [key + suffix for key in AGENT_NOTE_KEYS]
    values = [reader.optional_text(key) for key in keys]
    if all(value is None for value in values):
        return None
    missing = [key for key, value in zip(keys, values, strict=True) if value is None]
    if missing:
        raise reader._fail(missing[0], f"is missing; {', '.join(keys)} are given together")
    return AgentNotes(*(value for value in values if value is not None))


def _checkpoint(reader: _Reader) -> Checkpoint:
    kind = reader.choice("kind", KINDS)
    labs = tuple(_lab(r) for r in reader.tables("labs"))
    if not labs:
        # An observation checkpoint's [[checkpoints.labs]] are its observation steps: their markers
        # select its focused tests and they carry its hints.
        what = " (an observation checkpoint: one per observation step)" if kind == "observation" else ""
        raise reader._fail(
            "labs", f"is empty; every checkpoint needs at least one [[checkpoints.labs]]{what}"
        )
    checkpoint = Checkpoint(
        id=reader.text("id"),
        slug=reader.text("slug"),
        title=reader.text("title"),
        starter=reader.text("starter"),
        solution=reader.text("solution"),
        teaching_files=reader.texts("teaching_files", minimum=1),
        given_files=reader.texts("given_files"),
        solution_only=reader.texts("solution_only"),
        focused_tests=reader.texts("focused_tests", minimum=1),
        test_support=reader.texts("test_support"),
        notebook=reader.text("notebook"),
        labs=labs,
        mutations=tuple(_mutation(r) for r in reader.tables("mutations")),
        parent=reader.optional_text("parent"),
        inherited_files=reader.texts("inherited_files"),
        contract=reader.optional_text("contract"),
        kind=kind,
        title_en=reader.text("title_en", default="", allow_empty=True),
        held_out=_held_out(reader),
        agent_notes=_agent_notes(reader, ""),
        agent_notes_en=_agent_notes(reader, "_en"),
    )
    stray = sorted(set(checkpoint.inherited_files) - set(checkpoint.given_files))
    if stray:
        raise reader._fail("inherited_files", f"names {', '.join(stray)}, which are not in given_files")
    for kind, names in (("lab id", [lab.id for lab in labs]), ("marker", [lab.marker for lab in labs])):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise reader._fail("labs", f"repeats the {kind} {', '.join(duplicates)}; each must be unique")
    return checkpoint


def _resolve_lineage(readers: list[_Reader], checkpoints: tuple[Checkpoint, ...]) -> tuple[Checkpoint, ...]:
    """Fill in each checkpoint's tree labs and tests from its parent chain (parents come first in the
    file)."""
    done: dict[str, Checkpoint] = {}
    for reader, checkpoint in zip(readers, checkpoints, strict=True):
        labs, tests, support = checkpoint.labs, checkpoint.focused_tests, checkpoint.test_support
        if checkpoint.parent is not None:
            parent = done.get(checkpoint.parent)
            if parent is None:
                known = ", ".join(done) or "none"
                raise reader._fail(
                    "parent",
                    f"is {checkpoint.parent!r}, which is not an earlier checkpoint (earlier: {known}); "
                    "list a parent before its children",
                )
            inherited = tuple(replace(lab, inherited=True) for lab in parent.tree_labs)
            labs = (*inherited, *labs)
            tests = tuple(dict.fromkeys((*parent.tree_tests, *tests)))
            support = tuple(dict.fromkeys((*parent.tree_support, *support)))
        for kind, names in (("lab id", [lab.id for lab in labs]), ("marker", [lab.marker for lab in labs])):
            repeated = sorted({name for name in names if names.count(name) > 1})
            if repeated:
                raise reader._fail("labs", f"repeats the {kind} {', '.join(repeated)} of its lineage")
        done[checkpoint.id] = replace(checkpoint, tree_labs=labs, tree_tests=tests, tree_support=support)
    return tuple(done.values())


def load(path: Path | None = None) -> Course:
    """Read and check the manifest (default: the course that `locate` finds)."""
    if path is None:
        from pi_course_kit.core.locate import course_manifest

        path = course_manifest()
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ManifestError(f"{path}: manifest not found; run from a kit checkout") from None
    except tomllib.TOMLDecodeError as error:
        raise ManifestError(f"{path}: not valid TOML ({error}); fix the syntax at that spot") from None
    root = _Reader(path, data, "")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise root._fail(
            "format_version", f"is {version!r}; this kit reads format_version = {FORMAT_VERSION}"
        )
    course_table = data.get("course")
    if not isinstance(course_table, dict):
        raise root._fail("course", "is missing; add a [course] table with title, package and language")
    info = _Reader(path, course_table, "course.")
    readers = root.tables("checkpoints")
    checkpoints = _resolve_lineage(readers, tuple(_checkpoint(r) for r in readers))
    if not checkpoints:
        raise root._fail("checkpoints", "is empty; add a [[checkpoints]] table")
    course = Course(
        path=path,
        format_version=version,
        title=info.text("title"),
        package=info.text("package"),
        language=info.text("language"),
        checkpoints=checkpoints,
        requires=info.texts("requires"),
        title_en=info.text("title_en", default="", allow_empty=True),
    )
    # The course's language is the default of every message from here on (kit and learner alike).
    i18n.set_course_language(course.language)
    return course
