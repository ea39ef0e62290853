"""jsonschema's Draft 2020-12 validator, imported on first use and without its slowest optional part."""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

# rfc3987_syntax compiles a grammar when imported (about 2.5 s on the course machine), and jsonschema
# imports it only to check the "iri" formats, which no schema of the kit uses (the Draft 2020-12
# meta-schema and Gradescope's results fields included). Blocking it while jsonschema loads keeps a
# notebook run and an export short without changing what a validation reports.
_SLOW_OPTIONAL = "rfc3987_syntax"


@cache
def draft_2020_12() -> tuple[Any, type[Exception]]:
    """jsonschema's Draft 2020-12 validator class and its SchemaError, imported once and quickly."""
    blocked = _SLOW_OPTIONAL not in sys.modules and "jsonschema" not in sys.modules
    if blocked:
        sys.modules[_SLOW_OPTIONAL] = None  # type: ignore[assignment]
    try:
        # Stubs (types-jsonschema) may or may not be installed; the two names used here are covered by the
        # kit's tests.
        from jsonschema import Draft202012Validator  # type: ignore[import-untyped,unused-ignore]
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped,unused-ignore]
    finally:
        if blocked:
            del sys.modules[_SLOW_OPTIONAL]
    return Draft202012Validator, SchemaError
