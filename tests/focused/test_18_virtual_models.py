"""Focused tests of checkpoint 18: a virtual model is routed to a physical model before every request.

The catalog, the routing and the loop's hook are checked on their own first, then through 13's real
Runtime: the selection and the router's state are metadata entries on the branch, committed to an
in-memory store that records every entry and, in one test, to a real JSONL file in `tmp_path` that a
new Runtime reopens. Ordering across awaits is held by `asyncio.Event` gates the test opens itself,
never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    MODEL_CHANGE_KEY,
    VIRTUAL_MODEL_STATE_KEY,
    AbortController,
    AbortSignal,
    AgentContext,
    AgentMessage,
    AgentRequest,
    AssistantMessage,
    ContextBudget,
    FailedResponse,
    JsonlSessionStore,
    JsonValue,
    MessageSessionEntry,
    MetadataSessionEntry,
    ModelCatalog,
    ModelRoute,
    ModelRouteRequest,
    ModelStream,
    PhysicalModel,
    PreparedRequest,
    PreviousResponse,
    RequestCause,
    ResolvedRoute,
    ResourceCatalog,
    RuntimeConfig,
    RuntimeDeps,
    ScriptedModel,
    ScriptedTurn,
    SelectedModel,
    SessionEntry,
    SessionStore,
    StopReason,
    SystemMessage,
    ThinkingLevel,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    VirtualModel,
    assistant_message,
    branch_selection,
    create_runtime,
    create_virtual_model_routing,
    find_latest_response,
    object_schema,
    request_reason,
    resolve_route,
    run_agent_loop,
    select_model,
    string_value,
    text,
    user_message,
    virtual_model_state,
)

# Shared helpers. Nothing here calls a lab piece at import time.

Turns = dict[str, int]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run one test body on a fresh event loop."""
    return asyncio.run(coroutine)


def reply(
    model: str, value: str, stop_reason: Any = "stop", calls: Sequence[ToolCall] = ()
) -> AssistantMessage:
    """A reply of `model` (provider `test`): one text block, then the calls."""
    return assistant_message([text(value), *calls], stop_reason, model=model, provider="test")


def failure(model: str, stop_reason: Any = "error", message: str = "boom") -> AssistantMessage:
    """A failed reply of `model`: no content, an error message."""
    return assistant_message([], stop_reason, error_message=message, model=model)


def scripted(model: str, turns: Sequence[ScriptedTurn]) -> ScriptedModel:
    """A scripted model whose every reply says it came from `model`."""
    return ScriptedModel(
        [
            dataclasses.replace(turn, model=model, provider="test")
            if isinstance(turn, AssistantMessage)
            else turn
            for turn in turns
        ]
    )


def call(call_id: str, value: str) -> ToolCall:
    """A call of the `echo` tool."""
    return ToolCall(id=call_id, name="echo", arguments={"value": value})


async def echo_execute(parameters: dict[str, Any], _context: ToolContext) -> ToolOutput[None]:
    return ToolOutput(content=[text(parameters["value"])])


ECHO: Tool[Any, Any] = Tool(
    name="echo", description="echo", schema=object_schema({"value": string_value}), execute=echo_execute
)


def metadata(entry_id: str, parent_id: str | None, key: str, value: JsonValue) -> MetadataSessionEntry:
    """A metadata entry of the branch, stamped 1."""
    return MetadataSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, key=key, value=value)


