"""Focused tests of checkpoint 16: model scripts run in a QuickJS sandbox, in a worker process of their own.

Every script here runs for real: a fresh worker process (`codemode_worker`) with a fresh QuickJS VM,
talking to this host over its standard streams. Nothing stands in for the VM or for the process; a
deadline or an abort kills a real process. Ordering across awaits is held by `asyncio.Event` gates the
tests open, never by sleeping; the only clocks are the deadlines under test and generous upper bounds.

On the starter, 06's executor turns a stub's `LabNotImplemented` into a failed result, and a stub in the
worker process comes back as a `sandbox` failure; `raise_stub` raises them again here, so that the
report names the lab to do.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    CODEMODE_TOOL_NAME,
    MAX_OUTPUT_CHARS,
    MAX_OUTPUT_ITEMS,
    AbortController,
    AbortSignal,
    AgentContext,
    AgentMessage,
    AgentRunResult,
    CodemodeCall,
    CodemodeScriptFailure,
    CodemodeScriptResult,
    CodemodeScriptSuccess,
    CodemodeScriptTool,
    CodemodeToolContext,
    CodemodeToolDetails,
    CodemodeToolInfo,
    CodemodeWorkerData,
    Execution,
    HostToWorkerMessage,
    LabNotImplemented,
    NestedCallLimits,
    NestedCallLog,
    NestedCallRecord,
    NestedCalls,
    Outgoing,
    ScriptedModel,
    Tool,
    ToolCall,
    ToolContext,
    ToolExposure,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    WorkerToHostMessage,
    WorkerToHostMessageCall,
    WorkerToHostMessageCrash,
    WorkerToHostMessageDone,
    WorkerToHostMessageOutput,
    assistant_message,
    compact_json,
    create_codemode_tool,
    create_nested_tool_bridge,
    current_tools,
    encode_message,
    execute_tool_call,
    object_schema,
    parse_host_to_worker_message,
    parse_worker_to_host_message,
    run_agent_loop,
    run_codemode_script,
    run_worker,
    string_value,
    text,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time.

STUB = re.compile(r"Lab (\d+\.\d+) not implemented: (\S+)")

#: The upper bound of anything that must end "at once" or "soon": far above the real time, far below
#: the default 30 s deadline.
SOON_S = 4.0
#: The deadlines tried for a script that waits on a tool, shortest first: the course's 100 ms (a worker is
#: started ahead of need, so the call reaches the host well within it), then wider ones for a run in
#: which a busy machine did not get that far.
WAIT_DEADLINES_MS = (100, 1500, 6000, 24_000)


def raise_stub_text(message: str) -> None:
    """Raise the `LabNotImplemented` named in a failure's text, if any."""
    if stub := STUB.search(message):
        raise LabNotImplemented(stub[1], stub[2])


def checked(result: CodemodeScriptResult) -> CodemodeScriptResult:
    """A script result, after raising the stub a worker process reported as a sandbox failure."""
    if isinstance(result, CodemodeScriptFailure) and result.error.kind == "sandbox":
        raise_stub_text(result.error.message)
    return result


def raise_stub(result: ToolResultMessage) -> ToolResultMessage:
    """Raise the `LabNotImplemented` that the executor turned into this failed result, if any."""
    if result.is_error:
        raise_stub_text(" ".join(block.text for block in result.content))
    return result


def run_script(code: str, **options: Any) -> CodemodeScriptResult:
    """`run_codemode_script` on a fresh event loop."""
    return checked(asyncio.run(run_codemode_script(code, **options)))


def failure_of(result: CodemodeScriptResult) -> CodemodeScriptFailure:
    """The result, which must be a failure."""
    assert isinstance(result, CodemodeScriptFailure), result
    return result


def success_of(result: CodemodeScriptResult) -> CodemodeScriptSuccess:
    """The result, which must be a success."""
    assert isinstance(result, CodemodeScriptSuccess), result
    return result


ScriptFunction = Callable[[object, CodemodeToolContext], Awaitable[object]]


def script_tools(entries: dict[str, ScriptFunction]) -> dict[str, CodemodeScriptTool]:
    """A script's tool table, each tool described as `<name> tool`."""
    return {
        name: CodemodeScriptTool(execute=execute, description=f"{name} tool")
        for name, execute in entries.items()
    }


