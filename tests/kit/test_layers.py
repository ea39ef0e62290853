"""The engine's import graph: no cycle, and the layers hold (core below everything, the sandbox behind the
grader).

The graph is read with `ast` from every module of scripts/pi_course_kit, counting every import, also one
inside a function or under TYPE_CHECKING, and a module named by a string for importlib (the CLI's
command table): a cycle hidden by a late import is still a cycle.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pi_course_kit
import pytest

PACKAGE = Path(pi_course_kit.__file__).parent
NAME = "pi_course_kit"
#: The modules that run learner code; only the grader (and they themselves) may import them.
SANDBOX = {
    f"{NAME}.instructor.grade.{name}" for name in ("bwrap", "forkserver", "slots", "sandbox", "seccomp")
}
GRADER = f"{NAME}.instructor.grade.grader"
#: What core must never import: it is the layer every other one stands on.
ABOVE_CORE = ("learner", "instructor", "notebook", "teaching", "cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the kit by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The kit module an imported name is, or lives in (`a.b.c` -> `a.b` when c is an attribute)."""
    while name:
        if name in modules():
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the kit modules it imports (anywhere in its body)."""
    edges: dict[str, frozenset[str]] = {}
    for module, path in modules().items():
        found: set[str] = set()
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
                # A module named by a string (the CLI's command table, for importlib) is an import too.
                names = [f"{NAME}.{node.value}"] if f"{NAME}.{node.value}" in modules() else []
            for name in names:
                if name.startswith(NAME) and (target := _resolve(name)) and target != module:
                    found.add(target)
        edges[module] = frozenset(found)
    return edges


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, frozenset()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_the_graph_is_read_from_the_whole_engine() -> None:
    assert f"{NAME}.core.records" in graph()[f"{NAME}.instructor.grade.scoring"]
    assert f"{NAME}.learner.guide" in graph()[f"{NAME}.cli"]  # through the command table
    assert f"{NAME}.instructor.grade.bwrap" in graph()[GRADER]
    assert len(graph()) > 50


def test_the_engine_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_a_cycle_would_be_found_even_through_a_late_import() -> None:
    records, check = f"{NAME}.core.records", f"{NAME}.learner.check"
    assert records in graph()[check]
    edges = {**graph(), records: graph()[records] | {check}}
    assert any(records in cycle and check in cycle for cycle in cycles(edges))
    assert cycles(
        {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    ) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(m for m in modules() if m.startswith(f"{NAME}.core")))
def test_core_imports_nothing_above_it(module: str) -> None:
    above = [target for target in graph()[module] if target.split(".")[1] in ABOVE_CORE]
    assert above == [], f"{module} imports {above}"


def test_only_the_grader_imports_the_sandbox() -> None:
    importers = {module: sorted(graph()[module] & SANDBOX) for module in graph() if graph()[module] & SANDBOX}
    assert set(importers) <= {GRADER, *SANDBOX}, importers
