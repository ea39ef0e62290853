"""The canonical message IR: what the agent, the model and the tools say to each other.

Every provider speaks its own wire format; the agent speaks only this one. Adapters (checkpoint 05)
translate at the edge, so nothing inside the agent ever depends on a provider's JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias


def now_ms() -> int:
    """Whole milliseconds since the epoch, the unit of every `timestamp`."""
    return time.time_ns() // 1_000_000


@dataclass
class TextContent:
    """One piece of text inside a message."""

    type: Literal["text"] = "text"
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"type": self.type, "text": self.text}


def text(value: str) -> TextContent:
    """Wrap a string as a `TextContent`."""
    return TextContent(type="text", text=value)


@dataclass
class ToolCall:
    """A tool call as the model proposed it; `arguments` is untrusted until a schema parses it.

    `raw_arguments` keeps the JSON text the model streamed, for when it could not be decoded or the
    reply was cut off before the call was complete.
    """

    id: str
    name: str
    arguments: object
    type: Literal["toolCall"] = "toolCall"
    raw_arguments: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `rawArguments` only where it is known."""
        wire: dict[str, Any] = {
            "type": self.type,
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }
        if self.raw_arguments is not None:
            wire["rawArguments"] = self.raw_arguments
        return wire


AssistantContent: TypeAlias = TextContent | ToolCall


@dataclass(frozen=True)
class Usage:
    """Token counts of one model reply (frozen: `EMPTY_USAGE` is shared by many messages)."""

    input: int
    output: int
    total_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"input": self.input, "output": self.output, "totalTokens": self.total_tokens}


EMPTY_USAGE = Usage(input=0, output=0, total_tokens=0)

StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]


@dataclass
class UserMessage:
    """What the person typed."""

    content: list[TextContent]
    timestamp: int
    role: Literal["user"] = "user"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "role": self.role,
            "content": [part.to_dict() for part in self.content],
            "timestamp": self.timestamp,
        }


@dataclass
class AssistantMessage:
    """One finished (or failed) model reply: text and tool calls, and why the model stopped."""

    content: list[AssistantContent]
    provider: str
    model: str
    usage: Usage
    stop_reason: StopReason
    timestamp: int
    error_message: str | None = None
    role: Literal["assistant"] = "assistant"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `errorMessage` only where there is one."""
        wire: dict[str, Any] = {
            "role": self.role,
            "content": [part.to_dict() for part in self.content],
            "provider": self.provider,
            "model": self.model,
            "usage": self.usage.to_dict(),
            "stopReason": self.stop_reason,
        }
        if self.error_message is not None:
            wire["errorMessage"] = self.error_message
        wire["timestamp"] = self.timestamp
        return wire


@dataclass
class ToolResultMessage:
    """The answer to one tool call, paired with it through `tool_call_id`."""

    tool_call_id: str
    tool_name: str
    content: list[TextContent]
    details: object
    is_error: bool
    timestamp: int
    role: Literal["toolResult"] = "toolResult"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys; `details` only where there are some."""
        wire: dict[str, Any] = {
            "role": self.role,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "content": [part.to_dict() for part in self.content],
        }
        if self.details is not None:
            wire["details"] = self.details
        wire["isError"] = self.is_error
        wire["timestamp"] = self.timestamp
        return wire


@dataclass
class SystemMessage:
    """The system prompt lives in the transcript, so it can change during a run and be replayed.

    The first system message is the base prompt. A later one is a patch: a non-empty `content` is
    appended, each named section replaces the section of that name, and a section set to `None` is
    deleted. Replaying every system message in order gives the prompt in force.

    Since checkpoint 15 a system message also records which tools the model sees from this point on:
    `tools_added` holds their full definitions, `tools_removed` the names that stop being visible.
    """

    content: str
    timestamp: int
    sections: dict[str, str | None] | None = None
    tools_added: list[ToolDefinition] | None = None
    tools_removed: list[ToolReference] | None = None
    role: Literal["system"] = "system"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form; `sections`, `toolsAdded` and `toolsRemoved` only where there are some."""
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.sections is not None:
            wire["sections"] = dict(self.sections)
        if self.tools_added is not None:
            wire["toolsAdded"] = [tool.to_dict() for tool in self.tools_added]
        if self.tools_removed is not None:
            wire["toolsRemoved"] = [tool.to_dict() for tool in self.tools_removed]
        wire["timestamp"] = self.timestamp
        return wire


@dataclass
class ToolReference:
    """A tool named by a declaration patch that takes it away from the model."""

    name: str

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"name": self.name}


AgentMessage: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


@dataclass
class ToolDefinition:
    """What a provider may show the model about one tool: nothing executable."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass
