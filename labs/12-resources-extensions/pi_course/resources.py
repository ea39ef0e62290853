"""Checkpoint 12: knowledge enters the context on demand, and code passes a trust gate first.

Two halves that never mix. Resources are data found under roots: `AGENTS.md` instructions, skills
(metadata in the catalog, the body only on activation) and prompt templates. Extensions are code: a
module is imported only after `is_trusted` said yes, its factory registers into a staging area that
the host sees only once the factory returned, and its hooks run around a `ToolExecutor` with every
failure of a policy hook closing the gate.

Root containment here bounds which skill files the loader reads; it is not a sandbox, and a hook's
timeout only stops the host from waiting: neither limits what a trusted extension's code may do.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import importlib.util
import inspect
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, NoReturn, Protocol, TypeAlias, TypeVar, cast, overload

from .agent_loop import ToolExecutor
from .lab import LabNotImplemented
from .messages import AbortSignal, TextContent, ToolCall, ToolResultMessage, UserMessage, now_ms, text
from .tool import Tool, ToolContext, ToolOutput, ToolRegistry

T = TypeVar("T")


# ## Resources (declared for every lab)


@dataclass
class InstructionResource:
    """A root's `AGENTS.md`: its whole body travels in the catalog, since it always enters the prompt."""

    name: str
    source: str
    root: str
    body: str
    kind: Literal["instructions"] = "instructions"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "root": self.root,
            "body": self.body,
        }


@dataclass
class SkillResource:
    """A discovered skill: metadata only. It has no `body` attribute at all, not even an empty one."""

    name: str
    source: str
    root: str
    description: str
    kind: Literal["skill"] = "skill"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "root": self.root,
            "description": self.description,
        }


@dataclass
class TemplateResource:
    """A prompt template: metadata and the body whose `{{name}}` placeholders `render_template` fills."""

    name: str
    source: str
    root: str
    description: str
    body: str
    kind: Literal["template"] = "template"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "root": self.root,
            "description": self.description,
            "body": self.body,
        }


CatalogResource: TypeAlias = InstructionResource | SkillResource | TemplateResource
ResourceKind: TypeAlias = Literal["instructions", "skill", "template"]


@dataclass
class ResourceCatalog:
    """The winners of every root, in logical order, and the same objects split by kind."""

    resources: list[CatalogResource]
    instructions: list[InstructionResource]
    skills: list[SkillResource]
    templates: list[TemplateResource]

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form (what JSON.stringify would show of the catalog)."""
        return {
            "resources": [resource.to_dict() for resource in self.resources],
            "instructions": [resource.to_dict() for resource in self.instructions],
            "skills": [resource.to_dict() for resource in self.skills],
            "templates": [resource.to_dict() for resource in self.templates],
        }


@dataclass
class ActivatedSkillFile:
    """One extra file an activation read: the caller's request, its canonical path and its text."""

    request: str
    source: str
    content: str

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"request": self.request, "source": self.source, "content": self.content}


@dataclass(kw_only=True)
class ActivatedSkill(SkillResource):
    """A skill this turn chose to read: the catalog's metadata plus the body and the requested files."""

    body: str
    resources: list[ActivatedSkillFile] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            **super().to_dict(),
            "body": self.body,
            "resources": [resource.to_dict() for resource in self.resources],
        }


@dataclass
class Frontmatter:
    """The `key: value` lines between the two `---` lines, and the text after them."""

    attributes: dict[str, str]
    body: str


# ## Helpers shared by the labs (given)

#: How much of a SKILL.md discovery reads: enough for its frontmatter, not meant for its body.
FRONTMATTER_PREFIX_BYTES = 64 * 1024

_ATTRIBUTE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):\s*(.*?)\s*")
_QUOTED = re.compile(r"(['\"])(.*)\1")


def within(root: str, candidate: str) -> bool:
    """True when the absolute `candidate` is `root` or below it (`<root>-old` is not below `<root>`)."""
    relative = os.path.relpath(candidate, root)
    return relative == "." or (
        relative != ".." and not relative.startswith(".." + os.sep) and not os.path.isabs(relative)
    )


def assert_within(root: str, candidate: str, label: str) -> None:
    """Raise unless `candidate` stays inside `root`; the message starts with `label`."""
    if not within(root, candidate):
        raise ValueError(f"{label} 逃出了声明 root")


def canonical(path: str) -> str:
    """The real path, following every link; a missing file raises FileNotFoundError as Node's realpath
    does."""
    return os.path.realpath(path, strict=True)


