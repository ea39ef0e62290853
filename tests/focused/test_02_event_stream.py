"""Focused tests of checkpoint 02: one EventStream delivers every event once, in order, and one result.

Sections follow the labs: 2.1 (events that arrive first wait in the queue; the terminal event resolves
the result) and 2.2 (a reader that waits first is woken by the next push; `end` closes the stream).
Concurrency is ordered by gates the test holds (asyncio.Event), never by sleeping; a bounded wait only
turns a reader that would hang into a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import EventStream
from strategies import short_text

Event = dict[str, str]
Step = tuple[str, str]
X = TypeVar("X")

#: A reader that is still waiting after this many seconds will never be woken.
HANG = 1.0


def delta(value: str) -> Event:
    """A non-terminal event carrying a piece of the reply."""
    return {"type": "delta", "value": value}


def done(value: str) -> Event:
    """The terminal event, carrying the final string."""
    return {"type": "done", "value": value}


def make_stream() -> EventStream[Event, str]:
    """The chapter's stream: `done` is terminal and its value is the result."""
    return EventStream(lambda event: event["type"] == "done", lambda event: event["value"])


def run(coroutine: Coroutine[Any, Any, X]) -> X:
    """Run one test body on a fresh event loop."""
    return asyncio.run(coroutine)


async def settle(awaitable: Awaitable[X], what: str) -> X:
    """Await something that must finish once the test has done its part; a hang becomes a failure."""
    try:
        return await asyncio.wait_for(awaitable, HANG)
    except TimeoutError:
        raise AssertionError(f"{what} never finished: nothing woke it") from None


async def drain(events: EventStream[Event, str]) -> list[Event]:
    """Everything `async for` still reads from the stream."""
    return [event async for event in events]


async def waiting_next(events: EventStream[Event, str]) -> asyncio.Task[Event]:
    """Start a reader's `anext` and return once it is parked on the stream (or already served).

    The reader sets the gate right before it calls `anext`; the test resumes only after the reader
    has run up to its first real suspension, which is waiting inside the stream for a push.
    """
    gate = asyncio.Event()

    async def read() -> Event:
        gate.set()
        return await anext(aiter(events))

    task = asyncio.ensure_future(read())
    await gate.wait()
    return task


