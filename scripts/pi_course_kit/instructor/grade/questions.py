"""Each pristine focused test's question: its docstring, read with `ast` (the kit never imports the tests)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import first_paragraph


@cache
def _docstrings(path: Path) -> dict[str, str]:
    """`name` or `Class::name` -> the question its docstring asks, for every test function in a file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    found: dict[str, str] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    found[prefix + node.name] = first_paragraph(doc)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}::")

    visit(tree.body, "")
    return found


def question(course: Course, checkpoint: Checkpoint, nodeid: str) -> str:
    """The question a test asks (its docstring's first paragraph), or "" when it has none."""
    file, _, name = nodeid.partition("::")
    name = name.split("[", 1)[0]  # a parametrised case asks its function's question
    for relative in checkpoint.tree_tests:
        if Path(relative).name == Path(file).name:
            return _docstrings((course.root / relative).resolve()).get(name, "")
    return ""
