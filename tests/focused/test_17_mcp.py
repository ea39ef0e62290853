"""Focused tests of checkpoint 17: a hand-written MCP client, its two transports, and the servers'
tools in the Runtime.

Most cases talk to a small MCP server that lives in the test (`serve_mcp`) over the in-memory
transport pair: it knows the handshake, `tools/list` and `tools/call`, and can stay silent on chosen
methods. The stdio cases start a real child process (`sys.executable` running a small Python server
written to `tmp_path`) and speak newline-delimited JSON-RPC with it. The last case wires the MCP
runtime into 13's real Runtime.

Ordering across awaits is held by gates: the server's `until` waits for the messages a step needs,
an `asyncio.Event` holds a server's handshake. The only real clocks are the timeouts under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    LATEST_PROTOCOL_VERSION,
    MCP_SERVERS_SECTION,
    TOOL_SEARCH_TOOL_NAME,
    AbortController,
    ContextBudget,
    InMemoryTransport,
    JsonRpcMessage,
    McpAbortError,
    McpClient,
    McpConnectionClosedError,
    McpError,
    McpServerConfig,
    McpServerStatus,
    McpTimeoutError,
    MessageSessionEntry,
    ResourceCatalog,
    RuntimeConfig,
    RuntimeDeps,
    ScriptedModel,
    SessionEntry,
    StdioTransport,
    SystemMessage,
    SystemSectionProvider,
    ToolCall,
    ToolRegistry,
    assistant_message,
    create_in_memory_transport_pair,
    create_mcp_runtime,
    create_mcp_tool_name,
    create_runtime,
    create_tool_search_tool,
    current_system_message,
    execute_tool_call,
    is_json_rpc_notification,
    is_json_rpc_request,
    is_json_rpc_response,
    parse_json_rpc_message,
    render_mcp_servers_section,
    split_json_rpc_lines,
    text,
)
from strategies import json_values, short_text

# Shared helpers. Nothing here calls a lab piece at import time.


@contextlib.contextmanager
def raises_plain(match: str) -> Iterator[None]:
    """`pytest.raises(RuntimeError, match=...)` for the course's plain errors, except that a lab stub's
    `LabNotImplemented` (a `NotImplementedError`, so a `RuntimeError` too) passes through unchanged."""
    try:
        yield
    except NotImplementedError:
        raise
    except RuntimeError as error:
        assert re.search(match, str(error)), f"{error!r} does not match {match!r}"
        return
    pytest.fail(f"DID NOT RAISE RuntimeError matching {match!r}")


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run one scenario on a fresh event loop."""
    return asyncio.run(coroutine)


#: How many turns of the event loop an in-memory handshake may take before a test calls it a hang: it
#: takes a few dozen, and a client that does not recognise the answer would otherwise wait for the
#: test's own 10 s time-out. Turns, not a clock: a busy machine makes them slower, not fewer.
HANDSHAKE_TURNS = 2_000


async def handshake(client: McpClient, transport: InMemoryTransport) -> None:
    """`client.connect(transport)` over an in-memory pair, a hang turned into a red at once."""
    connecting = asyncio.ensure_future(client.connect(transport))
    for _ in range(HANDSHAKE_TURNS):
        if connecting.done():
            connecting.result()  # the connect's own error, if it failed
            return
        await asyncio.sleep(0)
    connecting.cancel()
    await asyncio.gather(connecting, return_exceptions=True)
    raise AssertionError(
        f"connect 在 {HANDSHAKE_TURNS} 轮事件循环内没有结束：服务器已经回答了 initialize，"
        "客户端认出这条响应了吗？"
    )


async def settle(condition: Callable[[], bool], what: str, *, turns: int = 2_000) -> None:
    """Give the loop turns until `condition` holds (never a clock); fail naming `what` if it never does."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def quiet(turns: int = 20) -> None:
    """Give the loop a few turns for whatever is already scheduled (before asserting that nothing came)."""
    for _ in range(turns):
        await asyncio.sleep(0)


class RecordingTransport(InMemoryTransport):
    """A client end that also keeps every message it was asked to send, even one it then refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[JsonRpcMessage] = []

    async def send(self, message: JsonRpcMessage) -> None:
        self.sent.append(copy.deepcopy(message))
        await super().send(message)


def recording_pair() -> tuple[RecordingTransport, InMemoryTransport]:
    """An in-memory pair whose client end records what it sends."""
    client_end, server_end = RecordingTransport(), InMemoryTransport()
    client_end.connect_peer(server_end)
    server_end.connect_peer(client_end)
    return client_end, server_end


@dataclass
class FakeServerOptions:
    """What the test server does: its version, its pages of tools, the methods it never answers, a
    gate that holds its `initialize` answer, and how it answers `tools/call`."""

    protocol_version: str = LATEST_PROTOCOL_VERSION
    pages: list[dict[str, Any]] = field(default_factory=lambda: [{"tools": []}])
    silent: tuple[str, ...] = ()
    gate: asyncio.Event | None = None
    on_call: Callable[[str, Any], Any] | None = None


def sent_request(message: JsonRpcMessage) -> bool:
    """The test server's own reading of a request: it never relies on the predicates under test, so a
    wrong predicate fails the test that checks it at once instead of leaving the client unanswered."""
    return isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str)


def sent_notification(message: JsonRpcMessage) -> bool:
    """The test server's own reading of a notification (a method and no id)."""
    return isinstance(message, dict) and "id" not in message and isinstance(message.get("method"), str)


