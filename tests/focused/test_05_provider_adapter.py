"""Focused tests of checkpoint 05: a real provider behind `Model.stream()`, through adapter and transport.

Sections follow the labs: 5.1 outbound conversion, 5.2 the adapter on normalized chunks, 5.3 SSE
framing and the checks at the unknown boundary (no network), 5.4 the HTTP transport against a real
server on 127.0.0.1 (tests/focused/sse_server.py), with cancellation and the API key. On the starter
each test stops on the LabNotImplemented of its own lab or of an earlier one.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from pi_course import (
    AbortController,
    AbortError,
    AbortSignal,
    AgentContext,
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    InvalidProviderChunk,
    ModelEvent,
    PartialUsage,
    ProviderChunk,
    ProviderChunkFinish,
    ProviderChunkText,
    ProviderChunkTool,
    ProviderRequest,
    ProviderTransport,
    SSEChunkCollector,
    SSEDecoder,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
    assistant_message,
    create_openai_compatible_model,
    create_openai_compatible_transport,
    current_system_prompt,
    fixed_transport,
    parse_openai_chunk,
    sanitized_transport_error,
    text,
    to_provider_messages,
    to_provider_tools,
    user_message,
)
from sse_server import HOLD, Reply, split_in_half, sse_event, sse_server

# Shared helpers. Nothing here calls a lab piece at import time.

API_KEY = "offline-test-key"
SECRET_KEY = "never-print-this-secret"


def read_tool() -> ToolDefinition:
    """The course's `read` tool definition (a fresh object each time)."""
    return ToolDefinition(
        name="read",
        description="Read one file",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )


def read_tool_wire() -> dict[str, Any]:
    """The same tool as the provider receives it."""
    return {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read one file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }


def raised(kind: type[Exception], action: Any) -> str:
    """The message of the `kind` exception that `action()` raises (the test fails if it raises none)."""
    with pytest.raises(kind) as caught:
        action()
    return str(caught.value)


def go() -> AgentContext:
    """A one-message context."""
    return AgentContext(messages=[user_message("go")])


async def consume(stream: Any) -> tuple[list[ModelEvent], AssistantMessage]:
    """Every event of a reply, then its result."""
    events: list[ModelEvent] = [event async for event in stream]
    return events, await stream.result()


def run_model(chunks: Sequence[ProviderChunk], context: AgentContext | None = None) -> Any:
    """Stream a fixed list of chunks through the adapter; return (events, result)."""
    model = create_openai_compatible_model(
        provider="fixture", model="fixture-1", transport=fixed_transport(chunks)
    )
    return run_stream(model, context or go())


def run_stream(model: Any, context: AgentContext, signal: AbortSignal | None = None) -> Any:
    """Start a reply on a fresh event loop (stream() needs a running one) and consume it."""

    async def scenario() -> tuple[list[ModelEvent], AssistantMessage]:
        return await consume(model.stream(context, signal=signal))

    return asyncio.run(asyncio.wait_for(scenario(), 5))


def stable(message: AssistantMessage) -> dict[str, Any]:
    """A message's wire form without its timestamp."""
    wire = message.to_dict()
    del wire["timestamp"]
    return wire


def call(call_id: str, name: str, arguments: object, raw: str | None) -> ToolCall:
    """A tool call block."""
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw)


class RecordingTransport:
    """Passes everything to a real transport, remembering the requests and signals it was given."""

    def __init__(self, inner: ProviderTransport) -> None:
        self.inner = inner
        self.requests: list[ProviderRequest] = []
        self.signals: list[AbortSignal | None] = []

    def stream(
        self, request: ProviderRequest, *, signal: AbortSignal | None = None
    ) -> AsyncIterator[ProviderChunk]:
        self.requests.append(request)
        self.signals.append(signal)
        return self.inner.stream(request, signal=signal)


# ## Lab 5.1 · outbound conversion