def read_text(file: str) -> str:
    """The whole file as UTF-8, bytes kept exactly (no newline translation, bad bytes as U+FFFD)."""
    with open(file, "rb") as handle:
        return handle.read().decode("utf-8", errors="replace")


def parse_frontmatter(value: str, source: str) -> Frontmatter:
    """Split `---` frontmatter from the body; one `key: value` per line, outer quotes dropped."""
    normalized = value.replace("\r\n", "\n")
    if not normalized.startswith("---\n"):
        raise ValueError(f"{source} 缺少 YAML frontmatter")
    end = normalized.find("\n---\n", 4)
    if end < 0:
        raise ValueError(f"{source} 的 YAML frontmatter 没有结束")
    attributes: dict[str, str] = {}
    for line in normalized[4:end].split("\n"):
        if line.strip() == "":
            continue
        match = _ATTRIBUTE.fullmatch(line)
        if match is None:
            raise ValueError(f"{source} 的 frontmatter 行无法解析：{line}")
        quoted = _QUOTED.fullmatch(match[2])
        attributes[match[1]] = quoted[2] if quoted else match[2]
    return Frontmatter(attributes=attributes, body=normalized[end + 5 :].strip())


def read_frontmatter_only(file: str) -> Frontmatter:
    """Parse the frontmatter of a file's first 64 KiB and return no body: what discovery keeps of a skill."""
    with open(file, "rb") as handle:
        prefix = handle.read(FRONTMATTER_PREFIX_BYTES).decode("utf-8", errors="replace")
    parsed = parse_frontmatter(prefix, file)
    # A short file's body was in the buffer; it is dropped here so that it cannot reach the catalog.
    return Frontmatter(attributes=parsed.attributes, body="")


def optional_entries(directory: str) -> list[os.DirEntry[str]]:
    """The entries of a folder; a missing folder has none. Any other error is raised, never swallowed."""
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def optional_text(file: str) -> str | None:
    """The file's text, or None where it does not exist. Any other error is raised."""
    try:
        return read_text(file)
    except FileNotFoundError:
        return None


def resource_key(resource: CatalogResource) -> str:
    """The logical identity `kind:name`: a skill and a template may share a name, two skills may not."""
    return f"{resource.kind}:{resource.name}"


def resource_order(resource: CatalogResource) -> int:
    """instructions, then skills, then templates."""
    return {"instructions": 0, "skill": 1, "template": 2}[resource.kind]


# ## Extensions (declared for every lab)


@dataclass(frozen=True)
class BeforeToolDecisionAllow:
    """A before hook lets the call go on (returning None means the same)."""

    decision: Literal["allow"] = "allow"


@dataclass(frozen=True)
class BeforeToolDecisionDeny:
    """A before hook stops the call; `reason` goes into the paired error result's details."""

    reason: str
    decision: Literal["deny"] = "deny"


BeforeToolDecision: TypeAlias = BeforeToolDecisionAllow | BeforeToolDecisionDeny

BeforeToolCallHook: TypeAlias = Callable[
    [ToolCall], BeforeToolDecision | Awaitable[BeforeToolDecision | None] | None
]
AfterToolResultHook: TypeAlias = Callable[[ToolResultMessage], Awaitable[None] | None]
#: The two hook names, spelled as the course spells them (they are strings, not identifiers).
ExtensionHookName: TypeAlias = Literal["beforeToolCall", "afterToolResult"]
HOOK_NAMES: tuple[ExtensionHookName, ...] = ("beforeToolCall", "afterToolResult")


class ExtensionContext(Protocol):
    """All a factory may do: register tools and hooks. Nothing it registers is visible until commit."""

    def register_tool(self, tool: Tool[Any, Any]) -> None: ...

    @overload
    def on(self, hook: Literal["beforeToolCall"], listener: BeforeToolCallHook) -> None: ...

    @overload
    def on(self, hook: Literal["afterToolResult"], listener: AfterToolResultHook) -> None: ...

    def on(self, hook: ExtensionHookName, listener: Callable[..., Any]) -> None: ...


ExtensionFactory: TypeAlias = Callable[[ExtensionContext], Awaitable[None] | None]


class ExtensionModule(Protocol):
    """What an imported extension provides: a `default` factory (a module-level `def default(context)`)."""

    @property
    def default(self) -> ExtensionFactory: ...


