"""Focused tests of checkpoint 15: who sees a tool, who may call it, and how the transcript records it.

One registry derives two sets from each tool's exposure: the declared set (what the model is shown,
`definitions()`) and the callable set (what a script may run, `callable()`). The transcript records the
declared set as system message patches (`tools_added` / `tools_removed`) that the loop appends before a
request whenever the set changed, and `tool_search` activates tools the model has not been shown yet.

Every tool here is real (a registry, real executions, the scripted model, a real JSONL file in
`tmp_path`); `ProbeTool` only counts how often its own `execute` ran.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    TOOL_SEARCH_TOOL_NAME,
    AgentContext,
    AgentMessage,
    AgentRunResult,
    JsonlSessionStore,
    MessageSessionEntry,
    ScriptedModel,
    SystemMessage,
    Tool,
    ToolCall,
    ToolCallScope,
    ToolContext,
    ToolDefinition,
    ToolExposure,
    ToolOutput,
    ToolReference,
    ToolRegistry,
    ToolResultMessage,
    ToolSearchDocument,
    ToolSearchMatch,
    ToolStateChanges,
    assistant_message,
    create_tool_search_tool,
    current_tools,
    execute_tool_call,
    messages_on_path,
    object_schema,
    optional_string,
    parse_session_entry,
    rank_tools,
    run_agent_loop,
    text,
    tokenize,
    tool_search_document,
    tool_state_changes,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time.

EXPOSURES: tuple[ToolExposure, ...] = ("direct", "model-only", "codemode", "deferred", "hidden")


@dataclass
class ProbeTool(Tool[dict[str, Any], None]):
    """A tool that answers `<name>:<value>` and counts how many times it really ran."""

    runs: int = 0


def probe(name: str, exposure: ToolExposure | None = None, description: str | None = None) -> ProbeTool:
    """A probe tool with an optional `value` string; no exposure means the default (`direct`)."""

    async def never(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        raise AssertionError("replaced below")

    tool = ProbeTool(
        name=name,
        description=description if description is not None else f"{name} tool",
        schema=object_schema({"value": optional_string}),
        execute=never,
        exposure=exposure,
    )

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        tool.runs += 1
        return ToolOutput(content=[text(f"{name}:{parameters['value'] or ''}")])

    tool.execute = execute
    return tool


def names(tools: Sequence[Tool[Any, Any] | ToolDefinition] | None) -> list[str]:
    """The names of some tools or definitions, in their order."""
    return [tool.name for tool in tools or []]


def call(call_id: str, name: str, arguments: object = None) -> ToolCall:
    """A tool call as the model proposed it (empty arguments unless given)."""
    return ToolCall(id=call_id, name=name, arguments={} if arguments is None else arguments)


def definition(
    name: str, description: str | None = None, parameters: dict[str, Any] | None = None
) -> ToolDefinition:
    """A tool definition as a provider sees it."""
    return ToolDefinition(
        name=name,
        description=description if description is not None else f"{name} tool",
        parameters=parameters if parameters is not None else {"type": "object"},
    )


def roles(messages: Sequence[AgentMessage]) -> list[str]:
    """The role of each message, in order."""
    return [message.role for message in messages]


def system_messages(messages: Sequence[AgentMessage]) -> list[SystemMessage]:
    """The system messages of a transcript, in order."""
    return [message for message in messages if isinstance(message, SystemMessage)]


def execute(
    tool_call: ToolCall, registry: ToolRegistry, scope: ToolCallScope | None = None
) -> ToolResultMessage:
    """Run one call through 06's executor, from the model (the default) or from the given scope."""
    if scope is None:
        return asyncio.run(execute_tool_call(tool_call, registry))
    return asyncio.run(execute_tool_call(tool_call, registry, scope=scope))


def loop(registry: ToolRegistry, model: ScriptedModel, messages: list[AgentMessage]) -> AgentRunResult:
    """One run of the agent loop over the registry, from these messages."""
    return asyncio.run(run_agent_loop(model=model, tools=registry, context=AgentContext(messages=messages)))


def result_text(result: ToolResultMessage) -> str:
    """The text of a tool result's first block."""
    return result.content[0].text


# ## Lab 15.1 · one registry, two sets, the caller's scope


