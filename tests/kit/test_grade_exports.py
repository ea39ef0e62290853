"""Grading outputs as their real consumers read them: a CI server's JUnit schema, a spreadsheet, a merge.

One small class of the fixture course is graded once: a finished learner (optional lab included), one
whose package has a SyntaxError, an untouched one, three whose folder names a learner chose badly (a
formula, a U+2028 line separator, 31 Chinese characters), an empty folder and a folder of loose files.
The Jenkins JUnit schema is xunit-plugin's junit-10.xsd (see tests/kit/data/README.md).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml
from pi_course_kit import cli
from pi_course_kit.core import manifest
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import feedback, gradebook, junit, roster, workflow_yaml
from pi_course_kit.instructor.grade.gradebook import LabScore, LearnerRecord, TestVerdict
from pi_course_kit.learner import practice
from rich.cells import cell_len

FIXTURE = Path(__file__).with_name("fixture_course")
XSD = Path(__file__).with_name("data") / "jenkins-junit.xsd"
FORMULA = '=HYPERLINK("evil.example","open me")'
LINE_SEPARATOR = "line\u2028separator"
LONG_CHINESE = "学" * 31


@pytest.fixture(scope="module")
def fx() -> Course:
    """The fixture course: checkpoint a1 has labs 1.1 and 1.2 and the optional extra1."""
    return manifest.load(FIXTURE / "course.toml")


@pytest.fixture(scope="module")
def a1(fx: Course) -> Checkpoint:
    """The fixture's first checkpoint."""
    return fx.checkpoint("a1")


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    """The Jenkins JUnit XSD kept in the repository."""
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture(scope="module")
def strict_schema() -> xmlschema.XMLSchema:
    """The kept XSD with <skipped> declared as the older Jenkins schema declares it: a plain string.

    dtkit's junit-4.xsd (Jenkins' older schema, copied widely as "jenkins-junit.xsd") has
    `<xs:element name="skipped" type="xs:string"/>`: no `message` or `type` attribute.
    """
    text = XSD.read_text(encoding="utf-8")
    declared = re.search(r'<xs:element name="skipped">.*?</xs:element>', text, re.DOTALL)
    assert declared is not None
    return xmlschema.XMLSchema(
        text.replace(declared.group(), '<xs:element name="skipped" type="xs:string"/>')
    )


def make_class(course: Course, checkpoint: Checkpoint, root: Path) -> None:
    """The class below `root` (one level down each, so ids are paths): see the module docstring."""
    package = course.package
    for name in ("complete", "syntax", "untouched", FORMULA, LINE_SEPARATOR, LONG_CHINESE):
        folder = root / name / "pi-practice"
        folder.parent.mkdir(parents=True)
        practice.create(course, checkpoint, folder)
    shutil.copytree(
        course.root / checkpoint.solution / package,
        root / "complete/pi-practice" / package,
        dirs_exist_ok=True,
    )
    broken = root / "syntax/pi-practice" / package / checkpoint.teaching_files[0].split("/", 1)[1]
    broken.write_text("def broken(:\n    pass\n", encoding="utf-8")
    (root / "empty").mkdir()
    (root / "loose").mkdir()
    (root / "loose/counter.py").write_text("count = 0\n", encoding="utf-8")


