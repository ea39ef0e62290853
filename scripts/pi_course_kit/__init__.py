"""The pi-course kit engine: manifest, staging, checking and grading. Never imported by pi_course."""

__version__ = "0.7.0"
