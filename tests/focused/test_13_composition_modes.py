"""Focused tests of checkpoint 13: one Runtime that joins session, context, resources, extensions and Agent.

Concurrency is ordered with asyncio.Event gates the test opens itself, never with sleeps. Resources are
discovered from real files, sessions are also kept in real JSONL files, and the modes write to real
text streams; every folder is a pytest `tmp_path`.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    RESOURCE_SECTION,
    AbortController,
    AbortSignal,
    Agent,
    AgentContext,
    AgentMessage,
    AgentRunResult,
    AgentState,
    AssistantMessage,
    ContextBudget,
    ContextProjectionSnapshot,
    ExtensionHost,
    ExtensionSource,
    JsonlSessionStore,
    MessageSessionEntry,
    ModelStream,
    ResourceCatalog,
    RuntimeConfig,
    RuntimeControl,
    RuntimeDeps,
    ScriptedModel,
    SessionEntry,
    SessionStore,
    SystemMessage,
    SystemState,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    assistant_message,
    create_context_projecting_model,
    create_extension_host,
    create_runtime,
    current_system_message,
    current_system_prompt,
    discover_resources,
    import_extension_file,
    load_extension,
    object_schema,
    run_mode,
    system_patch,
    temporary_entries,
    text,
    text_of,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time.


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run one test body on a fresh event loop."""
    return asyncio.run(coroutine)


def empty_resources() -> ResourceCatalog:
    """A catalog with nothing in it."""
    return ResourceCatalog(resources=[], instructions=[], skills=[], templates=[])


def budget(total: float = 1_000, reserved_output: float = 0, safety_margin: float = 0) -> ContextBudget:
    """The chapter's deterministic budget: every message or string costs one token."""
    return ContextBudget(
        total=total, reserved_output=reserved_output, safety_margin=safety_margin, estimate_tokens=lambda _: 1
    )


def config(active_leaf_id: str | None, *, system_prompt: str | None = "BASE SYSTEM") -> RuntimeConfig:
    """The course's configuration: base prompt BASE SYSTEM, eight steps, a roomy budget."""
    return RuntimeConfig(
        active_leaf_id=active_leaf_id, context=budget(), system_prompt=system_prompt, max_steps=8
    )


def message_entry(entry_id: str, parent_id: str | None, message: AgentMessage) -> MessageSessionEntry:
    """A committed message entry, holding its own copy of the message."""
    return MessageSessionEntry(id=entry_id, parent_id=parent_id, timestamp=1, message=copy.deepcopy(message))


def system(content: str, sections: dict[str, str | None] | None = None) -> SystemMessage:
    """A system message stamped 0, as the course writes them."""
    return SystemMessage(content=content, timestamp=0, sections=sections)


def answer(value: str) -> AssistantMessage:
    """A plain-text assistant reply."""
    return assistant_message([text(value)])


def role_of(entry: SessionEntry) -> str:
    """The message role of a message entry, the entry type otherwise."""
    return entry.message.role if isinstance(entry, MessageSessionEntry) else entry.type


def text_of_entry(entry: SessionEntry) -> str:
    """The text of a message entry, the entry type otherwise."""
    return text_of(entry.message) if isinstance(entry, MessageSessionEntry) else entry.type


BeforeCommit = Callable[[SessionEntry, int], Awaitable[None] | None]


class RecordingSessionStore:
    """A store that records every append call (even failed ones) and commits after an optional hook."""

    def __init__(
        self, initial: Sequence[SessionEntry] = (), before_commit: BeforeCommit | None = None
    ) -> None:
        self.append_calls: list[SessionEntry] = []
        self.committed: list[SessionEntry] = copy.deepcopy(list(initial))
        self._before_commit = before_commit
        self._calls_seen = asyncio.Condition()

    async def append(self, entry: SessionEntry) -> None:
        snapshot = copy.deepcopy(entry)
        index = len(self.append_calls)
        self.append_calls.append(snapshot)
        async with self._calls_seen:
            self._calls_seen.notify_all()
        if self._before_commit is not None:
            waiting = self._before_commit(copy.deepcopy(snapshot), index)
            if waiting is not None:
                await waiting
        self.committed.append(snapshot)

    async def entries(self) -> list[SessionEntry]:
        return copy.deepcopy(self.committed)

    async def until_calls(self, count: int) -> None:
        """Wait (without sleeping) until `count` append calls have arrived."""
        async with self._calls_seen:
            await self._calls_seen.wait_for(lambda: len(self.append_calls) >= count)


def gate_first_append(gate: asyncio.Event) -> BeforeCommit:
    """A hook that holds the first append until the test opens `gate`."""

    async def hold(_entry: SessionEntry, index: int) -> None:
        if index == 0:
            await gate.wait()

    return hold


def runtime_deps(model: Any, session: SessionStore, **overrides: Any) -> RuntimeDeps:
    """The course's dependencies: ids entry-1, entry-2, …, clock 101, 102, …, an empty catalog."""
    counter = {"id": 0, "now": 100}

    def create_id() -> str:
        counter["id"] += 1
        return f"entry-{counter['id']}"

    def now() -> int:
        counter["now"] += 1
        return counter["now"]

    values: dict[str, Any] = {
        "model": model,
        "tools": ToolRegistry(),
        "session": session,
        "resources": empty_resources(),
        "create_id": create_id,
        "now": now,
    }
    values.update(overrides)
    return RuntimeDeps(**values)


