"""The batch's reference proof: the tests a learner's run need not repeat, because they run no changed code.

The grader runs the solution once, trusted, with `proof_plugin` noting the units of the package each
test enters (a module-level function or a method, with everything written inside it). A learner's
package is compared with the solution's unit by unit:

- its *skeleton* must be the solution's: every file (and no other), every module- and class-level
  statement, every `def` line with its decorators, defaults and annotations, and every docstring; only
  the statements of a unit's body may differ. Module-level code runs at import for every test, and a
  docstring or a signature can be read without entering the function, so any difference there means
  no test is proven;
- a test is proven when it passed in the reference, entered none of the units whose bodies differ, read
  only package files that are byte for byte the solution's (itself or through the processes it
  started: a worker importing the package, a type checker), and did nothing the trace cannot follow
  (`opaque`: it forked this very interpreter, or had a child run one of its functions first).

The run of a proven test would execute exactly the code the reference run executed, and its processes
would read the same files, so it would end the same: it passed. What learner code could do to a parent
function (patch it at import, or change its body) is a change of the skeleton or of an entered unit, and
those tests run. Held-out tests always run. Line numbers are not compared: no focused test reads them
from the learner's code.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Folders of a package that hold derived files, never an input.
DERIVED = frozenset({"__pycache__"})


def _docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return [first]
    return []


def units(source: str, filename: str = "<unit>") -> tuple[str, dict[str, str]]:
    """A module's skeleton (its AST with every unit's body emptied, docstrings kept) and each unit's
    body, by qualified name; a name defined twice (a property's setter) has both bodies under it.

    Raises SyntaxError for a file that does not parse.
    """
    tree = ast.parse(source, filename=filename)
    bodies: dict[str, list[str]] = {}

    def walk(statements: list[ast.stmt], prefix: str) -> None:
        for node in statements:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                kept = _docstring(node.body)
                bodies.setdefault(name, []).append(ast.dump(ast.Module(node.body[len(kept) :], [])))
                node.body = [*kept, ast.Expr(ast.Constant(...))]
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")
            else:
                # `if TYPE_CHECKING:`, `try:` and the like: what they define keeps its plain name.
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        walk([n for n in inner if isinstance(n, ast.stmt)], prefix)
                        for part in inner:
                            if isinstance(part, ast.ExceptHandler | ast.match_case):
                                walk(part.body, prefix)

    walk(tree.body, "")
    return ast.dump(tree), {name: "\n".join(found) for name, found in bodies.items()}


@dataclass(frozen=True)
class PackageShape:
    """A package as the proof compares it: its files, each module's skeleton and unit bodies."""

    files: frozenset[str]
    #: Non-Python files by relative path, with their bytes.
    data: Mapping[str, bytes]
    skeletons: Mapping[str, str]
    bodies: Mapping[str, Mapping[str, str]]
    #: Every file's SHA-256, by relative path: what a test that reads a file depends on.
    digests: Mapping[str, str]

    @classmethod
    def read(cls, package: Path) -> PackageShape | None:
        """The shape of the package folder, or None when a module does not parse (nothing is proven)."""
        files, data, skeletons, bodies, digests = set(), {}, {}, {}, {}
        for path in sorted(package.rglob("*")):
            relative = path.relative_to(package.parent).as_posix()
            if not path.is_file() or DERIVED & set(path.relative_to(package).parts):
                continue
            files.add(relative)
            raw = path.read_bytes()  # read once: its digest, and its text as `read_text` would give it
            digests[relative] = hashlib.sha256(raw).hexdigest()
            if path.suffix != ".py":
                data[relative] = raw
                continue
            try:
                text = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8").read()
                skeletons[relative], bodies[relative] = units(text, relative)
            except (SyntaxError, ValueError, UnicodeDecodeError):
                return None
        return cls(frozenset(files), data, skeletons, bodies, digests)


@dataclass(frozen=True)
class Trace:
    """What one test of the reference run entered (`proof_plugin`'s line)."""

    nodeid: str
    units: frozenset[str]
    #: The package files it opened, or a process it started did (relative paths, as `PackageShape`'s).
    files: frozenset[str]
    opaque: bool


def read_traces(lines: Iterable[str]) -> dict[str, Trace]:
    """The reference run's lines, by node id (a line that is not one is skipped)."""
    found: dict[str, Trace] = {}
    for line in lines:
        try:
            data = json.loads(line)
            trace = Trace(
                str(data["nodeid"]),
                frozenset(map(str, data["units"])),
                frozenset(map(str, data["files"])),
                bool(data["opaque"]),
            )
        except (ValueError, KeyError, TypeError):
            continue
        found[trace.nodeid] = trace
    return found


@dataclass(frozen=True)
class Proof:
    """The solution's package shape and the traces of the tests that passed on it."""

    shape: PackageShape
    traces: Mapping[str, Trace]

    def proven(self, learner: Path, candidates: Iterable[str]) -> frozenset[str]:
        """The node ids among `candidates` whose run on the learner's package would repeat the reference's."""
        theirs = PackageShape.read(learner)
        ours = self.shape
        if theirs is None or theirs.files != ours.files or theirs.data != ours.data:
            return frozenset()
        if theirs.skeletons != ours.skeletons:
            return frozenset()
        changed = {
            f"{module}::{name}"
            for module, bodies in ours.bodies.items()
            for name in bodies.keys() | theirs.bodies[module].keys()
            if bodies.get(name) != theirs.bodies[module].get(name)
        }

        def same(relative: str) -> bool:
            return relative in ours.digests and theirs.digests.get(relative) == ours.digests[relative]

        return frozenset(
            node
            for node in candidates
            if (trace := self.traces.get(node)) is not None
            and not trace.opaque
            and not trace.units & changed
            and all(map(same, trace.files))
        )