class EchoTool:
    """A registry tool `<name>` that answers `<name>:<value>` and counts its runs and call ids."""

    def __init__(self, name: str, exposure: ToolExposure | None = None) -> None:
        self.name = name
        self.runs = 0
        self.call_ids: list[str] = []
        self.tool: Tool[dict[str, Any], dict[str, str]] = Tool(
            name=name,
            description=f"{name} returns its value",
            schema=object_schema({"value": string_value}),
            execute=self.execute,
            exposure=exposure,
        )

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        self.runs += 1
        self.call_ids.append(context.call_id)
        return ToolOutput(content=[text(f"{self.name}:{params['value']}")], details={"name": self.name})


def waiting_tool(name: str, on_start: Callable[[ToolContext], None]) -> Tool[dict[str, Any], None]:
    """A tool that never ends by itself: it fails with `<name> aborted` when its signal fires."""

    async def execute(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        aborted: asyncio.Future[ToolOutput[None]] = asyncio.get_running_loop().create_future()

        def fail() -> None:
            if not aborted.done():
                aborted.set_exception(RuntimeError(f"{name} aborted"))

        assert context.signal is not None
        context.signal.add_event_listener("abort", fail)
        on_start(context)
        return await aborted

    return Tool(
        name=name,
        description="waits for its signal",
        schema=object_schema({"value": string_value}),
        execute=execute,
    )


def call(call_id: str, name: str, arguments: object) -> ToolCall:
    """A tool call as a model would send it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


def details_of(result: ToolResultMessage) -> CodemodeToolDetails:
    """A codemode result's details."""
    assert isinstance(result.details, CodemodeToolDetails), result.details
    return result.details


def error_kind(result: ToolResultMessage) -> str | None:
    """The kind of a failed codemode result's error (None where there is none)."""
    error = details_of(result).error
    return None if error is None else error.kind


def aborted_signal(reason: object) -> AbortSignal:
    """AbortSignal.abort(reason): a signal that has already fired."""
    controller = AbortController()
    controller.abort(reason)
    return controller.signal


async def loop(
    model: ScriptedModel, registry: ToolRegistry, signal: AbortSignal | None = None
) -> AgentRunResult:
    """07's loop over one user message `go`."""
    messages: list[AgentMessage] = [user_message("go")]
    return await run_agent_loop(
        model=model, tools=registry, context=AgentContext(messages=messages), signal=signal
    )


# ## Lab 16.1 · the sandbox: a QuickJS VM in a worker process, and the message bridge


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start", "Execution._handle_call")
def test_a_script_runs_in_quickjs_and_tool_calls_cross_the_bridge_as_json() -> None:
    """脚本是否在独立 worker 的 QuickJS 里运行：await tools.<name>(args) 经消息桥往返，参数与返回值都按 JSON
    到达对面？"""
    seen: list[object] = []

    async def add(args: object, context: CodemodeToolContext) -> object:
        seen.append(args)
        assert isinstance(args, dict)
        return args["a"] + args["b"]

    result = run_script(
        """const sum = await tools.add({ a: 2, b: 3 });
        console.log("sum is", sum);
        const names = ALL_TOOLS.map((tool) => tool.name);
        return { doubled: sum * 2, names, kind: typeof tools.add };""",
        tools=script_tools({"add": add}),
    )

    assert result == CodemodeScriptSuccess(
        value={"doubled": 10, "names": ["add"], "kind": "function"},
        output=["sum is 5"],
        calls=[CodemodeCall(name="add", status="ok")],
    )
    assert result.to_dict() == {
        "ok": True,
        "value": {"doubled": 10, "names": ["add"], "kind": "function"},
        "output": ["sum is 5"],
        "calls": [{"name": "add", "status": "ok"}],
    }
    assert seen == [{"a": 2, "b": 3}]
    assert type(seen[0]) is dict  # a plain object from JSON, nothing of the VM's


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start", "Execution._handle_call")
def test_script_errors_syntax_errors_and_tool_refusals_become_failed_results() -> None:
    """脚本抛错、语法错误与工具拒绝是否都变成 ok=False 的结果，宿主自己从不抛异常？"""
    thrown = failure_of(run_script('throw new TypeError("nope");'))
    assert (thrown.error.kind, thrown.error.name, thrown.error.message) == ("script", "TypeError", "nope")
    assert re.search(r"TypeError: nope", thrown.error.stack or "")

    syntax = failure_of(run_script("return (;"))
    assert (syntax.error.kind, syntax.error.name) == ("script", "SyntaxError")

    async def boom(args: object, context: CodemodeToolContext) -> object:
        raise RuntimeError("boom failed")

    tools = script_tools({"boom": boom})
    caught = run_script(
        'try { await tools.boom(); return "unreachable"; }'
        ' catch (error) { return "caught: " + error.message; }',
        tools=tools,
    )
    assert caught == CodemodeScriptSuccess(
        value="caught: boom failed", output=[], calls=[CodemodeCall(name="boom", status="error")]
    )

    uncaught = failure_of(run_script("await tools.boom();", tools=tools))
    assert (uncaught.error.kind, uncaught.error.message) == ("script", "boom failed")
    assert uncaught.calls == [CodemodeCall(name="boom", status="error")]


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start")
def test_every_execution_is_a_fresh_vm_and_a_runaway_allocation_runs_out_of_memory() -> None:
    """每次执行是否都是新的 VM（全局变量不跨执行泄漏），内存上限下失控的分配是否以 `out of memory` 失败？"""
    first = run_script("globalThis.leak = 1; return typeof globalThis.leak;")
    assert first == CodemodeScriptSuccess(value="number", output=[], calls=[])
    second = run_script("return typeof globalThis.leak;")
    assert second == CodemodeScriptSuccess(value="undefined", output=[], calls=[])

    exhausted = failure_of(
        run_script(
            "const chunks = []; for (;;) chunks.push(new Array(100_000).fill(1));",
            memory_limit_bytes=16 * 1024 * 1024,
        )
    )
    assert exhausted.error.kind == "script"
    assert re.search(r"out of memory", exhausted.error.message)

    # Many small strings: the engine may crash in its own out-of-memory path, or, with no room left even
    # for the error object, throw null instead of the error; either way a script error, never the sandbox.
    strings = failure_of(
        run_script(
            "const a = []; for (;;) a.push('x'.repeat(1000) + a.length);",
            memory_limit_bytes=16 * 1024 * 1024,
        )
    )
    assert strings.error.kind == "script"
    assert strings.error.message in ("out of memory", "null")


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start")
def test_a_promise_that_can_never_settle_fails_at_once_as_stalled() -> None:
    """没有计时器与 I/O 时，等待一个永不结算的 promise 是否立刻以 stalled 失败，而不是一直挂到 deadline？"""
    started = time.monotonic()
    result = failure_of(run_script('await new Promise(() => {}); return "never";'))
    assert result.error.kind == "script"
    assert re.search(r"can never settle", result.error.message)
    assert time.monotonic() - started < SOON_S, "a stalled script must not wait for the deadline"


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start")
def test_the_sandbox_has_no_timers_no_io_and_no_reach_to_the_bridge() -> None:
    """脚本里是否没有计时器、fetch、require、process，也拿不到 worker 的桥函数，只有 tools、ALL_TOOLS 与
    console？"""
    result = run_script(
        """return [typeof setTimeout, typeof fetch, typeof require, typeof process,
          typeof globalThis.__codemode_bridge,
          typeof tools, typeof ALL_TOOLS, typeof console.log];"""
    )
    assert success_of(result).value == [
        "undefined",
        "undefined",
        "undefined",
        "undefined",
        "undefined",
        "object",
        "object",
        "function",
    ]


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker", "Execution._start")
def test_printing_past_the_output_cap_fails_with_a_range_error_the_script_cannot_catch_away() -> None:
    """循环打印超过输出上限时，脚本是否以 RangeError 失败、catch 住之后也不能继续输出，宿主只保留上限之内的输
    出？"""
    large = failure_of(
        run_script('const s = "x".repeat(1 << 20); for (;;) { try { console.log(s); } catch {} }')
    )
    assert (large.error.kind, large.error.name) == ("script", "RangeError")
    assert re.search(r"script output exceeded", large.error.message)
    chars = sum(len(line) for line in large.output)
    assert chars <= MAX_OUTPUT_CHARS, "the host keeps no more than the cap"
    assert chars > MAX_OUTPUT_CHARS - (2 << 20), "what fits under the cap is kept"

    empty = failure_of(run_script('for (;;) console.log("");'))
    assert empty.error.name == "RangeError"
    assert len(empty.output) == MAX_OUTPUT_ITEMS


@pytest.mark.lab16_1
@pytest.mark.edits("run_worker")
def test_the_worker_speaks_one_json_line_per_message_in_both_directions() -> None:
    """worker 是否按协议说话：读进数据行与结果行，依次写出 output、call 与 done 各一行紧凑 JSON，而不认识的行
    被忽略？"""
    data = CodemodeWorkerData(
        code='console.log("hi", 1); const r = await tools.echo({ value: "值" });'
        " return [r, typeof tools.echo];",
        tools=[CodemodeToolInfo(name="echo", description="echo tool")],
    )
    replies = [
        b"not a message\n",
        encode_message(HostToWorkerMessage(id=1, ok=True, payload='{"text":"值"}')),
    ]
    written = io.BytesIO()
    run_worker(data, iter(replies), Outgoing(written))

    lines = written.getvalue().splitlines(keepends=True)
    assert all(line.endswith(b"\n") for line in lines)
    assert [parse_worker_to_host_message(line) for line in lines] == [
        WorkerToHostMessageOutput(text="hi 1"),
        WorkerToHostMessageCall(id=1, name="echo", args='{"value":"值"}'),
        WorkerToHostMessageDone(ok=True, value='[{"text":"值"},"function"]'),
    ]
    assert lines[1] == '{"type":"call","id":1,"name":"echo","args":"{\\"value\\":\\"值\\"}"}\n'.encode()

    messages: list[WorkerToHostMessage] = [
        WorkerToHostMessageCall(id=2, name="wait"),
        WorkerToHostMessageDone(ok=True),
        WorkerToHostMessageDone(ok=False, error='{"message":"x"}'),
        WorkerToHostMessageCrash(message="ImportError: quickjs"),
    ]
    for message in messages:
        assert parse_worker_to_host_message(encode_message(message)) == message
    reply = HostToWorkerMessage(id=3, ok=False, payload="Tool read failed: 未知工具")
    assert parse_host_to_worker_message(encode_message(reply)) == reply
    assert encode_message(HostToWorkerMessage(id=4, ok=True)) == b'{"type":"result","id":4,"ok":true}\n'
    for junk in (
        b"",
        b"not json\n",
        b"[1]\n",
        b'{"type":"call","id":"1","name":"x"}\n',
        b'{"type":"nope"}\n',
    ):
        assert parse_worker_to_host_message(junk) is None
        assert parse_host_to_worker_message(junk) is None


# ## Lab 16.2 · nested calls: through the 06 / 15 execution path, with a bounded record


@pytest.mark.lab16_2
@pytest.mark.edits("create_nested_tool_bridge")
def test_nested_calls_take_the_06_15_path_with_parent_ids_and_only_the_callable_set() -> None:
    """嵌套调用是否走第 06/15 章的执行路径：id 为 <parent>/<n>，表里只有可调用集合，读取不存在的成员抛出带近似
    名的 TypeError？"""
    read = EchoTool("read")
    issues = EchoTool("mcp_github_issues", "deferred")
    search = EchoTool("tool_search", "model-only")
    secret = EchoTool("secret", "hidden")
    registry = ToolRegistry([read.tool, issues.tool, search.tool, secret.tool])
    bridge = create_nested_tool_bridge(registry, "call-1")

    assert list(bridge.tools) == ["read", "mcp_github_issues"]

    result = run_script(
        """const a = await tools.read({ value: "x" });
        const b = await tools.mcp_github_issues({ value: "y" });
        let missing;
        try { tools.tool_search; } catch (error) { missing = error.name + ": " + error.message; }
        return { a, b, missing };""",
        tools=bridge.tools,
    )

    value = success_of(result).value
    assert isinstance(value, dict)
    assert value["a"] == {"text": "read:x", "details": {"name": "read"}}
    assert value["b"] == {"text": "mcp_github_issues:y", "details": {"name": "mcp_github_issues"}}
    assert re.match(r"TypeError: tools\.tool_search does not exist\.", value["missing"])
    assert re.search(r"ALL_TOOLS lists every tool", value["missing"])
    assert read.call_ids == ["call-1/1"]
    assert issues.call_ids == ["call-1/2"]
    assert search.runs == 0
    assert secret.runs == 0
    assert bridge.nested_calls() == NestedCalls(
        calls=[
            NestedCallRecord(id="call-1/1", name="read", status="ok", arguments={"value": "x"}),
            NestedCallRecord(id="call-1/2", name="mcp_github_issues", status="ok", arguments={"value": "y"}),
        ],
        count=2,
        complete=True,
    )
    assert bridge.nested_calls().to_dict()["calls"][0] == {
        "id": "call-1/1",
        "name": "read",
        "status": "ok",
        "arguments": {"value": "x"},
    }

    suggestion = failure_of(run_script("return tools.readFile;", tools=bridge.tools))
    assert re.search(r"Did you mean tools\.read\?", suggestion.error.message)


@pytest.mark.lab16_2
@pytest.mark.edits("create_nested_tool_bridge", "NestedCallLog.settle")
def test_one_failing_nested_call_never_loses_the_others_of_its_batch() -> None:
    """一个嵌套调用失败时，同批的其他调用是否照常完成：参数校验失败与工具抛错都只影响自己？"""
    ok = EchoTool("ok")

    async def explode(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        raise RuntimeError("failing exploded")

    failing: Tool[dict[str, Any], None] = Tool(
        name="failing",
        description="always throws",
        schema=object_schema({"value": string_value}),
        execute=explode,
    )
    bridge = create_nested_tool_bridge(ToolRegistry([ok.tool, failing]), "call-2")

    result = run_script(
        """const settled = await Promise.allSettled([
          tools.ok({ value: "1" }),
          tools.failing({ value: "2" }),
          tools.ok({ value: 3 }),
          tools.ok({ value: "4" }),
        ]);
        return settled.map((entry) => entry.status === "fulfilled"
          ? entry.value.text : "rejected: " + entry.reason.message);""",
        tools=bridge.tools,
    )

    value = success_of(result).value
    assert isinstance(value, list)
    first, second, third, fourth = value
    assert first == "ok:1"
    assert re.match(r"rejected: Tool failing failed: failing exploded", second)
    assert re.match(r"rejected: Tool ok failed: 必须是 string", third)
    assert fourth == "ok:4"
    assert ok.runs == 2
    nested = bridge.nested_calls()
    assert [(record.id, record.status) for record in nested.calls] == [
        ("call-2/1", "ok"),
        ("call-2/2", "error"),
        ("call-2/3", "error"),
        ("call-2/4", "ok"),
    ]
    assert re.search(r"failing exploded", nested.calls[1].error or "")
    assert "result" not in nested.calls[0].to_dict()
    assert nested.calls[0].error is None


@pytest.mark.lab16_2
@pytest.mark.edits("NestedCallLog.start", "create_nested_tool_bridge")
def test_the_nested_record_is_bounded_and_never_keeps_a_result() -> None:
    """nested_calls 的记录是否有界：超过条数上限的调用照样执行但不记录，超大参数只记字节数，结果从不记录？"""
    tool = EchoTool("echo")
    bridge = create_nested_tool_bridge(
        ToolRegistry([tool.tool]),
        "call-3",
        limits=NestedCallLimits(max_calls=2, max_argument_bytes_per_call=32),
    )

    result = run_script(
        """const big = "x".repeat(40);
        const out = [];
        for (const value of ["a", big, "c", "d"]) out.push((await tools.echo({ value })).text.length);
        return out;""",
        tools=bridge.tools,
    )

    assert success_of(result).value == [6, 45, 6, 6]
    assert tool.runs == 4
    assert tool.call_ids == ["call-3/1", "call-3/2", "call-3/3", "call-3/4"]
    assert bridge.nested_calls() == NestedCalls(
        calls=[
            NestedCallRecord(id="call-3/1", name="echo", status="ok", arguments={"value": "a"}),
            NestedCallRecord(id="call-3/2", name="echo", status="ok", arguments_bytes=52),
        ],
        count=4,
        complete=False,
    )
    assert bridge.nested_calls().to_dict()["calls"][1] == {
        "id": "call-3/2",
        "name": "echo",
        "status": "ok",
        "argumentsBytes": 52,
    }


@pytest.mark.lab16_2
@pytest.mark.edits("NestedCallLog.start", "NestedCallLog.settle")
def test_the_total_argument_budget_and_the_error_prefix_are_bounded_too() -> None:
    """参数总字节数超出预算的调用是否只记字节数，错误原因是否只保留前 max_error_chars 个字符？"""
    log = NestedCallLog(
        NestedCallLimits(max_argument_bytes_per_call=100, max_argument_bytes_total=30, max_error_chars=4)
    )
    first = log.start(call("p/1", "echo", {"value": "aaaa"}))  # 16 bytes
    second = log.start(call("p/2", "echo", {"value": "bbbb"}))  # 16 more: past the total of 30
    third = log.start(call("p/3", "echo", None))  # `{}`, 2 bytes: still fits
    assert first is not None and second is not None and third is not None
    log.settle(first, "error", "exploded")
    log.settle(None, "ok")  # a call left unrecorded settles nothing
    snapshot = log.snapshot()
    assert snapshot.calls == [
        NestedCallRecord(id="p/1", name="echo", status="error", arguments={"value": "aaaa"}, error="expl"),
        NestedCallRecord(id="p/2", name="echo", status="running", arguments_bytes=16),
        NestedCallRecord(id="p/3", name="echo", status="running", arguments={}),
    ]
    assert (snapshot.count, snapshot.complete) == (3, False)
    snapshot.calls[0].status = "ok"
    assert log.snapshot().calls[0].status == "error", "a snapshot is a copy"


json_arguments = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="ab值🙂", max_size=12),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet="kv", max_size=3), children, max_size=3)
    ),
    max_leaves=6,
)