def call(call_id: str, name: str = "probe") -> ToolCall:
    """A tool call with no arguments."""
    return ToolCall(id=call_id, name=name, arguments={})


def projection_snapshot(active_path: Sequence[SessionEntry]) -> ContextProjectionSnapshot:
    """A snapshot whose every message entry counts as persisted."""
    return ContextProjectionSnapshot(
        active_path=active_path,
        persisted_message_count=sum(isinstance(entry, MessageSessionEntry) for entry in active_path),
    )


def request_texts(model: ScriptedModel, index: int) -> list[str]:
    """The texts of the messages of one recorded model request."""
    return [text_of(message) for message in model.requests[index].messages]


async def write_skill_root(root: Path, agents: str) -> ResourceCatalog:
    """A real resource root: AGENTS.md and one skill whose body must stay inactive."""
    (root / "AGENTS.md").write_text(agents, encoding="utf-8")
    skill = root / "skills" / "review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "\n".join(
            ["---", "name: review", "description: Review code carefully", "---", "INACTIVE SKILL SECRET"]
        ),
        encoding="utf-8",
    )
    return await discover_resources([str(root)])


@dataclass
class CountingProbe:
    """The core of the `probe` tool: counts how often it really ran."""

    executions: int = 0

    async def execute(self, _parameters: dict[str, Any], _context: ToolContext) -> ToolOutput[None]:
        self.executions += 1
        return ToolOutput(content=[text("core ran")])

    def tool(self) -> Tool[Any, Any]:
        return Tool(
            name="probe", description="probe core execution", schema=object_schema({}), execute=self.execute
        )


async def deny_probe_host(tools: ToolRegistry, folder: Path) -> ExtensionHost:
    """An extension host with one trusted extension, a real Python file, that denies every tool call."""
    host = create_extension_host(tools, hook_timeout_ms=20)
    source = folder / "deny_probe.py"
    source.write_text(
        "from pi_course import BeforeToolDecisionDeny\n\n\n"
        "def default(context):\n"
        '    context.on("beforeToolCall", lambda call: BeforeToolDecisionDeny(reason="course policy"))\n',
        encoding="utf-8",
    )
    loaded = await load_extension(
        ExtensionSource(id="deny-probe", path=str(source)),
        is_trusted=lambda _source: True,
        import_module=import_extension_file,
        host=host,
    )
    assert loaded.status == "active"
    return host


# ## Lab 13.1 · resume the chosen path and build the one Runtime


@pytest.mark.lab13_1
@pytest.mark.edits("create_runtime")
def test_empty_session_builds_one_runtime_whose_control_has_no_prompt() -> None:
    """空 session 是否只创建一个 Runtime 外壳，保留调用者的 session、resources 与 extension 对象，而 control
    上没有 prompt？"""

    async def body() -> None:
        tools = ToolRegistry()
        extensions = create_extension_host(tools, hook_timeout_ms=20)
        session = RecordingSessionStore()
        resources = empty_resources()
        runtime = await create_runtime(
            config(None),
            runtime_deps(
                ScriptedModel([]), session, tools=tools, resources=resources, extension_host=extensions
            ),
        )
        assert runtime.session is session
        assert runtime.resources is resources
        assert runtime.extensions is extensions
        assert runtime.get_active_leaf_id() is None
        assert isinstance(runtime.control, RuntimeControl)
        assert not hasattr(runtime.control, "prompt")
        assert runtime.control.get_state().messages == []
        assert session.append_calls == []

    run(body())


@pytest.mark.lab13_1
@pytest.mark.edits("create_runtime")
def test_non_empty_session_needs_an_explicit_leaf_and_hands_the_agent_a_deep_copy() -> None:
    """非空 session 是否必须显式选择 leaf，Agent 是否只恢复所选分支的深副本，且不被配置的 BASE SYSTEM 覆
    盖？"""

    async def body() -> None:
        root = message_entry("root", "sys", user_message("root question"))
        right = message_entry("right", "root", answer("right answer"))
        leaky_entries: list[SessionEntry] = [
            message_entry("sys", None, system("TRANSCRIPT BASE")),
            root,
            message_entry("left", "root", answer("left answer")),
            right,
        ]

        class LeakyStore:
            """Hands out its own list: the Runtime must copy."""

            async def append(self, entry: SessionEntry) -> None:
                pass

            async def entries(self) -> list[SessionEntry]:
                return leaky_entries

        selected = await create_runtime(config("right"), runtime_deps(ScriptedModel([]), LeakyStore()))
        expected = ["TRANSCRIPT BASE", "root question", "right answer"]
        # Resuming appends no system message: the configured BASE SYSTEM gives way to the transcript.
        assert [text_of(m) for m in selected.control.get_state().messages] == expected
        assert not hasattr(selected.control, "prompt")
        assert selected.get_active_leaf_id() == "right"
        assert isinstance(right.message, AssistantMessage)
        block = right.message.content[0]
        assert block.type == "text"
        block.text = "mutated source"
        assert [text_of(m) for m in selected.control.get_state().messages] == expected

        with pytest.raises(ValueError, match="非空 session 必须显式提供 activeLeafId"):
            await create_runtime(config(None), runtime_deps(ScriptedModel([]), LeakyStore()))
        with pytest.raises(ValueError, match="空 session 的 activeLeafId 必须是 null"):
            await create_runtime(config("missing"), runtime_deps(ScriptedModel([]), RecordingSessionStore()))
        with pytest.raises(ValueError, match="未知 session leaf：missing"):
            await create_runtime(config("missing"), runtime_deps(ScriptedModel([]), LeakyStore()))

    run(body())


