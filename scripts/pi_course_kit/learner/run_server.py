"""The offline model of `pi-course run`: a local OpenAI-compatible server that replays a recorded session.

With no endpoint configured, `pi-course run` still goes through the learner's own transport, SSE decoder
and adapter: this server answers each `POST …/chat/completions` with the next recorded reply, streamed
the way a provider streams it (text in pieces, a tool call's arguments split across chunks, the usage,
then `[DONE]`). It is the standard library's `ThreadingHTTPServer` on 127.0.0.1 in a thread of the kit's
process: a learner's machine needs nothing else, and no library for mock OpenAI servers is both kept up
and able to split a tool call's arguments at a chosen place.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class RecordedReply:
    """One reply of the recorded model: text, or tool calls (name and arguments)."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


def sse(payload: object) -> bytes:
    """One SSE event: `data: <payload>` and a blank line (a string as is, anything else as JSON)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def stream_events(reply: RecordedReply, number: int) -> list[bytes]:
    """The SSE events of one reply, as a provider streams them."""
    events: list[bytes] = [sse(_chunk({"role": "assistant"}))]
    if reply.calls:
        for index, (name, arguments) in enumerate(reply.calls):
            text = json.dumps(arguments, ensure_ascii=False)
            middle = len(text) // 2
            head = {"index": index, "id": f"call_{number}_{index}", "type": "function"}
            events.append(
                sse(_chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
            )
            for piece in (text[:middle], text[middle:]):
                events.append(
                    sse(_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
                )
        finish = "tool_calls"
    else:
        words = reply.text
        cut = max(1, len(words) // 3)
        for piece in (words[:cut], words[cut : 2 * cut], words[2 * cut :]):
            if piece:
                events.append(sse(_chunk({"content": piece})))
        finish = "stop"
    events.append(sse(_chunk({}, finish)))
    events.append(
        sse({"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
    )
    events.append(sse("[DONE]"))
    return events


@dataclass
class ReplayServer:
    """A running replay server: its base URL and the replies still to give."""

    replies: list[RecordedReply]
    served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def next_reply(self) -> tuple[RecordedReply, int]:
        """The next recorded reply; once they are used up, the last one again (a text, never a tool call)."""
        with self.lock:
            self.served += 1
            if self.replies and self.served <= len(self.replies):
                return self.replies[self.served - 1], self.served
            last = self.replies[-1] if self.replies else RecordedReply(text="")
            return (last if not last.calls else RecordedReply(text="")), self.served


def _handler(server: ReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self.send_error(404)
                return
            reply, number = server.next_reply()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in stream_events(reply, number):
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the learner's terminal shows the run, not the server's access log."""

    return Handler


class replaying:
    """`with replaying(replies) as server:` a replay server on a free port of 127.0.0.1 for the block."""

    def __init__(self, replies: Sequence[RecordedReply]) -> None:
        self.server = ReplayServer(list(replies))
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.server))
        self._http.daemon_threads = True
        self.server.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self.server

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


def recorded_replies(entries: Sequence[Any]) -> Iterator[RecordedReply]:
    """The replies of course.toml's `[[run.offline_coding]]` (text or calls) or `offline_chat` (strings)."""
    for entry in entries:
        if isinstance(entry, str):
            yield RecordedReply(text=entry)
        else:
            calls = tuple((call["name"], dict(call.get("arguments", {}))) for call in entry.get("calls", ()))
            yield RecordedReply(text=str(entry.get("text", "")), calls=calls)
