"""Compile a batch's disguised test modules once, for every learner's run, instead of once per run.

Every learner of a batch is graded with the same disguised focused tests, staged at the same path
inside the sandbox (`bwrap.TREE`). So the grader (trusted) can compile them once: pytest's
assertion-rewritten code for the test modules, ordinary bytecode for the modules they import. The
files go into each staged copy's `__pycache__`, read-only to learner code like the rest of the copy.
Both kinds are checked-hash pycs, so Python and pytest use them only for the very source beside them.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import py_compile
import sys
import tempfile
from pathlib import Path


def _pytest_pyc(name: str, source: bytes, where: str) -> tuple[str, bytes] | None:
    """pytest's own rewritten pyc of one test module, or None when this pytest stores them differently."""
    try:
        from _pytest.assertion import rewrite

        tree = ast.parse(source, filename=where)
        rewrite.rewrite_asserts(tree, source, where, None)
        code = compile(tree, where, "exec", dont_inherit=True)
        buffer = io.BytesIO()
        rewrite._write_pyc_fp(buffer, importlib.util.source_hash(source), code)
        data = buffer.getvalue()
        # pytest's own reader is the judge: a format it does not accept is never shipped.
        with tempfile.TemporaryDirectory(prefix="pi-course-pyc-") as tmp:
            module, pyc = Path(tmp) / name, Path(tmp) / "module.pyc"
            module.write_bytes(source)
            pyc.write_bytes(data)
            if rewrite._read_pyc(module, pyc) is None:
                return None
        return name[: -len(".py")] + rewrite.PYC_TAIL, data
    except Exception:  # a private pytest API changed: the runs rewrite the modules themselves
        return None


def _plain_pyc(name: str, source: bytes, where: str) -> bytes:
    """Ordinary bytecode for the path `where`, checked against the source's hash on every import."""
    with tempfile.TemporaryDirectory(prefix="pi-course-pyc-") as tmp:
        module, pyc = Path(tmp) / name, Path(tmp) / "module.pyc"
        module.write_bytes(source)
        py_compile.compile(
            str(module),
            str(pyc),
            dfile=where,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
        return pyc.read_bytes()


def compiled(sources: dict[str, bytes], test_modules: set[str], folder: str) -> dict[str, bytes]:
    """`__pycache__/NAME` -> pyc bytes for the files of a tests folder seen at `folder` in the sandbox."""
    tag = f".{sys.implementation.cache_tag}.pyc"
    out: dict[str, bytes] = {}
    for name, source in sources.items():
        where = f"{folder}/{name}"
        if name in test_modules:
            found = _pytest_pyc(name, source, where)
            if found is not None:
                out[f"__pycache__/{found[0]}"] = found[1]
        elif name.endswith(".py") and name != "conftest.py":  # pytest rewrites conftest.py itself
            out[f"__pycache__/{name[: -len('.py')]}{tag}"] = _plain_pyc(name, source, where)
    return out
