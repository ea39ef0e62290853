"""The instructor's commands: build-labs, diff, diagnose, verify and grade."""
