"""Practice folders: an isolated copy of a checkpoint's starter, its tests, a lab guide and metadata.

Standard library only: `python3 scripts/practice 06 DIR` works before the kit is installed.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.util
import os
import shutil
from pathlib import Path

from pi_course_kit import __version__
from pi_course_kit.core import manifest, records
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import current_umask, write_folder_atomically
from pi_course_kit.core.folder import (
    COURSE_SNAPSHOT,
    META_DIR,
    META_FORMAT,
    STARTER_DIR,
    hash_files,
    keep_kit_copy,
    tracked_files,
    write_new_meta,
)
from pi_course_kit.core.i18n import _, speaks_english
from pi_course_kit.core.locate import course_manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import Stub, find_stubs, functions
from pi_course_kit.core.staging import hash_checked_bytecode, stage_tree
from pi_course_kit.learner.agent_guide import write_agent_guide
from pi_course_kit.notebook.learner_copy import write_learner_copy

GUIDE = "LAB-GUIDE.md"
CONTRACT = "CONTRACT.md"
PROTECTED = ("labs", "solutions")


def count_tests(source: str, markers: set[str], filename: str = "<tests>") -> dict[str, int]:
    """Count test functions per lab marker (decorators, class marks and module `pytestmark`)."""

    def marks(decorators: list[ast.expr]) -> set[str]:
        names = set()
        for decorator in decorators:
            node = decorator.func if isinstance(decorator, ast.Call) else decorator
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and sub.attr in markers:
                    names.add(sub.attr)
        return names

    tree = ast.parse(source, filename)
    counts = dict.fromkeys(sorted(markers), 0)
    module_marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            module_marks |= marks(values)

    def visit(body: list[ast.stmt], inherited: set[str]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                visit(node.body, inherited | marks(node.decorator_list))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                for marker in inherited | marks(node.decorator_list):
                    counts[marker] += 1

    visit(tree.body, module_marks)
    return counts


def lab_test_counts(course: Course, checkpoint: Checkpoint) -> dict[str, int]:
    """Focused test functions per lab id, summed over the checkpoint's focused test files."""
    by_marker = {lab.marker: lab.id for lab in checkpoint.labs}
    totals = dict.fromkeys((lab.id for lab in checkpoint.labs), 0)
    for relative in checkpoint.focused_tests:
        path = course.root / relative
        for marker, count in count_tests(path.read_text(encoding="utf-8"), set(by_marker), str(path)).items():
            totals[by_marker[marker]] += count
    return totals


def starter_stubs(course: Course, checkpoint: Checkpoint) -> dict[str, list[Stub]]:
    """The starter's stubs per teaching file (relative path -> stubs)."""
    found = {}
    for relative in checkpoint.teaching_files:
        path = course.root / checkpoint.starter / relative
        if path.is_file():
            found[relative] = find_stubs(path.read_text(encoding="utf-8"), str(path))
    return found


def raise_lines(course: Course, checkpoint: Checkpoint) -> dict[tuple[str, str], int]:
    """The line of each stub's `raise` statement, by (teaching file, qualified name).

    The red's `edit:` line points at the raise, not at the `def`, so the guide names that line too.
    """
    lines = {}
    for relative in checkpoint.teaching_files:
        path = course.root / checkpoint.starter / relative
        if not path.is_file():
            continue
        source = path.read_text(encoding="utf-8")
        for qualname, node in functions(ast.parse(source, str(path))).items():
            for child in node.body:
                if isinstance(child, ast.Raise) and "LabNotImplemented" in ast.unparse(child):
                    lines[(relative, qualname)] = child.lineno
                    break
    return lines


