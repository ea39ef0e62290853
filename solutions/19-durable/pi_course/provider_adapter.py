"""A real model behind the same `Model.stream()`: the provider adapter and its OpenAI-compatible transport.

Two boundaries, kept apart on purpose. The **adapter** translates between the course's protocol and a
provider's meaning: canonical messages out, `ProviderChunk`s in, `ModelEvent`s and one final
`AssistantMessage` back. The **transport** owns HTTP, SSE and the provider's untrusted JSON, and hands
the adapter nothing but checked chunks. The adapter can therefore be written and tested on a fixed list
of chunks, with no network at all.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit

import httpx

from .event_stream import AssistantMessageEventStream
from .messages import (
    AbortSignal,
    AgentContext,
    AssistantContent,
    AssistantMessage,
    ModelDone,
    ModelError,
    ModelStart,
    ModelTextDelta,
    ModelToolcallDelta,
    ModelToolcallEnd,
    TextContent,
    ThinkingLevel,
    ToolCall,
    ToolDefinition,
    Usage,
    assistant_message,
    current_system_prompt,
)

T = TypeVar("T")

# The seam between transport and adapter: the three things a streamed reply can say.


@dataclass
class ProviderChunkText:
    """More text of the reply."""

    delta: str
    type: Literal["text"] = "text"


@dataclass
class ProviderChunkTool:
    """A piece of one tool call; `index` is the provider's, and later pieces of the call repeat it."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str | None = None
    type: Literal["tool"] = "tool"


@dataclass
class PartialUsage:
    """Token counts as a provider reports them: any of the three may be missing."""

    input: int | None = None
    output: int | None = None
    total_tokens: int | None = None


FinishReason: TypeAlias = Literal["stop", "length", "tool_calls"]


@dataclass
class ProviderChunkFinish:
    """The provider has finished: why, and the token counts it reported."""

    reason: FinishReason
    usage: PartialUsage | None = None
    type: Literal["finish"] = "finish"


ProviderChunk: TypeAlias = ProviderChunkText | ProviderChunkTool | ProviderChunkFinish

# Wire messages and tools are plain JSON objects with the provider's own keys (`tool_calls`, …).
ProviderWireMessage: TypeAlias = dict[str, Any]
ProviderWireTool: TypeAlias = dict[str, Any]


@dataclass
class ProviderRequest:
    """What the adapter asks the transport to send: the model, wire messages and wire tools."""

    model: str
    messages: list[ProviderWireMessage]
    tools: list[ProviderWireTool] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON body's part that comes from the request; `tools` only where there are some."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.tools is not None:
            body["tools"] = self.tools
        return body


class ProviderTransport(Protocol):
    """Anything that turns a request into a stream of checked chunks: a fixed list, a real HTTP API."""

    def stream(
        self, request: ProviderRequest, *, signal: AbortSignal | None = None
    ) -> AsyncIterator[ProviderChunk]: ...


class AbortError(Exception):
    """The request was cancelled through its signal; the adapter reports it as `aborted`, not `error`."""

    def __init__(self) -> None:
        super().__init__("Request was aborted")


def throw_if_aborted(signal: AbortSignal | None) -> None:
    """Stop at once when the caller has already cancelled."""
    if signal is not None and signal.aborted:
        raise AbortError()


def _compact_json(value: object) -> str:
    # JSON.stringify's form: no spaces, non-ASCII kept as is.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ## Lab 5.1 · outbound conversion: canonical context → wire messages and wire tools


def _text_value(content: Sequence[object]) -> str:
    """The text blocks of a message, joined by newlines (tool calls are not text)."""
    # BEGIN LAB 5.1
    return "\n".join(block.text for block in content if isinstance(block, TextContent))
    # END LAB 5.1


