"""Held-out tests of checkpoint 06: the same promises as the public tests, on inputs they never use.

Kept in the course repository only (never in a practice folder, the wheel or what a learner sees of a
Gradescope bundle); `pi-course grade` stages them beside the public focused tests, disguised like them,
and scores each with the lab its marker names. Every tool name, field name, call id and literal argument
here is one the public tests never write, so a submission that answers the public cases from a table
fails them. Nothing here calls a lab piece at import time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    AbortController,
    TextContent,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    ValidationError,
    execute_tool_call,
    object_schema,
    optional_positive_integer,
    optional_string,
    string_value,
    text,
)

#: Names no public test uses: lower-case words joined by "_", never one of the public tools' names.
fresh_names = st.from_regex(r"held_[a-z]{2,8}(_[a-z]{2,6}){0,2}", fullmatch=True)


def list_dir_shape() -> dict[str, Any]:
    """A read-a-folder tool's parameters: two required strings around two optional fields."""
    return {
        "root": string_value,
        "depth": optional_positive_integer,
        "pattern": string_value,
        "note": optional_string,
    }


class Lister:
    """A tool body that records every call and answers with what it was given."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []
        self.contexts: list[ToolContext] = []

    async def execute(self, params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, Any]]:
        """Answer with the folder and the pattern it was asked about."""
        self.params.append(params)
        self.contexts.append(context)
        return ToolOutput(
            [text(f"{params['root']}|{params['pattern']}")], {"entries": 3, "depth": params["depth"]}
        )


def list_dir(lister: Lister | None = None, name: str = "list_dir_held") -> Tool[dict[str, Any], Any]:
    """The list-dir tool under `name`."""
    body = lister or Lister()
    return Tool(name, "列出目录中的条目", object_schema(list_dir_shape()), body.execute)


def run(call: ToolCall, registry: ToolRegistry, **options: Any) -> ToolResultMessage:
    """Execute one call to its result."""
    return asyncio.run(execute_tool_call(call, registry, **options))


def visible(result: ToolResultMessage) -> dict[str, Any]:
    """The fields of a result that do not depend on the clock."""
    return {
        "tool_call_id": result.tool_call_id,
        "tool_name": result.tool_name,
        "content": result.content,
        "details": result.details,
        "is_error": result.is_error,
    }


def failure(call_id: str, name: str, message: str) -> dict[str, Any]:
    """What a failed call's result must hold."""
    return {
        "tool_call_id": call_id,
        "tool_name": name,
        "content": [text(f"Tool {name} failed: {message}")],
        "details": {"error": message},
        "is_error": True,
    }


# ## Lab 6.1 · validators and object_schema, on another shape


@pytest.mark.lab6_1
def test_held_out_json_schema_follows_another_shape_in_its_own_order() -> None:
    """换一个 shape（root、depth、pattern、note）时，JSON Schema 的 properties 与 required 仍按 shape 的顺序推
    出吗？"""
    schema = object_schema(list_dir_shape())
    assert schema.json_schema == {
        "type": "object",
        "properties": {
            "root": {"type": "string"},
            "depth": {"type": "integer", "minimum": 1},
            "pattern": {"type": "string"},
            "note": {"type": "string"},
        },
        "required": ["root", "pattern"],
        "additionalProperties": False,
    }
    assert list(schema.json_schema["properties"]) == ["root", "depth", "pattern", "note"]


@pytest.mark.lab6_1
def test_held_out_parse_keeps_declared_fields_of_another_shape_and_normalises_the_integer() -> None:
    """另一种参数形状：parse 按 shape 取值、把 4.0 变成 4、缺省字段记为 None，并丢掉未声明的键吗？"""
    schema = object_schema(list_dir_shape())
    arguments = {"pattern": "*.md", "extra": [1, 2], "depth": 4.0, "root": "文档/周报"}
    parsed = schema.parse(arguments)
    assert parsed == {"root": "文档/周报", "depth": 4, "pattern": "*.md", "note": None}
    assert list(parsed) == ["root", "depth", "pattern", "note"]
    assert type(parsed["depth"]) is int
    assert arguments == {"pattern": "*.md", "extra": [1, 2], "depth": 4.0, "root": "文档/周报"}


@pytest.mark.lab6_1
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"root": "src", "pattern": 7}, "必须是 string"),
        ({"root": "src", "pattern": "*.py", "depth": -3}, "必须是正整数"),
        ({"root": "src", "pattern": "*.py", "depth": 2.5}, "必须是正整数"),
        ({"root": "src", "pattern": "*.py", "note": 0}, "必须是 string"),
        ({"pattern": "*.py"}, "必须是 string"),
        (["root", "src"], "参数必须是 object"),
    ],
    ids=["pattern-int", "depth-negative", "depth-fraction", "note-zero", "root-missing", "list"],
)
def test_held_out_another_shape_refuses_each_bad_field_with_the_contract_message(
    arguments: object, message: str
) -> None:
    """另一种形状的每个错误字段，都以契约里那句一字不差的消息被拒绝吗？"""
    with pytest.raises(ValidationError) as raised:
        object_schema(list_dir_shape()).parse(arguments)
    assert str(raised.value) == message


@pytest.mark.lab6_1
def test_held_out_a_shape_with_only_optional_fields_requires_nothing_and_parses_an_empty_object() -> None:
    """只有可选字段的 shape：required 是空列表，parse({}) 得到每个字段都为 None 的新 dict 吗？"""
    schema = object_schema({"cursor": optional_string, "page": optional_positive_integer})
    assert schema.json_schema["required"] == []
    assert schema.parse({}) == {"cursor": None, "page": None}