def check_destination(course: Course, dest: Path) -> Path:
    """Refuse a destination inside labs/ or solutions/, or one that exists and is not empty."""
    dest = dest.expanduser().resolve()
    for name in PROTECTED:
        protected = (course.root / name).resolve()
        if dest == protected or protected in dest.parents:
            raise KitError(
                _(
                    "{dest} is inside the kit's {name}/ folder, which the kit generates or keeps as the "
                    "reference; choose a folder outside it, e.g. ~/pi-practice"
                ).format(dest=dest, name=name)
            )
    if dest.exists() and not dest.is_dir():
        raise KitError(
            _("{dest} is a file, not a folder; name a new folder for the practice tree").format(dest=dest)
        )
    if dest.exists() and any(dest.iterdir()):
        raise KitError(
            _("{dest} already exists and is not empty; choose a new folder or empty this one first").format(
                dest=dest
            )
        )
    return dest


def notebook_path(course: Course, checkpoint: Checkpoint) -> Path | None:
    """The checkpoint's notebook in the kit, if it has been written yet."""
    path = course.root / checkpoint.notebook
    return path if path.is_file() else None


def contract_path(course: Course, checkpoint: Checkpoint) -> Path | None:
    """The checkpoint's contract page in the kit, if the manifest names one and it exists."""
    if checkpoint.contract is None:
        return None
    path = course.root / checkpoint.contract
    return path if path.is_file() else None


def _code(text: str) -> str:
    return f"`{text}`"


def lab_guide(course: Course, checkpoint: Checkpoint, notebook: str | None, contract: bool = False) -> str:
    """The lab guide of a practice folder, in the run's language, generated from the manifest and the
    starter."""
    stubs = starter_stubs(course, checkpoint)
    raises = raise_lines(course, checkpoint)
    counts = lab_test_counts(course, checkpoint)
    sep = _(", ")
    teaching = sep.join(_code(name) for name in checkpoint.teaching_files)
    first = checkpoint.first_lab
    lines = [
        _("# Lab guide · checkpoint {id}").format(id=checkpoint.id),
        "",
        f"**{checkpoint.shown_title}**",
        "",
        *(
            [
                _(
                    "Every message and behaviour the tests ask for (to the letter) is in "
                    "[{contract}]({contract}); when a test is red, compare with it first."
                ).format(contract=CONTRACT),
                "",
            ]
            if contract
            else []
        ),
        _(
            "This folder is your own practice ground, separate from the course repository: the `{package}` "
            "here is the starting state (the starter),"
        ).format(package=course.package),
        _(
            "and only {files} need your work; the other files are the earlier stage's code, already given."
        ).format(files=teaching),
        _("Running `python -m pytest` in this folder imports only this folder's `{package}`.").format(
            package=course.package
        ),
        "",
        _("## How to practise"),
        "",
        _(
            "1. Do the labs below in order; run each lab's tests once, see the expected red, then change "
            "the code."
        ),
        _("2. Save, run the same command again until that row turns green, then go on to the next lab."),
        _(
            "3. Easiest: keep a terminal running `pi-course check --watch`: every save re-runs the tests and "
            "tells you which line to change next."
        ),
        "",
        _("| What you want | Command |"),
        "| --- | --- |",
        _("| See every lab's progress | `pi-course check` |"),
        _("| Re-run on every save | `pi-course check --watch` |"),
        _("| Run one lab only | `pi-course check --lab {lab}` or `python -m pytest -m {marker}` |").format(
            lab=first.id, marker=first.marker
        ),
        _("| Get a hint (one more each time) | `pi-course hint {lab}` |").format(lab=first.id),
        _("| Put a lab back to the starter (backed up first) | `pi-course reset {lab}` |").format(
            lab=first.id
        ),
        _("| See which files you changed | `pi-course status` |"),
        "",
    ]
    if notebook:
        lines += [
            _(
                "Companion notebook: `{notebook}` (open it with `jupyter lab {notebook}`): it explains this "
                "checkpoint, with examples you can run."
            ).format(notebook=notebook),
            "",
        ]
    for index, lab in enumerate(checkpoint.labs):
        lab_stubs = [(file, stub) for file, found in stubs.items() for stub in found if stub.lab == lab.id]
        title = lab.shown_title
        heading = (
            _("## Lab {lab} · {title}").format(lab=lab.id, title=title)
            if not lab.optional
            else _("## Optional · {title}").format(title=title)
        )
        lines += [heading, ""]
        if lab_stubs:
            lines.append(
                _(
                    "Stubs to complete (calling them now raises `LabNotImplemented`; a red shows the name "
                    "that starts each line below):"
                )
            )
            lines.append("")
            for file, stub in lab_stubs:
                # The stub's docstring is code (English): it joins the line only where the run speaks English.
                summary = _(" — {doc}").format(doc=stub.doc) if stub.doc and speaks_english() else ""
                line = raises.get((file, stub.qualname), stub.line)
                # The red prints the target; the qualified name helps find it when the two differ.
                names = _code(stub.target) + (
                    _(" ({name})").format(name=_code(stub.qualname)) if stub.qualname != stub.target else ""
                )
                lines.append(
                    _("- {names}, at `{where}`{summary}").format(
                        names=names, where=f"{file}:{line}", summary=summary
                    )
                )
            lines.append("")
        else:
            names = sep.join(_code(name) for name in lab.implements)
            lines += [
                _(
                    "New code to write: {names}. The starter does not have it yet: create the file yourself."
                ).format(names=names),
                "",
            ]
        lines.append(
            _(
                "- Tests: {count} test functions (more cases once parametrised), pytest marker `{marker}`"
            ).format(count=counts.get(lab.id, 0), marker=lab.marker)
        )
        lines.append(
            _("- Run: `python -m pytest -m {marker}`, or `pi-course check --lab {lab}`").format(
                marker=lab.marker, lab=lab.id
            )
        )
        if lab_stubs:
            example = f"Lab {lab.id} not implemented: {lab_stubs[0][1].target}"
            lines.append(
                _("- First red: like `{example}` (the name is one of the stubs above)").format(
                    example=example
                )
            )
        else:
            lines.append(
                _(
                    "- First red: before you start, these tests are skipped or shown as not started; "
                    "they never count as passed"
                )
            )
        if index > 0 and not lab.optional:
            lines.append(
                _(
                    "- Note: this lab's tests use the code of the labs before it; while those are unfinished "
                    "this row shows blocked: finish them first"
                )
            )
        if lab.optional:
            lines.append(
                _("- This is an optional exercise: it does not change whether the required labs are done")
            )
        lines.append(
            _("- Stuck: `pi-course hint {lab}` ({count} hints, one more each time)").format(
                lab=lab.id, count=len(lab.shown_hints)
            )
        )
        lines.append("")
    lines += [
        _("## Once everything is green"),
        "",
        _(
            "Run `pi-course check`: when every required lab in the table is done, this checkpoint is "
            "finished."
        ),
        "",
    ]
    return "\n".join(lines)