class PlainModel:
    """A model with no `thinking_level` keyword: it can serve any request that chooses no level."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    def stream(self, context: AgentContext, *, signal: AbortSignal | None = None) -> ModelStream:
        return self.inner.stream(context, signal=signal)


class RecordingModel:
    """Records the options and the very context object of every request."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.options: list[tuple[AbortSignal | None, ThinkingLevel | None]] = []
        self.contexts: list[AgentContext] = []

    def stream(
        self,
        context: AgentContext,
        *,
        signal: AbortSignal | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> ModelStream:
        self.options.append((signal, thinking_level))
        self.contexts.append(context)
        return self.inner.stream(context, signal=signal)


@dataclass
class FakeSession:
    """A request session over a list: `record` appends a metadata entry right away and remembers it."""

    entries: list[SessionEntry] = field(default_factory=list)
    records: list[tuple[str, JsonValue]] = field(default_factory=list)

    def branch(self) -> list[SessionEntry]:
        return list(self.entries)

    def record(self, key: str, value: JsonValue) -> None:
        self.records.append((key, value))
        self.entries.append(metadata(f"m{len(self.entries)}", None, key, value))


def empty_resources() -> ResourceCatalog:
    """A catalog with nothing in it."""
    return ResourceCatalog(resources=[], instructions=[], skills=[], templates=[])


class RecordingSessionStore:
    """A store that keeps a deep copy of every entry it accepts."""

    def __init__(self, initial: Sequence[SessionEntry] = ()) -> None:
        self.committed: list[SessionEntry] = copy.deepcopy(list(initial))

    async def append(self, entry: SessionEntry) -> None:
        self.committed.append(copy.deepcopy(entry))

    async def entries(self) -> list[SessionEntry]:
        return copy.deepcopy(self.committed)


def deps(session: SessionStore, *, first_id: int = 0, first_now: int = 100, **overrides: Any) -> RuntimeDeps:
    """The course's dependencies: ids e1, e2, …, clock 101, 102, …, a configured model nobody routes to."""
    counter = {"id": first_id, "now": first_now}

    def create_id() -> str:
        counter["id"] += 1
        return f"e{counter['id']}"

    def now() -> int:
        counter["now"] += 1
        return counter["now"]

    values: dict[str, Any] = {
        "model": scripted("configured-v1", []),
        "tools": ToolRegistry(),
        "session": session,
        "resources": empty_resources(),
        "create_id": create_id,
        "now": now,
    }
    values.update(overrides)
    return RuntimeDeps(**values)


def config(active_leaf_id: str | None = None) -> RuntimeConfig:
    """The course's configuration: four steps, a roomy budget where every message costs one token."""
    return RuntimeConfig(
        active_leaf_id=active_leaf_id,
        max_steps=4,
        context=ContextBudget(total=10_000, reserved_output=0, safety_margin=0, estimate_tokens=lambda _: 1),
    )


def counting_router(request: ModelRouteRequest[Turns]) -> ModelRoute[Turns]:
    """The chapter's `auto`: odd requests to fast-v1, even ones to smart-v1, counting on the branch."""
    count = (request.state or {}).get("count", 0) + 1
    return ModelRoute(model="fast-v1" if count % 2 == 1 else "smart-v1", state={"count": count})


def routed_catalog(turns_per_model: dict[str, Sequence[ScriptedTurn]], router: Any = None) -> ModelCatalog:
    """Physical models scripted per id, and the virtual model `auto`."""
    catalog = ModelCatalog()
    for model_id, turns in turns_per_model.items():
        catalog.register_physical(model_id, scripted(model_id, turns))
    catalog.register_virtual(VirtualModel(id="auto", route=router or counting_router))
    return catalog


def models_of(messages: Sequence[AgentMessage]) -> list[str]:
    """The `model` field of every assistant message: the dispatch record."""
    return [message.model for message in messages if isinstance(message, AssistantMessage)]


def describe(entry: SessionEntry) -> str:
    """`key:compact JSON` for a metadata entry, `type:role` for a message entry."""
    if isinstance(entry, MetadataSessionEntry):
        return f"{entry.key}:{json.dumps(entry.value, separators=(',', ':'))}"
    if isinstance(entry, MessageSessionEntry):
        return f"message:{entry.message.role}"
    return entry.type


# ## Lab 18.1 · the catalog, the previous reply, and resolving a route


@pytest.mark.lab18_1
@pytest.mark.edits("ModelCatalog._assert_free")
def test_the_catalog_tells_physical_from_virtual_and_hands_out_only_physical_models() -> None:
    """目录是否区分物理模型与虚拟模型：同一个 id 不能两者兼是、空白 id 被拒绝，而只有 physical() 交出
    Model？"""
    catalog = ModelCatalog()
    fast = scripted("fast-v1", [])
    catalog.register_physical("fast", fast)
    catalog.register_virtual(VirtualModel(id="auto", route=lambda _request: ModelRoute(model="fast")))

    found = catalog.physical("fast")
    assert found == PhysicalModel(id="fast", model=fast)
    assert found is not None and found.model is fast
    assert catalog.physical("auto") is None
    assert catalog.is_virtual("auto") is True
    assert catalog.is_virtual("fast") is False
    assert catalog.has("auto") is True
    assert catalog.has("fast") is True
    assert catalog.has("missing") is False

    with pytest.raises(ValueError) as taken:
        catalog.register_virtual(VirtualModel(id="fast", route=lambda _request: ModelRoute(model="fast")))
    assert str(taken.value) == "模型 fast 已经是物理模型"
    with pytest.raises(ValueError) as virtual:
        catalog.register_physical("auto", fast)
    assert str(virtual.value) == "模型 auto 已经是虚拟模型"
    with pytest.raises(ValueError) as again:
        catalog.register_physical("fast", scripted("other-v1", []))
    assert str(again.value) == "模型 fast 已经是物理模型"
    for blank in (" ", "", "\t"):
        with pytest.raises(ValueError) as empty:
            catalog.register_physical(blank, fast)
        assert str(empty.value) == "模型 id 不能为空"
    # A refused registration changes nothing: the first owner of each id keeps it.
    assert catalog.virtual("fast") is None
    assert catalog.physical("fast") == PhysicalModel(id="fast", model=fast)
    assert catalog.physical("auto") is None


@pytest.mark.lab18_1
@pytest.mark.edits("find_latest_response")
def test_previous_is_the_latest_successful_reply_and_failed_ones_are_skipped() -> None:
    """previous 是否只看最近一次成功的回复：error 与 aborted 的回复被跳过，以 toolUse 结束的回复算成功？"""
    good = reply("fast-v1", "ok")
    messages: list[AgentMessage] = [
        user_message("a"),
        good,
        user_message("b"),
        failure("smart-v1", "error", "boom"),
        failure("smart-v1", "aborted", "stop"),
    ]
    assert find_latest_response(messages) is good
    assert find_latest_response([user_message("only")]) is None
    assert find_latest_response([]) is None
    latest_tool = reply("smart-v1", "calling", "toolUse", [call("c1", "x")])
    assert find_latest_response([*messages, latest_tool]) is latest_tool
    length = reply("smart-v1", "cut", "length")
    assert find_latest_response([*messages, length, failure("fast-v1")]) is length


def success_flags() -> st.SearchStrategy[list[str]]:
    """Transcripts as role codes: u(ser), s(top), t(oolUse), l(ength), e(rror), a(borted), r(esult)."""
    return st.lists(st.sampled_from("ustlear"), max_size=8)


def transcript_of(codes: Sequence[str]) -> list[AgentMessage]:
    """The messages the codes describe, each assistant reply naming its position as its model."""
    stops: dict[str, StopReason] = {"s": "stop", "t": "toolUse", "l": "length", "e": "error", "a": "aborted"}
    messages: list[AgentMessage] = []
    for index, code in enumerate(codes):
        if code == "u":
            messages.append(user_message(f"u{index}"))
        elif code == "r":
            messages.append(ToolResultMessage(f"c{index}", "echo", [text("r")], None, False, index))
        else:
            messages.append(assistant_message([], stops[code], model=f"m{index}"))
    return messages


@pytest.mark.lab18_1
@pytest.mark.edits("find_latest_response")
@given(codes=success_flags())
def test_the_latest_response_is_the_last_reply_that_did_not_fail(codes: list[str]) -> None:
    """对任意 transcript，find_latest_response 是否恰好是最后一条既不是 error 也不是 aborted 的 assistant 回复
    （没有则为 None）？"""
    messages = transcript_of(codes)
    expected = [index for index, code in enumerate(codes) if code in "stl"]
    found = find_latest_response(messages)
    if not expected:
        assert found is None
    else:
        assert found is messages[expected[-1]]


@pytest.mark.lab18_1
@pytest.mark.edits("resolve_route")
def test_resolve_route_hands_on_previous_failed_and_state_and_accepts_only_physical_targets() -> None:
    """resolve_route 是否把虚拟选择换成物理模型、原样转达 previous / failed / state，并对路由到虚拟模型、未知
    id、未注册与 route 抛错各给出准确错误？"""

    async def body() -> None:
        catalog = ModelCatalog()
        fast = scripted("fast-v1", [])
        smart = scripted("smart-v1", [])
        catalog.register_physical("fast-v1", fast)
        catalog.register_physical("smart-v1", smart)
        seen: list[ModelRouteRequest[Turns]] = []

        def auto(request: ModelRouteRequest[Turns]) -> ModelRoute[Turns]:
            seen.append(request)
            turns = (request.state or {}).get("turns", 0) + 1
            return ModelRoute(
                model="smart-v1" if turns > 1 else "fast-v1", thinking_level="low", state={"turns": turns}
            )

        exploded = RuntimeError("router exploded")

        def broken(_request: ModelRouteRequest[Any]) -> ModelRoute[Any]:
            raise exploded

        catalog.register_virtual(VirtualModel(id="auto", route=auto))
        catalog.register_virtual(VirtualModel(id="loop", route=lambda _request: ModelRoute(model="auto")))
        catalog.register_virtual(VirtualModel(id="ghost", route=lambda _request: ModelRoute(model="nope")))
        catalog.register_virtual(VirtualModel(id="broken", route=broken))

        failed = failure("fast-v1", "error", "x")
        messages: list[AgentMessage] = [user_message("hi"), reply("fast-v1", "ok"), user_message("more")]
        first: ResolvedRoute[Turns] = await resolve_route(catalog, "auto", reason="user", messages=messages)
        assert first == ResolvedRoute(
            model=PhysicalModel(id="fast-v1", model=fast), thinking_level="low", state={"turns": 1}
        )
        assert first.model.model is fast
        assert seen[0] == ModelRouteRequest(
            model=SelectedModel(id="auto"),
            reason="user",
            previous=PreviousResponse(model=PhysicalModel(id="fast-v1", model=fast)),
            messages=messages,
        )
        # Optional fields stay out when there is nothing for them; the messages are the caller's own.
        assert (seen[0].failed, seen[0].state, seen[0].signal) == (None, None, None)
        assert seen[0].messages is messages

        second = await resolve_route(
            catalog, "auto", reason="retry", messages=[user_message("hi")], failed=failed, state={"turns": 1}
        )
        assert second.model.id == "smart-v1"
        assert second.model.model is smart
        assert seen[1].reason == "retry"
        assert seen[1].failed == FailedResponse(message=failed, model=PhysicalModel(id="fast-v1", model=fast))
        assert seen[1].failed is not None and seen[1].failed.message is failed
        assert seen[1].previous is None
        assert seen[1].state == {"turns": 1}

        errors = {
            "loop": "Virtual model loop routed to auto, which is another virtual model.",
            "ghost": "Virtual model ghost routed to nope, which is not a physical model.",
            "missing": "Virtual model missing is not registered.",
        }
        for virtual_id, expected in errors.items():
            with pytest.raises(ValueError) as refused:
                await resolve_route(catalog, virtual_id, reason="user", messages=messages)
            assert str(refused.value) == expected
        with pytest.raises(RuntimeError) as raised:
            await resolve_route(catalog, "broken", reason="user", messages=messages)
        assert raised.value is exploded

    run(body())


@pytest.mark.lab18_1
@pytest.mark.edits("resolve_route")
def test_resolve_route_skips_failed_replies_awaits_a_coroutine_router_and_passes_the_signal() -> None:
    """previous 是否跳过结尾的失败回复、failed 的模型不在目录里时只带 message，而 async 的 route 被
    await、signal 原样转达？"""

    async def body() -> None:
        catalog = ModelCatalog()
        fast = scripted("fast-v1", [])
        catalog.register_physical("fast-v1", fast)
        seen: list[ModelRouteRequest[Any]] = []

        async def later(request: ModelRouteRequest[Any]) -> ModelRoute[Any]:
            seen.append(request)
            return ModelRoute(model="fast-v1", thinking_level="high")

        catalog.register_virtual(VirtualModel(id="later", route=later))
        controller = AbortController()
        unknown = failure("routing", "error", "Virtual model x routed to y, which is not a physical model.")
        messages: list[AgentMessage] = [
            user_message("a"),
            reply("fast-v1", "ok"),
            failure("smart-v1"),
            unknown,
        ]
        resolved: ResolvedRoute[Any] = await resolve_route(
            catalog, "later", reason="retry", messages=messages, failed=unknown, signal=controller.signal
        )
        assert resolved == ResolvedRoute(model=PhysicalModel(id="fast-v1", model=fast), thinking_level="high")
        assert resolved.state is None
        assert seen[0].previous == PreviousResponse(model=PhysicalModel(id="fast-v1", model=fast))
        assert seen[0].failed == FailedResponse(message=unknown)
        assert seen[0].signal is controller.signal
        # A reply whose model the catalog does not know gives no previous at all.
        await resolve_route(catalog, "later", reason="user", messages=[reply("elsewhere-v9", "hi")])
        assert seen[1].previous is None

    run(body())


# ## Lab 18.2 · the loop asks the hook before every request


@pytest.mark.lab18_2
@pytest.mark.edits("ask_prepare_request")
def test_the_loop_asks_the_hook_before_every_request_and_only_its_physical_model_is_sent_them() -> None:
    """loop 是否在每次请求前调用 prepare_request（第一次是 user，工具结果之后是 continuation），而只有钩子换入
    的物理模型收到请求？"""

    async def body() -> None:
        configured = scripted("configured-v1", [reply("configured-v1", "never")])
        fast_script = scripted(
            "fast-v1", [reply("fast-v1", "calling", "toolUse", [call("c1", "x")]), reply("fast-v1", "done")]
        )
        # No thinking_level keyword at all: the loop must not pass one when the hook chose none.
        fast = PlainModel(fast_script)
        requests: list[tuple[str, AgentContext, Any]] = []

        def hook(request: AgentRequest, *, signal: AbortSignal | None = None) -> PreparedRequest:
            requests.append((request.reason, copy.deepcopy(request.context), request.model))
            return PreparedRequest(model=fast)

        result = await run_agent_loop(
            model=configured,
            tools=ToolRegistry([ECHO]),
            context=AgentContext(messages=[user_message("go")]),
            prepare_request=hook,
        )
        assert result.reason == "stop"
        assert [reason for reason, _context, _model in requests] == ["user", "continuation"]
        assert all(model is configured for _reason, _context, model in requests)
        second = requests[1][1]
        assert len(second.messages) == 3
        assert [tool.name for tool in second.tools or []] == ["echo"]
        assert configured.requests == []
        assert len(fast_script.requests) == 2
        assert models_of(result.messages) == ["fast-v1", "fast-v1"]

    run(body())


@pytest.mark.lab18_2
@pytest.mark.edits("request_reason")
def test_request_reason_reads_the_tail_after_the_last_reply_and_a_rerun_failure_is_a_retry() -> None:
    """request_reason 是否只看最后一条 assistant 之后的部分：有 user 是 user，以失败回复结尾是带 failed 的
    retry，其余是 continuation？"""

    async def body() -> None:
        failed = failure("fast-v1", "error", "rate limited")
        go = user_message("go")
        assert request_reason([go, failed]) == RequestCause(reason="retry", failed=failed)
        assert request_reason([go, failed]).failed is failed
        assert request_reason([go]) == RequestCause(reason="user")
        assert request_reason([go, failed, user_message("again")]) == RequestCause(reason="user")
        assert request_reason([go, reply("fast-v1", "ok")]) == RequestCause(reason="continuation")
        aborted = failure("fast-v1", "aborted", "stopped")
        assert request_reason([go, aborted]) == RequestCause(reason="retry", failed=aborted)
        # Results after a failed reply: the loop goes on from them, nothing is retried.
        skipped = ToolResultMessage("c1", "echo", [text("skipped")], None, True, 3)
        errored = assistant_message([call("c1", "x")], "error", error_message="cut", model="fast-v1")
        assert request_reason([go, errored, skipped]) == RequestCause(reason="continuation")
        result = ToolResultMessage("c1", "echo", [text("x")], None, False, 3)
        calling = reply("fast-v1", "calling", "toolUse", [call("c1", "x")])
        assert request_reason([go, calling, result]) == RequestCause(reason="continuation")

        model = scripted("fast-v1", [reply("fast-v1", "recovered")])
        reasons: list[str] = []

        def hook(request: AgentRequest, *, signal: AbortSignal | None = None) -> None:
            reasons.append(f"{request.reason}:{request.failed.error_message if request.failed else ''}")

        retried = await run_agent_loop(
            model=model,
            tools=ToolRegistry(),
            context=AgentContext(messages=[go, failed]),
            prepare_request=hook,
        )
        assert reasons == ["retry:rate limited"]
        assert retried.reason == "stop"
        assert models_of(retried.messages) == ["fast-v1", "fast-v1"]

    run(body())


def reason_codes() -> st.SearchStrategy[list[str]]:
    """Transcripts as codes: u(ser), s(top), t(oolUse), e(rror), a(borted), r(esult), y (system)."""
    return st.lists(st.sampled_from("usteary"), max_size=8)


@pytest.mark.lab18_2
@pytest.mark.edits("request_reason")
@given(codes=reason_codes())
def test_the_reason_depends_only_on_what_follows_the_last_reply(codes: list[str]) -> None:
    """对任意 transcript，request_reason 是否只由最后一条 assistant 之后的消息决定，且 retry 时 failed 就是那
    条回复本身？"""
    stops: dict[str, StopReason] = {"s": "stop", "t": "toolUse", "e": "error", "a": "aborted"}
    messages: list[AgentMessage] = []
    for index, code in enumerate(codes):
        if code == "u":
            messages.append(user_message(f"u{index}"))
        elif code == "r":
            messages.append(ToolResultMessage(f"c{index}", "echo", [text("r")], None, False, index))
        elif code == "y":
            messages.append(SystemMessage(content="", timestamp=index))
        else:
            messages.append(assistant_message([], stops[code], model=f"m{index}"))
    last = max((index for index, code in enumerate(codes) if code in "stea"), default=None)
    tail = codes if last is None else codes[last + 1 :]
    found = request_reason(messages)
    if "u" in tail:
        assert found == RequestCause(reason="user")
    elif last is not None and not tail and codes[last] in "ea":
        assert found.reason == "retry"
        assert found.failed is messages[last]
    else:
        assert found == RequestCause(reason="continuation")


@pytest.mark.lab18_2
@pytest.mark.edits("ask_prepare_request")
def test_a_hook_that_raises_ends_the_request_with_an_error_reply_and_no_model_is_asked() -> None:
    """钩子抛错（同步或 async）时，本次请求是否以一条带原因的 error 回复结束，配置的模型一次也没被请
    求，transcript 只多这一条？"""

    async def body() -> None:
        go = user_message("go")
        why = "Virtual model auto routed to nope, which is not a physical model."
        for asynchronous in (False, True):
            untouched = scripted("fast-v1", [reply("fast-v1", "never")])

            def raising(request: AgentRequest, *, signal: AbortSignal | None = None) -> PreparedRequest:
                raise ValueError(why)

            async def rejecting(
                request: AgentRequest, *, signal: AbortSignal | None = None
            ) -> PreparedRequest:
                raise ValueError(why)

            broken = await run_agent_loop(
                model=untouched,
                tools=ToolRegistry(),
                context=AgentContext(messages=[go]),
                prepare_request=rejecting if asynchronous else raising,
            )
            assert broken.reason == "error"
            assert untouched.requests == []
            last = broken.messages[-1]
            assert isinstance(last, AssistantMessage)
            assert last.stop_reason == "error"
            assert last.error_message == why
            assert broken.messages[:-1] == [go]

    run(body())


@pytest.mark.lab18_2
@pytest.mark.edits("ask_prepare_request")
def test_thinking_level_and_signal_reach_the_physical_model_and_the_transcript_stays() -> None:
    """thinking_level 与同一个 signal 是否随请求传给钩子换入的物理模型，钩子看到的 context 就是本次请求本身，
    而 transcript 不被改写？"""

    async def body() -> None:
        recording = RecordingModel(scripted("smart-v1", [reply("smart-v1", "ok")]))
        controller = AbortController()
        seen: list[AgentContext] = []
        signals: list[AbortSignal | None] = []
        messages: list[AgentMessage] = [user_message("go")]

        async def hook(request: AgentRequest, *, signal: AbortSignal | None = None) -> PreparedRequest:
            seen.append(request.context)
            signals.append(signal)
            return PreparedRequest(model=recording, thinking_level="high")

        result = await run_agent_loop(
            model=scripted("configured-v1", []),
            tools=ToolRegistry(),
            signal=controller.signal,
            context=AgentContext(messages=messages),
            prepare_request=hook,
        )
        assert result.reason == "stop"
        assert recording.options == [(controller.signal, "high")]
        assert recording.options[0][0] is controller.signal
        assert signals[0] is controller.signal
        # The hook is shown the very request the model is sent: it chooses who answers, not what is sent.
        assert recording.contexts[0] is seen[0]
        assert seen[0].messages == messages
        assert result.messages[:1] == messages
        assert messages == [result.messages[0]] and len(messages) == 1

        # A hook that answers None (or leaves the model out) keeps the configured model, with no level.
        kept = RecordingModel(scripted("configured-v1", [reply("configured-v1", "kept")]))

        def nothing(request: AgentRequest, *, signal: AbortSignal | None = None) -> PreparedRequest | None:
            return None

        level_only = RecordingModel(scripted("configured-v1", [reply("configured-v1", "level")]))

        def level(request: AgentRequest, *, signal: AbortSignal | None = None) -> PreparedRequest:
            return PreparedRequest(thinking_level="minimal")

        for model, hook_of in ((kept, nothing), (level_only, level)):
            outcome = await run_agent_loop(
                model=model,
                tools=ToolRegistry(),
                context=AgentContext(messages=[user_message("go")]),
                prepare_request=hook_of,
            )
            assert outcome.reason == "stop"
        assert kept.options == [(None, None)]
        assert level_only.options == [(None, "minimal")]

    run(body())


# ## Lab 18.3 · the selection and the state live on the branch


@pytest.mark.lab18_3
@pytest.mark.edits("branch_selection", "virtual_model_state")
def test_the_last_model_change_selects_and_the_state_is_the_latest_of_that_model() -> None:
    """分支上最后一条 model_change 是否决定选中的模型，状态是否按模型 id 取最近一条，而 key 不对或值不是
    {modelId} 的 entry 被忽略？"""
    branch: list[SessionEntry] = [
        metadata("m1", None, MODEL_CHANGE_KEY, {"modelId": "auto"}),
        metadata("m2", "m1", VIRTUAL_MODEL_STATE_KEY, {"modelId": "auto", "state": {"turns": 1}}),
        metadata("m3", "m2", VIRTUAL_MODEL_STATE_KEY, {"modelId": "other", "state": {"turns": 9}}),
        metadata("m4", "m3", "unrelated", {"modelId": "nope"}),
        metadata("m5", "m4", MODEL_CHANGE_KEY, {"modelId": "fast-v1"}),
        metadata("m6", "m5", VIRTUAL_MODEL_STATE_KEY, {"modelId": "auto", "state": {"turns": 2}}),
    ]
    assert branch_selection(branch) == "fast-v1"
    assert branch_selection(branch[:4]) == "auto"
    assert branch_selection([]) is None
    assert virtual_model_state(branch, "auto") == {"turns": 2}
    assert virtual_model_state(branch, "other") == {"turns": 9}
    assert virtual_model_state(branch, "missing") is None
    assert branch_selection([metadata("x", None, MODEL_CHANGE_KEY, "auto")]) is None, "值必须是 {modelId}"
    assert branch_selection([metadata("x", None, MODEL_CHANGE_KEY, {"modelId": 7})]) is None
    later_message = MessageSessionEntry(id="m7", parent_id="m6", timestamp=1, message=user_message("hi"))
    assert branch_selection([*branch, later_message]) == "fast-v1"
    assert virtual_model_state([*branch, later_message], "auto") == {"turns": 2}


def metadata_entries() -> st.SearchStrategy[list[SessionEntry]]:
    """Branches of model_change and state entries for a few model ids, with some unrelated keys."""
    ids = st.sampled_from(["auto", "fast-v1", "other"])
    change = st.builds(lambda model_id: (MODEL_CHANGE_KEY, {"modelId": model_id}), ids)
    state = st.builds(
        lambda model_id, count: (VIRTUAL_MODEL_STATE_KEY, {"modelId": model_id, "state": {"count": count}}),
        ids,
        st.integers(0, 5),
    )
    noise = st.builds(lambda model_id: ("unrelated", {"modelId": model_id}), ids)
    return st.lists(st.one_of(change, state, noise), max_size=8).map(
        lambda pairs: [metadata(f"m{index}", None, key, value) for index, (key, value) in enumerate(pairs)]
    )


@pytest.mark.lab18_3
@pytest.mark.edits("branch_selection", "virtual_model_state")
@given(branch=metadata_entries())
def test_reading_the_branch_agrees_with_replaying_it_in_order(branch: list[SessionEntry]) -> None:
    """对任意一串 metadata，branch_selection 与 virtual_model_state 是否等于从头重放、后写覆盖先写的结果？"""
    selected: str | None = None
    states: dict[str, JsonValue] = {}
    for entry in branch:
        assert isinstance(entry, MetadataSessionEntry) and isinstance(entry.value, dict)
        model_id = entry.value["modelId"]
        assert isinstance(model_id, str)
        if entry.key == MODEL_CHANGE_KEY:
            selected = model_id
        elif entry.key == VIRTUAL_MODEL_STATE_KEY:
            states[model_id] = entry.value["state"]
    assert branch_selection(branch) == selected
    for model_id in ("auto", "fast-v1", "other", "missing"):
        assert virtual_model_state(branch, model_id) == states.get(model_id)


@pytest.mark.lab18_3
@pytest.mark.edits(
    "VirtualModelRouting.prepare_request", "VirtualModelRouting._resolve", "VirtualModelRouting.route_direct"
)
def test_state_is_recorded_only_on_change_a_physical_pick_skips_the_router_direct_ignores_state() -> None:
    """路由是否只在状态变化时记录 virtual_model_state、选中物理模型时直接派发不问路由器，而 direct 请求既不读
    也不写状态？"""

    async def body() -> None:
        catalog = ModelCatalog()
        fast = scripted("fast-v1", [])
        smart = scripted("smart-v1", [])
        catalog.register_physical("fast-v1", fast)
        catalog.register_physical("smart-v1", smart)
        states: list[Any] = []

        def auto(request: ModelRouteRequest[Turns]) -> ModelRoute[Turns]:
            states.append(copy.deepcopy(request.state))
            turns = (request.state or {}).get("turns", 0)
            return ModelRoute(
                model="smart-v1" if turns >= 1 else "fast-v1", state={"turns": min(turns + 1, 1)}
            )

        catalog.register_virtual(VirtualModel(id="auto", route=auto))
        routing = create_virtual_model_routing(catalog, default_model_id="auto")
        session = FakeSession()

        def request(messages: list[AgentMessage]) -> AgentRequest:
            return AgentRequest(context=AgentContext(messages=messages), model=fast, reason="user")

        first = await routing.prepare_request(request([user_message("a")]), session)
        assert first.model is fast
        assert session.records == [(VIRTUAL_MODEL_STATE_KEY, {"modelId": "auto", "state": {"turns": 1}})]
        second = await routing.prepare_request(
            request([user_message("a"), reply("fast-v1", "ok"), user_message("b")]), session
        )
        assert second.model is smart
        assert len(session.records) == 1, "状态没变就不再记录"
        assert states == [None, {"turns": 1}]

        direct = await routing.route_direct(session, [user_message("summary")])
        assert direct.model.id == "fast-v1", "direct 不读状态，所以回到第一跳"
        assert direct.model.model is fast
        assert len(session.records) == 1, "direct 不写状态"
        assert states[-1] is None

        session.entries.append(metadata("m9", None, MODEL_CHANGE_KEY, {"modelId": "smart-v1"}))
        physical = await routing.prepare_request(request([user_message("c")]), session)
        assert physical.model is smart
        assert physical.thinking_level is None
        assert len(states) == 3, "选中物理模型时不问路由器"
        assert await routing.route_direct(session, []) == ResolvedRoute(
            model=PhysicalModel("smart-v1", smart)
        )
        assert len(states) == 3
        assert len(session.records) == 1

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits("VirtualModelRouting.prepare_request", "VirtualModelRouting._resolve")
def test_the_hook_passes_reason_failed_signal_and_thinking_level_through_the_router() -> None:
    """prepare_request 是否把请求的 reason、failed、messages 与 signal 交给路由器，并把路由的 thinking_level
    交回给 loop？"""

    async def body() -> None:
        catalog = ModelCatalog()
        fast = scripted("fast-v1", [])
        catalog.register_physical("fast-v1", fast)
        seen: list[ModelRouteRequest[Any]] = []

        async def thoughtful(route_request: ModelRouteRequest[Any]) -> ModelRoute[Any]:
            seen.append(route_request)
            return ModelRoute(model="fast-v1", thinking_level="medium")

        catalog.register_virtual(VirtualModel(id="thoughtful", route=thoughtful))
        routing = create_virtual_model_routing(catalog, default_model_id="fast-v1")
        session = FakeSession([metadata("m0", None, MODEL_CHANGE_KEY, {"modelId": "thoughtful"})])
        failed = failure("fast-v1", "error", "rate limited")
        messages: list[AgentMessage] = [user_message("go"), failed]
        controller = AbortController()
        prepared = await routing.prepare_request(
            AgentRequest(context=AgentContext(messages=messages), model=fast, reason="retry", failed=failed),
            session,
            signal=controller.signal,
        )
        assert prepared == PreparedRequest(model=fast, thinking_level="medium")
        assert seen[0].reason == "retry"
        assert seen[0].messages is messages
        assert seen[0].failed == FailedResponse(message=failed, model=PhysicalModel("fast-v1", fast))
        assert seen[0].signal is controller.signal
        assert seen[0].model == SelectedModel(id="thoughtful")
        assert session.records == [], "路由没有返回 state 就什么也不记录"

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits(
    "RuntimeImpl._persist_metadata", "RuntimeImpl.append_metadata", "RuntimeImpl._request_session"
)
def test_through_the_runtime_selection_and_state_are_branch_metadata_restored_on_reopen() -> None:
    """经 Runtime：model_change 与路由状态是否都是分支上的 metadata entry，状态跟在本轮消息之后落盘，重新打开
    后从 active path 还原选择与状态？"""

    async def body() -> None:
        catalog = routed_catalog(
            {
                "fast-v1": [reply("fast-v1", "one"), reply("fast-v1", "three")],
                "smart-v1": [reply("smart-v1", "two")],
            }
        )
        routing = create_virtual_model_routing(catalog, default_model_id="fast-v1")
        store = RecordingSessionStore()
        runtime = await create_runtime(config(), deps(store, prepare_request=routing.prepare_request))
        await select_model(runtime, catalog, "auto")
        with pytest.raises(ValueError) as missing:
            await select_model(runtime, catalog, "missing")
        assert str(missing.value) == "模型 missing 未注册"
        first = await runtime.prompt("first")
        second = await runtime.prompt("second")
        await runtime.dispose()

        assert models_of(first.messages) == ["fast-v1"]
        assert models_of(second.messages) == ["fast-v1", "smart-v1"]
        assert [describe(entry) for entry in store.committed] == [
            'model_change:{"modelId":"auto"}',
            "message:user",
            "message:assistant",
            'virtual_model_state:{"modelId":"auto","state":{"count":1}}',
            "message:user",
            "message:assistant",
            'virtual_model_state:{"modelId":"auto","state":{"count":2}}',
        ]
        assert [entry.parent_id for entry in store.committed] == [None, "e1", "e2", "e3", "e4", "e5", "e6"]
        assert [entry.id for entry in store.committed] == [f"e{index}" for index in range(1, 8)]

        reopened = await create_runtime(
            config("e7"),
            deps(
                store,
                first_id=7,
                first_now=107,
                prepare_request=create_virtual_model_routing(
                    routed_catalog({"fast-v1": [reply("fast-v1", "three")], "smart-v1": []}),
                    default_model_id="fast-v1",
                ).prepare_request,
            ),
        )
        third = await reopened.prompt("third")
        await reopened.dispose()
        assert models_of(third.messages) == ["fast-v1", "smart-v1", "fast-v1"], (
            "恢复出 count=2，第三次路由回到 fast"
        )
        assert store.committed[-1] == MetadataSessionEntry(
            id="e10",
            parent_id="e9",
            timestamp=110,
            key=VIRTUAL_MODEL_STATE_KEY,
            value={"modelId": "auto", "state": {"count": 3}},
        )

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits("RuntimeImpl._persist_metadata", "RuntimeImpl._request_session")
def test_a_failed_routing_writes_no_state_and_the_next_turn_routes_again() -> None:
    """路由失败时，本轮是否以带原因的 error 回复结束且不写状态，而下一轮仍从分支上的选择重新路由（原因是 user
    而不是 retry）？"""

    async def body() -> None:
        attempts: list[str] = []

        def flaky(request: ModelRouteRequest[Turns]) -> ModelRoute[Turns]:
            attempts.append(request.reason)
            if len(attempts) == 1:
                raise RuntimeError("router exploded")
            return ModelRoute(model="fast-v1", state={"count": len(attempts)})

        catalog = routed_catalog({"fast-v1": [reply("fast-v1", "ok")], "smart-v1": []}, flaky)
        routing = create_virtual_model_routing(catalog, default_model_id="auto")
        store = RecordingSessionStore()
        runtime = await create_runtime(config(), deps(store, prepare_request=routing.prepare_request))
        failed = await runtime.prompt("first")
        assert failed.reason == "error"
        last = failed.messages[-1]
        assert isinstance(last, AssistantMessage) and last.error_message == "router exploded"
        assert [entry.type for entry in store.committed] == ["message", "message"]

        recovered = await runtime.prompt("second")
        assert recovered.reason == "stop"
        assert [entry.type for entry in store.committed].count("metadata") == 1
        assert describe(store.committed[-1]) == 'virtual_model_state:{"modelId":"auto","state":{"count":2}}'
        assert attempts == ["user", "user"]
        await runtime.dispose()

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits("RuntimeImpl._request_session", "RuntimeImpl._persist_metadata")
def test_a_later_request_of_the_same_turn_sees_the_state_recorded_but_not_yet_written() -> None:
    """同一轮 prompt 里工具往返之后的第二次请求，是否经 branch() 读到第一次请求刚记录、尚未落盘的状态，而两条
    状态都跟在本轮全部消息之后落盘？"""

    async def body() -> None:
        catalog = routed_catalog(
            {
                "fast-v1": [reply("fast-v1", "calling", "toolUse", [call("c1", "x")])],
                "smart-v1": [reply("smart-v1", "done")],
            }
        )
        branches: list[list[str]] = []
        routing = create_virtual_model_routing(catalog, default_model_id="auto")

        async def hook(
            request: AgentRequest, session: Any, *, signal: AbortSignal | None = None
        ) -> PreparedRequest:
            branches.append([describe(entry) for entry in session.branch()])
            return await routing.prepare_request(request, session, signal=signal)

        store = RecordingSessionStore()
        runtime = await create_runtime(
            config(), deps(store, tools=ToolRegistry([ECHO]), prepare_request=hook)
        )
        result = await runtime.prompt("go")
        await runtime.dispose()
        assert result.reason == "stop"
        assert models_of(result.messages) == ["fast-v1", "smart-v1"]
        assert branches == [[], ['virtual_model_state:{"modelId":"auto","state":{"count":1}}']]
        assert [describe(entry) for entry in store.committed] == [
            "message:user",
            "message:assistant",
            "message:toolResult",
            "message:assistant",
            'virtual_model_state:{"modelId":"auto","state":{"count":1}}',
            'virtual_model_state:{"modelId":"auto","state":{"count":2}}',
        ]
        assert [entry.parent_id for entry in store.committed] == [None, "e1", "e2", "e3", "e4", "e5"]
        # The view is a copy: changing what branch() gave changes nothing the Runtime keeps.
        assert runtime.get_active_leaf_id() == "e6"

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits("RuntimeImpl.append_metadata")
def test_a_model_change_waits_in_the_prompt_queue_and_a_closed_runtime_refuses_it() -> None:
    """append_metadata 是否与 prompt 排在同一条队列：运行中途切换模型的 model_change 等本轮落盘后才写、parent
    是本轮最后一条，dispose 后被拒绝？"""

    async def body() -> None:
        gate = asyncio.Event()
        started = asyncio.Event()

        class GatedModel:
            """Answers only once the test opens the gate."""

            def __init__(self) -> None:
                self.inner = scripted("fast-v1", [reply("fast-v1", "late")])

            def stream(self, context: AgentContext, *, signal: AbortSignal | None = None) -> ModelStream:
                started.set()
                inner = self.inner

                class Waiting:
                    def __aiter__(self) -> Any:
                        async def events() -> Any:
                            await gate.wait()
                            async for event in inner.stream(context, signal=signal):
                                yield event

                        return events()

                    async def result(self) -> AssistantMessage:
                        await gate.wait()
                        return reply("fast-v1", "late")

                return Waiting()

        catalog = ModelCatalog()
        catalog.register_physical("fast-v1", GatedModel())
        catalog.register_physical("smart-v1", scripted("smart-v1", [reply("smart-v1", "next")]))
        routing = create_virtual_model_routing(catalog, default_model_id="fast-v1")
        store = RecordingSessionStore()
        runtime = await create_runtime(config(), deps(store, prepare_request=routing.prepare_request))
        prompting = runtime.prompt("first")
        await started.wait()
        # Decided now, written after the turn: the call takes its place in the queue at once.
        changing = select_model(runtime, catalog, "smart-v1")
        assert store.committed == []
        gate.set()
        await prompting
        await changing
        assert [describe(entry) for entry in store.committed] == [
            "message:user",
            "message:assistant",
            'model_change:{"modelId":"smart-v1"}',
        ]
        assert store.committed[-1].parent_id == "e2"
        second = await runtime.prompt("second")
        assert models_of(second.messages) == ["fast-v1", "smart-v1"]
        await runtime.dispose()
        with pytest.raises(RuntimeError) as closed:
            await select_model(runtime, catalog, "fast-v1")
        assert str(closed.value) == "Runtime 已 dispose"

        class StandIn:
            """A hand-written Runtime stand-in with no append_metadata."""

        with pytest.raises(TypeError) as unsupported:
            await select_model(StandIn(), catalog, "fast-v1")  # type: ignore[arg-type]
        assert str(unsupported.value) == "Runtime 不支持 appendMetadata"

    run(body())


@pytest.mark.lab18_3
@pytest.mark.edits("RuntimeImpl._persist_metadata", "RuntimeImpl.append_metadata")
def test_a_jsonl_session_on_disk_reopens_with_its_selection_and_state(tmp_path: Path) -> None:
    """写进真实 JSONL 文件的选择与路由状态，是否能由新的 Runtime 从 active path 读回，并让下一次路由从恢复出的
    count 继续？"""

    async def body() -> None:
        file = tmp_path / "session.jsonl"
        store = await JsonlSessionStore.open(str(file))
        catalog = routed_catalog({"fast-v1": [reply("fast-v1", "one")], "smart-v1": []})
        routing = create_virtual_model_routing(catalog, default_model_id="fast-v1")
        runtime = await create_runtime(config(), deps(store, prepare_request=routing.prepare_request))
        await select_model(runtime, catalog, "auto")
        await runtime.prompt("first")
        await runtime.dispose()
        lines = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
        assert [line["type"] for line in lines] == ["metadata", "message", "message", "metadata"]
        assert lines[0]["value"] == {"modelId": "auto"}
        assert lines[-1]["value"] == {"modelId": "auto", "state": {"count": 1}}

        again = await JsonlSessionStore.open(str(file))
        reopened_catalog = routed_catalog({"fast-v1": [], "smart-v1": [reply("smart-v1", "two")]})
        reopened = await create_runtime(
            config("e4"),
            deps(
                again,
                first_id=4,
                first_now=104,
                prepare_request=create_virtual_model_routing(
                    reopened_catalog, default_model_id="fast-v1"
                ).prepare_request,
            ),
        )
        second = await reopened.prompt("second")
        await reopened.dispose()
        assert models_of(second.messages) == ["fast-v1", "smart-v1"]
        last = json.loads(file.read_text(encoding="utf-8").splitlines()[-1])
        assert last == {
            "id": "e7",
            "parentId": "e6",
            "timestamp": 107,
            "type": "metadata",
            "key": VIRTUAL_MODEL_STATE_KEY,
            "value": {"modelId": "auto", "state": {"count": 2}},
        }

    run(body())
