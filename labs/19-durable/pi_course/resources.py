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
    # BEGIN LAB 12.1
    root = canonical(configured_root)
    found: list[CatalogResource] = []

    agents = os.path.join(root, "AGENTS.md")
    agents_body = optional_text(agents)
    if agents_body is not None:
        source = canonical(agents)
        assert_within(root, source, "AGENTS.md")
        found.append(InstructionResource(name="AGENTS", source=source, root=root, body=agents_body.strip()))

    template_directory = os.path.join(root, "templates")
    # Plain files only (a link is not followed here), in file-name order so that the scan is repeatable.
    template_entries = sorted(
        (
            entry
            for entry in optional_entries(template_directory)
            if entry.is_file(follow_symlinks=False) and entry.name.endswith(".md")
        ),
        key=lambda entry: entry.name,
    )
    for entry in template_entries:
        source = canonical(os.path.join(template_directory, entry.name))
        assert_within(root, source, f"template {entry.name}")
        parsed = parse_frontmatter(read_text(source), source)
        name = parsed.attributes.get("name", entry.name.removesuffix(".md"))
        if name.strip() == "":
            raise ValueError(f"template {source} 的 name 不能为空")
        found.append(
            TemplateResource(
                name=name,
                source=source,
                root=root,
                description=parsed.attributes.get("description", ""),
                body=parsed.body,
            )
        )

    skill_directory = os.path.join(root, "skills")
    skill_entries = sorted(
        (entry for entry in optional_entries(skill_directory) if entry.is_dir(follow_symlinks=False)),
        key=lambda entry: entry.name,
    )
    for entry in skill_entries:
        skill_root = canonical(os.path.join(skill_directory, entry.name))
        assert_within(root, skill_root, f"skill {entry.name}")
        source = canonical(os.path.join(skill_root, "SKILL.md"))
        assert_within(skill_root, source, f"skill {entry.name} SKILL.md")
        # Only the frontmatter: the body waits for an explicit activate_skill.
        metadata = read_frontmatter_only(source)
        name = metadata.attributes.get("name", entry.name)
        if name.strip() == "":
            raise ValueError(f"skill {source} 的 name 不能为空")
        found.append(
            SkillResource(
                name=name,
                source=source,
                root=skill_root,
                description=metadata.attributes.get("description", ""),
            )
        )

    # Inside one root no order says who wins, so a repeated identity is an error, not a silent choice.
    seen: dict[str, str] = {}
    for resource in found:
        key = resource_key(resource)
        if key in seen:
            raise ValueError(f"同一 resource root 内 {key} 重复：{seen[key]} 与 {resource.source}")
        seen[key] = resource.source
    return found
    # END LAB 12.1


def sort_resources(resources: Iterable[CatalogResource]) -> list[CatalogResource]:
    """By kind, then by logical name: never by path, so a folder's name cannot reorder the catalog."""
    # BEGIN LAB 12.1
    return sorted(resources, key=lambda resource: (resource_order(resource), resource.name))
    # END LAB 12.1


async def discover_resources(roots: Sequence[str]) -> ResourceCatalog:
    """The order of `roots` is the precedence: the first root declaring a `kind:name` wins it."""
    # BEGIN LAB 12.1
    winners: dict[str, CatalogResource] = {}
    for root in roots:
        for resource in discover_root(root):
            # setdefault keeps the first root's resource: the caller's order decides, not the paths.
            winners.setdefault(resource_key(resource), resource)
    resources = sort_resources(winners.values())
    catalog = ResourceCatalog(
        resources=resources,
        instructions=[resource for resource in resources if isinstance(resource, InstructionResource)],
        skills=[resource for resource in resources if isinstance(resource, SkillResource)],
        templates=[resource for resource in resources if isinstance(resource, TemplateResource)],
    )
    # deepcopy keeps the views' shared objects shared with each other, and apart from everything else.
    return copy.deepcopy(catalog)
    # END LAB 12.1


# ## Lab 12.2 · activation reads the body, and realpath keeps every file inside the skill root


def resolve_inside_skill(root: str, request: str) -> str:
    """The canonical path of a file a skill asks for, checked inside `root` before and after links."""
    # BEGIN LAB 12.2
    label = f"skill resource {request}"
    if request.strip() == "" or os.path.isabs(request):
        raise ValueError(f"{label} 逃出了声明 root")
    lexical = os.path.normpath(os.path.join(root, request))
    assert_within(root, lexical, label)
    # The string may stay inside while a link inside leads out: judge the real file as well.
    source = canonical(lexical)
    assert_within(root, source, label)
    return source
    # END LAB 12.2


