"""Codemode: the model writes one JavaScript script, and the script calls tools.

A script runs in a fresh QuickJS VM in a worker process of its own (`codemode_worker`), and calls
`await tools.<name>(args)` over a line-by-line JSON bridge to this host (`codemode_protocol`). Each
nested call goes through the checkpoint 06 / 15 execution path with the script's scope, and leaves only
a bounded record on the parent result. The `codemode` tool itself is model-only: a script cannot nest it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGSEGV
from typing import Any, Literal, TypeAlias

from .agent_loop import ToolExecutor
from .codemode_protocol import (
    CodemodeToolInfo,
    CodemodeWorkerData,
    HostToWorkerMessage,
    WorkerToHostMessage,
    WorkerToHostMessageCall,
    WorkerToHostMessageCrash,
    WorkerToHostMessageDone,
    WorkerToHostMessageOutput,
    compact_json,
    encode_message,
    parse_worker_to_host_message,
)
from .messages import AbortController, AbortSignal, TextContent, ToolCall, ToolResultMessage, text, text_of
from .tool import Tool, ToolContext, ToolOutput, ToolRegistry, object_schema, string_value
from .tool import execute_tool_call as execute_core_tool_call

# ## Lab 16.1 · the sandbox: a QuickJS VM in a worker process, and the message bridge


@dataclass
class CodemodeToolContext:
    """What a script tool knows about its call: a signal that fires when the execution ends first."""

    signal: AbortSignal


#: The host side of `tools.<name>(args)`. `args` is the script's argument after a JSON round trip (None
#: for undefined); the return value must be JSON-serializable; an exception becomes an Error with the
#: same message in the script.
CodemodeToolFunction: TypeAlias = Callable[[object, CodemodeToolContext], Awaitable[object]]


@dataclass
class CodemodeScriptTool:
    """One entry of a script's tool table."""

    execute: CodemodeToolFunction
    description: str | None = None


CodemodeCallStatus: TypeAlias = Literal["ok", "error", "cancelled"]


@dataclass
class CodemodeCall:
    """One `tools.<name>(...)` call of a script, as the execution saw it end."""

    name: str
    status: CodemodeCallStatus

    def to_dict(self) -> dict[str, Any]:
        """The course's shape."""
        return {"name": self.name, "status": self.status}


#: `script`: the script threw or could not be parsed (name and stack are the script's error's).
#: `timeout`: the deadline passed and the worker was killed. `aborted`: the caller's signal fired and
#: the worker was killed. `sandbox`: the worker or the VM failed outside the script's control.
CodemodeErrorKind: TypeAlias = Literal["script", "timeout", "aborted", "sandbox"]


@dataclass
class CodemodeError:
    """Why an execution failed."""

    kind: CodemodeErrorKind
    message: str
    name: str | None = None
    stack: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The course's shape, leaving out what it leaves undefined."""
        wire: dict[str, Any] = {"kind": self.kind}
        if self.name is not None:
            wire["name"] = self.name
        wire["message"] = self.message
        if self.stack is not None:
            wire["stack"] = self.stack
        return wire


@dataclass
class CodemodeScriptSuccess:
    """The script returned: `value` is its return value after JSON (None for undefined and for null)."""

    value: object
    output: list[str]
    calls: list[CodemodeCall]
    ok: Literal[True] = True

    def to_dict(self) -> dict[str, Any]:
        """The course's shape."""
        calls = [record.to_dict() for record in self.calls]
        return {"ok": True, "value": self.value, "output": list(self.output), "calls": calls}


@dataclass
class CodemodeScriptFailure:
    """The execution failed; `output` and `calls` are kept up to the failure."""

    error: CodemodeError
    output: list[str]
    calls: list[CodemodeCall]
    ok: Literal[False] = False

    def to_dict(self) -> dict[str, Any]:
        """The course's shape."""
        calls = [record.to_dict() for record in self.calls]
        return {"ok": False, "error": self.error.to_dict(), "output": list(self.output), "calls": calls}


CodemodeScriptResult: TypeAlias = CodemodeScriptSuccess | CodemodeScriptFailure

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MEMORY_LIMIT_BYTES = 64 * 1024 * 1024
#: The longest protocol line the host reads: a console line at the output cap, escaped, fits.
MAX_LINE_BYTES = 128 * 1024 * 1024
#: How much of the worker's stdout the host reads at a time.
READ_CHUNK_BYTES = 1024 * 1024


