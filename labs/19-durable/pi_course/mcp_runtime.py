"""Checkpoint 17: the MCP servers join the Runtime: tool names, registration, the mcp_servers section.

`create_mcp_runtime` connects every configured server in the background. Each server's tools are
registered in 15's registry as `mcp__<server>__<tool>`, deferred unless the configuration says
otherwise, so they run through 06's `execute_tool_call` like any other tool. The runtime is also a
section provider for 13's Runtime: the list of servers becomes the `mcp_servers` system section,
patched only when it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypedDict

from .mcp import McpCallToolResult, McpClient, McpImplementation, McpToolInfo, McpTransport
from .messages import AbortSignal, TextContent, text
from .tool import Tool, ToolContext, ToolExposure, ToolOutput, ToolRegistry, ValidationError

# ## Tools from a server (given): the adapter and the section text

#: A provider takes tool names of at most 64 characters from `[A-Za-z0-9_-]`.
MAX_TOOL_NAME_LENGTH = 64
#: The length of the hash suffix a long or taken name gets.
HASH_LENGTH = 8


class McpToolDetails(TypedDict):
    """A server tool's result details: the server's name and the tool's own (server-side) name."""

    server: str
    tool: str


def to_model_content(result: McpCallToolResult) -> list[TextContent]:
    """Text blocks as they are; any other block (an image, a resource) as its JSON text."""
    content: list[TextContent] = []
    for block in result["content"]:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            content.append(text(block["text"]))
        else:
            content.append(text(json.dumps(block, ensure_ascii=False, separators=(",", ":"))))
    return content


def to_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """A server's `inputSchema` as an object schema: `type` and `properties` filled in where missing."""
    parameters = {**schema, "type": "object" if schema.get("type") is None else schema["type"]}
    if "properties" not in schema:
        parameters["properties"] = {}
    return parameters


class McpToolCaller(Protocol):
    """What a server tool needs from a client: `call_tool`."""

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        signal: AbortSignal | None = None,
        timeout_ms: float | None = None,
    ) -> McpCallToolResult: ...


class McpArgumentsSchema:
    """The arguments only have to be an object; the server checks the rest itself."""

    def __init__(self, json_schema: dict[str, Any]) -> None:
        self.json_schema = json_schema

    def parse(self, value: object) -> dict[str, Any]:
        """No arguments is `{}`; an object passes as it is; anything else is refused."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValidationError("参数必须是 object")
        return value


def create_mcp_tool(
    *,
    server: str,
    tool: McpToolInfo,
    name: str,
    exposure: ToolExposure,
    get_client: Callable[[], Awaitable[McpToolCaller]],
    timeout_ms: float | None = None,
) -> Tool[dict[str, Any], McpToolDetails]:
    """A course `Tool` that runs `tools/call` on the server. A result with `isError` becomes an error
    result that keeps its content; the Agent's signal reaches the client's abort path."""
    description = tool.get("description")
    server_name = tool["name"]

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[McpToolDetails]:
        client = await get_client()
        result = await client.call_tool(server_name, parameters, signal=context.signal, timeout_ms=timeout_ms)
        content = to_model_content(result)
        if result.get("isError") and not content:
            content.append(text(f"MCP tool {server}/{server_name} returned an error"))
        details: McpToolDetails = {"server": server, "tool": server_name}
        return ToolOutput(content=content, details=details, is_error=True if result.get("isError") else None)

    return Tool(
        name=name,
        description=(description.strip() if isinstance(description, str) else "")
        or f"MCP tool {server_name} from server {server}",
        schema=McpArgumentsSchema(to_parameters(tool["inputSchema"])),
        execute=execute,
        exposure=exposure,
    )


#: The system section that lists the servers.
MCP_SERVERS_SECTION = "mcp_servers"

McpServerState: TypeAlias = Literal["connecting", "connected", "failed", "closed"]


@dataclass
class McpServerConfig:
    """One server: its name, how to reach it, and the exposure of its tools (deferred when None)."""

    name: str
    create_transport: Callable[[], McpTransport]
    exposure: ToolExposure | None = None


@dataclass
class McpServerStatus:
    """A server's state, the error that failed it if any, and the names its tools got in the registry."""

    name: str
    state: McpServerState
    tools: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The course's shape: `name`, `state`, `error` (only when there is one), `tools`."""
        wire: dict[str, Any] = {"name": self.name, "state": self.state}
        if self.error:
            wire["error"] = self.error
        wire["tools"] = list(self.tools)
        return wire