@pytest.mark.lab13_1
@pytest.mark.edits("restored_transcript")
def test_agent_restores_initial_messages_as_a_deep_copy_and_keeps_a_transcript_base() -> None:
    """Agent 是否深复制 initial_messages，且只在恢复的历史不以 system message 开头时才插入 system_prompt？"""
    history: list[AgentMessage] = [system("TRANSCRIPT BASE"), user_message("question"), answer("reply")]
    kept = Agent(
        model=ScriptedModel([]), tools=ToolRegistry(), initial_messages=history, system_prompt="CONFIGURED"
    )
    assert [text_of(m) for m in kept.get_state().messages] == ["TRANSCRIPT BASE", "question", "reply"]

    without_base = history[1:]
    based = Agent(
        model=ScriptedModel([]),
        tools=ToolRegistry(),
        initial_messages=without_base,
        system_prompt="CONFIGURED",
    )
    assert [text_of(m) for m in based.get_state().messages] == ["CONFIGURED", "question", "reply"]
    assert based.get_state().messages[0] == system("CONFIGURED")

    reply = without_base[1]
    assert isinstance(reply, AssistantMessage)
    first = reply.content[0]
    assert first.type == "text"
    first.text = "changed by the caller"
    assert [text_of(m) for m in based.get_state().messages] == ["CONFIGURED", "question", "reply"]

    plain = Agent(model=ScriptedModel([]), tools=ToolRegistry(), initial_messages=without_base)
    assert [m.role for m in plain.get_state().messages] == ["user", "assistant"]


# ## Lab 13.2 · project every model request from the active path and the unpersisted suffix


@pytest.mark.lab13_2
@pytest.mark.edits("ContextProjectingModel.stream", "temporary_entries")
def test_adapter_attaches_the_unpersisted_suffix_to_the_active_path() -> None:
    """context adapter 是否把尚未持久化的 suffix 临时接到 active path 后面，并与之后对输入的修改隔离？"""

    async def body() -> None:
        base = system("SYSTEM")
        old_user, old_answer = user_message("old question"), answer("old answer")
        active_path = [
            message_entry("sys", None, base),
            message_entry("old-user", "sys", old_user),
            message_entry("old-assistant", "old-user", old_answer),
        ]
        inner = ScriptedModel([answer("projected")])
        projected = create_context_projecting_model(inner, budget(), lambda: projection_snapshot(active_path))
        incoming = AgentContext(
            messages=[base, old_user, old_answer, user_message("temporary user")], tools=[]
        )

        stream = projected.stream(incoming)
        temporary = incoming.messages[3]
        assert isinstance(temporary, UserMessage)
        temporary.content[0].text = "mutated later"
        await stream.result()

        assert current_system_prompt(inner.requests[0].messages) == "SYSTEM"
        assert request_texts(inner, 0) == ["SYSTEM", "old question", "old answer", "temporary user"]
        assert text_of(incoming.messages[3]) == "mutated later"

    run(body())


@pytest.mark.lab13_2
@pytest.mark.edits("ContextProjectingModel.stream")
def test_adapter_deducts_fixed_costs_then_keeps_only_whole_recent_interactions() -> None:
    """context adapter 是否先扣除 system 等固定成本，再只保留放得下的完整最近 interaction？"""

    async def body() -> None:
        messages: list[AgentMessage] = [
            system("SYSTEM"),
            user_message("question one"),
            answer("answer one"),
            user_message("question two"),
            answer("answer two"),
        ]
        ids = ["sys", "u1", "a1", "u2", "a2"]
        active_path = [
            message_entry(entry_id, ids[index - 1] if index else None, message)
            for index, (entry_id, message) in enumerate(zip(ids, messages, strict=True))
        ]
        inner = ScriptedModel([answer("trimmed")])
        projected = create_context_projecting_model(
            inner,
            budget(total=4, reserved_output=1, safety_margin=1),
            lambda: projection_snapshot(active_path),
        )
        await projected.stream(AgentContext(messages=[*messages, user_message("latest question")])).result()
        # The system message is a fixed cost, deducted before any interaction is chosen.
        assert request_texts(inner, 0) == ["SYSTEM", "latest question"]
        assert current_system_prompt(inner.requests[0].messages) == "SYSTEM"

    run(body())


