"""meta.json is only ever written as a read-modify-write of the file as it is now: no command loses another's
field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from learner_support import make_folder
from pi_course_kit import cli
from pi_course_kit.core.folder import PracticeFolder, open_folder
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import FolderMeta
from pi_course_kit.learner import guide


def meta_of(folder: Path) -> dict[str, Any]:
    """The metadata as it is on disk."""
    data: dict[str, Any] = json.loads((folder / ".pi-course" / "meta.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture
def folder(course: Course, checkpoint: Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh fixture practice folder, the current directory for the commands run in-process."""
    made = make_folder(course, checkpoint, tmp_path / "p")
    monkeypatch.chdir(made)
    return made


def test_watch_hint_and_check_interleaved_lose_no_field(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Watch opened long ago, hint and check in between, then watch's keys: is every hint count and field
    kept?"""
    shipped = meta_of(folder)
    watcher = open_folder(folder)  # what `pi-course watch` holds from its start
    lab = guide.CurrentLab("1.1", "count up")
    assert guide.handle_key(watcher, "h", lab) == "stay"  # h: hint 1.1, through the command line
    assert cli.main(["hint", "1.2"]) == 0  # another terminal: a hint for 1.2
    assert guide.handle_key(watcher, "l", lab) == "stay"  # l: the list, which records the next lab
    after_list = meta_of(folder)
    assert after_list["hints"] == {"1.1": 1, "1.2": 1}
    assert after_list["last_next_lab"] == "1.1"
    assert cli.main(["check"]) == 1  # a separate check (red: the starter)
    assert cli.main(["hint", "1.1"]) == 0
    assert guide.handle_key(watcher, "h", lab) == "stay"
    assert guide.handle_key(watcher, "l", lab) == "stay"
    assert guide.handle_key(watcher, "r", lab) == "confirm"  # r only asks first
    assert guide.handle_key(watcher, "y", lab, armed=True) == "rerun"  # y: reset (code, not metadata)
    final = meta_of(folder)
    assert final["hints"] == {"1.1": 2, "1.2": 1}
    assert final["last_next_lab"] == "1.1"
    assert {key: final[key] for key in shipped if key != "hints"} == {
        key: value for key, value in shipped.items() if key != "hints"
    }
    assert watcher.meta == FolderMeta.from_json(
        final
    )  # the watcher's copy follows the file after its own write
    assert "hint 2/2 for Lab 1.1" in capsys.readouterr().out


def test_a_stale_folder_object_keeps_what_others_wrote(folder: Path) -> None:
    """Does an update through an old PracticeFolder keep a field another command wrote since it was opened?"""
    old = open_folder(folder)
    PracticeFolder(folder, FolderMeta.from_json(meta_of(folder))).update(
        lambda meta: meta.__setitem__("hints", {"1.2": 2})
    )
    old.update(lambda meta: meta.__setitem__("last_next_lab", "1.2"))
    assert meta_of(folder)["hints"] == {"1.2": 2}
    assert meta_of(folder)["last_next_lab"] == "1.2"


COUNT_UP = """
import sys
from pathlib import Path
from pi_course_kit.core.folder import open_folder

folder = open_folder(Path(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    folder.update(lambda meta: meta.__setitem__("n", int(meta.get("n", 0)) + 1))
"""


def test_concurrent_writers_lose_no_update(folder: Path) -> None:
    """Four processes each add 40 to one field at once: is the total 160 (the lock orders the writes)?"""
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", COUNT_UP, str(folder), "40"], stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    for writer in writers:
        _out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    assert meta_of(folder)["n"] == 160
