"""Loads the kit's per-lab report, as a real course's conftest does."""

import pytest
from pi_course_report import ReportPlugin, StubFailures, pytest_addoption

__all__ = ["pytest_addoption"]  # the report's pytest.ini key (the learner's package)


def pytest_configure(config: pytest.Config) -> None:
    """Register the per-lab report for this run."""
    config.pluginmanager.register(ReportPlugin(config), "pi-course-report")
    config.pluginmanager.register(StubFailures(config.rootpath), "pi-course-stub-failures")