@pytest.mark.lab16_2
@pytest.mark.edits("NestedCallLog.start")
@given(
    arguments=st.lists(json_arguments, max_size=8),
    max_calls=st.integers(min_value=0, max_value=6),
    per_call=st.integers(min_value=0, max_value=60),
    total=st.integers(min_value=0, max_value=120),
)
def test_any_sequence_of_calls_leaves_a_record_within_its_limits(
    arguments: list[object], max_calls: int, per_call: int, total: int
) -> None:
    """对任意一串调用与任意上限，记录是否不超过条数与字节上限、计数包括每一次调用，而 complete 恰好在有省略时
    为 False？"""
    limits = NestedCallLimits(
        max_calls=max_calls, max_argument_bytes_per_call=per_call, max_argument_bytes_total=total
    )
    log = NestedCallLog(limits)
    for index, value in enumerate(arguments, start=1):
        log.start(call(f"p/{index}", "echo", value))
    snapshot = log.snapshot()

    assert snapshot.count == len(arguments)
    assert len(snapshot.calls) == min(len(arguments), max_calls)
    assert [record.id for record in snapshot.calls] == [f"p/{n}" for n in range(1, len(snapshot.calls) + 1)]
    kept = 0
    for record, value in zip(snapshot.calls, arguments, strict=False):
        size = len(compact_json(value if value is not None else {}).encode("utf-8"))
        if record.arguments_bytes is None:
            assert record.arguments == (value if value is not None else {})
            kept += size
        else:
            assert record.arguments is None and record.arguments_bytes == size
    assert kept <= total
    left_out = len(arguments) > max_calls or any(r.arguments_bytes is not None for r in snapshot.calls)
    assert snapshot.complete == (not left_out)