def outbound_context() -> AgentContext:
    """The course's four-role context: system, user with two blocks, assistant with two calls, tool result."""
    return AgentContext(
        messages=[
            SystemMessage(content="You are precise.", timestamp=0),
            UserMessage(content=[text("read a.txt"), text("then search")], timestamp=1),
            assistant_message(
                [
                    text("I will inspect both."),
                    call("call-1", "read", {"path": "wrong.txt"}, '{"path":"a.txt"}'),
                    call("call-2", "search", {"query": "pi"}, None),
                ],
                "toolUse",
            ),
            ToolResultMessage(
                tool_call_id="call-1",
                tool_name="read",
                content=[text("A"), text("B")],
                details=None,
                is_error=False,
                timestamp=1,
            ),
        ]
    )


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_messages")
def test_outbound_conversion_maps_each_canonical_role_to_its_wire_role() -> None:
    """四种 canonical role 出线时是否各自变成 provider 的 wire 形状（tool result 变成 role "tool"），且
    context 不被改动？"""
    context = outbound_context()
    snapshot = copy.deepcopy(context)
    assert to_provider_messages(context) == [
        {"role": "system", "content": "You are precise."},
        {"role": "user", "content": "read a.txt\nthen search"},
        {
            "role": "assistant",
            "content": "I will inspect both.",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"a.txt"}'},
                },
                {
                    "id": "call-2",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query":"pi"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call-1", "name": "read", "content": "A\nB"},
    ]
    assert context == snapshot


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_tools")
def test_tools_are_wrapped_as_functions() -> None:
    """每个 ToolDefinition 是否被包成 {"type": "function", "function": {...}}，输入保持原样？"""
    tools = [read_tool()]
    assert to_provider_tools(tools) == [read_tool_wire()]
    assert tools == [read_tool()]


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_tools")
def test_no_tools_means_no_tools_key() -> None:
    """没有工具（None 或空列表）时，是否返回 None，而不是空数组？"""
    assert to_provider_tools(None) is None
    assert to_provider_tools([]) is None


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_messages")
def test_system_messages_fold_into_one_leading_system_message() -> None:
    """多条 system message 是否在出线时折叠成开头一条（内容等于重放结果），中途那条不进入 wire，transcript 不
    变？"""
    context = AgentContext(
        messages=[
            SystemMessage(content="BASE", sections={"rules": "RULE v1", "scratch": "SCRATCH"}, timestamp=0),
            user_message("first"),
            assistant_message([text("ok")]),
            SystemMessage(content="", sections={"rules": "RULE v2", "scratch": None}, timestamp=2),
            user_message("second"),
        ]
    )
    snapshot = copy.deepcopy(context)
    messages = to_provider_messages(context)
    assert messages == [
        {"role": "system", "content": "BASE\n\nRULE v2"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
    ]
    assert [m["role"] for m in messages].count("system") == 1
    assert current_system_prompt(context.messages) == "BASE\n\nRULE v2", "折叠结果就是 transcript 的重放结果"
    assert context == snapshot, "折叠只发生在请求出线那一刻，不回写 transcript"
    assert [m["role"] for m in to_provider_messages(AgentContext(messages=[user_message("no system")]))] == [
        "user"
    ]


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_messages")
def test_an_empty_replayed_prompt_sends_no_system_message() -> None:
    """system message 重放出来是空串时，wire 上是否一条 system 都没有？"""
    context = AgentContext(messages=[SystemMessage(content="", timestamp=0), user_message("hi")])
    assert to_provider_messages(context) == [{"role": "user", "content": "hi"}]


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_messages")
def test_assistant_wire_content_is_null_without_text_and_arguments_fall_back_to_json() -> None:
    """只有工具调用的 assistant，其 content 是否为 None；没有 raw_arguments 时参数是否为紧凑 JSON（None 记为
    {}）？"""
    message = assistant_message(
        [call("call-1", "read", {"path": "读我.md"}, None), call("call-2", "noop", None, None)], "toolUse"
    )
    assert to_provider_messages(AgentContext(messages=[message])) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"读我.md"}'},
                },
                {"id": "call-2", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
            ],
        }
    ]


@pytest.mark.lab5_1
@pytest.mark.edits("to_provider_messages")
def test_any_transcript_has_at_most_one_system_message_and_it_comes_first() -> None:
    """对任意 transcript，wire 上是否至多一条 system、且在最前，其余消息按原顺序一条不少？"""
    to_provider_messages(AgentContext(messages=[user_message("first a plain example")]))
    from hypothesis import given
    from hypothesis import strategies as st

    words = st.text(alphabet="ab 值\n", max_size=4)
    system = st.builds(
        lambda content, rules: SystemMessage(content=content, timestamp=0, sections=rules),
        words,
        st.none() | st.dictionaries(st.sampled_from(["rules", "scratch"]), st.none() | words, max_size=2),
    )
    user = st.builds(user_message, words)
    reply = st.builds(lambda value: assistant_message([text(value)]), words)
    transcripts = st.lists(st.one_of(system, user, reply), max_size=8)

    @given(transcripts)
    def check(messages: list[AgentMessage]) -> None:
        wire = to_provider_messages(AgentContext(messages=messages))
        roles = [m["role"] for m in wire]
        assert roles.count("system") <= 1
        assert "system" not in roles[1:]
        prompt = current_system_prompt(messages)
        assert (roles[:1] == ["system"]) == bool(prompt)
        assert [m["role"] for m in wire if m["role"] != "system"] == [
            m.role for m in messages if m.role != "system"
        ]

    check()


# ## Lab 5.2 · the adapter on normalized chunks

