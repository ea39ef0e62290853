"""Which named mutation makes each focused test fail: the mistake a failing test usually means.

Computed once per course state by running every mutation of a checkpoint (what `pi-course diagnose`
does for one) and cached in a JSON file keyed by a digest of the solution, the tests and the mutations,
so a class report costs nothing after the first.
"""

from __future__ import annotations

import hashlib
import json
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


def compute(course: Course, checkpoint: Checkpoint, names: list[str] | None = None) -> MutationMap:
    """Run each mutation (or only `names`) against a copy of the solution; map each failing test to it."""
    caught: dict[str, list[tuple[int, str]]] = {}
    for mutation in checkpoint.mutations:
        if names is not None and mutation.name not in names:
            continue
        try:
            outcome = run_mutation(course, checkpoint, mutation, timeout=300.0)
        except MutationError:
            continue  # `pi-course verify` reports a broken mutation; the report just goes without it
        for test in outcome.catches:
            caught.setdefault(test.nodeid, []).append((len(outcome.catches), mutation.name))
    return {node: [name for _, name in sorted(found)] for node, found in caught.items()}


def load_or_compute(course: Course, checkpoint: Checkpoint, cache: Path | None = None) -> MutationMap:
    """The checkpoint's map from the cache, computed and stored there first when missing or stale."""
    folder = cache or default_cache()
    path = folder / f"mutation-map-{checkpoint.id}-{digest(course, checkpoint)}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return {str(k): [str(n) for n in v] for k, v in data.items()}
    except (OSError, ValueError):
        pass
    found = compute(course, checkpoint)
    folder.mkdir(parents=True, exist_ok=True)
    # Atomically, as shards on one machine may build it at once.
    write_text_atomically(path, json.dumps(found, ensure_ascii=False, indent=1))
    return found
