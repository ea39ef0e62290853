"""Compile a batch's disguised test modules once, for every learner's run, instead of once per run.

Every learner of a batch is graded with the same disguised focused tests, staged at the same path
inside the sandbox (`bwrap.TREE`). So the grader (trusted) can compile them once: pytest's
assertion-rewritten code for the test modules, ordinary bytecode for the modules they import. The
files go into each staged copy's `__pycache__`, read-only to learner code like the rest of the copy.
Both kinds are checked-hash pycs, so Python and pytest use them only for the very source beside them.
"""

from __future__ import annotations

import py_compile
import sys
import tempfile
from pathlib import Path

from pi_course_kit.core import rewritten


def _pytest_pyc(name: str, source: bytes, where: str) -> tuple[str, bytes] | None:
    """pytest's own rewritten pyc of one test module, or None when this pytest stores them differently."""
    if not rewritten.available():
        return None
    try:
        code = rewritten.rewrite(source, where)
    except (SyntaxError, ValueError):
        return None  # the run reports the module's error itself
    return rewritten.pyc_name(name), rewritten.pyc_bytes(source, code)


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
