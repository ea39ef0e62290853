"""Find the course: an explicit folder, PI_COURSE_ROOT, a checkout above the current folder, or the bundle.

An installed wheel carries the learner's part of the course (manifest, starters, focused tests,
notebooks) in `pi_course_kit/course/`; a checkout also has the solutions that instructor commands need.
"""

from __future__ import annotations

import os
from pathlib import Path

from pi_course_kit.core.errors import KitError

MANIFEST = "course.toml"
ROOT_ENV = "PI_COURSE_ROOT"
#: Where the wheel puts the course (see [tool.hatch.build.targets.wheel.force-include] in pyproject.toml).
BUNDLED = Path(__file__).resolve().parents[1] / "course"
#: The checkout this module runs from, in an editable install or straight from scripts/.
CHECKOUT = Path(__file__).resolve().parents[3]


def _is_course(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() and (folder / "labs").is_dir()


def candidates(explicit: Path | None = None, cwd: Path | None = None) -> list[tuple[str, Path]]:
    """Every place looked at, in order, with how it was chosen."""
    if explicit is not None:
        return [("--course", explicit)]
    if os.environ.get(ROOT_ENV):
        return [(ROOT_ENV, Path(os.environ[ROOT_ENV]))]
    here = (cwd or Path.cwd()).resolve()
    found = [("a folder above the current one", folder) for folder in (here, *here.parents)]
    return [*found, ("the kit's checkout", CHECKOUT), ("the course bundled with the kit", BUNDLED)]


def course_root(
    explicit: Path | None = None, *, need_solutions: bool = False, cwd: Path | None = None
) -> Path:
    """The folder holding course.toml; with `need_solutions`, one that also holds solutions/."""
    tried = candidates(explicit, cwd)
    for _, folder in tried:
        if _is_course(folder) and (not need_solutions or (folder / "solutions").is_dir()):
            return folder.resolve()
    what = "a course checkout with course.toml, labs/ and solutions/" if need_solutions else "course.toml"
    shown = sorted({f"{how}: {folder}" for how, folder in tried if how != "a folder above the current one"})
    if any(how == "a folder above the current one" for how, _ in tried):
        shown.insert(0, f"every folder from {(cwd or Path.cwd()).resolve()} up")
    hint = (
        "clone the course and pass --course DIR (or set PI_COURSE_ROOT)"
        if need_solutions
        else "pass --course DIR or set PI_COURSE_ROOT"
    )
    raise KitError(f"no {what} found; tried {'; '.join(shown)}; {hint}")


def course_manifest(explicit: Path | None = None, *, need_solutions: bool = False) -> Path:
    """The course.toml that `course_root` finds."""
    return course_root(explicit, need_solutions=need_solutions) / MANIFEST


def kit_cache() -> Path:
    """The kit's own cache on this machine: $XDG_CACHE_HOME/pi-course, or ~/.cache/pi-course."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pi-course"
