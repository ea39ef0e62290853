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

from .lab import LabNotImplemented
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
    raise LabNotImplemented("11.2", "validate_interaction")


def group_interactions(entries: Sequence[MessageSessionEntry]) -> list[InteractionGroup]:
    """Split message entries into interactions at each user message, each one checked whole; system
    messages belong to none (the system replay handles them) and are skipped. Returns copies."""
    raise LabNotImplemented("11.2", "group_interactions")


# ## Lab 11.5 (hooks) · resuming from the latest compaction
#
# build_context (Lab 11.3) calls the last three on every path. Each one's lab body runs only where the
# path holds a compaction, so a path without one goes through them untouched before Lab 11.5 is done.


def compaction_summary_text(summary: CompactionSummary) -> str:
    """The summary as the model reads it: the heading, the goal, then the six lists in a fixed order,
    an empty list shown as "- （无）"."""
    raise LabNotImplemented("11.5", "compaction_summary_text")


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
    raise LabNotImplemented("11.5", "latest_compaction")


def message_candidates(
    active_path: Sequence[SessionEntry], compaction: tuple[CompactionSessionEntry, int] | None
) -> list[MessageSessionEntry]:
    """The message entries the budget may choose from: all of them, or, after a compaction, those from
    its first kept entry on (metadata and every compaction skipped)."""
    if compaction is None:
        return [entry for entry in active_path if isinstance(entry, MessageSessionEntry)]
    raise LabNotImplemented("11.5", "message_candidates")


def summary_messages(
    compaction: tuple[CompactionSessionEntry, int] | None, groups: Sequence[InteractionGroup]
) -> list[AgentMessage]:
    """The synthetic messages put before the kept suffix: the compaction's summary as one user
    message stamped with the compaction's time, or none without a compaction."""
    if compaction is None:
        return []
    raise LabNotImplemented("11.5", "summary_messages")


# ## Lab 11.3 · the budget: fixed costs first, then whole interactions from the newest back


def non_negative_finite(value: float, label: str) -> float:
    """`value` itself when it is a finite number of at least 0; otherwise an error naming `label`."""
    raise LabNotImplemented("11.3", "non_negative_finite")


def estimated_tokens(estimate_tokens: EstimateTokens, value: str | AgentMessage, label: str) -> float:
    """Ask the caller's estimator about a copy of `value`, so that it cannot change the history."""
    raise LabNotImplemented("11.3", "estimated_tokens")


def select_suffix(costs: Sequence[float], budget: float) -> tuple[int, float, ContextBuildReason]:
    """The first group of the newest run of whole groups that fits `budget`, their cost and why it
    stopped there; the newest group is kept even when it alone is over the budget."""
    raise LabNotImplemented("11.3", "select_suffix")


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
    raise LabNotImplemented("11.3", "build_context")


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
    raise LabNotImplemented("11.4", "create_compaction_entry")