async def activate_skill(
    catalog: ResourceCatalog, name: str, *, resources: Sequence[str] = ()
) -> ActivatedSkill:
    """Read one catalog skill's body (and the files it asks for) now, returning a copy of its own."""
    # BEGIN LAB 12.2
    skill = next((candidate for candidate in catalog.skills if candidate.name == name), None)
    if skill is None:
        raise ValueError(f"skill 不存在：{name}")
    source = canonical(skill.source)
    assert_within(skill.root, source, f"skill {name}")
    parsed = parse_frontmatter(read_text(source), source)
    current_name = parsed.attributes.get("name", os.path.basename(skill.root))
    if current_name != skill.name:
        raise ValueError(f"skill {name} 激活时身份变成了 {current_name}")

    files: list[ActivatedSkillFile] = []
    seen: set[str] = set()
    for request in resources:
        if request in seen:
            continue
        seen.add(request)
        file = resolve_inside_skill(skill.root, request)
        files.append(ActivatedSkillFile(request=request, source=file, content=read_text(file)))
    activated = ActivatedSkill(
        name=skill.name,
        source=source,
        root=skill.root,
        description=skill.description,
        body=parsed.body,
        resources=files,
    )
    # A copy: editing the activation must never reach back into the catalog.
    return copy.deepcopy(activated)
    # END LAB 12.2


# ## Lab 12.3 · a template becomes a user message, resources become one system section

#: The only placeholder form: `{{` a letter or `_`, then letters, digits or `_`, then `}}`.
PLACEHOLDER = re.compile(r"{{([A-Za-z_][A-Za-z0-9_]*)}}")

#: The system-message section that holds the resource text: replaced by name, never glued to the base prompt.
RESOURCE_SECTION = "pi-resources"


def render_template(template: TemplateResource, args: Mapping[str, str]) -> UserMessage:
    """Fill every placeholder (each occurrence) from `args`; a missing one raises, extra args are unused."""

    # BEGIN LAB 12.3
    def fill(match: re.Match[str]) -> str:
        key = match[1]
        if key not in args:
            raise ValueError(f"template {template.name} 缺少参数 {key}")
        return args[key]

    # A function replacement inserts the value literally: a "\1" in an argument stays "\1".
    return UserMessage(content=[text(PLACEHOLDER.sub(fill, template.body))], timestamp=now_ms())
    # END LAB 12.3


def lines_for_activated_skill(skill: ActivatedSkill) -> list[str]:
    """An active skill's heading and body, then each requested file under its own heading."""
    # BEGIN LAB 12.3
    lines = [f"## 已激活 skill：{skill.name}", skill.body]
    for resource in skill.resources:
        lines.extend([f"### skill 文件：{resource.request}", resource.content])
    return lines
    # END LAB 12.3


def format_resource_context(catalog: ResourceCatalog, activated_skills: Sequence[ActivatedSkill]) -> str:
    """The text of the resource section: instructions, every skill's metadata, the active skills' bodies."""
    # BEGIN LAB 12.3
    lines = ["# Pi resources"]
    for instruction in catalog.instructions:
        lines.extend(["## AGENTS instructions", instruction.body])
    if catalog.skills:
        lines.append("## 可用 skills")
        # An inactive skill shows its name and description only; its body never enters the context.
        lines.extend(f"- {skill.name}: {skill.description}" for skill in catalog.skills)

    active: dict[str, ActivatedSkill] = {}
    for activated in activated_skills:
        if activated.name in active:
            raise ValueError(f"skill 重复激活：{activated.name}")
        discovered = next((skill for skill in catalog.skills if skill.name == activated.name), None)
        if discovered is None or discovered.source != activated.source:
            raise ValueError(f"activated skill 不属于当前 catalog：{activated.name}")
        active[activated.name] = copy.deepcopy(activated)
    for name in sorted(active):
        lines.extend(lines_for_activated_skill(active[name]))
    return "\n\n".join(lines)
    # END LAB 12.3


# ## Lab 12.4 · trust before import, and staged registration with nothing left behind


