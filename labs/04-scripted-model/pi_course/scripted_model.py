"""A model whose replies are written down in advance: an executable spec of a multi-turn conversation."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from .event_stream import AssistantMessageEventStream
from .lab import LabNotImplemented
from .messages import (
    AbortSignal,
    AgentContext,
    AssistantMessage,
    ModelDone,
    ModelError,
    ModelEvent,
    ModelStart,
    ModelTextDelta,
    ModelToolcallDelta,
    ModelToolcallEnd,
    TextContent,
    assistant_message,
    text,
)

NO_MORE_TURNS = "ScriptedModel 没有更多响应"
REQUEST_ABORTED = "Request was aborted"


@dataclass
class ScriptedErrorTurn:
    """A turn that fails: the stream ends in an `error` event, with any text that arrived first."""

    stop_reason: Literal["error", "aborted"]
    error_message: str
    partial_text: str | None = None


ScriptedTurn: TypeAlias = AssistantMessage | ScriptedErrorTurn


# ## Lab 4.1 · one turn played as events, and a snapshot of every request


def terminal_message(turn: ScriptedTurn) -> AssistantMessage:
    """The final message a turn ends with (a copy: the script itself is never handed out)."""
    raise LabNotImplemented("4.1", "terminal_message")
    raise LabNotImplemented("4.2", "terminal_message")


def partial_from(message: AssistantMessage) -> AssistantMessage:
    """The empty message a stream starts from: the final one's metadata, no content yet."""
    raise LabNotImplemented("4.1", "partial_from")


def raw_arguments_of(arguments: object) -> str:
    """The compact JSON a provider would have streamed for these arguments."""
    raise LabNotImplemented("4.1", "raw_arguments_of")


class ScriptedModel:
    """Plays one scripted turn per request, as the same event protocol a real provider streams.

    Each request's context is saved as a deep copy in `requests`, so a test can check exactly what
    the model was shown, even after the caller goes on changing its own lists.
    """

    def __init__(self, turns: Sequence[ScriptedTurn]) -> None:
        """Keep the script; no request has been made yet."""
        raise LabNotImplemented("4.1", "ScriptedModel")

    def stream(
        self, context: AgentContext, *, signal: AbortSignal | None = None
    ) -> AssistantMessageEventStream:
        """Return the reply's stream at once; the turn plays on the running loop, never inside this call."""
        raise LabNotImplemented("4.1", "ScriptedModel.stream")

    def _play(
        self, stream: AssistantMessageEventStream, turn: ScriptedTurn | None, signal: AbortSignal | None
    ) -> None:
        """Project the turn's final message onto the stream: start, one delta per block, then the end."""
        raise LabNotImplemented("4.1", "ScriptedModel._play")

    # ## Lab 4.2 · an error turn, an exhausted script, a request cancelled beforehand

    def _end_before_playing(
        self, stream: AssistantMessageEventStream, turn: ScriptedTurn | None, signal: AbortSignal | None
    ) -> None:
        """End a stream that plays no content: one `error` event, aborted first, then exhausted."""
        raise LabNotImplemented("4.2", "ScriptedModel._end_before_playing")
