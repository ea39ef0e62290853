"""Checkpoint 15: `tool_search`, a model-only tool that activates tools the model has not been shown yet.

The model gives keywords; the tool ranks the `codemode` / `deferred` tools that are not active by how
many query terms their search text shares, and activates the best ones. The loop's declaration patch
(Lab 15.3) then declares them from the next request on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from .messages import text
from .tool import (
    Schema,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    exposure_of_tool,
    object_schema,
    optional_positive_integer,
    string_value,
)

TOOL_SEARCH_TOOL_NAME = "tool_search"
DEFAULT_TOOL_SEARCH_LIMIT = 8


@dataclass
class ToolSearchDocument:
    """One tool as the ranker sees it: its name and the search text `tool_search_document` built."""

    name: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"name": self.name, "text": self.text}


@dataclass
class ToolSearchMatch:
    """A ranked tool: how many distinct query terms its search text holds."""

    name: str
    score: int

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"name": self.name, "score": self.score}


class ToolSearchDetails(TypedDict):
    """The `details` of a tool_search result: the tools this call activated, in registration order.

    A plain dict (a TypedDict), not a dataclass: it is JSON and travels into a session file as it is.
    """

    loaded: list[str]


# ## terms and search text (given)

STOP_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in",
        "is", "it", "of", "on", "or", "that", "the", "this", "to", "with",
    }
)  # fmt: skip

_PLURAL_SUFFIX = re.compile(r"(ches|shes|sses|xes|zes)$")


def _stem(term: str) -> str:
    """A naive singular: issues → issue, searches → search, repos → repo."""
    if len(term) > 4 and term.endswith("ies"):
        return f"{term[:-3]}y"
    if len(term) > 4 and _PLURAL_SUFFIX.search(term):
        return term[:-2]
    if len(term) > 3 and term.endswith("s") and not term.endswith("ss"):
        return term[:-1]
    return term


def tokenize(value: str) -> list[str]:
    """Lower-case terms, split at camelCase boundaries and at every run of non-alphanumerics (ASCII),
    stop words dropped, each made singular."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", value)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    terms = re.split(r"[^a-z0-9]+", spaced.lower())
    return [_stem(term) for term in terms if term and term not in STOP_WORDS]


def _schema_text(schema: object, parts: list[str]) -> None:
    """Collect a JSON Schema's descriptions and property names, depth first."""
    if not isinstance(schema, dict):
        return
    description = schema.get("description")
    if isinstance(description, str):
        parts.append(description)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            parts.append(str(name))
            _schema_text(child, parts)
    _schema_text(schema.get("items"), parts)


def tool_search_document(tool: Tool[Any, Any]) -> ToolSearchDocument:
    """A tool's search text: its name, the name with `_` read as spaces, its description, and its
    schema's descriptions and property names; blank parts left out."""
    parts = [tool.name, tool.name.replace("_", " "), tool.description]
    _schema_text(getattr(tool.schema, "json_schema", None), parts)
    return ToolSearchDocument(name=tool.name, text=" ".join(part for part in parts if part.strip()))


# ## Lab 15.4 · rank by shared terms, activate the matches


def rank_tools(query: str, documents: Sequence[ToolSearchDocument], limit: int) -> list[ToolSearchMatch]:
    """Score each document by the number of distinct query terms it holds (the course's ranking; Pi
    uses BM25). No overlap, no match; equal scores keep document order; at most `limit` matches."""
    # BEGIN LAB 15.4
    query_terms = list(dict.fromkeys(tokenize(query)))
    if not query_terms or not documents or limit <= 0:
        return []
    matches: list[ToolSearchMatch] = []
    for document in documents:
        terms = set(tokenize(document.text))
        score = sum(1 for term in query_terms if term in terms)
        if score > 0:
            matches.append(ToolSearchMatch(name=document.name, score=score))
    # sorted() is stable: a tie keeps the documents' order.
    return sorted(matches, key=lambda match: -match.score)[:limit]
    # END LAB 15.4


def search_candidates(registry: ToolRegistry) -> list[Tool[Any, Any]]:
    """The tools a search may activate: `codemode` / `deferred` tools that are not active yet."""
    # BEGIN LAB 15.4
    return [
        tool
        for tool in registry.list()
        if exposure_of_tool(tool) in ("codemode", "deferred") and not registry.is_active(tool.name)
    ]
    # END LAB 15.4


def search_summary(registry: ToolRegistry, loaded: Sequence[str]) -> str:
    """What the model reads back: the tools loaded, each with the first line of its description."""
    # BEGIN LAB 15.4
    if not loaded:
        return "No matching tools found."
    lines = []
    for name in loaded:
        tool = registry.get(name)
        first = re.split(r"\r?\n", tool.description.strip())[0] if tool is not None else ""
        lines.append(f"- {name}: {first}")
    plural = "" if len(loaded) == 1 else "s"
    return f"Loaded {len(loaded)} tool{plural}. They are available from your next call:\n" + "\n".join(lines)
    # END LAB 15.4


def create_tool_search_tool(
    registry: ToolRegistry, *, limit: int | None = None
) -> Tool[dict[str, Any], ToolSearchDetails]:
    """The model-only `tool_search` tool over `registry`; `limit` caps each call's activations (default 8).

    Its description names no searchable tool on purpose: tools registered later (an MCP server that
    connects) leave tool_search's own declaration unchanged.
    """
    schema: Schema[dict[str, Any]] = object_schema(
        {"query": string_value, "limit": optional_positive_integer}
    )

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[ToolSearchDetails]:
        # BEGIN LAB 15.4 create_tool_search_tool.execute
        query: str = parameters["query"]
        wanted: int | None = parameters["limit"]
        if not query.strip():
            raise ValueError("query 不能为空")
        default_limit = limit if limit is not None else DEFAULT_TOOL_SEARCH_LIMIT
        documents = [tool_search_document(tool) for tool in search_candidates(registry)]
        matches = rank_tools(query, documents, wanted if wanted is not None else default_limit)
        loaded = registry.activate([match.name for match in matches])
        return ToolOutput(content=[text(search_summary(registry, loaded))], details={"loaded": loaded})
        # END LAB 15.4

    return Tool(
        name=TOOL_SEARCH_TOOL_NAME,
        description=(
            "Search tools that are not loaded yet by keyword and load the matches; "
            "they are declared from your next call."
        ),
        schema=schema,
        execute=execute,
        exposure="model-only",
    )