class StagingContext:
    """The `ExtensionContext` a factory receives: it writes only into this staging area."""

    def __init__(self) -> None:
        self._tools: list[Tool[Any, Any]] = []
        self._before_hooks: list[BeforeToolCallHook] = []
        self._after_hooks: list[AfterToolResultHook] = []

    def register_tool(self, tool: Tool[Any, Any]) -> None:
        """Stage a tool; a blank name or one staged already is refused at once."""
        # BEGIN LAB 12.4
        name = tool.name
        if name.strip() == "" or any(staged.name == name for staged in self._tools):
            raise ValueError(f"Tool 已存在：{name}")
        source = tool

        def execute(parameters: Any, context: ToolContext) -> Awaitable[ToolOutput[Any]]:
            return source.execute(parameters, context)

        # A tool of the host's own: name, description and schema as they were at registration.
        self._tools.append(Tool(name=name, description=tool.description, schema=tool.schema, execute=execute))
        # END LAB 12.4

    def on(self, hook: str, listener: Callable[..., Any]) -> None:
        """Stage a hook listener under one of the two hook names; any other name is refused."""
        # BEGIN LAB 12.4
        if hook == "beforeToolCall":
            self._before_hooks.append(listener)
        elif hook == "afterToolResult":
            self._after_hooks.append(listener)
        else:
            raise ValueError(f"extension hook 不存在：{hook}")
        # END LAB 12.4


class StagedRegistration:
    """One extension's staging area and the commit that makes all of it visible at once."""

    def __init__(self, host: ExtensionHostImpl, extension_id: str) -> None:
        self.host = host
        self.extension_id = extension_id
        self.context = StagingContext()
        self.committed = False

    def commit(self) -> None:
        """Check everything first, then register every tool and hook: all of them, or none."""
        # BEGIN LAB 12.4
        host, staged = self.host, self.context
        if self.committed:
            raise ValueError(f"extension {self.extension_id} 已提交")
        if self.extension_id in host.extension_ids:
            raise ValueError(f"extension id 重复：{self.extension_id}")
        # Every conflict is found before the first write, so a refused commit changes nothing.
        for tool in staged._tools:
            if host.registry.get(tool.name) is not None:
                raise ValueError(f"Tool 已存在：{tool.name}")
        for tool in staged._tools:
            host.registry.register(tool)
        host.before_hooks.extend(
            RegisteredBeforeHook(self.extension_id, listener) for listener in staged._before_hooks
        )
        host.after_hooks.extend(
            RegisteredAfterHook(self.extension_id, listener) for listener in staged._after_hooks
        )
        host.extension_ids.add(self.extension_id)
        self.committed = True
        # END LAB 12.4


