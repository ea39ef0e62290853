"""Checkpoint 11: the history stays as it is; each model request gets a context rebuilt within a budget.

`build_context` reads an active path (10's `path_to`) and never writes: it replays the system messages
of the whole path into one, starts from the latest compaction's summary where there is one, and keeps
the newest run of whole interactions that fits. `create_compaction_entry` only builds the entry; the
caller decides whether to append it to a store.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict

from .messages import (
    AgentMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    current_system_message,
    text,
)
from .session import (
    CompactionSessionEntry,
    CompactionSummary,
    MessageSessionEntry,
    SessionEntry,
    parse_session_entry,
)

# ## Shapes (declared for every lab)

#: What the caller's estimator is given: a string, or a copy of one message.
EstimateTokens: TypeAlias = Callable[[str | AgentMessage], float]

ContextBuildReason: TypeAlias = Literal["within_budget", "trimmed", "single_group_overflow"]

#: The first line of every compaction summary message: how a reader (or an estimator) tells it apart.
SUMMARY_HEADING = "【会话压缩摘要】"


@dataclass
class InteractionGroup:
    """One user message and everything up to the next one: kept or dropped as a whole."""

    entries: list[MessageSessionEntry]


class BuildContextOptions(TypedDict):
    """The keywords of `build_context`, as one dict: `build_context(path, **options)`."""

    max_tokens: float
    reserved_output: float
    safety_margin: float
    estimate_tokens: EstimateTokens


class CreateCompactionInput(TypedDict):
    """The keywords of `create_compaction_entry`, as one dict: `create_compaction_entry(path, **input)`."""

    id: str
    timestamp: int
    summary: CompactionSummary
    first_kept_entry_id: str
    tokens_before: float


@dataclass
class ContextTokenProjection:
    """Where the window went: fixed costs first, then the messages; `total` may exceed `max_tokens`
    only when the newest interaction alone does not fit."""

    max_tokens: float
    system: float
    messages: float
    reserved_output: float
    safety_margin: float
    available_for_messages: float
    total: float

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "maxTokens": self.max_tokens,
            "system": self.system,
            "messages": self.messages,
            "reservedOutput": self.reserved_output,
            "safetyMargin": self.safety_margin,
            "availableForMessages": self.available_for_messages,
            "total": self.total,
        }


@dataclass
class BuildContextResult:
    """`messages` = [the replayed system message?, the compaction summary?, ...the kept suffix].

    The system message is replayed from the whole active path and belongs to no interaction, and the
    summary is synthetic: neither has an id in `kept_entry_ids`.
    """

    messages: list[AgentMessage]
    kept_entry_ids: list[str]
    reason: ContextBuildReason
    tokens: ContextTokenProjection

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "messages": [message.to_dict() for message in self.messages],
            "keptEntryIds": list(self.kept_entry_ids),
            "reason": self.reason,
            "tokens": self.tokens.to_dict(),
        }


def _describe(error: BaseException) -> str:
    return str(error)


def _clone_message_entry(entry: MessageSessionEntry) -> MessageSessionEntry:
    """A checked deep copy of a message entry, through the session's one strict boundary."""
    parsed = parse_session_entry(entry)
    if not isinstance(parsed, MessageSessionEntry):
        raise ValueError(f"session entry {entry.id} 不是 message")
    return parsed


def _calls_in(entry: MessageSessionEntry) -> list[ToolCall]:
    message = entry.message
    if not isinstance(message, AssistantMessage):
        return []
    return [block for block in message.content if isinstance(block, ToolCall)]


# ## Lab 11.2 · interactions: a user message opens one, tool facts pair by id


def validate_interaction(group: InteractionGroup) -> None:
    """Every call id is declared once, every result answers a call of this group, once, and no call is
    left without its result; where the results stand in the group does not matter."""
    # BEGIN LAB 11.2
    calls: dict[str, str] = {}
    results: dict[str, str] = {}
    for entry in group.entries:
        for call in _calls_in(entry):
            if call.id in calls:
                raise ValueError(f"interaction 中 tool call {call.id} 重复：{calls[call.id]} 与 {entry.id}")
            calls[call.id] = entry.id
        if isinstance(entry.message, ToolResultMessage):
            call_id = entry.message.tool_call_id
            if call_id in results:
                raise ValueError(
                    f"interaction 中 tool result {call_id} 重复：{results[call_id]} 与 {entry.id}"
                )
            results[call_id] = entry.id
    for call_id, result_entry_id in results.items():
        if call_id not in calls:
            raise ValueError(f"tool result {result_entry_id} 引用了不存在的 call {call_id}")
    for call_id, call_entry_id in calls.items():
        if call_id not in results:
            raise ValueError(f"tool call {call_id}（entry {call_entry_id}）缺少 result")
    # END LAB 11.2