# ## Lab 16.3 · the deadline and the caller's signal


@pytest.mark.lab16_3
@pytest.mark.timeout(60)  # room for each of WAIT_DEADLINES_MS; a loop in your code is still stopped at once
@pytest.mark.edits("Execution._on_deadline")
def test_a_dead_loop_is_interrupted_at_the_deadline_and_its_worker_killed() -> None:
    """死循环是否在 deadline 到期后被打断、worker 被杀掉，结果的 kind 为 timeout，连尚未完成的工具调用也记为
    cancelled？"""

    async def scenario() -> tuple[CodemodeScriptResult, float, int | None]:
        execution = Execution("for (;;) {}", tools={}, timeout_ms=200, memory_limit_bytes=None, signal=None)
        started = time.monotonic()
        result = checked(await execution.run())
        elapsed = time.monotonic() - started
        return result, elapsed, None if execution.process is None else execution.process.returncode

    result, elapsed, returncode = asyncio.run(scenario())
    timed_out = failure_of(result)
    assert timed_out.error.kind == "timeout"
    assert re.search(r"timed out after 200 ms", timed_out.error.message)
    assert elapsed < SOON_S, f"the kill should end it soon, took {elapsed:.2f} s"
    assert returncode is not None, "the worker process has ended"

    reached: list[bool] = []

    async def wait(args: object, context: CodemodeToolContext) -> object:
        reached.append(True)
        aborted: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        context.signal.add_event_listener(
            "abort", lambda: aborted.set_exception(RuntimeError("tool aborted"))
        )
        return await aborted

    for deadline_ms in WAIT_DEADLINES_MS:
        waiting = failure_of(
            run_script("await tools.wait();", tools=script_tools({"wait": wait}), timeout_ms=deadline_ms)
        )
        if reached:
            break
    assert reached, "脚本在最长的 deadline 之前都没有调用到 tools.wait：机器太忙？"
    assert waiting.error.kind == "timeout"
    assert waiting.calls == [CodemodeCall(name="wait", status="cancelled")]