def create_extension_host(
    registry: ToolRegistry,
    *,
    hook_timeout_ms: int,
    on_diagnostic: Callable[[ExtensionDiagnostic], None] | None = None,
) -> ExtensionHost:
    """A host that commits extensions into `registry` and bounds every hook by `hook_timeout_ms`."""
    # BEGIN LAB 12.4
    if isinstance(hook_timeout_ms, bool) or not isinstance(hook_timeout_ms, int) or hook_timeout_ms < 1:
        raise ValueError("hookTimeoutMs 必须是正整数")
    return ExtensionHostImpl(registry, hook_timeout_ms=hook_timeout_ms, on_diagnostic=on_diagnostic)
    # END LAB 12.4


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
    # BEGIN LAB 12.4
    if source.id.strip() == "" or source.path.strip() == "":
        raise ValueError("extension source 缺少 id 或 path")
    # Importing runs a module's top level: the gate has to come strictly before it.
    if not await settle(is_trusted(frozen_clone(source))):
        return LoadExtensionResult(id=source.id, status="skipped_untrusted")
    imported = await import_module(frozen_clone(source))
    factory = getattr(imported, "default", None)
    if not callable(factory):
        raise ValueError(f"extension {source.id} 缺少 default factory")
    staged = host_implementation(host).stage(source.id)
    # A factory that raises leaves its staging area behind, uncommitted: nothing reaches the host.
    await settle(factory(staged.context))
    staged.commit()
    return LoadExtensionResult(id=source.id, status="active")
    # END LAB 12.4


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
        # BEGIN LAB 12.4
        if extension_id.strip() == "" or extension_id in self.extension_ids:
            raise ValueError(f"extension id 无效或重复：{extension_id}")
        return StagedRegistration(self, extension_id)
        # END LAB 12.4

    def diagnostic(self, diagnostic: ExtensionDiagnostic) -> None:
        """Tell the observer (a copy); an observer that raises cannot change what the tool did."""
        if self.on_diagnostic is None:
            return
        with contextlib.suppress(Exception):
            self.on_diagnostic(copy.deepcopy(diagnostic))

    # ## Lab 12.5 · hooks around one tool call: before denies or fails closed, after only observes

    async def before(self, call: ToolCall) -> ToolResultMessage | None:
        """Run the before hooks in order; the first deny, error or timeout gives the blocked result."""
        # BEGIN LAB 12.5
        for hook in self.before_hooks:
            decision: object
            try:
                decision = await with_timeout(
                    settle(hook.listener(frozen_clone(call))),
                    self.hook_timeout_ms,
                    f"beforeToolCall:{hook.extension_id}",
                )
                if decision is not None and not isinstance(
                    decision, BeforeToolDecisionAllow | BeforeToolDecisionDeny
                ):
                    raise ValueError("beforeToolCall 返回了未知 decision")
            except Exception as error:
                # The host cannot tell the action is safe: a broken policy closes the gate.
                kind: Literal["error", "timeout"] = (
                    "timeout" if isinstance(error, HookTimeoutError) else "error"
                )
                message = error_message(error)
                self.diagnostic(ExtensionDiagnostic(hook.extension_id, "beforeToolCall", kind, message))
                return blocked_result(call, hook.extension_id, kind, message)
            if isinstance(decision, BeforeToolDecisionDeny):
                # A deny is a policy decision, not a fault: its reason is in the result, no diagnostic.
                return blocked_result(call, hook.extension_id, "deny", decision.reason)
        return None
        # END LAB 12.5

    async def after(self, result: ToolResultMessage) -> None:
        """Run every after hook once in order; a failure is a diagnostic and the next hook still runs."""
        # BEGIN LAB 12.5
        for hook in self.after_hooks:
            try:
                await with_timeout(
                    settle(hook.listener(frozen_clone(result))),
                    self.hook_timeout_ms,
                    f"afterToolResult:{hook.extension_id}",
                )
            except Exception as error:
                kind: Literal["error", "timeout"] = (
                    "timeout" if isinstance(error, HookTimeoutError) else "error"
                )
                self.diagnostic(
                    ExtensionDiagnostic(hook.extension_id, "afterToolResult", kind, error_message(error))
                )
        # END LAB 12.5

    def wrap_executor(self, core_executor: ToolExecutor) -> ToolExecutor:
        """An executor that runs before hooks, the core at most once, then after hooks, on copies."""

        # BEGIN LAB 12.5
        async def execute(
            source_call: ToolCall,
            /,
            *,
            signal: AbortSignal | None = None,
            report_progress: Callable[[list[TextContent]], None] | None = None,
        ) -> ToolResultMessage:
            call = copy.deepcopy(source_call)
            blocked = await self.before(call)
            if blocked is not None:
                # A host-made policy result, not a core fact: the after hooks do not see it.
                return copy.deepcopy(blocked)
            core_result = copy.deepcopy(
                await core_executor(copy.deepcopy(call), signal=signal, report_progress=report_progress)
            )
            await self.after(core_result)
            # The caller's copy: editing it cannot rewrite what the core returned.
            return copy.deepcopy(core_result)

        return execute
        # END LAB 12.5


async def with_timeout(operation: Awaitable[T], timeout_ms: int, label: str) -> T:
    """Wait for `operation` at most `timeout_ms`; past it raise HookTimeoutError("<label> timed out")."""
    # BEGIN LAB 12.5
    task = asyncio.ensure_future(operation)
    try:
        # wait() never raises the operation's own error, so a hook raising TimeoutError stays an "error".
        done, _pending = await asyncio.wait({task}, timeout=timeout_ms / 1000)
    finally:
        if not task.done():
            # The host stops waiting; cancelling is a courtesy that a hook may ignore.
            task.cancel()
    if task not in done:
        raise HookTimeoutError(f"{label} timed out")
    return task.result()
    # END LAB 12.5


def blocked_result(
    call: ToolCall, extension_id: str, kind: Literal["deny", "error", "timeout"], reason: str
) -> ToolResultMessage:
    """The error result paired with a call that a before hook stopped."""
    # BEGIN LAB 12.5
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(f"Tool {call.name} blocked by {extension_id}: {reason}")],
        details={"blockedByExtension": extension_id, "kind": kind, "reason": reason},
        is_error=True,
        timestamp=now_ms(),
    )
    # END LAB 12.5
