"""How to add one of the kit's extras to the install that is running, named from where it came from.

`pi-course-kit` is not on the package index, so `pip install 'pi-course-kit[instructor]'` would fetch
whatever someone else published under that name. Advice names the source this install really came from:
the wheel file or the checkout that pip or uv recorded (PEP 610, `direct_url.json`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "pi-course-kit"


def installed_from() -> tuple[Path, bool] | None:
    """The local wheel file or folder this kit was installed from, and whether it is editable; None if
    unknown."""
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        record = json.loads(text) if text else None
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    if not isinstance(record, dict) or not str(record.get("url", "")).startswith("file://"):
        return None
    path = Path(unquote(urlparse(str(record["url"])).path))
    dir_info = record.get("dir_info")
    editable = isinstance(dir_info, dict) and dir_info.get("editable") is True
    if path.is_dir() or (path.suffix == ".whl" and path.is_file()):
        return path, editable
    return None


def install_command(extra: str) -> str | None:
    """A command that adds `extra` to this install from its own source, or None when that source is gone."""
    source = installed_from()
    if source is None:
        return None
    path, editable = source
    python = shlex.quote(sys.executable)
    # A venv made by `uv venv` has no pip of its own: uv then installs into it.
    pip = (
        f"{python} -m pip install" if importlib.util.find_spec("pip") else f"uv pip install --python {python}"
    )
    target = shlex.quote(f"{path}[{extra}]")
    return f"{pip} -e {target}" if editable else f"{pip} {target}"
