"""Focused tests of checkpoint 07: the agent loop closes model → tool call → tool result → model.

Sections follow the labs. On the starter each test stops on the LabNotImplemented of its own lab (a
7.2 test may stop on a 7.1 piece it builds on): even the given provider's behaviour is checked
through a lab piece, so that no test passes before the lab it belongs to is done.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Iterable
from typing import Any

import pytest
from pi_course import (
    AbortController,
    AbortSignal,
    AgentContext,
    AgentEvent,
    AssistantMessage,
    Message,
    ModelRequest,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    assistant,
    object_schema,
    run_agent_loop,
    run_tool_calls,
    string_value,
    text,
    tool_calls,
    user,
)

# Shared helpers. Nothing here calls a lab piece at import time: on the starter every lab error
# must surface inside a test, never while collecting.

CANCELLED = "已取消"
NO_MORE_REPLIES = "没有更多脚本回复"
SYSTEM_PROMPT = "You are a careful assistant."

#: The two pairing rules that every transcript sent to a real provider must keep.
RULE_ANSWERED = "every tool call must be answered by exactly one tool result with the same id and name"
RULE_ORDER = "the tool results of a reply must come right after that assistant message, in call order"


def now_ms() -> int:
    """Whole milliseconds since the epoch, the unit of every timestamp."""
    return time.time_ns() // 1_000_000


def stable_fields(result: ToolResultMessage) -> dict[str, object]:
    """Every field of a result except the timestamp, which changes from run to run."""
    return {
        "role": result.role,
        "tool_call_id": result.tool_call_id,
        "tool_name": result.tool_name,
        "content": result.content,
        "details": result.details,
        "is_error": result.is_error,
    }


def failed_fields(call_id: str, name: str, message: str) -> dict[str, object]:
    """The stable fields of 06's failed result for `message`."""
    return {
        "role": "toolResult",
        "tool_call_id": call_id,
        "tool_name": name,
        "content": [text(f"Tool {name} failed: {message}")],
        "details": {"error": message},
        "is_error": True,
    }


def echo_fields(call_id: str, value: str = "Pi") -> dict[str, object]:
    """The stable fields of the chapter echo's success result."""
    return {
        "role": "toolResult",
        "tool_call_id": call_id,
        "tool_name": "echo",
        "content": [text(value)],
        "details": {"source": "echo"},
        "is_error": False,
    }


class EchoBody:
    """The 06 chapter's echo body, remembering each call's params and context."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []
        self.contexts: list[ToolContext] = []

    @property
    def count(self) -> int:
        """How many times echo was executed."""
        return len(self.params)

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        """Echo `value` back with details {"source": "echo"}."""
        self.params.append(params)
        self.contexts.append(context)
        return ToolOutput([text(params["value"])], {"source": "echo"})


def make_echo(body: EchoBody | None = None) -> Tool[dict[str, Any], dict[str, str]]:
    """The 06 chapter's echo tool: Tool("echo", "Echo one value", object_schema(...), execute)."""
    return Tool(
        "echo", "Echo one value", object_schema({"value": string_value}), (body or EchoBody()).execute
    )


def echo_call(call_id: str = "call-1", value: str = "Pi") -> ToolCall:
    """A call of echo; the chapter's own carries an undeclared key that parse drops."""
    return ToolCall(id=call_id, name="echo", arguments={"value": value, "ignored": "drop me"})