class SignalModel:
    """Records each request and the very signal object it came with."""

    def __init__(self) -> None:
        self.requests: list[AgentContext] = []
        self.received: list[AgentContext] = []
        self.signals: list[AbortSignal | None] = []
        self._scripted = ScriptedModel([answer("done")])

    def stream(self, context: AgentContext, *, signal: AbortSignal | None = None) -> ModelStream:
        self.requests.append(copy.deepcopy(context))
        self.received.append(context)  # the very object: to see what the adapter shares
        self.signals.append(signal)
        return self._scripted.stream(context, signal=signal)


@pytest.mark.lab13_2
@pytest.mark.edits("ContextProjectingModel.stream")
def test_adapter_keeps_tools_and_the_signal_and_isolates_the_inner_models_input() -> None:
    """context adapter 是否原样保留同一个 signal、把 tools 等值但不共享引用地交给 inner model？"""

    async def body() -> None:
        inner = SignalModel()
        projected = create_context_projecting_model(
            inner, budget(), lambda: ContextProjectionSnapshot(active_path=[], persisted_message_count=0)
        )
        controller = AbortController()
        incoming = AgentContext(
            messages=[user_message("temporary")],
            tools=[ToolDefinition(name="probe", description="probe", parameters={"type": "object"})],
        )
        await projected.stream(incoming, signal=controller.signal).result()
        assert inner.signals[0] is controller.signal
        assert inner.requests[0].tools == incoming.tools
        assert incoming.tools is not None
        received = inner.received[0].tools
        assert received is not None and received is not incoming.tools
        assert received[0] is not incoming.tools[0]
        incoming.tools[0].parameters["type"] = "mutated"
        assert inner.requests[0].tools is not None
        assert inner.requests[0].tools[0].parameters == {"type": "object"}
        assert received[0].parameters == {"type": "object"}

        no_tools = SignalModel()
        adapter = create_context_projecting_model(
            no_tools, budget(), lambda: ContextProjectionSnapshot(active_path=[], persisted_message_count=0)
        )
        await adapter.stream(AgentContext(messages=[user_message("bare")])).result()
        assert no_tools.requests[0].tools is None
        assert no_tools.signals[0] is None

    run(body())


@pytest.mark.lab13_2
@pytest.mark.edits("temporary_entries")
def test_temporary_ids_avoid_the_active_path_and_the_count_must_fit() -> None:
    """临时 entry 的 id 是否避开 active path 已有的 id，persisted_message_count 越界时是否报出课程原文？"""
    taken = [
        message_entry("__runtime_context_0", None, user_message("taken")),
        message_entry("___runtime_context_0", "__runtime_context_0", answer("taken too")),
    ]
    messages: list[AgentMessage] = [taken[0].message, taken[1].message, user_message("new"), answer("reply")]
    entries = temporary_entries(projection_snapshot(taken), messages)
    assert [entry.id for entry in entries] == [
        "__runtime_context_0",
        "___runtime_context_0",
        "____runtime_context_0",
        "__runtime_context_1",
    ]
    assert [entry.parent_id for entry in entries[2:]] == ["___runtime_context_0", "____runtime_context_0"]
    for count in (-1, 5, 1.5):
        snapshot = ContextProjectionSnapshot(active_path=taken, persisted_message_count=count)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^persistedMessageCount 超出了当前 model context$"):
            temporary_entries(snapshot, messages)


@st.composite
def paths_and_suffixes(draw: st.DrawFn) -> tuple[list[SessionEntry], list[AgentMessage]]:
    """An active path (some ids shaped like temporary ones) and a suffix of new messages."""
    names = draw(
        st.lists(
            st.sampled_from(["a", "b", "__runtime_context_0", "___runtime_context_0", "__runtime_context_1"]),
            unique=True,
            max_size=4,
        )
    )
    path: list[SessionEntry] = []
    for index, name in enumerate(names):
        path.append(message_entry(name, path[-1].id if path else None, user_message(f"m{index}")))
    suffix: list[AgentMessage] = [user_message(f"new {i}") for i in range(draw(st.integers(0, 4)))]
    return path, suffix


@pytest.mark.lab13_2
@pytest.mark.edits("temporary_entries")
@given(paths_and_suffixes())
def test_temporary_entries_form_one_chain_of_unique_ids(
    case: tuple[list[SessionEntry], list[AgentMessage]],
) -> None:
    """对任意 active path 与 suffix，临时 entries 是否接在原路径之后、id 唯一、parent 首尾相接、消息按序且被复
    制？"""
    path, suffix = case
    persisted = [entry.message for entry in path if isinstance(entry, MessageSessionEntry)]
    entries = temporary_entries(projection_snapshot(path), [*persisted, *suffix])
    assert entries[: len(path)] == path
    assert len({entry.id for entry in entries}) == len(entries)
    for previous, entry in zip([None, *entries], entries, strict=False):
        assert entry.parent_id == (previous.id if previous is not None else None) or entry in path
    added = entries[len(path) :]
    assert [entry.message for entry in added if isinstance(entry, MessageSessionEntry)] == suffix
    assert all(
        a.message is not b for a, b in zip(added, suffix, strict=True) if isinstance(a, MessageSessionEntry)
    )


# ## Lab 13.3 · system patches, persistence before resolving, poison, flush and dispose


