"""`pi-course reset LAB`: put a lab's stubs back in the teaching files, after backing up your version."""

from __future__ import annotations

import argparse
import ast
import datetime
import io
import tempfile
import tokenize
from collections.abc import Callable
from pathlib import Path

from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import describe_os_error, replace_file, write_text_atomically
from pi_course_kit.core.folder import BACKUP_DIR, KIT_DIR, META_DIR, PracticeFolder, open_folder, sha256_file
from pi_course_kit.core.i18n import _
from pi_course_kit.core.regions import find_stubs, functions, lab_import

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the lab (or --all)."""
    parser.add_argument("lab", nargs="?", metavar="LAB", help=_("lab id whose stubs to restore, e.g. 6.2"))
    parser.add_argument(
        "--all",
        action="store_true",
        help=_("restore every teaching file to the starter (even one that does not parse)"),
    )
    parser.add_argument(
        "--kit",
        action="store_true",
        help=_(
            "put back the kit's own files (tests/, pytest.ini, the guides) if deleted or changed; "
            "your code is not touched"
        ),
    )
    parser.add_argument(
        "--undo",
        action="store_true",
        help=_("put back the version the last reset saved (your current files are backed up first)"),
    )


def undo(folder: PracticeFolder, teaching_files: list[str]) -> int:
    """Restore the files of the newest backup, after backing up the current ones (so undo is undoable too)."""
    base = folder.root / META_DIR / BACKUP_DIR
    saved = (
        sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
        if base.is_dir()
        else []
    )
    saved = [p for p in saved if any((p / relative).is_file() for relative in teaching_files)]
    if not saved:
        raise KitError(
            _("there is no reset to undo: {folder} holds no backup").format(folder=f"{META_DIR}/{BACKUP_DIR}")
        )
    source = saved[-1]
    files = [relative for relative in teaching_files if (source / relative).is_file()]
    for relative in files:
        read_source(source / relative, relative)  # refuse a damaged backup before changing anything
    current = backup(folder, files, "before-undo")
    for relative in files:
        write_text_atomically(folder.root / relative, (source / relative).read_text(encoding="utf-8"))
    print(_("restored {files} from {backup}/").format(files=", ".join(files), backup=folder.relative(source)))
    print(_("the version you had just now is saved in {backup}/").format(backup=folder.relative(current)))
    return 0


def _header_ends(source: str) -> list[int]:
    """Line numbers where a logical line ends (the NEWLINE tokens)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.start[0] for token in tokens if token.type == tokenize.NEWLINE]


def _span(node: FunctionNode, ends: list[int], lines: list[str]) -> tuple[int, int, bool]:
    """(first, last, whole): the lines of a function's body; `whole` when it shares the def line."""
    header_end = next(line for line in ends if line >= node.lineno)
    last = node.end_lineno or node.lineno
    # Comments right after the last statement, indented into the body, belong to it.
    while last < len(lines):
        text = lines[last]
        indent = len(text) - len(text.lstrip())
        if not (text.lstrip().startswith("#") and indent > node.col_offset):
            break
        last += 1
    if node.body[0].lineno <= header_end:
        return node.lineno, last, True
    return header_end + 1, last, False


LAB_IMPORT = "from .lab import LabNotImplemented\n"  # a top-level module's; see regions.lab_import


def _imports_lab_error(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and any(alias.name == "LabNotImplemented" for alias in node.names)
        for node in tree.body
    )


def _after_imports(tree: ast.Module, lines: list[str], import_line: str = LAB_IMPORT) -> int:
    """Where the stubs' import goes (0-based): sorted among the local imports, else after the last import."""
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    for node in imports:
        if isinstance(node, ast.ImportFrom) and node.level and lines[node.lineno - 1] > import_line:
            return node.lineno - 1
    return (imports[-1].end_lineno or imports[-1].lineno) if imports else 0


def _reindent(lines: list[str], old: int, new: int) -> list[str]:
    if old == new:
        return lines
    return [
        " " * new + line[old:] if line[:old].strip() == "" and len(line) > old else line for line in lines
    ]