def _message_of(error: BaseException) -> str:
    """An exception's message, or its class name where that is empty (as 06's executor does)."""
    return str(error) or type(error).__name__


def _js_number(value: float) -> str:
    """A number as JavaScript prints it: `200`, not `200.0`."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def worker_command() -> list[str]:
    """The command line of one worker: this interpreter, loading this very package's worker module.

    The package is registered without running its `__init__` (which imports every checkpoint's
    modules): the worker needs only itself and the protocol, and starts several times faster so.
    """
    package = __name__.rpartition(".")[0]
    folder = str(Path(__file__).resolve().parent)
    bootstrap = (
        f"import sys, types; package = types.ModuleType({package!r}); package.__path__ = [{folder!r}]; "
        f"sys.modules[{package!r}] = package; "
        f"from {package}.codemode_worker import worker_main; worker_main()"
    )
    return [sys.executable, "-c", bootstrap]


class WorkerProcess:
    """One worker process, its stdin and stdout as streams of the running event loop."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        reading: asyncio.BaseTransport,
    ) -> None:
        self._popen = popen
        self.stdin = stdin
        self.stdout = stdout
        self._reading = reading

    @property
    def returncode(self) -> int | None:
        """The exit status, None while it runs (negative: the signal that ended it)."""
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait until the process has ended; its exit status."""
        while (code := self._popen.poll()) is None:
            await asyncio.sleep(0.005)
        return code

    async def end(self) -> None:
        """Kill the process if it still runs, close both pipes, and wait for it."""
        if self._popen.poll() is None:
            self._popen.kill()
        self.stdin.close()
        self._reading.close()
        await self.wait()


# The next worker, started ahead of need: an interpreter takes 100-250 ms to start and import quickjs,
# longer than the course's shortest deadline. It is a plain process, bound to no event loop, and still
# serves one execution only. A fork of this process (a grading fork server) does not inherit it.
_spare: tuple[list[str], subprocess.Popen[bytes]] | None = None


def _spawn(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _discard_spare() -> None:
    global _spare
    if _spare is not None:
        popen = _spare[1]
        _spare = None
        popen.kill()
        popen.wait()
        for pipe in (popen.stdin, popen.stdout):
            if pipe is not None:
                pipe.close()


def _forget_spare_in_child() -> None:
    global _spare
    if _spare is not None:
        for pipe in (_spare[1].stdin, _spare[1].stdout):
            if pipe is not None:
                pipe.close()
        _spare = None


atexit.register(_discard_spare)
os.register_at_fork(after_in_child=_forget_spare_in_child)


async def start_worker() -> WorkerProcess:
    """A fresh worker process for one execution (the one started ahead when it is ready), its pipes on
    the running loop; then the next one is started ahead. Raises OSError when no process can start."""
    global _spare
    command = worker_command()
    popen = None
    if _spare is not None:
        if _spare[0] == command and _spare[1].poll() is None:
            popen = _spare[1]
            _spare = None
        else:
            _discard_spare()
    if popen is None:
        popen = _spawn(command)
    with contextlib.suppress(OSError):  # the next execution starts its own worker, or reports why not
        _spare = (command, _spawn(command))
    assert popen.stdin is not None and popen.stdout is not None
    loop = asyncio.get_running_loop()
    stdout = asyncio.StreamReader(limit=READ_CHUNK_BYTES, loop=loop)
    try:
        reading, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), popen.stdout)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, popen.stdin)
    except BaseException:  # cancelled meanwhile, say: the process is nobody's, so it ends here
        popen.kill()
        popen.wait()
        raise
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return WorkerProcess(popen, stdin, stdout, reading)


@dataclass
class PendingCall:
    """A tool call the host is still running for the script."""

    record: CodemodeCall
    controller: AbortController


class Execution:
    """One execution = one worker process + one VM.

    A fresh worker every time makes ending simple: a runaway script (one spinning in its promise queue
    too) is killed with its process and cannot leave anything behind for the next execution.
    """

    def __init__(
        self,
        code: str,
        *,
        tools: Mapping[str, CodemodeScriptTool],
        timeout_ms: float,
        memory_limit_bytes: int | None,
        signal: AbortSignal | None,
    ) -> None:
        self.code = code
        self.tools = tools
        self.timeout_ms = timeout_ms
        self.memory_limit_bytes = memory_limit_bytes
        self.signal = signal
        self.output: list[str] = []
        self.calls: list[CodemodeCall] = []
        self.pending: dict[int, PendingCall] = {}
        self.process: WorkerProcess | None = None
        self._error: CodemodeError | None = None
        self._value: object = None
        self._fault: BaseException | None = None
        self._finished = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._abort_listener = self._delivered(self._on_abort)

    async def run(self) -> CodemodeScriptResult:
        """Watch the signal and the deadline, start the worker, wait for the first ending, then close."""
        try:
            if self.signal is not None:
                self._watch_signal(self.signal)
            if math.isfinite(self.timeout_ms):
                # Infinity: only the script's end or the caller's signal ends the execution.
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self.timeout_ms / 1000, self._delivered(self._on_deadline))
            if not self._finished.is_set():
                await self._start()
            await self._finished.wait()
        finally:
            await self._close()
        if self._fault is not None:
            raise self._fault
        if self._error is not None:
            return CodemodeScriptFailure(error=self._error, output=self.output, calls=self.calls)
        return CodemodeScriptSuccess(value=self._value, output=self.output, calls=self.calls)

    def _delivered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """`callback` for a timer or a listener: an exception in it reaches the caller of run()."""

        def deliver() -> None:
            try:
                callback()
            except Exception as error:
                self._fail(error)

        return deliver

    def _fail(self, error: BaseException) -> None:
        """End the execution with a fault of the host's own code, raised again from run().

        A fault after the execution has settled changes nothing: its result stands.
        """
        if self._finished.is_set():
            return
        self._fault = error
        self._finish(CodemodeError(kind="sandbox", message=_message_of(error)))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a task of this execution; its failure reaches the caller of run()."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and (error := task.exception()) is not None:
                self._fail(error)

        task.add_done_callback(done)

    async def _start(self) -> None:
        """Start the worker process, send it the execution's data, and read its messages."""
        # BEGIN LAB 16.1
        data = CodemodeWorkerData(
            code=self.code,
            tools=[
                CodemodeToolInfo(name=name, description=tool.description or "")
                for name, tool in self.tools.items()
            ],
            memory_limit_bytes=self.memory_limit_bytes,
        )
        try:
            process = await start_worker()
        except OSError as error:
            self._finish(
                CodemodeError(kind="sandbox", message=f"Failed to start worker: {_message_of(error)}")
            )
            return
        self.process = process
        if self._finished.is_set():
            return  # the deadline or the signal came while the process was starting: _close ends it
        await self.post_line(encode_message(data))
        self.spawn(self._read())
        # END LAB 16.1

    async def _read(self) -> None:
        """Hand every line the worker writes to `_handle_message`, until it ends or we finish.

        The stream is read in chunks and split here: a script that prints in a loop writes many small
        lines, and one await per chunk instead of per line keeps the host far ahead of it.
        """
        assert self.process is not None
        pending = bytearray()
        while not self._finished.is_set():
            chunk = await self.process.stdout.read(READ_CHUNK_BYTES)
            if not chunk:
                self._finish(_exit_error(await self.process.wait(), self.memory_limit_bytes))
                return
            pending += chunk
            end = pending.rfind(b"\n")
            if end < 0:
                if len(pending) > MAX_LINE_BYTES:
                    self._finish(CodemodeError(kind="sandbox", message="Worker wrote a line past the limit"))
                continue
            complete, pending = bytes(pending[: end + 1]), pending[end + 1 :]
            for line in complete.splitlines():
                message = parse_worker_to_host_message(line)
                if message is not None:
                    self._handle_message(message)

    async def post_line(self, line: bytes) -> None:
        """Write one protocol line to the worker; a worker already gone is not an error here."""
        if self.process is None:
            return
        try:
            self.process.stdin.write(line)
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # its exit is reported by _read

    def _handle_message(self, message: WorkerToHostMessage) -> None:
        """Dispatch one message of the worker (given)."""
        if self._finished.is_set():
            return
        if isinstance(message, WorkerToHostMessageOutput):
            self.output.append(message.text)
        elif isinstance(message, WorkerToHostMessageCall):
            self.spawn(self._handle_call(message))
        elif isinstance(message, WorkerToHostMessageDone):
            if message.ok:
                try:
                    value = None if message.value is None else json.loads(message.value)
                except ValueError:
                    self._finish(
                        CodemodeError(kind="sandbox", message="Worker sent a value that is not JSON")
                    )
                    return
                self._finish(None, value)
            else:
                self._finish(_script_error(message.error or "{}"))
        elif isinstance(message, WorkerToHostMessageCrash):
            self._finish(CodemodeError(kind="sandbox", message=message.message))

    async def _handle_call(self, message: WorkerToHostMessageCall) -> None:
        """Run one tool call of the script and send its result or its error back to the worker."""
        # BEGIN LAB 16.1
        # Recorded as cancelled until it settles: an execution that ends first leaves it so.
        record = CodemodeCall(name=message.name, status="cancelled")
        self.calls.append(record)
        pending = PendingCall(record=record, controller=AbortController())
        self.pending[message.id] = pending
        status: CodemodeCallStatus
        try:
            tool = self.tools.get(message.name)
            if tool is None:
                raise LookupError(f'Unknown tool "{message.name}"')
            args = None if message.args is None else json.loads(message.args)
            value = await tool.execute(args, CodemodeToolContext(signal=pending.controller.signal))
            payload = None if value is None else compact_json(value)
            reply = HostToWorkerMessage(id=message.id, ok=True, payload=payload)
            status = "ok"
        except Exception as error:
            reply = HostToWorkerMessage(id=message.id, ok=False, payload=_message_of(error))
            status = "error"
        if self.pending.pop(message.id, None) is None:
            return  # the execution finished first: the record stays cancelled, the worker is going
        record.status = status
        await self.post_line(encode_message(reply))
        # END LAB 16.1

    def _finish(self, error: CodemodeError | None, value: object = None) -> None:
        """Settle the execution once: keep the first ending, and abort every pending tool call."""
        if self._finished.is_set():
            return
        self._error = error
        self._value = value
        self._finished.set()
        pending = list(self.pending.values())
        self.pending.clear()
        for call in pending:
            call.controller.abort()

    async def _close(self) -> None:
        """Stop the deadline and the listener, kill the worker, and end the tool calls still running."""
        self._finish(CodemodeError(kind="sandbox", message="Execution ended before it settled"))
        if self._timer is not None:
            self._timer.cancel()
        if self.signal is not None:
            self.signal.remove_event_listener("abort", self._abort_listener)
        if self.process is not None:
            await self.process.end()
        # Their signals fired in _finish; what has not ended by now is cancelled, and awaited.
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ## Lab 16.3 · the deadline and the caller's signal

    def _on_deadline(self) -> None:
        """The deadline passed: the execution fails as a timeout."""
        # BEGIN LAB 16.3
        self._finish(
            CodemodeError(
                kind="timeout", message=f"Execution timed out after {_js_number(self.timeout_ms)} ms"
            )
        )
        # END LAB 16.3

    def _watch_signal(self, signal: AbortSignal) -> None:
        """Abort at once for a signal that already fired, else listen for it."""
        # BEGIN LAB 16.3
        if signal.aborted:
            self._abort_listener()
        else:
            signal.add_event_listener("abort", self._abort_listener)
        # END LAB 16.3

    def _on_abort(self) -> None:
        """The caller's signal fired: the execution fails as aborted, with the reason's message."""
        # BEGIN LAB 16.3
        reason = self.signal.reason if self.signal is not None else None
        message = str(reason) if isinstance(reason, BaseException) else "Execution aborted"
        self._finish(CodemodeError(kind="aborted", message=message))
        # END LAB 16.3