def group_interactions(entries: Sequence[MessageSessionEntry]) -> list[InteractionGroup]:
    """Split message entries into interactions at each user message, each one checked whole; system
    messages belong to none (the system replay handles them) and are skipped. Returns copies."""
    # BEGIN LAB 11.2
    groups: list[InteractionGroup] = []
    current: InteractionGroup | None = None
    for source in entries:
        entry = _clone_message_entry(source)
        if isinstance(entry.message, SystemMessage):
            continue
        if isinstance(entry.message, UserMessage):
            if current is not None:
                validate_interaction(current)
                groups.append(current)
            current = InteractionGroup(entries=[entry])
            continue
        if current is None:
            raise ValueError(f"message entry {entry.id} 在第一个 user interaction 之前")
        current.entries.append(entry)
    if current is not None:
        validate_interaction(current)
        groups.append(current)
    return copy.deepcopy(groups)
    # END LAB 11.2


# ## Lab 11.5 (hooks) · resuming from the latest compaction
#
# build_context (Lab 11.3) calls the last three on every path. Each one's lab body runs only where the
# path holds a compaction, so a path without one goes through them untouched before Lab 11.5 is done.


def compaction_summary_text(summary: CompactionSummary) -> str:
    """The summary as the model reads it: the heading, the goal, then the six lists in a fixed order,
    an empty list shown as "- （无）"."""
    # BEGIN LAB 11.5
    sections = [
        ("约束", summary.constraints),
        ("已完成", summary.completed),
        ("决策", summary.decisions),
        ("变更文件", summary.changed_files),
        ("未解决", summary.unresolved),
        ("下一步", summary.next),
    ]
    lines = [SUMMARY_HEADING, f"目标：{summary.goal}"]
    for label, values in sections:
        lines.append(f"{label}：")
        lines.extend([f"- {value}" for value in values] or ["- （无）"])
    return "\n".join(lines)
    # END LAB 11.5


def latest_compaction(active_path: Sequence[SessionEntry]) -> tuple[CompactionSessionEntry, int] | None:
    """The last compaction on the path, checked, with its position; None where there is none."""
    found = next(
        (
            i
            for i in range(len(active_path) - 1, -1, -1)
            if isinstance(active_path[i], CompactionSessionEntry)
        ),
        None,
    )
    if found is None:
        return None
    # BEGIN LAB 11.5
    # Only the newest summary is read: it already carries on every earlier one.
    candidate = active_path[found]
    parsed = parse_session_entry(candidate)
    if not isinstance(parsed, CompactionSessionEntry):
        raise ValueError(f"session entry {candidate.id} 不是 compaction")
    return parsed, found
    # END LAB 11.5


def message_candidates(
    active_path: Sequence[SessionEntry], compaction: tuple[CompactionSessionEntry, int] | None
) -> list[MessageSessionEntry]:
    """The message entries the budget may choose from: all of them, or, after a compaction, those from
    its first kept entry on (metadata and every compaction skipped)."""
    if compaction is None:
        return [entry for entry in active_path if isinstance(entry, MessageSessionEntry)]
    # BEGIN LAB 11.5
    entry, position = compaction
    first_kept = entry.first_kept_entry_id
    start = next((i for i, candidate in enumerate(active_path) if candidate.id == first_kept), -1)
    if start < 0 or start >= position:
        raise ValueError(f"compaction {entry.id} 的 firstKeptEntryId {first_kept} 不在它之前")
    first = active_path[start]
    if not isinstance(first, MessageSessionEntry) or not isinstance(first.message, UserMessage):
        raise ValueError(f"compaction {entry.id} 的 firstKeptEntryId {first_kept} 不是 interaction 起点")
    return [candidate for candidate in active_path[start:] if isinstance(candidate, MessageSessionEntry)]
    # END LAB 11.5


def summary_messages(
    compaction: tuple[CompactionSessionEntry, int] | None, groups: Sequence[InteractionGroup]
) -> list[AgentMessage]:
    """The synthetic messages put before the kept suffix: the compaction's summary as one user
    message stamped with the compaction's time, or none without a compaction."""
    if compaction is None:
        return []
    # BEGIN LAB 11.5
    entry = compaction[0]
    if not groups or groups[0].entries[0].id != entry.first_kept_entry_id:
        raise ValueError(
            f"compaction {entry.id} 的 firstKeptEntryId {entry.first_kept_entry_id} "
            "不是完整 interaction 的首条 message"
        )
    return [UserMessage(content=[text(compaction_summary_text(entry.summary))], timestamp=entry.timestamp)]
    # END LAB 11.5


# ## Lab 11.3 · the budget: fixed costs first, then whole interactions from the newest back


def non_negative_finite(value: float, label: str) -> float:
    """`value` itself when it is a finite number of at least 0; otherwise an error naming `label`."""
    # BEGIN LAB 11.3
    # bool is an int in Python, but it is no count of tokens; an int is always finite (and math.isfinite
    # would overflow on a huge one), so only a float can be NaN or infinite.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{label} 必须是非负 finite number")
    if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
        raise ValueError(f"{label} 必须是非负 finite number")
    return value
    # END LAB 11.3


def estimated_tokens(estimate_tokens: EstimateTokens, value: str | AgentMessage, label: str) -> float:
    """Ask the caller's estimator about a copy of `value`, so that it cannot change the history."""
    # BEGIN LAB 11.3
    try:
        estimate = estimate_tokens(value if isinstance(value, str) else copy.deepcopy(value))
    except Exception as error:
        raise ValueError(f"{label} token 估算失败：{_describe(error)}") from error
    return non_negative_finite(estimate, f"{label} token 估算")
    # END LAB 11.3


