"""Focused tests of checkpoint 19: durable progress, committed to a store before it becomes visible.

The store is the real one (in memory, as in the course); a crash is what the course makes of it too: the
test fires the signal given to `run` right after the store accepts the N-th commit (or while a tool
hangs), takes a snapshot, and opens a new harness on a store built from that snapshot. Models are the
scripted one and a hand-driven stream; tools are real `Tool`s run by checkpoint 06's executor.

Ordering across awaits is held by `asyncio.Event` gates the test opens, never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AbortController,
    AbortSignal,
    AgentContext,
    AssistantMessage,
    AssistantMessageEventStream,
    DurableHarness,
    DurableSession,
    DurableSnapshot,
    DurableStore,
    DurableToolRegistration,
    DurableWrite,
    GenerationCheckpoint,
    JsonValue,
    ModelDone,
    ModelStart,
    ModelTextDelta,
    ReplayPolicy,
    ScriptedErrorTurn,
    ScriptedModel,
    StorageRejected,
    TaskRecordGeneration,
    TextContent,
    Tool,
    ToolCall,
    ToolCheckpointExecute,
    ToolContext,
    ToolOutput,
    ToolResultMessage,
    Transaction,
    assistant_message,
    object_schema,
    string_value,
    text,
)
from strategies import short_text

# Shared helpers. Nothing here calls a lab piece at import time.


def write(collection: Any, record_id: Any, value: Any) -> DurableWrite:
    """One write of a batch (any value: the store is the one that checks)."""
    return DurableWrite(collection, record_id, value)


def call(call_id: str, value: str, name: str = "echo") -> ToolCall:
    """A call of the echo tool."""
    return ToolCall(id=call_id, name=name, arguments={"value": value})


def ids(prefix: str = "id") -> Callable[[], str]:
    """`create_id`: id1, id2, … (or r1, r2, … for a reopened harness)."""
    counter = iter(range(1, 1_000))
    return lambda: f"{prefix}{next(counter)}"


class CountingTool:
    """The course's `countingTool`: an echo tool that counts its runs and hangs on the `hang_on`-th one
    until the signal fires (then it fails with "crashed", as a process would stop there)."""

    def __init__(self, hang_on: int = 0) -> None:
        self.runs = 0
        self.hang_on = hang_on
        self.started = asyncio.Event()
        self.tool: Tool[dict[str, Any], None] = Tool(
            name="echo",
            description="echo",
            schema=object_schema({"value": string_value}),
            execute=self.execute,
        )

    async def execute(self, parameters: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        self.runs += 1
        self.started.set()
        if self.runs == self.hang_on:
            crashed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def crash() -> None:
                if not crashed.done():
                    crashed.set_exception(RuntimeError("crashed"))

            assert context.signal is not None
            context.signal.add_event_listener("abort", crash)
            await crashed
        return ToolOutput(content=[text(f"echo:{parameters['value']}")])


def registration(tool: CountingTool, replay: ReplayPolicy | None) -> list[DurableToolRegistration]:
    """The harness's `tools` option with this one tool."""
    return [DurableToolRegistration(tool=tool.tool, replay=replay)]


def observe(store: DurableStore) -> list[str]:
    """The course's `observe`: `seq:kind:status:phase` for each task written, `seq:entry:type` for each
    entry, in the order the store accepted them."""
    log: list[str] = []

    def listener(seq: int, writes: Sequence[DurableWrite]) -> None:
        for item in writes:
            value = item.value
            assert isinstance(value, dict)
            if item.collection == "tasks":
                checkpoint = value["checkpoint"]
                assert isinstance(checkpoint, dict)
                log.append(f"{seq}:{value['kind']}:{value['status']}:{checkpoint['phase']}")
            else:
                entry = value["entry"]
                assert isinstance(entry, dict)
                log.append(f"{seq}:entry:{entry['type']}")

    store.on_commit(listener)
    return log


def abort_at(store: DurableStore, seq: int) -> AbortController:
    """A controller fired right after the store accepts commit number `seq`."""
    controller = AbortController()

    def listener(committed: int, _writes: Sequence[DurableWrite]) -> None:
        if committed == seq:
            controller.abort()

    store.on_commit(listener)
    return controller


def reopened_store(snapshot: DurableSnapshot) -> DurableStore:
    """A new process's store: the snapshot through JSON and back, as it would be read from disk."""
    return DurableStore.from_snapshot(DurableSnapshot(**json.loads(json.dumps(snapshot.to_dict()))))


