"""Checkpoint 17: a minimal MCP client written by hand: JSON-RPC 2.0, two transports, one client.

Three layers, none of which knows about the Agent:

- JSON-RPC messages: an untrusted value narrowed to a request, a notification or a response;
- transports: an in-memory pair for tests, and a child process spoken to over stdin/stdout, one JSON
  message per line;
- `McpClient`: the handshake, the table of requests in flight, `tools/list` with its cursors,
  `tools/call`, timeouts and cancellation.

Wire values stay plain JSON dicts with MCP's own (camelCase) keys, as a provider's wire does in 05.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import copy
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Protocol, TypeAlias, TypedDict, TypeGuard

from .messages import AbortSignal

# ## JSON-RPC 2.0 (given): the shapes, the errors, the id check

JsonRpcId: TypeAlias = str | int | float
#: `{"jsonrpc": "2.0", "id": …, "method": …, "params"?: …}`
JsonRpcRequest: TypeAlias = dict[str, Any]
#: `{"jsonrpc": "2.0", "method": …, "params"?: …}`, with no `id` key at all.
JsonRpcNotification: TypeAlias = dict[str, Any]
#: `{"jsonrpc": "2.0", "id": …, "result": …}`, or `{"jsonrpc": "2.0", "id": …, "error": {…}}` where the
#: error object has `code`, `message` and an optional `data`.
JsonRpcResponse: TypeAlias = dict[str, Any]
#: Any of the three; which one is told by the predicates below.
JsonRpcMessage: TypeAlias = dict[str, Any]

#: The error codes JSON-RPC 2.0 reserves.
JSON_RPC_ERROR_CODES: Mapping[str, int] = {
    "parseError": -32700,
    "invalidRequest": -32600,
    "methodNotFound": -32601,
    "invalidParams": -32602,
    "internalError": -32603,
}


class McpError(Exception):
    """A JSON-RPC error: the server's error response, or a message that breaks the protocol."""

    name = "McpError"

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class McpConnectionClosedError(Exception):
    """The connection is closed: a new request is refused, a request in flight is rejected."""

    name = "McpConnectionClosedError"

    def __init__(self, message: str = "MCP connection closed") -> None:
        super().__init__(message)
        self.message = message


class McpTimeoutError(Exception):
    """A request got no response within its `timeout_ms`."""

    name = "McpTimeoutError"

    def __init__(self, timeout_ms: float) -> None:
        self.message = f"MCP request timed out after {_js_number(timeout_ms)}ms"
        super().__init__(self.message)
        self.timeout_ms = timeout_ms


class McpAbortError(Exception):
    """The caller's signal aborted the request. Its `name` is the platform's, "AbortError", so that a
    layer above can tell a cancellation by name without knowing MCP's classes."""

    name = "AbortError"

    def __init__(self, message: str = "MCP request aborted") -> None:
        super().__init__(message)
        self.message = message


def _js_number(value: float) -> str:
    """A number as JavaScript's template strings write it: 30, not 30.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _json_text(value: object) -> str:
    """JSON.stringify's compact form (PORTING.md's raw arguments)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message_of(error: BaseException) -> str:
    """An error's message: `str()`, or the class name where that is empty."""
    return str(error) or type(error).__name__


def is_object(value: object) -> TypeGuard[dict[str, Any]]:
    """A JSON object: a dict (a list is not an object here)."""
    return isinstance(value, dict)