def observation_guide(course: Course, checkpoint: Checkpoint, notebook: str | None, contract: bool) -> str:
    """The guide of an observation folder, in the run's language: nothing to implement; predict, run,
    break."""
    counts = lab_test_counts(course, checkpoint)
    sep = _(", ")
    teaching = sep.join(_code(name) for name in checkpoint.teaching_files)
    lines = [
        _("# Observation guide · checkpoint {id}").format(id=checkpoint.id),
        "",
        f"**{checkpoint.shown_title}**",
        "",
        _(
            "This is an **observation chapter**: there is no function for you to implement. The `{package}` "
            "in this folder is this checkpoint's target state,"
        ).format(package=course.package),
        _(
            "so `python -m pytest` is all green from the start. Your part: predict first, then run, then "
            "break it on purpose and see which test catches it."
        ),
        "",
        *(
            [
                _("Every name and message the tests check is in [{contract}]({contract}).").format(
                    contract=CONTRACT
                ),
                "",
            ]
            if contract
            else []
        ),
        _("## How to practise"),
        "",
        *(
            [
                _(
                    "1. Open the notebook `{notebook}` (`jupyter lab {notebook}`): before running each cell, "
                    "write your prediction on paper."
                ).format(notebook=notebook)
            ]
            if notebook
            else [_("1. Read the files listed below and write on paper what you predict a run will show.")]
        ),
        _("2. Run `python -m pytest` in a terminal and check that everything passes."),
        _(
            "3. Break one spot in {files} on purpose (the notebook's last section lists a few ways), predict "
            "which test turns red,"
        ).format(files=teaching),
        _("   then run `pi-course check` to compare."),
        _(
            "4. Put the files back with `pi-course reset --all` (your changes are backed up first; "
            "`pi-course reset --undo` brings them back)."
        ),
        "",
        _("| What you want | Command |"),
        "| --- | --- |",
        _("| Run every test and see each observation step | `pi-course check` |"),
        _("| Run one observation step only | `python -m pytest -m {marker}` |").format(
            marker=checkpoint.first_lab.marker
        ),
        _("| Get a hint (one more each time) | `pi-course hint {lab}` |").format(lab=checkpoint.first_lab.id),
        _("| Put the broken files back (backed up first) | `pi-course reset --all` |"),
        "",
    ]
    for lab in checkpoint.labs:
        lines += [
            _("## Observation {lab} · {title}").format(lab=lab.id, title=lab.shown_title),
            "",
            _("- Look at these names: {names}").format(
                names=sep.join(_code(name) for name in lab.implements)
            ),
            _("- Tests: {count} test functions, pytest marker `{marker}`").format(
                count=counts.get(lab.id, 0), marker=lab.marker
            ),
            _("- Run: `python -m pytest -m {marker}`").format(marker=lab.marker),
            _("- Hint: `pi-course hint {lab}` ({count} hints, one more each time)").format(
                lab=lab.id, count=len(lab.shown_hints)
            ),
            "",
        ]
    return "\n".join(lines)