class ManualModel:
    """The course's `manualModel`: a stream that sends a few text deltas, then ends with `final` or
    hangs for ever (only the harness's signal stops waiting for it)."""

    def __init__(self, deltas: Sequence[str], final: AssistantMessage | None = None) -> None:
        self.deltas = list(deltas)
        self.final = final
        self.requests: list[AgentContext] = []

    def stream(
        self, context: AgentContext, *, signal: AbortSignal | None = None
    ) -> AssistantMessageEventStream:
        self.requests.append(copy.deepcopy(context))
        stream = AssistantMessageEventStream()

        def play() -> None:
            partial = assistant_message([], "stop")
            stream.push(ModelStart(partial=copy.deepcopy(partial)))
            accumulated = ""
            for delta in self.deltas:
                accumulated += delta
                partial.content = [text(accumulated)]
                stream.push(ModelTextDelta(content_index=0, delta=delta, partial=copy.deepcopy(partial)))
            if self.final is not None:
                stream.push(ModelDone(reason="stop", message=self.final))
                stream.end(self.final)

        asyncio.get_running_loop().call_soon(play)
        return stream


def roles(harness: DurableHarness, conversation_id: str = "c1") -> list[str]:
    """The roles of a conversation's committed messages."""
    return [message.role for message in harness.messages(conversation_id)]


def statuses(harness: DurableHarness) -> list[str]:
    """The tasks' statuses, by order."""
    return [task.status for task in harness.tasks()]


def first_text(message: object) -> str:
    """The text of a message's first block ("" when it has none)."""
    content = getattr(message, "content", [])
    return content[0].text if content and isinstance(content[0], TextContent) else ""


class ChangeFailed(Exception):
    """A change's own failure (its own class: a lab stub's error is never mistaken for it)."""


# ## Lab 19.1 · atomic batches, one line of change, committed before visible


@pytest.mark.lab19_1
@pytest.mark.edits("DurableStore.commit")
def test_a_batch_lands_whole_or_not_at_all_and_a_snapshot_round_trips() -> None:
    """一批写入是否要么全部进入存储、要么一条都不进（同批合法的写入也不落下），按 id 整条替换，快照经 JSON 导
    出再导入后状态相同且与原存储互不影响？"""

    async def scenario() -> None:
        store = DurableStore()
        seq = await store.commit(
            [write("entries", "e1", {"index": 0}), write("tasks", "t1", {"status": "pending"})]
        )
        assert seq == 1
        assert store.get("entries", "e1") == {"index": 0}

        with pytest.raises(StorageRejected):
            await store.commit(
                [write("entries", "e2", {"index": 1}), write("tasks", "t2", {"bad": float("nan")})]
            )
        assert store.get("entries", "e2") is None, "同批里合法的写入也不能落下"
        assert store.current_seq == 1

        await store.commit([write("entries", "e1", {"index": 0, "replaced": True})])
        assert store.get("entries", "e1") == {"index": 0, "replaced": True}, "按 id 整条替换"
        snapshot = store.snapshot()
        assert snapshot == DurableSnapshot(
            seq=2,
            entries={"e1": {"index": 0, "replaced": True}},
            tasks={"t1": {"status": "pending"}},
        )
        restored = reopened_store(snapshot)
        assert restored.snapshot() == snapshot
        assert await restored.commit([write("tasks", "t2", {})]) == 3
        assert store.current_seq == 2, "快照是副本，不是共享状态"
        assert store.get("tasks", "t2") is None

    asyncio.run(scenario())


