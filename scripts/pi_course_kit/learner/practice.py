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
from pi_course_kit.core import manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import current_umask, write_folder_atomically, write_json_atomically
from pi_course_kit.core.folder import (
    COURSE_SNAPSHOT,
    META_DIR,
    META_FILE,
    META_FORMAT,
    STARTER_DIR,
    hash_files,
    tracked_files,
)
from pi_course_kit.core.i18n import _
from pi_course_kit.core.locate import course_manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import Stub, find_stubs, functions
from pi_course_kit.core.staging import stage_tree
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
                f"{dest} is inside the kit's {name}/ folder, which the kit generates or keeps as the reference; "
                "choose a folder outside it, e.g. ~/pi-practice"
            )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KitError(f"{dest} already exists and is not empty; choose a new folder or empty this one first")
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
    """The Chinese lab guide of a practice folder, generated from the manifest and the starter."""
    stubs = starter_stubs(course, checkpoint)
    raises = raise_lines(course, checkpoint)
    counts = lab_test_counts(course, checkpoint)
    teaching = "、".join(_code(name) for name in checkpoint.teaching_files)
    lines = [
        f"# 练习指南 · 检查点 {checkpoint.id}",
        "",
        f"**{checkpoint.title}**",
        "",
        *(
            [
                f"测试要求的每一条消息和行为（一字不差），都写在 [{CONTRACT}]({CONTRACT}) 里；红灯时先去那里对照。",
                "",
            ]
            if contract
            else []
        ),
        f"这个文件夹是你自己的练习场，和课程仓库互不影响：这里的 `{course.package}` 是起始状态（starter），",
        f"需要你动手的只有 {teaching}，其余文件是已经给好的上一阶段代码。",
        f"在这个文件夹里运行 `python -m pytest` 时，只会导入本文件夹里的 `{course.package}`。",
        "",
        "## 怎么练",
        "",
        "1. 按顺序做下面的 lab；每个 lab 先跑一次它的测试，看到预期的红灯，再去改代码。",
        "2. 改完保存，重新运行同一条命令，直到这一行变绿，再进入下一个 lab。",
        "3. 最方便的是开一个终端运行 `pi-course check --watch`：每次保存都会自动重跑，并告诉你下一步改哪一行。",
        "",
        "| 想做什么 | 命令 |",
        "| --- | --- |",
        "| 看所有 lab 的进度 | `pi-course check` |",
        "| 保存即重跑 | `pi-course check --watch` |",
        f"| 只跑某个 lab | `pi-course check --lab {checkpoint.first_lab.id}` 或 `python -m pytest -m {checkpoint.first_lab.marker}` |",
        f"| 要一条提示（每次多给一条） | `pi-course hint {checkpoint.first_lab.id}` |",
        f"| 把某个 lab 恢复成起始状态（先自动备份） | `pi-course reset {checkpoint.first_lab.id}` |",
        "| 看自己改过哪些文件 | `pi-course status` |",
        "",
    ]
    if notebook:
        lines += [
            f"配套笔记本：`{notebook}`（用 `jupyter lab {notebook}` 打开），里面有本检查点的讲解和可以直接运行的例子。",
            "",
        ]
    for index, lab in enumerate(checkpoint.labs):
        lab_stubs = [(file, stub) for file, found in stubs.items() for stub in found if stub.lab == lab.id]
        heading = f"## Lab {lab.id} · {lab.title}" if not lab.optional else f"## 选做 · {lab.title}"
        lines += [heading, ""]
        if lab_stubs:
            lines.append(
                "要完成的桩（现在调用它们会抛出 `LabNotImplemented`，红灯里显示的就是下面每行开头的名字）："
            )
            lines.append("")
            for file, stub in lab_stubs:
                summary = f" —— {stub.doc}" if stub.doc else ""
                line = raises.get((file, stub.qualname), stub.line)
                # The red prints the target; the qualified name helps find it when the two differ.
                names = _code(stub.target) + (
                    f"（{_code(stub.qualname)}）" if stub.qualname != stub.target else ""
                )
                lines.append(f"- {names}，位于 `{file}:{line}`{summary}")
            lines.append("")
        else:
            names = "、".join(_code(name) for name in lab.implements)
            lines += [f"要新写的内容：{names}。起始状态里还没有它，需要你自己建文件。", ""]
        lines.append(
            f"- 测试：{counts.get(lab.id, 0)} 个测试函数（参数化后条数更多），pytest 标记 `{lab.marker}`"
        )
        lines.append(f"- 运行：`python -m pytest -m {lab.marker}`，或 `pi-course check --lab {lab.id}`")
        if lab_stubs:
            example = f"Lab {lab.id} not implemented: {lab_stubs[0][1].target}"
            lines.append(f"- 第一个红灯：形如 `{example}`（名字是上面列出的某个桩）")
        else:
            lines.append("- 第一个红灯：在你动手之前，这些测试会被跳过或显示 not started，不会算作通过")
        if index > 0 and not lab.optional:
            lines.append(
                "- 提醒：这个 lab 的测试会用到前面 lab 的代码；前面没做完时，这一行会显示 blocked，先回去把前面的做完"
            )
        if lab.optional:
            lines.append("- 这是选做题，不影响必做 lab 的完成状态")
        lines.append(f"- 卡住了：`pi-course hint {lab.id}`（共 {len(lab.hints)} 条，每次多显示一条）")
        lines.append("")
    lines += [
        "## 全部变绿之后",
        "",
        "运行 `pi-course check`，表格里每个必做 lab 都是 done，就完成了这个检查点。",
        "",
    ]
    return "\n".join(lines)