@dataclass
class ExtensionDiagnostic:
    """An extension's hook failed: which extension, which hook, `error` or `timeout`, and the message."""

    extension_id: str
    hook: ExtensionHookName
    kind: Literal["error", "timeout"]
    message: str

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {
            "extensionId": self.extension_id,
            "hook": self.hook,
            "kind": self.kind,
            "message": self.message,
        }


class ExtensionHost(Protocol):
    """The host's one public ability: wrap a core executor in the committed hooks."""

    def wrap_executor(self, core_executor: ToolExecutor) -> ToolExecutor: ...


@dataclass(frozen=True)
class ExtensionSource:
    """Where an extension's code is: chosen by the composition, never discovered under a resource root."""

    id: str
    path: str


@dataclass
class LoadExtensionResult:
    """`active` once committed; `skipped_untrusted` when the trust gate said no (nothing was imported)."""

    id: str
    status: Literal["active", "skipped_untrusted"]

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"id": self.id, "status": self.status}


@dataclass
class RegisteredBeforeHook:
    """A committed before hook and the extension it came from."""

    extension_id: str
    listener: BeforeToolCallHook


@dataclass
class RegisteredAfterHook:
    """A committed after hook and the extension it came from."""

    extension_id: str
    listener: AfterToolResultHook


class HookTimeoutError(Exception):
    """A hook did not settle within `hook_timeout_ms`: the host stopped waiting for it."""


# What a hook receives is a frozen deep copy, so that it cannot edit the call or the result (Object.freeze).


def _refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError("hook 收到的是只读副本，不能修改")


def _refuse_attribute(*_args: object) -> NoReturn:
    raise dataclasses.FrozenInstanceError("hook 收到的是只读副本，不能修改")


class FrozenDict(dict[Any, Any]):
    """A dict whose every mutating method raises; a deep copy of it is an ordinary dict again."""

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        _refuse()

    def __delitem__(self, key: Any) -> NoReturn:
        _refuse()

    def __ior__(self, other: object) -> NoReturn:  # type: ignore[misc]
        _refuse()

    def clear(self) -> NoReturn:
        _refuse()

    def pop(self, *args: object) -> NoReturn:
        _refuse()

    def popitem(self) -> NoReturn:
        _refuse()

    def setdefault(self, *args: object) -> NoReturn:
        _refuse()

    def update(self, *args: object, **kwargs: object) -> NoReturn:
        _refuse()

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(key, memo): copy.deepcopy(value, memo) for key, value in self.items()}


class FrozenList(list[Any]):
    """A list whose every mutating method raises; a deep copy of it is an ordinary list again."""

    def __setitem__(self, index: Any, value: Any) -> NoReturn:
        _refuse()

    def __delitem__(self, index: Any) -> NoReturn:
        _refuse()

    def __iadd__(self, other: object) -> NoReturn:  # type: ignore[misc]
        _refuse()

    def __imul__(self, other: object) -> NoReturn:
        _refuse()

    def append(self, value: Any) -> NoReturn:
        _refuse()

    def extend(self, values: Any) -> NoReturn:
        _refuse()

    def insert(self, index: Any, value: Any) -> NoReturn:
        _refuse()

    def pop(self, *args: object) -> NoReturn:
        _refuse()

    def remove(self, value: Any) -> NoReturn:
        _refuse()

    def clear(self) -> NoReturn:
        _refuse()

    def sort(self, *args: object, **kwargs: object) -> NoReturn:
        _refuse()

    def reverse(self) -> NoReturn:
        _refuse()

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]


_FROZEN_CLASSES: dict[type, type] = {}


def _frozen_class(cls: type) -> type:
    """A subclass of the dataclass `cls` whose instances refuse every attribute assignment."""
    if cls not in _FROZEN_CLASSES:

        def thawed(self: Any, memo: dict[int, Any]) -> Any:
            values = {f.name: copy.deepcopy(getattr(self, f.name), memo) for f in dataclasses.fields(self)}
            return cls(**values)

        def equal(self: Any, other: object) -> Any:
            # A read-only view equals the ordinary value it was copied from, field by field.
            if not isinstance(other, cls):
                return NotImplemented
            return all(
                getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self) if f.compare
            )

        _FROZEN_CLASSES[cls] = type(
            f"Frozen{cls.__name__}",
            (cls,),
            {
                "__setattr__": _refuse_attribute,
                "__delattr__": _refuse_attribute,
                "__deepcopy__": thawed,
                "__eq__": equal,
                "__hash__": cls.__hash__,
                "__slots__": (),
            },
        )
    return _FROZEN_CLASSES[cls]