def to_provider_messages(context: AgentContext) -> list[ProviderWireMessage]:
    """Write the transcript as OpenAI-compatible messages, leaving the context untouched.

    The wire takes one system message, at the start: the transcript's system messages are replayed
    into it, and none of them is sent where it stands.
    """
    # BEGIN LAB 5.1
    result: list[ProviderWireMessage] = []
    system_prompt = current_system_prompt(context.messages)
    if system_prompt:
        result.append({"role": "system", "content": system_prompt})
    for message in context.messages:
        if message.role == "system":
            continue
        if message.role == "user":
            result.append({"role": "user", "content": _text_value(message.content)})
        elif message.role == "toolResult":
            result.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "name": message.tool_name,
                    "content": _text_value(message.content),
                }
            )
        else:
            # The provider's own characters first: re-encoding decoded arguments may change them.
            tool_calls = [
                {
                    "id": block.id,
                    "type": "function",
                    "function": {
                        "name": block.name,
                        "arguments": block.raw_arguments
                        if block.raw_arguments is not None
                        else _compact_json(block.arguments if block.arguments is not None else {}),
                    },
                }
                for block in message.content
                if isinstance(block, ToolCall)
            ]
            wire: ProviderWireMessage = {"role": "assistant", "content": _text_value(message.content) or None}
            if tool_calls:
                wire["tool_calls"] = tool_calls
            result.append(wire)
    return result
    # END LAB 5.1


def to_provider_tools(tools: Sequence[ToolDefinition] | None) -> list[ProviderWireTool] | None:
    """Wrap each definition as `{"type": "function", "function": ...}`; None when there are no tools."""
    # BEGIN LAB 5.1
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in tools
    ]
    # END LAB 5.1


# ## Lab 5.2 · the adapter: normalized chunks → canonical events, partials and one final message


class FixedTransport:
    """A transport that replays a list of chunks: the adapter's offline fixture."""

    def __init__(self, chunks: Sequence[ProviderChunk]) -> None:
        self.chunks = list(chunks)

    async def stream(
        self, request: ProviderRequest, *, signal: AbortSignal | None = None
    ) -> AsyncIterator[ProviderChunk]:
        """Yield the chunks in list order, whatever the request."""
        for chunk in self.chunks:
            yield chunk


def fixed_transport(chunks: Sequence[ProviderChunk]) -> FixedTransport:
    """A transport that yields exactly these chunks, in order."""
    return FixedTransport(chunks)


def normalize_usage(usage: PartialUsage | None) -> Usage:
    """Fill what the provider left out: missing counts are 0, a missing total is input + output."""
    # BEGIN LAB 5.2
    counted_input = usage.input if usage is not None and usage.input is not None else 0
    counted_output = usage.output if usage is not None and usage.output is not None else 0
    total = usage.total_tokens if usage is not None and usage.total_tokens is not None else None
    return Usage(
        input=counted_input,
        output=counted_output,
        total_tokens=total if total is not None else counted_input + counted_output,
    )
    # END LAB 5.2


@dataclass
class ToolBuffer:
    """One tool call being streamed: what is known of it so far, and its slot in the content."""

    id: str
    name: str
    arguments_text: str
    content_index: int


@dataclass
class ReplyState:
    """Everything one `stream()` call accumulates; it belongs to that one request."""

    content: list[AssistantContent] = field(default_factory=list)
    text_index: int | None = None
    text_value: str = ""
    tool_buffers: dict[int, ToolBuffer] = field(default_factory=dict)
    finish: ProviderChunkFinish | None = None