# ## Lab 2.1 · events that arrive first wait in the queue; the terminal event resolves the result


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.push", "EventStream.__anext__")
def test_events_pushed_first_are_queued_and_the_terminal_event_resolves_the_result() -> None:
    """先 push 的 delta 与 done 会留在 queue 里按顺序读出吗？done 是否同时给出 result "AB"？"""

    async def body() -> tuple[list[Event], str]:
        events = make_stream()
        events.push(delta("A"))
        events.push(done("AB"))
        observed = await settle(drain(events), "reading the queued events")
        return observed, await settle(events.result(), "result()")

    observed, result = run(body())
    assert [event["type"] for event in observed] == ["delta", "done"]
    assert observed == [delta("A"), done("AB")]
    assert result == "AB"


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.push")
def test_manual_next_reads_the_delta_then_the_terminal_event_then_stops() -> None:
    """逐次调用 anext：先得到 delta "A"，再得到终态事件 done "AB"（它仍是一项事件），第三次才结束迭代吗？"""

    async def body() -> list[object]:
        events = make_stream()
        iterator = aiter(events)
        seen: list[object] = []
        events.push(delta("A"))
        seen.append(await settle(anext(iterator), "the first anext"))
        events.push(done("AB"))
        seen.append(await settle(anext(iterator), "the second anext"))
        with pytest.raises(StopAsyncIteration):
            await settle(anext(iterator), "the third anext")
        seen.append(await settle(events.result(), "result()"))
        return seen

    assert run(body()) == [delta("A"), done("AB"), "AB"]


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.__anext__")
def test_a_queued_terminal_event_is_read_before_the_iteration_stops() -> None:
    """终态已经排队、done 已经为真时，读者是否仍先读到排队的事件，而不是直接结束？"""

    async def body() -> list[Event]:
        events = make_stream()
        events.push(done("only"))
        return await settle(drain(events), "reading the queue")

    assert run(body()) == [done("only")]


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.push")
def test_pushes_after_the_terminal_event_are_ignored() -> None:
    """终态事件之后再 push 的事件会被忽略吗？result 仍是第一个终态事件的值吗？"""

    async def body() -> tuple[list[Event], str]:
        events = make_stream()
        events.push(delta("A"))
        events.push(done("first"))
        events.push(delta("late"))
        events.push(done("second"))
        return await settle(drain(events), "reading"), await settle(events.result(), "result()")

    observed, result = run(body())
    assert observed == [delta("A"), done("first")]
    assert result == "first"


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.push")
def test_result_waits_for_the_terminal_event() -> None:
    """在终态事件到来之前调用 result()，它会一直等待、不被普通事件完成，直到终态给出最终值吗？"""

    async def body() -> tuple[bool, bool, str]:
        events = make_stream()
        gate = asyncio.Event()

        async def wait_for_result() -> str:
            gate.set()
            return await events.result()

        pending = asyncio.ensure_future(wait_for_result())
        await gate.wait()
        before = pending.done()
        events.push(delta("A"))
        await settle(anext(aiter(events)), "reading the delta")
        after_delta = pending.done()
        events.push(done("AB"))
        return before, after_delta, await settle(pending, "result()")

    before, after_delta, result = run(body())
    assert before is False
    assert after_delta is False
    assert result == "AB"


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.result")
def test_every_result_call_gets_the_same_final_value() -> None:
    """先等待的 result() 与结束之后才调用的 result() 得到的是同一个最终值吗？"""

    async def body() -> list[object]:
        events = make_stream()
        value = ["shared"]
        stream: EventStream[dict[str, object], object] = EventStream(
            lambda event: event["type"] == "done", lambda event: event["value"]
        )
        gate = asyncio.Event()

        async def early() -> object:
            gate.set()
            return await stream.result()

        waiting = asyncio.ensure_future(early())
        await gate.wait()
        stream.push({"type": "done", "value": value})
        first = await settle(waiting, "the early result()")
        second = await settle(stream.result(), "a later result()")
        events.push(done("x"))
        return [first, second, await settle(events.result(), "result()")]

    first, second, plain = run(body())
    assert first is second
    assert first == ["shared"]
    assert plain == "x"


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.__anext__")
def test_two_iterations_share_one_queue_instead_of_copying_it() -> None:
    """两个迭代器读同一个流时，是争抢同一批事件（每条只交付一次），而不是各得一份副本吗？"""

    async def body() -> tuple[list[Event], list[Event]]:
        events = make_stream()
        for value in ("a", "b", "c"):
            events.push(delta(value))
        events.push(done("abc"))
        first, second = aiter(events), aiter(events)
        got_first = [await anext(first), await anext(first)]
        got_second = [await anext(second), await anext(second)]
        return got_first, got_second

    got_first, got_second = run(body())
    assert got_first == [delta("a"), delta("b")]
    assert got_second == [delta("c"), done("abc")]


async def queued_then_read(
    before: list[str], final: str, after: list[tuple[bool, str]]
) -> tuple[list[Event], str]:
    """Push every event before reading; return what a reader then reads, and the result."""
    events = make_stream()
    for value in before:
        events.push(delta(value))
    events.push(done(final))
    for terminal, value in after:
        events.push(done(value) if terminal else delta(value))
    return await settle(drain(events), "reading"), await settle(events.result(), "result()")


@pytest.mark.lab2_1
@pytest.mark.edits("EventStream.push")
def test_queued_events_are_read_once_in_order_up_to_the_first_terminal_event() -> None:
    """任意一串事件全部先 push：读者是否按顺序、每条一次地读到第一个终态为止，result 取第一个终态的值？"""
    # One plain example first: an unfinished lab fails here, before Hypothesis starts generating.
    assert run(queued_then_read(["a"], "ab", [(False, "late")])) == ([delta("a"), done("ab")], "ab")

    @given(
        before=st.lists(short_text, max_size=6),
        final=short_text,
        after=st.lists(st.tuples(st.booleans(), short_text), max_size=4),
    )
    def check(before: list[str], final: str, after: list[tuple[bool, str]]) -> None:
        observed, result = run(queued_then_read(before, final, after))
        assert observed == [*(delta(value) for value in before), done(final)]
        assert result == final

    check()