class Journal:
    """Tools that write `start <id>` and `end <id>` around a few event-loop hops.

    Each tool awaits asyncio.sleep(0) `steps` times, so two calls run at the same time would
    interleave their entries, and a call with fewer steps would finish first.
    """

    def __init__(self) -> None:
        self.entries: list[str] = []

    def tool(self, name: str, steps: int = 3) -> Tool[dict[str, Any], dict[str, str]]:
        """A tool named `name` that journals its calls."""

        async def execute(params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
            self.entries.append(f"start {context.call_id}")
            for _ in range(steps):
                await asyncio.sleep(0)
            self.entries.append(f"end {context.call_id}")
            return ToolOutput([text(f"{name} done")], {"call": context.call_id})

        return Tool(name, f"The {name} tool", object_schema({}), execute)


def aborting_tool(controller: AbortController, body: EchoBody) -> Tool[dict[str, Any], dict[str, str]]:
    """An echo-like tool named `stop` that fires the controller while it runs, then finishes normally."""

    async def execute(params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        controller.abort("user pressed stop")
        return await body.execute(params, context)

    return Tool("stop", "Press stop", object_schema({"value": string_value}), execute)


class EmitFailed(Exception):
    """Raised by a test's emit callback (not a RuntimeError: a lab stub's error must not pass for it)."""


class Events:
    """An `emit` callback that records every event; it can raise on one event type."""

    def __init__(self, raise_on: str | None = None) -> None:
        self.seen: list[AgentEvent] = []
        self.raise_on = raise_on

    def __call__(self, event: AgentEvent) -> None:
        self.seen.append(event)
        if event.type == self.raise_on:
            raise EmitFailed(f"emit failed on {event.type}")

    @property
    def types(self) -> list[str]:
        """The event types, in order."""
        return [event.type for event in self.seen]


class RecordingProvider:
    """A provider that keeps each request object as it came (no copy) and the signal it got."""

    def __init__(self, replies: Iterable[AssistantMessage]) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []
        self.sizes: list[int] = []
        self.signals: list[AbortSignal | None] = []

    async def complete(self, request: ModelRequest, *, signal: AbortSignal | None = None) -> AssistantMessage:
        """Keep the request, then answer with the next reply, or plain text when none is left."""
        self.requests.append(request)
        self.sizes.append(len(request.messages))
        self.signals.append(signal)
        await asyncio.sleep(0)
        return self.replies.pop(0) if self.replies else assistant(text("done"))


class CountingRegistry(ToolRegistry):
    """A registry that counts how often definitions() is asked for."""

    definition_calls = 0

    def definitions(self) -> list[ToolDefinition]:
        """Count the call, then describe the tools as usual."""
        self.definition_calls += 1
        return super().definitions()


def run_calls(
    message: AssistantMessage,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    events: Events | None = None,
) -> list[ToolResultMessage]:
    """Run run_tool_calls to completion in a fresh event loop."""
    return asyncio.run(run_tool_calls(message, registry, signal=signal, emit=events))


def run_loop(
    prompts: list[Message],
    context: AgentContext,
    provider: ScriptedProvider | RecordingProvider,
    *,
    signal: AbortSignal | None = None,
    events: Events | None = None,
    max_turns: int | None = None,
) -> list[Message]:
    """Run run_agent_loop to completion in a fresh event loop (max_turns left at its default unless given)."""
    if max_turns is None:
        return asyncio.run(run_agent_loop(prompts, context, provider, signal=signal, emit=events))
    return asyncio.run(
        run_agent_loop(prompts, context, provider, signal=signal, emit=events, max_turns=max_turns)
    )


def chapter_run(
    events: Events | None = None,
) -> tuple[list[Message], ScriptedProvider, ToolRegistry, UserMessage, list[AssistantMessage]]:
    """The chapter example: "say Pi", one echo call, then the text reply "Pi"."""
    registry = ToolRegistry([make_echo()])
    prompt = user("say Pi")
    replies = [
        assistant(ToolCall(id="call-1", name="echo", arguments={"value": "Pi", "ignored": "drop me"})),
        assistant(text("Pi")),
    ]
    provider = ScriptedProvider(replies)
    new = run_loop([prompt], AgentContext(SYSTEM_PROMPT, [], registry), provider, events=events)
    return new, provider, registry, prompt, replies


def assert_pairing(messages: list[Message]) -> None:
    """Check the two pairing rules that real providers enforce on a transcript; name the one broken."""
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage) or message.stop_reason in ("error", "aborted"):
            continue
        calls = [block for block in message.content if isinstance(block, ToolCall)]
        following = messages[index + 1 : index + 1 + len(calls)]
        for position, call in enumerate(calls):
            answer = following[position] if position < len(following) else None
            if isinstance(answer, ToolResultMessage) and answer.tool_call_id == call.id:
                assert answer.tool_name == call.name, (
                    f"{RULE_ANSWERED}: {answer.tool_name!r} answers {call.name!r}"
                )
                continue
            found = [
                at
                for at, m in enumerate(messages)
                if isinstance(m, ToolResultMessage) and m.tool_call_id == call.id
            ]
            if not found:
                pytest.fail(f"{RULE_ANSWERED}: call {call.id!r} ({call.name}) was left without a result")
            pytest.fail(
                f"{RULE_ORDER}: the result of call {call.id!r} ({call.name}) is message {found[0]}, "
                f"but its assistant message is message {index}"
            )
    for index, result in enumerate(messages):
        if isinstance(result, ToolResultMessage):
            owner = next((m for m in reversed(messages[:index]) if isinstance(m, AssistantMessage)), None)
            owned = [] if owner is None else [b.id for b in owner.content if isinstance(b, ToolCall)]
            if result.tool_call_id not in owned:
                pytest.fail(
                    f"{RULE_ORDER}: the result of {result.tool_call_id!r} comes before (or without) "
                    "the assistant message that holds its call"
                )


# ## Lab 7.1 · run the tool calls of one assistant message


@pytest.mark.lab7_1
def test_tool_calls_returns_the_calls_in_order_and_skips_text() -> None:
    """Does tool_calls() give the message's ToolCall blocks, the very objects, in order, without the text?"""
    first, second = echo_call("a"), ToolCall(id="b", name="missing", arguments={})
    message = assistant(text("let me check"), first, text("and"), second)
    calls = tool_calls(message)
    assert calls == [first, second]
    assert calls[0] is first and calls[1] is second
    assert message.content == [text("let me check"), first, text("and"), second]


@pytest.mark.lab7_1
def test_tool_calls_of_a_text_only_reply_is_empty() -> None:
    """Is a reply without tool calls (text only, or no content) answered with an empty list?"""
    assert tool_calls(assistant(text("Pi"))) == []
    assert tool_calls(AssistantMessage(content=[], stop_reason="stop", timestamp=0)) == []


@pytest.mark.lab7_1
def test_assistant_defaults_its_stop_reason_from_its_blocks() -> None:
    """Does assistant() stop with "toolUse" when a block is a ToolCall, "stop" otherwise, unless told?"""
    before = now_ms()
    calling = assistant(text("checking"), echo_call())
    after = now_ms()
    assert tool_calls(calling) == [echo_call()]
    assert calling.stop_reason == "toolUse"
    assert assistant(text("Pi")).stop_reason == "stop"
    assert assistant().stop_reason == "stop"
    assert assistant(echo_call(), stop_reason="length").stop_reason == "length"
    assert (calling.role, calling.error_message) == ("assistant", None)
    assert type(calling.timestamp) is int and before <= calling.timestamp <= after


@pytest.mark.lab7_1
def test_run_tool_calls_answers_the_chapter_echo_call() -> None:
    """Does the chapter's echo call come back as 06's success result for call-1, with a timestamp of now?"""
    body = EchoBody()
    before = now_ms()
    results = run_calls(assistant(echo_call()), ToolRegistry([make_echo(body)]))
    after = now_ms()
    assert [stable_fields(result) for result in results] == [echo_fields("call-1")]
    assert type(results[0]) is ToolResultMessage
    assert before <= results[0].timestamp <= after
    assert body.params == [{"value": "Pi"}]


@pytest.mark.lab7_1
def test_tool_calls_run_one_after_another_in_source_order() -> None:
    """Does each call start only after the previous one has finished, in the order the model wrote them?"""
    journal = Journal()
    registry = ToolRegistry([journal.tool("slow", steps=5), journal.tool("quick", steps=0)])
    message = assistant(
        ToolCall(id="a", name="slow", arguments={}),
        ToolCall(id="b", name="quick", arguments={}),
        ToolCall(id="c", name="slow", arguments={}),
    )
    run_calls(message, registry)
    # Run together (asyncio.gather, tasks), the entries would interleave: start a, start b, end b, ...
    assert journal.entries == ["start a", "end a", "start b", "end b", "start c", "end c"], (
        f"each call must finish before the next one starts; the tools ran as {journal.entries}"
    )


@pytest.mark.lab7_1
def test_results_come_in_call_order_paired_by_id_and_name() -> None:
    """With a slow call first, an unknown tool, bad arguments and a quick call, is each result in call order, paired?"""
    journal = Journal()
    registry = ToolRegistry([journal.tool("slow", steps=5), journal.tool("quick", steps=0), make_echo()])
    message = assistant(
        ToolCall(id="a", name="slow", arguments={}),
        ToolCall(id="b", name="missing", arguments={"value": "Pi"}),
        ToolCall(id="c", name="echo", arguments={"value": 1}),
        ToolCall(id="d", name="quick", arguments={}),
        echo_call("e"),
    )
    results = run_calls(message, registry)
    assert [(r.tool_call_id, r.tool_name) for r in results] == [
        ("a", "slow"),
        ("b", "missing"),
        ("c", "echo"),
        ("d", "quick"),
        ("e", "echo"),
    ]
    assert stable_fields(results[1]) == failed_fields("b", "missing", "未知工具")
    assert stable_fields(results[2]) == failed_fields("c", "echo", "必须是 string")
    assert [r.details for r in (results[0], results[3])] == [{"call": "a"}, {"call": "d"}]
    assert stable_fields(results[4]) == echo_fields("e")


@pytest.mark.lab7_1
def test_a_reply_without_tool_calls_runs_nothing_and_emits_nothing() -> None:
    """Does a text-only reply give no results and no events?"""
    body, events = EchoBody(), Events()
    assert run_calls(assistant(text("Pi")), ToolRegistry([make_echo(body)]), events=events) == []
    assert events.seen == []
    assert body.count == 0


@pytest.mark.lab7_1
def test_run_tool_calls_passes_the_signal_on_to_every_tool() -> None:
    """Does every tool get the very signal the caller passed (not aborted, so they all run)?"""
    body = EchoBody()
    controller = AbortController()
    run_calls(
        assistant(echo_call("a"), echo_call("b")), ToolRegistry([make_echo(body)]), signal=controller.signal
    )
    assert [context.call_id for context in body.contexts] == ["a", "b"]
    assert all(context.signal is controller.signal for context in body.contexts)


@pytest.mark.lab7_1
def test_a_cancelled_call_is_still_answered() -> None:
    """Diagnosis: after an abort mid-run, is every call still answered by a result with its own id and name?"""
    controller = AbortController()
    registry = ToolRegistry([make_echo(), aborting_tool(controller, EchoBody())])
    message = assistant(
        ToolCall(id="call-1", name="stop", arguments={"value": "halt"}),
        echo_call("call-2"),
        echo_call("call-3"),
    )
    results = run_calls(message, registry, signal=controller.signal)
    # A transcript with an unanswered call is refused by real providers: the cancelled calls need results too.
    assert_pairing([message, *results])
    assert len(results) == 3


@pytest.mark.lab7_1
def test_a_signal_aborted_before_the_first_call_cancels_every_call_without_running() -> None:
    """With the signal already aborted, is every call answered as `Tool <name> failed: 已取消`, none executed?"""
    body = EchoBody()
    controller = AbortController()
    controller.abort()
    message = assistant(echo_call("a"), ToolCall(id="b", name="missing", arguments={}))
    before = now_ms()
    results = run_calls(message, ToolRegistry([make_echo(body)]), signal=controller.signal)
    after = now_ms()
    assert body.count == 0
    assert [stable_fields(result) for result in results] == [
        failed_fields("a", "echo", CANCELLED),
        failed_fields("b", "missing", CANCELLED),
    ]
    assert all(before <= result.timestamp <= after for result in results)


@pytest.mark.lab7_1
def test_an_abort_during_a_tool_cancels_only_the_later_calls() -> None:
    """When the second tool presses stop while it runs, do calls 1–2 keep their results and calls 3–4 get `已取消`?"""
    body, stopper = EchoBody(), EchoBody()
    controller = AbortController()
    registry = ToolRegistry([make_echo(body), aborting_tool(controller, stopper)])
    message = assistant(
        echo_call("a"),
        ToolCall(id="b", name="stop", arguments={"value": "halt"}),
        echo_call("c"),
        ToolCall(id="d", name="missing", arguments={}),
    )
    results = run_calls(message, registry, signal=controller.signal)
    assert (body.count, stopper.count) == (1, 1)
    assert [stable_fields(result) for result in results] == [
        echo_fields("a"),
        {**echo_fields("b", "halt"), "tool_name": "stop"},
        failed_fields("c", "echo", CANCELLED),
        failed_fields("d", "missing", CANCELLED),
    ]


@pytest.mark.lab7_1
def test_run_tool_calls_emits_start_end_and_message_end_for_each_call() -> None:
    """For each call, in order, are tool_execution_start, tool_execution_end and message_end emitted, carrying it?"""
    journal, events = Journal(), Events()
    registry = ToolRegistry([make_echo(), journal.tool("quick", steps=0)])
    first, second = echo_call("a"), ToolCall(id="b", name="quick", arguments={})
    results = run_calls(assistant(first, text("between"), second), registry, events=events)
    assert events.seen == [
        AgentEvent("tool_execution_start", call=first),
        AgentEvent("tool_execution_end", call=first, message=results[0]),
        AgentEvent("message_end", message=results[0]),
        AgentEvent("tool_execution_start", call=second),
        AgentEvent("tool_execution_end", call=second, message=results[1]),
        AgentEvent("message_end", message=results[1]),
    ]
    # The events carry the very call and result objects, not copies.
    assert events.seen[0].call is first and events.seen[1].message is results[0]
    assert events.seen[2].message is results[0] and events.seen[5].message is results[1]


@pytest.mark.lab7_1
def test_the_start_event_comes_before_the_tool_runs_and_the_end_events_after() -> None:
    """Does the tool run between its tool_execution_start and its tool_execution_end?"""
    journal = Journal()
    registry = ToolRegistry([journal.tool("slow", steps=2)])

    def emit(event: AgentEvent) -> None:
        journal.entries.append(event.type)

    asyncio.run(run_tool_calls(assistant(ToolCall(id="a", name="slow", arguments={})), registry, emit=emit))
    assert journal.entries == [
        "tool_execution_start",
        "start a",
        "end a",
        "tool_execution_end",
        "message_end",
    ]


@pytest.mark.lab7_1
def test_cancelled_calls_still_get_all_three_events() -> None:
    """When the signal is aborted, does each cancelled call still get start, end and message_end with its result?"""
    controller = AbortController()
    controller.abort()
    events = Events()
    first, second = echo_call("a"), echo_call("b")
    results = run_calls(
        assistant(first, second), ToolRegistry([make_echo()]), signal=controller.signal, events=events
    )
    assert events.seen == [
        AgentEvent("tool_execution_start", call=first),
        AgentEvent("tool_execution_end", call=first, message=results[0]),
        AgentEvent("message_end", message=results[0]),
        AgentEvent("tool_execution_start", call=second),
        AgentEvent("tool_execution_end", call=second, message=results[1]),
        AgentEvent("message_end", message=results[1]),
    ]
    assert all(result.details == {"error": CANCELLED} for result in results)


@pytest.mark.lab7_1
def test_run_tool_calls_without_emit_still_answers_every_call() -> None:
    """Called without emit, and with an emit that returns a value, does it still answer each call?"""
    registry = ToolRegistry([make_echo()])
    message = assistant(echo_call("a"), echo_call("b"))
    assert [r.tool_call_id for r in run_calls(message, registry)] == ["a", "b"]
    seen: list[str] = []

    def emit(event: AgentEvent) -> bool:
        seen.append(event.type)
        return False  # ignored

    results = asyncio.run(run_tool_calls(message, registry, emit=emit))
    assert [r.tool_call_id for r in results] == ["a", "b"]
    assert len(seen) == 6


@pytest.mark.lab7_1
def test_an_exception_raised_by_emit_propagates_from_run_tool_calls() -> None:
    """Does an error raised inside emit reach the caller of run_tool_calls instead of being swallowed?"""
    body = EchoBody()
    with pytest.raises(EmitFailed, match="emit failed on tool_execution_start"):
        run_calls(
            assistant(echo_call()), ToolRegistry([make_echo(body)]), events=Events("tool_execution_start")
        )
    assert body.count == 0


@pytest.mark.lab7_1
def test_run_tool_calls_leaves_the_message_alone() -> None:
    """After running, is the assistant message (its blocks and arguments) exactly as before?"""
    message = assistant(text("checking"), echo_call("a"), ToolCall(id="b", name="missing", arguments={}))
    snapshot = copy.deepcopy(message)
    run_calls(message, ToolRegistry([make_echo()]))
    assert message == snapshot


@pytest.mark.lab7_1
def test_agent_events_carry_nothing_unless_given() -> None:
    """Does an AgentEvent default its message and call to None, and do run_tool_calls' events use AgentEvent?"""
    assert AgentEvent("agent_start") == AgentEvent(type="agent_start", message=None, call=None)
    events = Events()
    run_calls(assistant(echo_call()), ToolRegistry([make_echo()]), events=events)
    assert all(type(event) is AgentEvent for event in events.seen)
    assert events.seen[0].message is None and events.seen[2].call is None


# ## Lab 7.2 · the agent loop


@pytest.mark.lab7_2
def test_each_tool_result_follows_its_assistant_message() -> None:
    """Diagnosis: over several turns and calls, does each result come right after the assistant message holding its call?"""
    registry = ToolRegistry([make_echo()])
    provider = ScriptedProvider(
        [
            assistant(echo_call("call-1"), echo_call("call-2", "Py")),
            assistant(text("one more"), echo_call("call-3")),
            assistant(text("done")),
        ]
    )
    new = run_loop([user("say Pi")], AgentContext("", [], registry), provider)
    # Results appended before their assistant message break the rule in what the model sees next.
    for request in provider.requests:
        assert_pairing(request.messages)
    assert_pairing(new)
    assert [message.role for message in new] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
        "toolResult",
        "assistant",
    ]


