"""The learner's language: gettext catalogs (domain `pi_course`), the course's language by default, English
fallback.

Standard library only: this file travels into every staged tree as `tests/pi_course_i18n.py`, next to
the compiled catalogs in `tests/pi_course_locale/`, so the report plugin speaks the same language as the kit.
"""

from __future__ import annotations

import gettext
import os
import re
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
    """The language of the practice folder around `start`: its course.toml snapshot's `[course] language`.

    The snapshot is the folder's one record of the course it was made from (its labs, its language), so
    this reads no meta.json field.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".pi-course" / "meta.json").is_file():
            return manifest_language(folder / ".pi-course" / "course.toml")
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
    """Make `language` the default of every later message (when neither the learner nor the locale names
    one)."""
    global _course_language, _current
    _course_language, _current = language or FALLBACK, None


def course_language() -> str:
    """The course's language, as the manifest (or the staged tree's pytest.ini) gave it."""
    return _course_language


def _base(language: str) -> str:
    return language.split(":")[0].split(".")[0].split("@")[0].split("_")[0].split("-")[0].lower()


def speaks_english() -> bool:
    """Whether this run speaks English (the msgids themselves)."""
    return _base((requested_languages() or [""])[0]) == "en"


def wants_english() -> bool:
    """Whether this run speaks English while the course is written in another language.

    Course prose (lab titles, hints, test questions) then takes its English form where the course gives one.
    """
    return speaks_english() and _base(_course_language) != "en"


#: Beside the focused tests: the English form of each test's question (its docstring's first line), by
#: module then test function, e.g. `[test_06_tool_contract]` / `test_x = "Does ...?"`.
QUESTIONS_EN = "questions_en.toml"
_questions: dict[Path, dict[str, dict[str, str]]] = {}


def read_questions(path: Path) -> dict[str, dict[str, str]]:
    """The English questions of a questions file (empty when it is missing or unreadable)."""
    if path not in _questions:
        import tomllib

        try:
            with path.open("rb") as handle:
                data = tomllib.load(handle)
        except (OSError, ValueError):
            data = {}
        _questions[path] = {
            module: {name: text for name, text in table.items() if isinstance(text, str)}
            for module, table in data.items()
            if isinstance(table, dict)
        }
    return _questions[path]


def english_question(test_file: Path, function: str) -> str | None:
    """A focused test's question in English, when this run speaks English and the course does not."""
    if not wants_english():
        return None
    return read_questions(test_file.parent / QUESTIONS_EN).get(test_file.stem, {}).get(function)


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


def _catalog() -> gettext.NullTranslations:
    global _current
    if _current is None:
        _current = translation()
    return _current


def _(message: str) -> str:
    """The message in the learner's language."""
    return _catalog().gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    """The singular or plural message in the learner's language."""
    return _catalog().ngettext(singular, plural, count)


def _language_named() -> bool:
    """Whether PI_COURSE_LANG, a locale variable or a practice folder already names the language."""
    if os.environ.get(LANG_ENV, "").strip():
        return True
    for name in _LOCALE_VARIABLES:
        if os.environ.get(name, "").strip().split(".")[0].split("@")[0] not in _NEUTRAL:
            return True
    return folder_language() is not None


def manifest_language(manifest: Path) -> str | None:
    """`[course] language` of a course.toml, read without parsing the whole file (the CLI starts fast)."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    table = re.search(r"^\[course\][ \t]*$(.*?)(?=^\[)", text + "\n[", re.MULTILINE | re.DOTALL)
    found = re.search(r'^language\s*=\s*"([^"\n]+)"', table.group(1), re.MULTILINE) if table else None
    return found.group(1) if found else None


def prepare_cli(manifest: Path | None) -> None:
    """Before the command line is parsed: argparse's own lines (usage, errors, headings) through this
    catalog, and the course's language known even before the manifest is loaded.

    argparse asks gettext's default domain, which holds no translation of its lines: they go through
    this catalog instead (their msgids are in the .po files), so a usage error speaks the run's language.
    """
    import argparse

    setattr(argparse, "_", _)  # noqa: B010 (argparse reads its module-level name at call time)
    setattr(argparse, "ngettext", ngettext)  # noqa: B010
    if manifest is not None and not _language_named():
        language = manifest_language(manifest)
        if language:
            set_course_language(language)
