"""A real HTTP server on 127.0.0.1 for the provider tests: it streams `text/event-stream` replies.

It runs on the test's own event loop (asyncio.start_server), answers each request with the next
scripted reply, and records every request (method, path, headers, body) for the test to check. A
reply is a list of parts: bytes are sent as one HTTP chunk each (so a test decides where the network
splits the stream), and `HOLD` keeps the connection open until the client hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A reply part that sends nothing more and waits until the client closes the connection.
HOLD = object()
#: A reply part that closes the connection at once, without the body's last chunk (a dropped stream).
DROP = object()


@dataclass
class Reply:
    """One scripted HTTP response."""

    parts: Sequence[bytes | object]
    status: int = 200
    content_type: str = "text/event-stream"


@dataclass
class RecordedRequest:
    """What the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


@dataclass
class SSEServer:
    """The running server: its base URL, the requests it got, and what happened to the connections."""

    port: int
    replies: list[Reply]
    requests: list[RecordedRequest] = field(default_factory=list)
    #: Set when a held connection was closed by the client (the transport let go of it).
    client_hung_up: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str = "/v1") -> str:
        """An absolute URL on this server."""
        return f"http://127.0.0.1:{self.port}{path}"


def sse_event(payload: object) -> bytes:
    """One SSE event carrying `payload` (a string as is, anything else as compact JSON)."""
    data = (
        payload
        if isinstance(payload, str)
        else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {data}\n\n".encode()


def split_in_half(payloads: Sequence[object]) -> list[bytes]:
    """All events as one body cut at its middle byte, as two network reads (the course's fixture)."""
    body = b"".join(sse_event(payload) for payload in payloads)
    middle = len(body) // 2
    return [body[:middle], body[middle:]]


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return RecordedRequest(method, path, headers, body)


async def _answer(server: SSEServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        server.requests.append(await _read_request(reader))
        reply = server.replies.pop(0) if server.replies else Reply([b""], status=500)
        head = (
            f"HTTP/1.1 {reply.status} Scripted\r\n"
            f"Content-Type: {reply.content_type}\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1"))
        await writer.drain()
        for part in reply.parts:
            if part is HOLD:
                # Nothing more is sent; reading returns b"" once the client closes its end.
                while await reader.read(1024):
                    pass
                server.client_hung_up.set()
                return
            if part is DROP:
                return
            assert isinstance(part, bytes)
            if part:
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        server.client_hung_up.set()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def sse_server(*replies: Reply) -> AsyncIterator[SSEServer]:
    """Serve the replies in order on a free port of 127.0.0.1 for the duration of the block."""
    holder: list[SSEServer] = []
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await _answer(holder[0], reader, writer)
        finally:
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    holder.append(SSEServer(port=server.sockets[0].getsockname()[1], replies=list(replies)))
    try:
        async with server:
            yield holder[0]
            server.close()
            # A handler still holding a connection open is stopped, not waited for.
            for task in list(handlers):
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
    finally:
        server.close()