@pytest.mark.lab13_3
@pytest.mark.edits("RuntimeImpl.prompt", "desired_system_state")
def test_runtime_wires_resources_and_extension_and_resolves_in_series_after_persisting(
    tmp_path: Path,
) -> None:
    """Runtime 是否接通 resources 段落与 extension 包住的 executor，并在本轮消息全部落盘后才按顺序
    resolve？"""

    async def body() -> None:
        resources = await write_skill_root(tmp_path, "PROJECT RULE")
        probe = CountingProbe()
        tools = ToolRegistry()
        tools.register(probe.tool())
        extensions = await deny_probe_host(tools, tmp_path)
        gate = asyncio.Event()
        store = RecordingSessionStore([], gate_first_append(gate))
        model = ScriptedModel(
            [assistant_message([call("call-1")], "toolUse"), answer("first answer"), answer("second answer")]
        )
        runtime = await create_runtime(
            config(None),
            runtime_deps(model, store, tools=tools, resources=resources, extension_host=extensions),
        )

        first = asyncio.ensure_future(runtime.prompt("run probe"))
        await store.until_calls(1)
        second = asyncio.ensure_future(runtime.prompt("second"))
        await asyncio.sleep(0)
        assert not first.done(), "the first prompt waits for its first append"
        assert len(model.requests) == 2, "the second prompt has not reached the model yet"

        gate.set()
        first_result: AgentRunResult = await first
        await second
        assert probe.executions == 0
        denied = [m for m in first_result.messages if isinstance(m, ToolResultMessage)]
        assert len(denied) == 1 and denied[0].is_error is True
        assert "course policy" in text_of(denied[0])

        leading = model.requests[0].messages[0]
        assert isinstance(leading, SystemMessage)
        assert leading.content == "BASE SYSTEM"
        assert "# Pi resources" in ((leading.sections or {}).get(RESOURCE_SECTION) or "")
        prompt = current_system_prompt(model.requests[0].messages) or ""
        assert 0 <= prompt.index("BASE SYSTEM") < prompt.index("# Pi resources")
        assert "PROJECT RULE" in prompt
        assert "review: Review code carefully" in prompt
        assert "INACTIVE SKILL SECRET" not in prompt
        # The second request of the first run sees its own call and result, not yet persisted.
        assert [m.role for m in model.requests[1].messages] == ["system", "user", "assistant", "toolResult"]
        # A projected request carries one replayed system message, at the front.
        assert [m.role for m in model.requests[2].messages].count("system") == 1
        assert model.requests[2].messages[0].role == "system"

        # The opening system message is persisted with the turn's suffix.
        assert [role_of(e) for e in store.append_calls] == [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "user",
            "assistant",
        ]
        assert [(e.id, e.parent_id) for e in store.append_calls] == [
            ("entry-1", None),
            ("entry-2", "entry-1"),
            ("entry-3", "entry-2"),
            ("entry-4", "entry-3"),
            ("entry-5", "entry-4"),
            ("entry-6", "entry-5"),
            ("entry-7", "entry-6"),
        ]
        assert [e.timestamp for e in store.append_calls] == [101, 102, 103, 104, 105, 106, 107]
        assert runtime.get_active_leaf_id() == "entry-7"

        empty_model = ScriptedModel([answer("no system prompt")])
        empty_store = RecordingSessionStore()
        empty_runtime = await create_runtime(
            config(None, system_prompt=None), runtime_deps(empty_model, empty_store)
        )
        await empty_runtime.prompt("empty resources")
        assert current_system_prompt(empty_model.requests[0].messages) is None
        # An empty desired state writes no system message.
        assert [role_of(e) for e in empty_store.append_calls] == ["user", "assistant"]

    run(body())


