"""The learner's language: gettext catalogs (domain `pi_course`), the course's language by default, English fallback.

Standard library only: this file travels into every staged tree as `tests/pi_course_i18n.py`, next to
the compiled catalogs in `tests/pi_course_locale/`, so the report plugin speaks the same language as the kit.
"""

from __future__ import annotations

import gettext
import json
import os
from pathlib import Path

DOMAIN = "pi_course"
#: Set by `pi-course --lang` (and passed on to the test run); wins over the locale variables.
LANG_ENV = "PI_COURSE_LANG"
#: English is what the messages are written in: the language when nothing names another.
FALLBACK = "en"
_LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
_NEUTRAL = {"", "C", "POSIX"}


def locale_dirs() -> list[Path]:
    """Where the compiled catalogs may be: inside the kit, or beside this file in a staged tree."""
    here = Path(__file__).resolve().parent
    return [here.parent / "locale", here / "pi_course_locale"]


def folder_language(start: Path | None = None) -> str | None:
    """The language recorded in a practice folder's `.pi-course/meta.json` (the course's, when made)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        meta = folder / ".pi-course" / "meta.json"
        if meta.is_file():
            try:
                value = json.loads(meta.read_text(encoding="utf-8")).get("language")
            except (OSError, ValueError, AttributeError):
                return None
            return value if isinstance(value, str) else None
    return None


def requested_languages() -> list[str]:
    """The languages to try, best first: PI_COURSE_LANG, the locale variables, the folder's, the course's."""
    chosen = os.environ.get(LANG_ENV, "").strip()
    if chosen:
        return [chosen]
    for name in _LOCALE_VARIABLES:
        value = os.environ.get(name, "").strip()
        # A C/POSIX locale (containers, CI) asks for no language at all: the course's own applies.
        base = value.split(".")[0].split("@")[0]
        if base not in _NEUTRAL:
            return [part for part in value.split(":") if part] if name == "LANGUAGE" else [value]
    return [folder_language() or _course_language]


def translation(languages: list[str] | None = None) -> gettext.NullTranslations:
    """The catalog for the requested languages; English (the msgids themselves) when none matches."""
    wanted = languages if languages is not None else requested_languages()
    for directory in locale_dirs():
        if directory.is_dir():
            found = gettext.translation(DOMAIN, directory, languages=wanted, fallback=True)
            if type(found) is not gettext.NullTranslations:
                return found
    return gettext.NullTranslations()


_current: gettext.NullTranslations | None = None
# course.toml's [course] language. The kit sets it when it reads the manifest; in a staged tree the
# report plugin sets it from pytest.ini, which the kit writes from the manifest.
_course_language = FALLBACK


def set_course_language(language: str) -> None:
    """Make `language` the default of every later message (when neither the learner nor the locale names one)."""
    global _course_language, _current
    _course_language, _current = language or FALLBACK, None


def course_language() -> str:
    """The course's language, as the manifest (or the staged tree's pytest.ini) gave it."""
    return _course_language


def is_known(language: str) -> bool:
    """Whether `language` is English (the messages themselves) or one a catalog exists for."""
    if language.split(".")[0].split("_")[0] == "en":
        return True
    return any(d.is_dir() and gettext.find(DOMAIN, d, languages=[language]) for d in locale_dirs())


def use(language: str | None) -> None:
    """Switch every later message to `language` (None: choose again from the environment)."""
    global _current
    if language:
        os.environ[LANG_ENV] = language  # the test run in its own interpreter follows too
    _current = None


def _(message: str) -> str:
    """The message in the learner's language."""
    global _current
    if _current is None:
        _current = translation()
    return _current.gettext(message)