@pytest.mark.lab16_3
@pytest.mark.edits("Execution._watch_signal", "Execution._on_abort")
def test_the_callers_abort_ends_the_worker_and_pending_nested_calls_get_the_signal() -> None:
    """调用方 abort 时，worker 是否结束、未完成的嵌套调用收到 abort 信号并记为 cancelled，预先取消的信号是否根
    本不启动脚本？"""
    signals: list[AbortSignal] = []

    async def scenario() -> tuple[CodemodeScriptResult, NestedCalls]:
        controller = AbortController()
        started = asyncio.Event()

        def on_start(context: ToolContext) -> None:
            assert context.signal is not None
            signals.append(context.signal)
            started.set()

        bridge = create_nested_tool_bridge(
            ToolRegistry([waiting_tool("wait", on_start)]), "call-4", signal=controller.signal
        )
        running = asyncio.ensure_future(
            run_codemode_script(
                'await tools.wait({ value: "x" }); return "done";',
                tools=bridge.tools,
                signal=controller.signal,
            )
        )
        await started.wait()
        assert signals[0].aborted is False
        controller.abort(RuntimeError("user cancelled"))
        return checked(await running), bridge.nested_calls()

    result, nested = asyncio.run(scenario())
    aborted = failure_of(result)
    assert (aborted.error.kind, aborted.error.message) == ("aborted", "user cancelled")
    assert signals[0].aborted is True
    assert aborted.calls == [CodemodeCall(name="wait", status="cancelled")]
    assert [record.status for record in nested.calls] == ["cancelled"]

    pre_aborted = failure_of(run_script("return 1;", signal=aborted_signal(RuntimeError("already"))))
    assert pre_aborted.error.kind == "aborted"
    assert pre_aborted.error.message == "already"

    without_reason = failure_of(run_script("return 1;", signal=aborted_signal(None)))
    assert without_reason.error.message == "Execution aborted"


