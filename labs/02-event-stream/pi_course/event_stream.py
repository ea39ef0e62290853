"""Model time made explicit: events are pushed in, read out in order, and end in one final result."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from .lab import LabNotImplemented

T = TypeVar("T")
R = TypeVar("R")


class EventStream(Generic[T, R]):
    """A push-based queue of events that a reader iterates, plus a final result it can await.

    A producer calls `push` (and at last `end`) without waiting; a reader does `async for` and
    `await stream.result()`. An event pushed before anyone reads waits in the queue; a reader that
    is already waiting is woken by the next push. `is_complete` marks the terminal event, whose
    `extract_result` becomes the result. The stream is its own iterator: every `async for` over it
    takes from the same queue, so two readers share the events instead of each getting a copy.
    """

    # The state every method shares; __init__ (Lab 2.1) gives each field its starting value.
    _is_complete: Callable[[T], bool]
    _extract_result: Callable[[T], R]
    #: Events that arrived before anyone asked for them.
    _queue: deque[T]
    #: One future per reader waiting for its next event; (True, None) tells it the stream ended.
    _waiting: deque[asyncio.Future[tuple[bool, T | None]]]
    #: Set by the terminal event or by `end`: no later push is accepted.
    _done: bool
    #: The one final result, once known, and the `result()` callers still waiting for it.
    _has_result: bool
    _result: R | None
    _result_waiters: list[asyncio.Future[R]]

    # ## Lab 2.1 · push, the queue and the result

    def __init__(self, is_complete: Callable[[T], bool], extract_result: Callable[[T], R]) -> None:
        """Remember how to recognise the terminal event and read the result from it; start empty."""
        raise LabNotImplemented("2.1", "EventStream")

    def push(self, event: T) -> None:
        """Deliver one event; after the terminal event (or `end`) further pushes are ignored."""
        raise LabNotImplemented("2.1", "EventStream.push")

    async def result(self) -> R:
        """The final result, once the terminal event (or `end`) has arrived."""
        raise LabNotImplemented("2.1", "EventStream.result")

    def __aiter__(self) -> EventStream[T, R]:
        return self

    async def __anext__(self) -> T:
        """The next event: first from the queue, then the end of iteration, else wait for a push."""
        raise LabNotImplemented("2.1", "EventStream.__anext__")

    # ## Lab 2.2 · a reader that waits, and end

    async def _wait_for_next(self) -> T:
        """Leave a future in `_waiting` and sleep on it until `push` hands it an event or `end` closes."""
        raise LabNotImplemented("2.2", "EventStream._wait_for_next")

    def end(self, result: R) -> None:
        """Close the stream: the result is `result` unless a terminal event already set one."""
        raise LabNotImplemented("2.2", "EventStream.end")

    # Helpers given to you: they touch only the futures, never the order of events.

    def _resolve(self, result: R) -> None:
        """Record the one final result and wake every `result()` caller waiting for it."""
        self._has_result, self._result = True, result
        waiters, self._result_waiters = self._result_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(result)

    def _next_waiter(self) -> asyncio.Future[tuple[bool, T | None]] | None:
        """The earliest reader still waiting, or None (a reader cancelled while waiting is skipped)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                return waiter
        return None
