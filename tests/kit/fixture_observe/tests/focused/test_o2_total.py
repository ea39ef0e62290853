"""Focused tests of the observation fixture's checkpoint o2."""

import pytest
from pi_course import total


@pytest.mark.lab2_1
def test_total_adds_the_steps() -> None:
    """Is the total of the steps 1 + 2 + 3?"""
    assert total() == 6