def select_suffix(costs: Sequence[float], budget: float) -> tuple[int, float, ContextBuildReason]:
    """The first group of the newest run of whole groups that fits `budget`, their cost and why it
    stopped there; the newest group is kept even when it alone is over the budget."""
    # BEGIN LAB 11.3
    if not costs:
        return 0, 0, "within_budget"
    first = len(costs) - 1
    selected = costs[first]
    if selected > budget:
        # Cutting inside it would drop a call, a result or the final answer: keep it whole, and say so.
        return first, selected, "single_group_overflow"
    for index in range(first - 1, -1, -1):
        if selected + costs[index] > budget:
            break
        selected += costs[index]
        first = index
    return first, selected, "trimmed" if first > 0 else "within_budget"
    # END LAB 11.3


def build_context(
    active_path: Sequence[SessionEntry],
    *,
    max_tokens: float,
    reserved_output: float,
    safety_margin: float,
    estimate_tokens: EstimateTokens,
) -> BuildContextResult:
    """Project the active path into one model request within `max_tokens`: the system message
    replayed from the whole path, the latest compaction's summary, then the newest whole interactions
    that fit what the fixed costs leave. Reads only; everything returned is a copy."""
    # BEGIN LAB 11.3
    max_tokens = non_negative_finite(max_tokens, "maxTokens")
    reserved_output = non_negative_finite(reserved_output, "reservedOutput")
    safety_margin = non_negative_finite(safety_margin, "safetyMargin")

    # The system state is replayed from the whole path, the part before a compaction included: a
    # compaction never rewrites the prompt, so no snapshot of it is needed at the boundary.
    system_message = current_system_message(
        [entry.message for entry in active_path if isinstance(entry, MessageSessionEntry)]
    )
    system = (
        0 if system_message is None else estimated_tokens(estimate_tokens, system_message, "system message")
    )
    available = max(0, max_tokens - system - reserved_output - safety_margin)

    compaction = latest_compaction(active_path)
    groups = group_interactions(message_candidates(active_path, compaction))
    fixed_messages = summary_messages(compaction, groups)
    fixed_cost = sum(
        estimated_tokens(estimate_tokens, message, f"compaction summary {index + 1}")
        for index, message in enumerate(fixed_messages)
    )
    costs = [
        sum(
            estimated_tokens(
                estimate_tokens, entry.message, f"interaction {group_index + 1} message {entry_index + 1}"
            )
            for entry_index, entry in enumerate(group.entries)
        )
        for group_index, group in enumerate(groups)
    ]
    first, selected_cost, reason = select_suffix(costs, max(0, available - fixed_cost))

    kept = [entry for group in groups[first:] for entry in group.entries]
    messages: list[AgentMessage] = [
        *([system_message] if system_message is not None else []),
        *fixed_messages,
        *(entry.message for entry in kept),
    ]
    message_tokens = fixed_cost + selected_cost
    return BuildContextResult(
        messages=copy.deepcopy(messages),
        kept_entry_ids=[entry.id for entry in kept],
        reason=reason,
        tokens=ContextTokenProjection(
            max_tokens=max_tokens,
            system=system,
            messages=message_tokens,
            reserved_output=reserved_output,
            safety_margin=safety_margin,
            available_for_messages=available,
            total=system + message_tokens + reserved_output + safety_margin,
        ),
    )
    # END LAB 11.3


# ## Lab 11.4 · a compaction entry, built but not stored


def create_compaction_entry(
    active_path: Sequence[SessionEntry],
    *,
    id: str,
    timestamp: int,
    summary: CompactionSummary,
    first_kept_entry_id: str,
    tokens_before: float,
) -> CompactionSessionEntry:
    """A new compaction entry after the path's last entry, keeping from the start of a whole
    interaction; it changes no history and writes no store (appending it is the caller's choice)."""
    # BEGIN LAB 11.4
    if not active_path:
        raise ValueError("空 active path 不能创建 compaction")
    if any(entry.id == id for entry in active_path):
        raise ValueError(f"session entry id 重复：{id}")
    groups = group_interactions([entry for entry in active_path if isinstance(entry, MessageSessionEntry)])
    if not any(group.entries[0].id == first_kept_entry_id for group in groups):
        raise ValueError(f"firstKeptEntryId {first_kept_entry_id} 必须是完整 interaction 的首条 message")
    # The parent is derived, never passed in: the entry cannot claim a leaf it was not appended to.
    candidate = CompactionSessionEntry(
        id=id,
        parent_id=active_path[-1].id,
        timestamp=timestamp,
        summary=summary,
        first_kept_entry_id=first_kept_entry_id,
        tokens_before=tokens_before,
    )
    parsed = parse_session_entry(candidate)
    if not isinstance(parsed, CompactionSessionEntry):
        raise ValueError(f"无法创建 compaction {id}")
    return parsed
    # END LAB 11.4
