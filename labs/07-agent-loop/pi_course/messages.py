"""Messages that travel between the model, the agent and its tools (given, parent state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


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
    """A tool call as the model proposed it; `arguments` is untrusted."""

    id: str
    name: str
    arguments: object
    type: Literal["toolCall"] = "toolCall"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"type": self.type, "id": self.id, "name": self.name, "arguments": self.arguments}


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
        """Return the wire form, with the chapter's camelCase keys."""
        return {
            "role": self.role,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "content": [part.to_dict() for part in self.content],
            "details": self.details,
            "isError": self.is_error,
            "timestamp": self.timestamp,
        }


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
class AbortSignal:
    """Read-only view of a cancellation request; tools poll `aborted`."""

    aborted: bool = False
    reason: object = None


@dataclass
class AbortController:
    """Owns an `AbortSignal` and is the only one that can fire it."""

    signal: AbortSignal = field(default_factory=AbortSignal)

    def abort(self, reason: object = None) -> None:
        """Mark the signal as aborted, keeping the first reason."""
        if not self.signal.aborted:
            self.signal.aborted = True
            self.signal.reason = reason
