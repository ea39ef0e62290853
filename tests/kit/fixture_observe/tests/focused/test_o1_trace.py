"""Focused tests of the observation fixture's checkpoint o1."""

import pytest
from pi_course import steps


@pytest.mark.observe1_1
def test_steps_count_from_one() -> None:
    """Are the trace's steps 1, 2 and 3?"""
    assert steps() == [1, 2, 3]