@pytest.fixture(scope="module")
def graded(fx: Course, a1: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Grade the class once with every output; keep the exit code and what the terminal showed."""
    root = tmp_path_factory.mktemp("exports")
    make_class(fx, a1, root / "sub")
    out = root / "out"
    out.mkdir()
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        code = cli.main(
            [
                "grade",
                *("--course", str(FIXTURE)),
                *("--submissions-root", str(root / "sub")),
                *("--json", str(out / "grades.jsonl")),
                *("--csv", str(out / "grades.csv")),
                *("--junit", str(out / "junit.xml")),
                *("--feedback", str(out / "feedback")),
                *("--jobs", "2", "--timeout", "60"),
            ]
        )
    records = [
        json.loads(line) for line in (out / "grades.jsonl").read_text(encoding="utf-8").split("\n") if line
    ]
    return {
        "code": code,
        "out": out,
        "stdout": shown.getvalue(),
        "records": {r["learner"]: r for r in records},
    }


def suites(graded: dict[str, Any]) -> dict[str, ET.Element]:
    """The JUnit file's testsuites by learner id."""
    root = ET.parse(graded["out"] / "junit.xml").getroot()
    return {str(suite.get("name")): suite for suite in root.iter("testsuite")}


# -- JUnit ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.sandbox
def test_junit_of_the_class_validates_against_the_jenkins_schema(
    graded: dict[str, Any], schema: xmlschema.XMLSchema
) -> None:
    """Does the class's JUnit file (syntax error, optional lab) pass the Jenkins XSD without one error?"""
    errors = list(schema.iter_errors(str(graded["out"] / "junit.xml")))
    assert errors == []
    assert set(suites(graded)) == set(graded["records"])


@pytest.mark.slow
@pytest.mark.sandbox
def test_junit_of_the_class_with_a_skipped_test_validates_against_the_older_schema(
    graded: dict[str, Any], strict_schema: xmlschema.XMLSchema
) -> None:
    """With a skipped optional test, does the file pass the schema whose <skipped> has no attribute?"""
    root = ET.parse(graded["out"] / "junit.xml").getroot()
    assert root.find("testsuite/testcase/skipped") is not None
    assert list(strict_schema.iter_errors(str(graded["out"] / "junit.xml"))) == []


def test_a_skipped_test_is_valid_in_both_jenkins_schemas(
    fx: Course,
    a1: Checkpoint,
    tmp_path: Path,
    schema: xmlschema.XMLSchema,
    strict_schema: xmlschema.XMLSchema,
) -> None:
    """Are a skipped, a failed and a missing test valid in both schemas, the skip's reason its text?"""
    record = LearnerRecord("me", "/me", "partial", a1.id, seconds=0.5)
    record.labs = [LabScore(lab.id, lab.title, lab.optional, 0, 1, "failing") for lab in a1.labs]
    outcomes = ["skipped", "failed", "missing"]
    record.tests = [
        TestVerdict(f"tests/test_x.py::test_{lab.marker}", lab.id, outcome)
        for lab, outcome in zip(a1.labs, outcomes, strict=True)
    ]
    path = tmp_path / "junit.xml"
    junit.write(path, fx, [record])
    assert list(schema.iter_errors(str(path))) == []
    assert list(strict_schema.iter_errors(str(path))) == []
    (skipped,) = ET.parse(path).getroot().iter("skipped")
    assert skipped.attrib == {} and skipped.text == junit.SKIPPED_MESSAGE


@pytest.mark.slow
@pytest.mark.sandbox
def test_every_case_of_a_learner_whose_import_failed_carries_the_syntax_error(graded: dict[str, Any]) -> None:
    """Does each case of the syntax-error learner say which file failed to import, with the SyntaxError?"""
    cases = list(suites(graded)["syntax/pi-practice"].iter("testcase"))
    assert cases and all(case.find("error") is not None for case in cases)
    for case in cases:
        error = case.find("error")
        assert error is not None
        assert "SyntaxError" in str(error.get("message")) and "counter.py:1" in str(error.text)


@pytest.mark.slow
@pytest.mark.sandbox
def test_junit_times_are_the_measured_durations(graded: dict[str, Any]) -> None:
    """Are testcase times what the run measured: above 0.000 where the tests ran, 0 for a test the
    batch's proof vouched for (not run), and each suite's time the learner's run?"""
    durations: dict[str, float] = {}
    for learner in ("complete/pi-practice", "untouched/pi-practice"):
        suite, record = suites(graded)[learner], graded["records"][learner]
        assert float(str(suite.get("time"))) == pytest.approx(record["seconds"], abs=0.001)
        assert set(record["durations"]) == {verdict["nodeid"] for verdict in record["tests"]}
        by_name = {case.get("name"): float(str(case.get("time"))) for case in suite.iter("testcase")}
        assert by_name == {
            node.rsplit("::", 1)[1]: pytest.approx(seconds, abs=1e-6)
            for node, seconds in record["durations"].items()
        }
        assert all(seconds >= 0 for seconds in by_name.values())
        durations.update({f"{learner} {node}": seconds for node, seconds in record["durations"].items()})
    tests = [
        (f"{learner} {test['nodeid']}", test["proven"])
        for learner in ("complete/pi-practice", "untouched/pi-practice")
        for test in graded["records"][learner]["tests"]
    ]
    ran = [durations[key] for key, proven in tests if not proven]
    assert ran and sum(ran) > 0
    assert all(durations[key] == 0 for key, proven in tests if proven)


def test_xml_illegal_characters_in_a_failure_message_leave_the_file_well_formed(
    fx: Course, a1: Checkpoint, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    """Is a U+FFFF, NUL or lone surrogate in a failure message written as an escape, the file still valid?"""
    record = LearnerRecord("odd\uffffname", "/odd", "partial", a1.id, seconds=0.5)
    record.labs = [LabScore(lab.id, lab.title, lab.optional, 0, 1, "failing") for lab in a1.labs]
    record.labs[0].first_failure = "got '\uffff\x00\ud800' instead"
    record.tests = [TestVerdict(f"tests/test_x.py::test_{lab.marker}", lab.id, "failed") for lab in a1.labs]
    path = tmp_path / "junit.xml"
    junit.write(path, fx, [record])
    assert list(schema.iter_errors(str(path))) == []
    failure = ET.parse(path).getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == "got '\\uffff\\u0000\\ud800' instead"


# -- CSV -----------------------------------------------------------------------------------------------


def excel_rows(path: Path) -> dict[str, dict[str, str]]:
    """The CSV decoded as Excel decodes it: a UTF-8 BOM means UTF-8 (without one it would guess GBK)."""
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    rows = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""))
    return {row["learner"]: row for row in rows}


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_csv_opens_in_excel_with_formulas_as_text_and_no_zero_maximum(graded: dict[str, Any]) -> None:
    """Has the CSV a BOM, is an =HYPERLINK(...) id kept as text, and does a skipped row score 0/100?"""
    rows = excel_rows(graded["out"] / "grades.csv")
    assert f"'{FORMULA}/pi-practice" in rows and f"{FORMULA}/pi-practice" not in rows
    assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows.values() for cell in row.values())
    assert f"{LONG_CHINESE}/pi-practice" in rows  # the BOM keeps Chinese readable
    for skipped in ("empty", "loose"):
        assert rows[skipped]["status"] == "skipped"
        assert (rows[skipped]["score"], rows[skipped]["max_points"]) == ("0.0", "100.0")