@pytest.mark.lab7_2
def test_the_chapter_example_returns_four_messages() -> None:
    """Does "say Pi" give user, the echo call, 06's success result for call-1, and the reply "Pi"?"""
    new, _, _, prompt, replies = chapter_run()
    assert len(new) == 4
    assert new[0] is prompt
    assert new[1] is replies[0] and new[3] is replies[1]
    result = new[2]
    assert isinstance(result, ToolResultMessage)
    assert stable_fields(result) == echo_fields("call-1")
    assert [message.role for message in new] == ["user", "assistant", "toolResult", "assistant"]


@pytest.mark.lab7_2
def test_the_chapter_example_sends_two_requests_with_the_tool_definitions() -> None:
    """Did the provider see 2 requests, each with tools == definitions(), the second holding the first three messages?"""
    new, provider, registry, prompt, _ = chapter_run()
    assert len(provider.requests) == 2
    first, second = provider.requests
    assert all(type(request) is ModelRequest for request in provider.requests)
    assert [request.system_prompt for request in provider.requests] == [SYSTEM_PROMPT, SYSTEM_PROMPT]
    assert first.tools == registry.definitions() and second.tools == registry.definitions()
    assert first.messages == [prompt]
    assert second.messages == new[:3]


@pytest.mark.lab7_2
def test_the_chapter_example_takes_two_turns_in_the_upstream_event_order() -> None:
    """Are the chapter's events exactly agent_start, 2 turns (each turn_start … turn_end) and agent_end?"""
    events = Events()
    new, _, _, prompt, replies = chapter_run(events)
    call = tool_calls(replies[0])[0]
    assert events.seen == [
        AgentEvent("agent_start"),
        AgentEvent("turn_start"),
        AgentEvent("message_end", message=prompt),
        AgentEvent("message_end", message=replies[0]),
        AgentEvent("tool_execution_start", call=call),
        AgentEvent("tool_execution_end", call=call, message=new[2]),
        AgentEvent("message_end", message=new[2]),
        AgentEvent("turn_end", message=replies[0]),
        AgentEvent("turn_start"),
        AgentEvent("message_end", message=replies[1]),
        AgentEvent("turn_end", message=replies[1]),
        AgentEvent("agent_end"),
    ]
    assert (events.types.count("turn_start"), events.types.count("turn_end")) == (2, 2)
    assert events.seen[7].message is replies[0] and events.seen[10].message is replies[1]


