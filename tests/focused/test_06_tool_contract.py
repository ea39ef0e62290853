"""Focused tests of checkpoint 06 (placeholder)."""

import asyncio

import pytest

from pi_course import ToolCall, ToolRegistry, execute_tool_call, object_schema, string_value


@pytest.mark.lab6_1
def test_echo_schema() -> None:
    """Does object_schema describe echo?"""
    assert object_schema({"value": string_value}).json_schema["required"] == ["value"]


@pytest.mark.lab6_2
def test_registry() -> None:
    """Is a registry empty at first?"""
    assert ToolRegistry().list() == []


@pytest.mark.lab6_3
def test_exec() -> None:
    """Is an unknown tool answered?"""
    result = asyncio.run(execute_tool_call(ToolCall("c", "missing", {}), ToolRegistry()))
    assert result.is_error