def test_defuse_follows_the_owasp_rule_and_leaves_numbers_alone() -> None:
    """Does a text cell starting with = + - @ tab or CR get an apostrophe, numbers and other text not?"""
    for cell in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert gradebook.defuse(cell) == "'" + cell
    assert gradebook.defuse(-1.5) == -1.5 and gradebook.defuse("alice") == "alice"


# -- every folder and every roster row gets a row --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.sandbox
def test_every_folder_below_the_root_gets_a_row_with_its_reason(graded: dict[str, Any]) -> None:
    """Do an empty folder and a folder of loose .py files get a skipped row saying why, and the run exit 1?"""
    records = graded["records"]
    assert len(records) == 8 and graded["code"] == 1
    for name in ("empty", "loose"):
        assert records[name]["status"] == "skipped" and "meta.json" in records[name]["message"]


def test_roster_header_in_any_case_with_semicolons_and_bad_rows_kept(tmp_path: Path) -> None:
    """Is `Learner;Submission` read, and a blank cell, a repeated id or folder kept as a row with a reason?"""
    (tmp_path / "roster.csv").write_text(
        "\ufeffLearner ; SUBMISSION\nalice;a\nbob;\n;c\nalice;d\ncarol;a\n;\n", encoding="utf-8"
    )
    entries = roster.read_roster(tmp_path / "roster.csv")
    assert [(entry.learner, bool(entry.problem)) for entry in entries] == [
        ("alice", False),
        ("bob (roster row 3)", True),
        ("c (roster row 4)", True),
        ("alice (roster row 5)", True),
        ("carol (roster row 6)", True),
    ]
    problems = [entry.problem for entry in entries[1:]]
    assert "blank" in problems[0] and "blank" in problems[1]
    assert "already on row 2" in problems[2] and "already listed on row 2" in problems[3]


