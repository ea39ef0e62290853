"""Checkpoints 06 and 15: one tool call crosses three boundaries — schema, registry, executor.

Checkpoint 15 gives every tool an exposure. One registry then derives two sets from it: the declared
set (what the model is shown) and the callable set (what a script may run), and the executor checks
the caller's scope against the matching set before it parses anything.
"""

from __future__ import annotations

import builtins
import copy
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from .messages import AbortSignal, TextContent, ToolCall, ToolDefinition, ToolResultMessage, text

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = TypeVar("P")
D = TypeVar("D")


# ## validators and object_schema (given since 06)


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
    if not isinstance(value, str):
        raise ValidationError("必须是 string")
    return value


@validator(json_schema={"type": "string"}, optional=True)
def optional_string(value: object) -> str | None:
    """Accept an omitted field (None) or a str."""
    if value is not None and not isinstance(value, str):
        raise ValidationError("必须是 string")
    return value


@validator(json_schema={"type": "integer", "minimum": 1}, optional=True)
def optional_positive_integer(value: object) -> int | None:
    """Accept an omitted field (None) or a whole number >= 1; JSON's 2.0 becomes 2."""
    if value is None:
        return None
    # bool is a subclass of int, but True is not a count.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise ValidationError("必须是正整数")


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

    def parse(self, value: object) -> dict[str, Any]:
        """Return a new dict holding exactly the declared fields, each checked."""
        if not isinstance(value, dict):
            raise ValidationError("参数必须是 object")
        # Walk the shape, not the input: undeclared keys never reach the tool.
        return {name: check(value.get(name)) for name, check in self.shape.items()}


def object_schema(shape: Mapping[str, Validator[Any]]) -> ObjectSchema:
    """Build an object schema from a mapping of field name to validator."""
    return ObjectSchema(shape)


# ## Tool, context and output (declared for every lab)


ToolExposure: TypeAlias = Literal["direct", "model-only", "codemode", "deferred", "hidden"]
"""Who may reach a tool, with Pi 1.0's five names (a tool without one is `direct`):

- `direct`: declared to the model, callable by a script;
- `model-only`: declared to the model only (`tool_search`, and 16's codemode tool itself);
- `codemode` / `deferred`: callable by a script at once, declared only once activated;
- `hidden`: neither declared nor callable.
"""

ToolCallScope: TypeAlias = Literal["model", "script"]
"""Who makes a call: the model reaches only the declared set, a script only the callable set."""


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
    exposure: ToolExposure | None = None


# ## Lab 15.1 · one registry, two sets, and the caller's scope


def exposure_of_tool(tool: Tool[Any, Any]) -> ToolExposure:
    """A tool's exposure, `direct` where it declares none (given)."""
    return tool.exposure if tool.exposure is not None else "direct"