# ## Lab 16.4 · the codemode tool: model-only, its one argument is a script


@pytest.mark.lab16_4
@pytest.mark.edits("create_codemode_tool", "codemode_output")
def test_codemode_is_a_model_only_tool_answering_json_with_nested_calls_in_its_details() -> None:
    """codemode 是否是 model-only 工具：成功时内容是返回值的 JSON、details 带 nested_calls，失败时 is_error 并
    给出错误种类与近似名建议？"""
    read = EchoTool("read")
    registry = ToolRegistry([read.tool])
    codemode = create_codemode_tool(registry)
    registry.register(codemode)
    assert codemode.exposure == "model-only"
    assert codemode.name == CODEMODE_TOOL_NAME == "codemode"
    assert re.search(r"tools\.read\(args\)", codemode.description)
    assert not re.search(r"tools\.codemode", codemode.description)

    def execute(tool_call: ToolCall, **options: Any) -> ToolResultMessage:
        return raise_stub(asyncio.run(execute_tool_call(tool_call, registry, **options)))

    success = execute(
        call(
            "c1",
            CODEMODE_TOOL_NAME,
            {
                "code": 'console.log("start"); const r = await tools.read({ value: "x" });'
                " return { text: r.text };"
            },
        )
    )
    assert success.is_error is False
    assert success.content[0].text == '{"text":"read:x"}'
    assert details_of(success) == CodemodeToolDetails(
        ok=True,
        output=["start"],
        nested_calls=NestedCalls(
            calls=[NestedCallRecord(id="c1/1", name="read", status="ok", arguments={"value": "x"})],
            count=1,
            complete=True,
        ),
    )
    assert details_of(success).to_dict() == {
        "ok": True,
        "output": ["start"],
        "nestedCalls": {
            "calls": [{"id": "c1/1", "name": "read", "status": "ok", "arguments": {"value": "x"}}],
            "count": 1,
            "complete": True,
        },
    }
    assert read.call_ids == ["c1/1"]

    failure = execute(
        call("c2", CODEMODE_TOOL_NAME, {"code": 'return await tools.read_file({ value: "x" });'})
    )
    assert failure.is_error is True
    assert re.search(
        r"Script failed: TypeError: tools\.read_file does not exist\. Did you mean tools\.read\?",
        failure.content[0].text,
    )
    assert details_of(failure).ok is False
    assert error_kind(failure) == "script"
    assert details_of(failure).nested_calls.calls == []
    assert set(details_of(failure).to_dict()["error"]) == {"kind", "message"}

    script_cannot_nest = execute(call("c3", CODEMODE_TOOL_NAME, {"code": "return 1;"}), scope="script")
    assert script_cannot_nest.is_error is True
    assert re.search(r"不在脚本的可调用集合", script_cannot_nest.content[0].text)