@pytest.mark.lab15_1
@pytest.mark.edits(
    "ToolRegistry.declared", "ToolRegistry.callable", "ToolRegistry.exposure_of", "ToolRegistry.can_call"
)
def test_the_registry_derives_the_declared_and_callable_sets_and_hidden_is_in_neither() -> None:
    """注册表是否按 exposure 推导出声明集合与可调用集合，且 hidden 工具两个集合都不进？"""
    registry = ToolRegistry(
        [
            probe("read"),
            probe("tool_search", "model-only"),
            probe("script_only", "codemode"),
            probe("mcp_issue", "deferred"),
            probe("secret", "hidden"),
        ]
    )

    assert names(registry.declared()) == ["read", "tool_search"]
    assert names(registry.definitions()) == ["read", "tool_search"]
    assert names(registry.callable()) == ["read", "script_only", "mcp_issue"]
    assert registry.exposure_of("read") == "direct"
    assert registry.exposure_of("secret") == "hidden"
    assert registry.exposure_of("missing") is None
    assert registry.can_call("secret", "model") is False
    assert registry.can_call("secret", "script") is False
    assert registry.uses_exposure() is True

    plain = ToolRegistry([probe("read"), probe("write")])
    assert plain.uses_exposure() is False
    assert names(plain.definitions()) == ["read", "write"]
    assert names(plain.callable()) == ["read", "write"]


@pytest.mark.lab15_1
@pytest.mark.edits("ToolRegistry.activate", "ToolRegistry.is_active", "ToolRegistry.declared")
def test_activate_declares_only_codemode_and_deferred_tools_in_registration_order() -> None:
    """activate 是否只把 codemode / deferred 工具加入声明集合，跳过未知名字与 hidden，并保持注册顺序？"""
    registry = ToolRegistry(
        [
            probe("read"),
            probe("script_only", "codemode"),
            probe("mcp_issue", "deferred"),
            probe("secret", "hidden"),
        ]
    )

    assert registry.activate(["mcp_issue", "secret", "missing", "read"]) == ["mcp_issue"]
    assert names(registry.definitions()) == ["read", "mcp_issue"]
    assert registry.is_active("mcp_issue") is True
    assert registry.is_active("secret") is False
    assert registry.activate(["mcp_issue"]) == []
    assert registry.activate(["script_only"]) == ["script_only"]
    assert names(registry.definitions()) == ["read", "script_only", "mcp_issue"]
    assert names(registry.callable()) == ["read", "script_only", "mcp_issue"]


@pytest.mark.lab15_1
@pytest.mark.edits("scope_denial", "ToolRegistry.can_call")
def test_execute_tool_call_refuses_by_the_callers_scope_and_the_result_stays_paired() -> None:
    """execute_tool_call 是否按调用方作用域拒绝未声明或不可调用的工具，而拒绝的结果仍与 call 配对、工具一次也
    没运行？"""
    deferred = probe("mcp_issue", "deferred")
    model_only = probe("tool_search", "model-only")
    hidden = probe("secret", "hidden")
    registry = ToolRegistry([probe("read"), deferred, model_only, hidden])

    from_model = execute(call("c1", "mcp_issue"), registry)
    assert from_model.is_error is True
    assert from_model.tool_call_id == "c1"
    assert from_model.tool_name == "mcp_issue"
    assert "工具未声明给模型" in result_text(from_model)
    assert result_text(from_model) == "Tool mcp_issue failed: 工具未声明给模型"
    assert deferred.runs == 0

    from_script = execute(call("c2", "mcp_issue", {"value": "x"}), registry, "script")
    assert from_script.is_error is False
    assert result_text(from_script) == "mcp_issue:x"
    assert deferred.runs == 1

    search_from_script = execute(call("c3", "tool_search"), registry, "script")
    assert search_from_script.is_error is True
    assert "不在脚本的可调用集合" in result_text(search_from_script)
    assert result_text(search_from_script) == "Tool tool_search failed: 工具不在脚本的可调用集合里"
    assert model_only.runs == 0

    for scope in ("model", "script"):
        refused = execute(call("c4", "secret"), registry, scope)
        assert refused.is_error is True
        assert refused.tool_call_id == "c4"
    assert hidden.runs == 0

    unknown = execute(call("c5", "missing"), registry)
    assert "未知工具" in result_text(unknown)
    registry.activate(["mcp_issue"])
    after_activation = execute(call("c6", "mcp_issue"), registry)
    assert after_activation.is_error is False


