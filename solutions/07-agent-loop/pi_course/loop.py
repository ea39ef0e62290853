"""Checkpoint 07: the agent loop closes model → tool calls → tool results → model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
    # BEGIN LAB 7.1 tool_calls
    return [block for block in message.content if isinstance(block, ToolCall)]
    # END LAB 7.1


async def run_tool_calls(
    message: AssistantMessage,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    emit: Callable[[AgentEvent], object] | None = None,
) -> list[ToolResultMessage]:
    """Run the message's tool calls one after another and answer every one of them, in order."""
    # BEGIN LAB 7.1 run_tool_calls
    if emit is None:
        emit = _ignore
    results: list[ToolResultMessage] = []
    for call in tool_calls(message):
        emit(AgentEvent("tool_execution_start", call=call))
        # A cancelled call is still answered: providers refuse a tool call left without its result.
        if signal is not None and signal.aborted:
            result = failed_result(call, CANCELLED)
        else:
            result = await execute_tool_call(call, registry, signal=signal)
        results.append(result)
        emit(AgentEvent("tool_execution_end", call=call, message=result))
        emit(AgentEvent("message_end", message=result))
    return results
    # END LAB 7.1


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
    # BEGIN LAB 7.2 run_agent_loop
    if max_turns < 1:
        raise ValueError(f"max_turns 必须至少为 1：{max_turns}")
    if emit is None:
        emit = _ignore
    # Our own lists: the caller's transcript and prompts stay as they were.
    transcript: list[Message] = [*context.messages, *prompts]
    new_messages: list[Message] = list(prompts)
    emit(AgentEvent("agent_start"))
    for turn in range(max_turns):
        emit(AgentEvent("turn_start"))
        if turn == 0:
            for prompt in prompts:
                emit(AgentEvent("message_end", message=prompt))
        # A new list for each request, and fresh definitions: the provider never holds our live state.
        request = ModelRequest(context.system_prompt, list(transcript), context.tools.definitions())
        reply = await provider.complete(request, signal=signal)
        transcript.append(reply)
        new_messages.append(reply)
        emit(AgentEvent("message_end", message=reply))
        results: list[ToolResultMessage] = []
        # A failed or cancelled reply ends the run; its tool calls are not run.
        if reply.stop_reason not in ("error", "aborted"):
            results = await run_tool_calls(reply, context.tools, signal=signal, emit=emit)
        transcript.extend(results)
        new_messages.extend(results)
        emit(AgentEvent("turn_end", message=reply))
        if not results:  # nothing was run: the model has answered, or the reply failed
            break
    emit(AgentEvent("agent_end"))
    return new_messages
    # END LAB 7.2