def is_frozen(value: object) -> bool:
    """True for the read-only views `frozen_clone` makes (Object.isFrozen for this module's copies)."""
    return isinstance(value, FrozenDict | FrozenList) or type(value) in _FROZEN_CLASSES.values()


def frozen_clone(value: T) -> T:
    """A deep copy that cannot be edited: dataclasses, dicts and lists become read-only at every depth."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        frozen: Any = object.__new__(_frozen_class(type(value)))
        for item in dataclasses.fields(value):
            object.__setattr__(frozen, item.name, frozen_clone(getattr(value, item.name)))
        return cast(T, frozen)
    if isinstance(value, dict):
        return cast(T, FrozenDict((key, frozen_clone(item)) for key, item in value.items()))
    if isinstance(value, list):
        return cast(T, FrozenList(frozen_clone(item) for item in value))
    if isinstance(value, tuple):
        return cast(T, tuple(frozen_clone(item) for item in value))
    return copy.deepcopy(value)


async def settle(value: T | Awaitable[T]) -> T:
    """Await `value` if a listener returned an awaitable; a plain return value is the result at once."""
    if inspect.isawaitable(value):
        return await value
    return value


def error_message(error: BaseException) -> str:
    """An exception's message, its class name where it has none."""
    return str(error) or type(error).__name__


async def import_extension_file(source: ExtensionSource) -> ModuleType:
    """Import the Python file at `source.path` as a fresh module (its top level runs now), for
    `import_module`.

    The module is not put in sys.modules: each load is its own module, and nothing else can import it.
    """
    name = "pi_course_extension_" + re.sub(r"\W", "_", source.id, flags=re.ASCII)
    spec = importlib.util.spec_from_file_location(name, source.path)
    if spec is None or spec.loader is None:
        raise ValueError(f"extension {source.id} 无法从 {source.path} 导入")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ## Lab 12.1 · roots decide the winners, the catalog is stable and holds no skill body


def discover_root(configured_root: str) -> list[CatalogResource]:
    """Every resource of one root: AGENTS.md, then templates/*.md, then skills/*/SKILL.md, by file name."""
    raise LabNotImplemented("12.1", "discover_root")


def sort_resources(resources: Iterable[CatalogResource]) -> list[CatalogResource]:
    """By kind, then by logical name: never by path, so a folder's name cannot reorder the catalog."""
    raise LabNotImplemented("12.1", "sort_resources")


async def discover_resources(roots: Sequence[str]) -> ResourceCatalog:
    """The order of `roots` is the precedence: the first root declaring a `kind:name` wins it."""
    raise LabNotImplemented("12.1", "discover_resources")


# ## Lab 12.2 · activation reads the body, and realpath keeps every file inside the skill root


def resolve_inside_skill(root: str, request: str) -> str:
    """The canonical path of a file a skill asks for, checked inside `root` before and after links."""
    raise LabNotImplemented("12.2", "resolve_inside_skill")


async def activate_skill(
    catalog: ResourceCatalog, name: str, *, resources: Sequence[str] = ()
) -> ActivatedSkill:
    """Read one catalog skill's body (and the files it asks for) now, returning a copy of its own."""
    raise LabNotImplemented("12.2", "activate_skill")


# ## Lab 12.3 · a template becomes a user message, resources become one system section

#: The only placeholder form: `{{` a letter or `_`, then letters, digits or `_`, then `}}`.
PLACEHOLDER = re.compile(r"{{([A-Za-z_][A-Za-z0-9_]*)}}")

#: The system-message section that holds the resource text: replaced by name, never glued to the base prompt.
RESOURCE_SECTION = "pi-resources"


def render_template(template: TemplateResource, args: Mapping[str, str]) -> UserMessage:
    """Fill every placeholder (each occurrence) from `args`; a missing one raises, extra args are unused."""

    raise LabNotImplemented("12.3", "render_template")


def lines_for_activated_skill(skill: ActivatedSkill) -> list[str]:
    """An active skill's heading and body, then each requested file under its own heading."""
    raise LabNotImplemented("12.3", "lines_for_activated_skill")


def format_resource_context(catalog: ResourceCatalog, activated_skills: Sequence[ActivatedSkill]) -> str:
    """The text of the resource section: instructions, every skill's metadata, the active skills' bodies."""
    raise LabNotImplemented("12.3", "format_resource_context")


# ## Lab 12.4 · trust before import, and staged registration with nothing left behind