# ## Lab 16.1 · one script, one execution (continued)


def _exit_error(code: int, memory_limit_bytes: int | None) -> CodemodeError:
    """Why a worker that ended before the script settled failed (given).

    The binding's QuickJS can crash inside its own out-of-memory path, while it adds a stack to the
    error it is throwing. Under a memory limit that crash is the script running out of memory, and it is
    reported as the course reports out of memory: a script error.
    """
    if code == -SIGSEGV and memory_limit_bytes is not None:
        return CodemodeError(
            kind="script", message="out of memory", name="InternalError", stack="InternalError: out of memory"
        )
    return CodemodeError(kind="sandbox", message=f"Worker exited with code {code} before the script settled")


def _script_error(error_json: str) -> CodemodeError:
    """The script's own error, from the worker's `{name?, message, stack?}` JSON (given)."""
    try:
        wire = json.loads(error_json)
    except ValueError:
        wire = {}
    if not isinstance(wire, dict):
        wire = {}
    name, message, stack = wire.get("name"), wire.get("message"), wire.get("stack")
    return CodemodeError(
        kind="script",
        message=message if isinstance(message, str) else "",
        name=name if isinstance(name, str) else None,
        stack=stack if isinstance(stack, str) else None,
    )


async def run_codemode_script(
    code: str,
    *,
    tools: Mapping[str, CodemodeScriptTool] | None = None,
    timeout_ms: float = DEFAULT_TIMEOUT_MS,
    memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT_BYTES,
    signal: AbortSignal | None = None,
) -> CodemodeScriptResult:
    """Run a piece of JavaScript in a QuickJS VM in a worker process of its own.

    The script sees `tools.<name>(args)` for each tool, `ALL_TOOLS` and `console.*`, and nothing else:
    no timers, no fetch, no modules, no process. A failing script does not raise: it is an
    `ok=False` result. `timeout_ms` is the deadline of the whole execution, tools included.
    """
    execution = Execution(
        code,
        tools=tools if tools is not None else {},
        timeout_ms=timeout_ms,
        memory_limit_bytes=memory_limit_bytes,
        signal=signal,
    )
    return await execution.run()


