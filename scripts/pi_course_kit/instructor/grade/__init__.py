"""Grading: sandboxed copies of learner folders, scored with the kit's pristine tests."""