@pytest.mark.lab19_1
@pytest.mark.edits("DurableStore.commit")
def test_the_store_refuses_every_kind_of_bad_write_with_its_message() -> None:
    """未知 collection、空的或不是字符串的 id、NaN、无穷大、函数、对象实例、非字符串键与循环引用，是否都让整批
    以 StorageRejected 拒绝，消息是“写入 collection/id 不是合法 JSON 记录”？"""

    class Thing:
        pass

    cyclic: list[object] = []
    cyclic.append(cyclic)
    bad: list[tuple[DurableWrite, str]] = [
        (write("files", "f1", {}), "写入 files/f1 不是合法 JSON 记录"),
        (write("entries", "", {}), "写入 entries/ 不是合法 JSON 记录"),
        (write("entries", 7, {}), "写入 entries/7 不是合法 JSON 记录"),
        (write("tasks", "t", {"n": float("inf")}), "写入 tasks/t 不是合法 JSON 记录"),
        (write("tasks", "t", {"bad": lambda: None}), "写入 tasks/t 不是合法 JSON 记录"),
        (write("tasks", "t", {"bad": Thing()}), "写入 tasks/t 不是合法 JSON 记录"),
        (write("tasks", "t", {1: "int key"}), "写入 tasks/t 不是合法 JSON 记录"),
        (write("tasks", "t", {"tuple": (1, 2)}), "写入 tasks/t 不是合法 JSON 记录"),
        (write("tasks", "t", cyclic), "写入 tasks/t 不是合法 JSON 记录"),
    ]

    async def scenario() -> None:
        store = DurableStore()
        for bad_write, message in bad:
            with pytest.raises(StorageRejected) as refused:
                await store.commit([write("entries", "ok", {"fine": [1, 2.5, None, True, "s"]}), bad_write])
            assert str(refused.value) == message
        assert store.current_seq == 0
        assert store.list("entries") == []
        assert await store.commit([write("entries", "ok", {"fine": [1, 2.5, None, True, "s"]})]) == 1

    asyncio.run(scenario())


#: Values JSON can hold: finite numbers only (NaN and infinities are what the store must refuse).
JSON_VALUES: st.SearchStrategy[JsonValue] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | short_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=8,
)
NOT_JSON = st.sampled_from([float("nan"), float("-inf"), print, object(), {2: "x"}, ("t",), {"s"}, b"bytes"])


@pytest.mark.lab19_1
@pytest.mark.edits("DurableStore.commit")
@given(
    good=st.lists(JSON_VALUES, min_size=1, max_size=4),
    bad=NOT_JSON,
    where=st.integers(min_value=0, max_value=4),
    nested=st.booleans(),
)
def test_one_bad_value_anywhere_in_a_batch_leaves_the_store_as_it_was(
    good: list[JsonValue], bad: object, where: int, nested: bool
) -> None:
    """对任意一批合法 JSON 写入，只要其中任意位置混进一个不是 JSON 的值（顶层或嵌套），存储、seq 与监听者是否
    都和提交前完全一样？"""

    async def scenario() -> None:
        store = DurableStore()
        await store.commit([write("entries", "before", {"kept": True})])
        heard: list[int] = []
        store.on_commit(lambda seq, _writes: heard.append(seq))
        before = store.snapshot()
        writes = [write("tasks", f"t{index}", value) for index, value in enumerate(good)]
        poisoned: Any = {"deep": [bad]} if nested else bad
        writes.insert(min(where, len(writes)), write("entries", "poison", poisoned))
        with pytest.raises(StorageRejected):
            await store.commit(writes)
        assert store.snapshot() == before
        assert heard == []

    asyncio.run(scenario())


@pytest.mark.lab19_1
@pytest.mark.edits("DurableStore.commit")
def test_store_commits_run_in_call_order_and_a_refused_one_takes_no_seq() -> None:
    """同时发出的三次 store.commit 是否按调用顺序执行，被拒绝的那一次不占 seq，监听者按顺序收到各自写入的副
    本？"""

    async def scenario() -> None:
        store = DurableStore()
        heard: list[tuple[int, list[str]]] = []

        def listener(seq: int, writes: Sequence[DurableWrite]) -> None:
            heard.append((seq, [item.id for item in writes]))
            for item in writes:  # a listener's copy: changing it changes nothing stored
                if isinstance(item.value, dict):
                    item.value["tampered"] = True

        unsubscribe = store.on_commit(listener)
        results = await asyncio.gather(
            store.commit([write("entries", "a", {"n": 1})]),
            store.commit([write("entries", "b", {"n": float("nan")})]),
            store.commit([write("entries", "c", {"n": 3})]),
            return_exceptions=True,
        )
        assert results[0] == 1
        assert isinstance(results[1], StorageRejected)
        assert results[2] == 2
        assert heard == [(1, ["a"]), (2, ["c"])]
        assert store.get("entries", "a") == {"n": 1}
        unsubscribe()
        await store.commit([write("entries", "d", {})])
        assert [seq for seq, _ in heard] == [1, 2], "取消订阅后不再收到"
        copy_of_a = store.get("entries", "a")
        assert isinstance(copy_of_a, dict)
        copy_of_a["n"] = 99
        assert store.get("entries", "a") == {"n": 1}, "get 给的是副本"
        assert [item.id for item in store.list("entries")] == ["a", "c", "d"]

    asyncio.run(scenario())


