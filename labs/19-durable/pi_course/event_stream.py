"""Model time made explicit: events are pushed in, read out in order, and end in one final result."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from .messages import AssistantMessage, ModelDone, ModelError, ModelEvent

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

    def __init__(self, is_complete: Callable[[T], bool], extract_result: Callable[[T], R]) -> None:
        """Remember how to recognise the terminal event and read the result from it; start empty."""
        self._is_complete = is_complete
        self._extract_result = extract_result
        # Events that arrived before anyone asked for them.
        self._queue: deque[T] = deque()
        # One future per reader waiting for its next event; (True, None) tells it the stream ended.
        self._waiting: deque[asyncio.Future[tuple[bool, T | None]]] = deque()
        self._done = False
        self._has_result = False
        self._result: R | None = None
        self._result_waiters: list[asyncio.Future[R]] = []

    def push(self, event: T) -> None:
        """Deliver one event; after the terminal event (or `end`) further pushes are ignored."""
        if self._done:
            return
        if self._is_complete(event):
            self._done = True
            self._resolve(self._extract_result(event))
        # The terminal event itself is still delivered: `done` only stops the pushes after it.
        # A reader already waiting takes the event directly; only when nobody waits does it queue.
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result((False, event))
        else:
            self._queue.append(event)

    async def result(self) -> R:
        """The final result, once the terminal event (or `end`) has arrived."""
        if self._has_result:
            return self._result  # type: ignore[return-value]  # set together with _has_result
        waiter: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._result_waiters.append(waiter)
        return await waiter

    def __aiter__(self) -> EventStream[T, R]:
        return self

    async def __anext__(self) -> T:
        """The next event: first from the queue, then the end of iteration, else wait for a push."""
        # The queue comes first: a terminal event may already be queued while `done` is set.
        if self._queue:
            return self._queue.popleft()
        if self._done:
            raise StopAsyncIteration
        return await self._wait_for_next()

    async def _wait_for_next(self) -> T:
        """Leave a future in `_waiting` and sleep on it until `push` hands it an event or `end` closes."""
        waiter: asyncio.Future[tuple[bool, T | None]] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        finished, event = await waiter
        if finished:
            raise StopAsyncIteration
        return event  # type: ignore[return-value]  # not finished, so the future carried an event

    def end(self, result: R) -> None:
        """Close the stream: the result is `result` unless a terminal event already set one."""
        if not self._done:
            self._resolve(result)
        self._done = True
        # Every reader still waiting would otherwise wait forever: wake each with the end.
        while (waiter := self._next_waiter()) is not None:
            waiter.set_result((True, None))

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


# ## Lab 3.2 · done and error end the stream of one model reply


def final_message(event: ModelEvent) -> AssistantMessage:
    """The message a terminal event carries: `done`'s message, `error`'s error; no other event has one."""
    # BEGIN LAB 3.2
    if isinstance(event, ModelDone):
        return event.message
    if isinstance(event, ModelError):
        return event.error
    raise ValueError("非终态事件不能生成最终消息")
    # END LAB 3.2


class AssistantMessageEventStream(EventStream[ModelEvent, AssistantMessage]):
    """The stream of one model reply: `done` and `error` are terminal and carry the final message."""

    def __init__(self) -> None:
        """An EventStream whose terminal events are `done` and `error`."""
        # BEGIN LAB 3.2 AssistantMessageEventStream
        # An error is a terminal event like done: it ends the iteration and resolves result() itself.
        super().__init__(lambda event: event.type in ("done", "error"), final_message)
        # END LAB 3.2
