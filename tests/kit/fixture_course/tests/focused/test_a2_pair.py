"""Focused tests of the fixture's checkpoint a2."""

import pytest
from fx_course import Pair


@pytest.mark.lab2_1
def test_a_pair_has_two_separate_counters() -> None:
    """Are left and right two counters starting at zero?"""
    pair = Pair()
    assert pair.left is not pair.right and pair.left.count == pair.right.count == 0


@pytest.mark.lab2_2
def test_total_adds_both_counts() -> None:
    """Is the total the sum of both counts?"""
    pair = Pair()
    pair.left.count, pair.right.count = 2, 3
    assert pair.total() == 5
