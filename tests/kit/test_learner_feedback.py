"""Issue 11: learner feedback a learner can trust, reproduced in real practice folders (of the fixture
course)."""

from __future__ import annotations

import gettext
import json
import os
import re
import unicodedata
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from learner_support import make_folder, run_cli
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.core.regions import strip_solution
from pi_course_kit.core.runner import RunResult, run_tests

LOCALE = Path(__file__).resolve().parents[2] / "scripts" / "pi_course_kit" / "locale"


def folder_with(course: Course, checkpoint: Checkpoint, tmp: Path, unfinished: set[str]) -> Path:
    """A practice folder whose teaching files have every lab solved except `unfinished`."""
    folder = make_folder(course, checkpoint, tmp / "practice")
    for relative in checkpoint.teaching_files:
        solution = (course.root / checkpoint.solution / relative).read_text(encoding="utf-8")
        (folder / relative).write_text(strip_solution(solution, relative, unfinished), encoding="utf-8")
    return folder


def english(folder: Path, args: list[str]) -> RunResult:
    """Run pytest in the folder with English messages."""
    return run_tests(folder, args, env={**os.environ, "PI_COURSE_LANG": "en"})


COUNTER = "fx_course/counter.py"


def edit(folder: Path, old: str, new: str) -> None:
    """Replace `old` (which must occur) by `new` in the folder's counter.py."""
    counter = folder / COUNTER
    text = counter.read_text(encoding="utf-8")
    assert old in text
    counter.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_finished_lab_run_alone_never_says_every_lab_is_done(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With only 1.1 finished, does `-m lab1_1` point at Lab 1.2 instead of claiming every lab is done?"""
    folder = folder_with(course, checkpoint, tmp_path, {"1.2"})
    result = english(folder, ["-m", "lab1_1"])
    row = result.lab("1.1")
    assert row is not None and row.status == "done"
    assert "every" not in result.output.split("pi-course labs")[-1]
    assert result.next_step is not None and result.next_step.lab == "1.2"
    assert (result.next_step.location or "").startswith(f"{COUNTER}:")
    assert result.next_step.command == 'python -m pytest -m "lab1_2"'


def test_an_import_time_loop_ends_within_the_limit_naming_file_line_and_lab(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does `while True: pass` at the end of counter.py end the run with a red naming the file, its line and
    its lab?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    counter = folder / COUNTER
    lines = counter.read_text(encoding="utf-8").splitlines()
    counter.write_text("\n".join([*lines, "while True:", "    pass", ""]), encoding="utf-8")
    # The folder's import bound (30 s) made short: the loop burns the CPU until it ends.
    result = english(folder, ["-m", "lab1_1", "--timeout", "1", "-o", "pi_course_import_timeout=3"])
    assert result.finished
    (error,) = result.collect_errors
    assert error.location in (f"{COUNTER}:{len(lines) + 1}", f"{COUNTER}:{len(lines) + 2}")
    assert error.lab == "1.2" and "endless loop" in error.message


def test_a_loop_in_an_earlier_lab_blames_that_lab_and_blocks_the_later_one(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """A loop inside Counter.add run with `-m lab1_2`: is 1.2 blocked by 1.1 and the next step Lab 1.1?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    edit(
        folder, "        self.count += 1\n        return self.count", "        while True:\n            pass"
    )
    result = english(folder, ["-m", "lab1_2", "--timeout", "1"])
    row = result.lab("1.2")
    assert row is not None and row.status == "blocked" and row.blocked_by == "1.1"
    assert result.next_step is not None and result.next_step.lab == "1.1"
    assert result.next_step.function == "Counter.add"


def test_a_run_stopped_by_x_shows_a_partial_count(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With `-x` on a fresh folder, is the lab shown as 0 of 1 run out of all its tests, and the stop
    named?"""
    folder = make_folder(course, checkpoint, tmp_path / "practice")
    result = english(folder, ["-m", "lab1_1", "-x"])
    row = result.lab("1.1")
    assert row is not None and row.total == 1 and row.collected > 1
    assert f"0/1 of {row.collected}" in result.output
    assert "stopped early" in result.output


def test_some_passing_tests_with_own_stubs_left_is_in_progress() -> None:
    """Is a lab with passing tests and others stopping on its own stubs 'in progress', not 'not started'?"""
    from pi_course_kit.core.records import IN_PROGRESS, LabInfo, TestRecord, summarise

    records = [TestRecord("t::a", "6.1", "passed"), TestRecord("t::b", "6.1", "failed", exc_lab="6.1")]
    (row,) = summarise([LabInfo("6.1", "lab6_1")], records)
    assert row.status == IN_PROGRESS


@pytest.mark.parametrize(
    ("mutation", "lab", "expected"),
    [("add-two", "1.1", "At index 0 diff: 2 != 1"), ("reset-to-one", "1.2", "assert 1 == 0")],
)
def test_a_wrong_answer_shows_the_test_question_the_difference_and_an_edit_line(
    course: Course, checkpoint: Checkpoint, tmp_path: Path, mutation: str, lab: str, expected: str
) -> None:
    """For each typical mistake, does the next step give the test's name and question, the differing value and
    edit:?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    found = checkpoint.mutation(mutation)
    edit(folder, found.find, found.replace)
    step = english(folder, []).next_step
    assert step is not None and (step.lab, step.status) == (lab, "failing")
    assert step.what.startswith("test_") and step.question.endswith("?")
    assert expected in step.diff
    assert (step.location or "").startswith(f"{COUNTER}:") and (step.function or "").startswith("Counter.")


def test_reset_names_its_backup_and_undo_puts_the_version_back(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does reset say how to undo it, and does `reset --undo` restore the learner's file byte for byte?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    before = (folder / COUNTER).read_bytes()
    reset = run_cli(["--lang", "en", "reset", "1.2"], folder)
    assert reset.returncode == 0 and "pi-course reset --undo" in reset.stdout
    assert (folder / COUNTER).read_bytes() != before
    undo = run_cli(["--lang", "en", "reset", "--undo"], folder)
    assert undo.returncode == 0, undo.stderr
    assert (folder / COUNTER).read_bytes() == before


def test_diagnose_in_a_practice_folder_needs_show_solution(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does `pi-course diagnose a1 NAME` in a learner's folder refuse without --show-solution, showing no
    code?"""
    folder = make_folder(course, checkpoint, tmp_path / "practice")
    done = run_cli(["diagnose", "a1", "add-two"], folder)
    assert done.returncode != 0 and "--show-solution" in done.stderr
    assert "count" not in done.stdout


def test_bare_hint_during_a_syntax_error_names_it_and_never_gives_the_optional_hint(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """After the next step pointed at extra1, does a bare hint during a syntax error name the line and a
    required lab?"""
    folder = folder_with(course, checkpoint, tmp_path, {"1.2"})
    meta = folder / ".pi-course" / "meta.json"
    data = json.loads(meta.read_text(encoding="utf-8"))
    meta.write_text(json.dumps({**data, "last_next_lab": "extra1"}), encoding="utf-8")
    counter = folder / COUNTER
    counter.write_text(counter.read_text(encoding="utf-8") + "\ndef broken(:\n", encoding="utf-8")
    done = run_cli(["--lang", "en", "hint"], folder)
    assert done.returncode == 0
    assert "does not parse" in done.stdout and "extra1" not in done.stdout


def test_the_report_speaks_the_courses_language_by_default_and_another_on_request(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Does a plain run print the table in the course's language (the fixture's English), and Chinese on
    request?"""
    folder = make_folder(course, checkpoint, tmp_path / "practice")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LANG", "LC_ALL", "LC_MESSAGES", "LANGUAGE", "PI_COURSE_LANG")
    }
    assert "next: Lab 1.1 (not started)" in run_tests(folder, ["-m", "lab1_1"], env=env).output
    chinese = run_tests(folder, ["-m", "lab1_1"], env={**env, "PI_COURSE_LANG": "zh_CN"})
    assert "下一步：Lab 1.1（未开始）" in chinese.output


def test_the_compiled_catalog_matches_its_po_file() -> None:
    """Does every translation of the .po file come out of the committed .mo file unchanged (is the .mo
    fresh)?"""
    for po in LOCALE.glob("*/LC_MESSAGES/pi_course.po"):
        with po.open("rb") as handle:
            catalog = read_po(handle)
        with po.with_suffix(".mo").open("rb") as handle:
            compiled = gettext.GNUTranslations(handle)
        for message in catalog:
            if message.id:
                assert message.string, message.id
                assert compiled.gettext(str(message.id)) == message.string, message.id


def test_every_message_of_the_catalog_is_defined_once() -> None:
    """Is each msgid written once in the .po file (msgfmt -c refuses a duplicate; Babel keeps the last
    one)?"""
    for po in LOCALE.glob("*/LC_MESSAGES/pi_course.po"):
        with po.open("rb") as handle:
            catalog = read_po(handle)
        written = re.findall(r"^msgid ", po.read_text(encoding="utf-8"), re.MULTILINE)
        # Babel merges a duplicate into one entry; the file's header is a msgid of its own.
        assert len(written) == len(catalog) + 1, f"{po}: a msgid is defined more than once"


def test_an_older_record_never_hides_this_runs_red_after_an_edit(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """After 1.1 was seen failing and then fixed, does a failing `-m lab1_2` run point at 1.2, not at 1.1?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    solved = (folder / COUNTER).read_text(encoding="utf-8")
    add_two, reset_to_one = checkpoint.mutation("add-two"), checkpoint.mutation("reset-to-one")
    edit(folder, add_two.find, add_two.replace)
    seen = english(folder, ["-m", "lab1_1"]).lab("1.1")
    assert seen is not None and seen.status == "failing"
    (folder / COUNTER).write_text(solved.replace(reset_to_one.find, reset_to_one.replace), encoding="utf-8")
    result = english(folder, ["-m", "lab1_2"])
    assert result.next_step is not None
    assert (result.next_step.lab, result.next_step.status) == ("1.2", "failing")
    assert "assert 1 == 0" in result.next_step.diff


def test_a_lab_recorded_done_is_unchecked_again_once_the_package_changes(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """Once every lab passed, an edit then a green `-m lab1_2` run: is 1.1 named as not run, never done?"""
    folder = folder_with(course, checkpoint, tmp_path, set())
    everything = english(folder, []).next_step
    assert everything is None or everything.optional
    counter = folder / COUNTER
    counter.write_text(counter.read_text(encoding="utf-8") + "\n# an edit\n", encoding="utf-8")
    result = english(folder, ["-m", "lab1_2"])
    assert result.next_step is not None
    assert (result.next_step.lab, result.next_step.status) == ("1.1", "not run")


def test_the_optional_exercise_is_never_suggested_once_it_is_done(
    course: Course, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """With every lab and the optional exercise green, is nothing left to suggest (no optional advice)?"""
    assert [lab.id for lab in checkpoint.labs if lab.optional] == ["extra1"]
    folder = folder_with(course, checkpoint, tmp_path, set())
    for relative in checkpoint.solution_only:
        (folder / relative).write_bytes((course.root / checkpoint.solution / relative).read_bytes())
    result = english(folder, [])
    assert all(row.status == "done" for row in result.labs)
    assert result.next_step is None
    tail = result.output.split("pi-course labs")[-1]
    assert "optional" not in tail and "every required lab is done" in tail


def test_table_columns_line_up_in_chinese_by_display_width(real_course: Course, tmp_path: Path) -> None:
    """A deliberate 06 example (Chinese lab titles, as a learner of a real chapter sees them): in the Chinese
    table, does every row's title start at the same terminal column as the header's?"""
    checkpoint = real_course.checkpoint("06")
    folder = folder_with(real_course, checkpoint, tmp_path, {"6.3"})
    output = run_tests(folder, [], env={**os.environ, "PI_COURSE_LANG": "zh_CN"}).output.split(
        "pi-course labs"
    )[-1]
    titles = {lab.id: lab.title for lab in checkpoint.labs}
    rows = [line for line in output.splitlines()[1:] if line.split()[:1] and line.split()[0] in titles]
    header = next(line for line in output.splitlines() if "标题" in line)

    def column(line: str, text: str) -> int:
        before = line[: line.index(text)]
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in before)

    starts = {column(row, titles[row.split()[0]]) for row in rows}
    assert len(rows) >= 3 and starts == {column(header, "标题")}