def observation_guide(course: Course, checkpoint: Checkpoint, notebook: str | None, contract: bool) -> str:
    """The Chinese guide of an observation folder: nothing to implement; predict, run, break, restore."""
    counts = lab_test_counts(course, checkpoint)
    teaching = "、".join(_code(name) for name in checkpoint.teaching_files)
    lines = [
        f"# 观察指南 · 检查点 {checkpoint.id}",
        "",
        f"**{checkpoint.title}**",
        "",
        f"这是一个**观察章节**：没有要你实现的函数。这个文件夹里的 `{course.package}` 就是本检查点的目标状态，",
        "`python -m pytest` 从一开始就是全绿。你要做的是：先预测，再运行，然后故意把它弄坏，看哪条测试抓住了它。",
        "",
        *([f"测试核对的每个名字和每条消息，都写在 [{CONTRACT}]({CONTRACT}) 里。", ""] if contract else []),
        "## 怎么练",
        "",
        *(
            [
                f"1. 打开笔记本 `{notebook}`（`jupyter lab {notebook}`）：每一格运行之前，先在纸上写下你的预测。"
            ]
            if notebook
            else ["1. 阅读下面列出的文件，先在纸上写下你对运行结果的预测。"]
        ),
        "2. 在终端运行 `python -m pytest`，确认全部通过。",
        f"3. 故意改坏 {teaching} 里的一处（笔记本最后一节列出了几种改法），先预测哪条测试会变红，",
        "   再运行 `pi-course check` 对照。",
        "4. 用 `pi-course reset --all` 把文件恢复原样（你的改动会先备份；`pi-course reset --undo` 可以取回）。",
        "",
        "| 想做什么 | 命令 |",
        "| --- | --- |",
        "| 运行全部测试，看每个观察步骤 | `pi-course check` |",
        f"| 只跑某个观察步骤 | `python -m pytest -m {checkpoint.first_lab.marker}` |",
        f"| 要一条提示（每次多给一条） | `pi-course hint {checkpoint.first_lab.id}` |",
        "| 把改坏的文件恢复原样（先自动备份） | `pi-course reset --all` |",
        "",
    ]
    for lab in checkpoint.labs:
        lines += [
            f"## 观察 {lab.id} · {lab.title}",
            "",
            f"- 看这些名字：{'、'.join(_code(name) for name in lab.implements)}",
            f"- 测试：{counts.get(lab.id, 0)} 个测试函数，pytest 标记 `{lab.marker}`",
            f"- 运行：`python -m pytest -m {lab.marker}`",
            f"- 提示：`pi-course hint {lab.id}`（共 {len(lab.hints)} 条，每次多显示一条）",
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
        "language": course.language,
        "kind": checkpoint.kind,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "teaching_files": list(checkpoint.teaching_files),
        "labs": [
            {"id": lab.id, "marker": lab.marker, "title": lab.title, "optional": lab.optional}
            for lab in checkpoint.labs
        ],
        "files": hash_files(root, shipped),
        "hints": {},
    }