INTERLEAVED: list[ProviderChunk] = [
    ProviderChunkTool(index=4, id="call-read", name="read", arguments_delta='{"path":'),
    ProviderChunkText(delta="先读"),
    ProviderChunkTool(index=2, id="call-search", name="search", arguments_delta='{"query":'),
    ProviderChunkTool(index=4, arguments_delta='"README.md"}'),
    ProviderChunkText(delta="，再查"),
    ProviderChunkTool(index=2, arguments_delta='"pi"}'),
    ProviderChunkFinish(reason="tool_calls", usage=PartialUsage(input=7, output=5, total_tokens=12)),
]


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._apply_tool")
def test_adapter_keeps_first_appearance_order_and_accumulates_whole_partials() -> None:
    """index 4、2 的工具与文本交错到达时，content 是否按首次出现排序，每个事件的 partial 是否是当时完整的累计
    结果？"""
    events, result = run_model(INTERLEAVED)
    read_opening = call("call-read", "read", '{"path":', '{"path":')
    read_raw = call("call-read", "read", '{"path":"README.md"}', '{"path":"README.md"}')
    search_opening = call("call-search", "search", '{"query":', '{"query":')
    search_raw = call("call-search", "search", '{"query":"pi"}', '{"query":"pi"}')
    read_final = call("call-read", "read", {"path": "README.md"}, '{"path":"README.md"}')
    search_final = call("call-search", "search", {"query": "pi"}, '{"query":"pi"}')
    first_text, final_text = text("先读"), text("先读，再查")
    final_content: list[AssistantContent] = [read_final, final_text, search_final]

    assert [e.type for e in events] == [
        "start",
        "toolcall_delta",
        "text_delta",
        "toolcall_delta",
        "toolcall_delta",
        "text_delta",
        "toolcall_delta",
        "toolcall_end",
        "toolcall_end",
        "done",
    ]
    deltas = [e for e in events if e.type in ("text_delta", "toolcall_delta")]
    assert [(e.type, e.content_index, e.delta) for e in deltas] == [
        ("toolcall_delta", 0, '{"path":'),
        ("text_delta", 1, "先读"),
        ("toolcall_delta", 2, '{"query":'),
        ("toolcall_delta", 0, '"README.md"}'),
        ("text_delta", 1, "，再查"),
        ("toolcall_delta", 2, '"pi"}'),
    ]
    assert [e.partial.content for e in deltas] == [
        [read_opening],
        [read_opening, first_text],
        [read_opening, first_text, search_opening],
        [read_raw, first_text, search_opening],
        [read_raw, final_text, search_opening],
        [read_raw, final_text, search_raw],
    ]
    for event in deltas:
        partial = event.partial
        assert stable(partial) == {
            "role": "assistant",
            "content": [block.to_dict() for block in partial.content],
            "provider": "fixture",
            "model": "fixture-1",
            "usage": {"input": 0, "output": 0, "totalTokens": 0},
            "stopReason": "stop",
        }
    ends = [e for e in events if e.type == "toolcall_end"]
    assert [(e.content_index, e.tool_call, e.partial.content) for e in ends] == [
        (0, read_final, [read_final, final_text, search_raw]),
        (2, search_final, final_content),
    ]
    assert stable(result) == {
        "role": "assistant",
        "content": [block.to_dict() for block in final_content],
        "provider": "fixture",
        "model": "fixture-1",
        "usage": {"input": 7, "output": 5, "totalTokens": 12},
        "stopReason": "toolUse",
    }
    assert result.content == final_content
    terminal = events[-1]
    assert terminal.type == "done"
    assert terminal.reason == "toolUse"
    assert terminal.message == result


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel.stream")
def test_the_chapter_mainline_call_arrives_in_two_pieces() -> None:
    """主线 call-1（index 0）分两段到达时，最终是否得到 read({"path": "README.md"})，usage 缺的 total 是否补成
    input + output？"""
    events, result = run_model(
        [
            ProviderChunkTool(index=0, id="call-1", name="read", arguments_delta='{"path":'),
            ProviderChunkTool(index=0, arguments_delta='"README.md"}'),
            ProviderChunkFinish(reason="tool_calls", usage=PartialUsage(output=2)),
        ]
    )
    assert [e.type for e in events] == ["start", "toolcall_delta", "toolcall_delta", "toolcall_end", "done"]
    assert result.content == [call("call-1", "read", {"path": "README.md"}, '{"path":"README.md"}')]
    assert result.stop_reason == "toolUse"
    assert result.usage == Usage(input=0, output=2, total_tokens=2)


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel.stream")
def test_text_partials_are_snapshots_of_their_moment() -> None:
    """纯文本 fixture 里，每个 text_delta 的 partial 是否停在它那一刻（"正在"，然后 "正在读取"），不被后来的字
    符改写？"""
    events, result = run_model(
        [ProviderChunkText(delta="正在"), ProviderChunkText(delta="读取"), ProviderChunkFinish(reason="stop")]
    )
    assert [e.type for e in events] == ["start", "text_delta", "text_delta", "done"]
    assert [e.partial.content for e in events[1:3]] == [[text("正在")], [text("正在读取")]]
    assert events[0].partial.content == []
    assert result.content == [text("正在读取")]
    assert result.stop_reason == "stop"
    assert result.usage == Usage(0, 0, 0)


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._run")
def test_transport_failure_keeps_the_partial_and_ends_in_error() -> None:
    """transport 中途抛出异常时，结果是否以 error 结束，并保留已经到达的文本？"""

    class Broken:
        async def stream(
            self, request: ProviderRequest, *, signal: AbortSignal | None = None
        ) -> AsyncIterator[Any]:
            yield ProviderChunkText(delta="partial")
            raise RuntimeError("socket reset")

    model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=Broken())
    events, result = run_stream(model, go())
    assert result.stop_reason == "error"
    assert result.content[0] == text("partial")
    assert result.error_message == "socket reset"
    assert events[-1].type == "error"
    assert events[-1].reason == "error"
    assert events[-1].error == result


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._finish")
def test_length_keeps_the_raw_arguments() -> None:
    """finish 为 length（输出被截断）时，stop reason 是否为 length，arguments 与 raw_arguments 是否都保留原
    文？"""
    raw = '{"path":"a'
    _events, result = run_model(
        [
            ProviderChunkTool(index=0, id="call-1", name="read", arguments_delta=raw),
            ProviderChunkFinish(reason="length"),
        ]
    )
    calls = [block for block in result.content if isinstance(block, ToolCall)]
    assert result.stop_reason == "length"
    assert calls[0].arguments == raw
    assert calls[0].raw_arguments == raw


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._run")
def test_missing_finish_chunk_is_an_error_with_the_partial() -> None:
    """chunk 用完却没有 finish 时，是否以 error 结束（消息含 `without a finish chunk`），并保留 partial？"""
    _events, result = run_model([ProviderChunkText(delta="partial")])
    assert result.stop_reason == "error"
    assert result.error_message == "Provider stream ended without a finish chunk"
    assert result.content == [text("partial")]


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._run")
def test_incomplete_json_on_tool_calls_is_an_error() -> None:
    """finish 为 tool_calls 但参数不是完整 JSON 时，是否以 error 结束，消息为
    `Tool read arguments 不是完整 JSON`？"""
    _events, result = run_model(
        [
            ProviderChunkTool(index=0, id="call-1", name="read", arguments_delta='{"path":'),
            ProviderChunkFinish(reason="tool_calls"),
        ]
    )
    assert result.stop_reason == "error"
    assert result.error_message == "Tool read arguments 不是完整 JSON"
    assert result.content == [call("call-1", "read", '{"path":', '{"path":')]


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel.stream")
def test_adapter_sends_the_model_wire_messages_and_tools_with_the_callers_signal() -> None:
    """adapter 交给 transport 的请求是否带着模型名、wire messages、wire tools，以及调用方的同一个 signal？"""
    recording = RecordingTransport(fixed_transport([ProviderChunkFinish(reason="stop")]))
    model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=recording)
    controller = AbortController()
    context = AgentContext(messages=[user_message("read a.txt")], tools=[read_tool()])
    run_stream(model, context, signal=controller.signal)
    assert recording.requests == [
        ProviderRequest(
            model="fixture-1", messages=[{"role": "user", "content": "read a.txt"}], tools=[read_tool_wire()]
        )
    ]
    assert recording.signals[0] is controller.signal


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._run")
def test_abort_between_chunks_ends_in_aborted_with_the_partial() -> None:
    """两个 chunk 之间 signal 被触发时，结果是否是 aborted（不是 error），并保留已到达的文本？"""

    async def scenario() -> tuple[list[ModelEvent], AssistantMessage]:
        controller = AbortController()
        gate = asyncio.Event()

        class Paused:
            async def stream(
                self, request: ProviderRequest, *, signal: AbortSignal | None = None
            ) -> AsyncIterator[Any]:
                yield ProviderChunkText(delta="partial")
                await gate.wait()
                yield ProviderChunkText(delta=" more")
                yield ProviderChunkFinish(reason="stop")

        model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=Paused())
        stream = model.stream(go(), signal=controller.signal)
        events: list[ModelEvent] = []
        async for event in stream:
            events.append(event)
            if event.type == "text_delta":
                controller.abort()
                gate.set()
        return events, await stream.result()

    events, result = asyncio.run(asyncio.wait_for(scenario(), 5))
    assert events[-1].type == "error"
    assert events[-1].reason == "aborted"
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request was aborted"
    assert result.content == [text("partial")]