class OpenAICompatibleModel:
    """The adapter: a `Model` whose replies come from a transport's chunks.

    Translation is its only job. Retries, running tools and updating the transcript happen elsewhere.
    """

    def __init__(self, *, provider: str, model: str, transport: ProviderTransport) -> None:
        self.provider = provider
        self.model = model
        self.transport = transport
        # The running replies, kept so the event loop does not drop a task before it ends.
        self._running: set[asyncio.Task[None]] = set()

    def stream(
        self,
        context: AgentContext,
        *,
        signal: AbortSignal | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> AssistantMessageEventStream:
        """Return the reply's stream at once; the request runs on the event loop.

        A `thinking_level` (checkpoint 18) is accepted and not interpreted: the course's adapter sends
        the same request whatever the level.
        """
        # BEGIN LAB 5.2
        stream = AssistantMessageEventStream()
        task = asyncio.get_running_loop().create_task(self._run(stream, context, signal))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return stream
        # END LAB 5.2

    def _message(
        self, content: list[AssistantContent], stop_reason: Any, **overrides: Any
    ) -> AssistantMessage:
        # A snapshot: later chunks change `content`, never a message already handed out.
        return assistant_message(
            copy.deepcopy(content), stop_reason, provider=self.provider, model=self.model, **overrides
        )

    async def _run(
        self, stream: AssistantMessageEventStream, context: AgentContext, signal: AbortSignal | None
    ) -> None:
        """Read the transport's chunks into events, then end in `done` or, keeping the partial, `error`."""
        # BEGIN LAB 5.2
        state = ReplyState()
        stream.push(ModelStart(partial=self._message([], "stop")))
        try:
            request = ProviderRequest(
                model=self.model,
                messages=to_provider_messages(context),
                tools=to_provider_tools(context.tools),
            )
            async for chunk in self.transport.stream(request, signal=signal):
                throw_if_aborted(signal)
                if isinstance(chunk, ProviderChunkText):
                    stream.push(self._apply_text(state, chunk))
                elif isinstance(chunk, ProviderChunkTool):
                    stream.push(self._apply_tool(state, chunk))
                else:
                    state.finish = chunk
            if state.finish is None:
                raise ValueError("Provider stream ended without a finish chunk")
            self._finish(stream, state, state.finish)
        except Exception as error:
            aborted = (signal is not None and signal.aborted) or isinstance(error, AbortError)
            reason: Literal["error", "aborted"] = "aborted" if aborted else "error"
            message = self._message(state.content, reason, error_message=str(error))
            stream.push(ModelError(reason=reason, error=message))
            stream.end(message)
        # END LAB 5.2

    def _apply_text(self, state: ReplyState, chunk: ProviderChunkText) -> ModelTextDelta:
        """Grow the one text block (its slot is taken when text first appears)."""
        # BEGIN LAB 5.2
        if state.text_index is None:
            state.text_index = len(state.content)
            state.content.append(TextContent(text=""))
        state.text_value += chunk.delta
        state.content[state.text_index] = TextContent(text=state.text_value)
        return ModelTextDelta(
            content_index=state.text_index, delta=chunk.delta, partial=self._message(state.content, "stop")
        )
        # END LAB 5.2

    def _apply_tool(self, state: ReplyState, chunk: ProviderChunkTool) -> ModelToolcallDelta:
        """Find the call by the provider's index (a new one takes the next content slot) and grow it."""
        # BEGIN LAB 5.2
        buffer = state.tool_buffers.get(chunk.index)
        if buffer is None:
            buffer = ToolBuffer(
                id=chunk.id if chunk.id is not None else f"call-{chunk.index}",
                name=chunk.name if chunk.name is not None else "",
                arguments_text="",
                content_index=len(state.content),
            )
            state.tool_buffers[chunk.index] = buffer
            state.content.append(ToolCall(id=buffer.id, name=buffer.name, arguments="", raw_arguments=""))
        if chunk.id:
            buffer.id = chunk.id
        if chunk.name:
            buffer.name = chunk.name
        delta = chunk.arguments_delta or ""
        buffer.arguments_text += delta
        # Until the finish chunk says the call is complete, its arguments are the raw text so far.
        state.content[buffer.content_index] = ToolCall(
            id=buffer.id,
            name=buffer.name,
            arguments=buffer.arguments_text,
            raw_arguments=buffer.arguments_text,
        )
        return ModelToolcallDelta(
            content_index=buffer.content_index, delta=delta, partial=self._message(state.content, "stop")
        )
        # END LAB 5.2

    def _finish(
        self, stream: AssistantMessageEventStream, state: ReplyState, finish: ProviderChunkFinish
    ) -> None:
        """Close each tool call in content order, then push `done` with the final message."""
        # BEGIN LAB 5.2
        stop_reason: Literal["stop", "length", "toolUse"] = (
            "toolUse" if finish.reason == "tool_calls" else "length" if finish.reason == "length" else "stop"
        )
        for index, buffer in sorted(state.tool_buffers.items(), key=lambda item: item[1].content_index):
            arguments: object = buffer.arguments_text
            # Only a finished tool_calls reply has complete JSON; a `length` reply keeps the raw text.
            if stop_reason == "toolUse":
                try:
                    arguments = json.loads(buffer.arguments_text or "{}")
                except ValueError:
                    raise ValueError(f"Tool {buffer.name or index} arguments 不是完整 JSON") from None
            tool_call = ToolCall(
                id=buffer.id, name=buffer.name, arguments=arguments, raw_arguments=buffer.arguments_text
            )
            state.content[buffer.content_index] = tool_call
            stream.push(
                ModelToolcallEnd(
                    content_index=buffer.content_index,
                    tool_call=tool_call,
                    partial=self._message(state.content, stop_reason),
                )
            )
        message = self._message(state.content, stop_reason, usage=normalize_usage(finish.usage))
        stream.push(ModelDone(reason=stop_reason, message=message))
        stream.end(message)
        # END LAB 5.2


def create_openai_compatible_model(
    *, provider: str, model: str, transport: ProviderTransport
) -> OpenAICompatibleModel:
    """A `Model` for one provider and model name, reading its replies from `transport`."""
    return OpenAICompatibleModel(provider=provider, model=model, transport=transport)


# ## Lab 5.3 · SSE and the unknown boundary: text lines → data payloads → checked chunks


class InvalidProviderChunk(ValueError):
    """The provider sent JSON of a shape the course does not accept."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Invalid provider chunk: {detail}")


@dataclass
class ParsedOpenAIChunk:
    """What one checked payload says: text and tool chunks, maybe a finish reason, maybe usage."""

    chunks: list[ProviderChunkText | ProviderChunkTool]
    finish_reason: FinishReason | None = None
    usage: PartialUsage | None = None


MAX_SAFE_INTEGER = 2**53 - 1  # what a JavaScript provider can count exactly


def _optional_string(record: dict[str, Any], key: str, path: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidProviderChunk(f"{path}.{key} must be a string")
    return value


def _as_count(value: object) -> int | None:
    """The value as a token count or index, or None when it is not one."""
    # JSON has one number type: 3 and 3.0 are the same count, and True is not one.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SAFE_INTEGER:
        return value
    return None


def _optional_count(record: dict[str, Any], key: str, path: str) -> int | None:
    value = record.get(key)
    if value is None:
        return None
    count = _as_count(value)
    if count is None:
        raise InvalidProviderChunk(f"{path}.{key} must be a non-negative integer")
    return count


def parse_usage(value: object) -> PartialUsage | None:
    """Check a payload's `usage` and rename its counts; None where there is none."""
    # BEGIN LAB 5.3
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidProviderChunk("usage must be an object")
    return PartialUsage(
        input=_optional_count(value, "prompt_tokens", "usage"),
        output=_optional_count(value, "completion_tokens", "usage"),
        total_tokens=_optional_count(value, "total_tokens", "usage"),
    )
    # END LAB 5.3


def parse_finish_reason(value: object) -> FinishReason | None:
    """Accept only the three finish reasons the course can map; None while the reply goes on."""
    # BEGIN LAB 5.3
    if value is None:
        return None
    if value == "stop" or value == "length" or value == "tool_calls":
        return value
    raise InvalidProviderChunk("finish_reason is not supported")
    # END LAB 5.3


def parse_tool_chunk(value: object, path: str) -> ProviderChunkTool:
    """Check one entry of `delta.tool_calls`; it must carry an id, a name or an arguments piece."""
    # BEGIN LAB 5.3
    if not isinstance(value, dict):
        raise InvalidProviderChunk(f"{path} must be an object")
    index = _as_count(value.get("index"))
    if index is None:
        raise InvalidProviderChunk(f"{path}.index must be a non-negative integer")
    if value.get("type") not in (None, "function"):
        raise InvalidProviderChunk(f"{path}.type must be function")
    call_id = _optional_string(value, "id", path)
    name: str | None = None
    arguments_delta: str | None = None
    function = value.get("function")
    if function is not None:
        if not isinstance(function, dict):
            raise InvalidProviderChunk(f"{path}.function must be an object")
        name = _optional_string(function, "name", f"{path}.function")
        arguments_delta = _optional_string(function, "arguments", f"{path}.function")
    if call_id is None and name is None and arguments_delta is None:
        raise InvalidProviderChunk(f"{path} has no tool-call delta")
    return ProviderChunkTool(index=index, id=call_id, name=name, arguments_delta=arguments_delta)
    # END LAB 5.3


def parse_openai_chunk(value: object) -> ParsedOpenAIChunk:
    """Check one decoded SSE payload: only what passes here becomes a `ProviderChunk`."""
    # BEGIN LAB 5.3
    if not isinstance(value, dict):
        raise InvalidProviderChunk("payload must be an object")
    if "error" in value:
        raise InvalidProviderChunk("provider returned an error payload")
    choices = value.get("choices")
    if not isinstance(choices, list):
        raise InvalidProviderChunk("choices must be an array")
    if len(choices) > 1:
        raise InvalidProviderChunk("only one streamed choice is supported")
    usage = parse_usage(value.get("usage"))
    if not choices:
        # An empty choices list only carries the trailing usage.
        if usage is None:
            raise InvalidProviderChunk("empty choices require usage")
        return ParsedOpenAIChunk(chunks=[], usage=usage)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise InvalidProviderChunk("choices[0] must be an object")
    if "index" in choice and _as_count(choice["index"]) is None:
        raise InvalidProviderChunk("choices[0].index must be a non-negative integer")
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        raise InvalidProviderChunk("choices[0].delta must be an object")
    chunks: list[ProviderChunkText | ProviderChunkTool] = []
    content = delta.get("content")
    if content is not None:
        if not isinstance(content, str):
            raise InvalidProviderChunk("choices[0].delta.content must be a string")
        if content:
            chunks.append(ProviderChunkText(delta=content))
    tool_calls = delta.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise InvalidProviderChunk("choices[0].delta.tool_calls must be an array")
        for position, tool_call in enumerate(tool_calls):
            chunks.append(parse_tool_chunk(tool_call, f"choices[0].delta.tool_calls[{position}]"))
    return ParsedOpenAIChunk(
        chunks=chunks, finish_reason=parse_finish_reason(choice.get("finish_reason")), usage=usage
    )
    # END LAB 5.3


class SSEDecoder:
    """Cuts decoded text into SSE data payloads.

    A network read is only "some bytes": it may end inside a line, or hold several events. Text is
    buffered until a newline ends a line; a blank line ends the event its `data:` lines belong to.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._data_lines: list[str] = []

    def feed(self, text: str) -> list[str]:
        """Add text; return the payloads of the events it completed."""
        # BEGIN LAB 5.3
        self._buffer += text
        payloads: list[str] = []
        while (end := self._buffer.find("\n")) >= 0:
            line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
            data = self._line(line.removesuffix("\r"))
            if data is not None:
                payloads.append(data)
        return payloads
        # END LAB 5.3

    def close(self) -> list[str]:
        """The body has ended: return what an unterminated last line or event still held."""
        # BEGIN LAB 5.3
        payloads: list[str] = []
        if self._buffer:
            data = self._line(self._buffer.removesuffix("\r"))
            self._buffer = ""
            if data is not None:
                payloads.append(data)
        if self._data_lines:
            payloads.append("\n".join(self._data_lines))
            self._data_lines = []
        return payloads
        # END LAB 5.3

    def _line(self, line: str) -> str | None:
        """Take one line: collect a `data:` value; a blank line completes the event."""
        # BEGIN LAB 5.3
        if line == "":
            if not self._data_lines:
                return None
            data = "\n".join(self._data_lines)
            self._data_lines = []
            return data
        if line == "data":
            self._data_lines.append("")
        elif line.startswith("data:"):
            value = line[len("data:") :]
            self._data_lines.append(value.removeprefix(" "))
        return None
        # END LAB 5.3


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity; JSON (and the provider) does not.
    raise ValueError(name)


class SSEChunkCollector:
    """Turns payloads into chunks, and remembers the finish reason and usage until the stream ends.

    The finish reason and the usage often arrive in different payloads (usage trails, with empty
    choices), so the one finish chunk is only made at the end.
    """

    def __init__(self) -> None:
        self.finish_reason: FinishReason | None = None
        self.usage: PartialUsage | None = None
        self.done = False

    def accept(self, data: str) -> list[ProviderChunkText | ProviderChunkTool]:
        """Check one payload and return its text and tool chunks; `[DONE]` marks the stream done."""
        # BEGIN LAB 5.3
        if data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            raw = json.loads(data, parse_constant=_reject_constant)
        except ValueError:
            raise InvalidProviderChunk("data line is not valid JSON") from None
        parsed = parse_openai_chunk(raw)
        if self.finish_reason is not None and parsed.chunks:
            raise InvalidProviderChunk("content arrived after finish_reason")
        if (
            self.finish_reason is not None
            and parsed.finish_reason is not None
            and parsed.finish_reason != self.finish_reason
        ):
            raise InvalidProviderChunk("finish_reason changed during the stream")
        if parsed.finish_reason is not None:
            self.finish_reason = parsed.finish_reason
        if parsed.usage is not None:
            # A later report fills in or replaces the counts of an earlier one.
            earlier = self.usage or PartialUsage()
            self.usage = PartialUsage(
                input=parsed.usage.input if parsed.usage.input is not None else earlier.input,
                output=parsed.usage.output if parsed.usage.output is not None else earlier.output,
                total_tokens=parsed.usage.total_tokens
                if parsed.usage.total_tokens is not None
                else earlier.total_tokens,
            )
        return parsed.chunks
        # END LAB 5.3

    def finish(self) -> list[ProviderChunkFinish]:
        """The stream has ended: one finish chunk, or none when no finish reason ever came."""
        # BEGIN LAB 5.3
        if self.finish_reason is None:
            return []
        return [ProviderChunkFinish(reason=self.finish_reason, usage=self.usage)]
        # END LAB 5.3


# ## Lab 5.4 · the HTTP request and the API key


def chat_completions_endpoint(base_url: str) -> str:
    """The base URL without its trailing slashes, plus `/chat/completions`; it must be absolute."""
    # BEGIN LAB 5.4
    endpoint = f"{base_url.rstrip('/')}/chat/completions"
    parts = urlsplit(endpoint)
    if not parts.scheme or not parts.netloc:
        raise ValueError("OpenAI-compatible baseUrl must be an absolute URL")
    return endpoint
    # END LAB 5.4


def request_headers(api_key: str) -> dict[str, str]:
    """The request's headers: the API key travels in `Authorization` and nowhere else."""
    # BEGIN LAB 5.4
    return {
        "Accept": "text/event-stream",
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
    }
    # END LAB 5.4


def request_body(request: ProviderRequest) -> dict[str, Any]:
    """The JSON body: the request, asking for a stream that ends with the usage."""
    # BEGIN LAB 5.4
    return {**request.to_dict(), "stream": True, "stream_options": {"include_usage": True}}
    # END LAB 5.4


class ProviderTransportError(Exception):
    """A transport failure, its message already free of the API key."""


def sanitized_transport_error(error: BaseException, api_key: str) -> Exception:
    """The error that may leave the transport: a cancellation stays one; any other loses the key."""
    # BEGIN LAB 5.4
    if isinstance(error, AbortError):
        return AbortError()
    message = str(error)
    sanitized = message.replace(api_key, "[redacted]") if api_key else message
    return ProviderTransportError(sanitized or "OpenAI-compatible transport failed")
    # END LAB 5.4


async def until_aborted(awaitable: Awaitable[T], signal: AbortSignal | None) -> T:
    """Await `awaitable`, unless the signal fires first: then cancel it and raise `AbortError`.

    A read that waits for the next bytes would not notice a flag; the signal's listener wakes it.
    """
    if signal is None:
        return await awaitable
    throw_if_aborted(signal)
    task = asyncio.ensure_future(awaitable)
    aborted = asyncio.get_running_loop().create_future()

    def on_abort() -> None:
        if not aborted.done():
            aborted.set_result(None)

    signal.add_event_listener("abort", on_abort)
    try:
        await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal.remove_event_listener("abort", on_abort)
        aborted.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise AbortError()
    return task.result()


# A streamed reply may pause for a long time between chunks; only connecting has a short limit.
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


class OpenAICompatibleTransport:
    """POSTs the request to `<base_url>/chat/completions` and streams back checked chunks."""

    def __init__(self, *, endpoint: str, api_key: str, client: httpx.AsyncClient | None = None) -> None:
        self.endpoint = endpoint
        self._api_key = api_key  # never part of the request body, the context or an error
        self._client = client

    async def stream(
        self, request: ProviderRequest, *, signal: AbortSignal | None = None
    ) -> AsyncIterator[ProviderChunk]:
        """Send the request and yield its chunks; every failure leaves without the API key."""
        try:
            throw_if_aborted(signal)
            async with contextlib.AsyncExitStack() as resources:
                client = self._client
                if client is None:  # a client of its own, closed with this stream
                    client = await resources.enter_async_context(httpx.AsyncClient(timeout=DEFAULT_TIMEOUT))
                body = _compact_json(request_body(request)).encode("utf-8")
                response = await until_aborted(
                    resources.enter_async_context(
                        client.stream(
                            "POST", self.endpoint, headers=request_headers(self._api_key), content=body
                        )
                    ),
                    signal,
                )
                throw_if_aborted(signal)
                if not response.is_success:
                    raise ProviderTransportError(
                        f"OpenAI-compatible request failed with HTTP {response.status_code}"
                    )
                async for chunk in self._read(response, signal):
                    yield chunk
        except Exception as error:
            # `from None`: the original error, which may hold the key, does not travel along.
            raise sanitized_transport_error(error, self._api_key) from None

    async def _read(
        self, response: httpx.Response, signal: AbortSignal | None
    ) -> AsyncIterator[ProviderChunk]:
        # Bytes → text (a character may be split between reads) → payloads → chunks.
        text = codecs.getincrementaldecoder("utf-8")()
        sse = SSEDecoder()
        collector = SSEChunkCollector()
        body = response.aiter_bytes()
        while not collector.done:
            piece = await until_aborted(anext(body, None), signal)
            throw_if_aborted(signal)
            payloads = sse.feed(text.decode(piece or b"", final=piece is None))
            if piece is None:
                payloads += sse.close()
            for data in payloads:
                throw_if_aborted(signal)
                for chunk in collector.accept(data):
                    yield chunk
                if collector.done:
                    break
            if piece is None:
                break
        throw_if_aborted(signal)
        for finish in collector.finish():
            yield finish


def create_openai_compatible_transport(
    *, base_url: str, api_key: str, client: httpx.AsyncClient | None = None
) -> OpenAICompatibleTransport:
    """A transport for an OpenAI-compatible API; pass `client` to reuse (or configure) an httpx client."""
    # BEGIN LAB 5.4
    return OpenAICompatibleTransport(
        endpoint=chat_completions_endpoint(base_url), api_key=api_key, client=client
    )
    # END LAB 5.4
