"""pytest's assertion-rewritten test modules, made once per source and written beside every staged copy.

Each staged run (verify, a mutation, a notebook's progress table) copies the same test modules into a
new folder, and pytest rewrites every assert of each again before the first test runs: about 2 s of
CPU per run of a late checkpoint, whose tree holds twenty test modules. The rewritten code depends on
the source alone (its file name aside), so it is kept in the kit's cache under the source's hash and
written, under the copy's own file name, into the copy's `__pycache__`, where pytest looks for it.
pytest's pycs are checked-hash pycs (PEP 552): pytest takes one only for the very source beside it.

Why by hand: pytest caches a rewritten module only beside its source, so a new folder starts cold.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import io
import marshal
import sys
import tempfile
import types
from collections.abc import Iterable
from pathlib import Path

from pi_course_kit.core.files import replace_file
from pi_course_kit.core.locate import kit_cache

#: A stand-in file name for the cached code; every copy gets its own (`_renamed`).
PLACEHOLDER = "<pi-course-test-module>"


def rewrite(source: bytes, where: str) -> types.CodeType:
    """pytest's own rewriting of a test module's asserts, compiled as the file `where`."""
    from _pytest.assertion import rewrite as pytest_rewrite

    tree = ast.parse(source, filename=where)
    # No config: the trees' pytest.ini never enables the assertion-pass hook, the one setting it reads.
    pytest_rewrite.rewrite_asserts(tree, source, where, None)
    return compile(tree, where, "exec", dont_inherit=True)


def pyc_bytes(source: bytes, code: types.CodeType) -> bytes:
    """The pyc pytest writes for `code` rewritten from `source` (ask `available()` first)."""
    from _pytest.assertion import rewrite as pytest_rewrite

    buffer = io.BytesIO()
    pytest_rewrite._write_pyc_fp(buffer, importlib.util.source_hash(source), code)
    return buffer.getvalue()


@functools.cache
def available() -> bool:
    """pytest's own reader is the judge: a pyc format it does not take back is never written.

    Checked once per process on a probe module; a private pytest API that changed turns the cache off,
    and the runs rewrite their modules themselves.
    """
    source = b"assert True\n"
    try:
        from _pytest.assertion import rewrite as pytest_rewrite

        data = pyc_bytes(source, rewrite(source, "probe.py"))
        with tempfile.TemporaryDirectory(prefix="pi-course-pyc-") as tmp:
            module, pyc = Path(tmp) / "probe.py", Path(tmp) / "probe.pyc"
            module.write_bytes(source)
            pyc.write_bytes(data)
            return pytest_rewrite._read_pyc(module, pyc) is not None
    except Exception:
        return False


def pyc_name(module: str) -> str:
    """The file name of a test module's rewritten pyc in `__pycache__` (pytest's own tail)."""
    from _pytest.assertion import rewrite as pytest_rewrite

    return module.removesuffix(".py") + pytest_rewrite.PYC_TAIL


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """`code` and every function and class body in it, as compiled from `filename`."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


@functools.cache
def _cache_folder() -> Path:
    """One folder per interpreter and pytest version: marshal's format and the rewriting depend on both."""
    import pytest

    return kit_cache() / "rewritten" / f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}"


def _cached_code(source: bytes) -> types.CodeType:
    """The rewritten code of `source`, from the cache or made (and kept) now."""
    entry = _cache_folder() / f"{hashlib.sha256(source).hexdigest()}.marshal"
    try:
        code = marshal.loads(entry.read_bytes())
        if isinstance(code, types.CodeType):
            return code
    except (OSError, ValueError, EOFError, TypeError):
        pass  # missing or unreadable: made again below
    code = rewrite(source, PLACEHOLDER)
    with contextlib.suppress(OSError):  # a read-only cache only costs the next run the rewriting
        _write(entry, marshal.dumps(code))
    return code


def _write(path: Path, data: bytes) -> None:
    """Write a file in one rename: a concurrent run reads the old file or the new one, never half of one."""

    def fill(tmp: Path) -> None:
        tmp.write_bytes(data)

    replace_file(path, fill)


def place(tests: Path, modules: Iterable[str]) -> None:
    """Write the rewritten pyc of each named test module of the folder `tests` into its `__pycache__`.

    A module that cannot be read or rewritten here is left to pytest, which reports it as usual.
    """
    if not available():
        return
    for name in modules:
        path = tests / name
        try:
            source = path.read_bytes()
            code = _renamed(_cached_code(source), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        try:
            _write(tests / "__pycache__" / pyc_name(name), pyc_bytes(source, code))
        except OSError:
            return