@pytest.mark.lab19_1
@pytest.mark.edits("DurableSession.commit")
def test_concurrent_commits_run_one_at_a_time_and_each_change_sees_the_last_commit() -> None:
    """两个并发的 session.commit 是否串行执行：第二个 change 要等第一个提交完成才开始，并读到第一次提交后的状
    态？"""

    async def scenario() -> None:
        session = DurableSession(DurableStore())
        order: list[str] = []
        gate = asyncio.Event()
        first_started = asyncio.Event()

        async def first_change(tx: Transaction) -> str:
            order.append("first:start")
            first_started.set()
            await gate.wait()
            tx.put("entries", "e1", {"n": 1})
            order.append("first:end")
            return "first"

        def second_change(tx: Transaction) -> str:
            order.append(f"second:sees:{json.dumps(tx.get('entries', 'e1'), separators=(',', ':'))}")
            tx.put("entries", "e2", {"n": 2})
            return "second"

        first: Awaitable[str] = session.commit(first_change)
        second: Awaitable[str] = session.commit(second_change)
        await first_started.wait()
        for _ in range(5):
            await asyncio.sleep(0)  # a few loop turns: a second change not held back would start here
        assert order == ["first:start"], "第二个 change 必须等第一个提交完成"
        assert session.get("entries", "e1") is None, "提交前不可见"
        gate.set()
        assert list(await asyncio.gather(first, second)) == ["first", "second"]
        assert order == ["first:start", "first:end", 'second:sees:{"n":1}']
        assert [item.id for item in session.list("entries")] == ["e1", "e2"]

    asyncio.run(scenario())


@pytest.mark.lab19_1
@pytest.mark.edits("DurableSession.commit")
def test_nothing_becomes_visible_when_a_change_raises_or_the_store_refuses() -> None:
    """change 抛错或存储拒绝时，session 与存储是否都没有任何进展、不产生提交，而后面的提交照常进行；只读的
    change 是否不产生提交？"""

    async def scenario() -> None:
        store = DurableStore()
        session = DurableSession(store)
        commits: list[int] = []
        store.on_commit(lambda seq, _writes: commits.append(seq))

        def failing(tx: Transaction) -> None:
            tx.put("entries", "e1", {"n": 1})
            raise ChangeFailed("change failed")

        with pytest.raises(ChangeFailed, match="change failed"):
            await session.commit(failing)

        def refused(tx: Transaction) -> None:
            tx.put("entries", "e1", {"n": 1})
            not_json: Any = {"bad": lambda: None}
            tx.put("tasks", "t1", not_json)

        with pytest.raises(StorageRejected):
            await session.commit(refused)
        assert session.list("entries") == []
        assert store.list("entries") == []
        assert commits == []

        await session.commit(lambda tx: tx.put("entries", "e1", {"n": 1}))
        assert commits == [1]
        assert session.get("entries", "e1") == {"n": 1}
        assert await session.commit(lambda _tx: "read only") == "read only"
        assert commits == [1], "没有写入的 change 不产生提交"

    asyncio.run(scenario())


@pytest.mark.lab19_1
@pytest.mark.edits("DurableSession.commit")
def test_a_session_starts_from_the_store_and_hands_out_copies() -> None:
    """在已有记录的存储上新建的 session 是否从已提交状态开始，而 get、list 与 tx 读到的值都是副本，改了也不影
    响可见状态？"""

    async def scenario() -> None:
        store = DurableStore()
        await store.commit([write("entries", "e1", {"n": [1]})])
        session = DurableSession(store)
        assert session.store is store
        assert session.get("entries", "e1") == {"n": [1]}
        seen = session.get("entries", "e1")
        assert isinstance(seen, dict)
        seen["n"] = "changed"
        listed = session.list("entries")[0].value
        assert isinstance(listed, dict)
        listed["n"] = "changed"

        def change(tx: Transaction) -> None:
            inside = tx.get("entries", "e1")
            assert isinstance(inside, dict)
            inside["n"] = "changed"
            tx.put("entries", "e2", {"copy_of": inside})

        await session.commit(change)
        assert session.get("entries", "e1") == {"n": [1]}
        assert store.get("entries", "e1") == {"n": [1]}
        assert session.get("entries", "e2") == store.get("entries", "e2") == {"copy_of": {"n": "changed"}}

    asyncio.run(scenario())


# ## Lab 19.2 · tasks: pending → running → completed, and running back to pending on reopen


