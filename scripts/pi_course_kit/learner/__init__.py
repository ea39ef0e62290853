"""The learner's commands: practice, checkpoint, check/watch, hint, reset, status."""