@pytest.mark.lab5_2
@pytest.mark.edits("OpenAICompatibleModel._apply_tool")
def test_any_interleaving_of_tool_pieces_rebuilds_each_call_by_index() -> None:
    """任意交错到达的工具参数分片，是否都按 provider index 拼回各自调用的完整 arguments？"""
    assert run_model(INTERLEAVED)[1].stop_reason == "toolUse"  # first a plain example
    from hypothesis import given
    from hypothesis import strategies as st

    @st.composite
    def interleavings(draw: st.DrawFn) -> tuple[dict[int, dict[str, Any]], list[ProviderChunk]]:
        indices = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True))
        calls: dict[int, dict[str, Any]] = {}
        queues: dict[int, list[ProviderChunkTool]] = {}
        for index in indices:
            arguments = draw(
                st.dictionaries(st.sampled_from(["path", "query", "值"]), st.text("ab值", max_size=3))
            )
            raw = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
            cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=3)))
            pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
            calls[index] = arguments
            queues[index] = [
                ProviderChunkTool(index=index, arguments_delta=piece, id=f"id-{index}" if n == 0 else None)
                for n, piece in enumerate(pieces)
            ]
        chunks: list[ProviderChunk] = []
        while any(queues.values()):
            index = draw(st.sampled_from([i for i, queue in queues.items() if queue]))
            chunks.append(queues[index].pop(0))
        return calls, [*chunks, ProviderChunkFinish(reason="tool_calls")]

    @given(interleavings())
    def check(case: tuple[dict[int, dict[str, Any]], list[ProviderChunk]]) -> None:
        calls, chunks = case
        _events, result = run_model(chunks)
        assert result.stop_reason == "toolUse"
        rebuilt = {block.id: block.arguments for block in result.content if isinstance(block, ToolCall)}
        assert rebuilt == {f"id-{index}": arguments for index, arguments in calls.items()}
        first_seen = list(
            dict.fromkeys(chunk.index for chunk in chunks if isinstance(chunk, ProviderChunkTool))
        )
        assert [block.id for block in result.content if isinstance(block, ToolCall)] == [
            f"id-{index}" for index in first_seen
        ]

    check()