@pytest.mark.lab15_1
@pytest.mark.edits("scope_denial")
def test_a_refused_call_is_refused_before_its_arguments_are_parsed() -> None:
    """被作用域拒绝的 call 即使参数不合法，得到的也是作用域的拒绝原因，而不是 schema 的报错？"""
    registry = ToolRegistry([probe("mcp_issue", "deferred"), probe("tool_search", "model-only")])

    from_model = execute(call("c1", "mcp_issue", "not an object"), registry)
    from_script = execute(call("c2", "tool_search", {"value": 1}), registry, "script")

    assert result_text(from_model) == "Tool mcp_issue failed: 工具未声明给模型"
    assert result_text(from_script) == "Tool tool_search failed: 工具不在脚本的可调用集合里"
    assert from_model.details == {"error": "工具未声明给模型"}


@pytest.mark.lab15_1
@pytest.mark.edits(
    "ToolRegistry.activate", "ToolRegistry.declared", "ToolRegistry.callable", "ToolRegistry.can_call"
)
@given(
    exposures=st.lists(st.sampled_from((None, *EXPOSURES)), max_size=6),
    activated=st.lists(st.integers(min_value=0, max_value=5), max_size=6),
)
def test_for_any_registry_the_two_sets_follow_the_exposure_table(
    exposures: list[ToolExposure | None], activated: list[int]
) -> None:
    """对任意 exposure 组合与任意激活顺序，两个集合是否都符合五行表格，并且都按注册顺序排列？"""
    tools = [probe(f"t{index}", exposure) for index, exposure in enumerate(exposures)]
    registry = ToolRegistry(tools)
    wanted = [f"t{index}" for index in activated]
    newly = registry.activate(wanted)

    kinds = {tool.name: tool.exposure or "direct" for tool in tools}
    active = {name for name, kind in kinds.items() if kind in ("direct", "model-only")}
    late = {name for name in wanted if kinds.get(name) in ("codemode", "deferred")}
    assert sorted(newly) == sorted(late) and len(newly) == len(set(newly))
    declared = [tool.name for tool in tools if tool.name in active | late]
    callable_ = [tool.name for tool in tools if kinds[tool.name] in ("direct", "codemode", "deferred")]
    assert names(registry.declared()) == declared
    assert names(registry.definitions()) == declared
    assert names(registry.callable()) == callable_
    assert registry.uses_exposure() is any(kind != "direct" for kind in kinds.values())
    for tool in tools:
        assert registry.can_call(tool.name, "model") is (tool.name in declared)
        assert registry.can_call(tool.name, "script") is (tool.name in callable_)


# ## Lab 15.2 · replaying, comparing and parsing tool declarations


@pytest.mark.lab15_2
@pytest.mark.edits("current_tools")
def test_current_tools_replays_removals_then_additions_in_order_and_shares_nothing() -> None:
    """current_tools 是否按顺序重放 tools_added / tools_removed、每条消息先删后加，且返回值与 transcript 不共
    享对象？"""
    alpha = definition("alpha")
    beta = definition("beta")
    beta_v2 = definition("beta", "beta v2", {"type": "object", "properties": {"q": {"type": "string"}}})
    gamma = definition("gamma")
    messages: list[AgentMessage] = [
        SystemMessage(content="BASE", tools_added=[alpha, beta], timestamp=0),
        user_message("hi"),
        SystemMessage(content="", tools_removed=[ToolReference("alpha")], tools_added=[gamma], timestamp=1),
        assistant_message([text("ok")]),
        SystemMessage(content="", tools_removed=[ToolReference("beta")], tools_added=[beta_v2], timestamp=2),
    ]

    tools = current_tools(messages)

    assert tools == [gamma, beta_v2]
    tools[1].parameters["mutated"] = True
    tools[1].parameters["properties"]["q"]["mutated"] = True
    assert "mutated" not in beta_v2.parameters
    assert beta_v2.parameters["properties"]["q"] == {"type": "string"}
    assert tools[0] is not gamma
    assert current_tools([user_message("no system")]) == []
    assert current_tools([SystemMessage(content="prompt only", timestamp=0)]) == []