def render_mcp_servers_section(statuses: Sequence[McpServerStatus]) -> str:
    """One line per server: state, error, tool count and names. No descriptions: a server that
    rewords a tool must not rewrite the prompt."""
    lines = ["MCP servers:"]
    for status in statuses:
        count = len(status.tools)
        tools = f" ({', '.join(status.tools)})" if count else ""
        error = f": {status.error}" if status.error else ""
        lines.append(
            f"- {status.name}: {status.state}{error}, {count} tool{'' if count == 1 else 's'}{tools}"
        )
    return "\n".join(lines)


def _error_message(error: BaseException) -> str:
    return str(error) or type(error).__name__


@dataclass
class ServerConnection:
    """The runtime's record of one server."""

    config: McpServerConfig
    state: McpServerState = "connecting"
    tools: list[str] = field(default_factory=list)
    error: str | None = None
    client: McpClient | None = None
    ready: asyncio.Task[None] | None = None


class McpRuntime(Protocol):
    """The servers as the Runtime sees them: a status, a bounded wait, a section provider, a close."""

    def status(self) -> list[McpServerStatus]: ...
    async def wait_for_direct_servers(self) -> None: ...
    async def sections(self) -> dict[str, str]: ...
    async def close(self) -> None: ...


# ## Lab 17.5 · names, registration, the bounded wait and the section


def _utf16_length(value: str) -> int:
    """A string's length as JavaScript counts it (a character outside the BMP is two)."""
    return sum(2 if ord(char) > 0xFFFF else 1 for char in value)


def create_mcp_tool_name(
    server: str, tool: str, is_taken: Callable[[str], bool] = lambda _name: False
) -> str:
    """`mcp__<server>__<tool>`, every character outside `[A-Za-z0-9_]` turned into `_`, so that the name
    is also an identifier for a script's `tools.<name>`. A name longer than 64 characters, or one that
    `is_taken` reports (cleaning can map `a-b` and `a.b` to one name), is cut and given a hash suffix."""
    # BEGIN LAB 17.5
    raw = f"mcp__{server}__{tool}"
    # The course's regex works on UTF-16 code units: a character outside the BMP becomes two "_".
    name = "".join(
        char if (char.isascii() and (char.isalnum() or char == "_")) else "_" * _utf16_length(char)
        for char in raw
    )
    if len(name) <= MAX_TOOL_NAME_LENGTH and not is_taken(name):
        return name
    # The hash is of the original names: stable for one tool, different for `b-c` and `b.c`.
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:HASH_LENGTH]
    return f"{name[: MAX_TOOL_NAME_LENGTH - HASH_LENGTH - 1]}_{digest}"
    # END LAB 17.5


#: The client a runtime introduces itself as when the options name none.
DEFAULT_CLIENT_INFO: McpImplementation = {"name": "pi-course", "version": "0.0.1"}
#: How long the first prompt waits at most for servers with direct tools, when the options say nothing.
DEFAULT_STARTUP_TIMEOUT_MS = 5_000