@pytest.mark.lab7_2
def test_the_chapter_transcript_has_the_camel_case_wire_form() -> None:
    """Does each message of the chapter run turn into JSON with camelCase keys (no errorMessage when None)?"""
    new, _, _, prompt, replies = chapter_run()
    wire = [message.to_dict() for message in new]
    assert json.loads(json.dumps(wire, ensure_ascii=False)) == wire
    assert wire[0] == {"role": "user", "content": "say Pi", "timestamp": prompt.timestamp}
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "toolCall",
                "id": "call-1",
                "name": "echo",
                "arguments": {"value": "Pi", "ignored": "drop me"},
            }
        ],
        "stopReason": "toolUse",
        "timestamp": replies[0].timestamp,
    }
    assert list(wire[2]) == ["role", "toolCallId", "toolName", "content", "details", "isError", "timestamp"]
    assert wire[3] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Pi"}],
        "stopReason": "stop",
        "timestamp": replies[1].timestamp,
    }
    assert all(type(message.timestamp) is int for message in new)


@pytest.mark.lab7_2
def test_an_error_reply_has_an_error_message_on_the_wire() -> None:
    """When the script runs out, is the reply stop_reason "error" with errorMessage `没有更多脚本回复` on the wire?"""
    provider = ScriptedProvider([])
    before = now_ms()
    new = run_loop([user("hi")], AgentContext("", [], ToolRegistry()), provider)
    after = now_ms()
    reply = new[1]
    assert isinstance(reply, AssistantMessage)
    assert (reply.content, reply.stop_reason, reply.error_message) == ([], "error", NO_MORE_REPLIES)
    assert before <= reply.timestamp <= after
    assert reply.to_dict() == {
        "role": "assistant",
        "content": [],
        "stopReason": "error",
        "errorMessage": NO_MORE_REPLIES,
        "timestamp": reply.timestamp,
    }
    assert list(reply.to_dict()) == ["role", "content", "stopReason", "errorMessage", "timestamp"]
    assert len(provider.requests) == 1