# ## Lab 16.2 · nested calls: through the 06 / 15 execution path, with a bounded record


NestedCallStatus: TypeAlias = Literal["running", "ok", "error", "cancelled"]


@dataclass
class NestedCallRecord:
    """What one nested call leaves on the parent result: never its result, only how it went.

    `arguments` is a JSON copy of the call's arguments; past the limits it is left out and only
    `arguments_bytes` is kept. `error` is the start of the failure's message.
    """

    id: str
    name: str
    status: NestedCallStatus
    arguments: object = None
    arguments_bytes: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The course's shape, leaving out what it leaves undefined."""
        wire: dict[str, Any] = {"id": self.id, "name": self.name, "status": self.status}
        if self.arguments is not None:
            wire["arguments"] = copy.deepcopy(self.arguments)
        if self.arguments_bytes is not None:
            wire["argumentsBytes"] = self.arguments_bytes
        if self.error is not None:
            wire["error"] = self.error
        return wire


@dataclass(frozen=True)
class NestedCallLimits:
    """How much the record keeps. Calls past `max_calls` still run; they are only counted."""

    max_calls: int = 256
    max_argument_bytes_per_call: int = 8 * 1024
    max_argument_bytes_total: int = 32 * 1024
    max_error_chars: int = 500


NESTED_CALL_LIMITS = NestedCallLimits()


