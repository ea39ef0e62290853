"""`--shard K/N` and `grade merge`: deterministic slices whose merge equals one unsharded run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FX
from grade_class import make_class
from pi_course_kit import cli
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import shards
from pi_course_kit.instructor.grade.gradebook import TIMING_FIELDS

OPTIONS = ["--jobs", "2", "--timeout", "60", "--quiet", *FX]


def test_slices_cover_everyone_once_whatever_the_input_order() -> None:
    """Do the N slices partition the class, differ in size by at most one, and ignore the input order?"""
    pairs = [(f"s{i:02d}", Path(f"/sub/s{i:02d}")) for i in range(11)]
    slices = [shards.select(pairs, k, 3) for k in (1, 2, 3)]
    flat = [pair for part in slices for pair in part]
    assert sorted(flat) == sorted(pairs) and len(flat) == len(set(flat))
    assert {len(part) for part in slices} == {3, 4}
    assert shards.select(list(reversed(pairs)), 2, 3) == slices[1]


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "2"])
def test_a_shard_outside_1_to_n_is_refused(text: str) -> None:
    """Is every K/N that is not 1 <= K <= N refused?"""
    with pytest.raises(KitError, match="K/N"):
        shards.parse(text)


def comparable(path: Path) -> list[dict[str, Any]]:
    """The records of a gradebook, sorted by learner, without the timing fields."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for record in records:
        for name in TIMING_FIELDS:
            record.pop(name)
    return sorted(records, key=lambda record: str(record["learner"]))


@pytest.mark.sandbox
def test_three_shards_merged_equal_one_unsharded_run(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Do shards 1/3, 2/3 and 3/3, merged, give the unsharded gradebook record for record, and one report?"""
    root = tmp_path / "sub"
    make_class(course, checkpoint, root)
    base = ["grade", "--submissions-root", str(root), *OPTIONS]
    assert cli.main([*base, "--json", str(tmp_path / "all.jsonl")]) == 0
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"shard-{k}.jsonl"
        assert cli.main([*base, "--shard", f"{k}/3", "--json", str(part)]) == 0
        parts.append(str(part))
    sizes = [len(Path(part).read_text(encoding="utf-8").splitlines()) for part in parts]
    assert sorted(sizes) == [1, 2, 2]
    merged = tmp_path / "merged.jsonl"
    report = tmp_path / "class.html"
    args = ["grade", "merge", *parts, "-o", str(merged), "--csv", str(tmp_path / "m.csv"), *FX]
    assert cli.main([*args, "--report", str(report), "--no-mutations"]) == 0
    assert comparable(merged) == comparable(tmp_path / "all.jsonl")
    assert len(comparable(merged)) == 5 and "<svg" in report.read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["grade", "merge", parts[0], parts[0], "-o", str(tmp_path / "twice.jsonl")]) == 2
    assert "more than one shard" in capsys.readouterr().err
    assert not (tmp_path / "twice.jsonl").exists()


def test_merge_refuses_a_file_that_is_not_a_gradebook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Is a shard file with a line that is not a grading record refused, naming the file and line?"""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"learner": "a"}\nnot json\n', encoding="utf-8")
    assert cli.main(["grade", "merge", str(bad), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()