def meta_record(course: Course, checkpoint: Checkpoint, root: Path) -> dict[str, object]:
    """The metadata of a freshly filled folder: what was shipped and from where."""
    shipped = [name for name in tracked_files(root) if not name.startswith(f"{META_DIR}/")]
    return {
        "format": META_FORMAT,
        "checkpoint": checkpoint.id,
        "slug": checkpoint.slug,
        "kit_version": __version__,
        "kit_root": str(course.root),
        "kind": checkpoint.kind,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "teaching_files": list(checkpoint.teaching_files),
        "files": hash_files(root, shipped),
        "hints": {},
    }


def fill_files(course: Course, checkpoint: Checkpoint, root: Path) -> None:
    """Write every file of a practice folder into `root` (a fresh temporary folder), all but its meta.json."""
    starter = course.root / checkpoint.starter
    os.chmod(root, 0o777 & ~current_umask())  # the temporary folder starts private (0700)
    stage_tree(course, checkpoint, starter, root)
    hash_checked_bytecode(root / course.package)
    notebook = notebook_path(course, checkpoint)
    if notebook is not None:
        write_learner_copy(notebook, root / notebook.name)
    contract = contract_path(course, checkpoint)
    if contract is not None:
        shutil.copyfile(contract, root / CONTRACT)
    guide = observation_guide if checkpoint.observation else lab_guide
    (root / GUIDE).write_text(
        guide(course, checkpoint, notebook.name if notebook else None, contract is not None),
        encoding="utf-8",
    )
    write_agent_guide(course, checkpoint, root, notebook.name if notebook else None)
    pristine = root / META_DIR / STARTER_DIR
    pristine.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(course.path, root / META_DIR / COURSE_SNAPSHOT)
    for relative in checkpoint.teaching_files:
        (pristine / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(starter / relative, pristine / relative)
    keep_kit_copy(root, course.package)  # what `pi-course reset --kit` puts back


def fill(course: Course, checkpoint: Checkpoint, root: Path) -> None:
    """Write a whole practice folder into `root` (a fresh temporary folder): its files, then meta.json
    once."""
    fill_files(course, checkpoint, root)
    write_new_meta(root, meta_record(course, checkpoint, root))


def create(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """Make a practice folder at `dest` atomically, after refusing unsafe destinations."""
    dest = check_destination(course, dest)
    return write_folder_atomically(dest, lambda tmp: fill(course, checkpoint, tmp))


def next_steps(course: Course, checkpoint: Checkpoint, dest: Path, kit_installed: bool) -> list[str]:
    """What to type after the folder is made."""
    first = checkpoint.labs[0]
    lines = [
        _("practice folder ready: {dest} (checkpoint {id}: {title})").format(
            dest=dest, id=checkpoint.id, title=checkpoint.shown_title
        ),
    ]
    if checkpoint.observation:
        lines.append(observation_note())
    lines.append(_("next steps:"))
    if not kit_installed:
        lines.append(f"  bash {course.root}/scripts/bootstrap && . {course.root}/.venv/bin/activate")
    if checkpoint.observation:
        return lines + observation_steps(checkpoint, dest)
    return [
        *lines,
        f"  cd {dest}",
        *commented(
            [
                (
                    f"python -m pytest -m {first.marker} -x",
                    _("first red: {prefix} …").format(prefix=checkpoint.first_red_prefix),
                ),
                (
                    f"edit {checkpoint.teaching_files[0]}",
                    _("{guide} lists every lab, in order").format(guide=GUIDE),
                ),
                ("pi-course watch", _("guided mode: one lab at a time, re-run on every save")),
                (f"pi-course hint {first.id}", _("one more hint each time")),
            ]
        ),
    ]


def commented(rows: list[tuple[str, str]]) -> list[str]:
    """Indented commands with their `# comment`s starting in one column, whatever the commands' lengths."""
    width = max(records.display_width(command) for command, _comment in rows) + 3
    return [f"  {records.pad(command, width)}# {comment}" for command, comment in rows]


def observation_note() -> str:
    """What a practice folder of an observation checkpoint is for, in one line."""
    return _("this is an observation chapter: nothing to implement; run, predict, break")


def observation_steps(checkpoint: Checkpoint, dest: Path) -> list[str]:
    """The commands of an observation folder: everything is green from the start; predict, run, break,
    restore."""
    notebook = Path(checkpoint.notebook).name
    teaching = checkpoint.teaching_files[0]
    return [
        f"  cd {dest}",
        *commented(
            [
                ("python -m pytest", _("green from the start: this folder holds the target itself")),
                (f"jupyter lab {notebook}", _("predict what each cell shows before you run it")),
                (
                    f"edit {teaching}",
                    _("break it on purpose, then `pi-course check` shows which test catches it"),
                ),
                ("pi-course reset --all", _("put the file back as it was")),
                (f"pi-course hint {checkpoint.labs[0].id}", _("one more hint each time")),
            ]
        ),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint, the destination folder, --from and --course."""
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help=_("checkpoint id or slug, e.g. 06"))
    parser.add_argument(
        "dir", type=Path, metavar="DIR", help=_("new (or empty) folder to create, e.g. ~/pi-practice")
    )
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="FOLDER",
        help=_(
            "start from your own finished practice folder of the parent checkpoint instead of the "
            "reference target (refused while its tests are not green; it is never changed)"
        ),
    )
    parser.add_argument(
        "--course",
        type=Path,
        metavar="DIR",
        help=_(
            "the course to use (default: PI_COURSE_ROOT, a checkout above this folder, or the bundled one)"
        ),
    )


def run(args: argparse.Namespace) -> int:
    """Create the folder from the starter and print the next steps (`--from` is `lineage.run`'s)."""
    course = manifest.load(course_manifest(args.course))
    checkpoint = course.checkpoint(args.checkpoint)
    dest = create(course, checkpoint, args.dir)
    print_next_steps(course, checkpoint, dest)
    return 0


def print_next_steps(course: Course, checkpoint: Checkpoint, dest: Path) -> None:
    """Print what to type once the folder is made."""
    kit_installed = importlib.util.find_spec("pytest") is not None
    print("\n".join(next_steps(course, checkpoint, dest, kit_installed)))