class AgentContext:
    """Everything one model request sees: the transcript, system messages included, in order, and the
    tools it may call (checkpoint 05: only their definitions travel to the provider)."""

    messages: list[AgentMessage]
    tools: list[ToolDefinition] | None = None


# The model's side of the protocol: one reply arrives as a stream of these events. Each variant has
# its own class so that `match` and a type checker can tell them apart by `type`.


@dataclass
class ModelStart:
    """The reply has begun; `partial` is still empty."""

    partial: AssistantMessage
    type: Literal["start"] = "start"


@dataclass
class ModelTextDelta:
    """More text for the block at `content_index`."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["text_delta"] = "text_delta"


@dataclass
class ModelToolcallDelta:
    """More argument JSON for the tool call at `content_index`."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["toolcall_delta"] = "toolcall_delta"


@dataclass
class ModelToolcallEnd:
    """The tool call at `content_index` is complete and its arguments decoded."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: Literal["toolcall_end"] = "toolcall_end"


@dataclass
class ModelDone:
    """A terminal event: the reply finished normally."""

    reason: Literal["stop", "length", "toolUse"]
    message: AssistantMessage
    type: Literal["done"] = "done"


@dataclass
class ModelError:
    """A terminal event: the reply failed or was cancelled; `error` keeps what had arrived."""

    reason: Literal["error", "aborted"]
    error: AssistantMessage
    type: Literal["error"] = "error"


ModelEvent: TypeAlias = (
    ModelStart | ModelTextDelta | ModelToolcallDelta | ModelToolcallEnd | ModelDone | ModelError
)


class ModelStream(Protocol):
    """A reply in progress: iterate its events, or await its final message."""

    def __aiter__(self) -> AsyncIterator[ModelEvent]: ...

    async def result(self) -> AssistantMessage: ...


class Model(Protocol):
    """Anything that answers a context with a stream: a scripted model, a real provider adapter."""

    def stream(self, context: AgentContext, *, signal: AbortSignal | None = None) -> ModelStream: ...


#: How hard a model is asked to think (checkpoint 18). The course's models do not interpret it: a route
#: chooses it, and the loop hands it to the physical model with that one request.
ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high"]


class ThinkingModel(Protocol):
    """A model whose `stream` also takes a thinking level (checkpoint 18).

    The course widens `Model.stream`'s options; Python cannot hand a keyword to a function that does not
    declare it, so a model that may be given a level declares `thinking_level` (the scripted model, the
    provider adapter and the context-projecting model do, and ignore it). The loop passes the keyword
    only when a level was chosen, so a plain `Model` still serves every request without one.
    """

    def stream(
        self,
        context: AgentContext,
        *,
        signal: AbortSignal | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> ModelStream: ...


# ## building messages, the text projection and the system-message replay (given since 03)


def user_message(value: str) -> UserMessage:
    """A user message holding one text block, stamped now."""
    return UserMessage(content=[text(value)], timestamp=now_ms())


def assistant_message(
    content: list[AssistantContent],
    stop_reason: StopReason = "stop",
    *,
    provider: str = "scripted",
    model: str = "scripted-v1",
    usage: Usage = EMPTY_USAGE,
    error_message: str | None = None,
    timestamp: int | None = None,
) -> AssistantMessage:
    """Build an assistant message; the keywords override the scripted defaults."""
    return AssistantMessage(
        content=content,
        provider=provider,
        model=model,
        usage=usage,
        stop_reason=stop_reason,
        timestamp=now_ms() if timestamp is None else timestamp,
        error_message=error_message,
    )


def text_of(message: AgentMessage) -> str:
    """The readable text of a message: a lossy projection that never changes the message itself."""
    if isinstance(message, SystemMessage):
        return system_message_text(message)
    # Tool calls are skipped, not removed: the projection reads the blocks and builds a new string.
    return "\n".join(block.text for block in message.content if isinstance(block, TextContent))


def current_system_message(messages: Sequence[AgentMessage]) -> SystemMessage | None:
    """Replay every system message in order into one; None where there is none.

    Non-empty contents are appended, sections are replaced by name and deleted by `None`; the result
    takes the first system message's timestamp.
    """
    content: list[str] = []
    sections: dict[str, str] = {}
    timestamp: int | None = None
    for message in messages:
        if not isinstance(message, SystemMessage):
            continue
        if timestamp is None:
            timestamp = message.timestamp
        if message.content:
            content.append(message.content)
        for name, value in (message.sections or {}).items():
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = value
    if timestamp is None:
        return None
    # An absent value is None, never {}: a replay that deleted every section has no sections at all.
    return SystemMessage(content="\n\n".join(content), timestamp=timestamp, sections=dict(sections) or None)


def system_message_text(message: SystemMessage) -> str:
    """The prompt text of one system message: its content, then each section, empty parts skipped."""
    parts = [message.content, *(value for value in (message.sections or {}).values() if value is not None)]
    return "\n\n".join(part for part in parts if part)


def current_system_prompt(messages: Sequence[AgentMessage]) -> str | None:
    """The prompt in force after replaying the transcript's system messages; None where there is none."""
    message = current_system_message(messages)
    return system_message_text(message) if message is not None else None


