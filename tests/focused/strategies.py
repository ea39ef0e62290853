"""Hypothesis strategies shared by the focused tests, and the profiles they run under (learner, grading)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import Phase, configuration, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILE = "pi-course"

# A folder under this very file can never be created: every cache write fails quietly.
NO_STORAGE = Path(__file__) / "no-hypothesis-storage"


def hypothesis_home() -> Path:
    """Where Hypothesis keeps its caches: a per-user folder outside the practice folder, or nowhere."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        cache = Path(base) if Path(base).is_absolute() else Path.home() / ".cache"
        home = (cache / "pi-course" / "hypothesis").resolve()
        here = Path(__file__).resolve().parent.parent
        # A cache inside the folder under test would leave files in the learner's folder.
        if home.is_relative_to(here) or home.is_relative_to(Path.cwd().resolve()):
            return NO_STORAGE
        home.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home directory, or a read-only one
        return NO_STORAGE
    return home if os.access(home, os.W_OK) else NO_STORAGE


# Hypothesis would keep its caches (unicode tables, constants) in ./.hypothesis, inside the learner's
# folder; a per-user cache keeps the unicode table between runs instead of rebuilding it every time.
configuration.set_hypothesis_home_dir(hypothesis_home())

# Grading (verify, grade, CI, any tree that is not a practice folder): no example database (a run
# writes nothing into the folder), no deadline (a slow machine is not a failure), a fixed seed (every
# learner sees the same counterexample), 60 examples per property.
settings.register_profile(
    PROFILE,
    database=None,
    deadline=None,
    max_examples=60,
    derandomize=True,
    print_blob=False,
)
#: The same profile under the name `PROFILE_ENV` selects it by.
GRADING = "grading"
settings.register_profile(GRADING, settings.get_profile(PROFILE))
#: A learner's lab run in a practice folder: fewer examples for a quick loop, and an example database
#: in the folder's own .pi-course/, so a counterexample found once is replayed first on the next run.
#: A red comes back about as fast as a green: the first failure found is shrunk and reported, with no
#: hunt for further distinct failures and no explain phase (which traces every line of a failing example
#: over and over, and took a planted 10.4 mistake to the 10 s time-out). Grading keeps Hypothesis's
#: defaults.
LEARNER = "learner"
#: `PI_COURSE_HYPOTHESIS=grading|learner` chooses; by default a practice folder runs `learner`.
PROFILE_ENV = "PI_COURSE_HYPOTHESIS"


def practice_database() -> Path | None:
    """The example database of the practice folder these tests run in; None outside a practice folder."""
    meta = Path(__file__).resolve().parent.parent / ".pi-course"
    return meta / "hypothesis" if (meta / "meta.json").is_file() else None


def choose_profile() -> str:
    """The profile for this run: the environment's choice, else `learner` in a practice folder."""
    wanted = os.environ.get(PROFILE_ENV, "")
    if wanted in (GRADING, LEARNER):
        return wanted
    return LEARNER if practice_database() is not None else GRADING


_database = practice_database()
settings.register_profile(
    LEARNER,
    database=DirectoryBasedExampleDatabase(_database) if _database is not None else None,
    deadline=None,
    max_examples=20,
    derandomize=False,
    print_blob=False,
    report_multiple_bugs=False,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)
settings.load_profile(choose_profile())

#: Field names of the chapter's request schema, plus one it does not declare.
FIELD_NAMES = ("value", "label", "limit", "ignored")

#: A fixed alphabet (ASCII, CJK, an emoji, a NUL) keeps Hypothesis away from its unicode tables.
ALPHABET = "Pi value:_ 0\x00值必须是π🙂"
short_text = st.text(alphabet=ALPHABET, max_size=8)

json_scalars: st.SearchStrategy[Any] = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | short_text
)

#: Anything `json.loads` could hand over (NaN and infinities included, as Python's json allows them).
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(short_text, children, max_size=3),
    max_leaves=8,
)

#: JSON objects whose keys are often the declared fields, with any values at all.
json_objects: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.sampled_from(FIELD_NAMES) | short_text, json_values, max_size=5
)

#: Values that are not JSON objects: what a confused model might send instead of `{...}`.
not_objects: st.SearchStrategy[Any] = (
    json_scalars | st.lists(json_values, max_size=3) | st.tuples(json_scalars)
)

#: Floats that JSON would write as a whole number (`2.0`), positive and at most 2**53.
integral_floats: st.SearchStrategy[float] = st.integers(min_value=1, max_value=2**53).map(float)

#: Arguments the chapter's request schema accepts, sometimes with an undeclared extra key.
request_arguments: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"value": short_text},
    optional={
        "label": st.none() | short_text,
        "limit": st.none() | st.integers(min_value=1) | integral_floats,
        "ignored": json_values,
    },
)