@pytest.mark.lab19_2
@pytest.mark.edits("DurableHarness.run")
def test_prompt_commits_entry_and_task_together_and_run_walks_pending_running_completed() -> None:
    """prompt 是否把用户 entry 与 generation 任务放进同一次提交；run 是否让任务 pending → running →
    completed，回复与完成同一次提交，检查点整条替换、不再带 partial？"""

    async def scenario() -> None:
        store = DurableStore()
        log = observe(store)
        harness = await DurableHarness.open(
            store=store, model=ScriptedModel([assistant_message([text("hello")])]), create_id=ids()
        )
        await harness.prompt("c1", "hi")
        assert log == ["1:entry:user", "1:generation:pending:request"]
        assert statuses(harness) == ["pending"]

        await harness.run()
        assert log == [
            "1:entry:user",
            "1:generation:pending:request",
            "2:generation:running:request",
            "3:generation:running:request",
            "4:entry:assistant",
            "4:generation:completed:request",
        ]
        assert roles(harness) == ["user", "assistant"]
        assert statuses(harness) == ["completed"]
        assert harness.tasks()[0].checkpoint == GenerationCheckpoint(), "完成后检查点不再带 partial"
        await harness.run()
        assert store.current_seq == 4, "没有 pending 任务时 run 不提交"

    asyncio.run(scenario())


@pytest.mark.lab19_2
@pytest.mark.edits("DurableHarness.open")
def test_reopening_turns_running_back_to_pending_and_leaves_other_tasks_alone() -> None:
    """从第 6 次提交后崩溃的快照重新打开时，running 的任务是否改回 pending、已完成的任务不变，再 run 后会话以
    新的回复结尾？"""

    async def scenario() -> None:
        store = DurableStore()
        log = observe(store)
        harness = await DurableHarness.open(
            store=store,
            model=ScriptedModel([assistant_message([text("one")]), assistant_message([text("never")])]),
            create_id=ids(),
        )
        await harness.prompt("c1", "first")
        await harness.run()
        await harness.prompt("c1", "second")
        controller = abort_at(store, 6)
        await harness.run(signal=controller.signal)
        crashed = store.snapshot()
        assert statuses(harness) == ["completed", "running"], f"崩溃点的状态：{' '.join(log)}"
        assert crashed.seq == 6, "signal 之后不再有提交"

        reopened = await DurableHarness.open(
            store=reopened_store(crashed),
            model=ScriptedModel([assistant_message([text("two")])]),
            create_id=ids("r"),
        )
        assert statuses(reopened) == ["completed", "pending"]
        running_before = crashed.tasks
        reopened_tasks = [task.to_dict() for task in reopened.tasks()]
        assert reopened_tasks[0] == running_before[reopened_tasks[0]["id"]], "已完成的任务原样不动"
        assert {**reopened_tasks[1], "status": "running"} == running_before[reopened_tasks[1]["id"]]
        await reopened.run()
        assert statuses(reopened) == ["completed", "completed"]
        assert [
            message.content if isinstance(message, AssistantMessage) else message.role
            for message in reopened.messages("c1")
        ] == ["user", [text("one")], "user", [text("two")]]

    asyncio.run(scenario())


@pytest.mark.lab19_2
@pytest.mark.edits("DurableHarness.open", "DurableHarness.run")
def test_opening_without_running_tasks_and_a_run_aborted_beforehand_commit_nothing() -> None:
    """打开一个没有 running 任务的存储是否不产生提交；signal 已经触发的 run 是否一次都不提交、任务仍是
    pending？"""

    async def scenario() -> None:
        store = DurableStore()
        model = ScriptedModel([assistant_message([text("unused")])])
        harness = await DurableHarness.open(store=store, model=model, create_id=ids())
        assert store.current_seq == 0
        await harness.prompt("c1", "hi")
        controller = AbortController()
        controller.abort()
        await harness.run(signal=controller.signal)
        assert store.current_seq == 1
        assert statuses(harness) == ["pending"]
        assert model.requests == []
        again = await DurableHarness.open(store=store, model=model, create_id=ids("r"))
        assert store.current_seq == 1, "没有 running 任务时打开不提交"
        assert statuses(again) == ["pending"]

    asyncio.run(scenario())


# ## Lab 19.3 · the tool intent before execute(), and replay only when both sides say safe