@pytest.mark.lab16_4
@pytest.mark.edits("create_codemode_tool", "codemode_output")
def test_through_the_loop_a_script_calls_deferred_tools_and_nested_calls_stay_out_of_the_transcript() -> None:
    """经 loop 时，脚本调用 deferred 工具是否不必先声明，嵌套调用是否不进入 transcript、只出现在父结果的记录
    里？"""
    read = EchoTool("read")
    issues = EchoTool("mcp_github_issues", "deferred")
    registry = ToolRegistry([read.tool, issues.tool])
    registry.register(create_codemode_tool(registry))
    code = (
        "const [a, b] = await Promise.all("
        '[tools.read({ value: "1" }), tools.mcp_github_issues({ value: "2" })]);'
        ' return a.text + "|" + b.text;'
    )
    model = ScriptedModel(
        [
            assistant_message([call("c1", CODEMODE_TOOL_NAME, {"code": code})], "toolUse"),
            assistant_message([text("done")]),
        ]
    )

    result = asyncio.run(loop(model, registry))

    assert result.reason == "stop"
    assert [message.role for message in result.messages] == [
        "user",
        "system",
        "assistant",
        "toolResult",
        "assistant",
    ]
    tool_result = result.messages[3]
    assert isinstance(tool_result, ToolResultMessage)
    raise_stub(tool_result)
    assert tool_result.tool_call_id == "c1"
    assert tool_result.content[0].text == '"read:1|mcp_github_issues:2"'
    assert [(record.id, record.name) for record in details_of(tool_result).nested_calls.calls] == [
        ("c1/1", "read"),
        ("c1/2", "mcp_github_issues"),
    ]
    assert [tool.name for tool in current_tools(result.messages)] == ["read", CODEMODE_TOOL_NAME]
    assert [[tool.name for tool in request.tools or []] for request in model.requests] == [
        ["read", CODEMODE_TOOL_NAME],
        ["read", CODEMODE_TOOL_NAME],
    ]
    assert issues.runs == 1


