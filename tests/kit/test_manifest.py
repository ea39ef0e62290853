"""course.toml, the one manifest: it loads into dataclasses, and a broken one says where and what."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.staging import marker_line, pytest_ini


def test_manifest_describes_checkpoint_06_and_its_labs(course: Course, checkpoint: Checkpoint) -> None:
    """Does the manifest carry checkpoint 06 with labs 6.1, 6.2, 6.3 and the optional transfer, in order?"""
    assert course.format_version == manifest.FORMAT_VERSION
    assert checkpoint.slug == "06-tool-contract"
    assert [lab.id for lab in checkpoint.labs] == ["6.1", "6.2", "6.3", "transfer6"]
    assert [lab.marker for lab in checkpoint.labs] == ["lab6_1", "lab6_2", "lab6_3", "transfer6"]
    assert [lab.optional for lab in checkpoint.labs] == [False, False, False, True]
    assert course.checkpoint("06-tool-contract") is checkpoint


def test_every_path_in_the_manifest_exists(course: Course, checkpoint: Checkpoint) -> None:
    """Does every file and folder the manifest names exist in the repository?"""
    for folder in (checkpoint.starter, checkpoint.solution):
        assert (course.root / folder / course.package).is_dir(), folder
    for relative in (*checkpoint.focused_tests, *checkpoint.test_support):
        assert (course.root / relative).is_file(), relative
    for relative in (*checkpoint.teaching_files, *checkpoint.given_files, *checkpoint.solution_only):
        assert (course.root / checkpoint.solution / relative).is_file(), relative


def test_every_lab_has_at_least_two_chinese_hints(checkpoint: Checkpoint) -> None:
    """Does each lab offer at least two hints, written in Chinese, that do not hand out a `def`?"""
    for lab in checkpoint.labs:
        assert len(lab.hints) >= 2, lab.id
        for hint in lab.hints:
            assert any("\u4e00" <= char <= "\u9fff" for char in hint), hint
            assert "def " not in hint and "return " not in hint, hint


def test_focused_tests_use_exactly_the_manifest_markers(course: Course, checkpoint: Checkpoint) -> None:
    """Are the markers used in the focused tests exactly the labs' markers, so --strict-markers holds?"""
    used: set[str] = set()
    for relative in checkpoint.focused_tests:
        tree = ast.parse((course.root / relative).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
                continue
            if node.value.attr == "mark" and node.attr.startswith(("lab", "transfer")):
                used.add(node.attr)
    assert used == {lab.marker for lab in checkpoint.labs}


def test_generated_pytest_ini_registers_each_lab_marker(course: Course, checkpoint: Checkpoint) -> None:
    """Does the staged pytest.ini register every lab marker, strictly, with its own tree first on the path?"""
    ini = pytest_ini(course, checkpoint)
    assert f"pi_course_package = {course.package}\n" in ini
    assert "pythonpath = ." in ini and "--strict-markers" in ini
    for lab in checkpoint.labs:
        assert f"    {marker_line(lab)}\n" in ini


def write(tmp_path: Path, text: str) -> Path:
    """Write a manifest variant into a temporary folder."""
    path = tmp_path / "course.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("format_version = 2", "format_version = 3"), "'format_version' is 3"),
        (('slug = "06-tool-contract"', ""), "'checkpoints[0].slug' is missing"),
        (('marker = "lab6_2"', 'marker = "lab6_1"'), "repeats the marker lab6_1"),
        (
            ('slug = "06-tool-contract"', 'slug = "06-tool-contract"\nparent = "99"'),
            "'checkpoints[0].parent' is '99', which is not an earlier checkpoint",
        ),
        (
            ('marker = "lab6_2"', 'marker = "lab6_2"\ncredit = "most"'),
            "must be one of fraction, all-or-nothing",
        ),
        (('teaching_files = ["pi_course/tool.py"]', "teaching_files = []"), "needs at least 1 entries"),
        (("[course]", "[course"), "not valid TOML"),
    ],
)
def test_a_broken_manifest_names_the_file_the_key_and_the_fault(
    course: Course, tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    """Does each kind of malformed manifest fail with the file, the key and what is wrong?"""
    original = course.path.read_text(encoding="utf-8")
    assert change[0] in original
    path = write(tmp_path, original.replace(change[0], change[1], 1))
    with pytest.raises(ManifestError) as error:
        manifest.load(path)
    assert str(path) in str(error.value)
    assert expected in str(error.value)


def test_a_lab_with_one_hint_is_refused(course: Course, tmp_path: Path) -> None:
    """Is a lab with fewer than two hints refused, naming the hints key of that lab?"""
    original = course.path.read_text(encoding="utf-8")
    start = original.index("hints = [", original.index('id = "6.2"'))
    end = original.index("]\n", start) + 2
    path = write(tmp_path, original[:start] + 'hints = ["只有一条"]\n' + original[end:])
    with pytest.raises(ManifestError, match=r"checkpoints\[0\]\.labs\[1\]\.hints' needs at least 2"):
        manifest.load(path)


def test_unknown_checkpoint_and_lab_list_the_known_ones(course: Course, checkpoint: Checkpoint) -> None:
    """Does asking for a checkpoint or lab that does not exist list the ones that do?"""
    with pytest.raises(ManifestError, match="known checkpoints: 06"):
        course.checkpoint("99")
    with pytest.raises(ManifestError, match=r"known labs: 6\.1, 6\.2, 6\.3, transfer6"):
        checkpoint.lab("6.9")