class FakeServer:
    """An in-memory MCP server with only the handshake, tools/list and tools/call."""

    def __init__(self, transport: InMemoryTransport, options: FakeServerOptions) -> None:
        self.transport = transport
        self.options = options
        self.received: list[JsonRpcMessage] = []
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        transport.on_message(self._on_message)

    def requests(self, method: str) -> list[JsonRpcMessage]:
        """The requests of `method` received so far, in order."""
        return [m for m in self.received if sent_request(m) and m["method"] == method]

    def notifications(self, method: str) -> list[JsonRpcMessage]:
        """The notifications of `method` received so far, in order."""
        return [m for m in self.received if sent_notification(m) and m["method"] == method]

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until the messages received make `condition` true (checked on every arrival)."""
        if condition():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((condition, future))
        await future

    def _on_message(self, message: JsonRpcMessage) -> None:
        self.received.append(message)
        for waiter in list(self._waiters):
            if waiter[0]() and not waiter[1].done():
                waiter[1].set_result(None)
                self._waiters.remove(waiter)
        if not sent_request(message) or message["method"] in self.options.silent:
            return
        task = asyncio.get_running_loop().create_task(self._answer(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _respond(self, request_id: Any, result: Any) -> None:
        await self.transport.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _fail(self, request_id: Any, code: int, message: str) -> None:
        await self.transport.send(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        )

    async def _answer(self, message: JsonRpcMessage) -> None:
        try:
            await self._answer_method(message)
        except Exception as error:  # a broken request gets an error at once, never a 30 s timeout
            await self._fail(message["id"], -32603, f"test server: {error}")

    async def _answer_method(self, message: JsonRpcMessage) -> None:
        request_id, method = message["id"], message["method"]
        params: Any = message.get("params")
        if method == "initialize":
            if self.options.gate is not None:
                await self.options.gate.wait()
            await self._respond(
                request_id,
                {
                    "protocolVersion": self.options.protocol_version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "fake", "version": "1.0"},
                    "instructions": "fake server",
                },
            )
        elif method == "tools/list":
            cursor = None if params is None else params.get("cursor")
            index = 0 if cursor is None else int(cursor)
            if index >= len(self.options.pages):
                await self._fail(request_id, -32602, "unknown cursor")
                return
            await self._respond(request_id, self.options.pages[index])
        elif method == "tools/call":
            try:
                if self.options.on_call is not None:
                    result = self.options.on_call(params["name"], params.get("arguments"))
                else:
                    result = {"content": [{"type": "text", "text": f"called {params['name']}"}]}
            except Exception as error:
                await self._fail(request_id, -32602, str(error))
                return
            await self._respond(request_id, result)
        else:
            await self._fail(request_id, -32601, f"Method not found: {method}")


async def serve_mcp(transport: InMemoryTransport, options: FakeServerOptions | None = None) -> FakeServer:
    """Start a test server on `transport`."""
    server = FakeServer(transport, options or FakeServerOptions())
    await transport.start()
    return server


def tool_info(name: str, description: str | None = None) -> dict[str, Any]:
    """A server tool with one string parameter `q`."""
    return {
        "name": name,
        "description": f"{name} description" if description is None else description,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }


@dataclass
class Connected:
    """A client connected to a test server over one in-memory pair."""

    client: McpClient
    server: FakeServer
    client_end: InMemoryTransport
    server_end: InMemoryTransport


async def connected(
    options: FakeServerOptions | None = None, request_timeout_ms: float | None = None
) -> Connected:
    """A test server, and a client that has finished its handshake with it."""
    pair = create_in_memory_transport_pair()
    server = await serve_mcp(pair.server, options)
    client = McpClient(name="course", version="0", request_timeout_ms=request_timeout_ms)
    await handshake(client, pair.client)
    return Connected(client, server, pair.client, pair.server)


def state_of(client: McpClient) -> str:
    """The client's connection state, read afresh (a plain str, so that a type checker narrows nothing)."""
    return client.connection_state


def methods(server: FakeServer) -> list[str]:
    """What the server received, a request or notification by its method, a response as "response"."""
    return [message.get("method", "response") for message in server.received]


# ## Lab 17.1 · narrowing JSON-RPC, the handshake, version negotiation


REQUEST = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
NOTIFICATION = {"jsonrpc": "2.0", "method": "notifications/initialized"}
SUCCESS = {"jsonrpc": "2.0", "id": "a", "result": {}}
FAILURE = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "nope"}}

BAD_MESSAGES = [
    None,
    "ping",
    {"jsonrpc": "1.0", "id": 1, "method": "ping"},
    {"jsonrpc": "2.0", "id": float("nan"), "method": "ping"},
    {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}},
    {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "x"}},
    {"jsonrpc": "2.0", "id": 1},
    # Beyond the course's seven: Python's own ways to look like a number or an object.
    {"jsonrpc": "2.0", "id": True, "method": "ping"},
    {"jsonrpc": "2.0", "id": float("inf"), "method": "ping"},
    {"jsonrpc": "2.0", "id": 1, "error": {"code": True, "message": "x"}},
    {"jsonrpc": "2.0", "id": 1, "error": "x"},
    [REQUEST],
]