def fill_files(course: Course, checkpoint: Checkpoint, root: Path) -> None:
    """Write every file of a practice folder into `root` (a fresh temporary folder), all but its meta.json."""
    starter = course.root / checkpoint.starter
    os.chmod(root, 0o777 & ~current_umask())  # the temporary folder starts private (0700)
    stage_tree(course, checkpoint, starter, root)
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
    pristine = root / META_DIR / STARTER_DIR
    pristine.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(course.path, root / META_DIR / COURSE_SNAPSHOT)
    for relative in checkpoint.teaching_files:
        (pristine / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(starter / relative, pristine / relative)


def fill(course: Course, checkpoint: Checkpoint, root: Path) -> None:
    """Write a whole practice folder into `root` (a fresh temporary folder): its files, then meta.json once."""
    fill_files(course, checkpoint, root)
    write_json_atomically(root / META_DIR / META_FILE, meta_record(course, checkpoint, root))


def create(course: Course, checkpoint: Checkpoint, dest: Path) -> Path:
    """Make a practice folder at `dest` atomically, after refusing unsafe destinations."""
    dest = check_destination(course, dest)
    return write_folder_atomically(dest, lambda tmp: fill(course, checkpoint, tmp))


def next_steps(course: Course, checkpoint: Checkpoint, dest: Path, kit_installed: bool) -> list[str]:
    """What to type after the folder is made."""
    first = checkpoint.labs[0]
    lines = [
        _("practice folder ready: {dest} (checkpoint {id}: {title})").format(
            dest=dest, id=checkpoint.id, title=checkpoint.title
        ),
    ]
    if checkpoint.observation:
        lines.append(observation_note())
    lines.append(_("next steps:"))
    if not kit_installed:
        lines.append(f"  bash {course.root}/scripts/bootstrap && . {course.root}/.venv/bin/activate")
    if checkpoint.observation:
        return lines + observation_steps(checkpoint, dest)
    lines += [
        f"  cd {dest}",
        f"  python -m pytest -m {first.marker} -x   # "
        + _("first red: {prefix} …").format(prefix=checkpoint.first_red_prefix),
        f"  edit {checkpoint.teaching_files[0]}          # "
        + _("{guide} lists every lab, in order").format(guide=GUIDE),
        "  pi-course watch                 # " + _("guided mode: one lab at a time, re-run on every save"),
        f"  pi-course hint {first.id}              # " + _("one more hint each time"),
    ]
    return lines


def observation_note() -> str:
    """What a practice folder of an observation checkpoint is for, in one line."""
    return _("this is an observation chapter: nothing to implement; run, predict, break")


def observation_steps(checkpoint: Checkpoint, dest: Path) -> list[str]:
    """The commands of an observation folder: everything is green from the start; predict, run, break, restore."""
    notebook = Path(checkpoint.notebook).name
    teaching = checkpoint.teaching_files[0]
    return [
        f"  cd {dest}",
        "  python -m pytest                 # "
        + _("green from the start: this folder holds the target itself"),
        f"  jupyter lab {notebook}   # " + _("predict what each cell shows before you run it"),
        f"  edit {teaching}   # "
        + _("break it on purpose, then `pi-course check` shows which test catches it"),
        "  pi-course reset --all            # " + _("put the file back as it was"),
        f"  pi-course hint {checkpoint.labs[0].id}                # " + _("one more hint each time"),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint, the destination folder, --from and --course."""
    parser.add_argument("checkpoint", help="checkpoint id or slug, e.g. 06")
    parser.add_argument("dir", type=Path, help="new (or empty) folder to create, e.g. ~/pi-practice")
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="FOLDER",
        help="start from your own finished practice folder of the parent checkpoint instead of the "
        "reference target (refused while its tests are not green; it is never changed)",
    )
    parser.add_argument(
        "--course",
        type=Path,
        metavar="DIR",
        help="the course to use (default: PI_COURSE_ROOT, a checkout above this folder, or the bundled one)",
    )


def run(args: argparse.Namespace) -> int:
    """Create the folder and print the next steps."""
    course = manifest.load(course_manifest(args.course))
    checkpoint = course.checkpoint(args.checkpoint)
    if args.source is not None:
        from pi_course_kit.learner.lineage import create_from, replaced_files

        dest = create_from(course, checkpoint, args.source, args.dir)
        replaced = replaced_files(dest)
        if replaced:
            print(
                _(
                    "this chapter changes {files}, so they come from the course, not from {source} "
                    "(your own versions stay there)"
                ).format(files=", ".join(replaced), source=args.source)
            )
    else:
        dest = create(course, checkpoint, args.dir)
    kit_installed = importlib.util.find_spec("pytest") is not None
    print("\n".join(next_steps(course, checkpoint, dest, kit_installed)))
    return 0