def _is_number(value: object) -> bool:
    """A JSON number; `True` is not 1 here."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_json_rpc_id(value: object) -> TypeGuard[JsonRpcId]:
    """A string, or a finite number (NaN and infinities are refused)."""
    if isinstance(value, str):
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ## Lab 17.1 · narrow an untrusted value to one of the three messages


def is_json_rpc_request(value: object) -> TypeGuard[JsonRpcRequest]:
    """`jsonrpc` is "2.0", `id` a string or a finite number, `method` a string."""
    # BEGIN LAB 17.1
    return (
        is_object(value)
        and value.get("jsonrpc") == "2.0"
        and is_json_rpc_id(value.get("id"))
        and isinstance(value.get("method"), str)
    )
    # END LAB 17.1


def is_json_rpc_notification(value: object) -> TypeGuard[JsonRpcNotification]:
    """Like a request, but with no `id` key at all."""
    # BEGIN LAB 17.1
    return (
        is_object(value)
        and value.get("jsonrpc") == "2.0"
        and "id" not in value
        and isinstance(value.get("method"), str)
    )
    # END LAB 17.1


def is_json_rpc_response(value: object) -> TypeGuard[JsonRpcResponse]:
    """An id and exactly one of `result` and `error`; an error has a number `code` and a string `message`."""
    # BEGIN LAB 17.1
    if not is_object(value) or value.get("jsonrpc") != "2.0" or not is_json_rpc_id(value.get("id")):
        return False
    if "result" in value:
        return "error" not in value
    error = value.get("error")
    if not is_object(error):
        return False
    return _is_number(error.get("code")) and isinstance(error.get("message"), str)
    # END LAB 17.1


# ## Parsing (given): the three predicates decide


def parse_json_rpc_message(value: object) -> JsonRpcMessage:
    """Return `value` itself when it is one of the three messages; otherwise raise `McpError`
    with the invalidRequest code."""
    if is_json_rpc_request(value) or is_json_rpc_notification(value) or is_json_rpc_response(value):
        return value
    raise McpError(JSON_RPC_ERROR_CODES["invalidRequest"], "Invalid JSON-RPC message")


# ## Transports (given): the listener bookkeeping and the in-memory pair

MessageListener: TypeAlias = Callable[[JsonRpcMessage], None]
ErrorListener: TypeAlias = Callable[[Exception], None]
CloseListener: TypeAlias = Callable[[], None]


class McpTransport(Protocol):
    """What the client needs from a transport: start, send, close, and three kinds of listeners.

    Each `on_*` returns a function that removes the listener again.
    """

    async def start(self) -> None: ...
    async def send(self, message: JsonRpcMessage) -> None: ...
    async def close(self) -> None: ...
    def on_message(self, listener: MessageListener) -> Callable[[], None]: ...
    def on_error(self, listener: ErrorListener) -> Callable[[], None]: ...
    def on_close(self, listener: CloseListener) -> Callable[[], None]: ...


def _to_error(value: object) -> Exception:
    """An `Exception` for whatever was raised or reported."""
    return value if isinstance(value, Exception) else RuntimeError(str(value))


def _added(listeners: list[Any], listener: object) -> Callable[[], None]:
    """Add `listener` once (a set, as in the course) and return the function that takes it out again."""
    if listener not in listeners:
        listeners.append(listener)

    def remove() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return remove


class TransportEvents:
    """The listener bookkeeping every transport shares; the close event fires at most once."""

    def __init__(self) -> None:
        self._message_listeners: list[MessageListener] = []
        self._error_listeners: list[ErrorListener] = []
        self._close_listeners: list[CloseListener] = []
        self._close_emitted = False

    def on_message(self, listener: MessageListener) -> Callable[[], None]:
        """Call `listener` with each message that arrives."""
        return _added(self._message_listeners, listener)

    def on_error(self, listener: ErrorListener) -> Callable[[], None]:
        """Call `listener` with each error the transport reports (a bad line, a failed write)."""
        return _added(self._error_listeners, listener)

    def on_close(self, listener: CloseListener) -> Callable[[], None]:
        """Call `listener` once, when the transport closes."""
        return _added(self._close_listeners, listener)

    def _emit_message(self, message: JsonRpcMessage) -> None:
        for listener in list(self._message_listeners):
            listener(message)

    def _emit_error(self, error: object) -> None:
        normalized = _to_error(error)
        for listener in list(self._error_listeners):
            listener(normalized)

    def _emit_close(self) -> None:
        if self._close_emitted:
            return
        self._close_emitted = True
        for listener in list(self._close_listeners):
            listener()


class InMemoryTransport(TransportEvents):
    """One end of a test transport pair: a sent message is deep-copied and delivered to the peer on
    a later turn of the running loop, never inside `send`."""

    def __init__(self) -> None:
        super().__init__()
        self._peer: InMemoryTransport | None = None
        self._started = False
        self._closed = False

    def connect_peer(self, peer: InMemoryTransport) -> None:
        """Pair this end with `peer`; an end has one peer only."""
        if self._peer is not None:
            raise RuntimeError("In-memory MCP transport already has a peer")
        self._peer = peer

    async def start(self) -> None:
        """Accept sends from now on; a closed end cannot start again."""
        if self._closed:
            raise McpConnectionClosedError()
        self._started = True

    async def send(self, message: JsonRpcMessage) -> None:
        """Deliver a deep copy to the peer on the next loop turn."""
        if not self._started or self._closed:
            raise McpConnectionClosedError()
        peer = self._peer
        if peer is None or not peer._started or peer._closed:
            raise McpConnectionClosedError("In-memory MCP peer is not connected")
        delivered = copy.deepcopy(message)
        asyncio.get_running_loop().call_soon(peer._deliver, delivered)

    async def close(self) -> None:
        """Close this end, then the peer; each end's close listeners fire once."""
        if self._closed:
            return
        self._closed = True
        self._emit_close()
        if self._peer is not None:
            await self._peer.close()

    def emit_error(self, error: object) -> None:
        """Report a transport error to the listeners (lets a test play a broken transport)."""
        self._emit_error(error)

    def _deliver(self, message: JsonRpcMessage) -> None:
        if not self._closed:
            self._emit_message(message)