@dataclass
class NestedCalls:
    """The nested calls on a parent result: `complete` is False when a record was left out or cut."""

    calls: list[NestedCallRecord]
    count: int
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        """The course's shape."""
        return {
            "calls": [record.to_dict() for record in self.calls],
            "count": self.count,
            "complete": self.complete,
        }


class NestedCallLog:
    """The bounded record of one parent call's nested calls."""

    def __init__(self, limits: NestedCallLimits = NESTED_CALL_LIMITS) -> None:
        self.limits = limits
        self.records: list[NestedCallRecord] = []
        self.count = 0
        self.complete = True
        self.argument_bytes = 0

    def start(self, call: ToolCall) -> NestedCallRecord | None:
        """Count a call and record it as running; None when the record is already full."""
        # BEGIN LAB 16.2
        self.count += 1
        if len(self.records) >= self.limits.max_calls:
            self.complete = False
            return None
        record = NestedCallRecord(id=call.id, name=call.name, status="running")
        encoded = compact_json(call.arguments if call.arguments is not None else {})
        size = len(encoded.encode("utf-8"))
        over_total = self.argument_bytes + size > self.limits.max_argument_bytes_total
        if size > self.limits.max_argument_bytes_per_call or over_total:
            record.arguments_bytes = size
            self.complete = False
        else:
            record.arguments = json.loads(encoded)
            self.argument_bytes += size
        self.records.append(record)
        return record
        # END LAB 16.2

    def settle(
        self, record: NestedCallRecord | None, status: NestedCallStatus, error: str | None = None
    ) -> None:
        """Record how a call ended, with the start of its error; a call left unrecorded is skipped."""
        # BEGIN LAB 16.2
        if record is None:
            return
        record.status = status
        if error is not None:
            record.error = error[: self.limits.max_error_chars]
        # END LAB 16.2

    def snapshot(self) -> NestedCalls:
        """A copy of the record so far (given)."""
        return NestedCalls(calls=copy.deepcopy(self.records), count=self.count, complete=self.complete)


