"""The codemode worker process: one fresh QuickJS VM runs one script for its host.

The host starts this interpreter on `worker_main()` for every execution (`codemode.worker_command`,
one started ahead of need by `codemode.start_worker`), writes `CodemodeWorkerData` as the first line of the
worker's stdin and reads the worker's messages from its stdout (`codemode_protocol`). The worker passes tool
calls and `console.*` output on to the host and reports how the script settled. When the script ends, times
out or is cancelled, the host kills the process: a script spinning in the VM can never hold up the host's own
event loop.

Importing this module starts nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import BinaryIO, Protocol, cast

# One module import: the protocol's names read as protocol.X, which marks where each one is from.
from . import codemode_protocol as protocol


class JSFunction(Protocol):
    """A JavaScript function held by the VM, called from Python with strings, numbers, bools or None."""

    def __call__(self, *args: object) -> object: ...


class QuickJSVM:
    """The few calls of the `quickjs` binding that this worker makes, typed.

    The binding ships no type information, so everything it returns crosses into typed code here and
    nowhere else. It is imported when a VM is made, so that importing `pi_course` never needs it, and
    a worker without it reports the ImportError to its host as a crash.
    """

    def __init__(self, memory_limit_bytes: int | None = None) -> None:
        import quickjs  # type: ignore[import-untyped]  # the binding has no stubs: typed by this class

        self._context = quickjs.Context()
        self._memory_limit_bytes = memory_limit_bytes
        if memory_limit_bytes is not None:
            self._context.set_memory_limit(memory_limit_bytes)
        # The prelude takes this away before the script runs, and calls it before it reports the end.
        self._context.add_callable(protocol.HEADROOM_GLOBAL, self._headroom)

    def _headroom(self) -> None:
        """Raise the memory limit by a fixed amount (once): room to report how the script ended."""
        if self._memory_limit_bytes is not None:
            self._context.set_memory_limit(self._memory_limit_bytes + protocol.REPORT_HEADROOM_BYTES)

    @staticmethod
    def preload() -> None:
        """Import the binding now, so that a worker started ahead of need has it ready."""
        importlib.import_module("quickjs")

    def add_callable(self, name: str, function: Callable[..., None]) -> None:
        """Make a Python function callable from the VM as the global `name`."""
        self._context.add_callable(name, function)

    def function(self, source: str) -> JSFunction:
        """Evaluate `source`, an expression whose value is a function, and keep that function."""
        value = self._context.eval(source)
        if not callable(value):
            raise TypeError("the source does not evaluate to a function")
        return cast(JSFunction, value)

    def run_pending_jobs(self) -> None:
        """Run the VM's job queue (promise reactions) until it is empty."""
        while self._context.execute_pending_job():
            pass


class Outgoing:
    """The worker's side of the protocol: one message a line, each written whole and flushed."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def post(self, message: protocol.WorkerToHostMessage) -> None:
        """Send one message to the host."""
        self._stream.write(protocol.encode_message(message))
        self._stream.flush()


def error_line(error: BaseException) -> str:
    """`Name: message`, the way a crash is reported to the host."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


# ## Lab 16.1 · the worker: one fresh VM runs one script


def run_worker(data: protocol.CodemodeWorkerData, incoming: Iterable[bytes], outgoing: Outgoing) -> None:
    """Run `data.code` in a fresh VM; settle its tool calls from `incoming` until the host closes it.

    After each step (the start, and every settled call) the VM's job queue is drained and the prelude is
    asked whether the script now waits on nothing at all: that is the "stalled" failure.
    """
    # BEGIN LAB 16.1
    vm = QuickJSVM(data.memory_limit_bytes)
    failures: list[BaseException] = []

    def bridge(kind: object, first: object = None, second: object = None, third: object = None) -> None:
        # Called from inside the VM: an exception must never cross back into the engine.
        try:
            if kind == "call":
                args = third if isinstance(third, str) else None
                outgoing.post(
                    protocol.WorkerToHostMessageCall(id=int(cast(int, first)), name=str(second), args=args)
                )
            elif kind == "output":
                outgoing.post(protocol.WorkerToHostMessageOutput(text=str(first)))
            elif kind == "done":
                if first is True:
                    value = second if isinstance(second, str) else None
                    outgoing.post(protocol.WorkerToHostMessageDone(ok=True, value=value))
                else:
                    outgoing.post(protocol.WorkerToHostMessageDone(ok=False, error=str(second)))
        except BaseException as error:  # reported by the loop below, outside the VM
            failures.append(error)

    vm.add_callable(protocol.BRIDGE_GLOBAL, bridge)
    # The prelude takes the bridge away from the global object before the script can see it.
    name = protocol.BRIDGE_GLOBAL
    tools_json = protocol.compact_json([tool.to_dict() for tool in data.tools])
    control = vm.function(
        f"(() => {{ const bridge = globalThis.{name}; delete globalThis.{name};"
        f" return ({protocol.PRELUDE_SOURCE})(bridge, {protocol.compact_json(tools_json)}); }})()"
    )

    def drain() -> None:
        vm.run_pending_jobs()
        control("stalled")
        if failures:
            raise failures[0]

    control("run", data.code)
    drain()
    for line in incoming:
        message = protocol.parse_host_to_worker_message(line)
        if message is None:
            continue
        control("settle", message.id, message.ok, message.payload)
        drain()
    # END LAB 16.1


def worker_main() -> None:
    """The worker process: read the data line, run the script, report any failure as a crash."""
    # The protocol owns the real stdout; anything else that writes to fd 1 goes to stderr instead,
    # so that nothing can break a line of the protocol.
    outgoing = Outgoing(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    incoming = sys.stdin.buffer
    try:
        QuickJSVM.preload()  # before the host's data arrives: a worker is started ahead of need
        data = protocol.parse_codemode_worker_data(incoming.readline())
        if data is None:
            raise ValueError("the first line is not CodemodeWorkerData")
        run_worker(data, incoming, outgoing)
    except BaseException as error:  # a worker reports every failure, then ends
        with contextlib.suppress(OSError):  # the host has gone: nobody is left to tell
            outgoing.post(protocol.WorkerToHostMessageCrash(message=error_line(error)))