@dataclass(frozen=True)
class InMemoryTransportPair:
    """Two in-memory ends, each the other's peer."""

    client: InMemoryTransport
    server: InMemoryTransport


def create_in_memory_transport_pair() -> InMemoryTransportPair:
    """A client end and a server end, connected to each other."""
    client = InMemoryTransport()
    server = InMemoryTransport()
    client.connect_peer(server)
    server.connect_peer(client)
    return InMemoryTransportPair(client=client, server=server)


# ## Lab 17.4 · stdio: one JSON-RPC message per line


@dataclass(frozen=True)
class StdioTransportOptions:
    """How to start the server process, and how long to wait for it when closing."""

    command: str
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    #: After stdin is closed, how long the server gets to exit on its own before SIGTERM.
    grace_ms: float = 200
    #: After SIGTERM, how long to wait before SIGKILL.
    close_timeout_ms: float = 1_000


@dataclass
class SplitLines:
    """What one chunk of stdout gives: the complete messages, the bad lines, the unfinished tail."""

    messages: list[JsonRpcMessage]
    errors: list[Exception]
    rest: str


def _refuse_constant(name: str) -> object:
    """JSON has no NaN or Infinity; Python's parser would accept them."""
    raise ValueError(f"Unexpected token {name} in JSON")


def split_json_rpc_lines(buffered: str, chunk: str) -> SplitLines:
    """Frame by newlines: only a line ended by "\\n" is parsed; every complete line of the chunk is
    delivered; a line that is not JSON or not JSON-RPC is an error, never the end of the connection."""
    # BEGIN LAB 17.4
    lines = (buffered + chunk).split("\n")
    rest = lines.pop()  # after the last newline: not committed yet, kept for the next chunk
    messages: list[JsonRpcMessage] = []
    errors: list[Exception] = []
    for line in lines:
        trimmed = line.strip()
        if not trimmed:
            continue
        try:
            messages.append(parse_json_rpc_message(json.loads(trimmed, parse_constant=_refuse_constant)))
        except Exception as error:
            errors.append(error)
    return SplitLines(messages=messages, errors=errors, rest=rest)
    # END LAB 17.4