# ## Lab 5.3 · SSE framing and the unknown boundary


def collect(
    payloads: Sequence[object], split: Sequence[int] = ()
) -> tuple[list[ProviderChunk], SSEChunkCollector]:
    """Feed SSE events (cut at the given character offsets) through decoder and collector."""
    body = b"".join(sse_event(p) for p in payloads).decode()
    cuts = [0, *split, len(body)]
    decoder, collector = SSEDecoder(), SSEChunkCollector()
    chunks: list[ProviderChunk] = []
    for start, end in itertools.pairwise(cuts):
        for data in decoder.feed(body[start:end]):
            if not collector.done:
                chunks += collector.accept(data)
    for data in decoder.close():
        if not collector.done:
            chunks += collector.accept(data)
    return [*chunks, *collector.finish()], collector


def tool_payload(*calls: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One streamed payload carrying tool-call pieces."""
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": finish}]}


INTERLEAVED_SSE: list[object] = [
    tool_payload(
        {
            "index": 0,
            "id": "call-read",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path":'},
        },
        {
            "index": 1,
            "id": "call-search",
            "type": "function",
            "function": {"name": "search", "arguments": '{"query":'},
        },
    ),
    tool_payload({"index": 1, "function": {"arguments": '"pi"}'}}),
    tool_payload({"index": 0, "function": {"arguments": '"README.md"}'}}),
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}},
    "[DONE]",
]


@pytest.mark.lab5_3
@pytest.mark.edits("SSEDecoder.feed")
def test_sse_pieces_keep_their_index_and_the_trailing_usage_joins_the_finish() -> None:
    """交错的 tool_calls 是否原样变成带 index 的 chunk，尾随 usage 是否并入唯一的 finish chunk？"""
    chunks, collector = collect(INTERLEAVED_SSE, split=[57])
    assert chunks == [
        ProviderChunkTool(index=0, id="call-read", name="read", arguments_delta='{"path":'),
        ProviderChunkTool(index=1, id="call-search", name="search", arguments_delta='{"query":'),
        ProviderChunkTool(index=1, arguments_delta='"pi"}'),
        ProviderChunkTool(index=0, arguments_delta='"README.md"}'),
        ProviderChunkFinish(reason="tool_calls", usage=PartialUsage(input=12, output=8, total_tokens=20)),
    ]
    assert collector.done


@pytest.mark.lab5_3
@pytest.mark.edits("SSEChunkCollector.finish")
def test_no_finish_reason_means_no_finish_chunk() -> None:
    """整段流都没有 finish_reason 时，是否一个 finish chunk 都不产出（交给 adapter 判为 error）？"""
    chunks, _ = collect(
        [{"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}]}, "[DONE]"]
    )
    assert chunks == [ProviderChunkText(delta="partial")]


@pytest.mark.lab5_3
@pytest.mark.edits("parse_openai_chunk")
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"choices": "not-an-array"}, "Invalid provider chunk: choices must be an array"),
        (
            {"choices": [{"delta": {"content": 42}}]},
            "Invalid provider chunk: choices[0].delta.content must be a string",
        ),
        ([], "Invalid provider chunk: payload must be an object"),
        ({"error": {"message": "quota"}}, "Invalid provider chunk: provider returned an error payload"),
        (
            {"choices": [{"delta": {}}, {"delta": {}}]},
            "Invalid provider chunk: only one streamed choice is supported",
        ),
        ({"choices": []}, "Invalid provider chunk: empty choices require usage"),
        ({"choices": [1]}, "Invalid provider chunk: choices[0] must be an object"),
        (
            {"choices": [{"index": -1, "delta": {}}]},
            "Invalid provider chunk: choices[0].index must be a non-negative integer",
        ),
        ({"choices": [{"delta": None}]}, "Invalid provider chunk: choices[0].delta must be an object"),
        (
            {"choices": [{"delta": {"tool_calls": {}}}]},
            "Invalid provider chunk: choices[0].delta.tool_calls must be an array",
        ),
        (
            tool_payload({"index": True, "id": "x"}),
            "Invalid provider chunk: choices[0].delta.tool_calls[0].index must be a non-negative integer",
        ),
        (
            tool_payload({"index": 0}),
            "Invalid provider chunk: choices[0].delta.tool_calls[0] has no tool-call delta",
        ),
        (
            tool_payload({"index": 0, "type": "web"}),
            "Invalid provider chunk: choices[0].delta.tool_calls[0].type must be function",
        ),
        (
            tool_payload({"index": 0, "function": {"name": 7}}),
            "Invalid provider chunk: choices[0].delta.tool_calls[0].function.name must be a string",
        ),
        (
            {"choices": [], "usage": {"prompt_tokens": -1}},
            "Invalid provider chunk: usage.prompt_tokens must be a non-negative integer",
        ),
        ({"choices": [], "usage": 5}, "Invalid provider chunk: usage must be an object"),
    ],
)
def test_payloads_of_an_invalid_shape_are_refused(payload: object, message: str) -> None:
    """形状不对的外部 JSON 是否在进入 ProviderChunk 之前就被拒绝，错误消息逐字指出是哪个字段？"""
    with pytest.raises(InvalidProviderChunk) as raised:
        parse_openai_chunk(payload)
    assert str(raised.value) == message


@pytest.mark.lab5_3
@pytest.mark.edits("parse_finish_reason")
def test_an_unknown_finish_reason_is_refused() -> None:
    """finish_reason 是 content_filter 这类课程无法映射的值时，是否被拒绝（消息提到 finish_reason）？"""
    assert (
        raised(
            InvalidProviderChunk,
            lambda: parse_openai_chunk(
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}
            ),
        )
        == "Invalid provider chunk: finish_reason is not supported"
    )


@pytest.mark.lab5_3
@pytest.mark.edits("SSEChunkCollector.accept")
def test_collector_refuses_bad_json_content_after_finish_and_a_changed_finish_reason() -> None:
    """非 JSON 的 data、finish 之后又来的内容、中途改变的 finish_reason，是否都被拒绝？"""
    assert (
        raised(InvalidProviderChunk, lambda: SSEChunkCollector().accept("{not json"))
        == "Invalid provider chunk: data line is not valid JSON"
    )
    assert (
        raised(InvalidProviderChunk, lambda: SSEChunkCollector().accept("NaN"))
        == "Invalid provider chunk: data line is not valid JSON"
    )
    finished = SSEChunkCollector()
    finished.accept(json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
    assert (
        raised(
            InvalidProviderChunk,
            lambda: finished.accept(json.dumps({"choices": [{"delta": {"content": "late"}}]})),
        )
        == "Invalid provider chunk: content arrived after finish_reason"
    )
    assert (
        raised(
            InvalidProviderChunk,
            lambda: finished.accept(json.dumps({"choices": [{"delta": {}, "finish_reason": "length"}]})),
        )
        == "Invalid provider chunk: finish_reason changed during the stream"
    )


@pytest.mark.lab5_3
@pytest.mark.edits("SSEChunkCollector.accept")
def test_later_usage_fills_in_and_replaces_earlier_counts() -> None:
    """usage 分几次到达时，后来的计数是否补上或覆盖先前的（尾随 usage 胜出）？"""
    chunks, _ = collect(
        [
            {
                "choices": [{"delta": {"content": "hi"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            },
            {"choices": [{"delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"completion_tokens": 9, "total_tokens": 10}},
        ]
    )
    assert chunks[-1] == ProviderChunkFinish(
        reason="stop", usage=PartialUsage(input=1, output=9, total_tokens=10)
    )


@pytest.mark.lab5_3
@pytest.mark.edits("SSEDecoder.feed")
def test_sse_lines_crlf_multiline_data_and_an_unterminated_last_event() -> None:
    """CRLF 行尾、不带冒号的 data、多行 data（以换行相连）、注释与其他字段、末尾没有空行的事件，是否都按 SSE
    规则切分？"""
    decoder = SSEDecoder()
    assert decoder.feed(": comment\r\nevent: x\r\ndata: a\r\ndata\r\ndata:b\r\n\r\n") == ["a\n\nb"]
    assert decoder.feed("\n\n") == []
    assert decoder.feed("data: tail") == []
    assert decoder.close() == ["tail"]
    assert decoder.close() == []


@pytest.mark.lab5_3
@pytest.mark.edits("SSEDecoder.feed")
def test_network_reads_are_not_events_wherever_the_body_is_cut() -> None:
    """无论字节流在哪些位置被切开，decoder 切出的 payload 是否都和一次读完时完全相同？"""
    from hypothesis import given
    from hypothesis import strategies as st

    body = b"".join(sse_event(p) for p in INTERLEAVED_SSE).decode()
    whole, _ = collect(INTERLEAVED_SSE)

    @given(st.lists(st.integers(0, len(body)), max_size=6))
    def check(cuts: list[int]) -> None:
        assert collect(INTERLEAVED_SSE, split=sorted(cuts))[0] == whole

    check()


# ## Lab 5.4 · the HTTP transport, a real local server, cancellation and the API key


def stream_over_http(*replies: Reply, api_key: str = API_KEY, context: AgentContext | None = None) -> Any:
    """Serve `replies` on 127.0.0.1 and stream one reply through transport and adapter."""

    async def scenario() -> tuple[list[ModelEvent], AssistantMessage, Any]:
        async with sse_server(*replies) as server:
            transport = create_openai_compatible_transport(base_url=server.url("/v1"), api_key=api_key)
            model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=transport)
            events, result = await consume(model.stream(context or go()))
            return events, result, server

    return asyncio.run(asyncio.wait_for(scenario(), 8))


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_transport_sends_the_whole_request_and_keeps_the_key_out_of_the_body() -> None:
    """transport 是否向 <base_url>/chat/completions 发出完整的 POST（header、body、stream 选项），key 只在
    Authorization？"""

    async def scenario() -> Any:
        reply = Reply(
            split_in_half([{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, "[DONE]"])
        )
        async with sse_server(reply) as server:
            controller = AbortController()
            recording = RecordingTransport(
                create_openai_compatible_transport(base_url=server.url("/v1/"), api_key=API_KEY)
            )
            model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=recording)
            context = AgentContext(messages=[user_message("read a.txt")], tools=[read_tool()])
            _events, result = await consume(model.stream(context, signal=controller.signal))
            return result, server, recording, controller

    result, server, recording, controller = asyncio.run(asyncio.wait_for(scenario(), 8))
    assert result.stop_reason == "stop"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.method == "POST"
    assert recording.signals[0] is controller.signal
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["accept"] == "text/event-stream"
    assert request.headers["content-type"] == "application/json"
    body = request.json()
    assert body == {
        "model": "fixture-1",
        "messages": [{"role": "user", "content": "read a.txt"}],
        "tools": [read_tool_wire()],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "apiKey" not in body and "api_key" not in body
    assert API_KEY not in request.body.decode()


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_no_tools_means_no_tools_in_the_body() -> None:
    """context 没有工具时，JSON body 里是否根本没有 tools 键？"""
    reply = Reply([sse_event({"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]})])
    _events, result, server = stream_over_http(reply)
    assert result.content == [text("hi")]
    assert "tools" not in server.requests[0].json()


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_sse_over_http_rebuilds_interleaved_arguments_by_index_and_merges_trailing_usage() -> None:
    """经真实 HTTP 的 SSE 中，交错的工具参数是否按 index 拼回，尾随的 usage 是否进入最终消息？"""
    events, result, _server = stream_over_http(
        Reply(split_in_half(INTERLEAVED_SSE)), context=AgentContext(messages=[user_message("use tools")])
    )
    assert result.stop_reason == "toolUse"
    assert result.usage == Usage(input=12, output=8, total_tokens=20)
    calls = [block for block in result.content if isinstance(block, ToolCall)]
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in calls] == [
        ("call-read", "read", {"path": "README.md"}, '{"path":"README.md"}'),
        ("call-search", "search", {"query": "pi"}, '{"query":"pi"}'),
    ]
    assert [e.delta for e in events if e.type == "toolcall_delta"] == [
        '{"path":',
        '{"query":',
        '"pi"}',
        '"README.md"}',
    ]


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_sse_without_finish_reason_ends_in_error_with_the_partial() -> None:
    """经 HTTP 的流没有 finish_reason 就结束时，是否以 error 终态结束（`without a finish chunk`），并保留
    partial？"""
    payloads = [{"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}]}, "[DONE]"]
    events, result, _server = stream_over_http(Reply(split_in_half(payloads)))
    assert events[-1].type == "error"
    assert result.stop_reason == "error"
    assert "without a finish chunk" in (result.error_message or "")
    assert result.content[0] == text("partial")


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_abort_mid_stream_becomes_aborted_and_keeps_the_partial() -> None:
    """服务器还挂着连接时触发 AbortSignal，结果是否为 aborted、保留 partial，并且 transport 放开了连接？"""

    async def scenario() -> Any:
        first = sse_event({"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}]})
        async with sse_server(Reply([first, HOLD])) as server:
            controller = AbortController()
            recording = RecordingTransport(
                create_openai_compatible_transport(base_url=server.url("/v1"), api_key=API_KEY)
            )
            model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=recording)
            stream = model.stream(go(), signal=controller.signal)
            events: list[ModelEvent] = []
            async for event in stream:
                events.append(event)
                if event.type == "text_delta":
                    controller.abort()
            result = await stream.result()
            await asyncio.wait_for(server.client_hung_up.wait(), 3)
            return events, result, recording, controller

    events, result, recording, controller = asyncio.run(asyncio.wait_for(scenario(), 8))
    assert recording.signals[0] is controller.signal
    assert events[-1].type == "error"
    assert events[-1].reason == "aborted"
    assert result.stop_reason == "aborted"
    assert result.content[0] == text("partial")


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_an_already_aborted_signal_sends_no_request() -> None:
    """signal 在调用前就已触发时，是否直接以 aborted 结束，服务器一次请求也没收到？"""

    async def scenario() -> Any:
        async with sse_server(Reply([b""])) as server:
            controller = AbortController()
            controller.abort()
            transport = create_openai_compatible_transport(base_url=server.url("/v1"), api_key=API_KEY)
            model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=transport)
            _events, result = await consume(model.stream(go(), signal=controller.signal))
            return result, server

    result, server = asyncio.run(asyncio.wait_for(scenario(), 8))
    assert result.stop_reason == "aborted"
    assert server.requests == []


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_invalid_chunk_over_http_ends_in_error() -> None:
    """服务器发来形状无效的 chunk 时，是否以 error 终态结束，消息含 `Invalid provider chunk`？"""
    events, result, _server = stream_over_http(Reply(split_in_half([{"choices": "not-an-array"}, "[DONE]"])))
    assert events[-1].type == "error"
    assert result.stop_reason == "error"
    assert "Invalid provider chunk" in (result.error_message or "")


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_unknown_finish_reason_over_http_is_an_error_without_the_key() -> None:
    """未知 finish_reason 是否让结果以 error 结束，消息提到 finish_reason 而不含 API key？"""
    payloads = [{"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}, "[DONE]"]
    _events, result, _server = stream_over_http(Reply(split_in_half(payloads)), api_key=SECRET_KEY)
    assert result.stop_reason == "error"
    assert "finish_reason" in (result.error_message or "")
    assert SECRET_KEY not in (result.error_message or "")


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_http_error_status_is_an_error_without_the_body_or_key() -> None:
    """服务器回 401（正文还回显了 key）时，错误是否只说 HTTP 状态码，不带出 key？"""
    reply = Reply([f"bad key {SECRET_KEY}".encode()], status=401, content_type="text/plain")
    _events, result, _server = stream_over_http(reply, api_key=SECRET_KEY)
    assert result.stop_reason == "error"
    assert result.error_message == "OpenAI-compatible request failed with HTTP 401"


def failing_client(
    api_key_seen: list[str], template: str = "socket failed while using {key}"
) -> httpx.AsyncClient:
    """A real httpx client whose request hook fails with an error that quotes the Authorization header."""

    async def refuse(request: httpx.Request) -> None:
        key = request.headers["authorization"].removeprefix("Bearer ")
        api_key_seen.append(key)
        raise httpx.ConnectError(template.format(key=key), request=request)

    return httpx.AsyncClient(event_hooks={"request": [refuse]})


def fail_through_client(api_key: str, template: str = "socket failed while using {key}") -> AssistantMessage:
    """Stream one reply through a transport whose underlying client fails quoting the key."""

    async def scenario() -> AssistantMessage:
        seen: list[str] = []
        async with failing_client(seen, template) as client:
            transport = create_openai_compatible_transport(
                base_url="http://127.0.0.1:9/v1", api_key=api_key, client=client
            )
            model = create_openai_compatible_model(provider="fixture", model="fixture-1", transport=transport)
            _events, result = await consume(model.stream(go()))
        assert seen == [api_key], "the hook must have seen the real key"
        return result

    return asyncio.run(asyncio.wait_for(scenario(), 8))


@pytest.mark.lab5_4
@pytest.mark.edits("sanitized_transport_error")
def test_transport_redacts_the_key_in_an_underlying_error() -> None:
    """底层 httpx 错误的文本里带着 API key 时，最终 error_message 是否把它换成 [redacted]？"""
    result = fail_through_client(SECRET_KEY)
    assert result.stop_reason == "error"
    assert result.error_message == "socket failed while using [redacted]"
    assert SECRET_KEY not in (result.error_message or "")


@pytest.mark.lab5_4
@pytest.mark.edits("sanitized_transport_error")
def test_the_key_never_appears_in_any_error_text() -> None:
    """无论 key 长什么样、在错误文本中出现几次，最终的 error_message 里是否都找不到它？"""
    assert SECRET_KEY not in (fail_through_client(SECRET_KEY).error_message or "")  # first a plain example
    from hypothesis import given, settings
    from hypothesis import strategies as st

    keys = st.text(
        alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=11, max_size=24
    )
    templates = st.lists(
        st.sampled_from(["{key}", " ", "Bearer ", "认证失败", ":"]), min_size=1, max_size=6
    ).map("".join)

    @settings(max_examples=20)
    @given(keys, templates)
    def check(key: str, template: str) -> None:
        result = fail_through_client(key, template)
        assert result.stop_reason == "error"
        assert key not in (result.error_message or "")

    check()


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_base_url_must_be_absolute() -> None:
    """base_url 不是绝对 URL 时，是否在创建 transport 时就被拒绝？"""
    assert (
        raised(
            ValueError, lambda: create_openai_compatible_transport(base_url="provider/v1", api_key=API_KEY)
        )
        == "OpenAI-compatible baseUrl must be an absolute URL"
    )


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_a_character_split_between_network_reads_arrives_whole() -> None:
    """一个中文字符的 UTF-8 字节被网络切成两半时，文本是否仍然完整？"""
    body = sse_event({"choices": [{"delta": {"content": "读取"}, "finish_reason": "stop"}]})
    cut = body.index("读".encode()) + 1
    _events, result, _server = stream_over_http(Reply([body[:cut], body[cut:]]))
    assert result.content == [text("读取")]
    assert result.stop_reason == "stop"


@pytest.mark.lab5_4
@pytest.mark.edits("create_openai_compatible_transport")
def test_done_ends_the_stream_even_if_the_server_sends_more() -> None:
    """[DONE] 之后服务器还在发数据时，transport 是否就此停止读取？"""
    payloads = [
        {"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]},
        "[DONE]",
        {"choices": [{"delta": {"content": "after"}}]},
    ]
    _events, result, _server = stream_over_http(Reply(split_in_half(payloads)))
    assert result.stop_reason == "stop"
    assert result.content == [text("a")]


@pytest.mark.lab5_4
@pytest.mark.edits("sanitized_transport_error")
def test_redaction_keeps_a_cancellation_a_cancellation() -> None:
    """脱敏时，AbortError 是否仍是 AbortError（adapter 才能认出取消），其他错误则变成不含 key 的新错误？"""
    assert isinstance(sanitized_transport_error(AbortError(), SECRET_KEY), AbortError)
    other = sanitized_transport_error(OSError(f"{SECRET_KEY} and {SECRET_KEY}"), SECRET_KEY)
    assert not isinstance(other, AbortError)
    assert str(other) == "[redacted] and [redacted]"
    assert str(sanitized_transport_error(OSError(), SECRET_KEY)) == "OpenAI-compatible transport failed"
