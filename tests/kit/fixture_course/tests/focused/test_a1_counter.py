"""Focused tests of the fixture's checkpoint a1."""

import pytest
from pi_course import Counter


@pytest.mark.lab1_1
def test_add_counts_one_at_a_time() -> None:
    """Does add return 1, then 2?"""
    counter = Counter()
    assert [counter.add(), counter.add()] == [1, 2]


@pytest.mark.lab1_2
def test_reset_goes_back_to_zero() -> None:
    """After reset, does the count start again from zero?"""
    counter = Counter()
    counter.count = 5
    counter.reset()
    assert counter.count == 0
