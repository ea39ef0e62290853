"""What a provider receives: a `ToolDefinition` in the OpenAI and Anthropic tool formats, schema-checked.

Definitions are taken by duck typing (`name`, `description`, `parameters` attributes, or a dict with
those keys), so the kit never imports `pi_course`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from markupsafe import Markup

from pi_course_kit.core.markup import el, style
from pi_course_kit.core.schemas import draft_2020_12
from pi_course_kit.notebook.views import PRE, json_html


def _fields(definition: object) -> tuple[str, str, dict[str, Any]]:
    if isinstance(definition, Mapping):
        name, description, parameters = (
            definition.get("name"),
            definition.get("description"),
            definition.get("parameters"),
        )
    else:
        name = getattr(definition, "name", None)
        description = getattr(definition, "description", None)
        parameters = getattr(definition, "parameters", None)
    if not isinstance(name, str) or not isinstance(description, str) or not isinstance(parameters, dict):
        raise TypeError(
            "not a tool definition: need str name, str description and dict parameters, got "
            f"{type(definition).__name__}"
        )
    # A copy: a provider request must never share a dict with the tool's own schema.
    return name, description, copy.deepcopy(parameters)


def to_openai(definition: object) -> dict[str, Any]:
    """OpenAI Chat Completions `tools[]` entry: a function with JSON Schema `parameters`."""
    name, description, parameters = _fields(definition)
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def to_anthropic(definition: object) -> dict[str, Any]:
    """Anthropic Messages `tools[]` entry: the same schema under `input_schema`."""
    name, description, parameters = _fields(definition)
    return {"name": name, "description": description, "input_schema": parameters}


def schema_problems(schema: object) -> list[str]:
    """Problems of one tool parameter schema: Draft 2020-12 meta-schema errors, and a non-object top level."""
    if not isinstance(schema, dict):
        return [f"schema 必须是 JSON 对象，现在是 {type(schema).__name__}"]
    validator, schema_error = draft_2020_12()
    problems = []
    try:
        validator.check_schema(schema)
    except schema_error as error:
        found: Any = error  # a jsonschema SchemaError: absolute_path and message
        where = "/".join(str(part) for part in found.absolute_path) or "顶层"
        problems.append(f"不是合法的 JSON Schema 2020-12（位置 {where}）：{found.message}")
    # Both providers describe tool input as one JSON object.
    if schema.get("type") != "object":
        problems.append(f'工具参数的顶层必须是 "type": "object"，现在是 {schema.get("type")!r}')
    return problems


@dataclass
class ProviderPair:
    """The same content as OpenAI and Anthropic receive it, side by side, with one verdict per key.

    Shared by the tool definitions (06) and the transcript on the wire (07): they differ only in the
    titles, the words of a passing verdict, and whether the verdicts lead.
    """

    openai: list[dict[str, Any]]
    anthropic: list[dict[str, Any]]
    problems: dict[str, list[str]]

    #: What a passing verdict says after its name.
    PASSED: ClassVar[str] = ""
    #: The two titles in plain text, then in HTML.
    TEXT_TITLES: ClassVar[tuple[str, str]] = ("OpenAI", "Anthropic")
    HTML_TITLES: ClassVar[tuple[str, str]] = ("OpenAI", "Anthropic")
    #: True: the verdicts come first, in bold (they are the point of the view).
    VERDICTS_FIRST: ClassVar[bool] = False

    @property
    def valid(self) -> bool:
        """True when every key passed its checks."""
        return not any(self.problems.values())

    def verdicts(self) -> list[str]:
        """One line per key: `✓ name：…` or `✗ name：problem；problem`."""
        return [
            f"✓ {name}：{self.PASSED}" if not found else f"✗ {name}：" + "；".join(found)
            for name, found in self.problems.items()
        ]

    def __str__(self) -> str:
        dump = json.dumps
        return "\n".join(
            [
                self.TEXT_TITLES[0],
                dump(self.openai, ensure_ascii=False, indent=2),
                self.TEXT_TITLES[1],
                dump(self.anthropic, ensure_ascii=False, indent=2),
                *self.verdicts(),
            ]
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        def column(title: str, entries: list[dict[str, Any]]) -> Markup:
            # One line per entry, so both formats fit side by side; the pretty JSON stays collapsed.
            lines = [
                el(
                    "div",
                    json.dumps(entry, ensure_ascii=False),
                    style=style(PRE, "border-left:3px solid #d0d7de;padding-left:6px"),
                )
                for entry in entries
            ]
            return el(
                "div",
                el("b", title),
                lines,
                json_html(entries, f"{title}（完整 JSON）", open_lines=0),
                style="min-width:0",
            )

        verdicts = [
            el(
                "div",
                el("b", line) if self.VERDICTS_FIRST else line,
                style=f"color:{'#1a7f37' if line.startswith('✓') else '#cf222e'}",
            )
            for line in self.verdicts()
        ]
        columns = el(
            "div",
            column(self.HTML_TITLES[0], self.openai),
            column(self.HTML_TITLES[1], self.anthropic),
            style="display:grid;grid-template-columns:1fr 1fr;column-gap:12px",
        )
        body = [verdicts, columns] if self.VERDICTS_FIRST else [columns, verdicts]
        return str(el("div", body, style="font-size:12px"))


class ProviderTools(ProviderPair):
    """The definitions as each provider receives them, with the meta-schema verdict per tool."""

    PASSED = "符合 JSON Schema 2020-12"
    TEXT_TITLES = ("OpenAI (chat.completions tools):", "Anthropic (messages tools):")
    HTML_TITLES = ("OpenAI · tools[]", "Anthropic · tools[]")


def provider_tools(definitions: Iterable[object]) -> ProviderTools:
    """Translate every definition for both providers and check each parameter schema."""
    items = list(definitions)
    problems: dict[str, list[str]] = {}
    for item in items:
        name, _, parameters = _fields(item)
        problems[name] = schema_problems(parameters)
    return ProviderTools(
        openai=[to_openai(item) for item in items],
        anthropic=[to_anthropic(item) for item in items],
        problems=problems,
    )
