"""A learner's copy of a notebook never holds an output of the reference solution, wherever it comes from."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from learner_support import make_folder
from pi_course_kit.core.manifest import Course
from pi_course_kit.notebook.learner_copy import learner_text, write_learner_copy


def stored_outputs(notebook: dict[str, Any]) -> int:
    """Outputs and execution counts a notebook carries, plus run-only metadata."""
    cells = notebook["cells"]
    found = sum(len(cell.get("outputs", [])) for cell in cells)
    found += sum(1 for cell in cells if cell.get("execution_count") is not None)
    return found + sum(1 for key in ("widgets",) if key in notebook.get("metadata", {}))


def with_outputs(source: Path) -> bool:
    """Does the repository copy of a notebook hold stored outputs (so the check below can fail)?"""
    return stored_outputs(json.loads(source.read_text(encoding="utf-8"))) > 0


@pytest.mark.slow
def test_the_wheel_carries_notebooks_without_outputs_and_every_contract_page(
    real_course: Course, tmp_path: Path
) -> None:
    """Built as a learner installs it, does the wheel hold every notebook with no stored output, and each
    page?"""
    repository = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert any(with_outputs(path) for path in repository)  # the repository copies do have outputs
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        notebooks = {
            name: json.loads(archive.read(name)) for name in archive.namelist() if name.endswith(".ipynb")
        }
        pages = {name: archive.read(name) for name in archive.namelist() if "/docs/contract-" in name}
    assert {Path(name).name for name in notebooks} == {path.name for path in repository}
    assert {name: stored_outputs(nb) for name, nb in notebooks.items()} == dict.fromkeys(notebooks, 0)
    expected = {
        f"pi_course_kit/course/{cp.contract}": cp.contract for cp in real_course.checkpoints if cp.contract
    }
    assert sorted(pages) == sorted(expected)
    assert all(pages[name] == (REPO / page).read_bytes() for name, page in expected.items())


def test_a_practice_folder_notebook_has_no_outputs(real_course: Course, tmp_path: Path) -> None:
    """Made from a checkpoint whose notebook has stored outputs, does the practice folder's copy hold none?"""
    checkpoint = next(cp for cp in real_course.checkpoints if with_outputs(real_course.root / cp.notebook))
    source = real_course.root / checkpoint.notebook
    folder = make_folder(real_course, checkpoint, tmp_path / "p")
    copy = json.loads((folder / source.name).read_text(encoding="utf-8"))
    assert stored_outputs(copy) == 0
    assert len(copy["cells"]) > 0


def test_every_course_notebook_strips_to_no_outputs(tmp_path: Path) -> None:
    """For each of the course's notebooks, do both stripping paths (nbformat and plain JSON) leave no
    output?"""
    for source in sorted((REPO / "notebooks").glob("*.ipynb")):
        target = tmp_path / source.name
        write_learner_copy(source, target)
        assert stored_outputs(json.loads(target.read_text(encoding="utf-8"))) == 0, source.name
        assert stored_outputs(json.loads(learner_text(source))) == 0, source.name