@pytest.mark.lab13_3
@pytest.mark.edits("system_patch")
def test_system_is_patched_only_on_change_and_a_resumed_transcripts_base_wins(tmp_path: Path) -> None:
    """system 是否只在变化时追加补丁（变化的段落写新值、多余的写 None），恢复后以 transcript 的基础 prompt 为
    准，已持久化前缀不改写？"""

    async def body() -> None:
        (tmp_path / "AGENTS.md").write_text("NEW RULE", encoding="utf-8")
        resources = await discover_resources([str(tmp_path)])
        initial = [
            message_entry(
                "sys", None, system("OLD BASE", {RESOURCE_SECTION: "OLD RESOURCES", "stale": "STALE"})
            ),
            message_entry("old-user", "sys", user_message("old question")),
            message_entry("old-assistant", "old-user", answer("old answer")),
        ]
        store = RecordingSessionStore(initial)
        model = ScriptedModel([answer("first answer"), answer("second answer")])
        runtime = await create_runtime(
            RuntimeConfig(
                active_leaf_id="old-assistant", context=budget(), system_prompt="NEW BASE", max_steps=8
            ),
            runtime_deps(model, store, resources=resources),
        )

        await runtime.prompt("first")
        assert store.committed[: len(initial)] == initial, "the persisted prefix is never rewritten"
        assert [role_of(e) for e in store.append_calls] == ["system", "user", "assistant"]
        patch = store.append_calls[0]
        assert isinstance(patch, MessageSessionEntry) and isinstance(patch.message, SystemMessage)
        assert patch.message.content == "", "the base prompt is written only once"
        sections = patch.message.sections or {}
        assert sorted(sections) == sorted([RESOURCE_SECTION, "stale"])
        assert "NEW RULE" in (sections[RESOURCE_SECTION] or "")
        assert sections["stale"] is None, "a section no longer wanted is deleted with None"
        prompt = current_system_prompt(model.requests[0].messages) or ""
        assert prompt.startswith("OLD BASE")
        assert not any(word in prompt for word in ("NEW BASE", "OLD RESOURCES", "STALE"))
        assert "NEW RULE" in prompt
        assert len(runtime.control.get_state().messages) == 6

        await runtime.prompt("second")
        assert [role_of(e) for e in store.append_calls[3:]] == ["user", "assistant"], "no change, no patch"
        assert current_system_prompt(model.requests[1].messages) == prompt

        resumed_store = RecordingSessionStore(store.committed)
        resumed_model = ScriptedModel([answer("third answer")])
        ids = iter(f"resumed-{n}" for n in range(1, 10))
        resumed = await create_runtime(
            RuntimeConfig(
                active_leaf_id=runtime.get_active_leaf_id(),
                context=budget(),
                system_prompt="NEW BASE",
                max_steps=8,
            ),
            runtime_deps(resumed_model, resumed_store, create_id=lambda: next(ids)),
        )
        await resumed.prompt("third")
        removal = resumed_store.append_calls[0]
        assert isinstance(removal, MessageSessionEntry) and isinstance(removal.message, SystemMessage)
        assert removal.message.sections == {RESOURCE_SECTION: None}
        # Resources gone: only the section is deleted, and the base prompt is still the transcript's.
        assert current_system_prompt(resumed_model.requests[0].messages) == "OLD BASE"
        assert removal.id == "resumed-1"

    run(body())


section_maps = st.dictionaries(
    st.sampled_from(["pi-resources", "stale", "preamble", "notes"]), st.text("ab", max_size=3)
)


@pytest.mark.lab13_3
@pytest.mark.edits("system_patch")
@given(
    st.one_of(st.none(), st.tuples(st.text("xy", max_size=3), section_maps)),
    st.text("xy", max_size=3),
    section_maps,
)
def test_replaying_the_patch_gives_the_desired_sections_and_never_a_second_base(
    current: tuple[str, dict[str, str]] | None, content: str, wanted: dict[str, str]
) -> None:
    """对任意已有 system 状态与期望状态，追加补丁后重放出的段落是否正好等于期望段落，且已有基础 prompt 不变、
    无变化时不打补丁？"""
    history: list[AgentMessage] = [] if current is None else [system(current[0], dict(current[1]) or None)]
    desired = SystemState(content=content, sections=dict(wanted))
    patch = system_patch(history, desired)
    if current is not None and current[1] == wanted:
        assert patch is None
    if patch is None:
        replayed = current_system_message(history)
        if replayed is None:
            assert not content and not wanted
            return
    else:
        history.append(SystemMessage(content=patch.content or "", timestamp=1, sections=patch.sections))
        replayed = current_system_message(history)
        assert replayed is not None
        if current is not None:
            assert patch.content in (None, "")
    assert (replayed.sections or {}) == wanted
    assert replayed.content == (content if current is None else current[0])


@pytest.mark.lab13_3
@pytest.mark.edits("RuntimeImpl._persist")
def test_only_the_new_suffix_is_appended_and_a_write_failure_poisons_the_runtime() -> None:
    """恢复的历史是否不被重复追加，system 补丁先于用户消息写入；写入失败后 prompt 与 flush 是否都得到同一个错
    误、不再请求模型？"""

    async def body() -> None:
        initial = [
            message_entry("old-user", None, user_message("old question")),
            message_entry("old-assistant", "old-user", answer("old answer")),
        ]
        disk_error = OSError("disk append failed")

        def fail_second(_entry: SessionEntry, index: int) -> None:
            if index == 1:
                raise disk_error

        store = RecordingSessionStore(initial, fail_second)
        model = ScriptedModel([answer("new answer"), answer("must not run")])
        runtime = await create_runtime(config("old-assistant"), runtime_deps(model, store))

        with pytest.raises(OSError) as failed:
            await runtime.prompt("new question")
        assert failed.value is disk_error
        # The patch goes before the user message; once that write fails, the assistant is not written.
        assert [text_of_entry(e) for e in store.append_calls] == ["BASE SYSTEM", "new question"]
        assert len(store.committed) == 3
        assert store.append_calls[0].parent_id == "old-assistant"
        assert runtime.get_active_leaf_id() == "entry-1"
        with pytest.raises(OSError) as again:
            await runtime.prompt("again")
        assert again.value is disk_error
        with pytest.raises(OSError) as flushed:
            await runtime.flush()
        assert flushed.value is disk_error
        assert len(model.requests) == 1
        assert len(store.append_calls) == 2

    run(body())