@pytest.mark.lab15_2
@pytest.mark.edits("tool_state_changes")
def test_tool_state_changes_writes_a_changed_definition_as_a_removal_then_an_addition() -> None:
    """tool_state_changes 是否把定义变化表示为先删后加，没有差异时两边都是空列表？"""
    alpha = definition("alpha")
    beta = definition("beta")
    beta_v2 = definition("beta", "beta v2")
    gamma = definition("gamma")

    assert tool_state_changes([alpha, beta], [beta_v2, gamma]) == ToolStateChanges(
        tools_added=[beta_v2, gamma], tools_removed=[ToolReference("alpha"), ToolReference("beta")]
    )
    assert tool_state_changes([alpha, beta], [alpha, beta]) == ToolStateChanges(
        tools_added=[], tools_removed=[]
    )
    assert tool_state_changes([], []) == ToolStateChanges(tools_added=[], tools_removed=[])
    # The same declaration built in another field order is no change.
    reordered = ToolDefinition(parameters={"type": "object"}, description="alpha tool", name="alpha")
    assert tool_state_changes([alpha], [reordered]) == ToolStateChanges(tools_added=[], tools_removed=[])
    assert tool_state_changes([alpha], [reordered]).to_dict() == {"toolsAdded": [], "toolsRemoved": []}


@pytest.mark.lab15_2
@pytest.mark.edits("current_tools", "tool_state_changes")
@given(
    previous=st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from(("x", "y"))), max_size=5),
    current=st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from(("x", "y"))), max_size=5),
)
def test_replaying_the_changes_after_the_previous_set_gives_the_current_set(
    previous: list[tuple[str, str]], current: list[tuple[str, str]]
) -> None:
    """对任意两个工具集合，在前一个集合的声明之后重放 tool_state_changes 的补丁，是否恰好得到后一个集合？"""
    before = list({name: definition(name, f"{name} {version}") for name, version in previous}.values())
    after = list({name: definition(name, f"{name} {version}") for name, version in current}.values())

    changes = tool_state_changes(before, after)
    transcript: list[AgentMessage] = [
        SystemMessage(content="", tools_added=before or None, timestamp=0),
        SystemMessage(
            content="",
            tools_added=changes.tools_added or None,
            tools_removed=changes.tools_removed or None,
            timestamp=1,
        ),
    ]

    replayed = current_tools(transcript)
    assert sorted(replayed, key=lambda tool: tool.name) == sorted(after, key=lambda tool: tool.name)
    unchanged = [tool for tool in before if tool in after]
    assert [tool.name for tool in changes.tools_removed] == [
        tool.name for tool in before if tool not in after
    ]
    assert changes.tools_added == [tool for tool in after if tool not in unchanged]


TOOLS_ENTRY: dict[str, Any] = {
    "id": "s1",
    "parentId": None,
    "timestamp": 1,
    "type": "message",
    "message": {
        "role": "system",
        "content": "",
        "toolsAdded": [
            {
                "name": "alpha",
                "description": "alpha tool",
                "parameters": {"type": "object", "properties": {"value": {"type": "string"}}},
            }
        ],
        "toolsRemoved": [{"name": "beta"}],
        "timestamp": 1,
    },
}

INVALID_DECLARATIONS: list[dict[str, Any]] = [
    {"toolsAdded": []},
    {"toolsRemoved": []},
    {
        "toolsAdded": [
            {"name": "alpha", "description": "alpha tool", "parameters": {"type": "object"}, "extra": 1}
        ]
    },
    {"toolsAdded": [{"name": "alpha", "description": "x", "parameters": "no"}]},
    {"toolsAdded": [{"name": "", "description": "x", "parameters": {}}]},
    {"toolsRemoved": [{}]},
    {"toolsRemoved": [{"name": "alpha", "description": "x"}]},
    # Beyond the course's seven: null, array and missing parameters, a non-list, a non-string description.
    {"toolsAdded": [{"name": "alpha", "description": "x", "parameters": None}]},
    {"toolsAdded": [{"name": "alpha", "description": "x", "parameters": []}]},
    {"toolsAdded": [{"name": "alpha", "description": "x"}]},
    {"toolsAdded": [{"name": "alpha", "description": 1, "parameters": {}}]},
    {"toolsAdded": {"name": "alpha"}},
    {"toolsRemoved": ["alpha"]},
    {"toolsRemoved": None},
]