def restore_labs(learner: str, starter: str, labs: set[str], filename: str) -> tuple[str, list[str]]:
    """Replace the bodies of the given labs' functions in `learner` with the starter's; keep the rest."""
    try:
        learner_tree = ast.parse(learner, filename)
    except SyntaxError as error:
        raise KitError(
            _(
                "{file}:{line}: does not parse ({message}); fix that line, "
                "or restore the whole file with `pi-course reset --all` (your version is backed up)"
            ).format(file=filename, line=error.lineno, message=error.msg)
        ) from None
    stubs = [stub for stub in find_stubs(starter, filename) if stub.lab in labs]
    ours, theirs = functions(learner_tree), functions(ast.parse(starter, filename))
    missing = [stub.qualname for stub in stubs if stub.qualname not in ours]
    if missing:
        raise KitError(
            _("{file}: has no {names} any more; restore the whole file with `pi-course reset --all`").format(
                file=filename, names=", ".join(missing)
            )
        )
    learner_lines = learner.splitlines(keepends=True)
    starter_lines = starter.splitlines(keepends=True)
    learner_ends, starter_ends = _header_ends(learner), _header_ends(starter)
    edits = []
    for stub in stubs:
        mine, given = ours[stub.qualname], theirs[stub.qualname]
        first, last, whole = _span(mine, learner_ends, learner_lines)
        s_first, s_last, _whole = _span(given, starter_ends, starter_lines)
        if whole:  # a one-line def: take the starter's def line along with its body
            s_first = given.lineno
        body = _reindent(starter_lines[s_first - 1 : s_last], given.col_offset, mine.col_offset)
        edits.append((first, last, body))
    for first, last, body in sorted(edits, reverse=True):
        learner_lines[first - 1 : last] = body
    if stubs and not _imports_lab_error(learner_tree):
        import_line = lab_import(filename)
        at = _after_imports(learner_tree, learner_lines, import_line)
        # With no import of the package's own yet, the new one opens that group after a blank line.
        local = any(isinstance(node, ast.ImportFrom) and node.level for node in learner_tree.body)
        learner_lines.insert(at, ("\n" if at and not local else "") + import_line)
    result = "".join(learner_lines)
    ast.parse(result, filename)  # never write a file that the reset itself broke
    return result, [stub.qualname for stub in stubs]


def read_source(path: Path, relative: str) -> str:
    """A teaching file's text, or a KitError saying why it cannot be read and what to do."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise KitError(
            _(
                "{file} is not UTF-8 text, so its labs cannot be found; restore the whole file with "
                "`pi-course reset --all` (your version is backed up)"
            ).format(file=relative)
        ) from None


def backup(folder: PracticeFolder, files: list[str], label: str) -> Path:
    """Copy the learner's current files into a new timestamped folder under .pi-course/backups."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = folder.root / META_DIR / BACKUP_DIR
    target = base / f"{stamp}-{label}"
    counter = 1
    while target.exists():
        counter += 1
        target = base / f"{stamp}-{label}-{counter}"
    try:
        for relative in files:
            source = folder.root / relative
            if source.is_file():
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                (target / relative).write_bytes(source.read_bytes())
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a read-only folder, a file where the backups folder should be
        raise KitError(
            _("cannot back up your files before changing them: {reason}; nothing was changed").format(
                reason=describe_os_error(error)
            )
        ) from None
    return target


def starter_text(folder: PracticeFolder, relative: str, starter_tree: Path) -> str:
    """The starter version of a teaching file: the folder's pristine copy, else the kit's labs/."""
    for base in (folder.starter_dir, starter_tree):
        if (base / relative).is_file():
            return (base / relative).read_text(encoding="utf-8")
    raise KitError(
        _("no starter copy of {file} found; make a fresh folder with `pi-course practice`").format(
            file=relative
        )
    )


def pristine_kit_files(folder: PracticeFolder, names: list[str]) -> dict[str, bytes]:
    """The kit's files as shipped: the folder's own copy, else made again from the installed course."""
    kept = folder.root / META_DIR / KIT_DIR
    if kept.is_dir():
        return {name: (kept / name).read_bytes() for name in names if (kept / name).is_file()}
    # A folder made before the copy was kept: lay the checkpoint out again from the course the kit finds.
    from pi_course_kit.core.locate import course_manifest
    from pi_course_kit.learner.practice import fill_files

    course = manifest.load(course_manifest())
    with tempfile.TemporaryDirectory(prefix="pi-course-kit-files-") as tmp:
        fill_files(course, course.checkpoint(folder.checkpoint_id), Path(tmp))
        return {name: (Path(tmp) / name).read_bytes() for name in names if (Path(tmp) / name).is_file()}


