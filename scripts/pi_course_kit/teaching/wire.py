"""One transcript on two providers' wires: OpenAI Chat Completions and Anthropic Messages.

The shape of each request body is checked with JSON Schema (a subset of each API, enough for text and
tool calls); the pairing rule both APIs enforce — every tool call answered right after the message that
made it — is checked by code, because JSON Schema cannot relate one message's ids to the next one's.
Messages are read by duck typing (`to_dict()`), so the kit never imports `pi_course`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pi_course_kit.core.schemas import draft_2020_12
from pi_course_kit.notebook.views import plain
from pi_course_kit.teaching.adapters import ProviderPair

_TEXT = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}

OPENAI_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "oneOf": [
            {
                "type": "object",
                "required": ["role", "content"],
                "properties": {"role": {"enum": ["system", "user"]}, "content": {"type": "string"}},
                "additionalProperties": False,
            },
            {
                "type": "object",
                "required": ["role"],
                "properties": {
                    "role": {"const": "assistant"},
                    "content": {"type": ["string", "null"]},
                    "tool_calls": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["id", "type", "function"],
                            "properties": {
                                "id": {"type": "string"},
                                "type": {"const": "function"},
                                "function": {
                                    "type": "object",
                                    "required": ["name", "arguments"],
                                    # The arguments travel as a JSON *string* on this wire.
                                    "properties": {
                                        "name": {"type": "string"},
                                        "arguments": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                },
                "additionalProperties": False,
            },
            {
                "type": "object",
                "required": ["role", "tool_call_id", "content"],
                "properties": {
                    "role": {"const": "tool"},
                    "tool_call_id": {"type": "string"},
                    "content": {"type": "string"},
                },
                "additionalProperties": False,
            },
        ]
    },
}

ANTHROPIC_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["user", "assistant"]},
            "content": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "oneOf": [
                        _TEXT,
                        {
                            "type": "object",
                            "required": ["type", "id", "name", "input"],
                            "properties": {"type": {"const": "tool_use"}, "input": {"type": "object"}},
                        },
                        {
                            "type": "object",
                            "required": ["type", "tool_use_id", "content"],
                            "properties": {
                                "type": {"const": "tool_result"},
                                "tool_use_id": {"type": "string"},
                                "content": {"type": "array", "items": _TEXT},
                                "is_error": {"type": "boolean"},
                            },
                        },
                    ]
                },
            },
        },
        "additionalProperties": False,
    },
}


def _text(blocks: object) -> str:
    if not isinstance(blocks, list):
        return str(blocks or "")
    return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")


def system_prompt(messages: Sequence[object]) -> str:
    """The prompt in force after replaying the transcript's system messages, as an adapter folds them.

    Non-empty contents are appended; a named section replaces its namesake, and a section set to null
    is deleted; the text is the contents, then the sections, joined by blank lines.
    """
    contents: list[str] = []
    sections: dict[str, str] = {}
    for message in messages:
        data = plain(message)
        if not isinstance(data, dict) or data.get("role") != "system":
            continue
        if data.get("content"):
            contents.append(str(data["content"]))
        for name, value in (data.get("sections") or {}).items():
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = str(value)
    parts = ["\n\n".join(contents), *sections.values()]
    return "\n\n".join(part for part in parts if part)


def to_openai_messages(messages: Sequence[object]) -> list[dict[str, Any]]:
    """Chat Completions `messages`: one folded system message first, tool calls under `tool_calls`, one
    `tool` message per result."""
    prompt = system_prompt(messages)
    out: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    for message in messages:
        data = plain(message)
        assert isinstance(data, dict)
        role = data.get("role")
        if role == "system":
            continue  # folded into the one system message above
        if role == "assistant":
            calls = [
                b for b in data.get("content", []) if isinstance(b, dict) and b.get("type") == "toolCall"
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": _text(data.get("content")) or None}
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                        },
                    }
                    for call in calls
                ]
            out.append(entry)
        elif role == "toolResult":
            out.append(
                {"role": "tool", "tool_call_id": data["toolCallId"], "content": _text(data.get("content"))}
            )
        else:
            out.append({"role": "user", "content": _text(data.get("content"))})
    return out


def to_anthropic_messages(messages: Sequence[object]) -> list[dict[str, Any]]:
    """Messages API `messages`: tool_use blocks in the assistant turn, tool_result blocks in the next user
    turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        data = plain(message)
        assert isinstance(data, dict)
        role = data.get("role")
        if role == "system":
            continue  # the Messages API takes the system prompt as a top-level `system`, not a message
        if role == "assistant":
            blocks: list[dict[str, Any]] = []
            for block in data.get("content", []):
                if block.get("type") == "toolCall":
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": block["arguments"],
                        }
                    )
                elif block.get("text"):
                    blocks.append({"type": "text", "text": block["text"]})
            out.append({"role": "assistant", "content": blocks})
            continue
        if role == "toolResult":
            block = {
                "type": "tool_result",
                "tool_use_id": data["toolCallId"],
                "content": [{"type": "text", "text": _text(data.get("content"))}],
                "is_error": bool(data.get("isError")),
            }
        else:
            block = {"type": "text", "text": _text(data.get("content"))}
        # The API alternates roles: results and a following prompt share one user turn.
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    return out