@pytest.mark.lab15_2
@pytest.mark.edits("tool_definition_at", "tool_reference_at")
def test_the_strict_parser_accepts_non_empty_declarations_and_refuses_malformed_ones() -> None:
    """严格 parser 是否接受非空的 toolsAdded / toolsRemoved，并拒绝空列表、未知字段和不是 object 的
    parameters？"""
    parsed = parse_session_entry(TOOLS_ENTRY)

    assert isinstance(parsed, MessageSessionEntry)
    assert parsed.to_dict() == TOOLS_ENTRY
    message = parsed.message
    assert isinstance(message, SystemMessage)
    assert message.tools_added == [
        definition("alpha", "alpha tool", {"type": "object", "properties": {"value": {"type": "string"}}})
    ]
    assert message.tools_removed == [ToolReference("beta")]
    assert message.tools_added[0].parameters is not TOOLS_ENTRY["message"]["toolsAdded"][0]["parameters"]
    # An entry built from the dataclasses is copied too: nothing of the caller's lists is kept.
    again = parse_session_entry(parsed)
    assert again == parsed
    assert isinstance(again, MessageSessionEntry) and isinstance(again.message, SystemMessage)
    assert again.message.tools_added is not message.tools_added
    assert (
        again.message.tools_added is not None and again.message.tools_added[0] is not message.tools_added[0]
    )
    assert again.message.tools_added[0].parameters is not message.tools_added[0].parameters

    for fields in INVALID_DECLARATIONS:
        record = {**TOOLS_ENTRY, "message": {"role": "system", "content": "", "timestamp": 1, **fields}}
        with pytest.raises(ValueError, match=r"toolsAdded|toolsRemoved"):
            parse_session_entry(record)


@pytest.mark.lab15_2
@pytest.mark.edits("tool_definition_at", "tool_reference_at")
def test_a_declaration_patch_survives_a_real_jsonl_file(tmp_path: Path) -> None:
    """一条声明补丁写进真实的 JSONL 文件、重新打开之后，是否与写入前相同，并重放出相同的工具？"""
    file = tmp_path / "session.jsonl"
    patch = SystemMessage(
        content="",
        tools_added=[
            definition("echo", "echo tool", {"type": "object", "properties": {"value": {"type": "string"}}})
        ],
        tools_removed=[ToolReference("ghost")],
        timestamp=3,
    )
    plain = SystemMessage(content="BASE", timestamp=1)

    async def scenario() -> list[AgentMessage]:
        store = await JsonlSessionStore.open(file)
        await store.append(MessageSessionEntry(id="a", parent_id=None, timestamp=1, message=plain))
        await store.append(MessageSessionEntry(id="b", parent_id="a", timestamp=3, message=patch))
        reopened = await JsonlSessionStore.open(file)
        return messages_on_path(await reopened.entries(), "b")

    messages = asyncio.run(scenario())

    assert messages == [plain, patch]
    lines = file.read_text(encoding="utf-8").splitlines()
    assert "toolsAdded" not in json.loads(lines[0])["message"]
    assert json.loads(lines[1])["message"]["toolsRemoved"] == [{"name": "ghost"}]
    assert current_tools(messages) == patch.tools_added


# ## Lab 15.3 · the declaration patch before each request


@pytest.mark.lab15_3
@pytest.mark.edits("declare_tool_changes")
def test_an_all_direct_registry_writes_no_patch_and_keeps_chapter_07s_transcript() -> None:
    """全是 direct 工具的注册表是否不写声明补丁，工具往返的 transcript 与第 07 章完全一致？"""
    registry = ToolRegistry([probe("echo")])
    model = ScriptedModel(
        [
            assistant_message([call("c1", "echo", {"value": "a"})], "toolUse"),
            assistant_message([text("done")]),
        ]
    )

    result = loop(registry, model, [user_message("go")])

    assert result.reason == "stop"
    assert roles(result.messages) == ["user", "assistant", "toolResult", "assistant"]
    assert names(model.requests[0].tools) == ["echo"]
    assert current_tools(model.requests[1].messages) == []