@pytest.mark.lab17_1
@pytest.mark.edits("is_json_rpc_request", "is_json_rpc_notification", "is_json_rpc_response")
def test_the_three_predicates_exclude_each_other_and_bad_messages_are_refused() -> None:
    """request、notification、response 三个判定是否互斥，七个反例（以及 True、无穷大这样的 id）是否都被拒
    绝？"""
    assert is_json_rpc_request(REQUEST) is True
    assert is_json_rpc_notification(REQUEST) is False
    assert is_json_rpc_response(REQUEST) is False
    assert is_json_rpc_notification(NOTIFICATION) is True
    assert is_json_rpc_request(NOTIFICATION) is False
    assert is_json_rpc_response(NOTIFICATION) is False
    assert is_json_rpc_response(SUCCESS) is True
    assert is_json_rpc_response(FAILURE) is True
    assert is_json_rpc_request(SUCCESS) is False
    assert is_json_rpc_notification(FAILURE) is False
    assert parse_json_rpc_message(REQUEST) is REQUEST

    for bad in BAD_MESSAGES:
        with pytest.raises(McpError) as raised:
            parse_json_rpc_message(bad)
        assert raised.value.code == -32600, repr(bad)
        assert str(raised.value) == "Invalid JSON-RPC message"


MESSAGE_KEYS = ("jsonrpc", "id", "method", "result", "error", "params")
message_like = st.dictionaries(
    st.sampled_from(MESSAGE_KEYS),
    st.sampled_from(["2.0", "ping", 1, 0.5]) | json_values | st.fixed_dictionaries({"code": json_values}),
    max_size=6,
)


@pytest.mark.lab17_1
@pytest.mark.edits("is_json_rpc_request", "is_json_rpc_notification", "is_json_rpc_response")
@given(message_like)
def test_at_most_one_predicate_holds_and_parse_accepts_exactly_those(value: dict[str, Any]) -> None:
    """对任意由 JSON-RPC 字段拼出的对象，是否至多一个判定成立，而 parse 恰好接受这些对象、原样返回？"""
    holds = [is_json_rpc_request(value), is_json_rpc_notification(value), is_json_rpc_response(value)]
    assert sum(holds) <= 1
    if any(holds):
        assert parse_json_rpc_message(value) is value
    else:
        with pytest.raises(McpError):
            parse_json_rpc_message(value)


@pytest.mark.lab17_1
@pytest.mark.edits("McpClient.connect")
def test_connect_sends_initialize_then_initialized_and_records_the_server() -> None:
    """connect 是否先发 initialize、再发 notifications/initialized，并记下 serverInfo、协议版本与
    instructions；再连一次被拒，close 两次只通知一次？"""

    async def scenario() -> None:
        idle = McpClient(name="course", version="0")
        assert idle.connection_state == "idle"
        with pytest.raises(McpConnectionClosedError, match="MCP client is idle"):
            await idle.request("ping")

        setup = await connected()
        client, server = setup.client, setup.server
        assert client.connection_state == "connected"
        assert client.server_info == {"name": "fake", "version": "1.0"}
        assert client.protocol_version == LATEST_PROTOCOL_VERSION
        assert client.instructions == "fake server"
        await server.until(lambda: len(server.received) >= 2)
        assert methods(server) == ["initialize", "notifications/initialized"]
        assert server.requests("initialize")[0]["params"] == {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "course", "version": "0"},
        }
        assert is_json_rpc_notification(server.received[1])
        assert "params" not in server.received[1]

        with raises_plain("connected state"):
            await client.connect(create_in_memory_transport_pair().client)
        closes = 0

        def on_close() -> None:
            nonlocal closes
            closes += 1

        client.on_close(on_close)
        await client.close()
        await client.close()
        assert state_of(client) == "closed"
        assert closes == 1

    run(scenario())


@pytest.mark.lab17_1
@pytest.mark.edits("McpClient.connect")
def test_an_unsupported_version_fails_connect_closes_and_refuses_later_requests() -> None:
    """服务器选了不支持的版本时，connect 是否失败并关闭连接、不发 initialized，之后的请求被拒；而 2024-11-05
    仍能连上？"""

    async def scenario() -> None:
        client_end, server_end = recording_pair()
        server = await serve_mcp(server_end, FakeServerOptions(protocol_version="1999-01-01"))
        client = McpClient(name="course", version="0")
        closed = []
        client_end.on_close(lambda: closed.append(True))
        with raises_plain("unsupported protocol version 1999-01-01"):
            await handshake(client, client_end)
        assert client.connection_state == "closed"
        assert closed == [True]
        await quiet()
        assert len(server.requests("initialize")) == 1
        assert not any(is_json_rpc_notification(message) for message in server.received)
        assert [message.get("method") for message in client_end.sent] == ["initialize"], (
            "握手失败不该发送 notifications/initialized"
        )
        assert client.server_info is None
        with pytest.raises(McpConnectionClosedError):
            await client.request("ping")

        older = create_in_memory_transport_pair()
        await serve_mcp(older.server, FakeServerOptions(protocol_version="2024-11-05"))
        compatible = McpClient(name="course", version="0")
        await handshake(compatible, older.client)
        assert compatible.protocol_version == "2024-11-05"
        await compatible.close()

    run(scenario())


# ## Lab 17.2 · tools/list pages and tools/call


