"""Checkpoint 13: the composition root that joins session, context, resources, extensions and the Agent.

`create_runtime` is the one place where the object graph is built. A `Runtime.prompt` resolves only
after every message of its turn has been accepted by the session store, and a `run_mode` only
chooses how the result is written.

Checkpoint 17 adds one thing: `RuntimeDeps.section_providers`. Before each prompt every provider is
asked for its sections (the MCP runtime gives `mcp_servers`), which join the desired system state;
`system_patch` still decides whether anything changed. Without providers the Runtime is 13's.

Checkpoint 18 hands the loop's request hook to `RuntimeDeps.prepare_request`, with a view of the
session: the active path plus the metadata recorded during this turn. What the hook records is written
after the turn's messages; `append_metadata` puts one metadata entry (a model choice) in the same queue
as `prompt`. Without a hook the Runtime is 17's.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from .agent import Agent, AgentListener, AgentState, PromptSystem
from .agent_loop import (
    AgentRequest,
    AgentRunResult,
    PreparedRequest,
    ToolExecutor,
    registry_executor,
)
from .context import build_context
from .messages import (
    AbortSignal,
    AgentContext,
    AgentMessage,
    AssistantMessage,
    Model,
    ModelStream,
    ThinkingLevel,
    current_system_message,
    text_of,
)
from .resources import RESOURCE_SECTION, ExtensionHost, ResourceCatalog, format_resource_context
from .session import (
    JsonValue,
    MessageSessionEntry,
    MetadataSessionEntry,
    SessionEntry,
    SessionStore,
    path_to,
)
from .tool import ToolRegistry

T = TypeVar("T")

# ## The Runtime's shapes (given): the public surface is fixed


@dataclass
class ContextBudget:
    """The token budget of one model request, and how a string or a message is counted."""

    total: float
    reserved_output: float
    safety_margin: float
    estimate_tokens: Callable[[str | AgentMessage], float]


@dataclass
class RuntimeConfig:
    """What the caller chooses: the branch to resume, the base prompt, the step limit, the budget.

    `active_leaf_id` is required even though it may be None: None means "a new, empty session",
    never "guess a leaf for me".
    """

    active_leaf_id: str | None
    context: ContextBudget
    system_prompt: str | None = None
    max_steps: int | None = None


class SystemSectionProvider(Protocol):
    """A source of extra system sections (17's MCP server list). It is asked once before every
    prompt; what it gives joins the desired system state, which is still patched only on change.
    `sections()` may return the dict itself or an awaitable of it."""

    def sections(self) -> Awaitable[dict[str, str]] | dict[str, str]: ...


class SessionBranch(Protocol):
    """Reads the branch a request is made on (checkpoint 18)."""

    def branch(self) -> Sequence[SessionEntry]:
        """The entries of the branch, root first."""
        ...


class RuntimeRequestSession(SessionBranch, Protocol):
    """The session as the Runtime's request hook sees it (checkpoint 18).

    `branch()` is the active path as committed plus the metadata recorded during this turn and not yet
    written; `record()` only buffers: the Runtime appends what was recorded after the turn's messages.
    """

    def record(self, key: str, value: JsonValue, /) -> None:
        """Buffer one metadata entry for the end of this turn."""
        ...


class RuntimePrepareRequest(Protocol):
    """The Runtime's request hook (checkpoint 18): the loop's `prepare_request`, with the session view."""

    def __call__(
        self, request: AgentRequest, session: RuntimeRequestSession, /, *, signal: AbortSignal | None = None
    ) -> PreparedRequest | Awaitable[PreparedRequest | None] | None: ...


@dataclass
class RuntimeDeps:
    """What the caller hands in; the Runtime keeps these very objects (their identity is observable)."""

    model: Model
    tools: ToolRegistry
    session: SessionStore
    resources: ResourceCatalog
    create_id: Callable[[], str]
    now: Callable[[], int]
    extension_host: ExtensionHost | None = None
    #: Further sources of system sections (17: the MCP servers' list), asked before every prompt.
    section_providers: Sequence[SystemSectionProvider] | None = None
    #: Asked before every model request which physical model serves it (checkpoint 18).
    prepare_request: RuntimePrepareRequest | None = None


@dataclass(frozen=True)
class RuntimeControl:
    """The Agent's controls, minus `prompt`: a new request may only enter through `Runtime.prompt`,
    otherwise a caller could get a model answer that was never persisted."""

    get_state: Callable[[], AgentState]
    subscribe: Callable[[AgentListener], Callable[[], object]]
    steer: Callable[[str], None]
    follow_up: Callable[[str], None]
    abort: Callable[[], None]


class Runtime(Protocol):
    """One durable runtime: a single Agent whose turns are committed to one session store.

    `prompt`, `flush` and `dispose` decide at call time (a prompt is accepted or refused when it is
    called, not when it is awaited), so they return awaitables rather than being coroutines.
    """

    @property
    def control(self) -> RuntimeControl: ...
    @property
    def session(self) -> SessionStore: ...
    @property
    def resources(self) -> ResourceCatalog: ...
    @property
    def extensions(self) -> ExtensionHost | None: ...
    def get_active_leaf_id(self) -> str | None: ...
    def prompt(self, value: str) -> Awaitable[AgentRunResult]: ...
    def flush(self) -> Awaitable[None]: ...
    def dispose(self) -> Awaitable[None]: ...


class AppendsMetadata(Protocol):
    """A Runtime that can put a metadata entry after its leaf (checkpoint 18).

    `create_runtime`'s Runtime always can; a hand-written stand-in for `Runtime` need not.
    """

    def append_metadata(self, key: str, value: JsonValue, /) -> Awaitable[None]: ...


@dataclass(frozen=True)
class RequestSessionView:
    """A `RuntimeRequestSession` made of two functions (what `RuntimeImpl._request_session` hands out)."""

    branch: Callable[[], list[SessionEntry]]
    record: Callable[[str, JsonValue], None]


@dataclass
class PendingMetadata:
    """One metadata entry a request hook recorded, waiting for the end of its turn."""

    key: str
    value: JsonValue


@dataclass
class ContextProjectionSnapshot:
    """The committed state a model request is projected from: the active path, and how many of the
    Agent's messages it already holds (message entries only; metadata and compactions do not count)."""

    active_path: Sequence[SessionEntry]
    persisted_message_count: int


#: The Agent's step limit when the configuration gives none (the Agent's and the loop's default).
DEFAULT_MAX_STEPS = 32

RuntimeMode: TypeAlias = Literal["interactive", "print", "json"]

#: The modes `run_mode` knows, in the course's order.
RUNTIME_MODES: tuple[RuntimeMode, ...] = ("interactive", "print", "json")


class ModeIO(Protocol):
    """Where a mode writes its one output. A text stream (`sys.stdout`, an open file, `io.StringIO`)
    fits as it is; a `write` that returns an awaitable is awaited."""

    def write(self, value: str, /) -> object: ...


@dataclass
class SystemState:
    """The system state the Runtime wants the model to see: the base prompt and the named sections."""

    content: str
    sections: dict[str, str]


def _rejected(error: BaseException) -> asyncio.Future[T]:
    """An already failed awaitable: the course's `Promise.reject`, decided at call time."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


async def _settled(operation: asyncio.Future[Any] | None) -> None:
    """Wait for `operation` to finish, whether it succeeds or fails: the queue only needs its turn."""
    if operation is not None:
        await asyncio.wait([operation])


def messages_in(entries: Sequence[SessionEntry]) -> list[AgentMessage]:
    """Deep copies of the messages on a path, in order; metadata and compactions are left out."""
    return [copy.deepcopy(entry.message) for entry in entries if isinstance(entry, MessageSessionEntry)]


# ## From 13.1 (given since 17) · resume the chosen path and build the one Runtime


def validate_session_selection(
    entries: Sequence[SessionEntry], active_leaf_id: str | None
) -> list[SessionEntry]:
    """The path to resume: [] for an empty session with no leaf, `path_to` for a chosen leaf."""
    if not entries:
        if active_leaf_id is not None:
            raise ValueError("空 session 的 activeLeafId 必须是 null")
        return []
    if active_leaf_id is None:
        # The physically last line has no say: the caller has to pick the branch.
        raise ValueError("非空 session 必须显式提供 activeLeafId")
    return path_to(entries, active_leaf_id)


async def create_runtime(config: RuntimeConfig, deps: RuntimeDeps) -> Runtime:
    """Read the session, resume the chosen path, and wire one Agent into one Runtime."""
    entries = await deps.session.entries()
    initial_path = validate_session_selection(entries, config.active_leaf_id)
    runtime: RuntimeImpl | None = None

    def snapshot() -> ContextProjectionSnapshot:
        # Read on every model request: the second request of a run, and the next prompt, must see
        # the leaf as it is then, not as it was when the Runtime was built.
        assert runtime is not None, "the Runtime is built before its Agent asks the model"
        return runtime.context_snapshot()

    model = create_context_projecting_model(deps.model, config.context, snapshot)
    core = registry_executor(deps.tools)
    executor: ToolExecutor = deps.extension_host.wrap_executor(core) if deps.extension_host else core
    # No system_prompt here: a message put in at construction belongs to no turn's suffix and would
    # never reach the store. The Runtime appends it as a patch on the first prompt instead.

    def prepare_request(
        request: AgentRequest, *, signal: AbortSignal | None = None
    ) -> PreparedRequest | Awaitable[PreparedRequest | None] | None:
        assert runtime is not None, "the Runtime is built before its Agent asks the model"
        return runtime.prepare_request(request, signal=signal)

    agent = Agent(
        model=model,
        tools=deps.tools,
        tool_executor=executor,
        initial_messages=messages_in(initial_path),
        max_steps=DEFAULT_MAX_STEPS if config.max_steps is None else config.max_steps,
        # Only with a hook: without one, the loop runs exactly as it did before 18.
        prepare_request=prepare_request if deps.prepare_request is not None else None,
    )
    runtime = RuntimeImpl(agent, initial_path, deps, config.system_prompt)
    return runtime


# ## From 13.2 (given since 17) · project each model request from the active path and the unsaved suffix


def temporary_entries(
    snapshot: ContextProjectionSnapshot, messages: Sequence[AgentMessage]
) -> list[SessionEntry]:
    """The active path followed by in-memory entries for the messages not yet persisted."""
    count = snapshot.persisted_message_count
    if isinstance(count, bool) or not isinstance(count, int) or count < 0 or count > len(messages):
        raise ValueError("persistedMessageCount 超出了当前 model context")
    active_path = copy.deepcopy(list(snapshot.active_path))
    occupied = {entry.id for entry in active_path}
    parent_id = active_path[-1].id if active_path else None
    suffix: list[SessionEntry] = []
    for index, message in enumerate(messages[count:]):
        # These ids live for one request only: never written, never taken from deps.create_id.
        entry_id = f"__runtime_context_{index}"
        while entry_id in occupied:
            entry_id = f"_{entry_id}"
        occupied.add(entry_id)
        suffix.append(
            MessageSessionEntry(
                id=entry_id,
                parent_id=parent_id,
                timestamp=message.timestamp,
                message=copy.deepcopy(message),
            )
        )
        parent_id = entry_id
    return [*active_path, *suffix]


class ContextProjectingModel:
    """A model that shows its inner model the one `build_context` projection of the current path.

    The Agent keeps the whole canonical transcript; this adapter only decides what one request sees.
    """

    def __init__(
        self,
        inner: Model,
        context: ContextBudget,
        get_snapshot: Callable[[], ContextProjectionSnapshot],
    ) -> None:
        self.inner = inner
        self.context = context
        self.get_snapshot = get_snapshot

    def stream(
        self,
        context: AgentContext,
        *,
        signal: AbortSignal | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> ModelStream:
        """Project, copy, and hand the request on with the very same signal.

        A `thinking_level` (checkpoint 18) is accepted and, as in the course, not passed on: a route that
        wants one names a physical model, which then gets the request directly.
        """
        budget = self.context
        projected = build_context(
            temporary_entries(self.get_snapshot(), context.messages),
            max_tokens=budget.total,
            reserved_output=budget.reserved_output,
            safety_margin=budget.safety_margin,
            estimate_tokens=budget.estimate_tokens,
        )
        request = AgentContext(
            messages=copy.deepcopy(projected.messages),
            tools=None if context.tools is None else copy.deepcopy(context.tools),
        )
        # The same signal object, so that cancelling the Agent reaches the provider.
        return self.inner.stream(request, signal=signal)


def create_context_projecting_model(
    inner: Model,
    context: ContextBudget,
    get_snapshot: Callable[[], ContextProjectionSnapshot],
) -> Model:
    """Wrap `inner` so that every request is projected from `get_snapshot()` at the time of the request.

    The course passes `{ context }`; here the budget itself is the argument.
    """
    return ContextProjectingModel(inner, context, get_snapshot)


# ## From 13.3 (given since 17) · system patches, persistence before resolving, poison, flush and dispose


def desired_system_state(configured: str | None, resources: ResourceCatalog) -> SystemState:
    """The base prompt from the configuration and, when there are resources, the pi-resources section."""
    sections: dict[str, str] = {}
    if resources.resources:
        # An empty catalog is not formatted: it would make an empty "# Pi resources" section.
        sections[RESOURCE_SECTION] = format_resource_context(resources, [])
    return SystemState(content=configured or "", sections=sections)


def system_patch(messages: Sequence[AgentMessage], desired: SystemState) -> PromptSystem | None:
    """The system message this turn must add, or None when the replayed state already is `desired`.

    The base prompt is written once, when the path has no system message yet; after that only
    changed sections are patched, and a section that is no longer wanted is deleted with None. A
    resumed transcript wins over a different configured base prompt: what was sent is a fact.
    """
    current = current_system_message(messages)
    if current is None:
        if not desired.content and not desired.sections:
            return None
        return PromptSystem(content=desired.content, sections=dict(desired.sections) or None)
    current_sections = current.sections or {}
    sections: dict[str, str | None] = {}
    for name, value in desired.sections.items():
        if current_sections.get(name) != value:
            sections[name] = value
    for name in current_sections:
        if name not in desired.sections:
            sections[name] = None
    return PromptSystem(sections=sections) if sections else None


class RuntimeImpl:
    """The Runtime `create_runtime` builds: one Agent, one operation queue, one session store."""

    def __init__(
        self,
        agent: Agent,
        initial_path: Sequence[SessionEntry],
        deps: RuntimeDeps,
        system_prompt: str | None,
    ) -> None:
        self._agent = agent
        self._deps = deps
        self._active_path: list[SessionEntry] = copy.deepcopy(list(initial_path))
        self._persisted_message_count = len(messages_in(initial_path))
        self._active_leaf_id: str | None = initial_path[-1].id if initial_path else None
        self._system_prompt = system_prompt
        # The catalog as it was at creation: the desired state is fixed when the Runtime is built.
        self._resources_at_start = copy.deepcopy(deps.resources)
        self._desired: SystemState | None = None
        self._tail: asyncio.Future[Any] | None = None
        # Metadata a request hook recorded during the current turn, written after its messages.
        self._pending_metadata: list[PendingMetadata] = []
        self._poisoned = False
        self._poison_cause: BaseException | None = None
        self._disposed = False
        self._disposing: asyncio.Future[None] | None = None
        self._session = deps.session
        self._resources = deps.resources
        self._extensions = deps.extension_host
        self._control = RuntimeControl(
            get_state=agent.get_state,
            subscribe=agent.subscribe,
            steer=agent.steer,
            follow_up=agent.follow_up,
            abort=agent.abort,
        )

    @property
    def control(self) -> RuntimeControl:
        """The Agent's controls without `prompt`."""
        return self._control

    @property
    def session(self) -> SessionStore:
        """The store this Runtime commits to: the caller's own object."""
        return self._session

    @property
    def resources(self) -> ResourceCatalog:
        """The caller's resource catalog."""
        return self._resources

    @property
    def extensions(self) -> ExtensionHost | None:
        """The caller's extension host, or None."""
        return self._extensions

    def get_active_leaf_id(self) -> str | None:
        """The id of the last entry the store has accepted on this Runtime's path."""
        return self._active_leaf_id

    def context_snapshot(self) -> ContextProjectionSnapshot:
        """A copy of the committed path and its message count, for the context adapter."""
        return ContextProjectionSnapshot(
            active_path=copy.deepcopy(self._active_path),
            persisted_message_count=self._persisted_message_count,
        )

    def _desired_system(self) -> SystemState:
        """The desired system state, computed once from the configuration and the catalog."""
        if self._desired is None:
            self._desired = desired_system_state(self._system_prompt, self._resources_at_start)
        return self._desired

    # ## From 17.5 (given since 18) · the providers' sections join the desired system state

    async def _desired_system_state(self) -> SystemState:
        """The desired state of this prompt: 13's base state plus every provider's sections of now."""
        base = self._desired_system()
        providers = self._deps.section_providers or ()
        if not providers:
            return base  # no provider: exactly 13's behaviour (given, so that 13's labs keep passing)
        sections = dict(base.sections)
        for provider in providers:
            given = provider.sections()
            sections.update(await given if inspect.isawaitable(given) else given)
        return SystemState(content=base.content, sections=sections)

    # ## From 13.3 (given since 17) · persistence before resolving, poison, flush and dispose

    def _assert_healthy(self) -> None:
        """Raise the poison cause, if a write has failed."""
        if self._poisoned:
            assert self._poison_cause is not None
            raise self._poison_cause

    async def _append_entry(self, entry: SessionEntry) -> None:
        """Append one entry; only once the store has accepted it, put it on the path and move the leaf."""
        try:
            await self._session.append(entry)
        except Exception as error:
            # The Agent holds the whole turn, the store only part of it: no later call may act as
            # if they agreed. No retry either: nobody can prove the failed write left no trace.
            self._poisoned = True
            self._poison_cause = error
            raise
        self._active_path.append(copy.deepcopy(entry))
        if isinstance(entry, MessageSessionEntry):
            self._persisted_message_count += 1
        self._active_leaf_id = entry.id

    def _message_entry(self, message: AgentMessage) -> MessageSessionEntry:
        """A new entry for one message, after the current leaf."""
        return MessageSessionEntry(
            id=self._deps.create_id(),
            parent_id=self._active_leaf_id,
            timestamp=self._deps.now(),
            message=copy.deepcopy(message),
        )

    def _metadata_entry(self, key: str, value: JsonValue) -> MetadataSessionEntry:
        """A new metadata entry after the current leaf, holding its own copy of the value."""
        return MetadataSessionEntry(
            id=self._deps.create_id(),
            parent_id=self._active_leaf_id,
            timestamp=self._deps.now(),
            key=key,
            value=copy.deepcopy(value),
        )

    async def _persist(self, messages: Sequence[AgentMessage]) -> None:
        """Append one entry per message, then the metadata this turn recorded (checkpoint 18)."""
        for message in messages:
            await self._append_entry(self._message_entry(message))
        if self._pending_metadata:
            await self._persist_metadata()

    def prepare_request(
        self, request: AgentRequest, *, signal: AbortSignal | None = None
    ) -> PreparedRequest | Awaitable[PreparedRequest | None] | None:
        """The loop's hook: hand the request to `deps.prepare_request` with a fresh session view."""
        hook = self._deps.prepare_request
        if hook is None:
            return None
        return hook(request, self._request_session(), signal=signal)

    def prompt(self, value: str) -> Awaitable[AgentRunResult]:
        """Queue one turn; it resolves after every new message has been appended to the store."""
        if self._disposed:
            return _rejected(RuntimeError("Runtime 已 dispose"))
        if self._poisoned:
            assert self._poison_cause is not None
            return _rejected(self._poison_cause)
        previous = self._tail

        async def operation() -> AgentRunResult:
            await _settled(previous)
            # Whether a prompt is accepted is decided when it is called; dispose closes the entry
            # but does not cancel work already queued. A poison set meanwhile still stops it.
            self._assert_healthy()
            # Read at the start of this operation, not at the call: the turn before it has then put
            # its patch in the transcript, so this one computes its own suffix and patch.
            before = self._agent.get_state().messages
            system = system_patch(before, await self._desired_system_state())
            result = await self._agent.prompt(value, system=system)
            try:
                await self._persist(result.messages[len(before) :])
            finally:
                # Written or not, what the hook recorded belonged to this turn only.
                self._pending_metadata.clear()
            return copy.deepcopy(result)

        task = asyncio.get_running_loop().create_task(operation())
        self._tail = task
        return task

    def flush(self) -> Awaitable[None]:
        """Wait for the work queued so far; raise the poison cause if a write has failed."""
        tail = self._tail

        async def wait() -> None:
            await _settled(tail)
            self._assert_healthy()

        return asyncio.get_running_loop().create_task(wait())

    def dispose(self) -> Awaitable[None]:
        """Close the entry for good and wait for the accepted work; every call returns the same awaitable."""
        if self._disposing is None:
            self._disposed = True
            self._disposing = asyncio.ensure_future(self.flush())
        return self._disposing

    # ## Lab 18.3 · the hook's view of the branch, and metadata written after the turn

    def _request_session(self) -> RuntimeRequestSession:
        """A fresh view for one request: the committed path plus this turn's buffered metadata."""
        # BEGIN LAB 18.3

        def branch() -> list[SessionEntry]:
            entries = copy.deepcopy(self._active_path)
            parent_id = self._active_leaf_id
            for index, pending in enumerate(self._pending_metadata):
                # Stand-ins, never written: the real entries get their ids when the turn is persisted.
                entry_id = f"__runtime_pending_{index}"
                entries.append(
                    MetadataSessionEntry(
                        id=entry_id,
                        parent_id=parent_id,
                        timestamp=0,
                        key=pending.key,
                        value=copy.deepcopy(pending.value),
                    )
                )
                parent_id = entry_id
            return entries

        def record(key: str, value: JsonValue) -> None:
            # Only buffered: the store sees it after the turn's messages, or never if the turn fails.
            self._pending_metadata.append(PendingMetadata(key=key, value=copy.deepcopy(value)))

        return RequestSessionView(branch=branch, record=record)
        # END LAB 18.3

    async def _persist_metadata(self) -> None:
        """Append the metadata this turn recorded, in order, after its messages."""
        # BEGIN LAB 18.3
        pending = list(self._pending_metadata)
        self._pending_metadata.clear()
        for item in pending:
            await self._append_entry(self._metadata_entry(item.key, item.value))
        # END LAB 18.3

    def append_metadata(self, key: str, value: JsonValue) -> Awaitable[None]:
        """Queue one metadata entry after the leaf, in the same queue as `prompt` (e.g. a model choice)."""
        # BEGIN LAB 18.3
        if self._disposed:
            return _rejected(RuntimeError("Runtime 已 dispose"))
        if self._poisoned:
            assert self._poison_cause is not None
            return _rejected(self._poison_cause)
        previous = self._tail

        async def operation() -> None:
            await _settled(previous)
            self._assert_healthy()
            await self._append_entry(self._metadata_entry(key, value))

        task = asyncio.get_running_loop().create_task(operation())
        self._tail = task
        return task
        # END LAB 18.3


# ## From 13.4 (given since 17) · modes only choose the output


def final_assistant_text(result: AgentRunResult) -> str:
    """The text of the run's last assistant message; "" when there is none."""
    for message in reversed(result.messages):
        if isinstance(message, AssistantMessage):
            return text_of(message)
    return ""


def _wire(value: object) -> object:
    """JSON for the values `to_dict` leaves as they are (tool details may be dataclasses)."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_line(result: AgentRunResult) -> str:
    """JSON.stringify's compact form of {reason, steps, messages}, ended by a newline."""
    payload = {
        "reason": result.reason,
        "steps": result.steps,
        "messages": [message.to_dict() for message in result.messages],
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_wire) + "\n"


async def run_mode(runtime: Runtime, mode: RuntimeMode, prompt: str, io: ModeIO) -> AgentRunResult:
    """Check the mode, call `runtime.prompt` exactly once, then write the one output."""
    if mode not in RUNTIME_MODES:
        # Before the Runtime: an unknown mode must not cost a model request or a store write.
        raise ValueError(f"未知 runtime mode：{mode}")
    result = await runtime.prompt(prompt)
    output = json_line(result) if mode == "json" else final_assistant_text(result)
    # A failing sink is raised as it is; the session is not rolled back, the turn is already a fact.
    written = io.write(output)
    if inspect.isawaitable(written):
        await written
    return copy.deepcopy(result)