@pytest.mark.lab15_3
@pytest.mark.edits("declare_tool_changes")
def test_with_exposure_one_patch_follows_the_user_message_and_every_request_matches_its_replay() -> None:
    """用上 exposure 后，第一次请求前是否在用户消息之后追加一条补丁、没有变化时不再追加，而 provider 仍从
    tools 读到同样的工具？"""
    registry = ToolRegistry([probe("echo"), probe("mcp_issue", "deferred"), probe("secret", "hidden")])
    model = ScriptedModel(
        [
            assistant_message([call("c1", "echo", {"value": "a"})], "toolUse"),
            assistant_message([text("done")]),
        ]
    )

    result = loop(registry, model, [user_message("go")])

    assert roles(result.messages) == ["user", "system", "assistant", "toolResult", "assistant"]
    [patch] = system_messages(result.messages)
    assert patch.content == ""
    assert patch.tools_removed is None
    assert "toolsRemoved" not in patch.to_dict()
    assert names(patch.tools_added) == ["echo"]
    assert len(model.requests) == 2
    for request in model.requests:
        assert names(request.tools) == ["echo"]
        assert current_tools(request.messages) == request.tools


@pytest.mark.lab15_3
@pytest.mark.edits("declare_tool_changes")
def test_a_restored_transcript_declaring_a_missing_tool_gets_a_removal_only_patch() -> None:
    """恢复的 transcript 声明了注册表里没有的工具时，补丁是否只写 tools_removed，而已有的前缀原样不动？"""
    registry = ToolRegistry([probe("echo")])
    base = SystemMessage(
        content="BASE",
        tools_added=[
            definition("echo", "echo tool", registry.definitions()[0].parameters),
            definition("ghost"),
        ],
        timestamp=0,
    )
    original = dataclasses.replace(base, tools_added=list(base.tools_added or []))
    model = ScriptedModel([assistant_message([text("done")])])

    result = loop(registry, model, [base, user_message("go")])

    assert roles(result.messages) == ["system", "user", "system", "assistant"]
    assert result.messages[0] == original
    patch = result.messages[2]
    assert isinstance(patch, SystemMessage)
    assert patch.tools_added is None
    assert "toolsAdded" not in patch.to_dict()
    assert patch.tools_removed == [ToolReference("ghost")]
    assert patch.content == ""
    assert names(current_tools(result.messages)) == ["echo"]
    assert names(model.requests[0].tools) == ["echo"]


@pytest.mark.lab15_3
@pytest.mark.edits("declare_tool_changes")
def test_a_resumed_run_declares_only_what_changed_since_the_transcript() -> None:
    """把一次运行的 transcript 接着跑：工具没变时不再追加补丁；激活一个工具后，补丁是否只写新增的那一个？"""
    registry = ToolRegistry([probe("echo"), probe("mcp_issue", "deferred")])
    first = loop(registry, ScriptedModel([assistant_message([text("one")])]), [user_message("go")])
    assert roles(first.messages) == ["user", "system", "assistant"]

    second_model = ScriptedModel([assistant_message([text("two")])])
    second = loop(registry, second_model, [*first.messages, user_message("again")])
    assert roles(second.messages) == ["user", "system", "assistant", "user", "assistant"]

    registry.activate(["mcp_issue"])
    third_model = ScriptedModel([assistant_message([text("three")])])
    third = loop(registry, third_model, [*second.messages, user_message("more")])

    assert roles(third.messages)[-3:] == ["user", "system", "assistant"]
    patch = third.messages[-2]
    assert isinstance(patch, SystemMessage)
    assert names(patch.tools_added) == ["mcp_issue"] and patch.tools_removed is None
    assert names(third_model.requests[0].tools) == ["echo", "mcp_issue"]
    assert current_tools(third_model.requests[0].messages) == third_model.requests[0].tools


# ## Lab 15.4 · ranking by shared terms, and tool_search