@dataclass
class NestedToolBridge:
    """The script's tool table for `run_codemode_script`, and the record its calls leave."""

    #: One entry per tool of the registry's callable set.
    tools: dict[str, CodemodeScriptTool]
    log: NestedCallLog = field(default_factory=NestedCallLog)

    def nested_calls(self) -> NestedCalls:
        """The record so far."""
        return self.log.snapshot()


def _json_ready(value: object) -> object:
    """Details as JSON can carry them: a `to_dict()` where the value has one, a dataclass as a dict."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def linked_signal(*signals: AbortSignal | None) -> tuple[AbortSignal, Callable[[], None]]:
    """A signal that fires when any of `signals` does (AbortSignal.any), and a release for its listeners."""
    controller = AbortController()
    sources = [signal for signal in signals if signal is not None]

    def forward() -> None:
        fired = next((signal for signal in sources if signal.aborted), None)
        controller.abort(fired.reason if fired is not None else None)

    for signal in sources:
        if signal.aborted:
            forward()
            break
        signal.add_event_listener("abort", forward)

    def release() -> None:
        for signal in sources:
            signal.remove_event_listener("abort", forward)

    return controller.signal, release


def create_nested_tool_bridge(
    registry: ToolRegistry,
    parent_call_id: str,
    *,
    signal: AbortSignal | None = None,
    limits: NestedCallLimits | None = None,
    execute_tool_call: ToolExecutor | None = None,
) -> NestedToolBridge:
    """Turn the registry's callable set into a script's tool table.

    Every script call becomes a ToolCall with the id `<parent>/<n>` and goes through
    `execute_tool_call(call, registry, signal=..., scope="script")` (or the executor given, such as 12's
    extension host around it); an `is_error` result becomes an exception in the script. The script gets
    `{"text": ..., "details": ...}`. Nested calls never enter the transcript: they leave a bounded record.
    """
    # BEGIN LAB 16.2
    log = NestedCallLog(limits if limits is not None else NESTED_CALL_LIMITS)

    def core(
        call: ToolCall,
        *,
        signal: AbortSignal | None = None,
        report_progress: Callable[[list[TextContent]], None] | None = None,
    ) -> Awaitable[ToolResultMessage]:
        return execute_core_tool_call(
            call, registry, signal=signal, report_progress=report_progress, scope="script"
        )

    execute: ToolExecutor = execute_tool_call if execute_tool_call is not None else core

    def script_tool(name: str) -> CodemodeToolFunction:
        async def run(args: object, context: CodemodeToolContext) -> object:
            call = ToolCall(id=f"{parent_call_id}/{log.count + 1}", name=name, arguments=args)
            record = log.start(call)
            linked, release = linked_signal(signal, context.signal)
            try:
                result = await execute(call, signal=linked)
            except asyncio.CancelledError:
                log.settle(record, "cancelled")
                raise
            except Exception as error:
                log.settle(record, "cancelled" if linked.aborted else "error", _message_of(error))
                raise
            finally:
                release()
            if result.is_error:
                message = text_of(result)
                log.settle(record, "cancelled" if linked.aborted else "error", message)
                raise RuntimeError(message)
            log.settle(record, "ok")
            value: dict[str, object] = {"text": text_of(result)}
            if result.details is not None:
                value["details"] = _json_ready(result.details)
            return value

        return run

    tools = {
        tool.name: CodemodeScriptTool(execute=script_tool(tool.name), description=tool.description)
        for tool in registry.callable()
    }
    return NestedToolBridge(tools=tools, log=log)
    # END LAB 16.2


# ## Lab 16.4 · the codemode tool: model-only, its one argument is a script

CODEMODE_TOOL_NAME = "codemode"


@dataclass
class CodemodeToolDetails:
    """The details of a codemode result: how the script ended, its output, and its nested calls."""

    ok: bool
    output: list[str]
    nested_calls: NestedCalls
    error: CodemodeError | None = None

    def to_dict(self) -> dict[str, Any]:
        """The course's shape (`error` only on failure, with its kind and message)."""
        wire: dict[str, Any] = {"ok": self.ok}
        if self.error is not None:
            wire["error"] = {"kind": self.error.kind, "message": self.error.message}
        wire["output"] = list(self.output)
        wire["nestedCalls"] = self.nested_calls.to_dict()
        return wire