@pytest.mark.lab19_3
def test_the_tool_intent_is_committed_before_execute_and_the_result_lands_with_the_next_generation() -> None:
    """工具任务是否在 execute() 之前提交意图（参数与 replay 策略），结果 entry、任务完成与下一轮 generation 是
    否在意图之后同一次提交里出现？"""

    async def scenario() -> None:
        store = DurableStore()
        log = observe(store)
        tool = CountingTool()
        harness = await DurableHarness.open(
            store=store,
            model=ScriptedModel(
                [
                    assistant_message([text("calling"), call("c1", "x")], "toolUse"),
                    assistant_message([text("done")]),
                ]
            ),
            tools=registration(tool, "safe"),
            create_id=ids(),
        )
        await harness.prompt("c1", "go")
        await harness.run()
        assert log == [
            "1:entry:user",
            "1:generation:pending:request",
            "2:generation:running:request",
            "3:generation:running:request",
            "4:entry:assistant",
            "4:tool:pending:call",
            "4:generation:completed:request",
            "5:tool:running:call",
            "6:tool:running:execute",
            "7:entry:toolResult",
            "7:tool:completed:execute",
            "7:generation:pending:request",
            "8:generation:running:request",
            "9:generation:running:request",
            "10:entry:assistant",
            "10:generation:completed:request",
        ]
        assert tool.runs == 1
        tool_task = harness.tasks()[1]
        assert tool_task.checkpoint == ToolCheckpointExecute(arguments={"value": "x"}, replay="safe")
        assert roles(harness) == ["user", "assistant", "toolResult", "assistant"]
        result = harness.messages("c1")[2]
        assert isinstance(result, ToolResultMessage)
        assert first_text(result) == "echo:x"

    asyncio.run(scenario())


@pytest.mark.lab19_3
def test_a_safe_tool_interrupted_after_its_intent_runs_once_again_on_recovery() -> None:
    """工具挂起时意图是否已可见而结果尚未可见；恢复时存储意图与当前注册都是 replay:safe，工具是否用存储的参数
    从头重跑一次、结果正常？"""

    async def scenario() -> None:
        store = DurableStore()
        hanging = CountingTool(hang_on=1)
        harness = await DurableHarness.open(
            store=store,
            model=ScriptedModel([assistant_message([call("c1", "x")], "toolUse")]),
            tools=registration(hanging, "safe"),
            create_id=ids(),
        )
        await harness.prompt("c1", "go")
        controller = AbortController()
        running = asyncio.ensure_future(harness.run(signal=controller.signal))
        await hanging.started.wait()
        assert harness.tasks()[1].checkpoint == ToolCheckpointExecute(
            arguments={"value": "x"}, replay="safe"
        ), "意图在 execute 之前已可见"
        assert len(harness.messages("c1")) == 2, "结果尚未可见"
        controller.abort()
        await running
        crashed = store.snapshot()

        rerun = CountingTool()
        reopened = await DurableHarness.open(
            store=reopened_store(crashed),
            model=ScriptedModel([assistant_message([text("done")])]),
            tools=registration(rerun, "safe"),
            create_id=ids("r"),
        )
        assert reopened.tasks()[1].status == "pending"
        await reopened.run()
        assert rerun.runs == 1, "重跑一次"
        assert statuses(reopened) == ["completed", "completed", "completed"]
        result = reopened.messages("c1")[2]
        assert isinstance(result, ToolResultMessage)
        assert result.is_error is False
        assert first_text(result) == "echo:x"

    asyncio.run(scenario())


