"""Focused tests of checkpoint 12: resources found under real roots, extensions loaded from real files.

Every resource lives in real folders under `tmp_path`: real SKILL.md files, real symbolic links that
lead out of a skill. An extension is a real Python file imported with importlib only once the trust
gate said yes (its top level leaves a mark on disk, so a test can see it never ran). A hook's time-out
is a real asyncio wait on a future that never settles.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_course import (
    RESOURCE_SECTION,
    ActivatedSkillFile,
    BeforeToolDecisionAllow,
    BeforeToolDecisionDeny,
    ExtensionContext,
    ExtensionDiagnostic,
    ExtensionHost,
    ExtensionSource,
    HookTimeoutError,
    InstructionResource,
    LoadExtensionResult,
    SkillResource,
    SystemMessage,
    TemplateResource,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResultMessage,
    activate_skill,
    create_extension_host,
    current_system_prompt,
    discover_resources,
    format_resource_context,
    import_extension_file,
    is_frozen,
    load_extension,
    object_schema,
    render_template,
    text,
    text_of,
    user_message,
)

# Shared helpers. Nothing here calls a lab piece at import time.


def front_matter_file(file: Path, *, name: str, description: str, body: str) -> None:
    """Write a `---` frontmatter file as the course's tests do: lines joined by "\\n", no final newline."""
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("\n".join(["---", f"name: {name}", f"description: {description}", "---", body]), "utf-8")


def write_skill(root: Path, directory: str, *, name: str, description: str, body: str) -> Path:
    """A skill folder `root/skills/<directory>` with its SKILL.md; returns the folder."""
    skill_root = root / "skills" / directory
    front_matter_file(skill_root / "SKILL.md", name=name, description=description, body=body)
    return skill_root


def write_template(root: Path, file: str, *, name: str, description: str, body: str) -> None:
    """A template `root/templates/<file>`."""
    front_matter_file(root / "templates" / file, name=name, description=description, body=body)


def identities(resources: list[Any]) -> list[str]:
    """`kind:name` of each resource, in order."""
    return [f"{resource.kind}:{resource.name}" for resource in resources]


def empty_tool(name: str) -> Tool[Any, Any]:
    """A tool that answers `ran:<name>`."""

    async def execute(_parameters: Any, _context: ToolContext) -> ToolOutput[Any]:
        return ToolOutput([text(f"ran:{name}")])

    return Tool(name=name, description=f"{name} tool", schema=object_schema({}), execute=execute)


def tool_call(call_id: str, name: str = "core", arguments: object = None) -> ToolCall:
    """A tool call as a model would send it."""
    return ToolCall(id=call_id, name=name, arguments={} if arguments is None else arguments)


def tool_result(call: ToolCall, value: str = "core result") -> ToolResultMessage:
    """The core's result for `call`, with details the test can watch."""
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[text(value)],
        details={"source": "core"},
        is_error=False,
        timestamp=1,
    )


def trusted(_source: ExtensionSource) -> bool:
    """A trust gate that lets everything in."""
    return True


def inline_module(
    factory: Callable[[ExtensionContext], Any],
) -> Callable[[ExtensionSource], Awaitable[object]]:
    """An `import_module` that hands over an in-memory module whose `default` is `factory`."""

    async def import_module(_source: ExtensionSource) -> object:
        return SimpleNamespace(default=factory)

    return import_module


async def load_inline(
    host: ExtensionHost, extension_id: str, factory: Callable[[ExtensionContext], Any]
) -> None:
    """Load a trusted in-memory extension into `host`, which must make it active."""
    loaded = await load_extension(
        ExtensionSource(id=extension_id, path=f"/virtual/{extension_id}.py"),
        is_trusted=trusted,
        import_module=inline_module(factory),
        host=host,
    )
    assert loaded == LoadExtensionResult(id=extension_id, status="active")


def never_settles() -> asyncio.Future[None]:
    """A future nobody will ever resolve: a hook that returns it hangs until the host stops waiting."""
    return asyncio.get_running_loop().create_future()