def shape_problems(body: object, schema: dict[str, Any]) -> list[str]:
    """JSON Schema errors of a request body, one line each with where they are."""
    validator, _ = draft_2020_12()
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '（顶层）'}：{error.message}"
        for error in validator(schema).iter_errors(body)
    ]


def openai_pairing(body: Sequence[dict[str, Any]]) -> list[str]:
    """Each assistant `tool_calls` must be followed by one `tool` message per id, before anything else."""
    problems = []
    for index, entry in enumerate(body):
        if entry.get("role") == "tool" and (
            index == 0 or body[index - 1].get("role") not in ("assistant", "tool")
        ):
            problems.append(
                f"第 {index} 条 tool 消息（{entry.get('tool_call_id')}）前面没有发起调用的 assistant 消息"
            )
        wanted = [call["id"] for call in entry.get("tool_calls", [])]
        if not wanted:
            continue
        answered = []
        for later in body[index + 1 :]:
            if later.get("role") != "tool":
                break
            answered.append(later.get("tool_call_id"))
        missing = [call_id for call_id in wanted if call_id not in answered]
        if missing:
            problems.append(
                f"第 {index} 条 assistant 消息的 tool_calls 没有紧随其后的 tool 消息：{'、'.join(missing)}"
            )
    return problems


def anthropic_pairing(body: Sequence[dict[str, Any]]) -> list[str]:
    """Each `tool_use` answered by a `tool_result` in the very next message, and no `tool_result` without
    one."""
    problems = []
    for index, entry in enumerate(body):
        before = body[index - 1]["content"] if index > 0 else []
        asked = {b.get("id") for b in before if b.get("type") == "tool_use"}
        for block in entry["content"]:
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                problems.append(
                    f"第 {index} 条消息的 tool_result（{block.get('tool_use_id')}）前面没有对应的 tool_use"
                )
        uses = [b["id"] for b in entry["content"] if b.get("type") == "tool_use"]
        if not uses:
            continue
        following = body[index + 1]["content"] if index + 1 < len(body) else []
        answered = [b.get("tool_use_id") for b in following if b.get("type") == "tool_result"]
        missing = [use for use in uses if use not in answered]
        if missing:
            problems.append(f"第 {index} 条消息的 tool_use 没有紧随其后的 tool_result：{'、'.join(missing)}")
    return problems


class WireView(ProviderPair):
    """The same transcript as both providers receive it, with the shape and pairing verdicts."""

    PASSED = "形状符合 JSON Schema，每个工具调用都紧接着得到回答"
    TEXT_TITLES = ("OpenAI · messages", "Anthropic · messages")
    HTML_TITLES = TEXT_TITLES
    VERDICTS_FIRST = True


def wire_view(messages: Sequence[object]) -> WireView:
    """Translate a transcript (system messages included) for both providers; check shape and tool pairing."""
    openai = to_openai_messages(messages)
    anthropic = to_anthropic_messages(messages)
    return WireView(
        openai=openai,
        anthropic=anthropic,
        problems={
            "OpenAI": shape_problems(openai, OPENAI_SCHEMA) + openai_pairing(openai),
            "Anthropic": shape_problems(anthropic, ANTHROPIC_SCHEMA) + anthropic_pairing(anthropic),
        },
    )