@pytest.mark.lab19_3
@pytest.mark.parametrize(
    ("stored", "current"),
    [("unsafe", "safe"), ("safe", "unsafe"), ("unsafe", "unsafe"), ("safe", None), ("safe", "unregistered")],
)
def test_an_unsafe_intent_or_registration_gets_an_interrupted_result_instead_of_a_rerun(
    stored: ReplayPolicy, current: str | None
) -> None:
    """存储意图是 unsafe，或当前注册改成 unsafe（缺省也是 unsafe）、甚至不再注册这个工具时，恢复是否都不重跑，
    而是给模型一条 interrupted 错误结果、任务 failed，会话照常进入下一轮？"""

    async def crash_after_intent() -> DurableSnapshot:
        store = DurableStore()
        hanging = CountingTool(hang_on=1)
        harness = await DurableHarness.open(
            store=store,
            model=ScriptedModel([assistant_message([call("c1", "x")], "toolUse")]),
            tools=registration(hanging, stored),
            create_id=ids(),
        )
        await harness.prompt("c1", "go")
        controller = AbortController()
        running = asyncio.ensure_future(harness.run(signal=controller.signal))
        await hanging.started.wait()
        controller.abort()
        await running
        return store.snapshot()

    async def scenario() -> None:
        rerun = CountingTool()
        policies: dict[str | None, ReplayPolicy | None] = {"safe": "safe", "unsafe": "unsafe", None: None}
        tools = [] if current == "unregistered" else registration(rerun, policies[current])
        reopened = await DurableHarness.open(
            store=reopened_store(await crash_after_intent()),
            model=ScriptedModel([assistant_message([text("after interruption")])]),
            tools=tools,
            create_id=ids("r"),
        )
        await reopened.run()
        assert rerun.runs == 0, f"{stored}/{current} 不该重跑"
        tool_task = reopened.tasks()[1]
        assert tool_task.status == "failed"
        assert "interrupted" in (tool_task.error or "")
        result = reopened.messages("c1")[2]
        assert isinstance(result, ToolResultMessage)
        assert result.is_error is True
        assert result.tool_call_id == "c1"
        assert result.details == {
            "error": "interrupted",
            "message": "Tool echo was interrupted and may have partially run",
        }
        assert roles(reopened) == ["user", "assistant", "toolResult", "assistant"], (
            "模型拿到 interrupted 结果后继续下一轮"
        )

    asyncio.run(scenario())


@pytest.mark.lab19_3
def test_unknown_tools_and_bad_arguments_settle_without_an_intent_and_the_next_turn_waits_for_both() -> None:
    """未注册的工具与参数不合法的调用是否不提交意图、直接以错误结果 completed，而下一轮 generation 只在同一条
    回复的所有调用都结束后才创建？"""

    async def scenario() -> None:
        store = DurableStore()
        log = observe(store)
        tool = CountingTool()
        model = ScriptedModel(
            [
                assistant_message(
                    [call("a", "x", name="missing"), ToolCall(id="b", name="echo", arguments={"value": 1})],
                    "toolUse",
                ),
                assistant_message([text("done")]),
            ]
        )
        harness = await DurableHarness.open(
            store=store, model=model, tools=registration(tool, "safe"), create_id=ids()
        )
        await harness.prompt("c1", "go")
        await harness.run()
        assert tool.runs == 0
        assert not any(":execute" in line for line in log), "没有执行就没有意图"
        assert log == [
            "1:entry:user",
            "1:generation:pending:request",
            "2:generation:running:request",
            "3:entry:assistant",
            "3:tool:pending:call",
            "3:tool:pending:call",
            "3:generation:completed:request",
            "4:tool:running:call",
            "5:entry:toolResult",
            "5:tool:completed:call",
            "6:tool:running:call",
            "7:entry:toolResult",
            "7:tool:completed:call",
            "7:generation:pending:request",
            "8:generation:running:request",
            "9:generation:running:request",
            "10:entry:assistant",
            "10:generation:completed:request",
        ]
        missing, invalid = harness.messages("c1")[2:4]
        assert isinstance(missing, ToolResultMessage) and isinstance(invalid, ToolResultMessage)
        assert (missing.tool_call_id, missing.is_error, missing.details) == (
            "a",
            True,
            {"error": "unknown_tool", "message": "未知工具"},
        )
        assert first_text(missing) == "Tool missing failed: 未知工具"
        assert (invalid.tool_call_id, invalid.is_error, invalid.details) == (
            "b",
            True,
            {"error": "invalid_arguments", "message": "必须是 string"},
        )
        assert statuses(harness) == ["completed", "completed", "completed", "completed"]
        assert len(model.requests[1].messages) == 4, "第二次请求带着两条结果"

    asyncio.run(scenario())


# ## Lab 19.4 · partial output committed, an aborted entry after a crash, and the request again