@pytest.mark.lab13_3
@pytest.mark.edits("RuntimeImpl.prompt")
def test_a_prompt_queued_before_the_failure_gets_the_same_poison() -> None:
    """写入失败前已经排队的 prompt，开始时是否也得到同一个 poison 原因，而不进入模型或 Store？"""

    async def body() -> None:
        gate = asyncio.Event()
        disk_error = OSError("disk append failed")

        async def fail_first(_entry: SessionEntry, index: int) -> None:
            if index == 0:
                await gate.wait()
                raise disk_error

        store = RecordingSessionStore([], fail_first)
        model = ScriptedModel([answer("lost"), answer("never asked")])
        runtime = await create_runtime(config(None), runtime_deps(model, store))
        first = asyncio.ensure_future(runtime.prompt("one"))
        await store.until_calls(1)
        queued = asyncio.ensure_future(runtime.prompt("two"))
        gate.set()
        for task in (first, queued):
            with pytest.raises(OSError) as failed:
                await task
            assert failed.value is disk_error
        assert len(model.requests) == 1
        assert len(store.append_calls) == 1
        assert runtime.get_active_leaf_id() is None

    run(body())


@pytest.mark.lab13_3
@pytest.mark.edits("RuntimeImpl.dispose")
def test_flush_waits_for_the_queue_and_dispose_waits_then_closes_prompt_for_good() -> None:
    """flush 是否等待当前队列；dispose 是否等已接受的 prompt 落盘、重复调用返回同一个对象，并永久拒绝之后的
    prompt？"""

    async def body() -> None:
        gate = asyncio.Event()
        store = RecordingSessionStore([], gate_first_append(gate))
        model = ScriptedModel([answer("persist me"), answer("persist queued prompt")])
        runtime = await create_runtime(config(None), runtime_deps(model, store))

        prompting = asyncio.ensure_future(runtime.prompt("save"))
        await store.until_calls(1)
        accepted_before_dispose = asyncio.ensure_future(runtime.prompt("already accepted"))
        flushed = asyncio.Event()

        async def flush_then_mark() -> None:
            await runtime.flush()
            flushed.set()

        flushing = asyncio.ensure_future(flush_then_mark())
        disposing = runtime.dispose()
        assert runtime.dispose() is disposing
        with pytest.raises(RuntimeError, match="已 dispose"):
            await runtime.prompt("too late")
        for _ in range(10):  # let every ready task take its steps; only the gate may hold them
            await asyncio.sleep(0)
        assert not flushed.is_set()
        assert not asyncio.ensure_future(disposing).done(), "dispose waits for the accepted work"

        gate.set()
        await prompting
        await accepted_before_dispose
        await flushing
        await disposing
        await runtime.flush()
        assert flushed.is_set()
        assert len(store.committed) == 5
        assert runtime.get_active_leaf_id() == "entry-5"
        assert [text_of_entry(e) for e in store.committed][-2:] == [
            "already accepted",
            "persist queued prompt",
        ]
        with pytest.raises(RuntimeError, match=r"^Runtime 已 dispose$"):
            await runtime.prompt("still too late")
        assert len(model.requests) == 2

    run(body())


@pytest.mark.lab13_3
@pytest.mark.edits("RuntimeImpl.prompt")
def test_a_jsonl_session_on_disk_resumes_in_a_new_runtime(tmp_path: Path) -> None:
    """真实 JSONL 文件上的 session：第一次运行的 suffix 是否逐行落盘，重开后的新 Runtime 是否从所选 leaf 接着
    写且不再写基础 prompt？"""

    async def body() -> None:
        file = tmp_path / "sessions" / "main.jsonl"
        probe = CountingProbe()
        tools = ToolRegistry([probe.tool()])
        store = await JsonlSessionStore.open(str(file))
        model = ScriptedModel([assistant_message([call("call-1")], "toolUse"), answer("probed")])
        first = await create_runtime(config(None), runtime_deps(model, store, tools=tools))
        result = await first.prompt("probe it")
        await first.dispose()
        assert probe.executions == 1
        lines = file.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["message"]["role"] for line in lines] == [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
        ]
        assert [json.loads(line)["id"] for line in lines] == [f"entry-{n}" for n in range(1, 6)]
        assert result.messages[-1].role == "assistant" and text_of(result.messages[-1]) == "probed"

        reopened = await JsonlSessionStore.open(str(file))
        next_model = ScriptedModel([answer("resumed")])
        ids = iter(f"second-{n}" for n in range(1, 10))
        second = await create_runtime(
            config(first.get_active_leaf_id()),
            runtime_deps(next_model, reopened, tools=tools, create_id=lambda: next(ids)),
        )
        assert [m.role for m in second.control.get_state().messages] == [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
        ]
        await second.prompt("and again")
        await second.dispose()
        assert request_texts(next_model, 0)[0] == "BASE SYSTEM"
        assert request_texts(next_model, 0)[-1] == "and again"
        lines = file.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["id"] for line in lines[5:]] == ["second-1", "second-2"]
        assert json.loads(lines[5])["parentId"] == "entry-5"
        assert second.get_active_leaf_id() == "second-2"

    run(body())


# ## Lab 13.4 · modes only choose the output


