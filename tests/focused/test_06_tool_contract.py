"""Focused tests of checkpoint 06: one echo call crosses schema, registry and executor.

Sections follow the labs. On the starter each test stops on the LabNotImplemented of its own lab (or
of an earlier lab it builds on); the transfer tests are skipped until pi_course/uppercase.py exists.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import importlib
import importlib.util
import json
import math
import time
from collections.abc import Callable
from typing import Any

import pi_course_i18n
import pytest
from pi_course import (
    AbortController,
    AbortSignal,
    Schema,
    TextContent,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    ValidationError,
    Validator,
    execute_tool_call,
    object_schema,
    optional_positive_integer,
    optional_string,
    string_value,
    text,
)

# Shared helpers. Nothing here calls a lab piece at import time: on the starter every lab error
# must surface inside a test, never while collecting.

MUST_BE_OBJECT = "参数必须是 object"
MUST_BE_STRING = "必须是 string"
MUST_BE_POSITIVE_INTEGER = "必须是正整数"
JSON_SCHEMA_KEYS = ["type", "properties", "required", "additionalProperties"]
WIRE_KEYS = ["role", "toolCallId", "toolName", "content", "details", "isError", "timestamp"]


def echo_json_schema() -> dict[str, Any]:
    """The echo parameters exactly as the chapter prints them (a fresh dict each time)."""
    return {
        "type": "object",
        "properties": {"value": {"type": "string"}},
        "required": ["value"],
        "additionalProperties": False,
    }


def request_shape() -> dict[str, Validator[Any]]:
    """The chapter's requestSchema shape: value required, label and limit optional."""
    return {"value": string_value, "label": optional_string, "limit": optional_positive_integer}


def request_schema_arguments() -> dict[str, Any]:
    """The chapter's full request-schema input, with one undeclared key."""
    return {"value": "Pi", "label": "answer", "limit": 2, "ignored": "drop me"}


def now_ms() -> int:
    """Whole milliseconds since the epoch, the unit of a result's timestamp."""
    return time.time_ns() // 1_000_000


def assert_timestamp_is_now(timestamp: object, before: int, after: int) -> None:
    """A result's timestamp is an int of milliseconds taken while the call ran."""
    assert type(timestamp) is int, f"timestamp must be an int of milliseconds, got {timestamp!r}"
    # A few ms of slack for implementations that round time.time() * 1000.
    assert before - 5 <= timestamp <= after + 5, f"timestamp {timestamp} is not now ({before}..{after})"


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
    """The stable fields of the failed result for `message`, as the contract spells it."""
    return {
        "role": "toolResult",
        "tool_call_id": call_id,
        "tool_name": name,
        "content": [text(f"Tool {name} failed: {message}")],
        "details": {"error": message},
        "is_error": True,
    }


def validation_message(check: Callable[[object], object], value: object) -> str:
    """The message of the ValidationError that `check(value)` raises."""
    with pytest.raises(ValidationError) as raised:
        check(value)
    return str(raised.value)


class StubSchema:
    """A hand-made schema (no object_schema needed) that records every parse call."""

    def __init__(self, json_schema: dict[str, Any] | None = None, error: Exception | None = None) -> None:
        self.json_schema = json_schema
        self.error = error
        self.parsed: list[object] = []

    def parse(self, value: object) -> dict[str, Any]:
        """Refuse non-objects like object_schema does, else return a shallow copy."""
        self.parsed.append(value)
        if self.error is not None:
            raise self.error
        if not isinstance(value, dict):
            raise ValidationError(MUST_BE_OBJECT)
        return dict(value)


class BareSchema:
    """A schema with parse() only: nothing describes it to the model."""

    def parse(self, value: object) -> object:
        """Accept anything unchanged."""
        return value


class Recorder:
    """A tool body that remembers every call; by default it echoes `value` like the chapter's echo."""

    def __init__(
        self,
        output: ToolOutput[Any] | None = None,
        error: BaseException | None = None,
        source: str = "echo",
    ) -> None:
        self.output = output
        self.error = error
        self.source = source
        self.params: list[Any] = []
        self.contexts: list[ToolContext] = []

    @property
    def count(self) -> int:
        """How many times the tool was executed."""
        return len(self.params)

    async def execute(self, params: Any, context: ToolContext) -> ToolOutput[Any]:
        """Record the call, then raise, return the fixed output, or echo `value`."""
        self.params.append(params)
        self.contexts.append(context)
        if self.error is not None:
            raise self.error
        if self.output is not None:
            return self.output
        return ToolOutput(content=[text(str(params["value"]))], details={"source": self.source})


def stub_tool(
    name: str, schema: Schema[Any] | None = None, recorder: Recorder | None = None
) -> Tool[Any, Any]:
    """A tool built from a hand-made schema, so registry tests do not need Lab 6.1."""
    body = recorder or Recorder(source=name)
    return Tool(
        name=name,
        description=f"The {name} tool",
        schema=StubSchema({"type": "object"}) if schema is None else schema,
        execute=body.execute,
    )


def make_echo(recorder: Recorder | None = None) -> Tool[dict[str, Any], Any]:
    """The chapter's echo: object_schema({"value": string_value}) and an async echo body."""
    body = recorder or Recorder()
    return Tool(
        name="echo",
        description="Echo one value",
        schema=object_schema({"value": string_value}),
        execute=body.execute,
    )


def make_upper(recorder: Recorder | None = None) -> Tool[dict[str, Any], Any]:
    """The chapter's second tool for registry tests: same schema as echo, another name."""
    body = recorder or Recorder(source="upper")
    return Tool(
        name="upper",
        description="Return the value in upper case",
        schema=object_schema({"value": string_value}),
        execute=body.execute,
    )