@pytest.mark.lab19_4
def test_partial_output_is_committed_step_by_step_and_becomes_an_aborted_entry_after_a_crash() -> None:
    """流式部分输出是否逐个增量提交、只在检查点里；崩溃后重新打开时，已提交的部分输出是否变成一条 aborted 的
    assistant entry，请求用同样的消息从头重发？"""

    async def scenario() -> None:
        store = DurableStore()
        log = observe(store)
        hanging = ManualModel(["Hel", "lo"])
        harness = await DurableHarness.open(store=store, model=hanging, create_id=ids())
        await harness.prompt("c1", "say hello")
        controller = abort_at(store, 4)
        await harness.run(signal=controller.signal)
        assert log[2:] == [
            "2:generation:running:request",
            "3:generation:running:request",
            "4:generation:running:request",
        ]
        crashed_task = harness.tasks()[0]
        assert isinstance(crashed_task, TaskRecordGeneration)
        assert first_text(crashed_task.checkpoint.partial) == "Hello"
        assert len(harness.messages("c1")) == 1, "部分输出只在检查点里，不是 entry"
        crashed = store.snapshot()

        completed = assistant_message([text("Hello there")])
        fresh = ManualModel(["Hello there"], completed)
        reopened = await DurableHarness.open(store=reopened_store(crashed), model=fresh, create_id=ids("r"))
        await reopened.run()
        messages = reopened.messages("c1")
        assert [message.role for message in messages] == ["user", "assistant", "assistant"]
        aborted = messages[1]
        assert isinstance(aborted, AssistantMessage)
        assert aborted.stop_reason == "aborted"
        assert first_text(aborted) == "Hello"
        assert messages[2] == completed
        assert fresh.requests[0].messages == hanging.requests[0].messages, "重发用的是同样的消息"
        assert len(fresh.requests[0].messages) == 1, "aborted entry 不在重发的请求里"
        task = reopened.tasks()[0]
        assert task.status == "completed"
        assert task.checkpoint == GenerationCheckpoint()

    asyncio.run(scenario())


@pytest.mark.lab19_4
def test_a_crash_right_after_recovery_does_not_turn_the_partial_into_a_second_entry() -> None:
    """恢复提交（aborted entry 与清空的检查点）刚落盘进程就再次崩溃时，第三个进程是否不会再写一条 aborted
    entry，而是直接重发同样的请求？"""

    async def scenario() -> None:
        store = DurableStore()
        harness = await DurableHarness.open(store=store, model=ManualModel(["Hel"]), create_id=ids())
        await harness.prompt("c1", "say hello")
        await harness.run(signal=abort_at(store, 3).signal)
        second_store = reopened_store(store.snapshot())
        controller = AbortController()

        def crash_on_recovery(_seq: int, writes: Sequence[DurableWrite]) -> None:
            if any(item.collection == "entries" for item in writes):
                controller.abort()

        second_store.on_commit(crash_on_recovery)
        second = await DurableHarness.open(
            store=second_store, model=ManualModel(["never"]), create_id=ids("r")
        )
        await second.run(signal=controller.signal)
        assert roles(second) == ["user", "assistant"]
        task = second.tasks()[0]
        assert isinstance(task, TaskRecordGeneration)
        assert task.status == "running"
        assert task.checkpoint == GenerationCheckpoint(), "aborted entry 与清空的检查点在同一次提交里"

        final = assistant_message([text("Hello there")])
        third_model = ManualModel(["Hello there"], final)
        third = await DurableHarness.open(
            store=reopened_store(second_store.snapshot()), model=third_model, create_id=ids("s")
        )
        await third.run()
        assert roles(third) == ["user", "assistant", "assistant"]
        assert [getattr(message, "stop_reason", None) for message in third.messages("c1")] == [
            None,
            "aborted",
            "stop",
        ]
        assert len(third_model.requests[0].messages) == 1

    asyncio.run(scenario())


@pytest.mark.lab19_4
def test_a_model_error_reply_is_stored_and_creates_no_new_generation() -> None:
    """模型以 error 结束时，错误回复是否作为 entry 落盘、任务 completed 且不创建新的 generation；下一次 prompt
    是否从新的用户消息继续？"""

    async def scenario() -> None:
        store = DurableStore()
        harness = await DurableHarness.open(
            store=store,
            model=ScriptedModel(
                [
                    ScriptedErrorTurn(stop_reason="error", error_message="rate limited"),
                    assistant_message([text("recovered")]),
                ]
            ),
            create_id=ids(),
        )
        await harness.prompt("c1", "first")
        await harness.run()
        assert [f"{task.kind}:{task.status}" for task in harness.tasks()] == ["generation:completed"]
        failed = harness.messages("c1")[1]
        assert isinstance(failed, AssistantMessage)
        assert failed.stop_reason == "error"
        assert failed.error_message == "rate limited"

        await harness.prompt("c1", "again")
        await harness.run()
        assert roles(harness) == ["user", "assistant", "user", "assistant"]
        assert statuses(harness) == ["completed", "completed"]

    asyncio.run(scenario())