@pytest.mark.lab6_1
def test_held_out_any_declared_field_names_are_described_and_parsed() -> None:
    """任意声明的字段名（不只是 value/label/limit）都会出现在 JSON Schema 里，并由 parse 原样取回吗？"""

    @given(st.lists(fresh_names, min_size=1, max_size=4, unique=True), st.data())
    def check(names: list[str], data: st.DataObject) -> None:
        schema = object_schema({name: string_value for name in names})
        assert schema.json_schema["required"] == names
        assert list(schema.json_schema["properties"]) == names
        values = {name: data.draw(st.text(alphabet="xyz値/ ", max_size=5)) for name in names}
        assert schema.parse({**values, "zz_undeclared": 1}) == values

    check()


# ## Lab 6.2 · the registry, with other tools


@pytest.mark.lab6_2
def test_held_out_definitions_of_other_tools_follow_registration_order() -> None:
    """注册 grep_held、list_dir_held、写入_held 三个工具后，definitions 按注册顺序给出名称、描述和参数吗？"""
    grep = Tool("grep_held", "在文件中搜索", object_schema({"needle": string_value}), Lister().execute)
    write = Tool("写入_held", "写入一个文件", object_schema({"target": string_value}), Lister().execute)
    registry = ToolRegistry([grep, list_dir()])
    registry.register(write)
    assert [tool.name for tool in registry.list()] == ["grep_held", "list_dir_held", "写入_held"]
    assert registry.definitions() == [
        ToolDefinition("grep_held", "在文件中搜索", object_schema({"needle": string_value}).json_schema),
        ToolDefinition("list_dir_held", "列出目录中的条目", object_schema(list_dir_shape()).json_schema),
        ToolDefinition("写入_held", "写入一个文件", object_schema({"target": string_value}).json_schema),
    ]
    assert registry.get("写入_held") is write and registry.get("grep") is None


@pytest.mark.lab6_2
def test_held_out_a_second_tool_of_the_same_name_is_refused_by_that_name() -> None:
    """重复注册 list_dir_held 时，错误消息点名的是这个名字，第一次注册的工具仍然留在表里吗？"""
    first = list_dir()
    registry = ToolRegistry([first])
    with pytest.raises(ValueError) as raised:
        registry.register(list_dir())
    assert str(raised.value) == "Tool 已存在：list_dir_held"
    assert registry.get("list_dir_held") is first and len(registry.list()) == 1


# ## Lab 6.3 · execute_tool_call, with other calls


@pytest.mark.lab6_3
def test_held_out_another_tool_with_another_argument_shape_runs_and_pairs_its_result() -> None:
    """另一个工具、另一种参数：execute_tool_call 解析参数、运行工具，并用这次调用的 id 和名字配对结果吗？"""
    lister = Lister()
    controller = AbortController()
    seen: list[list[TextContent]] = []
    call = ToolCall(id="toolu_held_7Q", name="list_dir_held", arguments={"pattern": "*.toml", "root": "配置"})
    result = run(
        call, ToolRegistry([list_dir(lister)]), signal=controller.signal, report_progress=seen.append
    )
    assert visible(result) == {
        "tool_call_id": "toolu_held_7Q",
        "tool_name": "list_dir_held",
        "content": [text("配置|*.toml")],
        "details": {"entries": 3, "depth": None},
        "is_error": False,
    }
    assert lister.params == [{"root": "配置", "depth": None, "pattern": "*.toml", "note": None}]
    assert lister.contexts[0].call_id == "toolu_held_7Q"
    assert lister.contexts[0].signal is controller.signal
    assert lister.contexts[0].report_progress == seen.append


@pytest.mark.lab6_3
def test_held_out_bad_arguments_of_another_tool_fail_in_its_name_without_running_it() -> None:
    """另一个工具收到非法参数时，结果以它的名字说明失败原因，而工具本身一次也没运行吗？"""
    lister = Lister()
    call = ToolCall(
        id="held-bad-9", name="list_dir_held", arguments={"root": "src", "pattern": "*", "depth": 0}
    )
    result = run(call, ToolRegistry([list_dir(lister)]))
    assert visible(result) == failure("held-bad-9", "list_dir_held", "必须是正整数")
    assert lister.params == []


@pytest.mark.lab6_3
def test_held_out_any_unknown_name_is_answered_as_unknown_in_that_name() -> None:
    """任意一个没有注册的工具名，都得到以这个名字和这次 id 配对的“未知工具”失败结果吗？"""

    @given(fresh_names, st.from_regex(r"call_[0-9a-f]{6}", fullmatch=True))
    def check(name: str, call_id: str) -> None:
        result = run(ToolCall(id=call_id, name=name, arguments={}), ToolRegistry([list_dir()]))
        assert visible(result) == failure(call_id, name, "未知工具")

    check()


@pytest.mark.lab6_3
def test_held_out_a_domain_failure_of_another_tool_keeps_its_own_words() -> None:
    """另一个工具自己抛出的异常，变成以它的名字、它的消息写成的失败结果吗？空消息时用异常类名吗？"""

    class QuotaExceededError(RuntimeError):
        """A failure with a class name the public tests never raise."""

    async def refuse(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        if params["target"] == "empty":
            raise QuotaExceededError()
        raise QuotaExceededError(f"配额已满：{params['target']}")

    registry = ToolRegistry([Tool("save_held", "保存", object_schema({"target": string_value}), refuse)])
    worded = run(ToolCall(id="h-1", name="save_held", arguments={"target": "日志"}), registry)
    bare = run(ToolCall(id="h-2", name="save_held", arguments={"target": "empty"}), registry)
    assert visible(worded) == failure("h-1", "save_held", "配额已满：日志")
    assert visible(bare) == failure("h-2", "save_held", "QuotaExceededError")
