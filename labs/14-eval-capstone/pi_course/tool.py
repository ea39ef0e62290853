"""Checkpoint 06: one tool call crosses three boundaries — schema, registry, executor."""

from __future__ import annotations

import builtins
import copy
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .messages import AbortSignal, TextContent, ToolCall, ToolDefinition, ToolResultMessage, text

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = TypeVar("P")
D = TypeVar("D")


# ## Lab 6.1 · validators and object_schema


class ValidationError(ValueError):
    """The model sent arguments that the schema refuses."""


class Validator(Generic[T]):
    """A callable field check that also carries the JSON Schema it stands for."""

    def __init__(
        self,
        check: Callable[[object], T],
        json_schema: dict[str, Any] | None = None,
        optional: bool = False,
    ) -> None:
        self._check = check
        self.json_schema = json_schema
        self.optional = optional
        self.__name__ = getattr(check, "__name__", "validator")
        self.__doc__ = check.__doc__

    def __call__(self, value: object) -> T:
        """Check one field value and return it, narrowed to `T`."""
        return self._check(value)

    def __repr__(self) -> str:
        return f"<Validator {self.__name__} {self.json_schema}>"


def validator(
    *, json_schema: dict[str, Any] | None = None, optional: bool = False
) -> Callable[[Callable[[object], T]], Validator[T]]:
    """Turn a plain check function into a `Validator` with metadata attached."""

    def wrap(check: Callable[[object], T]) -> Validator[T]:
        return Validator(check, json_schema, optional)

    return wrap


@validator(json_schema={"type": "string"})
def string_value(value: object) -> str:
    """Accept a str and return it unchanged."""
    # BEGIN LAB 6.1
    if not isinstance(value, str):
        raise ValidationError("必须是 string")
    return value
    # END LAB 6.1


@validator(json_schema={"type": "string"}, optional=True)
def optional_string(value: object) -> str | None:
    """Accept an omitted field (None) or a str."""
    # BEGIN LAB 6.1
    if value is not None and not isinstance(value, str):
        raise ValidationError("必须是 string")
    return value
    # END LAB 6.1


@validator(json_schema={"type": "integer", "minimum": 1}, optional=True)
def optional_positive_integer(value: object) -> int | None:
    """Accept an omitted field (None) or a whole number >= 1; JSON's 2.0 becomes 2."""
    # BEGIN LAB 6.1
    if value is None:
        return None
    # bool is a subclass of int, but True is not a count.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise ValidationError("必须是正整数")
    # END LAB 6.1


class Schema(Protocol[T_co]):
    """Anything with `parse()`; an optional `json_schema` attribute describes it to the model."""

    def parse(self, value: object) -> T_co:
        """Check untrusted input and return a trusted value."""
        ...


class ObjectSchema:
    """The schema that `object_schema()` builds: one description, one parser."""

    shape: dict[str, Validator[Any]]
    json_schema: dict[str, Any]

    def __init__(self, shape: Mapping[str, Validator[Any]]) -> None:
        """Keep the shape and derive the JSON Schema that the model will see."""
        # BEGIN LAB 6.1 object_schema
        self.shape = dict(shape)
        properties = {
            name: copy.deepcopy(check.json_schema) if check.json_schema is not None else {}
            for name, check in self.shape.items()
        }
        required = [name for name, check in self.shape.items() if not check.optional]
        self.json_schema = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        # END LAB 6.1

    def parse(self, value: object) -> dict[str, Any]:
        """Return a new dict holding exactly the declared fields, each checked."""
        # BEGIN LAB 6.1 object_schema.parse
        if not isinstance(value, dict):
            raise ValidationError("参数必须是 object")
        # Walk the shape, not the input: undeclared keys never reach the tool.
        return {name: check(value.get(name)) for name, check in self.shape.items()}
        # END LAB 6.1


def object_schema(shape: Mapping[str, Validator[Any]]) -> ObjectSchema:
    """Build an object schema from a mapping of field name to validator."""
    return ObjectSchema(shape)