def describe_tools(registry: ToolRegistry) -> str:
    """One line per callable tool: `- tools.<name>(args): <first line of its description>` (given)."""
    lines = []
    for tool in registry.callable():
        first = re.split(r"\r?\n", tool.description.strip())[0]
        lines.append(f"- tools.{tool.name}(args): {first}")
    return "\n".join(lines)


def codemode_output(
    result: CodemodeScriptResult, nested_calls: NestedCalls
) -> ToolOutput[CodemodeToolDetails]:
    """What the model reads: the returned value's JSON on success; on failure the error, as is_error."""
    # BEGIN LAB 16.4
    if isinstance(result, CodemodeScriptSuccess):
        return ToolOutput(
            content=[text(compact_json(result.value))],
            details=CodemodeToolDetails(ok=True, output=result.output, nested_calls=nested_calls),
        )
    error = result.error
    if error.kind == "script":
        summary = f"Script failed: {error.stack if error.stack is not None else error.message}"
    else:
        summary = f"Script {error.kind}: {error.message}"
    return ToolOutput(
        content=[text(summary)],
        details=CodemodeToolDetails(
            ok=False,
            output=result.output,
            nested_calls=nested_calls,
            error=CodemodeError(kind=error.kind, message=error.message),
        ),
        is_error=True,
    )
    # END LAB 16.4


def create_codemode_tool(
    registry: ToolRegistry,
    *,
    timeout_ms: float = DEFAULT_TIMEOUT_MS,
    memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT_BYTES,
    limits: NestedCallLimits | None = None,
    execute_tool_call: ToolExecutor | None = None,
) -> Tool[dict[str, Any], CodemodeToolDetails]:
    """The `codemode` tool, model-only: the model writes a script that calls the callable set.

    Inside, `await tools.<name>(args)` reaches every callable tool, codemode and deferred ones that were
    never declared included, and the returned value goes back to the model. Each call is a fresh worker.
    """

    # BEGIN LAB 16.4
    async def execute(params: dict[str, Any], context: ToolContext) -> ToolOutput[CodemodeToolDetails]:
        bridge = create_nested_tool_bridge(
            registry,
            context.call_id,
            signal=context.signal,
            limits=limits,
            execute_tool_call=execute_tool_call,
        )
        result = await run_codemode_script(
            params["code"],
            tools=bridge.tools,
            timeout_ms=timeout_ms,
            memory_limit_bytes=memory_limit_bytes,
            signal=context.signal,
        )
        return codemode_output(result, bridge.nested_calls())

    description = "\n".join(
        [
            "Run a JavaScript async function body in a sandbox. Call tools with `await tools.<name>(args)`;",
            "each resolves to `{ text, details? }` or throws on error. `return` a JSON value as the result.",
            "There are no timers, fetch, or modules. Callable tools:",
            describe_tools(registry),
        ]
    )
    return Tool(
        name=CODEMODE_TOOL_NAME,
        description=description,
        schema=object_schema({"code": string_value}),
        execute=execute,
        exposure="model-only",
    )
    # END LAB 16.4