def _connect_settled(connection: ServerConnection, task: asyncio.Task[None]) -> None:
    """`_connect` handles its own failures; anything it lets escape (a lab stub's error) is taken from
    the task here, so that it shows in `status()` instead of as a warning when the task is collected."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and connection.state != "closed":
        connection.state = "failed"
        connection.error = _error_message(error)


class McpRuntimeImpl:
    """The runtime `create_mcp_runtime` builds: one connection per server, started at once."""

    def __init__(
        self,
        registry: ToolRegistry,
        servers: Sequence[McpServerConfig],
        client_info: McpImplementation,
        request_timeout_ms: float | None,
        startup_timeout_ms: float,
    ) -> None:
        self._registry = registry
        self._client_info = client_info
        self._request_timeout_ms = request_timeout_ms
        self._startup_timeout_ms = startup_timeout_ms
        self._connections = [ServerConnection(config=config) for config in servers]
        loop = asyncio.get_running_loop()
        for connection in self._connections:
            connection.ready = loop.create_task(self._connect(connection))
            connection.ready.add_done_callback(functools.partial(_connect_settled, connection))

    async def _connect(self, connection: ServerConnection) -> None:
        """connect → tools/list → register every tool → connected; a failure leaves the server failed."""
        # BEGIN LAB 17.5
        client = McpClient(
            name=self._client_info["name"],
            version=self._client_info["version"],
            request_timeout_ms=self._request_timeout_ms,
        )
        try:
            await client.connect(connection.config.create_transport())
            tools = await client.list_tools()
            connection.client = client

            async def get_client() -> McpClient:
                return client

            exposure: ToolExposure = connection.config.exposure or "deferred"
            for tool in tools:
                name = create_mcp_tool_name(
                    connection.config.name,
                    tool["name"],
                    lambda candidate: self._registry.get(candidate) is not None,
                )
                self._registry.register(
                    create_mcp_tool(
                        server=connection.config.name,
                        tool=tool,
                        name=name,
                        exposure=exposure,
                        timeout_ms=self._request_timeout_ms,
                        get_client=get_client,
                    )
                )
                connection.tools.append(name)
            connection.state = "connected"

            def on_close() -> None:
                if connection.state != "closed":
                    connection.state = "failed"
                if connection.error is None:
                    connection.error = "connection closed"

            client.on_close(on_close)
        except asyncio.CancelledError:
            await client.close()  # close() stopped this connect: leave no half-open client behind
            raise
        except Exception as error:
            if connection.state != "closed":
                connection.state = "failed"
                connection.error = _error_message(error)
            with contextlib.suppress(Exception):
                await client.close()
        # END LAB 17.5

    def status(self) -> list[McpServerStatus]:
        """A snapshot of every server, in configuration order."""
        # BEGIN LAB 17.5
        return [
            McpServerStatus(
                name=connection.config.name,
                state=connection.state,
                tools=list(connection.tools),
                error=connection.error or None,
            )
            for connection in self._connections
        ]
        # END LAB 17.5

    async def wait_for_direct_servers(self) -> None:
        """Wait for the servers whose tools are direct, at most `startup_timeout_ms`; the others
        keep connecting in the background."""
        # BEGIN LAB 17.5
        direct = [
            connection.ready
            for connection in self._connections
            if (connection.config.exposure or "deferred") == "direct" and connection.ready is not None
        ]
        if direct:
            # asyncio.wait never cancels what it waits for: a slow server keeps connecting.
            await asyncio.wait(direct, timeout=self._startup_timeout_ms / 1000)
        # END LAB 17.5

    async def sections(self) -> dict[str, str]:
        """The section provider for 13's Runtime: the bounded wait first, then the `mcp_servers` section."""
        # BEGIN LAB 17.5
        await self.wait_for_direct_servers()
        return {MCP_SERVERS_SECTION: render_mcp_servers_section(self.status())}
        # END LAB 17.5

    async def close(self) -> None:
        """Mark every server closed and close its client; a server still connecting stops connecting."""
        # BEGIN LAB 17.5
        for connection in self._connections:
            connection.state = "closed"
            if connection.ready is not None and not connection.ready.done():
                connection.ready.cancel()
                await asyncio.wait([connection.ready])
            if connection.client is not None:
                with contextlib.suppress(Exception):
                    await connection.client.close()
        # END LAB 17.5


def create_mcp_runtime(
    registry: ToolRegistry,
    *,
    servers: Sequence[McpServerConfig],
    client_info: McpImplementation | None = None,
    request_timeout_ms: float | None = None,
    startup_timeout_ms: float = DEFAULT_STARTUP_TIMEOUT_MS,
) -> McpRuntimeImpl:
    """Start connecting every server on the running loop, and return the runtime at once."""
    return McpRuntimeImpl(
        registry,
        list(servers),
        DEFAULT_CLIENT_INFO if client_info is None else client_info,
        request_timeout_ms,
        startup_timeout_ms,
    )