class StagingContext:
    """The `ExtensionContext` a factory receives: it writes only into this staging area."""

    def __init__(self) -> None:
        self._tools: list[Tool[Any, Any]] = []
        self._before_hooks: list[BeforeToolCallHook] = []
        self._after_hooks: list[AfterToolResultHook] = []

    def register_tool(self, tool: Tool[Any, Any]) -> None:
        """Stage a tool; a blank name or one staged already is refused at once."""
        raise LabNotImplemented("12.4", "StagingContext.register_tool")

    def on(self, hook: str, listener: Callable[..., Any]) -> None:
        """Stage a hook listener under one of the two hook names; any other name is refused."""
        raise LabNotImplemented("12.4", "StagingContext.on")


class StagedRegistration:
    """One extension's staging area and the commit that makes all of it visible at once."""

    def __init__(self, host: ExtensionHostImpl, extension_id: str) -> None:
        self.host = host
        self.extension_id = extension_id
        self.context = StagingContext()
        self.committed = False

    def commit(self) -> None:
        """Check everything first, then register every tool and hook: all of them, or none."""
        raise LabNotImplemented("12.4", "StagedRegistration.commit")


def create_extension_host(
    registry: ToolRegistry,
    *,
    hook_timeout_ms: int,
    on_diagnostic: Callable[[ExtensionDiagnostic], None] | None = None,
) -> ExtensionHost:
    """A host that commits extensions into `registry` and bounds every hook by `hook_timeout_ms`."""
    raise LabNotImplemented("12.4", "create_extension_host")


def host_implementation(host: ExtensionHost) -> ExtensionHostImpl:
    """The host's staging side, reachable only for a host that `create_extension_host` made."""
    if not isinstance(host, ExtensionHostImpl):
        raise TypeError("host 不是 createExtensionHost 的结果")
    return host


async def load_extension(
    source: ExtensionSource,
    *,
    is_trusted: Callable[[ExtensionSource], bool | Awaitable[bool]],
    import_module: Callable[[ExtensionSource], Awaitable[object]],
    host: ExtensionHost,
) -> LoadExtensionResult:
    """Ask trust, then import, then run the factory on a staging area, then commit it in one step."""
    raise LabNotImplemented("12.4", "load_extension")


class ExtensionHostImpl:
    """The host behind `create_extension_host`. `stage` is for `load_extension`, never for a factory."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        hook_timeout_ms: int,
        on_diagnostic: Callable[[ExtensionDiagnostic], None] | None = None,
    ) -> None:
        self.registry = registry
        self.hook_timeout_ms = hook_timeout_ms
        self.on_diagnostic = on_diagnostic
        self.before_hooks: list[RegisteredBeforeHook] = []
        self.after_hooks: list[RegisteredAfterHook] = []
        self.extension_ids: set[str] = set()

    def stage(self, extension_id: str) -> StagedRegistration:
        """A fresh staging area for one extension; a blank or committed id is refused."""
        raise LabNotImplemented("12.4", "ExtensionHostImpl.stage")

    def diagnostic(self, diagnostic: ExtensionDiagnostic) -> None:
        """Tell the observer (a copy); an observer that raises cannot change what the tool did."""
        if self.on_diagnostic is None:
            return
        with contextlib.suppress(Exception):
            self.on_diagnostic(copy.deepcopy(diagnostic))

    # ## Lab 12.5 · hooks around one tool call: before denies or fails closed, after only observes

    async def before(self, call: ToolCall) -> ToolResultMessage | None:
        """Run the before hooks in order; the first deny, error or timeout gives the blocked result."""
        raise LabNotImplemented("12.5", "ExtensionHostImpl.before")

    async def after(self, result: ToolResultMessage) -> None:
        """Run every after hook once in order; a failure is a diagnostic and the next hook still runs."""
        raise LabNotImplemented("12.5", "ExtensionHostImpl.after")

    def wrap_executor(self, core_executor: ToolExecutor) -> ToolExecutor:
        """An executor that runs before hooks, the core at most once, then after hooks, on copies."""

        raise LabNotImplemented("12.5", "ExtensionHostImpl.wrap_executor")


async def with_timeout(operation: Awaitable[T], timeout_ms: int, label: str) -> T:
    """Wait for `operation` at most `timeout_ms`; past it raise HookTimeoutError("<label> timed out")."""
    raise LabNotImplemented("12.5", "with_timeout")


def blocked_result(
    call: ToolCall, extension_id: str, kind: Literal["deny", "error", "timeout"], reason: str
) -> ToolResultMessage:
    """The error result paired with a call that a before hook stopped."""
    raise LabNotImplemented("12.5", "blocked_result")