@pytest.mark.lab7_2
def test_the_transcript_is_the_context_messages_then_the_prompts() -> None:
    """Does the first request hold context.messages then the prompts, and are only the prompts returned as new?"""
    history: list[Message] = [user("earlier"), assistant(text("noted"))]
    prompts: list[Message] = [user("first"), user("second")]
    provider = ScriptedProvider([assistant(text("ok"))])
    events = Events()
    new = run_loop(prompts, AgentContext(SYSTEM_PROMPT, history, ToolRegistry()), provider, events=events)
    assert provider.requests[0].messages == [*history, *prompts]
    assert new == [*prompts, new[2]] and len(new) == 3
    assert [e.message for e in events.seen if e.type == "message_end"] == [*prompts, new[2]]


@pytest.mark.lab7_2
def test_neither_context_messages_nor_prompts_are_modified() -> None:
    """After a run with tool calls, are context.messages and prompts the same lists with the same items?"""
    history: list[Message] = [user("earlier")]
    prompts: list[Message] = [user("say Pi")]
    history_before, prompts_before = list(history), list(prompts)
    context = AgentContext(SYSTEM_PROMPT, history, ToolRegistry([make_echo()]))
    new = run_loop(prompts, context, ScriptedProvider([assistant(echo_call()), assistant(text("Pi"))]))
    assert context.messages is history and history == history_before
    assert prompts == prompts_before
    assert new is not prompts and new is not history
    assert len(new) == 4