def restore_kit(folder: PracticeFolder) -> list[str]:
    """Put back every kit file that is missing or changed (a changed one is backed up first)."""
    shipped = folder.meta.files
    wanted = []
    for name in folder.kit_files():
        path = folder.root / name
        if not path.is_file():
            wanted.append(name)
        elif not name.endswith(".ipynb") and sha256_file(path) != shipped.get(name):
            wanted.append(name)  # a notebook the learner ran keeps its outputs; only a lost one comes back
    if not wanted:
        return []
    sources = pristine_kit_files(folder, wanted)
    lost = [name for name in wanted if name not in sources]
    if lost:
        raise KitError(
            _("no pristine copy of {files} found; make a fresh folder with `pi-course practice`").format(
                files=", ".join(lost)
            )
        )
    changed = [name for name in wanted if (folder.root / name).is_file()]
    if changed:
        backup(folder, changed, "kit")
    for name in wanted:
        replace_file(folder.root / name, _bytes_writer(sources[name]))
    return wanted


def _bytes_writer(data: bytes) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        tmp.write_bytes(data)

    return write


def run(args: argparse.Namespace) -> int:
    """Back up, then restore the lab's stubs (or every teaching file with --all)."""
    if args.undo and (args.lab or args.all or args.kit):
        raise KitError(_("--undo takes no lab and no --all: it puts back what the last reset saved"))
    if not args.lab and not args.all and not args.undo and not args.kit:
        raise KitError(
            _(
                "name the lab to reset (e.g. `pi-course reset 6.2`), use --all for every teaching file, or "
                "--undo"
            )
        )
    folder = open_folder()
    if args.kit and not args.lab and not args.all:
        restored_kit = restore_kit(folder)
        if restored_kit:
            print(_("put back the kit's files: {files}").format(files=", ".join(restored_kit)))
        else:
            print(_("the kit's files are all in place; nothing to put back"))
        return 0
    course, checkpoint = folder.made_from()
    if args.undo:
        return undo(folder, list(checkpoint.teaching_files))
    if checkpoint.observation and args.lab:
        checkpoint.lab(args.lab)  # an unknown step is still refused
        # An observation step has no stubs: putting it back means putting back the files it observes.
        args.all = True
    starter_tree = course.root / checkpoint.starter
    files = list(checkpoint.teaching_files)
    new_text: dict[str, str] = {}
    restored: list[str] = []
    if args.all:
        new_text = {relative: starter_text(folder, relative, starter_tree) for relative in files}
        label = "all"
    else:
        lab = checkpoint.lab(args.lab)
        label = f"lab{lab.id}"
        for relative in files:
            path = folder.root / relative
            if not path.is_file():
                raise KitError(
                    _("{file} is missing; restore it with `pi-course reset --all`").format(file=relative)
                )
            text, names = restore_labs(
                read_source(path, relative),
                starter_text(folder, relative, starter_tree),
                {lab.id},
                relative,
            )
            if names:
                new_text[relative], restored = text, restored + names
        if not restored:
            raise KitError(
                _(
                    "Lab {lab} has no stubs in {files} (it asks for new code: {names}); "
                    "remove or edit those files yourself"
                ).format(lab=lab.id, files=", ".join(files), names=", ".join(lab.implements))
            )
    saved = backup(folder, list(new_text), label)
    for relative, text in new_text.items():
        write_text_atomically(folder.root / relative, text)
    restored_kit = restore_kit(folder) if args.all or args.kit else []
    print(
        _("your version is saved in {backup}/; `pi-course reset --undo` puts it back").format(
            backup=folder.relative(saved)
        )
    )
    if args.all:
        print(_("restored the starter version of {files}").format(files=", ".join(new_text)))
    if restored_kit:
        print(_("put back the kit's files: {files}").format(files=", ".join(restored_kit)))
    if not args.all:
        print(
            _("restored the Lab {lab} stubs: {names}; your other labs are untouched").format(
                lab=args.lab, names=", ".join(restored)
            )
        )
    print(
        _("next: pi-course check --lab {lab}").format(lab=args.lab)
        if args.lab
        else _("next: pi-course check")
    )
    return 0
