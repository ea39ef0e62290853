"""One run, one language: the learner commands speak the run's language only.

An English course (the fixture, under LANG=en_US.UTF-8) yields no Chinese line, and the Chinese course
(checkpoint 01, with no language named) no English one, apart from code and the course's literal messages.

What counts as code or literal, and so is never judged (kept narrow on purpose):
- a Markdown code span (`...`);
- the course's literal first-red message, `Lab <id> not implemented: <name>` (the same in every course);
- a token that is plainly code: it holds one of / . _ = < > [ ] { } | @ $ or a digit, starts with `-`
  (an option) or a quote (a quoted value), is written in capitals only (a metavar such as DIR), is one of
  the command words `pi-course`, `python`, `pytest`, `cd`, or is the subcommand right after `pi-course`;
- the word `lab`/`Lab`, which the Chinese catalog keeps as the name of a lab (`Lab 1.1`, the `lab` column).

A line of a Chinese run is English when it holds no Chinese character and still holds an English word,
or when it holds three English words in a row (a sentence). A line of an English run is Chinese when it
holds any CJK character (ideograph or full-width punctuation) outside code spans.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURE
from learner_support import CLI
from pi_course_kit.core import i18n
from pi_course_kit.core.i18n import QUESTIONS_EN, read_questions
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.records import first_paragraph
from pi_course_kit.instructor.grade import cli as grade_cli
from sample_class import sample_class

CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
CODE_SPAN = re.compile(r"`[^`\n]*`")
LITERAL = re.compile(r"Lab \S+ not implemented: [\w.]+")
CODE_CHARS = re.compile(r"[/._=<>\[\]{}|@$0-9]")
CODE_WORDS = {"pi-course", "python", "pytest", "cd", "lab", "Lab"}
WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
#: Punctuation around a token that does not make it code: (default: → default.
EDGES = "()（）,，;；:：!！?？\"'“”‘’…—–·*#"
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "PI_COURSE_LANG")


def _tokens(line: str) -> list[str]:
    """The line's words with code spans, literal messages and code tokens replaced by a break ("")."""
    text = LITERAL.sub(" \0 ", CODE_SPAN.sub(" \0 ", line))
    out: list[str] = []
    after_cli = False
    for raw in text.split():
        token = raw.strip(EDGES)
        code = (
            not token
            or "\0" in token
            or bool(CODE_CHARS.search(token))
            or token.startswith("-")
            or raw[0] in "'\""
            or (token.isupper() and len(token) > 1)
            or token in CODE_WORDS
            or after_cli
        )
        after_cli = token == "pi-course"
        out.append("" if code else token)
    return out


def english_words(line: str) -> list[list[str]]:
    """Runs of consecutive English words outside code, e.g. [["stopped", "watching"]]."""
    runs: list[list[str]] = [[]]
    for token in _tokens(line):
        if token and WORD.fullmatch(token):
            runs[-1].append(token)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def english_line(line: str) -> bool:
    """Is this line (of a Chinese run) English: no Chinese and a word left, or a sentence of 3+ words?"""
    runs = english_words(line)
    return bool(runs) and (not CJK.search(line) or max(len(run) for run in runs) >= 3)


def chinese_line(line: str) -> bool:
    """Is this line (of an English run) Chinese: a CJK character outside code spans?"""
    return bool(CJK.search(CODE_SPAN.sub("", line)))


def test_the_detectors_tell_the_languages_apart() -> None:
    """Do the detectors flag English prose and Chinese text, and pass code, options and literal messages?"""
    assert english_line("pi-course check: interrupted")
    assert english_line("可选迁移练习：新建 uppercase.py / optional transfer: create a Tool named uppercase")
    assert not english_line("下一步：Lab 1.1（未开始）—— Lab 1.1 not implemented: format_event —— 把它换掉")
    assert not english_line("  运行：python -m pytest -m lab1_1   （或：pi-course check --lab 1.1）")
    assert not english_line("用法：pi-course reset [-h] [--all] [--undo] [lab]")
    assert not english_line("                   [-v]")
    assert chinese_line("pi-course check：错误：没有检查点 '6'")
    assert not chinese_line("next: Lab 1.1 (not started) — edit `fx_course/counter.py`")


