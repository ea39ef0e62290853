"""The two typing ideas the rest of the course leans on: tagged unions and a runtime boundary."""