@pytest.mark.lab17_2
@pytest.mark.edits("McpClient.list_tools")
def test_tools_list_follows_next_cursor_until_null_or_empty_and_checks_each_tool() -> None:
    """tools/list 是否跟随 nextCursor 翻页，null 或空串 cursor 表示结束，缺 inputSchema 的工具被拒绝？"""

    async def scenario() -> None:
        setup = await connected(
            FakeServerOptions(
                pages=[
                    {"tools": [tool_info("alpha")], "nextCursor": "1"},
                    {"tools": [tool_info("beta"), tool_info("gamma")], "nextCursor": "2"},
                    {"tools": [tool_info("delta")], "nextCursor": None},
                ]
            )
        )
        tools = await setup.client.list_tools()
        assert [tool["name"] for tool in tools] == ["alpha", "beta", "gamma", "delta"]
        assert [request.get("params") for request in setup.server.requests("tools/list")] == [
            None,
            {"cursor": "1"},
            {"cursor": "2"},
        ]
        assert "params" not in setup.server.requests("tools/list")[0]
        await setup.client.close()

        empty = await connected(FakeServerOptions(pages=[{"tools": [tool_info("solo")], "nextCursor": ""}]))
        assert [tool["name"] for tool in await empty.client.list_tools()] == ["solo"]
        assert len(empty.server.requests("tools/list")) == 1
        await empty.client.close()

        invalid = await connected(FakeServerOptions(pages=[{"tools": [{"name": "broken"}]}]))
        with pytest.raises(McpError, match="Invalid entry in MCP tools/list result"):
            await invalid.client.list_tools()
        await invalid.client.close()

    run(scenario())


@pytest.mark.lab17_2
@pytest.mark.edits("McpClient.list_tools")
def test_a_repeated_cursor_is_an_error_not_an_endless_loop() -> None:
    """服务器第二次给出同一个 cursor 时，list_tools 是否在第二次请求后报 duplicate cursor？"""

    async def scenario() -> None:
        setup = await connected(
            FakeServerOptions(
                pages=[
                    {"tools": [tool_info("alpha")], "nextCursor": "1"},
                    {"tools": [tool_info("beta")], "nextCursor": "1"},
                ]
            )
        )
        with raises_plain("MCP tools/list returned duplicate cursor: 1"):
            await setup.client.list_tools()
        assert len(setup.server.requests("tools/list")) == 2
        await setup.client.close()

    run(scenario())


@pytest.mark.lab17_2
@pytest.mark.edits("McpClient.call_tool")
def test_tools_call_sends_arguments_fills_missing_content_and_turns_errors_into_mcp_error() -> None:
    """tools/call 是否只在给了参数时带 arguments，结果缺 content 时补 []，服务器的 error 响应变成保留 code 的
    McpError？"""

    def on_call(name: str, args: Any) -> Any:
        if name == "echo":
            return {"content": [{"type": "text", "text": json.dumps(args, separators=(",", ":"))}]}
        if name == "structured":
            return {"structuredContent": {"ok": True}}
        raise ValueError(f"unknown tool {name}")

    async def scenario() -> None:
        setup = await connected(FakeServerOptions(on_call=on_call))
        client, server = setup.client, setup.server
        echoed = await client.call_tool("echo", {"q": "hi"})
        assert echoed == {"content": [{"type": "text", "text": '{"q":"hi"}'}]}
        assert server.requests("tools/call")[0]["params"] == {"name": "echo", "arguments": {"q": "hi"}}

        structured = await client.call_tool("structured")
        assert dict(structured) == {"content": [], "structuredContent": {"ok": True}}
        assert server.requests("tools/call")[1]["params"] == {"name": "structured"}

        with pytest.raises(McpError) as raised:
            await client.call_tool("missing")
        assert raised.value.code == -32602
        assert "unknown tool missing" in str(raised.value)
        assert client.connection_state == "connected"
        await client.close()

    run(scenario())


# ## Lab 17.3 · timeouts, aborts, and a closed transport


def cancelled_of(server: FakeServer) -> list[JsonRpcMessage]:
    """The `notifications/cancelled` the server has received."""
    return server.notifications("notifications/cancelled")


@pytest.mark.lab17_3
@pytest.mark.edits("McpClient._cancel_pending")
def test_a_timeout_rejects_sends_cancelled_and_keeps_the_connection_but_initialize_is_never_cancelled() -> (
    None
):
    """请求超时是否以 McpTimeoutError（timeout_ms 为 30）拒绝、发送一条 cancelled 且连接不关；initialize 超时
    是否关闭连接、不发 cancelled？"""

    async def scenario() -> None:
        setup = await connected(FakeServerOptions(silent=("tools/call",)))
        client, server = setup.client, setup.server
        with pytest.raises(McpTimeoutError) as raised:
            await client.call_tool("slow", {}, timeout_ms=30)
        assert raised.value.timeout_ms == 30
        assert str(raised.value) == "MCP request timed out after 30ms"
        await server.until(lambda: len(cancelled_of(server)) >= 1)
        call = server.requests("tools/call")[0]
        assert [message["params"] for message in cancelled_of(server)] == [
            {"requestId": call["id"], "reason": "Request timed out"}
        ]
        assert client.connection_state == "connected", "单个请求超时不关闭连接"
        await client.close()

        client_end, server_end = recording_pair()
        silent = await serve_mcp(server_end, FakeServerOptions(silent=("initialize",)))
        impatient = McpClient(name="course", version="0", request_timeout_ms=30)
        with pytest.raises(McpTimeoutError):
            await impatient.connect(client_end)
        assert impatient.connection_state == "closed"
        await quiet()
        assert methods(silent) == ["initialize"]
        assert [message.get("method") for message in client_end.sent] == ["initialize"], (
            "规范禁止取消 initialize"
        )

    run(scenario())