@dataclass
class FakeRuntime:
    """A Runtime that answers every prompt with one fixed result and records the prompts."""

    result: AgentRunResult
    prompts: list[str] = field(default_factory=list)
    session: SessionStore = field(default_factory=RecordingSessionStore)
    resources: ResourceCatalog = field(default_factory=empty_resources)
    extensions: Any = None
    control: RuntimeControl = field(
        default_factory=lambda: RuntimeControl(
            get_state=lambda: AgentState(
                status="idle", messages=[], streaming_text="", pending_tool_call_ids=[], diagnostics=[]
            ),
            subscribe=lambda _listener: lambda: None,
            steer=lambda _value: None,
            follow_up=lambda _value: None,
            abort=lambda: None,
        )
    )

    def get_active_leaf_id(self) -> str | None:
        return None

    async def prompt(self, value: str) -> AgentRunResult:
        self.prompts.append(value)
        return copy.deepcopy(self.result)

    async def flush(self) -> None:
        pass

    async def dispose(self) -> None:
        pass


def fixed_result(reason: Any, steps: int, final: str, stop: Any = "stop") -> AgentRunResult:
    return AgentRunResult(
        reason=reason,
        steps=steps,
        messages=[user_message("question"), assistant_message([text(final)], stop, timestamp=2)],
    )


@pytest.mark.lab13_4
@pytest.mark.edits("run_mode")
def test_interactive_and_print_call_prompt_once_and_write_the_final_text() -> None:
    """interactive 与 print 是否都只调用一次 Runtime.prompt，并写出最后一条 assistant 的文本？"""

    async def body() -> None:
        runtime = FakeRuntime(fixed_result("stop", 1, "final text"))
        output: list[str] = []

        class ListIO:
            def write(self, value: str) -> None:
                output.append(value)

        await run_mode(runtime, "interactive", "same prompt", ListIO())
        await run_mode(runtime, "print", "same prompt", ListIO())
        assert runtime.prompts == ["same prompt", "same prompt"]
        assert output == ["final text", "final text"]

    run(body())


@pytest.mark.lab13_4
@pytest.mark.edits("run_mode")
def test_json_changes_only_the_presentation_unknown_modes_fail_first_and_io_errors_pass_through() -> None:
    """json 是否只改变呈现（紧凑 JSON 加换行）；未知 mode 是否在调用 Runtime 之前失败；输出 sink 的错误是否原
    样上抛？"""

    async def body() -> None:
        result = fixed_result("length", 2, "partial", "length")
        runtime = FakeRuntime(result)
        output: list[str] = []

        class ListIO:
            def write(self, value: str) -> None:
                output.append(value)

        returned = await run_mode(runtime, "json", "json prompt", ListIO())
        expected = (
            json.dumps(
                {"reason": "length", "steps": 2, "messages": [m.to_dict() for m in result.messages]},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            + "\n"
        )
        assert output == [expected]
        assert returned == result
        assert runtime.prompts == ["json prompt"]

        with pytest.raises(ValueError, match=r"^未知 runtime mode：rpc$"):
            await run_mode(runtime, "rpc", "must not run", ListIO())  # type: ignore[arg-type]
        assert runtime.prompts == ["json prompt"]

        sink_error = OSError("output sink failed")

        class FailingIO:
            def write(self, value: str) -> None:
                raise sink_error

        with pytest.raises(OSError) as failed:
            await run_mode(runtime, "print", "written fact", FailingIO())
        assert failed.value is sink_error
        assert runtime.prompts == ["json prompt", "written fact"]

    run(body())


@pytest.mark.lab13_4
@pytest.mark.edits("run_mode")
def test_modes_write_to_real_text_streams(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """三种 mode 是否能直接写入真实的文本流（文件、sys.stdout），异步的 write 是否被等待，结果是否是副本？"""

    async def body() -> None:
        result = AgentRunResult(
            reason="stop",
            steps=2,
            messages=[user_message("问题"), answer("first"), user_message("again"), answer("最终回答")],
        )
        runtime = FakeRuntime(result)
        target = tmp_path / "out.txt"
        with target.open("w", encoding="utf-8") as handle:
            await run_mode(runtime, "print", "p", handle)
            handle.write("\n")
            await run_mode(runtime, "json", "j", handle)
        written = target.read_text(encoding="utf-8").split("\n")
        assert written[0] == "最终回答"
        assert json.loads(written[1])["messages"][-1]["content"] == [{"type": "text", "text": "最终回答"}]
        assert "最终回答" in written[1], "non-ASCII text is written as it is, as JSON.stringify does"

        await run_mode(runtime, "interactive", "i", sys.stdout)
        assert capsys.readouterr().out == "最终回答"

        class SlowIO:
            def __init__(self) -> None:
                self.buffer = io.StringIO()

            async def write(self, value: str) -> None:
                await asyncio.sleep(0)
                self.buffer.write(value)

        slow = SlowIO()
        returned = await run_mode(runtime, "print", "s", slow)
        assert slow.buffer.getvalue() == "最终回答"
        returned.messages.clear()
        assert len(runtime.result.messages) == 4

        empty = FakeRuntime(AgentRunResult(reason="error", steps=0, messages=[user_message("only")]))
        nothing = io.StringIO()
        await run_mode(empty, "print", "x", nothing)
        assert nothing.getvalue() == ""

    run(body())