# ## Lab 2.2 · a reader that waits first is woken by the next push; end closes the stream


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_a_waiting_iterator_is_woken_by_the_next_push_and_end_stops_it() -> None:
    """先调用 anext 而等待的迭代器，会被下一次 push 唤醒并拿到那条事件吗？end("A") 之后迭代结束、result 为 "A"
    吗？"""

    async def body() -> tuple[bool, Event, str]:
        events = make_stream()
        iterator = aiter(events)
        gate = asyncio.Event()

        async def first_next() -> Event:
            gate.set()
            return await anext(iterator)

        pending = asyncio.ensure_future(first_next())
        await gate.wait()
        parked = not pending.done()
        events.push(delta("A"))
        woken = await settle(pending, "the waiting anext")
        events.end("A")
        with pytest.raises(StopAsyncIteration):
            await settle(anext(iterator), "anext after end")
        return parked, woken, await settle(events.result(), "result()")

    parked, woken, result = run(body())
    assert parked is True
    assert woken == delta("A")
    assert result == "A"


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_end_wakes_every_waiting_reader_with_the_end_of_iteration() -> None:
    """两个读者都在等待时调用 end，它们是否都被唤醒并以 StopAsyncIteration 结束，而不是永远等待？"""

    async def body() -> list[bool]:
        events = make_stream()
        readers = [await waiting_next(events), await waiting_next(events)]
        parked = [not reader.done() for reader in readers]
        events.end("closed")
        stopped = []
        for reader in readers:
            try:
                await settle(reader, "a waiting reader after end")
                stopped.append(False)
            except StopAsyncIteration:
                stopped.append(True)
        return parked + stopped

    assert run(body()) == [True, True, True, True]


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_end_without_a_terminal_event_makes_no_event_and_gives_its_result() -> None:
    """没有终态事件时，end(result) 不会制造任何事件，读者只看到排队的事件后结束，result 是 end 的参数吗？"""

    async def body() -> tuple[list[Event], str]:
        events = make_stream()
        events.push(delta("A"))
        events.end("A")
        return await settle(drain(events), "reading"), await settle(events.result(), "result()")

    observed, result = run(body())
    assert observed == [delta("A")]
    assert result == "A"


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_end_after_a_terminal_event_keeps_the_terminal_result() -> None:
    """终态事件已经给出结果后再调用 end（甚至两次），result 仍是终态事件的值、不被覆盖吗？"""

    async def body() -> tuple[list[Event], str]:
        events = make_stream()
        events.push(done("AB"))
        events.end("overwritten?")
        events.end("again?")
        return await settle(drain(events), "reading"), await settle(events.result(), "result()")

    observed, result = run(body())
    assert observed == [done("AB")]
    assert result == "AB"


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_a_second_end_does_not_replace_the_first_result() -> None:
    """连续两次 end，result 保留第一次的值，之后的 push 也都被忽略吗？"""

    async def body() -> tuple[list[Event], str]:
        events = make_stream()
        events.end("first")
        events.end("second")
        events.push(delta("late"))
        events.push(done("late"))
        return await settle(drain(events), "reading"), await settle(events.result(), "result()")

    observed, result = run(body())
    assert observed == []
    assert result == "first"


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream._wait_for_next")
def test_a_waiting_reader_is_woken_by_the_terminal_event_and_then_stops() -> None:
    """读者在等待时到来的是终态事件：它拿到终态事件，下一次读取随即结束（不需要 end）吗？"""

    async def body() -> tuple[Event, list[Event], str]:
        events = make_stream()
        reader = await waiting_next(events)
        events.push(done("AB"))
        woken = await settle(reader, "the waiting reader")
        rest = await settle(drain(events), "reading after the terminal event")
        return woken, rest, await settle(events.result(), "result()")

    woken, rest, result = run(body())
    assert woken == done("AB")
    assert rest == []
    assert result == "AB"


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream._wait_for_next")
def test_an_event_handed_to_a_waiting_reader_is_not_also_queued() -> None:
    """交给等待读者的事件不会再进入 queue 吗？也就是说，同一条事件不会被读到两次。"""

    async def body() -> tuple[Event, list[Event]]:
        events = make_stream()
        reader = await waiting_next(events)
        events.push(delta("A"))
        woken = await settle(reader, "the waiting reader")
        events.push(delta("B"))
        events.push(done("AB"))
        return woken, await settle(drain(events), "reading the rest")

    woken, rest = run(body())
    assert woken == delta("A")
    assert rest == [delta("B"), done("AB")]


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream._wait_for_next")
def test_waiting_readers_are_served_in_the_order_they_started_waiting() -> None:
    """两个读者先后等待，接下来的两次 push 是否按等待的先后分别交给它们（先等先得）？"""

    async def body() -> list[Event]:
        events = make_stream()
        first = await waiting_next(events)
        second = await waiting_next(events)
        events.push(delta("1"))
        events.push(delta("2"))
        return [await settle(first, "the first reader"), await settle(second, "the second reader")]

    assert run(body()) == [delta("1"), delta("2")]


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream._wait_for_next")
def test_a_reader_cancelled_while_waiting_does_not_swallow_the_next_event() -> None:
    """一个等待中的读者被取消后，下一条事件会交给仍在等待的读者，而不是落进被取消者手里丢失吗？"""

    async def body() -> Event:
        events = make_stream()
        cancelled = await waiting_next(events)
        survivor = await waiting_next(events)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        events.push(delta("kept"))
        return await settle(survivor, "the surviving reader")

    assert run(body()) == delta("kept")


