"""Lab regions: `# BEGIN LAB` bodies in a solution, the stubs they become, and which lab owns a line."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from dataclasses import dataclass

# The owner map (which lab's `# ## Lab X` section holds a line) is records': it travels into every staged
# tree with that file. Exported here with the regions it belongs to.
from pi_course_kit.core.records import LAB_SECTION as LAB_SECTION
from pi_course_kit.core.records import first_paragraph
from pi_course_kit.core.records import lab_at as lab_at
from pi_course_kit.core.records import lab_of_line as lab_of_line

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN LAB (?P<lab>\S+)(?: (?P<target>\S+))?\s*$")
END = re.compile(r"^[ \t]*# END LAB (?P<lab>\S+)\s*$")
IMPORT = "from .lab import LabNotImplemented\n"


def lab_import(relative: str) -> str:
    """The import of LabNotImplemented for a package file at `relative` (`pi_course/a/b.py`: `from ..lab`).

    The error lives in the package's top-level `lab.py`; a file in a subpackage reaches it with more dots.
    """
    depth = max(len(relative.replace("\\", "/").strip("/").split("/")) - 1, 1)
    return f"from {'.' * depth}lab import LabNotImplemented\n"


class LabMarkerError(ValueError):
    """A lab region is malformed; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Region:
    """One marked lab body: lines [begin, end] (1-based, inclusive) of the solution file."""

    lab: str
    target: str
    begin: int
    end: int
    indent: str


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of a module by qualified name (`Class.method`), outer before inner."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.setdefault(f"{prefix}{child.name}", child)
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def _enclosing_names(tree: ast.Module) -> dict[int, str]:
    """Map each line inside a function to its qualified name; an inner function wins over its outer one."""
    names: dict[int, str] = {}
    for qualname, node in functions(tree).items():
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            names[line] = qualname
    return names


def find_regions(source: str, filename: str = "<solution>") -> list[Region]:
    """Find the marked lab regions of a solution file, checking that they pair up."""
    names = _enclosing_names(ast.parse(source, filename))
    regions: list[Region] = []
    open_at: tuple[int, str, str, str] | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        if begin := BEGIN.match(line):
            if open_at is not None:
                raise LabMarkerError(
                    f"{filename}:{number}: BEGIN LAB inside the region opened at line {open_at[0]}; close "
                    f"it first with '# END LAB {open_at[1]}'"
                )
            target = begin["target"] or names.get(number, "")
            if not target:
                raise LabMarkerError(
                    f"{filename}:{number}: lab region outside a function; name its target: '# BEGIN LAB "
                    f"{begin['lab']} <name>'"
                )
            target = target.removesuffix(".__init__")
            open_at = (number, begin["lab"], target, begin["indent"])
        elif end := END.match(line):
            if open_at is None or end["lab"] != open_at[1]:
                raise LabMarkerError(
                    f"{filename}:{number}: '# END LAB {end['lab']}' without a matching '# BEGIN LAB "
                    f"{end['lab']}'"
                )
            regions.append(Region(open_at[1], open_at[2], open_at[0], number, open_at[3]))
            open_at = None
    if open_at is not None:
        raise LabMarkerError(
            f"{filename}:{open_at[0]}: '# BEGIN LAB {open_at[1]}' is never closed; add '# END LAB "
            f"{open_at[1]}'"
        )
    return regions


def strip_solution(
    source: str, filename: str = "<solution>", labs: Collection[str] | None = None, import_line: str = IMPORT
) -> str:
    """Replace every marked lab body (or those of `labs` only) with `raise LabNotImplemented(lab, target)`.

    `import_line` imports the error where the file does not yet (see `lab_import` for a subpackage's file).
    """
    regions = [r for r in find_regions(source, filename) if labs is None or r.lab in labs]
    lines = source.splitlines(keepends=True)
    for region in reversed(regions):
        stub = f'{region.indent}raise LabNotImplemented("{region.lab}", "{region.target}")\n'
        lines[region.begin - 1 : region.end] = [stub]
    starter = "".join(lines)
    if regions and import_line not in source:
        starter = _add_import(starter, import_line)
    return starter


def _add_import(source: str, import_line: str = IMPORT) -> str:
    """Import LabNotImplemented among the package's own imports, in sorted place (or after the docstring)."""
    lines = source.splitlines(keepends=True)
    body = ast.parse(source).body
    # The package's own imports as statements, so a parenthesised one spanning lines stays whole.
    local = [node for node in body if isinstance(node, ast.ImportFrom) and node.level == 1]
    if local:
        after = [node for node in local if lines[node.lineno - 1] > import_line]
        lines.insert(
            after[0].lineno - 1 if after else (local[-1].end_lineno or local[-1].lineno), import_line
        )
        return "".join(lines)
    imports = [node for node in body if isinstance(node, ast.Import | ast.ImportFrom)]
    docstring = body[:1] if body and isinstance(body[0], ast.Expr) else []
    anchor = imports or docstring
    at = (anchor[-1].end_lineno or 0) if anchor else 0
    # A blank line first: after the docstring, or between the other imports and the package's own.
    lines.insert(at, ("\n" if anchor else "") + import_line)
    return "".join(lines)


@dataclass(frozen=True)
class Stub:
    """A function or method of the starter that raises its lab's `LabNotImplemented`."""

    lab: str
    target: str
    qualname: str
    line: int
    doc: str


def _raised_lab(node: ast.AST) -> tuple[str, str] | None:
    """`("6.1", "object_schema")` for a `raise LabNotImplemented("6.1", "object_schema")` node."""
    if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
        return None
    func = node.exc.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    args = node.exc.args
    if name != "LabNotImplemented" or not args or not isinstance(args[0], ast.Constant):
        return None
    target = args[1].value if len(args) > 1 and isinstance(args[1], ast.Constant) else ""
    return str(args[0].value), str(target)


def find_stubs(source: str, filename: str = "<starter>") -> list[Stub]:
    """The lab stubs of a starter file, in source order."""
    stubs = []
    for qualname, node in functions(ast.parse(source, filename)).items():
        raised = next((found for child in node.body if (found := _raised_lab(child))), None)
        if raised:
            summary = first_paragraph(ast.get_docstring(node) or "")
            stubs.append(Stub(raised[0], raised[1], qualname, node.lineno, summary))
    return sorted(stubs, key=lambda stub: stub.line)