@pytest.mark.lab7_2
def test_the_provider_gets_a_new_list_for_every_request() -> None:
    """Does each request hold its own list, which keeps its length after the run and is not the caller's list?"""
    history: list[Message] = [user("earlier")]
    prompts: list[Message] = [user("say Pi")]
    provider = RecordingProvider(
        [assistant(echo_call("a")), assistant(echo_call("b")), assistant(text("Pi"))]
    )
    new = run_loop(prompts, AgentContext(SYSTEM_PROMPT, history, ToolRegistry([make_echo()])), provider)
    first, second, third = provider.requests
    assert first.messages is not history and first.messages is not prompts
    assert first.messages is not second.messages and second.messages is not third.messages
    assert all(request.messages is not new for request in provider.requests)
    # Uncopied requests show the live transcript if the loop handed it over: they would all have grown.
    assert provider.sizes == [2, 4, 6]
    assert [len(request.messages) for request in provider.requests] == [2, 4, 6]


@pytest.mark.lab7_2
def test_a_recorded_request_does_not_change_after_the_run() -> None:
    """After the run, does editing the returned messages, the history or a reply leave provider.requests as sent?"""
    history: list[Message] = [user("earlier")]
    reply = assistant(echo_call())
    provider = ScriptedProvider([reply, assistant(text("Pi"))])
    new = run_loop([user("say Pi")], AgentContext("", history, ToolRegistry([make_echo()])), provider)
    sent = copy.deepcopy(provider.requests)
    new.append(user("later"))
    history.append(user("later"))
    reply.content.append(text("edited"))
    call = reply.content[0]
    assert isinstance(call, ToolCall) and isinstance(call.arguments, dict)
    call.arguments["value"] = "edited"
    assert provider.requests == sent
    assert [len(request.messages) for request in provider.requests] == [2, 4]