# ## Tool, context and output (declared for every lab)


@dataclass
class ToolContext:
    """What a running tool knows about its call: id, cancellation, progress."""

    call_id: str
    signal: AbortSignal | None = None
    report_progress: Callable[[list[TextContent]], None] | None = None


@dataclass
class ToolOutput(Generic[D]):
    """What a tool returns: `content` for the model, `details` for the program."""

    content: list[TextContent]
    details: D | None = None
    is_error: bool | None = None


@dataclass
class Tool(Generic[P, D]):
    """A model-visible description bound to a schema and a local async function."""

    name: str
    description: str
    schema: Schema[P]
    execute: Callable[[P, ToolContext], Awaitable[ToolOutput[D]]]


# ## Lab 6.2 · ToolRegistry


class ToolRegistry:
    """The tools allowed for one run, in registration order."""

    _tools: dict[str, Tool[Any, Any]]

    def __init__(self, tools: Iterable[Tool[Any, Any]] = ()) -> None:
        """Start a table of its own, then register each tool in order."""
        # BEGIN LAB 6.2 ToolRegistry
        self._tools = {}
        for tool in tools:
            self.register(tool)
        # END LAB 6.2

    def register(self, tool: Tool[Any, Any]) -> None:
        """Add a tool; refuse a name that is already taken."""
        # BEGIN LAB 6.2
        # Overwriting would let the model see one tool and run another.
        if tool.name in self._tools:
            raise ValueError(f"Tool 已存在：{tool.name}")
        self._tools[tool.name] = tool
        # END LAB 6.2

    def get(self, name: str) -> Tool[Any, Any] | None:
        """Return the very tool registered under this name, or None."""
        # BEGIN LAB 6.2
        return self._tools.get(name)
        # END LAB 6.2

    def list(self) -> builtins.list[Tool[Any, Any]]:
        """Return a new list of the tools in registration order."""
        # BEGIN LAB 6.2
        return builtins.list(self._tools.values())
        # END LAB 6.2

    def definitions(self) -> builtins.list[ToolDefinition]:
        """Describe every tool for a provider: name, description and parameters only."""
        # BEGIN LAB 6.2
        definitions = []
        for tool in self._tools.values():
            json_schema = getattr(tool.schema, "json_schema", None)
            # A copy, so that nobody downstream can edit the tool's own schema.
            parameters = copy.deepcopy(json_schema) if json_schema is not None else {"type": "object"}
            definitions.append(ToolDefinition(tool.name, tool.description, parameters))
        return definitions
        # END LAB 6.2


# ## Lab 6.3 · execute_tool_call


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def failed_result(call: ToolCall, message: str) -> ToolResultMessage:
    """Answer a call that failed, keeping the id and the name the model asked for."""
    # BEGIN LAB 6.3
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool {call.name} failed: {message}")],
        details={"error": message},
        is_error=True,
        timestamp=_now_ms(),
    )
    # END LAB 6.3


async def execute_tool_call(
    call: ToolCall,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    report_progress: Callable[[list[TextContent]], None] | None = None,
) -> ToolResultMessage:
    """Walk lookup → parse → execute → result; every outcome is a result paired with the call."""
    # BEGIN LAB 6.3
    tool = registry.get(call.name)
    if tool is None:
        return failed_result(call, "未知工具")
    # Catch Exception only: cancellation and interpreter exits must pass through.
    try:
        parameters = tool.schema.parse(call.arguments)
        context = ToolContext(call_id=call.id, signal=signal, report_progress=report_progress)
        output = await tool.execute(parameters, context)
        return ToolResultMessage(
            tool_call_id=call.id,
            tool_name=call.name,
            content=output.content,
            details=output.details,
            is_error=output.is_error if output.is_error is not None else False,
            timestamp=_now_ms(),
        )
    except Exception as error:
        return failed_result(call, str(error) or type(error).__name__)
    # END LAB 6.3