# ## Lab 15.2 · the tools a transcript declares: replay and difference


def to_tool_declaration(tool: ToolDefinition) -> ToolDefinition:
    """The three fields the model sees, with `parameters` copied through JSON (given).

    The JSON round trip gives comparison and persistence the same shape, and shares nothing with `tool`.
    """
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        parameters=json.loads(json.dumps(tool.parameters, ensure_ascii=False)),
    )


def declarations_equal(left: ToolDefinition, right: ToolDefinition) -> bool:
    """Whether two definitions declare the same interface to the model (given): their JSON texts match."""

    def declared(tool: ToolDefinition) -> str:
        return json.dumps(to_tool_declaration(tool).to_dict(), ensure_ascii=False, separators=(",", ":"))

    return declared(left) == declared(right)


@dataclass
class ToolStateChanges:
    """The patch that turns one declared tool set into another: what to remove, then what to add."""

    tools_added: list[ToolDefinition]
    tools_removed: list[ToolReference]

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "toolsAdded": [tool.to_dict() for tool in self.tools_added],
            "toolsRemoved": [tool.to_dict() for tool in self.tools_removed],
        }


def current_tools(messages: Sequence[AgentMessage]) -> list[ToolDefinition]:
    """The tools the model sees after replaying every system message's removals, then additions.

    The result is in order of (last) declaration and shares no object with the transcript.
    """
    # BEGIN LAB 15.2
    tools: dict[str, ToolDefinition] = {}
    for message in messages:
        if not isinstance(message, SystemMessage):
            continue
        # Within one message removals come first: "remove, then add" is how a definition changes.
        for reference in message.tools_removed or []:
            tools.pop(reference.name, None)
        for tool in message.tools_added or []:
            tools[tool.name] = to_tool_declaration(tool)
    return list(tools.values())
    # END LAB 15.2


def tool_state_changes(
    previous: Sequence[ToolDefinition], current: Sequence[ToolDefinition]
) -> ToolStateChanges:
    """Compare two whole tool sets: a new or changed tool is added, a vanished or changed one removed.

    `tools_added` follows `current`'s order, `tools_removed` follows `previous`'s.
    """
    # BEGIN LAB 15.2
    before = {tool.name: tool for tool in previous}
    after = {tool.name: tool for tool in current}
    added = [
        to_tool_declaration(tool)
        for tool in current
        if tool.name not in before or not declarations_equal(before[tool.name], tool)
    ]
    removed = [
        ToolReference(name=tool.name)
        for tool in previous
        if tool.name not in after or not declarations_equal(tool, after[tool.name])
    ]
    return ToolStateChanges(tools_added=added, tools_removed=removed)
    # END LAB 15.2


# Python has no platform AbortController, so the package ships this small one.


class AbortSignal:
    """Read-only view of a cancellation request: poll `aborted`, or listen for "abort"."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason: object = None
        self._listeners: list[Callable[[], None]] = []

    def add_event_listener(self, event: Literal["abort"], listener: Callable[[], None]) -> None:
        """Call `listener` once when the signal is aborted (never, if it already was)."""
        if event == "abort" and listener not in self._listeners:
            self._listeners.append(listener)

    def remove_event_listener(self, event: Literal["abort"], listener: Callable[[], None]) -> None:
        """Stop calling `listener`; unknown listeners are ignored."""
        if event == "abort" and listener in self._listeners:
            self._listeners.remove(listener)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted}, reason={self.reason!r})"


class AbortController:
    """Owns an `AbortSignal` and is the only one that can fire it."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        """Mark the signal aborted, keeping the first reason, and tell each listener once."""
        signal = self.signal
        if signal.aborted:
            return
        signal.aborted = True
        signal.reason = reason
        listeners, signal._listeners = signal._listeners, []
        for listener in listeners:
            listener()
