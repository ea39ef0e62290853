"""The learner's Hypothesis profile keeps a red about as fast as a green; grading's profile is untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FOCUSED = Path(__file__).resolve().parent.parent / "focused"

# Loaded in its own interpreter: importing strategies loads a profile, which would change this process's.
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import strategies
from hypothesis import settings
out = {}
for name in (strategies.LEARNER, strategies.GRADING):
    profile = settings.get_profile(name)
    out[name] = {
        "phases": [phase.name for phase in profile.phases],
        "report_multiple_bugs": profile.report_multiple_bugs,
        "max_examples": profile.max_examples,
        "derandomize": profile.derandomize,
    }
print(json.dumps(out))
"""


def test_a_learner_run_shrinks_one_failure_without_explaining_while_grading_keeps_the_defaults(
    tmp_path: Path,
) -> None:
    """Does the learner profile skip the explain phase and further bugs, and grading keep every phase?"""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PI_COURSE_HYPOTHESIS": "learner"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(FOCUSED)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    profiles = json.loads(done.stdout)
    learner, grading = profiles["learner"], profiles["grading"]
    assert "explain" not in learner["phases"] and "shrink" in learner["phases"]
    assert learner["report_multiple_bugs"] is False
    assert "explain" in grading["phases"] and "shrink" in grading["phases"]
    assert grading["report_multiple_bugs"] is True
    assert (grading["max_examples"], grading["derandomize"]) == (60, True)
