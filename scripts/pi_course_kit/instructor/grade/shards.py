"""Deterministic slices of a class, so N machines (pods, array tasks, matrix jobs) each grade one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pi_course_kit.core.errors import KitError
from pi_course_kit.instructor.grade.roster import Submission

#: A (learner id, folder) pair or a whole roster row.
Entry = TypeVar("Entry", tuple[str, Path], Submission)

SHARD = re.compile(r"^(?P<k>\d+)/(?P<n>\d+)$")


def parse(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N) with 1 <= K <= N."""
    match = SHARD.match(text.strip())
    if not match or not 1 <= int(match["k"]) <= int(match["n"]):
        raise KitError(
            f"--shard {text}: write K/N with 1 <= K <= N, e.g. --shard 2/3 for the second of three"
        )
    return int(match["k"]), int(match["n"])


def _learner(entry: tuple[str, Path] | Submission) -> str:
    return entry.learner if isinstance(entry, Submission) else entry[0]


def select(entries: Sequence[Entry], k: int, n: int) -> list[Entry]:
    """The K-th of N slices: learners sorted by id, then dealt round-robin (sizes differ by at most one).

    Rows with a problem (a bad roster row) are dealt like the others, so each appears in exactly one shard.
    """
    ordered = sorted(entries, key=_learner)
    return [entry for index, entry in enumerate(ordered) if index % n == k - 1]