def record_instances(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[Any]:
    """Record every instance the dataclass `cls` builds while the test lasts (a deep copy calls no
    __init__)."""
    built: list[Any] = []
    original: Callable[..., None] = vars(cls)["__init__"]

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(cls, "__init__", recording)
    return built


# ## Lab 12.1 · the catalog


def precedence_roots(base: Path) -> tuple[Path, Path]:
    """A project root and a user root declaring the same instructions, skill and template."""
    project, user = base / "project", base / "user"
    for root, label in ((project, "PROJECT"), (user, "USER")):
        root.mkdir(parents=True)
        (root / "AGENTS.md").write_text(f"{label} RULE", "utf-8")
        lower = label.lower()
        write_skill(
            root, f"review-{lower}", name="review", description=f"{lower} review", body=f"{label} SKILL BODY"
        )
        write_template(
            root, f"{lower}.md", name="prompt", description=f"{lower} prompt", body=f"{label} {{{{target}}}}"
        )
    return project, user


@pytest.mark.lab12_1
@pytest.mark.edits("discover_resources")
def test_root_order_decides_the_winner_of_each_kind_and_name(tmp_path: Path) -> None:
    """roots 的输入顺序是否决定每个 kind+name 冲突的赢家，调换 roots 是否就调换赢家？"""
    project, user = precedence_roots(tmp_path)

    project_first = asyncio.run(discover_resources([str(project), str(user)]))
    assert identities(project_first.resources) == ["instructions:AGENTS", "skill:review", "template:prompt"]
    assert project_first.instructions[0].body == "PROJECT RULE"
    assert project_first.skills[0].description == "project review"
    assert project_first.templates[0].body == "PROJECT {{target}}"

    user_first = asyncio.run(discover_resources([str(user), str(project)]))
    assert user_first.instructions[0].body == "USER RULE"
    assert user_first.skills[0].description == "user review"
    assert user_first.templates[0].body == "USER {{target}}"


@pytest.mark.lab12_1
@pytest.mark.edits("sort_resources", "discover_root")
def test_catalog_is_stable_sorted_by_logical_name_and_holds_no_skill_body(tmp_path: Path) -> None:
    """catalog 是否按逻辑身份（而不是目录名、文件名）稳定排序，序列化后也看不到未激活 skill 的正文？"""
    root = tmp_path / "root-with-random-name"
    root.mkdir()
    write_skill(
        root,
        "z-physical-directory",
        name="alpha",
        description="first logical skill",
        body="SECRET_ALPHA_BODY",
    )
    write_skill(
        root, "a-physical-directory", name="zeta", description="last logical skill", body="SECRET_ZETA_BODY"
    )
    write_template(root, "z-file.md", name="aardvark", description="first logical template", body="AARDVARK")
    write_template(root, "a-file.md", name="zebra", description="last logical template", body="ZEBRA")

    first = asyncio.run(discover_resources([str(root)]))
    second = asyncio.run(discover_resources([str(root)]))
    assert first == second
    assert identities(first.resources) == ["skill:alpha", "skill:zeta", "template:aardvark", "template:zebra"]
    serialized = json.dumps(first.to_dict(), ensure_ascii=False)
    assert "SECRET_ALPHA_BODY" not in serialized
    assert "SECRET_ZETA_BODY" not in serialized
    assert not hasattr(first.skills[0], "body")
    assert type(first.skills[0]) is SkillResource


@pytest.mark.lab12_1
@pytest.mark.edits("discover_root")
def test_one_root_may_not_declare_an_identity_twice_but_kinds_may_share_a_name(tmp_path: Path) -> None:
    """同一个 root 里两次声明同一 kind:name 是否报错，而 skill 与 template 同名是否可以共存？"""
    root = tmp_path / "root"
    write_skill(root, "review", name="review", description="skill", body="S")
    write_template(root, "review.md", name="review", description="template", body="T")
    catalog = asyncio.run(discover_resources([str(root)]))
    assert identities(catalog.resources) == ["skill:review", "template:review"]

    write_skill(root, "second", name="review", description="again", body="S2")
    with pytest.raises(
        ValueError, match=r"^同一 resource root 内 skill:review 重复：.*SKILL\.md 与 .*SKILL\.md$"
    ):
        asyncio.run(discover_resources([str(root)]))


@pytest.mark.lab12_1
@pytest.mark.edits("discover_root", "discover_resources")
def test_missing_kinds_are_empty_names_default_to_files_and_the_catalog_is_a_copy(tmp_path: Path) -> None:
    """缺少 AGENTS.md、skills/、templates/ 是否只是“没有这类资源”，name 缺省时是否取文件夹或文件名，catalog 是
    否与内部状态不共享？"""
    empty = tmp_path / "empty"
    empty.mkdir()
    catalog = asyncio.run(discover_resources([str(empty)]))
    assert catalog.resources == [] and catalog.skills == [] and catalog.templates == []

    root = tmp_path / "root"
    (root / "skills" / "lint").mkdir(parents=True)
    (root / "skills" / "lint" / "SKILL.md").write_text("---\ndescription: 'quoted text'\n---\nBODY", "utf-8")
    (root / "templates").mkdir()
    (root / "templates" / "fix.md").write_text('---\ndescription: "fix it"\n---\nFix {{target}}', "utf-8")
    (root / "templates" / "notes.txt").write_text("not a template", "utf-8")
    catalog = asyncio.run(discover_resources([str(root)]))
    assert identities(catalog.resources) == ["skill:lint", "template:fix"]
    assert catalog.skills[0].description == "quoted text"
    assert catalog.templates[0].description == "fix it"
    # One object seen through two views, and nothing shared with a second discovery.
    assert catalog.resources[0] is catalog.skills[0]
    catalog.skills[0].description = "edited"
    assert asyncio.run(discover_resources([str(root)])).skills[0].description == "quoted text"

    with pytest.raises(FileNotFoundError):
        asyncio.run(discover_resources([str(tmp_path / "no-such-root")]))


@pytest.mark.lab12_1
@pytest.mark.edits("discover_resources")
def test_the_catalog_handed_out_shares_no_object_with_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """discover_resources 交出的是否是整份副本：扫描时构造的资源对象事后被改写，已交出的 catalog 是否纹丝不
    动，两个视图是否仍指向同一对象？"""
    root = tmp_path / "root"
    root.mkdir()
    (root / "AGENTS.md").write_text("RULE", "utf-8")
    write_skill(root, "review", name="review", description="inspect", body="BODY")
    write_template(root, "fix.md", name="fix", description="fix it", body="Fix {{target}}")
    recorded = [
        record_instances(monkeypatch, cls) for cls in (InstructionResource, SkillResource, TemplateResource)
    ]

    catalog = asyncio.run(discover_resources([str(root)]))
    expected = copy.deepcopy(catalog.to_dict())
    built = [resource for group in recorded for resource in group]
    assert len(built) == 3, "discovery builds one object per resource it found"
    # Whoever still holds the scan's objects (a cache, a later call) edits them after the hand-over.
    for resource in built:
        resource.source = "tampered"
        if hasattr(resource, "description"):
            resource.description = "tampered"
        if hasattr(resource, "body"):
            resource.body = "tampered"
    assert catalog.to_dict() == expected
    assert catalog.skills[0].description == "inspect"
    assert catalog.resources[1] is catalog.skills[0]


#: A declaration: which root (0-2) declares which kind under which name.
declarations = st.lists(
    st.tuples(
        st.integers(0, 2), st.sampled_from(["skill", "template"]), st.sampled_from(["a", "b", "c", "d"])
    ),
    max_size=10,
    unique_by=lambda item: (item[0], item[1], item[2]),
)


@pytest.mark.lab12_1
@given(declared=declarations, order=st.permutations([0, 1, 2]))
@pytest.mark.edits("discover_resources")
def test_the_first_root_in_the_given_order_wins_every_identity(
    declared: list[tuple[int, str, str]], order: list[int]
) -> None:
    """任意三个 root、任意声明与任意 roots 顺序下，每个 kind:name 是否都由顺序里第一个声明它的 root 胜出，且输
    出按 kind、name 排序？"""
    with tempfile.TemporaryDirectory(prefix="pi-resource-property-") as folder:
        roots = [Path(folder) / f"root-{index}" for index in range(3)]
        for root in roots:
            root.mkdir()
        for index, kind, name in declared:
            body = f"from root {index}"
            if kind == "skill":
                write_skill(roots[index], f"dir-{name}", name=name, description=body, body="BODY")
            else:
                write_template(roots[index], f"file-{name}.md", name=name, description=body, body="BODY")

        catalog = asyncio.run(discover_resources([str(roots[index]) for index in order]))

        expected: dict[tuple[str, str], int] = {}
        for index in order:
            for root_index, kind, name in declared:
                if root_index == index:
                    expected.setdefault((kind, name), index)
        assert [(resource.kind, resource.name) for resource in catalog.resources] == sorted(expected)
        for resource in catalog.resources:
            assert isinstance(resource, SkillResource | TemplateResource)
            assert resource.description == f"from root {expected[(resource.kind, resource.name)]}"


# ## Lab 12.2 · activation


@pytest.mark.lab12_2
@pytest.mark.edits("activate_skill")
def test_activation_reads_the_body_only_then_and_returns_canonical_paths(tmp_path: Path) -> None:
    """activate_skill 是否到这时才读取正文，返回 canonical 的 source 与 root，并且修改激活结果不影响
    catalog？"""
    root = tmp_path / "root"
    skill_root = write_skill(
        root, "review", name="review", description="inspect changes", body="READ THE DIFF FIRST"
    )
    catalog = asyncio.run(discover_resources([str(root)]))
    before = copy.deepcopy(catalog)
    assert "READ THE DIFF FIRST" not in json.dumps(catalog.to_dict())

    activated = asyncio.run(activate_skill(catalog, "review"))
    assert activated.body == "READ THE DIFF FIRST"
    assert activated.source == os.path.realpath(skill_root / "SKILL.md")
    assert activated.root == os.path.realpath(skill_root)
    assert activated.resources == []
    assert catalog == before
    activated.body = "mutated activation"
    assert catalog == before


@pytest.mark.lab12_2
@pytest.mark.edits("activate_skill")
def test_activation_reads_each_requested_file_inside_the_root_once(tmp_path: Path) -> None:
    """显式请求的 root 内文件是否按 request 去重读取一次，并带回请求原文、canonical source 与内容？"""
    root = tmp_path / "root"
    skill_root = write_skill(
        root, "review", name="review", description="inspect", body="Read references/checklist.md"
    )
    references = skill_root / "references"
    references.mkdir()
    (references / "checklist.md").write_text("tests\nsecurity\n", "utf-8")
    (references / "style.md").write_text("style\r\nrules", "utf-8")

    catalog = asyncio.run(discover_resources([str(root)]))
    activated = asyncio.run(
        activate_skill(
            catalog,
            "review",
            resources=["references/checklist.md", "references/checklist.md", "references/style.md"],
        )
    )
    assert [resource.to_dict() for resource in activated.resources] == [
        {
            "request": "references/checklist.md",
            "source": os.path.realpath(references / "checklist.md"),
            "content": "tests\nsecurity\n",
        },
        # Content is the file's exact text: a "\r\n" stays as it was.
        {
            "request": "references/style.md",
            "source": os.path.realpath(references / "style.md"),
            "content": "style\r\nrules",
        },
    ]


@pytest.mark.lab12_2
@pytest.mark.edits("resolve_inside_skill")
def test_activation_refuses_traversal_absolute_paths_and_symlink_escapes(tmp_path: Path) -> None:
    """activate_skill 是否用字面与 realpath 两层检查，拒绝 ../ 穿越、绝对路径和指向 root 外的符号链接？"""
    root = tmp_path / "root"
    skill_root = write_skill(root, "review", name="review", description="inspect", body="Stay inside root")
    references = skill_root / "references"
    references.mkdir()
    (references / "safe.md").write_text("safe", "utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text("secret", "utf-8")
    (references / "escape.md").symlink_to(outside)
    catalog = asyncio.run(discover_resources([str(root)]))

    valid = asyncio.run(activate_skill(catalog, "review", resources=["references/safe.md"]))
    assert valid.resources[0].content == "safe"
    for request in ["../../outside.md", str(outside), "references/escape.md"]:
        with pytest.raises(ValueError, match=r"逃出了声明 root"):
            asyncio.run(activate_skill(catalog, "review", resources=[request]))


@pytest.mark.lab12_2
@pytest.mark.edits("resolve_inside_skill", "activate_skill")
def test_activation_checks_the_root_by_path_components_and_rechecks_the_skill(tmp_path: Path) -> None:
    """兄弟目录 <root>-old 是否也算在 root 外、空请求是否被拒，未知 skill 与激活时改了名的 skill 是否报
    错，root 内的链接是否照常可用？"""
    root = tmp_path / "root"
    skill_root = write_skill(root, "review", name="review", description="inspect", body="BODY")
    sibling = write_skill(root, "review-old", name="review-old", description="old", body="OLD")
    (sibling / "notes.md").write_text("old", "utf-8")
    (skill_root / "inner.md").write_text("inner", "utf-8")
    (skill_root / "alias.md").symlink_to(skill_root / "inner.md")
    catalog = asyncio.run(discover_resources([str(root)]))

    for request in ["../review-old/notes.md", "", "  "]:
        with pytest.raises(ValueError, match=rf"^skill resource {re.escape(request)} 逃出了声明 root$"):
            asyncio.run(activate_skill(catalog, "review", resources=[request]))
    linked = asyncio.run(activate_skill(catalog, "review", resources=["alias.md"]))
    assert linked.resources[0].source == os.path.realpath(skill_root / "inner.md")
    assert linked.resources[0].content == "inner"

    with pytest.raises(ValueError, match=r"^skill 不存在：missing$"):
        asyncio.run(activate_skill(catalog, "missing"))
    front_matter_file(skill_root / "SKILL.md", name="renamed", description="inspect", body="BODY")
    with pytest.raises(ValueError, match=r"^skill review 激活时身份变成了 renamed$"):
        asyncio.run(activate_skill(catalog, "review"))


@pytest.mark.lab12_2
@pytest.mark.edits("activate_skill")
def test_an_activation_shares_no_file_record_with_what_it_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """activate_skill 返回的是否是整份副本：激活时构造的文件记录事后被改写，已返回的激活结果与它的 resources
    是否不受影响？"""
    root = tmp_path / "root"
    skill_root = write_skill(root, "review", name="review", description="inspect", body="BODY")
    (skill_root / "checklist.md").write_text("tests", "utf-8")
    catalog = asyncio.run(discover_resources([str(root)]))
    records = record_instances(monkeypatch, ActivatedSkillFile)

    activated = asyncio.run(activate_skill(catalog, "review", resources=["checklist.md"]))
    assert len(records) == 1, "activation builds one record per distinct request"
    expected = copy.deepcopy(activated.to_dict())
    records[0].content = "tampered"
    records[0].source = "tampered"
    records[0].request = "tampered"
    assert activated.to_dict() == expected
    assert activated.resources[0].content == "tests"


# ## Lab 12.3 · templates and the resource section


@pytest.mark.lab12_3
@pytest.mark.edits("render_template")
def test_render_template_fills_each_placeholder_and_returns_a_user_message(tmp_path: Path) -> None:
    """render_template 是否替换每一处 {{name}}、忽略多余参数、缺参数时报错，并返回一条带时间戳的
    UserMessage？"""
    root = tmp_path / "root"
    write_template(
        root,
        "review.md",
        name="review",
        description="review one target",
        body="Review {{target}}; then test {{target}} for {{owner}}.",
    )
    template = asyncio.run(discover_resources([str(root)])).templates[0]

    message = render_template(template, {"target": "src/parser.ts", "owner": "runtime", "ignored": "extra"})
    assert message.role == "user"
    assert text_of(message) == "Review src/parser.ts; then test src/parser.ts for runtime."
    assert isinstance(message.timestamp, int)
    with pytest.raises(ValueError, match=r"缺少参数 owner"):
        render_template(template, {"target": "src/parser.ts"})
    with pytest.raises(ValueError, match=r"^template review 缺少参数 owner$"):
        render_template(template, {"target": "src/parser.ts"})


@pytest.mark.lab12_3
@pytest.mark.edits("render_template")
def test_only_the_placeholder_protocol_is_replaced_and_values_are_literal() -> None:
    """只有符合协议的 {{name}} 才被替换、{{ name }} 与 {{1x}} 原样保留，参数值里的 \\1 与 {{x}} 是否按字面插
    入？"""
    template = TemplateResource(
        name="t", source="/t.md", root="/", description="", body="{{ name }} {{1x}} {{_ok}} {{a}}{{a}}"
    )
    message = render_template(template, {"_ok": r"\1 and {{a}}", "a": "A"})
    assert text_of(message) == r"{{ name }} {{1x}} \1 and {{a}} AA"


@given(values=st.dictionaries(st.sampled_from(["a", "b", "_c"]), st.text(max_size=6), min_size=3))
@pytest.mark.lab12_3
@pytest.mark.edits("render_template")
def test_every_placeholder_is_replaced_by_its_own_value(values: dict[str, str]) -> None:
    """任意参数值（含花括号、反斜杠）下，渲染结果是否恰好等于逐一替换每个占位符？"""
    template = TemplateResource(
        name="t", source="/t.md", root="/", description="", body="<{{a}}|{{b}}|{{_c}}|{{a}}>"
    )
    message = render_template(template, values)
    assert text_of(message) == f"<{values['a']}|{values['b']}|{values['_c']}|{values['a']}>"


def resource_root(tmp_path: Path) -> Path:
    """A root with project rules, an active and an inactive skill."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "AGENTS.md").write_text("FOLLOW PROJECT RULES", "utf-8")
    write_skill(root, "active", name="active", description="active metadata", body="ACTIVE BODY")
    write_skill(
        root, "inactive", name="inactive", description="inactive metadata", body="INACTIVE SECRET BODY"
    )
    return root


@pytest.mark.lab12_3
@pytest.mark.edits("format_resource_context", "lines_for_activated_skill")
def test_resource_context_shows_every_skills_metadata_and_only_active_bodies(tmp_path: Path) -> None:
    """format_resource_context 是否包含规则、所有 skill 的 metadata 与已激活 skill 的正文，却不含未激活 skill
    的正文，并作为独立段落排在基础 prompt 之后？"""
    root = resource_root(tmp_path)
    skill_root = root / "skills" / "active"
    (skill_root / "extra.md").write_text("EXTRA FILE", "utf-8")
    catalog = asyncio.run(discover_resources([str(root)]))
    activated = asyncio.run(activate_skill(catalog, "active", resources=["extra.md"]))

    resource_text = format_resource_context(catalog, [activated])
    for expected in [
        "FOLLOW PROJECT RULES",
        "active metadata",
        "inactive metadata",
        "ACTIVE BODY",
        "EXTRA FILE",
    ]:
        assert expected in resource_text
    assert "INACTIVE SECRET BODY" not in resource_text
    assert resource_text == "\n\n".join(
        [
            "# Pi resources",
            "## AGENTS instructions",
            "FOLLOW PROJECT RULES",
            "## 可用 skills",
            "- active: active metadata",
            "- inactive: inactive metadata",
            "## 已激活 skill：active",
            "ACTIVE BODY",
            "### skill 文件：extra.md",
            "EXTRA FILE",
        ]
    )

    assert RESOURCE_SECTION == "pi-resources"
    system = SystemMessage(content="BASE PROMPT", sections={RESOURCE_SECTION: resource_text}, timestamp=0)
    prompt = current_system_prompt([system, user_message("continue")]) or ""
    assert prompt.index("BASE PROMPT") < prompt.index("# Pi resources")
    assert "INACTIVE SECRET BODY" not in prompt


@pytest.mark.lab12_3
@pytest.mark.edits("format_resource_context")
def test_resource_section_reaches_the_one_build_context_through_a_system_message(tmp_path: Path) -> None:
    """资源段落是否经一条 system message 进入 11 的唯一 build_context，原样排在首位并计入 system 预算？"""
    from pi_course.context import build_context  # checkpoint 11's context builder
    from pi_course.session import MessageSessionEntry

    catalog = asyncio.run(discover_resources([str(resource_root(tmp_path))]))
    activated = asyncio.run(activate_skill(catalog, "active"))
    resource_text = format_resource_context(catalog, [activated])
    system = SystemMessage(content="BASE PROMPT", sections={RESOURCE_SECTION: resource_text}, timestamp=0)
    active_path = [
        MessageSessionEntry(id="system", parent_id=None, timestamp=0, message=system),
        MessageSessionEntry(id="user", parent_id="system", timestamp=1, message=user_message("continue")),
    ]

    projection = build_context(
        active_path, max_tokens=20, reserved_output=2, safety_margin=1, estimate_tokens=lambda _value: 1
    )
    assert projection.messages[0] == system
    assert projection.tokens.system == 1
    prompt = current_system_prompt(projection.messages) or ""
    assert prompt.index("BASE PROMPT") < prompt.index("# Pi resources"), "资源段落排在基础 prompt 之后"
    assert "INACTIVE SECRET BODY" not in prompt
    assert projection.kept_entry_ids == ["user"]


@pytest.mark.lab12_3
@pytest.mark.edits("format_resource_context")
def test_resource_context_refuses_repeated_or_foreign_activations_and_sorts_active_skills(
    tmp_path: Path,
) -> None:
    """同一 skill 激活两次、来自别的 catalog 的激活是否被拒，多个已激活 skill 是否按 name 排列？"""
    root = resource_root(tmp_path)
    catalog = asyncio.run(discover_resources([str(root)]))
    active = asyncio.run(activate_skill(catalog, "active"))
    inactive = asyncio.run(activate_skill(catalog, "inactive"))

    both = format_resource_context(catalog, [inactive, active])
    assert both.index("## 已激活 skill：active") < both.index("## 已激活 skill：inactive")
    with pytest.raises(ValueError, match=r"^skill 重复激活：active$"):
        format_resource_context(catalog, [active, active])

    other = tmp_path / "other"
    write_skill(other, "active", name="active", description="elsewhere", body="OTHER")
    foreign = asyncio.run(activate_skill(asyncio.run(discover_resources([str(other)])), "active"))
    with pytest.raises(ValueError, match=r"^activated skill 不属于当前 catalog：active$"):
        format_resource_context(catalog, [foreign])
    lonely = dataclasses.replace(active, name="ghost")
    with pytest.raises(ValueError, match=r"^activated skill 不属于当前 catalog：ghost$"):
        format_resource_context(catalog, [lonely])


# ## Lab 12.4 · trust gate and staging

EXTENSION_SOURCE = '''
"""A real extension file: its top level leaves a mark, so a test can tell whether it ever ran."""
from pathlib import Path

from pi_course import Tool, ToolOutput, object_schema, text

Path(__file__).with_name("executed.txt").write_text("top level ran", "utf-8")


async def note(parameters, context):
    return ToolOutput([text("noted")])


def default(context):
    context.register_tool(
        Tool(name="review_note", description="note", schema=object_schema({}), execute=note)
    )
'''


@pytest.mark.lab12_4
@pytest.mark.edits("load_extension")
def test_trust_gate_comes_strictly_before_import(tmp_path: Path) -> None:
    """信任检查是否严格发生在 import 之前：不受信任时模块从未执行、registry 不变，受信任时才 import 并注
    册？"""
    registry = ToolRegistry()
    host = create_extension_host(registry, hook_timeout_ms=50)
    order: list[str] = []

    async def imported_inline(_source: ExtensionSource) -> object:
        order.append("import")
        return SimpleNamespace(default=lambda _context: None)

    def refuse(_source: ExtensionSource) -> bool:
        order.append("trust")
        return False

    untrusted = asyncio.run(
        load_extension(
            ExtensionSource(id="blocked", path="/virtual/blocked.py"),
            is_trusted=refuse,
            import_module=imported_inline,
            host=host,
        )
    )
    assert order == ["trust"]
    assert untrusted == LoadExtensionResult(id="blocked", status="skipped_untrusted")
    assert untrusted.to_dict() == {"id": "blocked", "status": "skipped_untrusted"}
    assert registry.list() == []

    # The same gate in front of a real file: refused, its top level never runs.
    extension = tmp_path / "review_extension.py"
    extension.write_text(EXTENSION_SOURCE, "utf-8")
    marker = tmp_path / "executed.txt"
    real = ExtensionSource(id="review-extension", path=str(extension))
    seen: list[ExtensionSource] = []

    async def refuse_file(source: ExtensionSource) -> bool:
        seen.append(source)
        return False

    refused = asyncio.run(
        load_extension(real, is_trusted=refuse_file, import_module=import_extension_file, host=host)
    )
    assert refused.status == "skipped_untrusted"
    assert not marker.exists(), "不受信任的模块顶层代码被执行了"
    assert seen == [real]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].path = "/elsewhere"  # type: ignore[misc]

    def trust_file(_source: ExtensionSource) -> bool:
        order.append("trust:trusted")
        return True

    async def import_file(source: ExtensionSource) -> object:
        order.append("import:trusted")
        return await import_extension_file(source)

    loaded = asyncio.run(load_extension(real, is_trusted=trust_file, import_module=import_file, host=host))
    assert order == ["trust", "trust:trusted", "import:trusted"]
    assert loaded.status == "active"
    assert marker.read_text("utf-8") == "top level ran"
    assert registry.get("review_note") is not None


@pytest.mark.lab12_4
@pytest.mark.edits("StagedRegistration.commit", "load_extension")
def test_a_failing_or_conflicting_factory_leaves_nothing_registered() -> None:
    """factory 抛错或工具重名时，暂存的工具是否一个都没进入 registry，错误是否原样传出？"""
    registry = ToolRegistry([empty_tool("existing")])
    host = create_extension_host(registry, hook_timeout_ms=50)

    def explodes(context: ExtensionContext) -> None:
        context.register_tool(empty_tool("must-not-leak"))
        context.on("beforeToolCall", lambda _call: None)
        raise RuntimeError("factory exploded")

    with pytest.raises(RuntimeError, match=r"factory exploded"):
        asyncio.run(
            load_extension(
                ExtensionSource(id="factory-fails", path="/virtual/fails.py"),
                is_trusted=trusted,
                import_module=inline_module(explodes),
                host=host,
            )
        )
    assert registry.get("must-not-leak") is None

    def duplicate(context: ExtensionContext) -> None:
        context.register_tool(empty_tool("fresh"))
        context.register_tool(empty_tool("existing"))
        context.on("beforeToolCall", lambda _call: None)

    with pytest.raises(ValueError, match=r"^Tool 已存在：existing$"):
        asyncio.run(
            load_extension(
                ExtensionSource(id="duplicate-tool", path="/virtual/duplicate.py"),
                is_trusted=trusted,
                import_module=inline_module(duplicate),
                host=host,
            )
        )
    # Checked before the first write: "fresh", staged before the conflict, is not there either.
    assert [tool.name for tool in registry.list()] == ["existing"]


@pytest.mark.lab12_4
@pytest.mark.edits("StagingContext.register_tool", "StagingContext.on", "ExtensionHostImpl.stage")
def test_staging_refuses_bad_names_and_ids_and_late_registrations_change_nothing() -> None:
    """暂存区是否拒绝重复工具、未知 hook，host 是否拒绝重复 extension id，factory 返回后再注册是否毫无效
    果？"""
    registry = ToolRegistry()
    host = create_extension_host(registry, hook_timeout_ms=50)
    kept: list[ExtensionContext] = []

    def twice(context: ExtensionContext) -> None:
        context.register_tool(empty_tool("twin"))
        context.register_tool(empty_tool("twin"))

    with pytest.raises(ValueError, match=r"^Tool 已存在：twin$"):
        asyncio.run(load_inline(host, "twice", twice))

    def unknown_hook(context: ExtensionContext) -> None:
        context.on("onEverything", lambda _value: None)  # type: ignore[call-overload]

    with pytest.raises(ValueError, match=r"^extension hook 不存在：onEverything$"):
        asyncio.run(load_inline(host, "unknown-hook", unknown_hook))

    def keeps_context(context: ExtensionContext) -> None:
        kept.append(context)
        context.register_tool(empty_tool("first"))

    asyncio.run(load_inline(host, "keeper", keeps_context))
    kept[0].register_tool(empty_tool("late"))
    assert [tool.name for tool in registry.list()] == ["first"]
    with pytest.raises(ValueError, match=r"^extension id 无效或重复：keeper$"):
        asyncio.run(load_inline(host, "keeper", lambda _context: None))
    assert [tool.name for tool in registry.list()] == ["first"]


@pytest.mark.lab12_4
@pytest.mark.edits("load_extension", "create_extension_host")
def test_loader_and_host_refuse_malformed_input_before_running_anything(tmp_path: Path) -> None:
    """空 id 或 path、没有 default 的模块、async factory、非正整数的 hook_timeout_ms 是否各得到课程的消息？"""
    registry = ToolRegistry()
    for bad in [0, -1, 1.5, True]:
        with pytest.raises(ValueError, match=r"^hookTimeoutMs 必须是正整数$"):
            create_extension_host(registry, hook_timeout_ms=bad)  # type: ignore[arg-type]
    host = create_extension_host(registry, hook_timeout_ms=1)

    calls: list[str] = []

    def counting(_source: ExtensionSource) -> bool:
        calls.append("trust")
        return True

    for source in [ExtensionSource(id=" ", path="/x.py"), ExtensionSource(id="x", path="")]:
        with pytest.raises(ValueError, match=r"^extension source 缺少 id 或 path$"):
            asyncio.run(
                load_extension(source, is_trusted=counting, import_module=inline_module(print), host=host)
            )
    assert calls == []

    bare = tmp_path / "bare.py"
    bare.write_text("VALUE = 1\n", "utf-8")
    with pytest.raises(ValueError, match=r"^extension bare 缺少 default factory$"):
        asyncio.run(
            load_extension(
                ExtensionSource(id="bare", path=str(bare)),
                is_trusted=trusted,
                import_module=import_extension_file,
                host=host,
            )
        )

    async def async_factory(context: ExtensionContext) -> None:
        await asyncio.sleep(0)
        context.register_tool(empty_tool("from-async"))

    async def async_trust(_source: ExtensionSource) -> bool:
        return True

    loaded = asyncio.run(
        load_extension(
            ExtensionSource(id="async", path="/virtual/async.py"),
            is_trusted=async_trust,
            import_module=inline_module(async_factory),
            host=host,
        )
    )
    assert loaded.status == "active"
    assert registry.get("from-async") is not None


# ## Lab 12.5 · hooks around the core executor


def counting_core(calls: list[ToolCall], result: ToolResultMessage | None = None) -> Any:
    """A core executor that records each call it runs and answers `result` (or a fresh core result)."""

    async def core(call: ToolCall, **_options: Any) -> ToolResultMessage:
        calls.append(call)
        return result if result is not None else tool_result(call)

    return core


def run_wrapped(host: ExtensionHost, core: Any, call: ToolCall, **options: Any) -> ToolResultMessage:
    """Run one call through `host.wrap_executor(core)` on a fresh event loop."""

    async def run() -> ToolResultMessage:
        return await host.wrap_executor(core)(call, **options)

    return asyncio.run(run())


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.wrap_executor")
def test_hooks_of_a_failed_or_conflicting_factory_never_run() -> None:
    """factory 抛错或工具重名被拒之后，它暂存的 before hook 是否从不运行？"""
    registry = ToolRegistry([empty_tool("existing")])
    host = create_extension_host(registry, hook_timeout_ms=50)
    leaked: list[ToolCall] = []

    def explodes(context: ExtensionContext) -> None:
        context.on("beforeToolCall", leaked.append)
        raise RuntimeError("factory exploded")

    def duplicate(context: ExtensionContext) -> None:
        context.register_tool(empty_tool("existing"))
        context.on("beforeToolCall", leaked.append)

    for extension_id, factory in [("factory-fails", explodes), ("duplicate-tool", duplicate)]:
        with pytest.raises((RuntimeError, ValueError)):
            asyncio.run(load_inline(host, extension_id, factory))

    core_calls: list[ToolCall] = []
    result = run_wrapped(host, counting_core(core_calls), tool_call("probe"))
    assert leaked == []
    assert len(core_calls) == 1
    assert result.is_error is False


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.before", "blocked_result")
def test_before_deny_gives_a_paired_error_result_and_the_core_never_runs() -> None:
    """before 返回 deny 时，core 是否一次都不执行，结果是否与 call 配对、is_error=True、details 写明是谁为什么
    拒绝，hook 拿到的 call 是否只读？"""
    host = create_extension_host(ToolRegistry(), hook_timeout_ms=50)
    seen: list[ToolCall] = []

    def deny(call: ToolCall) -> BeforeToolDecisionDeny:
        seen.append(call)
        return BeforeToolDecisionDeny(reason="secret path")

    asyncio.run(load_inline(host, "deny-policy", lambda context: context.on("beforeToolCall", deny)))
    core_calls: list[ToolCall] = []
    denied = run_wrapped(host, counting_core(core_calls), tool_call("denied", "write", {"path": ".env"}))

    assert core_calls == []
    assert denied.tool_call_id == "denied"
    assert denied.tool_name == "write"
    assert denied.is_error is True
    assert denied.details == {"blockedByExtension": "deny-policy", "kind": "deny", "reason": "secret path"}
    assert text_of(denied) == "Tool write blocked by deny-policy: secret path"
    assert len(seen) == 1
    assert is_frozen(seen[0]) and is_frozen(seen[0].arguments)
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].name = "read"
    with pytest.raises(TypeError):
        seen[0].arguments["path"] = "safe.txt"  # type: ignore[index]
    assert seen[0] == tool_call("denied", "write", {"path": ".env"})
    # A deep copy of the read-only view is an ordinary, editable value again (structuredClone).
    thawed = copy.deepcopy(seen[0])
    thawed.arguments = {"path": "other"}
    assert not is_frozen(thawed) and type(thawed) is ToolCall


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.before", "with_timeout")
def test_before_throw_and_timeout_both_fail_closed_with_a_diagnostic() -> None:
    """before 抛错和超时是否都 fail-closed（core 不执行、返回配对的错误结果），并各产生一条 error / timeout 诊
    断？"""
    thrown_diagnostics: list[ExtensionDiagnostic] = []
    thrown_host = create_extension_host(
        ToolRegistry(), hook_timeout_ms=50, on_diagnostic=thrown_diagnostics.append
    )

    def crash(_call: ToolCall) -> None:
        raise RuntimeError("policy crashed")

    asyncio.run(load_inline(thrown_host, "throw-policy", lambda context: context.on("beforeToolCall", crash)))
    thrown_calls: list[ToolCall] = []
    thrown = run_wrapped(thrown_host, counting_core(thrown_calls), tool_call("throw-call"))
    assert thrown_calls == []
    assert thrown.tool_call_id == "throw-call"
    assert thrown.is_error is True
    assert thrown_diagnostics == [
        ExtensionDiagnostic(
            extension_id="throw-policy", hook="beforeToolCall", kind="error", message="policy crashed"
        )
    ]
    assert thrown_diagnostics[0].to_dict() == {
        "extensionId": "throw-policy",
        "hook": "beforeToolCall",
        "kind": "error",
        "message": "policy crashed",
    }
    assert thrown.details == {
        "blockedByExtension": "throw-policy",
        "kind": "error",
        "reason": "policy crashed",
    }

    timeout_diagnostics: list[ExtensionDiagnostic] = []
    timeout_host = create_extension_host(
        ToolRegistry(), hook_timeout_ms=5, on_diagnostic=timeout_diagnostics.append
    )
    asyncio.run(
        load_inline(
            timeout_host,
            "timeout-policy",
            lambda context: context.on("beforeToolCall", lambda _c: never_settles()),
        )
    )
    timeout_calls: list[ToolCall] = []
    timed_out = run_wrapped(timeout_host, counting_core(timeout_calls), tool_call("timeout-call"))
    assert timeout_calls == []
    assert timed_out.tool_call_id == "timeout-call"
    assert timed_out.is_error is True
    assert isinstance(timed_out.details, dict) and timed_out.details["kind"] == "timeout"
    assert len(timeout_diagnostics) == 1
    diagnostic = timeout_diagnostics[0]
    assert (diagnostic.extension_id, diagnostic.hook, diagnostic.kind) == (
        "timeout-policy",
        "beforeToolCall",
        "timeout",
    )
    assert diagnostic.message == "beforeToolCall:timeout-policy timed out"


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.after", "ExtensionHostImpl.wrap_executor")
def test_after_runs_once_per_core_result_and_its_failures_never_replace_the_result() -> None:
    """after hook 是否对每个 core 结果只运行一次，抛错或超时只留诊断而后面的 hook 照常运行，返回值是否与 core
    结果相等却不共享？"""
    diagnostics: list[ExtensionDiagnostic] = []
    host = create_extension_host(ToolRegistry(), hook_timeout_ms=5, on_diagnostic=diagnostics.append)
    observed: list[ToolResultMessage] = []

    def crash(_result: ToolResultMessage) -> None:
        raise RuntimeError("observer crashed")

    asyncio.run(
        load_inline(host, "after-success", lambda context: context.on("afterToolResult", observed.append))
    )
    asyncio.run(load_inline(host, "after-error", lambda context: context.on("afterToolResult", crash)))
    asyncio.run(
        load_inline(
            host, "after-timeout", lambda context: context.on("afterToolResult", lambda _r: never_settles())
        )
    )
    late: list[ToolResultMessage] = []
    asyncio.run(load_inline(host, "after-late", lambda context: context.on("afterToolResult", late.append)))

    call = tool_call("core-call")
    core_result = tool_result(call, "already happened")
    core_calls: list[ToolCall] = []
    returned = run_wrapped(host, counting_core(core_calls, core_result), call)

    assert len(core_calls) == 1
    assert len(observed) == 1 and len(late) == 1
    assert is_frozen(observed[0]) and is_frozen(observed[0].details)
    assert returned is not core_result
    assert returned == core_result
    assert returned.is_error is False
    assert [(d.extension_id, d.hook, d.kind) for d in diagnostics] == [
        ("after-error", "afterToolResult", "error"),
        ("after-timeout", "afterToolResult", "timeout"),
    ]

    returned.content[0].text = "mutated returned result"
    assert isinstance(returned.details, dict)
    returned.details["source"] = "mutated"
    assert text_of(core_result) == "already happened"
    assert core_result.details == {"source": "core"}


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.before")
def test_before_hooks_run_in_order_and_stop_at_the_first_block() -> None:
    """多个 before 是否按注册顺序运行、在第一个阻断处短路（后面的 before、core、after 都不运行），未知
    decision 是否算作故障？"""
    order: list[str] = []
    diagnostics: list[ExtensionDiagnostic] = []
    host = create_extension_host(ToolRegistry(), hook_timeout_ms=50, on_diagnostic=diagnostics.append)

    def hook(label: str, decision: object) -> Callable[[ToolCall], Any]:
        def listener(_call: ToolCall) -> Any:
            order.append(label)
            return decision

        return listener

    async def allow_later(_call: ToolCall) -> BeforeToolDecisionAllow:
        await asyncio.sleep(0)
        order.append("async-allow")
        return BeforeToolDecisionAllow()

    def register(context: ExtensionContext) -> None:
        context.on("beforeToolCall", hook("none", None))
        context.on("beforeToolCall", allow_later)
        context.on("beforeToolCall", hook("deny", BeforeToolDecisionDeny(reason="stop")))
        context.on("beforeToolCall", hook("never", None))
        context.on("afterToolResult", lambda _r: order.append("after"))

    asyncio.run(load_inline(host, "chain", register))
    core_calls: list[ToolCall] = []
    blocked = run_wrapped(host, counting_core(core_calls), tool_call("chained"))
    assert order == ["none", "async-allow", "deny"]
    assert core_calls == []
    assert blocked.details == {"blockedByExtension": "chain", "kind": "deny", "reason": "stop"}
    assert diagnostics == []

    odd_host = create_extension_host(ToolRegistry(), hook_timeout_ms=50, on_diagnostic=diagnostics.append)
    asyncio.run(
        load_inline(odd_host, "odd", lambda context: context.on("beforeToolCall", hook("odd", "yes")))
    )
    odd = run_wrapped(odd_host, counting_core(core_calls), tool_call("odd-call"))
    assert core_calls == []
    assert odd.details == {
        "blockedByExtension": "odd",
        "kind": "error",
        "reason": "beforeToolCall 返回了未知 decision",
    }
    assert [(d.extension_id, d.kind) for d in diagnostics] == [("odd", "error")]


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.wrap_executor", "with_timeout")
def test_wrapped_executor_passes_options_through_and_keeps_core_facts_apart() -> None:
    """包装后的执行器是否把 signal 与 report_progress 原样交给 core，allow 后 core 只运行一次，hook 自己抛出的
    TimeoutError 是否算 error 而非 timeout，诊断观察者抛错是否不影响结果？"""
    diagnostics: list[ExtensionDiagnostic] = []

    def bad_observer(diagnostic: ExtensionDiagnostic) -> None:
        diagnostics.append(diagnostic)
        raise RuntimeError("observer is broken too")

    host = create_extension_host(ToolRegistry(), hook_timeout_ms=50, on_diagnostic=bad_observer)

    def own_timeout(_result: ToolResultMessage) -> None:
        raise TimeoutError("my own deadline")

    def register(context: ExtensionContext) -> None:
        context.on("beforeToolCall", lambda _call: BeforeToolDecisionAllow())
        context.on("afterToolResult", own_timeout)

    asyncio.run(load_inline(host, "allow", register))
    received: list[dict[str, Any]] = []

    async def core(call: ToolCall, **options: Any) -> ToolResultMessage:
        received.append(options)
        call.arguments = {"edited": True}  # the core's copy only
        return tool_result(call)

    source = tool_call("pass", "core", {"path": "a.txt"})
    progress: list[object] = []
    result = run_wrapped(host, core, source, signal=None, report_progress=progress.append)
    assert received == [{"signal": None, "report_progress": progress.append}]
    assert result.is_error is False
    assert source.arguments == {"path": "a.txt"}
    assert [(d.extension_id, d.kind, d.message) for d in diagnostics] == [
        ("allow", "error", "my own deadline")
    ]


@pytest.mark.lab12_5
@pytest.mark.edits("with_timeout")
def test_a_timed_out_hook_is_told_to_stop_and_the_error_type_is_named() -> None:
    """超时的 hook 是否收到取消（宿主不再等待它），超时错误是否是 HookTimeoutError？"""
    cancelled = asyncio.Event()

    async def stubborn(_call: ToolCall) -> None:
        try:
            await never_settles()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def scenario() -> ToolResultMessage:
        host = create_extension_host(ToolRegistry(), hook_timeout_ms=5)
        await load_inline(host, "stubborn", lambda context: context.on("beforeToolCall", stubborn))
        result = await host.wrap_executor(counting_core([]))(tool_call("slow"))
        await asyncio.wait_for(cancelled.wait(), timeout=2)
        return result

    result = asyncio.run(scenario())
    assert isinstance(result.details, dict) and result.details["kind"] == "timeout"
    assert issubclass(HookTimeoutError, Exception)


@pytest.mark.lab12_5
@pytest.mark.edits("with_timeout")
def test_a_timeout_error_the_hook_raises_itself_is_an_error_not_a_host_timeout() -> None:
    """hook 的协程自己抛出 TimeoutError 时，是否按 error 而不是 timeout 处理：before 照样 fail-closed 且
    reason 是它自己的消息，after 只留一条 kind=error 的诊断？"""
    diagnostics: list[ExtensionDiagnostic] = []

    async def policy_deadline(_call: ToolCall) -> None:
        raise TimeoutError("policy backend deadline")

    async def observer_deadline(_result: ToolResultMessage) -> None:
        raise TimeoutError("audit sink deadline")

    # A generous limit: the host never has to stop waiting here, only the hooks' own errors are seen.
    before_host = create_extension_host(
        ToolRegistry(), hook_timeout_ms=2000, on_diagnostic=diagnostics.append
    )
    asyncio.run(
        load_inline(
            before_host, "own-deadline", lambda context: context.on("beforeToolCall", policy_deadline)
        )
    )
    core_calls: list[ToolCall] = []
    blocked = run_wrapped(before_host, counting_core(core_calls), tool_call("deadline-call"))
    assert core_calls == []
    assert blocked.is_error is True
    assert blocked.details == {
        "blockedByExtension": "own-deadline",
        "kind": "error",
        "reason": "policy backend deadline",
    }
    assert text_of(blocked) == "Tool core blocked by own-deadline: policy backend deadline"

    after_host = create_extension_host(ToolRegistry(), hook_timeout_ms=2000, on_diagnostic=diagnostics.append)
    asyncio.run(
        load_inline(after_host, "audit", lambda context: context.on("afterToolResult", observer_deadline))
    )
    observed = run_wrapped(after_host, counting_core(core_calls), tool_call("observed-call"))
    assert len(core_calls) == 1
    assert observed.is_error is False
    assert diagnostics == [
        ExtensionDiagnostic("own-deadline", "beforeToolCall", "error", "policy backend deadline"),
        ExtensionDiagnostic("audit", "afterToolResult", "error", "audit sink deadline"),
    ]


@pytest.mark.lab12_5
@pytest.mark.edits("ExtensionHostImpl.wrap_executor")
def test_the_caller_gets_the_core_result_as_it_came_back_not_a_later_edit() -> None:
    """core 返回之后（after hook 还在运行时）又改写了自己保存的结果对象，调用者拿到的是否仍是 core 返回那一刻
    的结果？"""

    async def scenario() -> tuple[ToolResultMessage, list[ToolResultMessage]]:
        host = create_extension_host(ToolRegistry(), hook_timeout_ms=2000)
        entered, released = asyncio.Event(), asyncio.Event()
        seen: list[ToolResultMessage] = []

        async def slow_observer(result: ToolResultMessage) -> None:
            seen.append(result)
            entered.set()
            await released.wait()

        await load_inline(host, "slow-observer", lambda context: context.on("afterToolResult", slow_observer))
        call = tool_call("kept")
        kept = tool_result(call, "as returned")
        running = asyncio.ensure_future(host.wrap_executor(counting_core([], kept))(call))
        await entered.wait()
        # The core still holds its object and rewrites it while the after hook runs.
        kept.content[0].text = "rewritten later"
        assert isinstance(kept.details, dict)
        kept.details["source"] = "rewritten"
        released.set()
        return await running, seen

    returned, seen = asyncio.run(scenario())
    assert text_of(returned) == "as returned"
    assert returned.details == {"source": "core"}
    assert len(seen) == 1 and text_of(seen[0]) == "as returned"
