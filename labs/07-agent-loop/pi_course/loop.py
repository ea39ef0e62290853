"""Checkpoint 07: the agent loop closes model → tool calls → tool results → model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .lab import LabNotImplemented
from .messages import AbortSignal, ToolCall, ToolResultMessage
from .provider import AssistantMessage, Message, ModelRequest, Provider
from .tool import ToolRegistry, execute_tool_call, failed_result

CANCELLED = "已取消"


# ## Lab 7.1 · run the tool calls of one assistant message


@dataclass
class AgentEvent:
    """One step of a run, reported through `emit`: agent_start, turn_start, message_end, …"""

    type: str
    message: Message | None = None
    call: ToolCall | None = None


def _ignore(event: AgentEvent) -> None:
    """The `emit` used when the caller wants no events."""


def tool_calls(message: AssistantMessage) -> list[ToolCall]:
    """Return the message's tool calls in order, skipping its text."""
    raise LabNotImplemented("7.1", "tool_calls")


async def run_tool_calls(
    message: AssistantMessage,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    emit: Callable[[AgentEvent], object] | None = None,
) -> list[ToolResultMessage]:
    """Run the message's tool calls one after another and answer every one of them, in order."""
    raise LabNotImplemented("7.1", "run_tool_calls")


# ## Lab 7.2 · the agent loop


@dataclass
class AgentContext:
    """Where a run starts: the system prompt, the transcript so far and the tools it may use."""

    system_prompt: str
    messages: list[Message]
    tools: ToolRegistry


async def run_agent_loop(
    prompts: list[Message],
    context: AgentContext,
    provider: Provider,
    *,
    signal: AbortSignal | None = None,
    emit: Callable[[AgentEvent], object] | None = None,
    max_turns: int = 10,
) -> list[Message]:
    """Ask the model, run the tools it calls, repeat until it stops asking; return the new messages."""
    raise LabNotImplemented("7.2", "run_agent_loop")
