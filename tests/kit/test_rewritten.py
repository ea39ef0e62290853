"""The cache of pytest's rewritten test modules (core.rewritten): taken by pytest, right for every copy."""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_course_kit.core import rewritten, staging
from pi_course_kit.core.manifest import Checkpoint, Course

MODULE = "test_sample.py"
SOURCE = b"""
def test_lists_differ():
    seen = [1, 2, 3]
    assert seen == [1, 2, 4]


def helper():
    return [value for value in range(3)]
"""


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty kit cache for this test alone."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    rewritten._cache_folder.cache_clear()
    yield home
    rewritten._cache_folder.cache_clear()


def make_tests(root: Path, source: bytes = SOURCE) -> Path:
    """A tests folder under `root` holding one test module."""
    folder = root / "tests"
    folder.mkdir(parents=True)
    (folder / MODULE).write_bytes(source)
    return folder


def run_pytest(folder: Path) -> subprocess.CompletedProcess[str]:
    """pytest on `folder`, as the kit's runs start it: writing no bytecode of its own."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist", "."],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def test_a_cached_module_placed_in_two_copies_is_what_pytest_would_write_for_each(
    tmp_path: Path, cache_home: Path
) -> None:
    """Does each copy get pytest's own rewritten code, compiled under that copy's path, from one cache
    entry?"""
    copies = [make_tests(tmp_path / name) for name in ("one", "two")]
    for folder in copies:
        rewritten.place(folder, [MODULE])
    assert len(list(cache_home.rglob("*.marshal"))) == 1
    for folder in copies:
        pyc = (folder / "__pycache__" / rewritten.pyc_name(MODULE)).read_bytes()
        assert pyc[4:8] == b"\x03\x00\x00\x00" and pyc[8:16] == importlib.util.source_hash(SOURCE)
        placed = marshal.loads(pyc[16:])
        expected = rewritten.rewrite(SOURCE, str(folder / MODULE))
        # Code objects compare equal without their file name: check it on every nested body too.
        assert placed == expected
        assert {code.co_filename for code in code_objects(placed)} == {str(folder / MODULE)}


def test_pytest_runs_the_placed_pyc_and_names_the_copy_in_its_report(
    tmp_path: Path, cache_home: Path
) -> None:
    """Does pytest take the placed pyc (not its own rewriting), and show the copy's path and the assert's
    detail?"""
    folder = make_tests(tmp_path / "copy")
    # A cache entry for this very source whose code says where it came from: only a run that loads
    # the placed pyc can print the word.
    marked = SOURCE + b"\nprint('FROM-THE-CACHE')\n"
    entry = rewritten._cache_folder() / f"{hashlib.sha256(SOURCE).hexdigest()}.marshal"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(marshal.dumps(rewritten.rewrite(marked, rewritten.PLACEHOLDER)))
    rewritten.place(folder, [MODULE])
    done = run_pytest(folder)
    assert "FROM-THE-CACHE" in done.stdout
    # The traceback names the copy's file (a cached body keeps a stand-in name until it is placed).
    assert "test_sample.py:4: AssertionError" in done.stdout
    assert rewritten.PLACEHOLDER not in done.stdout
    assert "assert [1, 2, 3] == [1, 2, 4]" in done.stdout
    assert "1 failed" in done.stdout


def test_a_changed_source_is_rewritten_by_pytest_itself(tmp_path: Path, cache_home: Path) -> None:
    """Once the module changes after its pyc was placed, does pytest ignore the stale pyc (checked hash)?"""
    folder = make_tests(tmp_path / "copy")
    rewritten.place(folder, [MODULE])
    (folder / MODULE).write_bytes(SOURCE.replace(b"[1, 2, 4]", b"[1, 2, 3]"))
    done = run_pytest(folder)
    assert "1 passed" in done.stdout, done.stdout


def test_an_unreadable_cache_entry_is_made_again(tmp_path: Path, cache_home: Path) -> None:
    """Does a damaged cache entry cost only a new rewriting, never a wrong pyc?"""
    folder = make_tests(tmp_path / "copy")
    entry = rewritten._cache_folder() / f"{hashlib.sha256(SOURCE).hexdigest()}.marshal"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"not marshal data")
    rewritten.place(folder, [MODULE])
    placed = marshal.loads((folder / "__pycache__" / rewritten.pyc_name(MODULE)).read_bytes()[16:])
    assert placed == rewritten.rewrite(SOURCE, str(folder / MODULE))
    assert isinstance(marshal.loads(entry.read_bytes()), types.CodeType)


def test_a_module_with_a_syntax_error_is_left_to_pytest(tmp_path: Path, cache_home: Path) -> None:
    """Is a module that does not parse left without a pyc, so pytest reports its error as usual?"""
    folder = make_tests(tmp_path / "copy", b"def broken(:\n")
    rewritten.place(folder, [MODULE, "missing_test.py"])
    assert not (folder / "__pycache__").exists()


def test_a_staged_tree_of_the_fixture_course_carries_its_rewritten_modules(
    course: Course, child: Checkpoint, cache_home: Path
) -> None:
    """Does a staged tree hold a pyc for each of its test modules, and a folder staged for keeps none?"""
    with staging.staged(course, child, course.root / child.solution) as tree:
        cached = {path.name for path in (tree / staging.TESTS_DIR / "__pycache__").iterdir()}
    assert cached >= {rewritten.pyc_name(Path(relative).name) for relative in child.tree_tests}
