"""Transfer exercise: a second tool built from the same parts, touching neither registry nor executor."""

from __future__ import annotations

from .messages import text
from .tool import Tool, ToolContext, ToolOutput, object_schema, string_value

uppercase_schema = object_schema({"value": string_value})


async def _uppercase(parameters: dict[str, str], context: ToolContext) -> ToolOutput[dict[str, str]]:
    return ToolOutput(content=[text(parameters["value"].upper())], details={"source": "uppercase"})


uppercase: Tool[dict[str, str], dict[str, str]] = Tool(
    name="uppercase",
    description="Return the value in upper case",
    schema=uppercase_schema,
    execute=_uppercase,
)
