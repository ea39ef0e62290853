"""Focused-test configuration: loads the per-lab report that travels with these tests."""

from __future__ import annotations

import pytest
from pi_course_report import ReportPlugin


def pytest_configure(config: pytest.Config) -> None:
    """Register the per-lab report for this run."""
    config.pluginmanager.register(ReportPlugin(config), "pi-course-report")