@pytest.mark.lab17_3
@pytest.mark.edits("McpClient._cancel_pending")
def test_an_abort_rejects_and_sends_cancelled_and_a_closed_transport_rejects_everything_in_flight() -> None:
    """调用方 abort 是否以 AbortError 拒绝并发送带 reason 的 cancelled；预先取消不发请求；传输关闭是否让所有在
    途请求以 McpConnectionClosedError 拒绝？"""

    async def scenario() -> None:
        setup = await connected(FakeServerOptions(silent=("tools/call", "ping")))
        client, server = setup.client, setup.server
        controller = AbortController()
        aborted = asyncio.ensure_future(client.call_tool("slow", {}, signal=controller.signal))
        await server.until(lambda: len(server.requests("tools/call")) == 1)
        controller.abort("user cancelled")
        with pytest.raises(McpAbortError) as raised:
            await aborted
        assert raised.value.name == "AbortError"
        await server.until(lambda: len(cancelled_of(server)) >= 1)
        assert cancelled_of(server)[0]["params"] == {
            "requestId": server.requests("tools/call")[0]["id"],
            "reason": "user cancelled",
        }

        already = AbortController()
        already.abort()
        with pytest.raises(McpAbortError):
            await client.call_tool("slow", {}, signal=already.signal)

        pending_a = asyncio.ensure_future(client.call_tool("slow"))
        pending_b = asyncio.ensure_future(client.request("ping"))
        await server.until(
            lambda: len(server.requests("tools/call")) == 2 and len(server.requests("ping")) == 1
        )
        closes = 0

        def on_close() -> None:
            nonlocal closes
            closes += 1

        client.on_close(on_close)
        await setup.server_end.close()
        with pytest.raises(McpConnectionClosedError):
            await pending_a
        with pytest.raises(McpConnectionClosedError):
            await pending_b
        assert client.connection_state == "closed"
        assert closes == 1
        # The pre-aborted call was neither registered nor sent.
        assert [request["params"]["name"] for request in server.requests("tools/call")] == ["slow", "slow"]

    run(scenario())


@pytest.mark.lab17_3
@pytest.mark.edits("McpClient._cancel_pending")
def test_a_response_after_the_timeout_is_reported_not_delivered() -> None:
    """超时之后才到的响应，是否只作为一条 unknown request 错误交给 on_error，而不会改变调用方已得到的结果？"""

    async def scenario() -> None:
        setup = await connected(FakeServerOptions(silent=("tools/call",)))
        client, server = setup.client, setup.server
        errors: list[str] = []
        client.on_error(lambda error: errors.append(str(error)))
        with pytest.raises(McpTimeoutError):
            await client.call_tool("slow", timeout_ms=20)
        late = server.requests("tools/call")[0]["id"]
        await setup.server_end.send({"jsonrpc": "2.0", "id": late, "result": {"content": []}})
        await settle(lambda: bool(errors), "the late response reached the client")
        assert errors == [f"Received response for unknown MCP request {late}"]
        assert client.connection_state == "connected"
        await client.close()

    run(scenario())


# ## Lab 17.4 · stdio: a child process, newline framing, closing in three steps

STDIO_SERVER = r"""
import json
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


while True:
    line = sys.stdin.readline()
    if not line:
        break
    if not line.strip():
        continue
    message = json.loads(line)
    if "id" not in message:
        continue
    method, request_id = message.get("method"), message["id"]
    params = message.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {},
            "serverInfo": {"name": "stdio-fixture", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/list":
        tools = [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}]
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
    elif method == "tools/call" and params.get("name") == "burst":
        done = {"type": "text", "text": "burst done"}
        # One write: two notifications, a line of rubbish and the response; framing delivers them one by one.
        burst = [
            json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": 1}}),
            "this is not json",
            json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": 2}}),
            json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": [done]}}),
        ]
        sys.stdout.write("\n".join(burst) + "\n")
        sys.stdout.flush()
    elif method == "tools/call":
        echoed = "echo:" + json.dumps(params.get("arguments"), separators=(",", ":"))
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": echoed}]}})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
time.sleep(0.02)
"""


def server_file(tmp_path: Path, source: str = STDIO_SERVER) -> str:
    """Write a server script into the test's own temporary folder."""
    path = tmp_path / "server.py"
    path.write_text(source, encoding="utf-8")
    return str(path)


async def unstarted_close() -> None:
    """Close a transport that never started: it closes at once. Done first in every stdio test, so that
    a stub `close` stops the test before a child process exists that it would leave behind."""
    unstarted = StdioTransport(command=sys.executable)
    closes: list[bool] = []
    unstarted.on_close(lambda: closes.append(True))
    await unstarted.close()
    assert closes == [True]
    assert unstarted.pid is None


