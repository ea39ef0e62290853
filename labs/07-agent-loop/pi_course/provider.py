"""What the agent says to a model and what comes back, with a scripted stand-in for a model (given)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from .messages import AbortSignal, TextContent, ToolCall, ToolDefinition, ToolResultMessage


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class UserMessage:
    """What the user typed."""

    content: str
    timestamp: int
    role: Literal["user"] = "user"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"role": self.role, "content": self.content, "timestamp": self.timestamp}


def user(content: str) -> UserMessage:
    """Build a user message stamped now."""
    return UserMessage(content=content, timestamp=_now_ms())


StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]


@dataclass
class AssistantMessage:
    """One reply of the model: text and tool calls, and why it stopped."""

    content: list[TextContent | ToolCall]
    stop_reason: StopReason
    timestamp: int
    error_message: str | None = None
    role: Literal["assistant"] = "assistant"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with camelCase keys; `errorMessage` only when there is one."""
        wire: dict[str, Any] = {
            "role": self.role,
            "content": [block.to_dict() for block in self.content],
            "stopReason": self.stop_reason,
        }
        if self.error_message is not None:
            wire["errorMessage"] = self.error_message
        wire["timestamp"] = self.timestamp
        return wire


def assistant(*blocks: TextContent | ToolCall, stop_reason: StopReason | None = None) -> AssistantMessage:
    """Build a reply stamped now; the stop reason is "toolUse" when it calls a tool, else "stop"."""
    if stop_reason is None:
        stop_reason = "toolUse" if any(isinstance(block, ToolCall) for block in blocks) else "stop"
    return AssistantMessage(content=list(blocks), stop_reason=stop_reason, timestamp=_now_ms())


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage


@dataclass
class ModelRequest:
    """Everything a provider sends to the model for one reply."""

    system_prompt: str
    messages: list[Message]
    tools: list[ToolDefinition]


class Provider(Protocol):
    """Anything that turns a request into one assistant reply; failures come back inside the reply."""

    async def complete(self, request: ModelRequest, *, signal: AbortSignal | None = None) -> AssistantMessage:
        """Return the model's reply to `request`; never raise for a failed or cancelled call."""
        ...


class ScriptedProvider:
    """A model stand-in that answers with prepared replies, in order, and records every request."""

    def __init__(self, replies: Iterable[AssistantMessage]) -> None:
        self._replies = iter(replies)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *, signal: AbortSignal | None = None) -> AssistantMessage:
        """Record a copy of the request, then return the next reply (or an aborted / error reply)."""
        # A deep copy: what the model saw must not change when the caller edits its lists later.
        self.requests.append(copy.deepcopy(request))
        if signal is not None and signal.aborted:
            return AssistantMessage(
                content=[], stop_reason="aborted", error_message="已取消", timestamp=_now_ms()
            )
        reply = next(self._replies, None)
        if reply is None:
            return AssistantMessage(
                content=[], stop_reason="error", error_message="没有更多脚本回复", timestamp=_now_ms()
            )
        return reply