def search_documents() -> list[ToolSearchDocument]:
    """The four search texts of the course's ranking test."""
    return [
        tool_search_document(probe("mcp_github_issues", "deferred", "List issues of a GitHub repository")),
        tool_search_document(
            probe("mcp_github_pulls", "deferred", "List pull requests of a GitHub repository")
        ),
        tool_search_document(probe("mcp_jira_issues", "deferred", "Search Jira issues")),
        tool_search_document(probe("weather", "deferred", "Current weather of a city")),
    ]


@pytest.mark.lab15_4
@pytest.mark.edits("rank_tools")
def test_ranking_counts_shared_terms_ignoring_stop_words_and_case_and_keeps_ties_in_order() -> None:
    """排序是否只数词项重叠：忽略停用词与大小写，同分保持文档顺序，没有重叠的工具不入选？"""
    assert tokenize("Search Jira issues for the repo") == ["search", "jira", "issue", "repo"]
    # camelCase splits at each case boundary: GitHub becomes git, hub; github in a tool name stays one term.
    assert tokenize("listPullRequests from GitHub") == ["list", "pull", "request", "git", "hub"]
    documents = search_documents()
    assert "mcp github issues" in documents[0].text

    assert rank_tools("github issues", documents, 8) == [
        ToolSearchMatch("mcp_github_issues", 2),
        ToolSearchMatch("mcp_github_pulls", 1),
        ToolSearchMatch("mcp_jira_issues", 1),
    ]
    assert rank_tools("github issues", documents, 1) == [ToolSearchMatch("mcp_github_issues", 2)]
    assert rank_tools("the and of", documents, 8) == []
    assert rank_tools("github", documents, 0) == []


@pytest.mark.lab15_4
@pytest.mark.edits("rank_tools")
def test_a_repeated_query_term_counts_once_and_a_later_document_may_win_on_score() -> None:
    """查询里重复的词项是否只算一次，而分数更高的后一个文档是否排到前面？"""
    documents = search_documents()

    assert rank_tools("issues issues ISSUES", documents, 8) == [
        ToolSearchMatch("mcp_github_issues", 1),
        ToolSearchMatch("mcp_jira_issues", 1),
    ]
    assert rank_tools("jira search issues", documents, 2) == [
        ToolSearchMatch("mcp_jira_issues", 3),
        ToolSearchMatch("mcp_github_issues", 1),
    ]
    assert rank_tools("weather", [], 8) == []


@pytest.mark.lab15_4
@pytest.mark.edits("create_tool_search_tool.execute", "search_candidates", "search_summary")
def test_tool_search_is_model_only_and_activates_matching_codemode_and_deferred_tools() -> None:
    """tool_search 是否是 model-only 工具：激活命中的 codemode / deferred 工具，忽略已声明与 hidden 的，并在
    details 里返回 loaded？"""
    registry = ToolRegistry(
        [
            probe("read", "direct", "Read a file"),
            probe("mcp_github_issues", "deferred", "List issues of a GitHub repository"),
            probe("script_helper", "codemode", "Summarize GitHub issues in a script"),
            probe("secret", "hidden", "GitHub issues secret"),
        ]
    )
    search = create_tool_search_tool(registry)
    registry.register(search)
    assert search.exposure == "model-only"
    assert search.name == TOOL_SEARCH_TOOL_NAME == "tool_search"
    assert names(registry.definitions()) == ["read", TOOL_SEARCH_TOOL_NAME]

    first = execute(call("s1", TOOL_SEARCH_TOOL_NAME, {"query": "github issues"}), registry)
    assert first.is_error is False
    assert first.details == {"loaded": ["mcp_github_issues", "script_helper"]}
    assert "Loaded 2 tools" in result_text(first)
    assert result_text(first) == (
        "Loaded 2 tools. They are available from your next call:\n"
        "- mcp_github_issues: List issues of a GitHub repository\n"
        "- script_helper: Summarize GitHub issues in a script"
    )
    assert names(registry.definitions()) == [
        "read",
        "mcp_github_issues",
        "script_helper",
        TOOL_SEARCH_TOOL_NAME,
    ]

    second = execute(call("s2", TOOL_SEARCH_TOOL_NAME, {"query": "github issues"}), registry)
    assert second.details == {"loaded": []}
    assert "No matching tools found" in result_text(second)
    assert registry.is_active("secret") is False

    limited = ToolRegistry([probe("a_github", "deferred", "github"), probe("b_github", "deferred", "github")])
    limited.register(create_tool_search_tool(limited, limit=1))
    capped = execute(call("s3", TOOL_SEARCH_TOOL_NAME, {"query": "github"}), limited)
    assert capped.details == {"loaded": ["a_github"]}
    assert result_text(capped) == "Loaded 1 tool. They are available from your next call:\n- a_github: github"

    empty = execute(call("s4", TOOL_SEARCH_TOOL_NAME, {"query": "   "}), registry)
    assert empty.is_error is True
    assert "query 不能为空" in result_text(empty)


