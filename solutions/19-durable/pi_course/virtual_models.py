"""Checkpoint 18: a virtual model chooses, a physical model answers, and the branch remembers both.

What a user selects may be a virtual model: a rule with no provider behind it. Before every request the
loop's `prepare_request` hook reads the selection off the session branch; a physical model serves the
request as it is, a virtual one is asked (`route`) which physical model of the catalog serves this one
request, and with what thinking level. No provider ever receives a virtual model.

Three facts live in three places. The selection is a `model_change` metadata entry on the branch; the
dispatch is the `model` field of each assistant message; the router's state is a `virtual_model_state`
metadata entry, written after the turn's messages and only when it changed. Reopening a session at a
leaf therefore restores the selection and the state from the active path alone.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeAlias, TypeVar, cast

from .agent_loop import AgentRequest, PreparedRequest, RequestReason
from .composition import AppendsMetadata, Runtime, RuntimeRequestSession, SessionBranch
from .messages import AbortSignal, AgentMessage, AssistantMessage, Model, ThinkingLevel
from .session import JsonValue, MetadataSessionEntry, SessionEntry

S = TypeVar("S")
T = TypeVar("T")

#: Why a route is asked for: the loop's three reasons, and `direct` for a request made outside the loop
#: (a compaction summary, say), which neither reads nor writes the router's state.
ModelRouteReason: TypeAlias = RequestReason | Literal["direct"]


# ## The shapes of a route (given)


@dataclass
class PhysicalModel:
    """A model of the catalog that can really be sent a request."""

    id: str
    model: Model


@dataclass
class SelectedModel:
    """The virtual model being routed (the course's `{ id }`)."""

    id: str


@dataclass
class PreviousResponse:
    """The physical model of the latest successful reply in the messages."""

    model: PhysicalModel
    thinking_level: ThinkingLevel | None = None


@dataclass
class FailedResponse:
    """On a retry: the failed reply, and its physical model when the catalog knows it."""

    message: AssistantMessage
    model: PhysicalModel | None = None


@dataclass
class ModelRouteRequest(Generic[S]):
    """What `route` is asked with. An optional field is None when the course leaves it out."""

    model: SelectedModel
    reason: ModelRouteReason
    #: The messages of the request, the very sequence the caller passed.
    messages: Sequence[AgentMessage]
    #: Left out when the latest successful reply's model is not a physical model of the catalog.
    previous: PreviousResponse | None = None
    failed: FailedResponse | None = None
    #: The state this router last returned on the branch; None the first time and for `direct`.
    state: S | None = None
    signal: AbortSignal | None = None


@dataclass
class ModelRoute(Generic[S]):
    """A router's answer: a physical model's id, a thinking level, and the state to remember."""

    model: str
    thinking_level: ThinkingLevel | None = None
    state: S | None = None


@dataclass
class VirtualModel(Generic[S]):
    """A model that only chooses: `route` names the physical model that serves one request."""

    id: str
    route: Callable[[ModelRouteRequest[S]], ModelRoute[S] | Awaitable[ModelRoute[S]]]


@dataclass
class ResolvedRoute(Generic[S]):
    """A route with its physical model looked up in the catalog."""

    model: PhysicalModel
    thinking_level: ThinkingLevel | None = None
    state: S | None = None


async def settled(value: T | Awaitable[T]) -> T:
    """The value itself, or what awaiting it gives: a router may answer at once or later."""
    if inspect.isawaitable(value):
        return cast(T, await value)
    return value


def _failed(error: BaseException) -> asyncio.Future[None]:
    """An already failed awaitable, decided at call time (the course's `Promise.reject`)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


# ## Lab 18.1 · the catalog, the previous reply, and resolving a route


class ModelCatalog:
    """One catalog of physical and virtual models; an id belongs to one of them only.

    Only `physical()` hands out a `Model`: a virtual model has nothing a provider could be sent.
    """

    def __init__(self) -> None:
        self._physical: dict[str, PhysicalModel] = {}
        self._virtual: dict[str, VirtualModel[Any]] = {}

    def register_physical(self, id: str, model: Model) -> None:
        """Register a model that answers requests under `id`."""
        self._assert_free(id)
        self._physical[id] = PhysicalModel(id=id, model=model)

    def register_virtual(self, virtual: VirtualModel[S]) -> None:
        """Register a router under its own id."""
        self._assert_free(virtual.id)
        self._virtual[virtual.id] = virtual

    def _assert_free(self, id: str) -> None:
        """Refuse a blank id, and an id either kind already holds."""
        # BEGIN LAB 18.1
        if not id.strip():
            raise ValueError("模型 id 不能为空")
        if id in self._physical:
            raise ValueError(f"模型 {id} 已经是物理模型")
        if id in self._virtual:
            raise ValueError(f"模型 {id} 已经是虚拟模型")
        # END LAB 18.1

    def physical(self, id: str) -> PhysicalModel | None:
        """The physical model registered under `id`, or None (a virtual id gives None too)."""
        return self._physical.get(id)

    def virtual(self, id: str) -> VirtualModel[Any] | None:
        """The virtual model registered under `id`, or None."""
        return self._virtual.get(id)

    def is_virtual(self, id: str) -> bool:
        """Whether `id` is a virtual model of the catalog."""
        return id in self._virtual

    def has(self, id: str) -> bool:
        """Whether `id` is registered, of either kind."""
        return id in self._physical or id in self._virtual


def find_latest_response(messages: Sequence[AgentMessage]) -> AssistantMessage | None:
    """The latest successful reply: the last assistant message that ended neither in error nor aborted."""
    # BEGIN LAB 18.1
    for message in reversed(messages):
        # A failed reply (a failed routing included) says nothing about who answered well last.
        if isinstance(message, AssistantMessage) and message.stop_reason not in ("error", "aborted"):
            return message
    return None
    # END LAB 18.1


async def resolve_route(
    catalog: ModelCatalog,
    virtual_id: str,
    *,
    reason: ModelRouteReason,
    messages: Sequence[AgentMessage],
    failed: AssistantMessage | None = None,
    state: S | None = None,
    signal: AbortSignal | None = None,
) -> ResolvedRoute[S]:
    """Ask the virtual model which physical model serves this request, and look it up in the catalog.

    A route must name a physical model: another virtual model, an unknown id, or a `route` that
    raises all end in an exception (the loop turns it into an error reply).
    """
    # BEGIN LAB 18.1
    name = f"Virtual model {virtual_id}"
    virtual = catalog.virtual(virtual_id)
    if virtual is None:
        raise ValueError(f"{name} is not registered.")
    latest = find_latest_response(messages)
    previous = catalog.physical(latest.model) if latest is not None else None
    request: ModelRouteRequest[S] = ModelRouteRequest(
        model=SelectedModel(id=virtual_id),
        reason=reason,
        messages=messages,
        previous=PreviousResponse(model=previous) if previous is not None else None,
        failed=(
            FailedResponse(message=failed, model=catalog.physical(failed.model))
            if failed is not None
            else None
        ),
        state=state,
        signal=signal,
    )
    route = await settled(virtual.route(request))
    target = catalog.physical(route.model)
    if target is None:
        # No recursion: a route that names another router would need its own state, reason and loops.
        why = (
            "which is another virtual model"
            if catalog.is_virtual(route.model)
            else "which is not a physical model"
        )
        raise ValueError(f"{name} routed to {route.model}, {why}.")
    return ResolvedRoute(model=target, thinking_level=route.thinking_level, state=route.state)
    # END LAB 18.1


# ## Lab 18.3 · the selection and the state live on the branch

#: Metadata key of the user's selection, `{"modelId": ...}`.
MODEL_CHANGE_KEY = "model_change"
#: Metadata key of a virtual model's latest state on the branch, `{"modelId": ..., "state": ...}`.
VIRTUAL_MODEL_STATE_KEY = "virtual_model_state"


def metadata_value(entry: SessionEntry, key: str) -> dict[str, JsonValue] | None:
    """The object value of a metadata entry with this key; None for any other entry or value."""
    if not isinstance(entry, MetadataSessionEntry) or entry.key != key:
        return None
    return entry.value if isinstance(entry.value, dict) else None


def branch_selection(branch: Sequence[SessionEntry]) -> str | None:
    """The model the branch's last `model_change` selects; None when there is none."""
    # BEGIN LAB 18.3
    for entry in reversed(branch):
        value = metadata_value(entry, MODEL_CHANGE_KEY)
        if value is not None and isinstance(selected := value.get("modelId"), str):
            return selected
    return None
    # END LAB 18.3


def virtual_model_state(branch: Sequence[SessionEntry], model_id: str) -> JsonValue | None:
    """The state last recorded on the branch for this virtual model; None when there is none."""
    # BEGIN LAB 18.3
    for entry in reversed(branch):
        value = metadata_value(entry, VIRTUAL_MODEL_STATE_KEY)
        if value is not None and value.get("modelId") == model_id:
            return value.get("state")
    return None
    # END LAB 18.3


def same_state(left: object, right: object) -> bool:
    """Whether two states are the same JSON (JSON.stringify's comparison: key order counts)."""
    return json.dumps(left, ensure_ascii=False) == json.dumps(right, ensure_ascii=False)


@dataclass
class RoutingChoice:
    """What one resolution found: the selected id, its route, and the state it was routed from."""

    selected: str
    route: ResolvedRoute[Any]
    state: JsonValue | None


class VirtualModelRouting:
    """The Runtime's request hook for a catalog: the selection is read off the branch at every request.

    `prepare_request` fits 13's `RuntimeDeps.prepare_request`; `route_direct` serves a request made
    outside the loop. Build one with `create_virtual_model_routing`.
    """

    def __init__(self, catalog: ModelCatalog, default_model_id: str) -> None:
        self.catalog = catalog
        #: The selection when the branch has no `model_change`.
        self.default_model_id = default_model_id

    async def _resolve(
        self,
        session: SessionBranch,
        reason: ModelRouteReason,
        messages: Sequence[AgentMessage],
        failed: AssistantMessage | None,
        signal: AbortSignal | None,
    ) -> RoutingChoice:
        """Read the selection off the branch; a physical one serves as it is, a virtual one is routed."""
        # BEGIN LAB 18.3
        branch = session.branch()
        found = branch_selection(branch)
        selected = self.default_model_id if found is None else found
        physical = self.catalog.physical(selected)
        if physical is not None:
            # A physical selection needs no router, and has no state.
            return RoutingChoice(selected=selected, route=ResolvedRoute(model=physical), state=None)
        state = None if reason == "direct" else virtual_model_state(branch, selected)
        route: ResolvedRoute[Any] = await resolve_route(
            self.catalog,
            selected,
            reason=reason,
            messages=messages,
            failed=failed,
            state=state,
            signal=signal,
        )
        return RoutingChoice(selected=selected, route=route, state=state)
        # END LAB 18.3

    async def prepare_request(
        self, request: AgentRequest, session: RuntimeRequestSession, *, signal: AbortSignal | None = None
    ) -> PreparedRequest:
        """Route one loop request; record the router's new state on the branch only when it changed."""
        # BEGIN LAB 18.3
        choice = await self._resolve(
            session, request.reason, request.context.messages, request.failed, signal
        )
        new_state = choice.route.state
        if new_state is not None and not same_state(new_state, choice.state):
            session.record(VIRTUAL_MODEL_STATE_KEY, {"modelId": choice.selected, "state": new_state})
        return PreparedRequest(model=choice.route.model.model, thinking_level=choice.route.thinking_level)
        # END LAB 18.3

    async def route_direct(
        self, session: SessionBranch, messages: Sequence[AgentMessage], *, signal: AbortSignal | None = None
    ) -> ResolvedRoute[Any]:
        """Route a request made outside the loop: the router's state is neither read nor written."""
        # BEGIN LAB 18.3
        return (await self._resolve(session, "direct", messages, None, signal)).route
        # END LAB 18.3


def create_virtual_model_routing(catalog: ModelCatalog, *, default_model_id: str) -> VirtualModelRouting:
    """The routing of `catalog`, selecting `default_model_id` on a branch with no `model_change`."""
    return VirtualModelRouting(catalog, default_model_id)


def select_model(runtime: Runtime | AppendsMetadata, catalog: ModelCatalog, model_id: str) -> Awaitable[None]:
    """Put the user's selection on the branch: every later request is routed from it.

    Like `Runtime.prompt`, it decides at call time: the entry takes its place in the Runtime's queue now.
    """
    if not catalog.has(model_id):
        return _failed(ValueError(f"模型 {model_id} 未注册"))
    append = getattr(runtime, "append_metadata", None)
    if append is None:
        return _failed(TypeError("Runtime 不支持 appendMetadata"))
    appended: Awaitable[None] = append(MODEL_CHANGE_KEY, {"modelId": model_id})
    return appended