class StdioTransport(TransportEvents):
    """A server run as a child process: messages go to its stdin and come from its stdout, one per
    line; its stderr is discarded."""

    def __init__(
        self,
        *,
        command: str,
        args: Sequence[str] = (),
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        grace_ms: float = 200,
        close_timeout_ms: float = 1_000,
    ) -> None:
        super().__init__()
        self.options = StdioTransportOptions(
            command=command,
            args=tuple(args),
            cwd=cwd,
            env=None if env is None else dict(env),
            grace_ms=grace_ms,
            close_timeout_ms=close_timeout_ms,
        )
        self._child: asyncio.subprocess.Process | None = None
        self._pid: int | None = None
        self._buffered = ""
        self._started = False
        self._closed = False
        self._exited: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs; None before start and after it has exited."""
        return self._pid if self._child is not None else None

    async def start(self) -> None:
        """Spawn the server; a spawn error (no such command) is raised from here."""
        if self._started:
            raise RuntimeError("MCP stdio transport already started")
        if self._closed:
            raise McpConnectionClosedError()
        self._started = True
        options = self.options
        child = await asyncio.create_subprocess_exec(
            options.command,
            *options.args,
            cwd=options.cwd,
            env={**os.environ, **(options.env or {})},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self._child = child
        self._pid = child.pid
        self._exited = asyncio.get_running_loop().create_task(self._read_until_exit(child))

    async def _read_until_exit(self, child: asyncio.subprocess.Process) -> None:
        """Feed stdout to the framer until EOF, then wait for the exit and report the close."""
        assert child.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while chunk := await child.stdout.read(65_536):
                self._handle_stdout(decoder.decode(chunk))
            self._handle_stdout(decoder.decode(b"", final=True))
        except Exception as error:  # a broken pipe ends the stream like EOF does
            if not self._closed:
                self._emit_error(error)
        await child.wait()
        self._child = None
        if self._buffered.strip():
            self._emit_error(RuntimeError("MCP stdio server closed with an incomplete JSON-RPC message"))
        self._buffered = ""
        self._emit_close()

    async def send(self, message: JsonRpcMessage) -> None:
        """Write the message as one line of compact JSON and wait until the pipe has taken it."""
        child = self._child
        stdin = child.stdin if child is not None else None
        if not self._started or self._closed or stdin is None or stdin.is_closing():
            raise McpConnectionClosedError()
        stdin.write((_json_text(message) + "\n").encode("utf-8"))
        await stdin.drain()

    async def close(self) -> None:
        """Close stdin so that the server can exit by itself; after grace_ms SIGTERM, after
        close_timeout_ms more SIGKILL. Returns once the child has exited."""
        # BEGIN LAB 17.4
        if self._closed:
            return
        self._closed = True
        child = self._child
        exited = self._exited
        if child is None or exited is None or child.returncode is not None:
            self._emit_close()
            return
        if child.stdin is not None:
            child.stdin.close()  # EOF: a well-behaved server ends here
        if await _raced(exited, self.options.grace_ms):
            return
        child.terminate()
        if await _raced(exited, self.options.close_timeout_ms):
            return
        child.kill()
        await asyncio.shield(exited)
        # END LAB 17.4

    def _handle_stdout(self, chunk: str) -> None:
        split = split_json_rpc_lines(self._buffered, chunk)
        self._buffered = split.rest
        for error in split.errors:
            self._emit_error(error)
        for message in split.messages:
            if not self._closed:
                self._emit_message(message)


async def _raced(task: asyncio.Task[None], timeout_ms: float) -> bool:
    """True when `task` finishes within `timeout_ms`, False otherwise (the task keeps running)."""
    done, _ = await asyncio.wait([task], timeout=timeout_ms / 1000)
    return bool(done)


# ## The client (given): the shapes and the validators

LATEST_PROTOCOL_VERSION = "2025-11-25"
#: The versions this client accepts from a server, newest first.
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = (
    LATEST_PROTOCOL_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
)


class McpImplementation(TypedDict):
    """A client's or a server's name and version (wire form)."""

    name: str
    version: str


class McpInitializeResult(TypedDict):
    """What the server answers to `initialize` (wire form)."""

    protocolVersion: str
    capabilities: dict[str, Any]
    serverInfo: McpImplementation
    instructions: NotRequired[str]


class McpToolInfo(TypedDict):
    """One tool of `tools/list` (wire form; other keys the server sends are kept)."""

    name: str
    inputSchema: dict[str, Any]
    description: NotRequired[str]


class McpCallToolResult(TypedDict):
    """The result of `tools/call` (wire form). `content` is always there after validation."""

    content: list[dict[str, Any]]
    structuredContent: NotRequired[dict[str, Any]]
    isError: NotRequired[bool]


@dataclass(frozen=True)
class McpClientOptions:
    """Who the client says it is, and the timeout of a request that names none."""

    name: str
    version: str
    request_timeout_ms: float | None = None


McpConnectionState: TypeAlias = Literal["idle", "connecting", "connected", "closed"]

#: A request's timeout when neither the call nor the client names one.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
#: `tools/list` gives up after this many pages, even with fresh cursors.
MAX_LIST_PAGES = 1_000


@dataclass
class PendingRequest:
    """One request in flight. It leaves the table in one of four ways: a response, its timer, the
    caller's abort, or the connection closing; each first goes through `_remove_pending`."""

    future: asyncio.Future[Any]
    signal: AbortSignal | None
    on_abort: Callable[[], None]
    #: The specification forbids cancelling `initialize`.
    cancellable: bool
    timer: asyncio.TimerHandle | None = None