def is_alive(pid: int | None) -> bool:
    """Whether a process with this id exists (signal 0 only asks)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.lab17_4
@pytest.mark.edits("StdioTransport.close")
def test_the_stdio_transport_talks_to_a_child_process_and_close_ends_it(tmp_path: Path) -> None:
    """stdio 传输是否与子进程服务器完成握手、列工具与调用，而 close 返回时子进程已经退出？"""

    async def scenario() -> None:
        await unstarted_close()
        transport = StdioTransport(command=sys.executable, args=[server_file(tmp_path)])
        client = McpClient(name="course", version="0")
        pid: int | None = None
        try:
            await client.connect(transport)
            pid = transport.pid
            assert is_alive(pid)
            assert client.server_info == {"name": "stdio-fixture", "version": "1"}
            assert [tool["name"] for tool in await client.list_tools()] == ["echo"]
            result = await client.call_tool("echo", {"q": 1})
            assert result["content"] == [{"type": "text", "text": 'echo:{"q":1}'}]
        finally:
            pid = transport.pid if pid is None else pid
            await client.close()
        assert not is_alive(pid), "close 后子进程应退出"
        assert transport.pid is None

    run(scenario())


@pytest.mark.lab17_4
@pytest.mark.edits("split_json_rpc_lines")
def test_framing_commits_only_complete_lines_delivers_every_line_and_reports_bad_ones(tmp_path: Path) -> None:
    """分帧是否只解析以换行结束的行，一次数据里的多行都交付，非 JSON 行只记一条 error、连接不断？"""
    first = split_json_rpc_lines("", '{"jsonrpc":"2.0","method":"a"}\n{"jsonrpc":"2.0","id":1,"res')
    assert first.messages == [{"jsonrpc": "2.0", "method": "a"}]
    assert first.rest == '{"jsonrpc":"2.0","id":1,"res'
    assert first.errors == []
    second = split_json_rpc_lines(first.rest, 'ult":{}}\nnot json\n\n{"jsonrpc":"2.0","method":"b"}\n')
    assert second.messages == [{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "method": "b"}]
    assert len(second.errors) == 1
    assert second.rest == ""

    async def scenario() -> None:
        await unstarted_close()
        transport = StdioTransport(command=sys.executable, args=[server_file(tmp_path)])
        client = McpClient(name="course", version="0")
        errors: list[str] = []
        notifications: list[object] = []
        client.on_error(lambda error: errors.append(str(error)))
        client.on_notification("notifications/message", notifications.append)
        try:
            await client.connect(transport)
            result = await client.call_tool("burst")
            assert result["content"] == [{"type": "text", "text": "burst done"}]
            assert notifications == [{"n": 1}, {"n": 2}]
            assert len(errors) == 1
            assert client.connection_state == "connected"
        finally:
            await client.close()

    run(scenario())


line_messages = st.lists(
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "method": short_text,
            "params": st.dictionaries(
                short_text, short_text | st.integers() | st.booleans() | st.none(), max_size=3
            ),
        }
    ),
    max_size=4,
)


@pytest.mark.lab17_4
@pytest.mark.edits("split_json_rpc_lines")
@given(line_messages, st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_any_cutting_of_the_stream_gives_the_same_messages(
    messages: list[dict[str, Any]], cuts: list[int]
) -> None:
    """无论 stdout 在哪些位置被切成几段，拼接后交付的消息是否都与整段一次交付完全相同，坏行也照样只计一次？"""
    lines = [json.dumps(message, ensure_ascii=False) for message in messages]
    stream = "\n".join([*lines, "not json"]) + "\n"
    points = sorted({min(cut, len(stream)) for cut in cuts})
    chunks = [stream[start:end] for start, end in zip([0, *points], [*points, len(stream)], strict=True)]
    delivered: list[JsonRpcMessage] = []
    errors = 0
    rest = ""
    for chunk in chunks:
        split = split_json_rpc_lines(rest, chunk)
        delivered.extend(split.messages)
        errors += len(split.errors)
        rest = split.rest
    expected = [json.loads(line) for line in lines]
    assert json.dumps(delivered) == json.dumps(expected)
    assert errors == 1
    assert rest == ""


STUBBORN_SERVER = r"""
import signal
import sys
import time

if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.read()  # EOF arrives, and the server does not leave
while True:
    time.sleep(1)