def echo_call(arguments: object = None, name: str = "echo", call_id: str = "call-1") -> ToolCall:
    """The chapter's echoCall, or a variant of it."""
    if arguments is None:
        arguments = {"value": "Pi", "ignored": "drop me"}
    return ToolCall(id=call_id, name=name, arguments=arguments)


def execute(
    call: ToolCall,
    registry: ToolRegistry,
    *,
    signal: AbortSignal | None = None,
    report_progress: Callable[[list[TextContent]], None] | None = None,
) -> ToolResultMessage:
    """Run execute_tool_call to completion in a fresh event loop."""
    return asyncio.run(execute_tool_call(call, registry, signal=signal, report_progress=report_progress))


# ## Lab 6.1 · validators and object_schema


@pytest.mark.lab6_1
@pytest.mark.edits("object_schema")
def test_echo_schema_json_schema_matches_the_chapter() -> None:
    """object_schema({"value": string_value}) 描述 echo 的方式是否与章节打印的完全一致，键的顺序也一样？"""
    schema = object_schema({"value": string_value})
    assert schema.json_schema == echo_json_schema()
    assert list(schema.json_schema) == JSON_SCHEMA_KEYS
    assert schema.json_schema["additionalProperties"] is False


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.__init__")
def test_request_schema_json_schema_requires_only_the_non_optional_field() -> None:
    """request schema 是否按 shape 的顺序列出每个字段的 JSON Schema，却只把 `value` 列为必填？"""
    schema = object_schema(request_shape())
    assert schema.json_schema == {
        "type": "object",
        "properties": {
            "value": {"type": "string"},
            "label": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["value"],
        "additionalProperties": False,
    }
    assert list(schema.json_schema) == JSON_SCHEMA_KEYS
    assert list(schema.json_schema["properties"]) == ["value", "label", "limit"]


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.__init__")
def test_required_follows_shape_order_and_is_an_empty_list_when_nothing_is_required() -> None:
    """`required` 是否是按 shape 顺序排列的非可选字段；全是可选字段时是否是 `[]`（而不是缺失）？"""
    ordered = object_schema({"b": string_value, "skip": optional_string, "a": string_value})
    assert ordered.json_schema["required"] == ["b", "a"]
    relaxed = object_schema({"label": optional_string, "limit": optional_positive_integer})
    assert relaxed.json_schema["required"] == []
    assert list(relaxed.json_schema) == JSON_SCHEMA_KEYS


@pytest.mark.lab6_1
@pytest.mark.edits("object_schema")
def test_a_field_without_json_schema_is_described_as_an_empty_schema() -> None:
    """一个不带 json_schema 的 validator 在 properties 下是否变成 `{}`，并且算作必填？"""
    anything: Validator[object] = Validator(lambda value: value)
    schema = object_schema({"raw": anything, "value": string_value})
    assert schema.json_schema["properties"] == {"raw": {}, "value": {"type": "string"}}
    assert schema.json_schema["required"] == ["raw", "value"]


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_request_schema_parse_matches_the_chapter() -> None:
    """章节里的 requestSchema.parse(...) 是否只给出 value、label 和 limit，并按 shape 顺序排列？"""
    schema = object_schema(request_shape())
    parsed = schema.parse(request_schema_arguments())
    assert parsed == {"value": "Pi", "label": "answer", "limit": 2}
    assert list(parsed) == ["value", "label", "limit"]


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_echo_schema_parse_drops_the_undeclared_key() -> None:
    """echoSchema.parse({"value": "Pi", "ignored": "drop me"}) 的结果是否恰好是 {"value": "Pi"}？"""
    assert object_schema({"value": string_value}).parse({"value": "Pi", "ignored": "drop me"}) == {
        "value": "Pi"
    }


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_parse_orders_keys_by_the_shape_not_the_input() -> None:
    """即使输入里的键顺序相反，解析结果的键是否仍按 shape 的顺序排列？"""
    schema = object_schema(request_shape())
    parsed = schema.parse({"limit": 3, "ignored": 0, "label": "x", "value": "Pi"})
    assert list(parsed) == ["value", "label", "limit"]
    assert parsed == {"value": "Pi", "label": "x", "limit": 3}


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_omitted_optional_fields_are_present_as_none() -> None:
    """省略 label 和 limit 时，结果里是否仍有这两个键，值为 None？"""
    schema = object_schema(request_shape())
    parsed = schema.parse({"value": "Pi"})
    assert parsed == {"value": "Pi", "label": None, "limit": None}
    assert list(parsed) == ["value", "label", "limit"]


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
@pytest.mark.parametrize(
    "value",
    [None, [], [{"value": "Pi"}], "Pi", 1, 2.5, True, ("value", "Pi")],
    ids=["None", "empty-list", "list", "str", "int", "float", "bool", "tuple"],
)
def test_parse_refuses_a_value_that_is_not_an_object(value: object) -> None:
    """不是 dict 的值（None、list、str、数字、bool、tuple）是否被拒绝，消息恰好是 `参数必须是 object`？"""
    schema = object_schema({"value": string_value, "label": optional_string})
    assert validation_message(schema.parse, value) == MUST_BE_OBJECT


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_parse_refuses_every_kind_of_non_object() -> None:
    """对任意不是 object 的 JSON 值（标量、列表、元组），是否都以 `参数必须是 object` 被拒绝？"""
    schema = object_schema(request_shape())
    assert validation_message(schema.parse, None) == MUST_BE_OBJECT

    from hypothesis import given  # imported here, so that runs of labs 6.2/6.3 never load hypothesis
    from strategies import not_objects

    @given(not_objects)
    def check(value: Any) -> None:
        assert validation_message(schema.parse, value) == MUST_BE_OBJECT

    check()


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_wrong_field_type_fails_with_the_validator_message_unchanged() -> None:
    """{"value": 1} 是否恰好以 `必须是 string` 失败，不加字段名，也不加前缀？"""
    schema = object_schema({"value": string_value})
    assert validation_message(schema.parse, {"value": 1}) == MUST_BE_STRING


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_limit_zero_is_refused_as_not_a_positive_integer() -> None:
    """`limit: 0` 是否恰好以 `必须是正整数` 失败？"""
    schema = object_schema(request_shape())
    assert validation_message(schema.parse, {"value": "Pi", "limit": 0}) == MUST_BE_POSITIVE_INTEGER


@pytest.mark.lab6_1
@pytest.mark.edits("string_value")
def test_missing_required_field_and_wrong_label_are_refused() -> None:
    """缺少 `value` 的对象是否被拒绝，`label` 不是 string 时是否也被拒绝，消息都是 `必须是 string`？"""
    schema = object_schema(request_shape())
    assert validation_message(schema.parse, {}) == MUST_BE_STRING
    assert validation_message(schema.parse, {"value": "Pi", "label": 5}) == MUST_BE_STRING


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_parse_returns_a_new_dict_and_leaves_the_input_untouched() -> None:
    """parse 的结果是否是一个新的 dict，输入和结果是否互不影响？"""
    schema = object_schema(request_shape())
    exact = {"value": "Pi", "label": "answer", "limit": 2}
    parsed = schema.parse(exact)
    assert parsed is not exact
    arguments = request_schema_arguments()
    parsed = schema.parse(arguments)
    assert arguments == request_schema_arguments()
    assert list(arguments) == ["value", "label", "limit", "ignored"]
    parsed["value"] = "changed"
    assert arguments["value"] == "Pi"
    # Omitted keys and normalised values must not be written back into the caller's dict.
    sparse = {"value": "Pi", "limit": 2.0}
    assert schema.parse(sparse) == {"value": "Pi", "label": None, "limit": 2}
    assert list(sparse) == ["value", "limit"]
    assert type(sparse["limit"]) is float


# The property tests build or call the lab piece once before handing over to Hypothesis, so on the
# starter they stop at once on the lab's own error instead of shrinking a failure that is not one.


@pytest.mark.lab6_1
@pytest.mark.edits("ObjectSchema.parse")
def test_parse_never_modifies_any_json_object() -> None:
    """对任意 JSON 对象，parse 是否保持输入原样，并且只返回 shape 里的键？"""
    schema = object_schema(request_shape())

    # Arbitrary objects mostly fail; valid arguments mixed in make sure the success path is walked too.
    from hypothesis import given
    from strategies import json_objects, request_arguments

    @given(json_objects | request_arguments)
    def check(arguments: dict[str, Any]) -> None:
        before = repr(arguments)  # repr, not ==: NaN never equals itself
        try:
            parsed = schema.parse(arguments)
        except ValidationError as error:
            assert str(error) in (MUST_BE_STRING, MUST_BE_POSITIVE_INTEGER)
        else:
            assert parsed is not arguments
            assert list(parsed) == ["value", "label", "limit"]
        assert repr(arguments) == before

    check()


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
def test_parse_keeps_each_declared_value_of_valid_arguments() -> None:
    """对任意合法参数，是否保留每个声明过的值（limit 为 int），并丢掉其他所有键？"""
    schema = object_schema(request_shape())

    from hypothesis import given
    from strategies import request_arguments

    @given(request_arguments)
    def check(arguments: dict[str, Any]) -> None:
        before = repr(arguments)
        parsed = schema.parse(arguments)
        assert repr(arguments) == before
        limit = arguments.get("limit")
        assert parsed == {
            "value": arguments["value"],
            "label": arguments.get("label"),
            "limit": None if limit is None else int(limit),
        }
        assert parsed["limit"] is None or type(parsed["limit"]) is int

    check()


@pytest.mark.lab6_1
@pytest.mark.edits("string_value")
def test_string_value_returns_the_string_and_is_required() -> None:
    """string_value 是否原样返回收到的那个 str，并且 json_schema 为 {"type": "string"}、optional 为 False？"""
    word = "".join(["P", "i"])
    assert string_value(word) is word
    assert string_value("") == ""
    assert string_value.json_schema == {"type": "string"}
    assert string_value.optional is False


@pytest.mark.lab6_1
@pytest.mark.edits("string_value")
@pytest.mark.parametrize("value", [None, 1, 1.0, True, [], {}, b"Pi"], ids=repr)
def test_string_value_refuses_everything_but_str(value: object) -> None:
    """不是 str 的值（None、数字、bool、list、dict、bytes）是否被拒绝，消息恰好是 `必须是 string`？"""
    assert validation_message(string_value, value) == MUST_BE_STRING


@pytest.mark.lab6_1
@pytest.mark.edits("string_value")
def test_string_value_accepts_exactly_the_strings() -> None:
    """对任意 JSON 值，是否恰好在它是 str 时才被原样接受？"""
    assert string_value("Pi") == "Pi"

    from hypothesis import given
    from strategies import json_values

    @given(json_values)
    def check(value: Any) -> None:
        if isinstance(value, str):
            assert string_value(value) == value
        else:
            assert validation_message(string_value, value) == MUST_BE_STRING

    check()


@pytest.mark.lab6_1
@pytest.mark.edits("optional_string")
def test_optional_string_accepts_none_and_strings_and_is_optional() -> None:
    """optional_string 是否让 None 和 str 原样通过，并且 json_schema 为 {"type": "string"}、optional 为
    True？"""
    assert optional_string(None) is None
    assert optional_string("answer") == "answer"
    assert optional_string.json_schema == {"type": "string"}
    assert optional_string.optional is True


@pytest.mark.lab6_1
@pytest.mark.edits("optional_string")
@pytest.mark.parametrize("value", [0, 1, False, [], {}, ["answer"]], ids=repr)
def test_optional_string_refuses_non_strings(value: object) -> None:
    """除了 None 和 str 之外的值，是否都被 optional_string 拒绝，消息恰好是 `必须是 string`？"""
    assert validation_message(optional_string, value) == MUST_BE_STRING


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
def test_optional_positive_integer_accepts_none_and_whole_numbers_from_one() -> None:
    """optional_positive_integer 是否接受 None、1、2 和一个很大的 int，并把自己描述为可选、minimum 为 1？"""
    assert optional_positive_integer(None) is None
    assert optional_positive_integer(1) == 1
    assert optional_positive_integer(2) == 2
    assert optional_positive_integer(10**30) == 10**30
    assert optional_positive_integer.json_schema == {"type": "integer", "minimum": 1}
    assert optional_positive_integer.optional is True


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
def test_integral_float_becomes_an_int() -> None:
    """JSON 里的 2.0 是否变回 int 2（类型是 int，不是 float）？"""
    result = optional_positive_integer(2.0)
    assert result == 2
    assert type(result) is int


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
@pytest.mark.parametrize("value", [True, False], ids=repr)
def test_bool_is_not_a_positive_integer(value: bool) -> None:
    """尽管 bool 是 int 的子类，bool 是否仍被拒绝（这里 True 不算 1）？"""
    assert validation_message(optional_positive_integer, value) == MUST_BE_POSITIVE_INTEGER


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
@pytest.mark.parametrize(
    "value",
    [0, -1, -2.0, 0.0, 1.5, math.nan, math.inf, -math.inf, "2", [], {}],
    ids=repr,
)
def test_optional_positive_integer_refuses_everything_else(value: object) -> None:
    """0、负数、1.5、NaN、无穷大、"2" 和容器是否都被拒绝，消息恰好是 `必须是正整数`？"""
    assert validation_message(optional_positive_integer, value) == MUST_BE_POSITIVE_INTEGER


@pytest.mark.lab6_1
@pytest.mark.edits("optional_positive_integer")
def test_optional_positive_integer_accepts_exactly_whole_numbers_from_one() -> None:
    """对任意 bool、int 或 float，是否恰好在它是 >= 1 的整数时才被接受（并以相等的 int 返回）？"""
    assert optional_positive_integer(1) == 1

    from hypothesis import given
    from hypothesis import strategies as st
    from strategies import integral_floats

    @given(st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | integral_floats)
    def check(value: float) -> None:
        whole = not isinstance(value, bool) and math.isfinite(value) and value == int(value)
        if whole and value >= 1:
            result = optional_positive_integer(value)
            assert result == value
            assert type(result) is int
        else:
            assert validation_message(optional_positive_integer, value) == MUST_BE_POSITIVE_INTEGER

    check()


@pytest.mark.lab6_1
@pytest.mark.edits("string_value")
def test_validation_error_is_a_value_error() -> None:
    """validator 抛出的错误是否是 ValidationError，调用方能否把它当作 ValueError 捕获？"""
    with pytest.raises(ValueError) as raised:
        string_value(1)
    assert type(raised.value) is ValidationError
    assert issubclass(ValidationError, ValueError)


# ## Lab 6.2 · ToolRegistry


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.list")
def test_initial_tools_are_registered_in_order() -> None:
    """ToolRegistry([a, b, c]) 是否保存的正是这三个对象，并按这个顺序列出？"""
    tools = [stub_tool("c"), stub_tool("a"), stub_tool("b")]
    registry = ToolRegistry(tools)
    listed = registry.list()
    assert [tool.name for tool in listed] == ["c", "a", "b"]
    assert all(got is want for got, want in zip(listed, tools, strict=True))


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.list")
def test_a_new_registry_is_empty() -> None:
    """ToolRegistry() 一开始是否没有工具、没有定义，`echo` 下也什么都没有？"""
    registry = ToolRegistry()
    assert registry.list() == []
    assert registry.definitions() == []
    assert registry.get("echo") is None


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.get")
def test_two_registries_never_share_tools() -> None:
    """注册到一个 registry 的工具，是否不会出现在其他任何 registry 里？"""
    first, second = ToolRegistry(), ToolRegistry()
    echo = stub_tool("echo")
    first.register(echo)
    assert second.get("echo") is None
    assert second.list() == []
    other_echo = stub_tool("echo")
    second.register(other_echo)  # no "already exists": the tables are separate
    assert first.get("echo") is echo
    assert second.get("echo") is other_echo
    assert ToolRegistry([stub_tool("read")]).get("echo") is None


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.register")
def test_registering_a_duplicate_name_is_refused_and_the_first_tool_stays() -> None:
    """再注册一个 `echo` 是否抛出 ValueError("Tool 已存在：echo")（全角冒号），并保留第一个？"""
    first, second = stub_tool("echo"), stub_tool("echo")
    registry = ToolRegistry([first])
    with pytest.raises(ValueError) as raised:
        registry.register(second)
    assert str(raised.value) == "Tool 已存在：echo"
    assert "\uff1a" in str(raised.value)
    assert registry.get("echo") is first
    assert registry.list() == [first]


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.register")
def test_duplicate_names_among_the_initial_tools_are_refused() -> None:
    """ToolRegistry([echo, echo]) 是否用同样的消息拒绝第二个？"""
    with pytest.raises(ValueError) as raised:
        ToolRegistry([stub_tool("echo"), stub_tool("upper"), stub_tool("echo")])
    assert str(raised.value) == "Tool 已存在：echo"


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.get")
def test_get_returns_the_very_tool_or_none() -> None:
    """get() 是否返回注册的那个对象本身，对没人注册过的名字返回 None？"""
    echo, upper = stub_tool("echo"), stub_tool("upper")
    registry = ToolRegistry([echo, upper])
    assert registry.get("echo") is echo
    assert registry.get("upper") is upper
    assert registry.get("missing") is None
    assert registry.get("Echo") is None


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.list")
def test_list_returns_a_copy_that_cannot_change_the_registry() -> None:
    """修改 list() 返回的列表之后，registry 是否保持原样？"""
    echo, upper = stub_tool("echo"), stub_tool("upper")
    registry = ToolRegistry([echo, upper])
    listed = registry.list()
    assert listed is not registry.list()
    listed.append(stub_tool("intruder"))
    listed.reverse()
    assert registry.list() == [echo, upper]
    listed.clear()
    assert registry.list() == [echo, upper]
    assert registry.get("intruder") is None


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_definitions_follow_registration_order_with_name_description_parameters() -> None:
    """definitions() 是否按顺序为每个工具给出一个 ToolDefinition，带有该工具的 name、description 和
    parameters？"""
    registry = ToolRegistry(
        [
            stub_tool("read", StubSchema({"type": "object", "properties": {"path": {"type": "string"}}})),
            stub_tool("echo", StubSchema(echo_json_schema())),
        ]
    )
    assert registry.definitions() == [
        ToolDefinition(
            name="read",
            description="The read tool",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        ),
        ToolDefinition(name="echo", description="The echo tool", parameters=echo_json_schema()),
    ]


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_definitions_hold_nothing_executable() -> None:
    """每个定义是否都是普通的 ToolDefinition，没有 execute、没有 schema 对象，也没有任何可调用的东西？"""
    registry = ToolRegistry([stub_tool("echo", StubSchema(echo_json_schema()))])
    (definition,) = registry.definitions()
    assert type(definition) is ToolDefinition
    assert [f.name for f in dataclasses.fields(definition)] == ["name", "description", "parameters"]
    assert not hasattr(definition, "execute") and not hasattr(definition, "schema")
    assert json.loads(json.dumps(definition.to_dict())) == definition.to_dict()


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_a_schema_without_json_schema_is_described_as_any_object() -> None:
    """schema 没有 json_schema（或为 None）的工具，是否用 parameters {"type": "object"} 来描述？"""
    registry = ToolRegistry([stub_tool("bare", BareSchema()), stub_tool("none", StubSchema(None))])
    assert [d.parameters for d in registry.definitions()] == [{"type": "object"}, {"type": "object"}]
    registry.definitions()[0].parameters["properties"] = {"x": {}}
    assert registry.definitions()[0].parameters == {"type": "object"}


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_changing_returned_parameters_leaves_the_tool_schema_alone() -> None:
    """修改某个定义的 parameters（顶层或嵌套）之后，工具自己的 json_schema 是否保持不变？"""
    schema = StubSchema(echo_json_schema())
    registry = ToolRegistry([stub_tool("echo", schema)])
    (definition,) = registry.definitions()
    assert definition.parameters is not schema.json_schema
    definition.parameters["additionalProperties"] = True
    definition.parameters["properties"]["value"]["type"] = "number"
    definition.parameters["required"].append("extra")
    assert schema.json_schema == echo_json_schema()
    assert registry.definitions()[0].parameters == echo_json_schema()


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_the_registry_never_parses_or_executes() -> None:
    """register、get、list 和 definitions 是否从不调用任何 schema 和 execute 函数？"""
    schema, body = StubSchema(echo_json_schema()), Recorder()
    registry = ToolRegistry([stub_tool("echo", schema, body)])
    registry.get("echo")
    registry.list()
    registry.definitions()
    assert schema.parsed == []
    assert body.count == 0


@pytest.mark.lab6_2
@pytest.mark.edits("ToolRegistry.definitions")
def test_definitions_for_echo_and_upper_match_the_chapter() -> None:
    """用 object_schema 构造的 echo 和 upper，definitions() 是否恰好是章节里的列表（parameters 的键也按顺
    序）？"""
    registry = ToolRegistry([make_echo(), make_upper()])
    definitions = registry.definitions()
    assert definitions == [
        ToolDefinition(name="echo", description="Echo one value", parameters=echo_json_schema()),
        ToolDefinition(
            name="upper", description="Return the value in upper case", parameters=echo_json_schema()
        ),
    ]
    assert [list(d.parameters) for d in definitions] == [JSON_SCHEMA_KEYS, JSON_SCHEMA_KEYS]


# ## Lab 6.3 · execute_tool_call


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call", "failed_result")
def test_invalid_arguments_never_reach_execute() -> None:
    """先用 {"value": "Pi"} 再用 {"value": 1} 调用时，echo 是否恰好只运行一次（章节里的诊断）？"""
    body = Recorder()
    registry = ToolRegistry([make_echo(body)])
    valid = execute(echo_call({"value": "Pi"}), registry)
    invalid = execute(echo_call({"value": 1}), registry)
    # The execution count comes first: with parse moved after execute it reads 2, while both
    # results still look right, so this is the first line that tells the two orders apart.
    assert body.count == 1
    assert body.params == [{"value": "Pi"}]
    assert stable_fields(valid)["content"] == [text("Pi")]
    assert stable_fields(invalid) == failed_fields("call-1", "echo", MUST_BE_STRING)


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_echo_call_gives_the_chapter_result() -> None:
    """章节里的 echoCall 是否给出 content [text("Pi")]、details {"source": "echo"}、is_error False、id
    call-1？"""
    body = Recorder()
    registry = ToolRegistry([make_echo(body)])
    before = now_ms()
    result = execute(echo_call(), registry)
    after = now_ms()
    assert body.count == 1
    assert body.params == [{"value": "Pi"}]
    assert stable_fields(result) == {
        "role": "toolResult",
        "tool_call_id": "call-1",
        "tool_name": "echo",
        "content": [text("Pi")],
        "details": {"source": "echo"},
        "is_error": False,
    }
    assert type(result) is ToolResultMessage
    assert_timestamp_is_now(result.timestamp, before, after)


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_echo_result_wire_form_uses_the_chapter_keys() -> None:
    """echo 结果的 to_dict() 是否给出 role、toolCallId、toolName、content、details、isError、timestamp？"""
    result = execute(echo_call(), ToolRegistry([make_echo()]))
    wire = result.to_dict()
    assert list(wire) == WIRE_KEYS
    assert {key: value for key, value in wire.items() if key != "timestamp"} == {
        "role": "toolResult",
        "toolCallId": "call-1",
        "toolName": "echo",
        "content": [{"type": "text", "text": "Pi"}],
        "details": {"source": "echo"},
        "isError": False,
    }
    assert json.loads(json.dumps(wire, ensure_ascii=False)) == wire


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
def test_wrong_argument_type_gives_a_failed_result_without_executing() -> None:
    """用 {"value": 1} 调用 echo 时，call-1 是否得到 `Tool echo failed: 必须是 string`，而 execute 一次也没运
    行？"""
    body = Recorder()
    registry = ToolRegistry([make_echo(body)])
    before = now_ms()
    result = execute(echo_call({"value": 1}), registry)
    after = now_ms()
    assert body.count == 0
    assert stable_fields(result) == failed_fields("call-1", "echo", MUST_BE_STRING)
    assert_timestamp_is_now(result.timestamp, before, after)


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
@pytest.mark.parametrize("arguments", [None, [], "value=Pi", 42], ids=repr)
def test_arguments_that_are_not_an_object_give_a_failed_result(arguments: object) -> None:
    """参数不是 object 时，是否以 `Tool echo failed: 参数必须是 object` 回答，并且从不执行？"""
    body = Recorder()
    registry = ToolRegistry([make_echo(body)])
    result = execute(ToolCall(id="call-9", name="echo", arguments=arguments), registry)
    assert body.count == 0
    assert stable_fields(result) == failed_fields("call-9", "echo", MUST_BE_OBJECT)


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_unknown_tool_fails_under_the_requested_name_and_touches_no_schema() -> None:
    """`missing` 是否以 `Tool missing failed: 未知工具` 回答，没有解析任何 schema，也没有执行任何工具？"""
    schema, body = StubSchema(echo_json_schema()), Recorder()
    registry = ToolRegistry([stub_tool("echo", schema, body)])
    before = now_ms()
    result = execute(echo_call({}, name="missing"), registry)
    after = now_ms()
    assert schema.parsed == []
    assert body.count == 0
    assert stable_fields(result) == failed_fields("call-1", "missing", "未知工具")
    assert_timestamp_is_now(result.timestamp, before, after)


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
def test_an_exception_in_execute_becomes_a_failed_result() -> None:
    """抛出 Exception("exploded") 的工具是否得到 `Tool echo failed: exploded`，其中没有 traceback？"""
    body = Recorder(error=Exception("exploded"))
    registry = ToolRegistry([stub_tool("echo", StubSchema(echo_json_schema()), body)])
    before = now_ms()
    result = execute(echo_call(), registry)
    after = now_ms()
    assert body.count == 1
    assert stable_fields(result) == failed_fields("call-1", "echo", "exploded")
    assert_timestamp_is_now(result.timestamp, before, after)


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
def test_the_chapter_boom_tool_with_object_schema_fails_with_its_message() -> None:
    """用 object_schema 构造、抛出 `exploded` 的 echo，是否仍以 `echo` 的名义回答 call-1？"""
    registry = ToolRegistry([make_echo(Recorder(error=Exception("exploded")))])
    result = execute(echo_call(), registry)
    assert stable_fields(result) == failed_fields("call-1", "echo", "exploded")


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
def test_any_exception_from_parse_becomes_a_failed_result() -> None:
    """抛出 TypeError("bad shape") 的 schema 是否得到 `Tool echo failed: bad shape`，并且从不执行工具？"""
    schema, body = StubSchema(error=TypeError("bad shape")), Recorder()
    registry = ToolRegistry([stub_tool("echo", schema, body)])
    result = execute(echo_call(), registry)
    assert len(schema.parsed) == 1
    assert body.count == 0
    assert stable_fields(result) == failed_fields("call-1", "echo", "bad shape")


class Kaput(Exception):
    """An exception raised without a message."""


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
@pytest.mark.parametrize(
    ("error", "message"),
    [(RuntimeError(), "RuntimeError"), (Kaput(), "Kaput"), (ValueError(""), "ValueError")],
    ids=["RuntimeError", "custom", "empty-ValueError"],
)
def test_an_exception_without_message_is_named_by_its_class(error: Exception, message: str) -> None:
    """str(exception) 为空时，失败消息是否是异常的类名？"""
    registry = ToolRegistry([stub_tool("boom", StubSchema(echo_json_schema()), Recorder(error=error))])
    result = execute(echo_call(name="boom"), registry)
    assert stable_fields(result) == failed_fields("call-1", "boom", message)


@pytest.mark.lab6_3
@pytest.mark.edits("failed_result")
def test_parse_exception_without_message_is_named_by_its_class() -> None:
    """parse 抛出没有消息的 ValidationError 时，失败消息是否是 `ValidationError`？"""
    registry = ToolRegistry([stub_tool("echo", StubSchema(error=ValidationError()), Recorder())])
    result = execute(echo_call(), registry)
    assert stable_fields(result) == failed_fields("call-1", "echo", "ValidationError")


def run_inspect() -> tuple[
    ToolResultMessage, list[ToolContext], list[list[TextContent]], AbortSignal, object
]:
    """The chapter's inspect tool, run as call `ctx` with a signal and a progress callback."""
    seen: list[ToolContext] = []
    progress: list[list[TextContent]] = []

    def report(content: list[TextContent]) -> None:
        progress.append(content)

    async def inspect(params: dict[str, Any], context: ToolContext) -> ToolOutput[dict[str, str]]:
        seen.append(context)
        if context.report_progress is not None:
            context.report_progress([text(f"progress:{params['value']}")])
        return ToolOutput(
            content=[text(f"done:{params['value']}")], details={"phase": "domain-error"}, is_error=True
        )

    tool: Tool[dict[str, Any], dict[str, str]] = Tool(
        name="inspect", description="Show the context", schema=StubSchema(echo_json_schema()), execute=inspect
    )
    controller = AbortController()
    result = execute(
        ToolCall(id="ctx", name="inspect", arguments={"value": "Pi"}),
        ToolRegistry([tool]),
        signal=controller.signal,
        report_progress=report,
    )
    return result, seen, progress, controller.signal, report


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_context_hands_over_call_id_and_the_same_signal_and_callback() -> None:
    """工具拿到的 ToolContext 是否 call_id 为 call.id，signal 和 callback 正是传进来的那两个对象？"""
    _, seen, _, signal, report = run_inspect()
    assert len(seen) == 1
    (context,) = seen
    assert type(context) is ToolContext
    assert context.call_id == "ctx"
    assert context.signal is signal
    assert context.report_progress is report


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_a_progress_report_reaches_the_callers_callback() -> None:
    """工具的进度报告是否原样、只一次地到达调用方的 callback？"""
    _, _, progress, _, _ = run_inspect()
    assert progress == [[text("progress:Pi")]]


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_a_tool_domain_error_keeps_its_content_and_details() -> None:
    """工具自己返回 is_error=True 时，call `ctx` 的结果是否保留它的 content 和 details？"""
    result, _, _, _, _ = run_inspect()
    assert stable_fields(result) == {
        "role": "toolResult",
        "tool_call_id": "ctx",
        "tool_name": "inspect",
        "content": [text("done:Pi")],
        "details": {"phase": "domain-error"},
        "is_error": True,
    }


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_context_without_signal_or_callback_carries_none() -> None:
    """不传 signal 和 callback 调用时，工具看到的 call_id 是否来自调用，两者是否都是 None？"""
    body = Recorder()
    execute(
        echo_call(call_id="call-7"), ToolRegistry([stub_tool("echo", StubSchema(echo_json_schema()), body)])
    )
    (context,) = body.contexts
    assert (context.call_id, context.signal, context.report_progress) == ("call-7", None, None)


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_an_aborted_signal_reaches_the_tool_as_is() -> None:
    """一个已经 abort 的 signal 到达工具时是否仍是 abort 状态，并带着它的原因？"""
    controller = AbortController()
    controller.abort("user pressed stop")
    body = Recorder()
    registry = ToolRegistry([stub_tool("echo", StubSchema(echo_json_schema()), body)])
    execute(echo_call(), registry, signal=controller.signal)
    (context,) = body.contexts
    assert context.signal is controller.signal
    assert context.signal is not None and context.signal.aborted
    assert context.signal.reason == "user pressed stop"


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_is_error_none_becomes_false_and_false_stays_false() -> None:
    """没有 is_error 的输出是否变成 is_error False（真正的 bool），details 为 None 时是否保持 None？"""
    plain = Recorder(output=ToolOutput(content=[text("ok")]))
    explicit = Recorder(output=ToolOutput(content=[text("ok")], details={"n": 1}, is_error=False))
    registry = ToolRegistry(
        [
            stub_tool("plain", StubSchema(echo_json_schema()), plain),
            stub_tool("explicit", StubSchema(echo_json_schema()), explicit),
        ]
    )
    result = execute(echo_call(name="plain"), registry)
    assert result.is_error is False
    assert stable_fields(result) == {
        "role": "toolResult",
        "tool_call_id": "call-1",
        "tool_name": "plain",
        "content": [text("ok")],
        "details": None,
        "is_error": False,
    }
    assert execute(echo_call(name="explicit"), registry).is_error is False


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
@pytest.mark.parametrize(
    "error", [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(3)], ids=lambda e: type(e).__name__
)
def test_cancellation_and_interpreter_exits_pass_through(error: BaseException) -> None:
    """工具抛出的 CancelledError、KeyboardInterrupt 和 SystemExit 是否原样穿过 executor？"""
    body = Recorder(error=error)
    registry = ToolRegistry([stub_tool("echo", StubSchema(echo_json_schema()), body)])
    with pytest.raises(type(error)):
        execute(echo_call(), registry)
    assert body.count == 1  # it came from inside the tool, not from an earlier step


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_call_arguments_are_never_modified() -> None:
    """经过一次成功、一次 parse 失败和一个修改自己 params 的工具之后，call.arguments 是否仍是同一个 dict 且没
    有变化？"""

    async def vandal(params: dict[str, Any], context: ToolContext) -> ToolOutput[None]:
        params["value"] = "changed"
        params["injected"] = True
        return ToolOutput(content=[text("done")])

    vandal_tool: Tool[dict[str, Any], None] = Tool(
        name="vandal",
        description="Edits its params",
        schema=object_schema({"value": string_value}),
        execute=vandal,
    )
    registry = ToolRegistry([make_echo(), vandal_tool])
    for name, arguments in (
        ("echo", {"value": "Pi", "ignored": "drop me"}),
        ("echo", {"value": 1, "ignored": ["drop", "me"]}),
        ("vandal", {"value": "Pi", "ignored": {"nested": [1]}}),
        ("missing", {"value": "Pi"}),
    ):
        snapshot = copy.deepcopy(arguments)
        call = ToolCall(id="call-1", name=name, arguments=arguments)
        execute(call, registry)
        assert call.arguments is arguments
        assert arguments == snapshot, name


@pytest.mark.lab6_3
@pytest.mark.edits("execute_tool_call")
def test_every_result_answers_its_own_call() -> None:
    """在一次成功和三种失败里，每个结果是否都带着自己那次调用的 id 和请求的名字？"""
    registry = ToolRegistry([make_echo(), stub_tool("boom", StubSchema({}), Recorder(error=Exception("x")))])
    calls = [
        ToolCall(id="a", name="echo", arguments={"value": "Pi"}),
        ToolCall(id="b", name="echo", arguments={"value": 1}),
        ToolCall(id="c", name="missing", arguments={}),
        ToolCall(id="d", name="boom", arguments={"value": "Pi"}),
    ]
    results = [execute(call, registry) for call in calls]
    assert [(r.tool_call_id, r.tool_name, r.is_error) for r in results] == [
        ("a", "echo", False),
        ("b", "echo", True),
        ("c", "missing", True),
        ("d", "boom", True),
    ]


# ## Lab transfer6 · uppercase (optional)


def in_run_language(chinese: str, english: str) -> str:
    """A line of this file's own in the run's language: the course's, or English under `--lang en`."""
    return english if pi_course_i18n.wants_english() else chinese


def load_uppercase() -> Tool[Any, Any]:
    """The learner's uppercase tool, or a skip that says which file to create."""
    if importlib.util.find_spec("pi_course.uppercase") is None:
        pytest.skip(
            in_run_language(
                "可选迁移练习：新建 pi_course/uppercase.py，在其中定义名为 uppercase 的 Tool",
                "optional transfer: create pi_course/uppercase.py defining a Tool named `uppercase`",
            )
        )
    module = importlib.import_module("pi_course.uppercase")
    tool = getattr(module, "uppercase", None)
    assert isinstance(tool, Tool), in_run_language(
        "pi_course/uppercase.py 必须定义一个名为 uppercase 的 Tool",
        "pi_course/uppercase.py must define a Tool named `uppercase`",
    )
    return tool


@pytest.mark.transfer6
def test_uppercase_returns_the_value_in_upper_case() -> None:
    """uppercase 是否用 [text("PI")] 和 details {"source": "uppercase"} 回答 {"value": "Pi"}？"""
    uppercase = load_uppercase()
    result = execute(
        ToolCall(id="call-u", name="uppercase", arguments={"value": "Pi"}), ToolRegistry([uppercase])
    )
    assert stable_fields(result) == {
        "role": "toolResult",
        "tool_call_id": "call-u",
        "tool_name": "uppercase",
        "content": [text("PI")],
        "details": {"source": "uppercase"},
        "is_error": False,
    }


@pytest.mark.transfer6
def test_uppercase_refuses_a_non_string_before_executing() -> None:
    """{"value": 1} 是否以 `Tool uppercase failed: 必须是 string` 失败，id 和名字不变，execute 从未运行？"""
    uppercase = load_uppercase()
    body = Recorder(source="uppercase")
    spied = dataclasses.replace(uppercase, execute=body.execute)
    result = execute(ToolCall(id="call-u", name="uppercase", arguments={"value": 1}), ToolRegistry([spied]))
    assert body.count == 0
    assert stable_fields(result) == failed_fields("call-u", "uppercase", MUST_BE_STRING)


@pytest.mark.transfer6
def test_uppercase_joins_echo_in_one_registry_unchanged() -> None:
    """与 echo 一起注册在普通的 ToolRegistry 里时，两个工具是否都能正确描述自己并正确运行？"""
    uppercase = load_uppercase()
    registry = ToolRegistry([make_echo(), uppercase])
    definitions = registry.definitions()
    assert [d.name for d in definitions] == ["echo", "uppercase"]
    assert definitions[1].parameters == echo_json_schema()
    echo_result = execute(ToolCall(id="e", name="echo", arguments={"value": "Pi"}), registry)
    upper_result = execute(ToolCall(id="u", name="uppercase", arguments={"value": "Pi", "x": 1}), registry)
    assert (echo_result.content, echo_result.details) == ([text("Pi")], {"source": "echo"})
    assert (upper_result.content, upper_result.details) == ([text("PI")], {"source": "uppercase"})
    assert (upper_result.tool_call_id, upper_result.tool_name) == ("u", "uppercase")
