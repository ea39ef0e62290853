"""Wheel build hook: the notebooks and contract pages that course.toml names travel in the wheel.

The repository keeps each notebook with the outputs of a run on the reference solution, for reading on a
code host. Those outputs show the answers, so the wheel carries a stripped copy instead (the same
stripping `pi-course practice` applies: notebook.learner_copy, standard library only).

Each checkpoint's contract page is the one its `contract` key in course.toml names, so a new checkpoint
reaches the wheel without a second list in pyproject.toml to keep equal by hand.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: Where the notebooks go inside the wheel (beside the rest of the bundled course, see pyproject.toml).
WHEEL_NOTEBOOKS = "pi_course_kit/course/notebooks"
#: Where the bundled course lives inside the wheel; a contract page keeps its path below it.
WHEEL_COURSE = "pi_course_kit/course"


class LearnerNotebooks(BuildHookInterface):
    """Put stripped copies of notebooks/*.ipynb, and every checkpoint's contract page, into the wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Strip every notebook into a scratch folder and force-include the copies."""
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        sys.path.insert(0, str(root / "scripts"))
        try:
            from pi_course_kit.notebook.learner_copy import learner_text
        finally:
            sys.path.remove(str(root / "scripts"))
        self._scratch = Path(tempfile.mkdtemp(prefix="pi-course-wheel-notebooks-"))
        for source in sorted((root / "notebooks").glob("*.ipynb")):
            copy = self._scratch / source.name
            copy.write_text(learner_text(source), encoding="utf-8")
            build_data["force_include"][str(copy)] = f"{WHEEL_NOTEBOOKS}/{source.name}"
        manifest = tomllib.loads((root / "course.toml").read_text(encoding="utf-8"))
        for checkpoint in manifest["checkpoints"]:
            contract = checkpoint.get("contract")
            if contract:
                build_data["force_include"][str(root / contract)] = f"{WHEEL_COURSE}/{contract}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the scratch folder once the wheel is written."""
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