"""


@pytest.mark.lab17_4
@pytest.mark.edits("StdioTransport.close")
@pytest.mark.parametrize("stubborn", ["ignores-eof", "ignores-term"])
def test_close_escalates_from_eof_to_sigterm_to_sigkill(tmp_path: Path, stubborn: str) -> None:
    """服务器读到 EOF 后不退出时，close 是否在 grace_ms 后发 SIGTERM；连 SIGTERM 也忽略时，是否再发 SIGKILL，
    并在子进程退出后才返回？"""

    async def scenario() -> None:
        args = [server_file(tmp_path, STUBBORN_SERVER)]
        if stubborn == "ignores-term":
            args.append("--ignore-term")
        await unstarted_close()
        transport = StdioTransport(command=sys.executable, args=args, grace_ms=50, close_timeout_ms=200)
        ready = asyncio.Event()  # its "ready" line is no JSON-RPC: it reaches on_error
        closes: list[bool] = []
        transport.on_error(lambda _error: ready.set())
        transport.on_close(lambda: closes.append(True))
        await transport.start()
        pid = transport.pid
        await ready.wait()  # the server has started and sits on its stdin
        started = time.monotonic()
        try:
            await transport.close()
        finally:
            if is_alive(pid):  # close did not end it (a starter's stub): never leave it running
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
        elapsed = time.monotonic() - started
        assert not is_alive(pid)
        assert closes == [True]
        assert elapsed >= 0.04
        if stubborn == "ignores-term":
            assert elapsed >= 0.2
        assert elapsed < 5

    run(scenario())


@pytest.mark.lab17_4
@pytest.mark.edits("StdioTransport.close")
def test_a_server_that_exits_closes_the_client_and_rejects_what_is_in_flight(tmp_path: Path) -> None:
    """子进程自己退出时，是否经 close 事件让 client 关闭，在途请求以 McpConnectionClosedError 结束？"""
    exit_on_die = 'if method == "tools/call" and params.get("name") == "die":\n        sys.exit(3)\n    '
    dying = STDIO_SERVER.replace('if method == "initialize":', exit_on_die + 'elif method == "initialize":')

    async def scenario() -> None:
        await unstarted_close()
        transport = StdioTransport(command=sys.executable, args=[server_file(tmp_path, dying)])
        client = McpClient(name="course", version="0")
        await client.connect(transport)
        with pytest.raises(McpConnectionClosedError):
            await client.call_tool("die")
        assert client.connection_state == "closed"
        await client.close()

    run(scenario())


# ## Lab 17.5 · names, deferred registration, the mcp_servers section


@pytest.mark.lab17_5
@pytest.mark.edits("create_mcp_tool_name")
def test_tool_names_are_cleaned_and_get_a_stable_hash_when_long_or_taken() -> None:
    """工具名是否为 mcp__<server>__<tool>、非字母数字变 _；超长或已被占用时，是否截断并加稳定的 8 位 hash，总
    长不超过 64？"""
    assert create_mcp_tool_name("docs", "search") == "mcp__docs__search"
    assert create_mcp_tool_name("my-server", "list.issues") == "mcp__my_server__list_issues"
    # Only ASCII letters and digits stay; a character outside the BMP counts twice, as in JavaScript.
    assert create_mcp_tool_name("文档", "search") == "mcp______search"
    assert create_mcp_tool_name("a", "🙂") == "mcp__a____"
    long = create_mcp_tool_name("server", "x" * 80)
    assert len(long) == 64
    assert re.fullmatch(r"mcp__server__x+_[0-9a-f]{8}", long)
    assert long == create_mcp_tool_name("server", "x" * 80), "hash 必须稳定"
    taken = {"mcp__a__b_c"}
    collided = create_mcp_tool_name("a", "b-c", lambda name: name in taken)
    assert collided != "mcp__a__b_c"
    assert re.fullmatch(r"mcp__a__b_c_[0-9a-f]{8}", collided)
    assert collided != create_mcp_tool_name("a", "b.c", lambda _name: True), "不同原名的 hash 不同"
    # The hash is sha256 of "<server>\0<tool>", its first 8 hex digits.
    assert long.endswith(hashlib.sha256(("server\0" + "x" * 80).encode()).hexdigest()[:8])


@pytest.mark.lab17_5
@pytest.mark.edits("create_mcp_tool_name")
@given(st.text(max_size=40), st.text(max_size=80))
def test_every_tool_name_is_a_short_identifier(server: str, tool: str) -> None:
    """对任意服务器名和工具名，生成的名字是否总是至多 64 个 [A-Za-z0-9_] 字符，且以 mcp__ 开头？"""
    name = create_mcp_tool_name(server, tool)
    assert len(name) <= 64
    assert name.startswith("mcp__")
    assert all(char.isascii() and (char.isalnum() or char == "_") for char in name)


@pytest.mark.lab17_5
@pytest.mark.edits("McpRuntimeImpl._connect", "McpRuntimeImpl.status", "McpRuntimeImpl.close")
def test_server_tools_are_registered_deferred_callable_by_scripts_and_activated_by_tool_search() -> None:
    """服务器工具是否按 deferred 注册：模型直接调用被拒、脚本调用成功，tool_search 激活后模型才能调用；isError
    结果保留内容，close 后状态为 closed？"""

    def on_call(name: str, args: Any) -> Any:
        if name == "fail":
            return {"content": [{"type": "text", "text": "bad input"}], "isError": True}
        found = json.dumps(args, separators=(",", ":"))
        return {"content": [{"type": "text", "text": f"found {found}"}, {"type": "image", "data": "..."}]}

    async def scenario() -> None:
        registry = ToolRegistry()
        registry.register(create_tool_search_tool(registry))
        pair = create_in_memory_transport_pair()
        server = await serve_mcp(
            pair.server,
            FakeServerOptions(
                pages=[{"tools": [tool_info("search_docs", "Search the documentation"), tool_info("fail")]}],
                on_call=on_call,
            ),
        )
        mcp = create_mcp_runtime(
            registry, servers=[McpServerConfig(name="docs", create_transport=lambda: pair.client)]
        )
        try:
            await mcp.wait_for_direct_servers()  # no direct server: returns at once
            await settle(lambda: mcp.status()[0].state == "connected", "docs connected")
            assert mcp.status() == [
                McpServerStatus(
                    name="docs", state="connected", tools=["mcp__docs__search_docs", "mcp__docs__fail"]
                )
            ]
            assert registry.exposure_of("mcp__docs__search_docs") == "deferred"
            assert [tool.name for tool in registry.definitions()] == [TOOL_SEARCH_TOOL_NAME]
            registered = registry.get("mcp__docs__search_docs")
            assert registered is not None
            assert getattr(registered.schema, "json_schema", None) == {
                "type": "object",
                "properties": {"q": {"type": "string"}},
            }
            assert registered.description == "Search the documentation"

            call = ToolCall(id="c1", name="mcp__docs__search_docs", arguments={"q": "mcp"})
            from_model = await execute_tool_call(call, registry)
            assert from_model.is_error is True
            assert server.requests("tools/call") == []
            from_script = await execute_tool_call(call, registry, scope="script")
            assert from_script.is_error is False
            assert from_script.content == [text('found {"q":"mcp"}'), text('{"type":"image","data":"..."}')]
            assert from_script.details == {"server": "docs", "tool": "search_docs"}

            search = await execute_tool_call(
                ToolCall(id="s1", name=TOOL_SEARCH_TOOL_NAME, arguments={"query": "documentation search"}),
                registry,
            )
            assert search.details == {"loaded": ["mcp__docs__search_docs"]}
            activated = await execute_tool_call(dataclasses.replace(call, id="c2"), registry)
            assert activated.is_error is False

            failed = await execute_tool_call(
                ToolCall(id="c3", name="mcp__docs__fail", arguments={}), registry, scope="script"
            )
            assert failed.is_error is True
            assert failed.content == [text("bad input")]
        finally:
            await mcp.close()
        assert mcp.status()[0].state == "closed"

    run(scenario())


def empty_resources() -> ResourceCatalog:
    """A catalog with nothing in it."""
    return ResourceCatalog(resources=[], instructions=[], skills=[], templates=[])


class RecordingSessionStore:
    """A session store that keeps deep copies of what it is given."""

    def __init__(self) -> None:
        self.committed: list[SessionEntry] = []

    async def append(self, entry: SessionEntry) -> None:
        self.committed.append(copy.deepcopy(entry))

    async def entries(self) -> list[SessionEntry]:
        return copy.deepcopy(self.committed)


def runtime_deps(
    model: ScriptedModel,
    tools: ToolRegistry,
    session: RecordingSessionStore,
    providers: list[SystemSectionProvider],
) -> RuntimeDeps:
    """13's dependencies with counting ids and clock, and the given section providers."""
    ids = iter(range(1, 1_000))
    clock = iter(range(101, 10_000))
    return RuntimeDeps(
        model=model,
        tools=tools,
        session=session,
        resources=empty_resources(),
        create_id=lambda: f"entry-{next(ids)}",
        now=lambda: next(clock),
        section_providers=providers,
    )


