"""What a checkpoint notebook imports: choose the tree, show values compactly, run the lab checks.

One import line for the notebook's set-up cell; each concept lives in its own module.
"""

from __future__ import annotations

from pi_course_kit.notebook.checks import CheckReport, check, progress
from pi_course_kit.notebook.tree import TREE_ENV, Tree, current_tree, find_tree, use_tree
from pi_course_kit.notebook.views import JsonView, Table, compact, display, dumps, plain, show, table

__all__ = [
    "TREE_ENV",
    "CheckReport",
    "JsonView",
    "Table",
    "Tree",
    "check",
    "compact",
    "current_tree",
    "display",
    "dumps",
    "find_tree",
    "plain",
    "progress",
    "show",
    "table",
    "use_tree",
]
