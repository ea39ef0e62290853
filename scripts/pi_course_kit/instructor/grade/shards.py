"""Deterministic slices of a class, so N machines (pods, array tasks, matrix jobs) each grade one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pi_course_kit.core.errors import KitError

SHARD = re.compile(r"^(?P<k>\d+)/(?P<n>\d+)$")


def parse(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N) with 1 <= K <= N."""
    match = SHARD.match(text.strip())
    if not match or not 1 <= int(match["k"]) <= int(match["n"]):
        raise KitError(
            f"--shard {text}: write K/N with 1 <= K <= N, e.g. --shard 2/3 for the second of three"
        )
    return int(match["k"]), int(match["n"])


def select(pairs: Sequence[tuple[str, Path]], k: int, n: int) -> list[tuple[str, Path]]:
    """The K-th of N slices: learners sorted by id, then dealt round-robin (sizes differ by at most one)."""
    ordered = sorted(pairs, key=lambda pair: pair[0])
    return [pair for index, pair in enumerate(ordered) if index % n == k - 1]