@pytest.mark.lab15_4
@pytest.mark.edits("search_candidates", "create_tool_search_tool.execute")
def test_declared_and_hidden_tools_take_no_place_within_the_limit() -> None:
    """已经声明的工具与 hidden 工具是否根本不是候选，所以不会占掉 limit 里的名额？"""
    registry = ToolRegistry(
        [
            probe("a_github", "deferred", "github"),
            probe("b_github", "hidden", "github"),
            probe("c_github", "codemode", "github"),
            probe("d_github", "deferred", "github"),
        ]
    )
    registry.register(create_tool_search_tool(registry))
    registry.activate(["a_github"])

    one = execute(call("s1", TOOL_SEARCH_TOOL_NAME, {"query": "github", "limit": 1}), registry)
    two = execute(call("s2", TOOL_SEARCH_TOOL_NAME, {"query": "github", "limit": 1}), registry)

    assert one.details == {"loaded": ["c_github"]}
    assert two.details == {"loaded": ["d_github"]}
    assert registry.is_active("b_github") is False


@pytest.mark.lab15_4
@pytest.mark.edits("create_tool_search_tool.execute", "search_candidates")
def test_through_the_loop_a_deferred_tool_is_refused_before_the_search_and_callable_after() -> None:
    """经过 loop：搜索之前调用 deferred 工具是否被拒绝，搜索之后的下一次请求声明它，模型随后才能调用成功？"""
    issues = probe("mcp_github_issues", "deferred", "List issues of a GitHub repository")
    registry = ToolRegistry([probe("read"), issues])
    registry.register(create_tool_search_tool(registry))
    model = ScriptedModel(
        [
            assistant_message(
                [
                    call("c1", "mcp_github_issues", {"value": "early"}),
                    call("c2", TOOL_SEARCH_TOOL_NAME, {"query": "github issues"}),
                ],
                "toolUse",
            ),
            assistant_message([call("c3", "mcp_github_issues", {"value": "late"})], "toolUse"),
            assistant_message([text("done")]),
        ]
    )

    result = loop(registry, model, [user_message("list my issues")])

    assert result.reason == "stop"
    assert roles(result.messages) == [
        "user",
        "system",
        "assistant",
        "toolResult",
        "toolResult",
        "system",
        "assistant",
        "toolResult",
        "assistant",
    ]
    early = result.messages[3]
    assert isinstance(early, ToolResultMessage) and early.is_error is True
    assert result_text(early) == "Tool mcp_github_issues failed: 工具未声明给模型"
    assert issues.runs == 1
    late = result.messages[7]
    assert isinstance(late, ToolResultMessage) and late.is_error is False
    assert result_text(late) == "mcp_github_issues:late"

    initial, after_search = system_messages(result.messages)
    assert names(initial.tools_added) == ["read", TOOL_SEARCH_TOOL_NAME]
    assert names(after_search.tools_added) == ["mcp_github_issues"]
    assert names(model.requests[0].tools) == ["read", TOOL_SEARCH_TOOL_NAME]
    assert names(model.requests[1].tools) == ["read", "mcp_github_issues", TOOL_SEARCH_TOOL_NAME]
    assert names(model.requests[2].tools) == ["read", "mcp_github_issues", TOOL_SEARCH_TOOL_NAME]
    for request in model.requests:
        assert sorted(names(current_tools(request.messages))) == sorted(names(request.tools))
