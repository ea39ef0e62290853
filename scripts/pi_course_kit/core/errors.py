"""The one error type a command raises for bad input: printed as one line, exit code 2."""

from __future__ import annotations


class KitError(Exception):
    """A user-facing problem: the message says what was wrong and what to do."""

    exit_code = 2