def _env(language: str | None) -> dict[str, str]:
    # The suite's own PYTEST_ADDOPTS (a CI's --junitxml, --durations) are not the learner's: their lines
    # would be the outer run's English, written into the inner run's output.
    leave = (*LOCALE_VARIABLES, "PYTHONPATH", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in leave}
    if language:
        env["LANG"] = language
    return env


def _run(args: list[str], cwd: Path, language: str | None) -> str:
    done = subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env=_env(language),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode in (0, 1, 2), (args, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, (args, done.stderr[-2000:])
    return done.stdout + done.stderr


def learner_session(course: Path, checkpoint: Checkpoint, root: Path, language: str | None) -> dict[str, str]:
    """Every learner command a first session meets, its output keyed by the command line."""
    lab = checkpoint.labs[0].id
    folder = root / "practice"
    course_option = ["--course", str(course)]
    outputs: dict[str, str] = {}

    def run(args: list[str], cwd: Path = folder) -> None:
        outputs[" ".join(args)] = _run(args, cwd, language)

    run(["practice", checkpoint.id, str(folder), *course_option], root)
    outputs["LAB-GUIDE.md"] = (folder / "LAB-GUIDE.md").read_text(encoding="utf-8")
    run(["practice", "nope", str(root / "other"), *course_option], root)  # an unknown checkpoint
    run(["practice"], root)  # argparse: missing arguments
    run(["no-such-command"], root)  # argparse: invalid choice
    run(["checkpoint", *course_option], root)
    run(["checkpoint", checkpoint.id, str(root / "copies"), *course_option], root)
    for command in ("practice", "checkpoint", "check", "hint", "reset", "status", "watch", "diff"):
        run([command, "--help"])
    run(["check"])
    run(["check", "--lab", lab])
    run(["check", "--lab", "9.9"])
    run(["check", "--timeout", "0"])
    run(["hint"])
    run(["hint", "--all"])
    run(["hint", "9.9"])
    run(["status", "--no-run"])
    run(["reset"])
    run(["reset", lab])
    run(["reset", "--undo"])
    run(["diff", checkpoint.id, ".", "--stat", *course_option])
    return outputs


def _offending(outputs: dict[str, str], judge: object) -> list[str]:
    assert callable(judge)
    return [
        f"{command}: {line}" for command, text in outputs.items() for line in text.splitlines() if judge(line)
    ]


def test_an_english_course_under_an_english_locale_prints_no_chinese_line(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Under LANG=en_US.UTF-8, do practice, checkpoint, check, hint, status, reset, diff and their errors
    print no Chinese?"""
    assert course.language == "en"
    outputs = learner_session(FIXTURE, checkpoint, tmp_path, "en_US.UTF-8")
    assert "next: Lab 1.1" in outputs["check"]  # the session really ran
    assert _offending(outputs, chinese_line) == []


def test_the_chinese_course_with_no_language_named_prints_no_english_line(
    real_course: Course, tmp_path: Path
) -> None:
    """With no locale, do the same commands on the Chinese course (01) print no English line but code?"""
    checkpoint = next(c for c in real_course.checkpoints if not c.observation)
    assert real_course.language == "zh_CN"
    outputs = learner_session(real_course.root, checkpoint, tmp_path, None)
    assert "下一步：Lab" in outputs["check"]
    assert _offending(outputs, english_line) == []


#: Every command the kit has, learner's and instructor's: each one's --help is a page a person reads.
ALL_COMMANDS = (
    "practice", "checkpoint", "check", "watch", "hint", "reset", "status",
    "build-labs", "diff", "diagnose", "verify", "grade", "export", "nbrun",
)  # fmt: skip


@pytest.mark.parametrize(("language", "judge"), [(None, english_line), ("en_US.UTF-8", chinese_line)])
def test_every_commands_help_speaks_the_runs_one_language(
    real_course: Course, tmp_path: Path, language: str | None, judge: object
) -> None:
    """Do `pi-course --help` and every command's --help, instructor's too, speak only the run's language?"""
    outputs = {"--help": _run(["--help"], tmp_path, language)}
    for command in ALL_COMMANDS:
        outputs[f"{command} --help"] = _run([command, "--help"], tmp_path, language)
    assert all("--help" in text for text in outputs.values())  # each page really printed
    # A command's name on a line of its own (argparse wraps a long one) is code, not prose.
    pages = {
        page: "\n".join(line for line in text.splitlines() if line.strip() not in ALL_COMMANDS)
        for page, text in outputs.items()
    }
    assert _offending(pages, judge) == []


@pytest.mark.parametrize("where", ["before", "after"])
def test_lang_is_taken_before_or_after_the_command(real_course: Course, tmp_path: Path, where: str) -> None:
    """Does `--lang en` switch a usage error to English whether it comes before or after the command?"""
    args = ["--lang", "en", "practice"] if where == "before" else ["practice", "--lang", "en"]
    output = _run(args, tmp_path, None)
    assert "error: the following arguments are required: CHECKPOINT, DIR" in output
    assert not any(chinese_line(line) for line in output.splitlines())


# -- the course's prose in both languages ---------------------------------------------------------

QUOTED = re.compile(r"\"[^\"\n]*\"")


def _focused_tests(course: Course) -> dict[str, dict[str, str]]:
    """Each focused test module's test functions and the questions their docstrings ask."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted((course.root / "tests" / "focused").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found[path.stem] = {
            node.name: first_paragraph(ast.get_docstring(node) or "")
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
    return found


def test_every_focused_test_asks_its_question_in_chinese_and_has_its_english_form(
    real_course: Course,
) -> None:
    """Is each focused test's question Chinese, with an English form in questions_en.toml and nothing
    stale?"""
    questions = read_questions(real_course.root / "tests" / "focused" / QUESTIONS_EN)
    tests = _focused_tests(real_course)
    assert {(m, t) for m, names in tests.items() for t in names} == {
        (m, t) for m, names in questions.items() for t in names
    }
    english = [
        f"{m}::{t}: {doc}" for m, names in tests.items() for t, doc in names.items() if english_line(doc)
    ]
    assert english == []
    not_chinese = [
        f"{m}::{t}" for m, names in tests.items() for t, doc in names.items() if not CJK.search(doc)
    ]
    assert not_chinese == []
    # The English form may quote a literal message of the course (Chinese) in a code span or in quotes.
    chinese = [
        f"{m}::{t}: {text}"
        for m, names in questions.items()
        for t, text in names.items()
        if chinese_line(QUOTED.sub("", text)) or not text.endswith("?")
    ]
    assert chinese == []


def test_a_question_wrapped_across_lines_is_read_whole() -> None:
    """Is a question wrapped in the source read whole: no space added at a break between two Chinese
    characters, one space at a break beside a Latin word, and the paragraph after a blank line left out?"""
    doc = """取消恰好在 shell 启动期间到达时，
        是否仍然生效：命令被结束，结果是
        aborted 吗？

        这一段是说明，不是问题。"""
    assert (
        first_paragraph(doc)
        == "取消恰好在 shell 启动期间到达时，是否仍然生效：命令被结束，结果是 aborted 吗？"
    )
    assert first_paragraph("Does the call end\n    with `aborted`?\n\n    Details.") == (
        "Does the call end with `aborted`?"
    )
    assert first_paragraph("") == ""


def test_every_question_a_focused_test_asks_ends_as_a_question(real_course: Course) -> None:
    """Does every focused test's question, read whole, end with a question mark (no question cut at a
    line break)?"""
    cut = [
        f"{module}::{name}: {question}"
        for module, names in _focused_tests(real_course).items()
        for name, question in names.items()
        if "？" not in question and "?" not in question
    ]
    assert cut == []


def test_every_lab_and_checkpoint_of_the_course_has_its_english_title_and_hints(real_course: Course) -> None:
    """Does every checkpoint have title_en, and every lab title_en and as many hints_en as hints, in
    English?"""
    for checkpoint in real_course.checkpoints:
        assert checkpoint.title_en and not chinese_line(checkpoint.title_en), checkpoint.id
        for lab in checkpoint.labs:
            assert lab.title_en and not chinese_line(lab.title_en), lab.id
            assert len(lab.hints_en) == len(lab.hints), lab.id
            assert not [hint for hint in lab.hints_en if chinese_line(QUOTED.sub("", hint))], lab.id


def test_the_course_title_names_the_whole_course_in_the_run_s_language(
    real_course: Course, tmp_path: Path
) -> None:
    """Does the checkpoint listing open with the whole course's title: Chinese by default, title_en in
    English?"""
    assert real_course.title_en and not chinese_line(real_course.title_en)
    assert CJK.search(real_course.title)
    course = ["--course", str(real_course.root)]
    assert _run(["checkpoint", *course], tmp_path, None).splitlines()[0].startswith(real_course.title)
    english = _run(["checkpoint", *course], tmp_path, "en_US.UTF-8").splitlines()[0]
    assert english.startswith(real_course.title_en)


def test_every_checkpoint_has_its_agent_notes_in_chinese_and_in_english(real_course: Course) -> None:
    """Does every checkpoint carry the three agent notes in Chinese, and their English forms with no
    Chinese?"""
    for checkpoint in real_course.checkpoints:
        zh, en = checkpoint.agent_notes, checkpoint.agent_notes_en
        assert zh is not None and en is not None, checkpoint.id
        assert all(CJK.search(text) for text in (zh.predict, zh.not_yet, zh.acceptance)), checkpoint.id
        assert not [text for text in (en.predict, en.not_yet, en.acceptance) if chinese_line(text)], (
            checkpoint.id
        )


def test_the_chinese_course_in_an_english_locale_speaks_english(real_course: Course, tmp_path: Path) -> None:
    """Under LANG=en_US.UTF-8, do both guides, check (with a wrong value planted) and hint of 01 show no
    Chinese?"""
    checkpoint = next(c for c in real_course.checkpoints if not c.observation)
    folder = tmp_path / "practice"
    _run(["practice", checkpoint.id, str(folder)], tmp_path, "en_US.UTF-8")
    for relative in checkpoint.teaching_files:
        shutil.copyfile(real_course.root / checkpoint.solution / relative, folder / relative)
    mutation = checkpoint.mutations[0]
    target = folder / mutation.file
    target.write_text(
        target.read_text(encoding="utf-8").replace(mutation.find, mutation.replace), encoding="utf-8"
    )
    outputs = {
        "LAB-GUIDE.md": (folder / "LAB-GUIDE.md").read_text(encoding="utf-8"),
        "AGENT-GUIDE.md": (folder / "AGENT-GUIDE.md").read_text(encoding="utf-8"),
        "check": _run(["check"], folder, "en_US.UTF-8"),
        "hint": _run(["hint", checkpoint.labs[0].id], folder, "en_US.UTF-8"),
    }
    questions = read_questions(real_course.root / "tests" / "focused" / QUESTIONS_EN)
    asked = [q for names in questions.values() for q in names.values() if q in outputs["check"]]
    assert len(asked) == 1, outputs["check"]  # the failing test's question, in English
    assert checkpoint.labs[0].hints_en[0] in outputs["hint"]
    assert _offending(outputs, chinese_line) == []


def test_the_grading_summary_speaks_the_runs_one_language(
    real_course: Course,
    each_checkpoint: Checkpoint,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Does `grade`'s class summary, after a run, come out wholly in Chinese for the Chinese course, and
    wholly in English with PI_COURSE_LANG=en (the status words aside, which are the gradebook's codes)?"""
    records, _mutations = sample_class(real_course, each_checkpoint)
    statuses = sorted({str(record.status) for record in records}, key=len, reverse=True)
    for language, foreign in (("zh_CN", english_line), ("en", chinese_line)):
        monkeypatch.setenv(i18n.LANG_ENV, language)
        monkeypatch.setattr(i18n, "_current", None)
        grade_cli._print_summary(real_course, records)
        lines = capsys.readouterr().out.splitlines()
        assert lines

        def bare(line: str) -> str:
            for status in statuses:
                line = line.replace(status, "")
            return line

        assert [line for line in lines if foreign(bare(line))] == [], language


#: pytest's and Hypothesis's own English, which a Chinese run of the focused tests must not show.
PYTEST_ENGLISH = (
    "test session starts",
    "FAILURES",
    "short test summary info",
    "stopping after",
    "DID NOT RAISE",
    "Regex pattern did not match",
    "Expected regex:",
    "Actual message:",
    "Use -v to get more diff",
    "Full output truncated",
    "Failing test case",
    " passed",
    " failed",
    "collected ",
    "platform ",
    "slowest ",
    " durations",
    "generated xml file",
)


def _pytest_run(folder: Path, args: list[str], language: str | None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],  # the venv's own python, as an activated venv runs it
        cwd=folder,
        env=_env(language),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    "mistake",
    [
        # pytest.raises(match=...) sees another message: "Regex pattern did not match", "Expected regex:".
        ('f"tool call {call_id} 缺少配对结果"', 'f"tool call {call_id} unpaired"'),
        # The dangling call is let through: "DID NOT RAISE ValueError", and Hypothesis's failing case.
        ('raise ValueError(f"tool call {call_id} 缺少配对结果")', "pass"),
    ],
)
def test_a_chinese_pytest_run_shows_none_of_pytests_own_english(
    real_course: Course, tmp_path: Path, mistake: tuple[str, str]
) -> None:
    """In a Chinese 00 folder with a planted mistake, does `python -m pytest` (also with -x and --durations)
    show no pytest English?

    Section titles, counts, the short summary and the explanations inside a failure come in Chinese; the
    test's code and its values stay as they are. The next step asks the failing test's question.
    """
    checkpoint = real_course.checkpoint("00")
    folder = tmp_path / "practice"
    _run(["practice", checkpoint.id, str(folder)], tmp_path, None)
    target = folder / checkpoint.teaching_files[0]
    text = target.read_text(encoding="utf-8")
    assert mistake[0] in text
    target.write_text(text.replace(mistake[0], mistake[1]), encoding="utf-8")
    # The learner's own options add sections of their own: `--durations`' table, `--junitxml`'s line.
    for args in ([], ["-x"], ["-x", "--durations=3", f"--junitxml={tmp_path / 'run.xml'}"]):
        output = _pytest_run(folder, args, None)
        shown = [phrase for phrase in PYTEST_ENGLISH if phrase in output]
        assert shown == [], output[-4000:]
        # Lines that are not the test's own source (indented) nor a failure's `E` lines: Chinese or code.
        prose = [
            line
            for line in output.splitlines()
            if line.strip() and not line.startswith((" ", "E ", "_", "tests/test_")) and english_line(line)
        ]
        assert prose == [], prose
        step = next(line for line in output.splitlines() if line.startswith("下一步：Lab 0.2"))
        assert "？" in step  # the failing test's question, in Chinese
    # The kit's own report of the same run: its `差异：` lines carry pytest's explanation, translated.
    checked = _run(["check"], folder, None)
    assert [phrase for phrase in PYTEST_ENGLISH if phrase in checked] == [], checked
    assert _offending({"check": checked}, english_line) == []