@pytest.mark.lab16_4
@pytest.mark.edits("create_codemode_tool", "codemode_output")
def test_a_timeout_is_reported_and_the_loop_goes_on_while_the_loops_abort_ends_the_script_aborted() -> None:
    """超时是否经 details 报告、loop 随后继续；loop 的 abort 是否让脚本以 aborted 结束，整个 loop 也以 aborted
    收口？"""
    registry = ToolRegistry([EchoTool("read").tool])
    registry.register(create_codemode_tool(registry, timeout_ms=150))
    model = ScriptedModel(
        [
            assistant_message([call("c1", CODEMODE_TOOL_NAME, {"code": "for (;;) {}"})], "toolUse"),
            assistant_message([text("recovered")]),
        ]
    )
    timed_out = asyncio.run(loop(model, registry))
    assert timed_out.reason == "stop"
    timeout_result = timed_out.messages[3]
    assert isinstance(timeout_result, ToolResultMessage)
    raise_stub(timeout_result)
    assert timeout_result.is_error is True
    assert error_kind(timeout_result) == "timeout"
    assert re.match(r"Script timeout: Execution timed out after 150 ms", timeout_result.content[0].text)

    async def aborted_run() -> tuple[str, ToolResultMessage]:
        controller = AbortController()
        started = asyncio.Event()
        abortable = ToolRegistry([waiting_tool("wait", lambda context: started.set())])
        abortable.register(create_codemode_tool(abortable))
        abort_model = ScriptedModel(
            [
                assistant_message(
                    [call("c2", CODEMODE_TOOL_NAME, {"code": 'await tools.wait({ value: "x" });'})], "toolUse"
                )
            ]
        )
        running = asyncio.ensure_future(loop(abort_model, abortable, controller.signal))
        await started.wait()
        controller.abort()
        aborted = await running
        last = aborted.messages[3]
        assert isinstance(last, ToolResultMessage)
        return aborted.reason, raise_stub(last)

    reason, aborted_result = asyncio.run(aborted_run())
    assert reason == "aborted"
    assert error_kind(aborted_result) == "aborted"
    assert [record.status for record in details_of(aborted_result).nested_calls.calls] == ["cancelled"]