def _invalid(message: str) -> McpError:
    return McpError(JSON_RPC_ERROR_CODES["invalidRequest"], message)


def validate_initialize_result(value: object) -> McpInitializeResult:
    """Check the shape of the `initialize` result."""
    if not is_object(value):
        raise _invalid("Invalid MCP initialize result")
    server_info = value.get("serverInfo")
    if (
        not isinstance(value.get("protocolVersion"), str)
        or not is_object(value.get("capabilities"))
        or not is_object(server_info)
        or not isinstance(server_info.get("name"), str)
        or not isinstance(server_info.get("version"), str)
        or ("instructions" in value and not isinstance(value["instructions"], str))
    ):
        raise _invalid("Invalid MCP initialize result")
    return value  # type: ignore[return-value]


@dataclass
class ToolsPage:
    """One page of `tools/list`: its tools, and the cursor of the next page (None: the last page)."""

    tools: list[McpToolInfo]
    next_cursor: str | None = None


def validate_tools_page(value: object) -> ToolsPage:
    """Check every tool's `name` and `inputSchema`; a null or empty cursor means "no next page"."""
    if not is_object(value) or not isinstance(value.get("tools"), list):
        raise _invalid("Invalid MCP tools/list result")
    tools: list[Any] = value["tools"]
    for tool in tools:
        if (
            not is_object(tool)
            or not isinstance(tool.get("name"), str)
            or not is_object(tool.get("inputSchema"))
        ):
            raise _invalid("Invalid entry in MCP tools/list result")
    next_cursor = value.get("nextCursor")
    if next_cursor == "":
        next_cursor = None
    if next_cursor is not None and not isinstance(next_cursor, str):
        raise _invalid("Invalid MCP tools/list cursor")
    return ToolsPage(tools=tools, next_cursor=next_cursor)


def validate_call_tool_result(value: object) -> McpCallToolResult:
    """`content` is required by the specification, but a server that returns only
    `structuredContent` leaves it out: it becomes []. Other keys are kept."""
    if not is_object(value) or ("content" in value and not isinstance(value["content"], list)):
        raise _invalid("Invalid MCP tools/call result")
    if "structuredContent" in value and not is_object(value["structuredContent"]):
        raise _invalid("Invalid MCP tools/call structured content")
    if "content" not in value:
        return {**value, "content": []}  # type: ignore[typeddict-item]
    return value  # type: ignore[return-value]


def _absent_unless(key: str, value: object) -> dict[str, object]:
    """`{key: value}`, or `{}` when value is None (the course's spread of an optional field)."""
    return {} if value is None else {key: value}