def test_a_roster_of_bad_rows_writes_every_row_and_exits_1(tmp_path: Path) -> None:
    """Does a roster whose rows all have a problem still write a CSV row for each, with exit 1, not 2?"""
    (tmp_path / "roster.csv").write_text("learner,submission\nbob,\n,c\n", encoding="utf-8")
    out = tmp_path / "grades.csv"
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(
            [
                "grade",
                *("--course", str(FIXTURE)),
                "--roster",
                str(tmp_path / "roster.csv"),
                "--csv",
                str(out),
            ]
        )
    rows = excel_rows(out)
    assert code == 1 and set(rows) == {"bob (roster row 2)", "c (roster row 3)"}
    assert all(row["status"] == "skipped" and "blank" in row["message"] for row in rows.values())


# -- learner-chosen names: merge, feedback files, the terminal table ---------------------------------------


@pytest.mark.slow
@pytest.mark.sandbox
def test_merge_accepts_a_line_separator_in_a_name_escaped_or_raw(
    graded: dict[str, Any], tmp_path: Path
) -> None:
    """Is U+2028 escaped in the JSON Lines, and does merge read it, even from a file that holds it raw?"""
    text = (graded["out"] / "grades.jsonl").read_text(encoding="utf-8")
    assert "\u2028" not in text and "\\u2028" in text
    raw = tmp_path / "raw.jsonl"
    raw.write_text(text.replace("\\u2028", "\u2028"), encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(
            ["grade", "merge", str(raw), "-o", str(tmp_path / "all.jsonl"), "--course", str(FIXTURE)]
        )
    assert code == 1  # the two skipped folders, not a refusal (2)
    learners = {record.learner for record in gradebook.read_json_lines([tmp_path / "all.jsonl"])}
    assert f"{LINE_SEPARATOR}/pi-practice" in learners and len(learners) == 8


@pytest.mark.slow
@pytest.mark.sandbox
def test_feedback_file_names_stay_within_200_bytes_and_apart(graded: dict[str, Any]) -> None:
    """Does every learner get a feedback file, the 31-character Chinese id too, each name <= 200 bytes?"""
    names = sorted(
        path.name for path in (graded["out"] / "feedback").iterdir() if path.name != feedback.INDEX
    )
    assert names == sorted(feedback.file_names(list(graded["records"])).values())
    assert all(len(name.encode("utf-8")) <= feedback.MAX_NAME_BYTES for name in names)
    first, second = feedback.file_name(LONG_CHINESE * 2 + "a"), feedback.file_name(LONG_CHINESE * 2 + "b")
    assert first != second and len(first) <= feedback.MAX_NAME_BYTES


def test_feedback_files_are_named_readably_and_listed_in_an_index(
    fx: Course, a1: Checkpoint, tmp_path: Path
) -> None:
    """Do a formula id, a Chinese id, `../../etc` and ids that collide get readable, distinct files inside the
    folder, each listed in index.csv?"""
    ids = [FORMULA, "张三/pi-practice", "../../etc", "a b", "a_b", "A_B", "=a b"]
    records = [LearnerRecord(learner, "/x", "not-started", a1.id) for learner in ids]
    folder = tmp_path / "feedback"
    written = feedback.write_all(fx, records, folder)
    names = [path.name for path in written]
    assert names[:4] == ["HYPERLINK(_evil.example_open_me_).md", "张三_pi-practice.md", "etc.md", "a_b.md"]
    assert [name.split("~")[0] for name in names[4:]] == ["a_b", "A_B", "a_b"]
    assert all(re.fullmatch(r"[^~]+~[0-9a-f]{8}\.md", name) for name in names[4:])
    assert len({name.casefold() for name in names}) == len(ids)
    assert all(path.parent == folder and path.is_file() for path in written)
    assert not any(name.startswith(("=", "+", "-", "@", ".")) for name in names)
    data = (folder / feedback.INDEX).read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    index = {
        row["learner"].removeprefix("'") if row["learner"].startswith("'=") else row["learner"]: row["file"]
        for row in rows
    }
    assert index == dict(zip(ids, names, strict=True))
    assert rows[0]["learner"] == "'" + FORMULA  # a spreadsheet shows the formula as text


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_terminal_table_lines_up_by_display_width_with_the_graded_labs_only(
    graded: dict[str, Any], a1: Checkpoint
) -> None:
    """Do Chinese ids keep the status column in line, and are the columns exactly a1's labs (no a2 lab)?"""
    lines = graded["stdout"].splitlines()
    header = next(line for line in lines if line.startswith("learner"))
    assert header.split()[3:-1] == [lab.id for lab in a1.labs]
    column = header.index("status")
    # The table writes a line separator as an escape: a raw one would break the row in two.
    names = [name.replace("\u2028", "\\u2028") for name in graded["records"]]
    rows = [line for line in lines if any(line.startswith(name) for name in names)]
    assert len(rows) == 8
    for line in rows:
        status = re.search(r"  (complete|error|not started|skipped)  ", line)
        assert status is not None and cell_len(line[: status.start(1)]) == column, line


# -- YAML ------------------------------------------------------------------------------------------------


def test_the_classroom_workflow_is_yaml_whatever_the_install_script_holds(a1: Checkpoint) -> None:
    """Does an install script with quotes, a colon and a newline stay one step's script, the workflow
    intact?"""
    install = "python -m pip install --quiet 'kit @ git+https://example.com/kit.git\"'\nrun: rm -rf ~\n"
    flow = yaml.safe_load(workflow_yaml.render(a1, install, "picourse"))
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    assert len(steps) == 5 and steps[2]["run"] == install
    assert flow["on"] == ["push", "repository_dispatch", "workflow_dispatch"]


# -- the deploy route: the container image and the Kubernetes Job ----------------------------------------

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_containerfile_pins_its_base_and_every_apt_package() -> None:
    """Is the base a named Debian release and every apt package `name=exact-version` (hadolint DL3008)?"""
    text = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim-(bookworm|trixie)$", text, re.MULTILINE)
    install = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", text, re.DOTALL)
    assert install is not None
    packages = install.group(1).replace("\\", " ").split()
    assert {p.split("=")[0] for p in packages} >= {"bubblewrap", "libseccomp2"}
    assert all(re.fullmatch(r"[a-z0-9.+-]+=[0-9][A-Za-z0-9.+~:-]*", p) for p in packages), packages


def test_the_image_and_the_job_grade_as_the_same_unprivileged_user_with_what_bubblewrap_needs() -> None:
    """Do the image's USER and the Job's runAsUser agree on one non-root uid, with seccomp and AppArmor
    opened?"""
    containerfile = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    user = re.search(r"^USER (\d+):(\d+)$", containerfile, re.MULTILINE)
    assert user is not None and int(user.group(1)) > 0
    job = yaml.safe_load((DEPLOY / "kubernetes/grade-job.yaml").read_text(encoding="utf-8"))
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(user.group(1))
    [container] = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "Unconfined"}
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    assert context["procMount"] == "Unmasked" and pod["hostUsers"] is False
    merge = yaml.safe_load((DEPLOY / "kubernetes/merge-job.yaml").read_text(encoding="utf-8"))
    assert merge["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(user.group(1))


def test_the_image_carries_the_course_parts_that_grading_reads(real_course: Course) -> None:
    """Does the Containerfile copy the manifest, the trees, the focused tests and every held-out test's
    folder?"""
    text = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    copied = set(re.findall(r"^COPY (\S+) /course/", text, re.MULTILINE))
    needed = {"course.toml", "labs", "solutions", "tests/focused"}
    needed |= {str(Path(path).parent) for cp in real_course.checkpoints for path in cp.held_out}
    assert needed <= copied
