"""course.toml, the one manifest: it loads into dataclasses, and a broken one says where and what.

The engine's reading of a manifest is tested on the fixture course; the real course.toml loading at all
is the first test (its content is checked checkpoint by checkpoint in test_course_checkpoints.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO
from pi_course_kit.core import folder, manifest
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course, ManifestError
from pi_course_kit.core.staging import marker_line, pytest_ini


def test_the_real_course_manifest_loads() -> None:
    """Does the real course.toml load (a broken one would leave the parametrized course tests without
    cases)?"""
    course = manifest.load(REPO / "course.toml")
    assert course.checkpoints and course.package == "pi_course"


def test_the_manifest_describes_checkpoints_labs_and_lineage(
    course: Course, checkpoint: Checkpoint, child: Checkpoint
) -> None:
    """Does the fixture load with its package, a1's labs in order (the optional one flagged) and a2 after
    a1?"""
    assert course.format_version == manifest.FORMAT_VERSION and course.package == "fx_course"
    assert checkpoint.slug == "a1-counter" and course.checkpoint("a1-counter") is checkpoint
    assert [lab.id for lab in checkpoint.labs] == ["1.1", "1.2", "extra1"]
    assert [lab.marker for lab in checkpoint.labs] == ["lab1_1", "lab1_2", "extra1"]
    assert [lab.optional for lab in checkpoint.labs] == [False, False, True]
    assert [lab.id for lab in checkpoint.required_labs] == ["1.1", "1.2"]
    assert child.parent == "a1" and course.parent_of(child) is checkpoint
    assert [(lab.id, lab.inherited) for lab in child.tree_labs] == [
        ("1.1", True),
        ("1.2", True),
        ("extra1", True),
        ("2.1", False),
        ("2.2", False),
    ]
    assert child.tree_tests == (*checkpoint.focused_tests, *child.focused_tests)


def test_generated_pytest_ini_registers_each_lab_marker(course: Course, child: Checkpoint) -> None:
    """Does the staged pytest.ini name the package and register every lab marker of the lineage, strictly?"""
    ini = pytest_ini(course, child)
    assert "pi_course_package = fx_course\n" in ini and "pi_course_language = en\n" in ini
    assert "pythonpath = ." in ini and "--strict-markers" in ini
    for lab in child.tree_labs:
        assert f"    {marker_line(lab)}\n" in ini
    assert "extra1: extra1 | double a counter | optional | inherited" in ini


def write(tmp_path: Path, text: str) -> Path:
    """Write a manifest variant into a temporary folder."""
    path = tmp_path / "course.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("format_version = 2", "format_version = 3"), "'format_version' is 3"),
        (('slug = "a2-pair"', ""), "'checkpoints[1].slug' is missing"),
        (('marker = "lab1_2"', 'marker = "lab1_1"'), "repeats the marker lab1_1"),
        (('marker = "lab2_1"', 'marker = "lab1_1"'), "repeats the marker lab1_1 of its lineage"),
        (
            ('parent = "a1"', 'parent = "a9"'),
            "'checkpoints[1].parent' is 'a9', which is not an earlier checkpoint",
        ),
        (
            ('marker = "lab2_2"', 'marker = "lab2_2"\ncredit = "most"'),
            "must be one of fraction, all-or-nothing",
        ),
        (('teaching_files = ["fx_course/pair.py"]', "teaching_files = []"), "needs at least 1 entries"),
        (
            ('inherited_files = ["fx_course/lab.py"', 'inherited_files = ["fx_course/other.py"'),
            "not in given_files",
        ),
        (("points = 50\nhints", "points = -1\nhints"), "must be a number >= 0"),
        (
            ('title = "a counter"', 'title = "a counter"\nagent_predict = "a guess"'),
            "agent_not_yet' is missing",
        ),
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
    start = original.index("hints = [", original.index('id = "2.2"'))
    end = original.index("]\n", start) + 2
    path = write(tmp_path, original[:start] + 'hints = ["only one"]\n' + original[end:])
    with pytest.raises(ManifestError, match=r"checkpoints\[1\]\.labs\[1\]\.hints' needs at least 2"):
        manifest.load(path)


def test_unknown_checkpoint_and_lab_list_the_known_ones(course: Course, checkpoint: Checkpoint) -> None:
    """Does asking for a checkpoint, lab or mutation that does not exist list the ones that do?"""
    with pytest.raises(ManifestError, match="known checkpoints: a1, a2"):
        course.checkpoint("99")
    with pytest.raises(ManifestError, match=r"known labs: 1\.1, 1\.2, extra1"):
        checkpoint.lab("6.9")
    with pytest.raises(ManifestError, match="known mutations: add-two, reset-to-one"):
        checkpoint.mutation("nope")
    assert course.find_lab("2.2")[0].id == "a2"


# -- meta.json's format number: an older folder is migrated, a newer kit's folder refused -----------------


def _folder_with_meta(tmp_path: Path, meta: dict[str, object]) -> Path:
    (tmp_path / folder.META_DIR).mkdir()
    (tmp_path / folder.META_PATH).write_text(json.dumps(meta), encoding="utf-8")
    return tmp_path


def test_a_folder_made_before_meta_had_a_format_is_migrated(tmp_path: Path) -> None:
    """Does a meta.json without `format` (the first kits) open, brought up to this kit's format?"""
    root = _folder_with_meta(tmp_path, {"checkpoint": "a1", "slug": "a1-counter"})
    raw = folder.read_meta(root / folder.META_PATH)
    assert raw["format"] == folder.META_FORMAT and raw["hints"] == {}
    meta = folder.open_folder(root).meta
    assert (meta.checkpoint, meta.slug, meta.kit_version, meta.carried) == ("a1", "a1-counter", "?", None)


def test_a_folder_made_by_a_newer_kit_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Does a meta.json of a newer format stop with one line that says to upgrade the kit?"""
    root = _folder_with_meta(tmp_path, {"checkpoint": "a1", "format": folder.META_FORMAT + 1})
    with pytest.raises(KitError) as raised:
        folder.open_folder(root)
    message = str(raised.value)
    assert "newer pi-course kit" in message and "upgrade the kit" in message and "\n" not in message


@pytest.mark.parametrize("bad", ["2", -1, True, 1.5])
def test_a_format_that_is_not_a_number_is_unreadable(tmp_path: Path, bad: object) -> None:
    """Is a `format` that is no count refused as unreadable metadata (not taken for an old or new one)?"""
    with pytest.raises(KitError, match="cannot read the practice metadata"):
        folder.open_folder(_folder_with_meta(tmp_path, {"checkpoint": "a1", "format": bad}))