class McpClient:
    """A client that only makes requests: it answers a server's own requests with "method not found"."""

    def __init__(self, *, name: str, version: str, request_timeout_ms: float | None = None) -> None:
        self.options = McpClientOptions(name=name, version=version, request_timeout_ms=request_timeout_ms)
        self._state: McpConnectionState = "idle"
        self._transport: McpTransport | None = None
        self._next_request_id = 1
        self._pending: dict[JsonRpcId, PendingRequest] = {}
        self._notification_listeners: dict[str, list[Callable[[object], None]]] = {}
        self._error_listeners: list[ErrorListener] = []
        self._close_listeners: list[CloseListener] = []
        self._disposers: list[Callable[[], None]] = []
        self._initialize_result: McpInitializeResult | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def connection_state(self) -> McpConnectionState:
        """idle → connecting → connected → closed; closed is for good."""
        return self._state

    @property
    def server_info(self) -> McpImplementation | None:
        """The server's name and version, once the handshake has succeeded."""
        return None if self._initialize_result is None else self._initialize_result["serverInfo"]

    @property
    def protocol_version(self) -> str | None:
        """The protocol version the server chose."""
        return None if self._initialize_result is None else self._initialize_result["protocolVersion"]

    @property
    def instructions(self) -> str | None:
        """The server's optional instructions."""
        return None if self._initialize_result is None else self._initialize_result.get("instructions")

    # ## Lab 17.1 · the handshake

    async def connect(self, transport: McpTransport) -> McpInitializeResult:
        """start → `initialize` (with the version this client wants) → check the version the server
        chose → `notifications/initialized` → connected. Any failure closes the connection first."""
        # BEGIN LAB 17.1
        if self._state != "idle":
            raise RuntimeError(f"Cannot connect MCP client in {self._state} state")
        self._state = "connecting"
        self._transport = transport
        self._disposers = [
            transport.on_message(self._handle_message),
            transport.on_error(self._emit_error),
            transport.on_close(self._mark_closed),
        ]
        try:
            await transport.start()
            client_info: McpImplementation = {"name": self.options.name, "version": self.options.version}
            result = validate_initialize_result(
                await self._request_internal(
                    "initialize",
                    {
                        "protocolVersion": LATEST_PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": client_info,
                    },
                    allow_connecting=True,
                )
            )
            if result["protocolVersion"] not in SUPPORTED_PROTOCOL_VERSIONS:
                raise RuntimeError(
                    f"MCP server selected unsupported protocol version {result['protocolVersion']}"
                )
            self._initialize_result = result
            await self._notify_internal("notifications/initialized", None, allow_connecting=True)
            self._state = "connected"
            return result
        except BaseException:
            # Cancellation too: a half-open connection is never left behind.
            with contextlib.suppress(Exception):
                await self.close()
            raise
        # END LAB 17.1

    # ## Requests, notifications and listeners (given)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        signal: AbortSignal | None = None,
        timeout_ms: float | None = None,
    ) -> Any:
        """Send a request and wait for its result; a closed client refuses it."""
        return await self._request_internal(method, params, signal=signal, timeout_ms=timeout_ms)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no response is expected)."""
        await self._notify_internal(method, params, allow_connecting=False)

    def on_notification(self, method: str, listener: Callable[[object], None]) -> Callable[[], None]:
        """Call `listener` with the params of each notification of `method`."""
        return _added(self._notification_listeners.setdefault(method, []), listener)

    def on_error(self, listener: ErrorListener) -> Callable[[], None]:
        """Call `listener` with each error the connection reports."""
        return _added(self._error_listeners, listener)

    def on_close(self, listener: CloseListener) -> Callable[[], None]:
        """Call `listener` once when the connection closes, by the transport or by `close()`."""
        return _added(self._close_listeners, listener)

    # ## Lab 17.2 · every page of tools/list, and one tools/call

    async def list_tools(
        self, *, signal: AbortSignal | None = None, timeout_ms: float | None = None
    ) -> list[McpToolInfo]:
        """Every tool, following `nextCursor`; a repeated cursor or too many pages is an error."""
        # BEGIN LAB 17.2
        tools: list[McpToolInfo] = []
        cursors: set[str] = set()
        cursor: str | None = None
        for _page in range(MAX_LIST_PAGES):
            page = validate_tools_page(
                await self.request(
                    "tools/list",
                    None if cursor is None else {"cursor": cursor},
                    signal=signal,
                    timeout_ms=timeout_ms,
                )
            )
            tools.extend(page.tools)
            if page.next_cursor is None:
                return tools
            if page.next_cursor in cursors:
                # The server would lead us back to a page already read: paging on is an endless loop.
                raise RuntimeError(f"MCP tools/list returned duplicate cursor: {page.next_cursor}")
            cursors.add(page.next_cursor)
            cursor = page.next_cursor
        raise RuntimeError(f"MCP tools/list exceeded {MAX_LIST_PAGES} pages")
        # END LAB 17.2

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        signal: AbortSignal | None = None,
        timeout_ms: float | None = None,
    ) -> McpCallToolResult:
        """`tools/call` with `{name, arguments?}`: no `arguments` key when no args are given."""
        # BEGIN LAB 17.2
        params: dict[str, Any] = {"name": name, **_absent_unless("arguments", args)}
        return validate_call_tool_result(
            await self.request("tools/call", params, signal=signal, timeout_ms=timeout_ms)
        )
        # END LAB 17.2

    # ## The request table (given): register, send, dispatch the answer

    async def close(self) -> None:
        """Detach from the transport, reject everything in flight, then close the transport."""
        transport = self._transport
        self._transport = None
        disposers, self._disposers = self._disposers, []
        for dispose in disposers:
            dispose()
        self._mark_closed()
        if transport is not None:
            await transport.close()

    async def _request_internal(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        signal: AbortSignal | None = None,
        timeout_ms: float | None = None,
        allow_connecting: bool = False,
    ) -> Any:
        """Register the request in the table, arm its timer and abort listener, send it, wait."""
        transport = self._require_transport(allow_connecting)
        if signal is not None and signal.aborted:
            raise McpAbortError()  # neither registered nor sent
        request_id = self._next_request_id
        self._next_request_id += 1
        message: JsonRpcRequest = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            **_absent_unless("params", params),
        }
        if timeout_ms is not None:
            timeout = timeout_ms
        elif self.options.request_timeout_ms is not None:
            timeout = self.options.request_timeout_ms
        else:
            timeout = DEFAULT_REQUEST_TIMEOUT_MS
        cancellable = method != "initialize"
        loop = asyncio.get_running_loop()

        def on_abort() -> None:
            reason = signal.reason if signal is not None else None
            self._cancel_pending(
                request_id, McpAbortError(), cancellable, "Aborted" if reason is None else str(reason)
            )

        entry = PendingRequest(
            future=loop.create_future(), signal=signal, on_abort=on_abort, cancellable=cancellable
        )
        self._pending[request_id] = entry
        if signal is not None:
            signal.add_event_listener("abort", on_abort)
        if math.isfinite(timeout) and timeout > 0:
            entry.timer = loop.call_later(
                timeout / 1000,
                self._cancel_pending,
                request_id,
                McpTimeoutError(timeout),
                cancellable,
                "Request timed out",
            )
        self._in_background(self._send_or_fail(transport, message, request_id))
        try:
            return await entry.future
        except asyncio.CancelledError:
            # The awaiting task itself was cancelled: the request leaves the table as an abort would.
            self._cancel_pending(request_id, McpAbortError(), cancellable, "Request cancelled")
            raise

    async def _send_or_fail(
        self, transport: McpTransport, message: JsonRpcMessage, request_id: JsonRpcId
    ) -> None:
        try:
            await transport.send(message)
        except Exception as error:
            self._cancel_pending(request_id, error, False)

    def _in_background(self, coroutine: Any) -> None:
        """Run a send without waiting for it (the course's `void send(...).catch(...)`)."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        """Forget a finished send; an error it let escape goes to the error listeners, not to a warning."""
        self._background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self._emit_error(error)

    async def _notify_internal(
        self, method: str, params: dict[str, Any] | None, *, allow_connecting: bool
    ) -> None:
        await self._require_transport(allow_connecting).send(
            {"jsonrpc": "2.0", "method": method, **_absent_unless("params", params)}
        )

    def _require_transport(self, allow_connecting: bool) -> McpTransport:
        if self._transport is not None and (
            self._state == "connected" or (allow_connecting and self._state == "connecting")
        ):
            return self._transport
        raise McpConnectionClosedError(f"MCP client is {self._state}")

    def _handle_message(self, message: JsonRpcMessage) -> None:
        """Hand a response to the request it answers, a notification to its listeners, and answer a
        server's request with "method not found"."""
        if is_json_rpc_response(message):
            request_id = message["id"]
            entry = self._pending.get(request_id)
            if entry is None:
                self._emit_error(RuntimeError(f"Received response for unknown MCP request {request_id}"))
                return
            self._remove_pending(request_id, entry)
            if entry.future.done():
                return
            if "error" in message:
                error = message["error"]
                entry.future.set_exception(McpError(error["code"], error["message"], error.get("data")))
            else:
                entry.future.set_result(message["result"])
            return
        if is_json_rpc_notification(message):
            for listener in list(self._notification_listeners.get(message["method"], [])):
                try:
                    listener(message.get("params"))
                except Exception as error:
                    self._emit_error(error)
            return
        if is_json_rpc_request(message) and self._transport is not None:
            reply: JsonRpcResponse = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {
                    "code": JSON_RPC_ERROR_CODES["methodNotFound"],
                    "message": f"Method not found: {message['method']}",
                },
            }
            self._in_background(self._send_reporting(self._transport, reply))

    async def _send_reporting(self, transport: McpTransport, message: JsonRpcMessage) -> None:
        try:
            await transport.send(message)
        except Exception as error:
            self._emit_error(error)

    # ## Lab 17.3 · a timeout or an abort takes the request out of the table

    def _cancel_pending(
        self, request_id: JsonRpcId, error: BaseException, notify_server: bool, reason: str | None = None
    ) -> None:
        """Reject one request in flight and, when allowed, tell the server with `notifications/cancelled`."""
        # BEGIN LAB 17.3
        entry = self._pending.get(request_id)
        if entry is None:
            return  # the response got there first
        self._remove_pending(request_id, entry)
        if not entry.future.done():
            entry.future.set_exception(error)
        if notify_server and self._transport is not None:
            # Not awaited: a failed notification goes to the error listeners, the caller is already told.
            params = {"requestId": request_id, **_absent_unless("reason", reason or None)}
            self._in_background(
                self._send_reporting(
                    self._transport, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
                )
            )
        # END LAB 17.3

    # ## The request table, continued (given): leaving it, closing for good

    def _remove_pending(self, request_id: JsonRpcId, entry: PendingRequest) -> None:
        self._pending.pop(request_id, None)
        if entry.timer is not None:
            entry.timer.cancel()
        if entry.signal is not None:
            entry.signal.remove_event_listener("abort", entry.on_abort)

    def _mark_closed(self) -> None:
        """Idempotent: reject every request in flight and close for good; close listeners hear it once."""
        was_closed = self._state == "closed"
        self._state = "closed"
        for request_id, entry in list(self._pending.items()):
            self._remove_pending(request_id, entry)
            if not entry.future.done():
                entry.future.set_exception(McpConnectionClosedError())
        if was_closed:
            return
        for listener in list(self._close_listeners):
            try:
                listener()
            except Exception as error:
                self._emit_error(error)

    def _emit_error(self, error: object) -> None:
        normalized = _to_error(error)
        for listener in list(self._error_listeners):
            listener(normalized)
