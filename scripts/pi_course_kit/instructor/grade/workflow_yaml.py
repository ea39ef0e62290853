"""The GitHub Classroom workflow as YAML, written by PyYAML rather than by string formatting.

What an instructor passes in (`--kit`: a bundled wheel and its sha256, or a git URL pinned to a commit) lands
in the file; built as data and dumped, a quote, a colon or a newline in it can never change the
workflow's structure.
"""

from __future__ import annotations

from typing import Any

import yaml

from pi_course_kit.core.manifest import Checkpoint


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the `run:` scripts stay readable); keys keep their order."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def header(checkpoint: Checkpoint) -> str:
    """The comment block on top of the workflow: what wrote it, and why it runs without a sandbox."""
    return (
        f"# GitHub Classroom autograding for checkpoint {checkpoint.id} ({checkpoint.slug}), written by\n"
        f"# `pi-course export classroom {checkpoint.id}`. It grades this repository with the kit's own\n"
        "# pristine focused tests (edits under tests/ change nothing) and reports points per lab to GitHub\n"
        "# Classroom. It grades with --unsafe (no bubblewrap sandbox): this throwaway runner belongs to the\n"
        "# learner, who also controls this file, so a sandbox would protect nothing here (and Ubuntu\n"
        "# runners restrict user namespaces). The tests are still the installed kit's pristine ones.\n"
        "# The kit comes from the instructor's own wheel, checked by sha256, or from a pinned commit of the\n"
        "# instructor's repository: never from a package name that anyone could claim.\n"
    )


def document(checkpoint: Checkpoint, install: str, runner: str) -> dict[str, Any]:
    """The workflow as data: install the kit, grade with --classroom, hand the result to the reporter."""
    result = f"$RUNNER_TEMP/{runner}.json"
    grade = (
        f'pi-course grade . --checkpoint {checkpoint.id} --unsafe --classroom "{result}" || true\n'
        f'test -s "{result}"\n'
        f'echo "result=$(base64 -w0 "{result}")" >> "$GITHUB_OUTPUT"\n'
    )
    return {
        "name": "Autograding Tests",
        "on": ["push", "repository_dispatch", "workflow_dispatch"],
        "permissions": {"checks": "write", "actions": "read", "contents": "read"},
        "jobs": {
            "run-autograding-tests": {
                "name": "Autograding Tests",
                "runs-on": "ubuntu-latest",
                "if": "github.actor != 'github-classroom[bot]'",
                "steps": [
                    {"uses": "actions/checkout@v4"},
                    {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
                    {
                        "name": "Install the pi-course kit",
                        "run": install,
                    },
                    {"name": f"Grade checkpoint {checkpoint.id}", "id": runner, "run": grade},
                    {
                        "name": "Report points to GitHub Classroom",
                        "uses": "classroom-resources/autograding-grading-reporter@v1",
                        "env": {f"{runner.upper()}_RESULTS": f"${{{{ steps.{runner}.outputs.result }}}}"},
                        "with": {"runners": runner},
                    },
                ],
            }
        },
    }


def render(checkpoint: Checkpoint, install: str, runner: str) -> str:
    """The workflow file's text: the comment block, then the document dumped by PyYAML."""
    body = yaml.dump(
        document(checkpoint, install, runner),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=110,
        default_flow_style=False,
    )
    return header(checkpoint) + body
