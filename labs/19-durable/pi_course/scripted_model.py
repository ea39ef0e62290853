"""A model whose replies are written down in advance: an executable spec of a multi-turn conversation."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from .event_stream import AssistantMessageEventStream
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
    ThinkingLevel,
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
    # BEGIN LAB 4.1
    if isinstance(turn, AssistantMessage):
        return copy.deepcopy(turn)
    # END LAB 4.1
    # BEGIN LAB 4.2
    # A failing turn becomes an ordinary assistant message, so it plays through the same projection.
    return assistant_message(
        [text(turn.partial_text)] if turn.partial_text else [],
        turn.stop_reason,
        error_message=turn.error_message,
    )
    # END LAB 4.2


def partial_from(message: AssistantMessage) -> AssistantMessage:
    """The empty message a stream starts from: the final one's metadata, no content yet."""
    # BEGIN LAB 4.1
    return replace(copy.deepcopy(message), content=[], stop_reason="stop")
    # END LAB 4.1


def raw_arguments_of(arguments: object) -> str:
    """The compact JSON a provider would have streamed for these arguments."""
    # BEGIN LAB 4.1
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    # END LAB 4.1


class ScriptedModel:
    """Plays one scripted turn per request, as the same event protocol a real provider streams.

    Each request's context is saved as a deep copy in `requests`, so a test can check exactly what
    the model was shown, even after the caller goes on changing its own lists.
    """

    def __init__(self, turns: Sequence[ScriptedTurn]) -> None:
        """Keep the script; no request has been made yet."""
        # BEGIN LAB 4.1 ScriptedModel
        self.requests: list[AgentContext] = []
        self._turns = turns
        self._cursor = 0
        # END LAB 4.1

    def stream(
        self,
        context: AgentContext,
        *,
        signal: AbortSignal | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> AssistantMessageEventStream:
        """Return the reply's stream at once; the turn plays on the running loop, never inside this call.

        A script plays the same turn at every `thinking_level` (checkpoint 18): the level is accepted
        and ignored, as the course's models do.
        """
        # BEGIN LAB 4.1
        stream = AssistantMessageEventStream()
        # A snapshot, not the caller's object: what the model saw must not change afterwards.
        self.requests.append(copy.deepcopy(context))
        # The turn is chosen now, in call order; an exhausted script gives None (and still moves on).
        turn = self._turns[self._cursor] if self._cursor < len(self._turns) else None
        self._cursor += 1
        asyncio.get_running_loop().call_soon(self._play, stream, turn, signal)
        return stream
        # END LAB 4.1

    def _play(
        self, stream: AssistantMessageEventStream, turn: ScriptedTurn | None, signal: AbortSignal | None
    ) -> None:
        """Project the turn's final message onto the stream: start, one delta per block, then the end."""
        # BEGIN LAB 4.1
        if turn is None or (signal is not None and signal.aborted):
            self._end_before_playing(stream, turn, signal)
            return
        message = terminal_message(turn)
        partial = partial_from(message)
        stream.push(ModelStart(partial=copy.deepcopy(partial)))
        for index, block in enumerate(message.content):
            if isinstance(block, TextContent):
                # The partial grows first, so each event's partial already holds its own delta.
                partial.content = [*partial.content, copy.deepcopy(block)]
                stream.push(
                    ModelTextDelta(content_index=index, delta=block.text, partial=copy.deepcopy(partial))
                )
                continue
            tool_call = copy.deepcopy(block)
            raw = (
                tool_call.raw_arguments
                if tool_call.raw_arguments is not None
                else raw_arguments_of(block.arguments)
            )
            # While its JSON streams in, a call's arguments are not decoded yet: only the raw text exists.
            partial.content = [*partial.content, replace(tool_call, arguments={}, raw_arguments=raw)]
            stream.push(ModelToolcallDelta(content_index=index, delta=raw, partial=copy.deepcopy(partial)))
            partial.content[index] = tool_call
            stream.push(
                ModelToolcallEnd(content_index=index, tool_call=tool_call, partial=copy.deepcopy(partial))
            )

        terminal: ModelEvent
        if message.stop_reason == "error" or message.stop_reason == "aborted":
            terminal = ModelError(reason=message.stop_reason, error=message)
        else:
            terminal = ModelDone(reason=message.stop_reason, message=message)
        stream.push(terminal)
        stream.end(message)
        # END LAB 4.1

    # ## Lab 4.2 · an error turn, an exhausted script, a request cancelled beforehand

    def _end_before_playing(
        self, stream: AssistantMessageEventStream, turn: ScriptedTurn | None, signal: AbortSignal | None
    ) -> None:
        """End a stream that plays no content: one `error` event, aborted first, then exhausted."""
        # BEGIN LAB 4.2
        # Cancellation is looked at first: a cancelled request is aborted even when the script ran out.
        if signal is not None and signal.aborted:
            aborted = assistant_message([], "aborted", error_message=REQUEST_ABORTED)
            stream.push(ModelError(reason="aborted", error=aborted))
            stream.end(aborted)
            return
        exhausted = assistant_message([], "error", error_message=NO_MORE_TURNS)
        stream.push(ModelError(reason="error", error=exhausted))
        stream.end(exhausted)
        # END LAB 4.2
