"""Which named mutation makes each focused test fail: the mistake a failing test usually means.

Computed once per course state by running every mutation of a checkpoint (what `pi-course diagnose`
does for one) and cached in a JSON file keyed by a digest of the solution, the tests and the mutations,
so a class report costs nothing after the first. The first costs one run of the checkpoint's tests per
mutation (minutes at a late checkpoint): `grade` computes it only with `--mutations`, and says so first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from pi_course_kit.core.files import write_text_atomically
from pi_course_kit.core.locate import kit_cache
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.mutate import MutationError, run_mutation

#: nodeid -> mutation names that fail it, the most specific (fewest tests caught) first.
MutationMap = dict[str, list[str]]


def digest(course: Course, checkpoint: Checkpoint) -> str:
    """A digest of everything the map depends on: solution files, focused tests, the mutations."""
    hasher = hashlib.sha256()
    solution = course.root / checkpoint.solution
    files = sorted(p for p in solution.rglob("*.py") if "__pycache__" not in p.parts)
    files += [course.root / relative for relative in (*checkpoint.tree_tests, *checkpoint.tree_support)]
    for path in files:
        hasher.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    for mutation in checkpoint.mutations:
        hasher.update(repr(mutation).encode())
    return hasher.hexdigest()[:16]


def default_cache() -> Path:
    """Where maps are cached: $XDG_CACHE_HOME/pi-course (or ~/.cache/pi-course)."""
    return kit_cache()


#: Called before each mutation runs: (mutations done, mutations in all, the next one's name).
Progress = Callable[[int, int, str], None]


def compute(
    course: Course, checkpoint: Checkpoint, names: list[str] | None = None, progress: Progress | None = None
) -> MutationMap:
    """Run each mutation (or only `names`) against a copy of the solution; map each failing test to it."""
    caught: dict[str, list[tuple[int, str]]] = {}
    chosen = [m for m in checkpoint.mutations if names is None or m.name in names]
    for done, mutation in enumerate(chosen):
        if progress is not None:
            progress(done, len(chosen), mutation.name)
        try:
            outcome = run_mutation(course, checkpoint, mutation, timeout=300.0)
        except MutationError:
            continue  # `pi-course verify` reports a broken mutation; the report just goes without it
        for test in outcome.catches:
            caught.setdefault(test.nodeid, []).append((len(outcome.catches), mutation.name))
    return {node: [name for _, name in sorted(found)] for node, found in caught.items()}


def cache_path(course: Course, checkpoint: Checkpoint, cache: Path | None = None) -> Path:
    """Where the checkpoint's map for the course's current state is (or will be) cached."""
    folder = cache or default_cache()
    return folder / f"mutation-map-{checkpoint.id}-{digest(course, checkpoint)}.json"


def cached(course: Course, checkpoint: Checkpoint, cache: Path | None = None) -> MutationMap | None:
    """The checkpoint's map from the cache, or None when it is missing or stale."""
    try:
        data = json.loads(cache_path(course, checkpoint, cache).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): [str(n) for n in v] for k, v in data.items()}


def load_or_compute(
    course: Course, checkpoint: Checkpoint, cache: Path | None = None, progress: Progress | None = None
) -> MutationMap:
    """The checkpoint's map from the cache, computed and stored there first when missing or stale."""
    found = cached(course, checkpoint, cache)
    if found is not None:
        return found
    path = cache_path(course, checkpoint, cache)
    folder = path.parent
    found = compute(course, checkpoint, progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    # Atomically, as shards on one machine may build it at once.
    write_text_atomically(path, json.dumps(found, ensure_ascii=False, indent=1))
    return found