async def interleave(
    steps: list[Step], finish_with_terminal: bool
) -> tuple[list[Event], list[Event], list[bool]]:
    """Play pushes and reads in the given order, then close; return pushed, delivered, and who saw the end."""
    events = make_stream()
    pushed: list[Event] = []
    readers: list[asyncio.Task[Event]] = []
    for action, value in steps:
        if action == "push":
            pushed.append(delta(value))
            events.push(delta(value))
        else:
            readers.append(await waiting_next(events))
    if finish_with_terminal:
        pushed.append(done("end"))
        events.push(done("end"))
    events.end("end")
    delivered: list[Event] = []
    stopped: list[bool] = []
    for reader in readers:
        try:
            delivered.append(await settle(reader, "a reader"))
            stopped.append(False)
        except StopAsyncIteration:
            stopped.append(True)
    delivered += await settle(drain(events), "reading the rest")
    return pushed, delivered, stopped


@pytest.mark.lab2_2
@pytest.mark.edits("EventStream.end")
def test_any_interleaving_of_pushes_and_reads_delivers_every_event_once_in_order() -> None:
    """push 与读取以任意顺序交错（读者可能先等待，事件也可能先排队）：每条事件是否恰好交付一次、顺序不变？"""
    # One plain example first (a reader waits before the first push): an unfinished lab fails here.
    first = run(interleave([("read", ""), ("push", "a"), ("read", "")], True))
    assert first == ([delta("a"), done("end")], [delta("a"), done("end")], [False, False])

    @given(
        steps=st.lists(
            st.one_of(st.tuples(st.just("push"), short_text), st.tuples(st.just("read"), st.just(""))),
            max_size=12,
        ),
        finish_with_terminal=st.booleans(),
    )
    def check(steps: list[Step], finish_with_terminal: bool) -> None:
        pushed, delivered, stopped = run(interleave(steps, finish_with_terminal))
        assert delivered == pushed
        # Once one reader saw the end, every later reader sees it too.
        assert stopped == sorted(stopped)

    check()