@pytest.mark.lab7_2
def test_definitions_are_asked_for_afresh_for_every_request() -> None:
    """Is registry.definitions() called once per request, so a tool registered mid-run is offered next turn?"""
    registry = CountingRegistry()
    added = Journal().tool("later", steps=0)

    async def register_later(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        registry.register(added)
        return ToolOutput([text("registered")])

    registry.register(Tool("grow", "Register another tool", object_schema({}), register_later))
    provider = RecordingProvider(
        [assistant(ToolCall(id="a", name="grow", arguments={})), assistant(text("ok"))]
    )
    run_loop([user("grow")], AgentContext("", [], registry), provider)
    assert registry.definition_calls == 2
    first, second = provider.requests
    assert [d.name for d in first.tools] == ["grow"]
    assert [d.name for d in second.tools] == ["grow", "later"]
    assert first.tools is not second.tools


@pytest.mark.lab7_2
def test_a_reply_without_tool_calls_ends_the_loop_after_one_request() -> None:
    """Does a text-only reply end the run: one request, the prompt and the reply returned, one turn?"""
    events = Events()
    provider = ScriptedProvider([assistant(text("Pi")), assistant(text("never asked"))])
    new = run_loop([user("say Pi")], AgentContext("", [], ToolRegistry()), provider, events=events)
    assert len(provider.requests) == 1
    assert len(new) == 2
    assert events.types == [
        "agent_start",
        "turn_start",
        "message_end",
        "message_end",
        "turn_end",
        "agent_end",
    ]


@pytest.mark.lab7_2
@pytest.mark.parametrize("stop_reason", ["error", "aborted"])
def test_an_error_or_aborted_reply_ends_the_loop_without_running_its_tool_calls(stop_reason: str) -> None:
    """Does a reply that stopped on error/aborted end the run with turn_end then agent_end, its calls never run?"""
    body, events = EchoBody(), Events()
    failed = AssistantMessage(
        content=[echo_call()],
        stop_reason="error" if stop_reason == "error" else "aborted",
        timestamp=now_ms(),
    )
    provider = ScriptedProvider([failed, assistant(text("never asked"))])
    prompt = user("say Pi")
    new = run_loop([prompt], AgentContext("", [], ToolRegistry([make_echo(body)])), provider, events=events)
    assert body.count == 0
    assert new == [prompt, failed]
    assert len(provider.requests) == 1
    assert events.seen[-2:] == [AgentEvent("turn_end", message=failed), AgentEvent("agent_end")]
    assert events.types == [
        "agent_start",
        "turn_start",
        "message_end",
        "message_end",
        "turn_end",
        "agent_end",
    ]


@pytest.mark.lab7_2
@pytest.mark.parametrize("stop_reason", ["stop", "length"])
def test_a_stop_or_length_reply_with_tool_calls_still_runs_them(stop_reason: str) -> None:
    """Are the tool calls of a reply that stopped on "stop" or "length" run, answered, and followed by a turn?"""
    body = EchoBody()
    calling = assistant(echo_call(), stop_reason="stop" if stop_reason == "stop" else "length")
    provider = ScriptedProvider([calling, assistant(text("Pi"))])
    new = run_loop([user("say Pi")], AgentContext("", [], ToolRegistry([make_echo(body)])), provider)
    assert body.count == 1
    assert len(provider.requests) == 2
    assert [message.role for message in new] == ["user", "assistant", "toolResult", "assistant"]


@pytest.mark.lab7_2
@pytest.mark.parametrize("max_turns", [1, 2, 3])
def test_max_turns_caps_the_requests_and_the_last_calls_are_still_answered(max_turns: int) -> None:
    """With a model that always calls echo, is the provider asked max_turns times, every call answered, then agent_end?"""
    body, events = EchoBody(), Events()
    replies = [assistant(echo_call(f"call-{n}")) for n in range(1, 6)]
    provider = ScriptedProvider(replies)
    prompt = user("loop forever")
    context = AgentContext("", [], ToolRegistry([make_echo(body)]))
    new = run_loop([prompt], context, provider, events=events, max_turns=max_turns)
    assert len(provider.requests) == max_turns
    assert_pairing(new)
    assert body.count == max_turns
    assert len(new) == 1 + 2 * max_turns
    last = new[-1]
    assert isinstance(last, ToolResultMessage) and last.tool_call_id == f"call-{max_turns}"
    assert (events.types.count("turn_start"), events.types.count("turn_end")) == (max_turns, max_turns)
    assert events.types[-2:] == ["turn_end", "agent_end"]
    assert events.types.count("agent_end") == 1


@pytest.mark.lab7_2
def test_max_turns_defaults_to_ten() -> None:
    """Without max_turns, does a model that always calls a tool get asked exactly 10 times?"""
    provider = ScriptedProvider([assistant(echo_call(f"call-{n}")) for n in range(12)])
    new = run_loop([user("loop")], AgentContext("", [], ToolRegistry([make_echo()])), provider)
    assert len(provider.requests) == 10
    assert len(new) == 21


@pytest.mark.lab7_2
@pytest.mark.parametrize("max_turns", [0, -1])
def test_max_turns_below_one_is_refused_before_anything_happens(max_turns: int) -> None:
    """Does max_turns < 1 raise ValueError with no event emitted, no request sent and no tool run?"""
    body, events = EchoBody(), Events()
    provider = ScriptedProvider([assistant(echo_call())])
    context = AgentContext("", [], ToolRegistry([make_echo(body)]))
    with pytest.raises(ValueError):
        run_loop([user("hi")], context, provider, events=events, max_turns=max_turns)
    assert events.seen == []
    assert provider.requests == []
    assert body.count == 0


@pytest.mark.lab7_2
def test_the_events_of_a_multi_call_run_follow_the_upstream_order() -> None:
    """With history, two prompts and a reply with two calls, is every event where upstream Pi puts it?"""
    events = Events()
    history: list[Message] = [user("earlier")]
    prompts: list[Message] = [user("first"), user("second")]
    calling = assistant(text("two calls"), echo_call("a"), echo_call("b", "Py"))
    final = assistant(text("done"))
    provider = ScriptedProvider([calling, final])
    new = run_loop(prompts, AgentContext("", history, ToolRegistry([make_echo()])), provider, events=events)
    first, second = tool_calls(calling)
    assert events.seen == [
        AgentEvent("agent_start"),
        AgentEvent("turn_start"),
        AgentEvent("message_end", message=prompts[0]),
        AgentEvent("message_end", message=prompts[1]),
        AgentEvent("message_end", message=calling),
        AgentEvent("tool_execution_start", call=first),
        AgentEvent("tool_execution_end", call=first, message=new[3]),
        AgentEvent("message_end", message=new[3]),
        AgentEvent("tool_execution_start", call=second),
        AgentEvent("tool_execution_end", call=second, message=new[4]),
        AgentEvent("message_end", message=new[4]),
        AgentEvent("turn_end", message=calling),
        AgentEvent("turn_start"),
        AgentEvent("message_end", message=final),
        AgentEvent("turn_end", message=final),
        AgentEvent("agent_end"),
    ]


@pytest.mark.lab7_2
def test_the_loop_passes_the_signal_to_the_provider_and_the_tools() -> None:
    """Do the provider and every tool get the very signal the caller passed?"""
    body = EchoBody()
    controller = AbortController()
    provider = RecordingProvider([assistant(echo_call("a")), assistant(echo_call("b"))])
    context = AgentContext("", [], ToolRegistry([make_echo(body)]))
    run_loop([user("hi")], context, provider, signal=controller.signal)
    assert len(provider.signals) == 3
    assert all(signal is controller.signal for signal in provider.signals)
    assert [context.signal for context in body.contexts] == [controller.signal, controller.signal]


@pytest.mark.lab7_2
def test_a_signal_aborted_before_the_run_gives_one_aborted_reply() -> None:
    """With the signal already aborted, does the loop still ask once and stop on the `已取消` reply, script unused?"""
    body, events = EchoBody(), Events()
    controller = AbortController()
    controller.abort()
    scripted = assistant(echo_call())
    provider = ScriptedProvider([scripted])
    prompt = user("hi")
    before = now_ms()
    new = run_loop(
        [prompt],
        AgentContext("", [], ToolRegistry([make_echo(body)])),
        provider,
        signal=controller.signal,
        events=events,
    )
    after = now_ms()
    assert len(new) == 2 and new[0] is prompt
    reply = new[1]
    assert isinstance(reply, AssistantMessage) and reply is not scripted
    assert (reply.content, reply.stop_reason, reply.error_message) == ([], "aborted", CANCELLED)
    assert before <= reply.timestamp <= after
    assert reply.to_dict()["errorMessage"] == CANCELLED
    assert len(provider.requests) == 1 and provider.requests[0].messages == [prompt]
    assert body.count == 0
    assert events.types[-2:] == ["turn_end", "agent_end"]


@pytest.mark.lab7_2
def test_an_abort_during_a_tool_cancels_later_calls_and_the_next_request_comes_back_aborted() -> None:
    """After a tool presses stop: are later calls cancelled, is the provider still asked, and does its aborted reply end the run?"""
    body, stopper, events = EchoBody(), EchoBody(), Events()
    controller = AbortController()
    registry = ToolRegistry([make_echo(body), aborting_tool(controller, stopper)])
    calling = assistant(ToolCall(id="a", name="stop", arguments={"value": "halt"}), echo_call("b"))
    provider = ScriptedProvider([calling, assistant(text("never used"))])
    new = run_loop(
        [user("hi")], AgentContext("", [], registry), provider, signal=controller.signal, events=events
    )
    assert (stopper.count, body.count) == (1, 0)
    assert len(new) == 5
    assert isinstance(new[3], ToolResultMessage)
    assert stable_fields(new[3]) == failed_fields("b", "echo", CANCELLED)
    # The loop does not look at the signal itself: the next turn asks, and the provider answers "aborted".
    assert len(provider.requests) == 2
    assert provider.requests[1].messages == new[:4]
    last = new[4]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "aborted"
    assert events.seen[-2:] == [AgentEvent("turn_end", message=last), AgentEvent("agent_end")]
    assert (events.types.count("turn_start"), events.types.count("turn_end")) == (2, 2)
    assert_pairing(new)


@pytest.mark.lab7_2
def test_a_script_that_runs_out_ends_the_run_on_an_error_reply() -> None:
    """When the model keeps calling tools past its script, does the run end on the `没有更多脚本回复` error reply?"""
    events = Events()
    provider = ScriptedProvider([assistant(echo_call())])
    new = run_loop([user("hi")], AgentContext("", [], ToolRegistry([make_echo()])), provider, events=events)
    assert [message.role for message in new] == ["user", "assistant", "toolResult", "assistant"]
    last = new[3]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.error_message) == ("error", NO_MORE_REPLIES)
    assert len(provider.requests) == 2
    assert events.seen[-2:] == [AgentEvent("turn_end", message=last), AgentEvent("agent_end")]


@pytest.mark.lab7_2
@pytest.mark.parametrize("raise_on", ["agent_start", "message_end", "tool_execution_end", "turn_end"])
def test_an_exception_raised_by_emit_propagates(raise_on: str) -> None:
    """Does an error raised by emit reach the caller of run_agent_loop, and stop the run where it was raised?"""
    events = Events(raise_on)
    provider = ScriptedProvider([assistant(echo_call()), assistant(text("Pi"))])
    with pytest.raises(EmitFailed, match=f"emit failed on {raise_on}"):
        run_loop([user("hi")], AgentContext("", [], ToolRegistry([make_echo()])), provider, events=events)
    assert events.types.count(raise_on) == 1
    assert "agent_end" not in events.types
    if raise_on == "agent_start":
        assert provider.requests == []


@pytest.mark.lab7_2
def test_the_loop_works_without_emit() -> None:
    """Called without emit, does the chapter run still return its 4 messages?"""
    new, provider, _, _, _ = chapter_run(events=None)
    assert len(new) == 4 and len(provider.requests) == 2