class ToolRegistry:
    """The tools allowed for one run, in registration order, and which of them are active.

    `direct` and `model-only` tools are active from registration; `codemode` and `deferred` tools wait
    for `activate()`; a `hidden` tool is never active. Both sets are filtered from `list()`, so they
    keep registration order whatever order the activations came in.
    """

    _tools: dict[str, Tool[Any, Any]]
    _active: set[str]

    def __init__(self, tools: Iterable[Tool[Any, Any]] = ()) -> None:
        """Start a table of its own, then register each tool in order."""
        self._tools = {}
        self._active = set()
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool[Any, Any]) -> None:
        """Add a tool; refuse a name that is already taken; activate it if its exposure says so."""
        # Overwriting would let the model see one tool and run another.
        if tool.name in self._tools:
            raise ValueError(f"Tool 已存在：{tool.name}")
        self._tools[tool.name] = tool
        # direct and model-only tools are active from registration; the others wait (hidden for ever).
        if exposure_of_tool(tool) in ("direct", "model-only"):
            self._active.add(tool.name)

    def get(self, name: str) -> Tool[Any, Any] | None:
        """Return the very tool registered under this name, or None."""
        return self._tools.get(name)

    def list(self) -> builtins.list[Tool[Any, Any]]:
        """Return a new list of the tools in registration order."""
        return builtins.list(self._tools.values())

    def exposure_of(self, name: str) -> ToolExposure | None:
        """The exposure of the tool registered under `name` (`direct` by default); None for an unknown
        name."""
        # BEGIN LAB 15.1
        tool = self._tools.get(name)
        return exposure_of_tool(tool) if tool is not None else None
        # END LAB 15.1

    def uses_exposure(self) -> bool:
        """Whether any tool is not `direct`: only then can the declared set differ from the whole table."""
        return any(exposure_of_tool(tool) != "direct" for tool in self._tools.values())

    def activate(self, names: Iterable[str]) -> builtins.list[str]:
        """Declare the `codemode` / `deferred` tools among `names`; return those newly activated.

        Unknown names, `hidden` tools and tools already active are skipped.
        """
        # BEGIN LAB 15.1
        activated: builtins.list[str] = []
        for name in names:
            tool = self._tools.get(name)
            if tool is None or exposure_of_tool(tool) not in ("codemode", "deferred"):
                continue
            if name in self._active:
                continue
            self._active.add(name)
            activated.append(name)
        return activated
        # END LAB 15.1

    def is_active(self, name: str) -> bool:
        """Whether `name` is in the active set."""
        # BEGIN LAB 15.1
        return name in self._active
        # END LAB 15.1

    def declared(self) -> builtins.list[Tool[Any, Any]]:
        """The declared set: active tools that are not `hidden`, in registration order."""
        if not self.uses_exposure():
            # Given: a table of direct tools only (checkpoints 06–14) declares every tool it holds.
            return self.list()
        # BEGIN LAB 15.1
        return [
            tool
            for tool in self._tools.values()
            if tool.name in self._active and exposure_of_tool(tool) != "hidden"
        ]
        # END LAB 15.1

    def callable(self) -> builtins.list[Tool[Any, Any]]:
        """The callable set (a script's view): every `codemode` / `deferred` tool, and active `direct`
        ones."""
        # BEGIN LAB 15.1
        found: builtins.list[Tool[Any, Any]] = []
        for tool in self._tools.values():
            exposure = exposure_of_tool(tool)
            if exposure in ("codemode", "deferred") or (exposure == "direct" and tool.name in self._active):
                found.append(tool)
        return found
        # END LAB 15.1

    def can_call(self, name: str, scope: ToolCallScope) -> bool:
        """Whether a caller of this scope may run `name`: the model by the declared set, a script by the
        callable set."""
        # BEGIN LAB 15.1
        tools = self.declared() if scope == "model" else self.callable()
        return any(tool.name == name for tool in tools)
        # END LAB 15.1

    def definitions(self) -> builtins.list[ToolDefinition]:
        """Describe the declared set for a provider: name, description and parameters only."""
        definitions = []
        for tool in self.declared():
            json_schema = getattr(tool.schema, "json_schema", None)
            # A copy, so that nobody downstream can edit the tool's own schema.
            parameters = copy.deepcopy(json_schema) if json_schema is not None else {"type": "object"}
            definitions.append(ToolDefinition(tool.name, tool.description, parameters))
        return definitions


# ## Lab 15.1 · the executor checks the caller's scope (the rest of it is given since 06)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def failed_result(call: ToolCall, message: str) -> ToolResultMessage:
    """Answer a call that failed, keeping the id and the name the model asked for."""
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool {call.name} failed: {message}")],
        details={"error": message},
        is_error=True,
        timestamp=_now_ms(),
    )


def scope_denial(registry: ToolRegistry, name: str, scope: ToolCallScope) -> str | None:
    """Why a caller of `scope` may not run the registered tool `name`; None when it may."""
    # BEGIN LAB 15.1
    if registry.can_call(name, scope):
        return None
    return "工具未声明给模型" if scope == "model" else "工具不在脚本的可调用集合里"
    # END LAB 15.1


async def execute_tool_call(
    call: ToolCall,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    report_progress: Callable[[list[TextContent]], None] | None = None,
    scope: ToolCallScope = "model",
) -> ToolResultMessage:
    """Walk lookup → scope → parse → execute → result; every outcome is a result paired with the call.

    A call from the model (the default scope) reaches only the declared set, a call from a script
    (`scope="script"`) only the callable set; any other name is answered like an unknown tool.
    """
    tool = registry.get(call.name)
    if tool is None:
        return failed_result(call, "未知工具")
    # Before parsing: a refused call never reaches the tool's schema, let alone its execute.
    # A table of direct tools only refuses no caller; any other is checked by scope.
    denied = scope_denial(registry, call.name, scope) if registry.uses_exposure() else None
    if denied is not None:
        return failed_result(call, denied)
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
