"""`pi-course export gradescope|classroom CHECKPOINT -o OUT`: grading where instructors already are.

gradescope: an autograder zip (setup.sh, run_autograder, the kit's source, the checkpoint's pristine course).
classroom: the GitHub Classroom workflow, written into a learner's practice repository.
"""

from __future__ import annotations

import argparse
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pi_course_kit
from pi_course_kit.core.errors import KitError
from pi_course_kit.core.files import replace_file
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import classroom, gradescope
from pi_course_kit.instructor.options import add_manifest_option, load_course

#: What the grading path imports inside the autograder image (the rest of the kit's dependencies is not
#: needed), each pinned as pyproject.toml pins it (a kit test keeps the two equal).
REQUIREMENTS = (
    "pytest>=8.4",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "jsonschema>=4.21",
    "httpx>=0.27",
    "pyseccomp>=0.1.2; sys_platform == 'linux'",
    "inotify_simple>=2; sys_platform == 'linux'",
    "psutil>=5.9",
)
SKIP = ("__pycache__", ".pytest_cache", ".mypy_cache", ".hypothesis")

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once while building the autograder image (Ubuntu): bubblewrap for the sandbox,
# Python >= 3.11 in /autograder/venv, and what the grading path imports.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq bubblewrap libseccomp2 python3 python3-venv >/dev/null
python=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    apt-get install -y -qq python3.11 python3.11-venv >/dev/null
    python=python3.11
fi
"$python" -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet -r /autograder/source/requirements.txt
# The kit importable by the venv's own processes (the solution's traced run loads its proof plugin by
# name); the sandbox's copy of the site leaves path files out, so a learner's run never sees it.
site="$(/autograder/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo /autograder/source/kit > "$site/pi_course_kit.pth"
# Run the solution once now, traced, and keep it: each submission then reads it back and runs only the
# tests its changes reach. Should it fail here, every submission runs the solution itself, slower.
PYTHONPATH=/autograder/source/kit /autograder/venv/bin/python -m pi_course_kit.instructor.grade.gradescope \\
    --checkpoint {checkpoint} --root /autograder --prepare \\
    || echo "setup: no kept reference; grading still works"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission. It grades /autograder/submission with the kit's pristine
# tests in the kit's sandbox and writes /autograder/results/results.json.
# PI_COURSE_AUTOGRADER_ROOT replaces /autograder (tests use a temporary one); PI_COURSE_PYTHON the venv.
set -euo pipefail
root="${{PI_COURSE_AUTOGRADER_ROOT:-/autograder}}"
python="${{PI_COURSE_PYTHON:-$root/venv/bin/python}}"
export PI_COURSE_AUTOGRADER_ROOT="$root"
export PYTHONPATH="$root/source/kit"
exec "$python" -m pi_course_kit.instructor.grade.gradescope --checkpoint {checkpoint} --root "$root"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the target, the checkpoint and the output."""
    parser.add_argument("target", choices=("gradescope", "classroom"), help=_("where the grades go"))
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help=_("checkpoint id, e.g. 06"))
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="OUT",
        help=_(
            "gradescope: the zip to write; classroom: the learner's repository (gets "
            ".github/workflows/classroom.yml)"
        ),
    )
    parser.add_argument(
        "--kit",
        default=None,
        metavar="WHEEL|GIT-URL@COMMIT",
        help=_(
            "classroom: the kit the workflow installs: a wheel file (bundled, checked by sha256) or "
            "git+https://HOST/YOU/REPO.git@COMMIT (a full commit hash)"
        ),
    )
    add_manifest_option(parser)


def lineage(course: Course, checkpoint: Checkpoint) -> list[Checkpoint]:
    """The checkpoint and its ancestors, oldest first."""
    chain = [checkpoint]
    while (parent := course.parent_of(chain[0])) is not None:
        chain.insert(0, parent)
    return chain


def _files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if (
            path.is_file()
            and not path.is_symlink()
            and not set(path.parts) & set(SKIP)
            and path.suffix != ".pyc"
        ):
            yield path


def bundle_files(course: Course, checkpoint: Checkpoint) -> dict[str, Path]:
    """Archive name -> source file: the kit's source and the course (manifest, trees and tests of the
    lineage)."""
    files: dict[str, Path] = {}
    kit = Path(pi_course_kit.__file__).resolve().parent
    for path in _files(kit):
        relative = path.relative_to(kit)
        if relative.parts[0] != "course":  # the wheel's bundled learner course; the full one follows
            files[f"kit/pi_course_kit/{relative.as_posix()}"] = path
    files["course/course.toml"] = course.path
    for member in lineage(course, checkpoint):
        for tree in (member.solution, member.starter):
            for path in _files(course.root / tree):
                files[f"course/{path.relative_to(course.root).as_posix()}"] = path
        for test in (*member.tree_tests, *member.tree_support, *member.held_out):  # held-out: grading only
            files[f"course/{test}"] = course.root / test
    return files


def _add_text(archive: zipfile.ZipFile, name: str, text: str | bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    mode = 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, text)


def write_gradescope(course: Course, checkpoint: Checkpoint, output: Path) -> int:
    """Write the autograder zip atomically; return how many files it holds."""
    files = bundle_files(course, checkpoint)

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w") as archive:
            _add_text(archive, "setup.sh", SETUP.format(checkpoint=checkpoint.id), executable=True)
            _add_text(
                archive, "run_autograder", RUN_AUTOGRADER.format(checkpoint=checkpoint.id), executable=True
            )
            # Pinned to the versions installed here, what it needs included (gradescope.pinned_requirements).
            pinned = gradescope.pinned_requirements([*REQUIREMENTS, *course.requires])
            _add_text(archive, "requirements.txt", "\n".join(pinned) + "\n")
            for name, path in files.items():
                _add_text(archive, name, path.read_bytes())

    replace_file(output, write)
    return len(files) + 3


def write_classroom(checkpoint: Checkpoint, repository: Path, kit: str | None) -> Path:
    """Write the workflow (and the kit's wheel, when --kit names one) into a learner's repository."""
    # Built as data and dumped by PyYAML; the kit is pinned by sha256 or commit (classroom.kit_source).
    return classroom.write_workflow(checkpoint, repository, kit)


def run(args: argparse.Namespace) -> int:
    """Write the chosen export; exit 0."""
    output: Path = args.output
    course = load_course(args)
    checkpoint = course.checkpoint(args.checkpoint)
    if args.target == "gradescope":
        if not output.parent.is_dir():
            raise KitError(
                f"-o {output}: folder {output.parent} does not exist; create it or choose another file"
            )
        if output.is_dir():
            raise KitError(f"-o {output}: is a folder; give the zip file's name, e.g. autograder.zip")
        count = write_gradescope(course, checkpoint, output)
        print(
            f"wrote {output} ({count} files): upload it as the Gradescope autograder of checkpoint "
            f"{checkpoint.id}"
        )
        return 0
    if not output.is_dir():
        raise KitError(f"-o {output}: not a folder; give the learner's practice repository")
    target = write_classroom(checkpoint, output, args.kit)
    print(f"wrote {target}: commit it to the assignment's template repository")
    return 0
