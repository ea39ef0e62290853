"""Observation checkpoints (`kind = "observation"`), on a course of their own: tests/kit/fixture_observe.

There, o1 has nothing to implement (its starter is its target: run, predict, break) and o2, a labs
checkpoint, builds on it. Nothing in the engine names these checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from learner_support import run_cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import ManifestError

FIXTURE = Path(__file__).with_name("fixture_observe")
NOTE_EN = "this is an observation chapter: nothing to implement; run, predict, break"
NOTE_ZH = "这是一个观察章节：没有要实现的内容；运行、预测、弄坏它"
ALL_DONE_EN = "next: every observation passes. This is an observation chapter with nothing to implement"


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    """A writable copy of the observation fixture course."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "course"))


def practice_folder(course_copy: Path, checkpoint: str, dest: Path) -> Path:
    """A practice folder of the copied course, made through the command line."""
    done = run_cli(["practice", checkpoint, str(dest), "--course", str(course_copy)], course_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


def test_the_kind_is_read_and_defaults_to_labs() -> None:
    """Is o1 read as an observation checkpoint, and o2 (which names no kind) as a labs checkpoint?"""
    course = manifest.load(FIXTURE / "course.toml")
    first, second = course.checkpoint("o1"), course.checkpoint("o2")
    assert (first.kind, first.observation) == ("observation", True)
    assert (second.kind, second.observation) == ("labs", False)
    # The child re-checks the parent's observation step as an inherited lab.
    assert [(lab.id, lab.inherited) for lab in second.tree_labs] == [("1.1", True), ("2.1", False)]


def test_an_unknown_kind_is_a_one_line_manifest_error(course_copy: Path) -> None:
    """Does `kind = "lecture"` fail with the file, the key and the allowed kinds?"""
    path = course_copy / "course.toml"
    path.write_text(
        path.read_text(encoding="utf-8").replace('kind = "observation"', 'kind = "lecture"'), encoding="utf-8"
    )
    with pytest.raises(ManifestError, match=r"checkpoints\[0\]\.kind' must be one of labs, observation"):
        manifest.load(path)


def test_build_labs_copies_an_observation_teaching_file_unchanged(course_copy: Path) -> None:
    """With labs/ deleted, does build-labs write o1's starter as its solution, and still stub o2's lab?"""
    shutil.rmtree(course_copy / "labs")
    assert run_cli(["build-labs", "--course", str(course_copy)], course_copy).returncode == 0
    observed = "pi_course/trace.py"
    starter = (course_copy / "labs/o1-trace" / observed).read_bytes()
    assert starter == (course_copy / "solutions/o1-trace" / observed).read_bytes()
    total = (course_copy / "labs/o2-total/pi_course/total.py").read_text(encoding="utf-8")
    assert 'raise LabNotImplemented("2.1", "total")' in total
    assert run_cli(["build-labs", "--check", "--course", str(FIXTURE)], course_copy).returncode == 0


@pytest.mark.slow
def test_verify_keeps_green_and_mutations_but_promises_no_red_for_an_observation_checkpoint(
    course_copy: Path,
) -> None:
    """Does verify pass, check o1's solution, mutation and notebook, and ask a first red of o2 only?"""
    done = run_cli(["verify", "--course", str(course_copy)], course_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "ok   o1 observation: the starter is the target, with nothing to implement",
        "ok   o1 solution green",
        "ok   o1 mutation steps-from-zero caught",
        "ok   o1 notebook runs on the solution",
        "ok   o2 starter red, lab by lab",
        "ok   o2 starter stops first on Lab 2.1 not implemented: …",
    ):
        assert line in done.stdout
    assert "o1 starter red" not in done.stdout and "o1 starter stops first" not in done.stdout


def test_verify_refuses_a_lab_region_in_an_observation_teaching_file(course_copy: Path) -> None:
    """When o1's teaching file marks a lab body, does verify name the file and both ways out?"""
    trace = course_copy / "solutions/o1-trace/pi_course/trace.py"
    trace.write_text(
        trace.read_text(encoding="utf-8").replace(
            "    return list(range(1, 4))\n",
            "    # BEGIN LAB 1.1\n    return list(range(1, 4))\n    # END LAB 1.1\n",
        ),
        encoding="utf-8",
    )
    done = run_cli(["verify", "o1", "--course", str(course_copy), "--check", "starter"], course_copy)
    assert done.returncode == 1
    assert "FAIL o1 observation: the starter is the target" in done.stdout
    assert "solutions/o1-trace/pi_course/trace.py marks lab regions" in done.stdout
    assert 'drop `kind = "observation"`' in done.stdout


def test_practice_says_it_is_an_observation_chapter_in_either_language(
    course_copy: Path, tmp_path: Path
) -> None:
    """Does `practice o1` say there is nothing to implement, in English and with --lang zh_CN in Chinese?"""
    english = run_cli(["practice", "o1", str(tmp_path / "en"), "--course", str(course_copy)], course_copy)
    assert english.returncode == 0, english.stderr
    assert NOTE_EN in english.stdout
    assert "first red" not in english.stdout and "pi-course reset --all" in english.stdout
    chinese = run_cli(
        ["--lang", "zh_CN", "practice", "o1", str(tmp_path / "zh"), "--course", str(course_copy)], course_copy
    )
    assert chinese.returncode == 0, chinese.stderr
    assert NOTE_ZH in chinese.stdout
    guide = (tmp_path / "zh" / "LAB-GUIDE.md").read_text(encoding="utf-8")
    assert guide.startswith("# 观察指南") and "python -m pytest -m observe1_1" in guide
    meta = json.loads((tmp_path / "zh" / ".pi-course" / "meta.json").read_text(encoding="utf-8"))
    assert meta["kind"] == "observation"
    labs = run_cli(["practice", "o2", str(tmp_path / "labs"), "--course", str(course_copy)], course_copy)
    assert NOTE_EN not in labs.stdout and "first red: Lab 2.1 not implemented" in labs.stdout


def test_a_fresh_observation_folder_is_green_and_names_no_next_lab(course_copy: Path, tmp_path: Path) -> None:
    """Does `check` in a fresh o1 folder pass, and say what an observation chapter asks instead of a next
    lab?"""
    folder = practice_folder(course_copy, "o1", tmp_path / "o1")
    done = run_cli(["check"], folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ALL_DONE_EN in done.stdout
    assert "next: Lab" not in done.stdout
    assert ALL_DONE_EN in run_cli(["status"], folder).stdout


def test_a_break_is_caught_by_its_step_and_reset_of_the_step_puts_the_file_back(
    course_copy: Path, tmp_path: Path
) -> None:
    """After breaking trace.py on purpose, does check point at the step, and `reset 1.1` restore the file?"""
    folder = practice_folder(course_copy, "o1", tmp_path / "o1")
    trace = folder / "pi_course" / "trace.py"
    original = trace.read_text(encoding="utf-8")
    trace.write_text(original.replace("range(1, 4)", "range(0, 3)"), encoding="utf-8")
    broken = run_cli(["check"], folder)
    assert broken.returncode == 1
    assert "next: Lab 1.1 (failing) — test_steps_count_from_one" in broken.stdout
    assert "edit: pi_course/trace.py:" in broken.stdout
    reset = run_cli(["reset", "1.1"], folder)
    assert reset.returncode == 0, reset.stderr
    assert trace.read_text(encoding="utf-8") == original
    assert run_cli(["check"], folder).returncode == 0
    assert run_cli(["reset", "9.9"], folder).returncode == 2  # an unknown step is still refused


def test_hint_gives_an_observation_steps_hints_in_turn(course_copy: Path, tmp_path: Path) -> None:
    """Does a bare `hint` in an o1 folder give the step's first hint, then its second?"""
    folder = practice_folder(course_copy, "o1", tmp_path / "o1")
    first, second = run_cli(["hint"], folder), run_cli(["hint"], folder)
    assert "hint 1/2 for Lab 1.1" in first.stdout and "count the steps on paper first" in first.stdout
    assert "hint 2/2 for Lab 1.1" in second.stdout and "then compare" in second.stdout


def test_the_next_checkpoint_starts_from_a_green_observation_folder(
    course_copy: Path, tmp_path: Path
) -> None:
    """Does `practice o2 --from` an o1 folder carry the observed file over and start red on Lab 2.1?"""
    observed = practice_folder(course_copy, "o1", tmp_path / "o1")
    child = tmp_path / "o2"
    done = run_cli(
        ["practice", "o2", str(child), "--from", str(observed), "--course", str(course_copy)], course_copy
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (child / "pi_course/trace.py").read_bytes() == (observed / "pi_course/trace.py").read_bytes()
    red = run_cli(["check"], child)
    assert red.returncode == 1 and "next: Lab 2.1 (not started)" in red.stdout


def test_the_checkpoint_card_promises_no_first_red(course_copy: Path, tmp_path: Path) -> None:
    """Does `checkpoint o1` say there is no first red, and materialise a green parent?"""
    done = run_cli(["checkpoint", "o1", str(tmp_path / "card"), "--course", str(course_copy)], course_copy)
    assert done.returncode == 0, done.stderr
    assert "first red:         none: an observation checkpoint" in done.stdout
    assert "(green too: nothing to implement)" in done.stdout


def test_the_staged_pytest_ini_names_the_kind_only_for_an_observation_checkpoint(
    course_copy: Path, tmp_path: Path
) -> None:
    """Is `pi_course_kind = observation` in o1's pytest.ini, and no kind line in o2's (the default)?"""
    observed = practice_folder(course_copy, "o1", tmp_path / "o1")
    rebuilt = practice_folder(course_copy, "o2", tmp_path / "o2")
    assert "pi_course_kind = observation\n" in (observed / "pytest.ini").read_text(encoding="utf-8")
    assert "pi_course_kind" not in (rebuilt / "pytest.ini").read_text(encoding="utf-8")
    # The report in the tree says it too, without the kit: a plain pytest run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        cwd=observed,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    assert ALL_DONE_EN in done.stdout