CONFIG = RuntimeConfig(
    active_leaf_id=None,
    system_prompt="BASE",
    max_steps=4,
    context=ContextBudget(total=10_000, reserved_output=0, safety_margin=0, estimate_tokens=lambda _value: 1),
)


@pytest.mark.lab17_5
@pytest.mark.edits(
    "McpRuntimeImpl.wait_for_direct_servers", "McpRuntimeImpl.sections", "RuntimeImpl._desired_system_state"
)
def test_the_servers_section_is_patched_only_on_change_and_the_first_prompt_waits_for_direct_ones() -> None:
    """mcp_servers 段落是否只在变化时打补丁；首个 prompt 是否只等有 direct 工具的服务器，且等待有上限？"""

    async def scenario() -> None:
        registry = ToolRegistry()
        docs = create_in_memory_transport_pair()
        await serve_mcp(docs.server, FakeServerOptions(pages=[{"tools": [tool_info("search")]}]))
        gate = asyncio.Event()
        slow = create_in_memory_transport_pair()
        await serve_mcp(slow.server, FakeServerOptions(pages=[{"tools": [tool_info("run")]}], gate=gate))
        never = create_in_memory_transport_pair()
        await serve_mcp(never.server, FakeServerOptions(silent=("initialize",)))
        mcp = create_mcp_runtime(
            registry,
            startup_timeout_ms=60,
            request_timeout_ms=5_000,
            servers=[
                McpServerConfig(name="docs", create_transport=lambda: docs.client),
                McpServerConfig(name="slow", create_transport=lambda: slow.client, exposure="direct"),
                McpServerConfig(name="never", create_transport=lambda: never.client),
            ],
        )
        model = ScriptedModel(
            [
                assistant_message([text("one")]),
                assistant_message([text("two")]),
                assistant_message([text("three")]),
            ]
        )
        session = RecordingSessionStore()
        runtime = await create_runtime(CONFIG, runtime_deps(model, registry, session, [mcp]))

        def system_entries() -> list[SystemMessage]:
            return [
                entry.message
                for entry in session.committed
                if isinstance(entry, MessageSessionEntry) and isinstance(entry.message, SystemMessage)
            ]

        def section_entries() -> list[SystemMessage]:
            """Only the system messages with sections: 15's tool declaration patches are counted apart."""
            return [message for message in system_entries() if message.sections is not None]

        def section_of(message: SystemMessage) -> str | None:
            return (message.sections or {}).get(MCP_SERVERS_SECTION)

        try:
            started = time.monotonic()
            await runtime.prompt("first")
            waited = time.monotonic() - started
            assert 0.05 <= waited < 2, f"等待应有上限，实际 {waited * 1000:.0f}ms"
            assert len(system_entries()) == 1
            first = section_of(section_entries()[0])
            assert first is not None
            assert "- docs: connected, 1 tool (mcp__docs__search)" in first
            assert "- slow: connecting, 0 tools" in first
            assert "- never: connecting, 0 tools" in first
            assert system_entries()[0].content == "BASE"
            assert registry.definitions() == [], "deferred 工具不进入声明集合"

            await runtime.prompt("second")
            assert len(system_entries()) == 1, "服务器状态没变就不打补丁"
            assert [message.role for message in model.requests[1].messages].count("system") == 1

            gate.set()
            await runtime.prompt("third")  # its bounded wait now ends as soon as slow is connected
            assert len(section_entries()) == 2, "slow 连上后段落变了，才有第二条段落补丁"
            patch = section_entries()[1]
            assert list((patch.sections or {}).keys()) == [MCP_SERVERS_SECTION]
            assert patch.content == ""
            assert "- slow: connected, 1 tool (mcp__slow__run)" in (section_of(patch) or "")
            assert section_of(patch) == render_mcp_servers_section(mcp.status())
            # The direct tool is declared, so 15's loop adds a declaration patch as well.
            assert [tool.name for tool in registry.definitions()] == ["mcp__slow__run"]
            declarations = [message for message in system_entries() if message.tools_added is not None]
            assert len(declarations) == 1
            assert [tool.name for tool in declarations[0].tools_added or []] == ["mcp__slow__run"]
            assert len(system_entries()) == 3
            replayed = current_system_message(runtime.control.get_state().messages)
            assert replayed is not None
            assert replayed.content == "BASE"
            assert section_of(replayed) == section_of(patch)
        finally:
            await runtime.dispose()
            await mcp.close()

    run(scenario())
