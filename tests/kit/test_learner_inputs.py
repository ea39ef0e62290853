"""Bad input to the learner commands: one line on stderr, a non-zero exit, no traceback, nothing changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from learner_support import CLI, make_folder, snapshot
from pi_course_kit.core.manifest import Checkpoint, Course

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One bad command line, and where it runs: `ws` (a scratch folder), `folder`, `sub`, `corrupt`."""

    argv: tuple[str, ...]
    where: str = "ws"
    script: str | None = None  # run `python3 scripts/<script>` instead of `pi-course`
    refused: str | None = None  # a folder that must not be created (relative: to the scratch folder)


UNKNOWN_CHECKPOINTS = ("99", "", "../06", "6.1")
UNKNOWN_LABS = ("9.9", "", "../1.1", "1", "lab1_9")
CASES: dict[str, Case] = {
    # practice: where the new folder would go
    "practice DIR under a file": Case(("practice", "06", "a-file/new"), refused="a-file/new"),
    "practice DIR is a file": Case(("practice", "06", "a-file")),
    "practice DIR not empty": Case(("practice", "06", "full")),
    "practice DIR is the current folder": Case(("practice", "06", ".")),
    "practice DIR inside labs/": Case(
        ("practice", "06", str(REPO / "labs" / "pi-course-refused")),
        refused=str(REPO / "labs" / "pi-course-refused"),
    ),
    "practice DIR inside solutions/": Case(
        ("practice", "06", str(REPO / "solutions" / "pi-course-refused")),
        refused=str(REPO / "solutions" / "pi-course-refused"),
    ),
    "practice --from a missing folder": Case(("practice", "06", "new", "--from", "missing"), refused="new"),
    "practice --from a file": Case(("practice", "06", "new", "--from", "a-file"), refused="new"),
    "practice --from a non-practice folder": Case(("practice", "06", "new", "--from", "full"), refused="new"),
    "practice --course missing": Case(("practice", "06", "new", "--course", "missing"), refused="new"),
    "practice --course a file": Case(("practice", "06", "new", "--course", "a-file"), refused="new"),
    "scripts/practice DIR under a file": Case(("06", "a-file/new"), script="practice", refused="a-file/new"),
    "scripts/practice DIR not empty": Case(("06", "full"), script="practice"),
    "scripts/practice unknown checkpoint": Case(("99", "new"), script="practice", refused="new"),
    "scripts/checkpoint unknown checkpoint": Case(("99",), script="checkpoint"),
    "scripts/checkpoint ../06": Case(("../06",), script="checkpoint"),
    "checkpoint DIR under a file": Case(("checkpoint", "06", "a-file/cp"), refused="a-file/cp"),
    "checkpoint DIR not empty": Case(("checkpoint", "06", "full")),
    # check, hint, reset with bad labs or options inside a practice folder
    "check --timeout -1": Case(("check", "--timeout", "-1"), where="folder"),
    "check --timeout abc (argparse)": Case(("check", "--timeout", "abc"), where="folder"),
    "practice without arguments (argparse)": Case(("practice",)),
    "an unknown command (argparse)": Case(("pratice", "06", "new"), refused="new"),
    "reset with an unknown option (argparse)": Case(("reset", "1.1", "--force"), where="folder"),
    "check --timeout 0": Case(("check", "--timeout", "0"), where="folder"),
    "check --lang xx": Case(("--lang", "xx", "check"), where="folder"),
    "reset without a lab": Case(("reset",), where="folder"),
    "reset --undo with no backup": Case(("reset", "--undo"), where="folder"),
    "reset --undo with a lab": Case(("reset", "--undo", "1.2"), where="folder"),
    # outside a practice folder
    "check outside a practice folder": Case(("check",)),
    "hint outside a practice folder": Case(("hint", "6.1")),
    "reset outside a practice folder": Case(("reset", "6.1")),
    "reset --undo outside a practice folder": Case(("reset", "--undo")),
    "status outside a practice folder": Case(("status", "--no-run")),
    # a practice folder whose .pi-course/meta.json is not JSON
    "check with a corrupt meta.json": Case(("check",), where="corrupt"),
    "hint with a corrupt meta.json": Case(("hint", "1.1"), where="corrupt"),
    "reset with a corrupt meta.json": Case(("reset", "1.1"), where="corrupt"),
    "status with a corrupt meta.json": Case(("status", "--no-run"), where="corrupt"),
    "check --lab 9.9 from a subfolder": Case(("check", "--lab", "9.9"), where="sub"),
}
for _id in UNKNOWN_CHECKPOINTS:
    CASES[f"practice checkpoint {_id!r}"] = Case(("practice", _id, "new"), refused="new")
    CASES[f"checkpoint {_id!r}"] = Case(("checkpoint", _id))
for _id in UNKNOWN_LABS:
    CASES[f"check --lab {_id!r}"] = Case(("check", "--lab", _id), where="folder")
    CASES[f"hint {_id!r}"] = Case(("hint", _id), where="folder")
    CASES[f"reset {_id!r}"] = Case(("reset", _id), where="folder")


def test_there_are_at_least_forty_bad_inputs() -> None:
    """Does the table cover at least 40 distinct bad command lines?"""
    assert len(CASES) >= 40
    assert len({(case.script, case.where, case.argv) for case in CASES.values()}) == len(CASES)


@pytest.fixture(scope="module")
def starter(course: Course, checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh practice folder of the fixture course, copied into each case's scratch folder."""
    return make_folder(course, checkpoint, tmp_path_factory.mktemp("inputs") / "starter")


def scratch(tmp_path: Path, starter: Path) -> Path:
    """A scratch folder holding a file, a non-empty folder, a practice folder and a corrupt one."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a-file").write_text("not a folder\n", encoding="utf-8")
    (ws / "full").mkdir()
    (ws / "full" / "notes.txt").write_text("the learner's notes\n", encoding="utf-8")
    shutil.copytree(starter, ws / "folder")
    shutil.copytree(starter, ws / "corrupt")
    (ws / "corrupt" / ".pi-course" / "meta.json").write_text("{not json", encoding="utf-8")
    return ws


def state(root: Path) -> tuple[dict[str, str], set[str]]:
    """Every file's digest and every folder under `root` (outside caches)."""
    folders = {
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir() and "__pycache__" not in p.parts
    }
    return snapshot(root), folders


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_changes_nothing(name: str, starter: Path, tmp_path: Path) -> None:
    """Is this bad command refused with a non-zero exit, one stderr line, no traceback and no change on
    disk?"""
    case = CASES[name]
    ws = scratch(tmp_path, starter)
    cwd = {"ws": ws, "folder": ws / "folder", "sub": ws / "folder" / "fx_course", "corrupt": ws / "corrupt"}[
        case.where
    ]
    command = [sys.executable, str(REPO / "scripts" / case.script)] if case.script else list(CLI)
    before = state(ws)
    done = subprocess.run(
        [*command, *case.argv],
        cwd=cwd,
        env={**os.environ, "PI_COURSE_LANG": "en"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert state(ws) == before
    if case.refused:
        assert not (ws / case.refused).exists()


def test_corrupt_meta_is_really_corrupt(starter: Path, tmp_path: Path) -> None:
    """Does the corrupt folder of the scratch space hold a meta.json that JSON cannot read?"""
    ws = scratch(tmp_path, starter)
    with pytest.raises(ValueError):
        json.loads((ws / "corrupt" / ".pi-course" / "meta.json").read_text(encoding="utf-8"))
