"""Focused tests of checkpoint 08: Read, Write, Edit and Bash on real files and real processes.

Every test works in temporary folders of its own and removes them; every process a test starts is
ended before the test returns. Commands that the course runs with `node -e` run here with this very
interpreter (`python3 -c` style, the interpreter's folder put first on PATH), on Linux and macOS alike.

On the starter, the executor turns a stub's `LabNotImplemented` into a failed result; `execute`
raises it again, so that the report names the lab to do.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pi_course import (
    AbortController,
    AbortSignal,
    AgentContext,
    AgentRunResult,
    BashDetails,
    EditDetails,
    LabNotImplemented,
    MutationQueue,
    ReadDetails,
    ScriptedModel,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    WriteDetails,
    assistant_message,
    create_coding_tools,
    execute_tool_call,
    run_agent_loop,
    text,
    user_message,
)

STUB = re.compile(r"Lab (\d+\.\d+) not implemented: (\S+)")

# Shared helpers. Nothing here calls a lab piece at import time.


def call(call_id: str, name: str, arguments: object) -> ToolCall:
    """A tool call as a model would send it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


def output_of(result: ToolResultMessage) -> str:
    """The text the model reads: every content block, one per line."""
    return "\n".join(block.text for block in result.content)


def raise_stub(result: ToolResultMessage) -> ToolResultMessage:
    """Raise the `LabNotImplemented` that the executor turned into this failed result, if any."""
    if result.is_error and (stub := STUB.search(output_of(result))):
        raise LabNotImplemented(stub[1], stub[2])
    return result


async def run_call(
    tool_call: ToolCall, tools: ToolRegistry, signal: AbortSignal | None = None
) -> ToolResultMessage:
    """Run one call through 06's executor, as the course's tests do."""
    return raise_stub(await execute_tool_call(tool_call, tools, signal=signal))


def execute(tool_call: ToolCall, tools: ToolRegistry, signal: AbortSignal | None = None) -> ToolResultMessage:
    """`run_call` on a fresh event loop."""
    return asyncio.run(run_call(tool_call, tools, signal))


def utf8_size(value: str) -> int:
    """Buffer.byteLength: the size of `value` in UTF-8 bytes."""
    return len(value.encode("utf-8"))


@pytest.fixture
def make_dir() -> Iterator[Callable[[str], Path]]:
    """A factory of fresh temporary folders (tempfile.mkdtemp), each removed after the test."""
    made: list[Path] = []

    def make(prefix: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=prefix)))
        return made[-1]

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def python(monkeypatch: pytest.MonkeyPatch) -> str:
    """The command name of this interpreter, its folder put first on PATH for the tools' shells.

    A command may not name an absolute path in workspace mode, so `sys.executable` itself is not used.
    """
    folder = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", folder + os.pathsep + os.environ.get("PATH", ""))
    return os.path.basename(sys.executable)


async def wait_for_file(file: Path, seconds: float = 30.0) -> None:
    """Wait until `file` exists (a process has reached a point the test must wait for)."""
    deadline = time.monotonic() + seconds
    while not file.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"等待文件超时：{file}")
        await asyncio.sleep(0.005)


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, not yet reaped by its new parent) counts as ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}/stat")
    if proc.exists():
        try:
            return proc.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
    return bool(state.strip()) and not state.strip().startswith("Z")


def wait_until_ended(pid: int, seconds: float = 3.0) -> bool:
    """Give a process that was sent SIGKILL the moment it needs to go; True once it has."""
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def reap_pids() -> Iterator[list[int]]:
    """Pids a test saw; any still running at the end is killed (a wrong implementation left it)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


def record_mutation_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, MutationQueue]]:
    """Record the key and the queue of every MutationQueue.run while the test lasts."""
    runs: list[tuple[str, MutationQueue]] = []
    original = MutationQueue.run

    async def recording(self: MutationQueue, key: str, operation: Callable[[], Awaitable[Any]]) -> Any:
        runs.append((key, self))
        return await original(self, key, operation)

    monkeypatch.setattr(MutationQueue, "run", recording)
    return runs


# ## Lab 8.1 · Read
# Read's own window is what these tests watch, so they run with containment="unrestricted": the
# workspace rules are Lab 8.2's, and Lab 8.2's tests hold Read to them.


@pytest.mark.lab8_1
def test_read_returns_a_line_window_whose_details_match_the_output(make_dir: Callable[[str], Path]) -> None:
    """Read 是否按行窗口返回带编号的正文，details 是否与实际输出一致，越界的 offset 是否被拒绝？"""
    root = make_dir("pi-read-window-")
    file = root / "notes.txt"
    source = "one\ntwo\nthree\nfour"
    file.write_text(source, encoding="utf-8")
    tools = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_lines=2)

    result = execute(call("read-window", "read", {"path": "notes.txt", "offset": 2, "limit": 9}), tools)

    assert result.is_error is False, output_of(result)
    assert re.search(r"2│ two", output_of(result))
    assert re.search(r"3│ three", output_of(result))
    assert not re.search(r"1│ one|4│ four", output_of(result))
    assert re.search(r"offset=4", output_of(result))
    assert result.details == ReadDetails(
        path=str(file), bytes=utf8_size(source), lines=4, start_line=2, end_line=3, truncated=True
    )

    beyond = execute(call("read-beyond", "read", {"path": "notes.txt", "offset": 5}), tools)
    assert beyond.is_error is True
    assert re.search(r"offset=5 超出文件范围；文件共 4 行", output_of(beyond))


@pytest.mark.lab8_1
def test_read_byte_limit_never_cuts_a_line_and_reading_on_skips_none(make_dir: Callable[[str], Path]) -> None:
    """字节上限是否只放进完整的行，续读是否从下一条没显示的行开始，连一行都放不下时是否报错？"""
    root = make_dir("pi-read-bytes-")
    (root / "long.txt").write_text("\n".join(["alpha", "b" * 200, "charlie"]), encoding="utf-8")
    (root / "one-huge-line.txt").write_text("界" * 100, encoding="utf-8")
    max_read_bytes = 120
    tools = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_bytes=max_read_bytes)

    first = execute(call("read-first", "read", {"path": "long.txt"}), tools)
    assert first.is_error is False, output_of(first)
    assert utf8_size(output_of(first)) <= max_read_bytes
    assert output_of(first) == "   1│ alpha\n\n[已显示第 1-1 行，共 3 行；继续读取：offset=2]"
    assert isinstance(first.details, ReadDetails)
    assert first.details.end_line == 1

    continuation_tools = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_bytes=400)
    second = execute(call("read-second", "read", {"path": "long.txt", "offset": 2}), continuation_tools)
    assert second.is_error is False, output_of(second)
    assert re.search(r"2│ b{20}", output_of(second))
    assert not re.search(r"1│ alpha", output_of(second))
    assert isinstance(second.details, ReadDetails)
    assert second.details.start_line == 2

    too_small = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_bytes=64)
    impossible = execute(call("read-impossible", "read", {"path": "one-huge-line.txt"}), too_small)
    assert impossible.is_error is True
    assert re.search(r"无法返回从第 1 行开始的完整可续读结果", output_of(impossible))


@pytest.mark.lab8_1
def test_read_counts_the_continuation_notice_against_the_byte_limit(make_dir: Callable[[str], Path]) -> None:
    """三行正文本身放得下、加上续读提示就超限时，Read 是否只给两行加提示，而不是三行加一个超限的提示？"""
    root = make_dir("pi-read-notice-")
    (root / "ten.txt").write_text("\n".join(["x" * 10] * 10), encoding="utf-8")
    tools = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_bytes=110)

    result = execute(call("read-notice", "read", {"path": "ten.txt"}), tools)

    assert result.is_error is False, output_of(result)
    line = "x" * 10
    assert (
        output_of(result) == f"   1│ {line}\n   2│ {line}\n\n[已显示第 1-2 行，共 10 行；继续读取：offset=3]"
    )
    assert utf8_size(output_of(result)) <= 110


@pytest.mark.lab8_1
def test_read_last_window_needs_no_notice_so_it_may_fit_where_a_shorter_one_did_not(
    make_dir: Callable[[str], Path],
) -> None:
    """当带续读提示的较短窗口放不下、而读到文件末尾（不需要提示）的完整窗口放得下时，Read 是否返回整个文
    件？"""
    root = make_dir("pi-read-tail-")
    (root / "two.txt").write_text("x\ny", encoding="utf-8")
    tools = create_coding_tools(cwd=str(root), containment="unrestricted", max_read_bytes=20)

    result = execute(call("read-tail", "read", {"path": "two.txt"}), tools)

    assert result.is_error is False, output_of(result)
    assert output_of(result) == "   1│ x\n   2│ y"
    assert isinstance(result.details, ReadDetails)
    assert (result.details.end_line, result.details.truncated) == (2, False)


@pytest.mark.lab8_1
def test_read_shows_bytes_that_are_not_utf8_and_counts_the_file_bytes(
    make_dir: Callable[[str], Path],
) -> None:
    """文件里有非 UTF-8 字节时，Read 是否仍能观察它（显示为 U+FFFD），并按文件的真实字节数报告 bytes？"""
    root = make_dir("pi-read-binary-")
    (root / "mixed.txt").write_bytes(b"ok\xff\nnext")
    tools = create_coding_tools(cwd=str(root), containment="unrestricted")

    result = execute(call("read-binary", "read", {"path": "mixed.txt"}), tools)

    assert result.is_error is False, output_of(result)
    assert output_of(result) == "   1│ ok\ufffd\n   2│ next"
    assert isinstance(result.details, ReadDetails)
    assert (result.details.bytes, result.details.lines) == (8, 2)


@pytest.mark.lab8_1
def test_reading_on_from_each_continuation_offset_shows_every_line_once(
    make_dir: Callable[[str], Path],
) -> None:
    """对任意文件和上限，沿着续读提示一路读下去，是否每一行恰好出现一次、每次输出都不超过字节上限？"""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from strategies import ALPHABET

    root = make_dir("pi-read-property-")
    (root / "file.txt").write_text("probe", encoding="utf-8")
    # One plain call first: on the starter it stops here, not inside Hypothesis's search.
    execute(
        call("probe", "read", {"path": "file.txt"}),
        create_coding_tools(cwd=str(root), containment="unrestricted"),
    )
    lines_strategy = st.lists(st.text(alphabet=ALPHABET, max_size=20), min_size=1, max_size=16)

    @given(
        lines=lines_strategy,
        max_bytes=st.integers(min_value=160, max_value=400),
        max_lines=st.integers(1, 12),
    )
    @settings(max_examples=30)
    def check(lines: list[str], max_bytes: int, max_lines: int) -> None:
        (root / "file.txt").write_text("\n".join(lines), encoding="utf-8")
        tools = create_coding_tools(
            cwd=str(root), containment="unrestricted", max_read_bytes=max_bytes, max_read_lines=max_lines
        )
        assert asyncio.run(read_on(tools, max_bytes)) == lines

    async def read_on(tools: ToolRegistry, max_bytes: int) -> list[str]:
        # Follow the continuation notices from offset 1 to the end; collect the lines shown.
        seen: list[str] = []
        offset = 1
        while True:
            result = await run_call(call("read", "read", {"path": "file.txt", "offset": offset}), tools)
            assert result.is_error is False, output_of(result)
            assert utf8_size(output_of(result)) <= max_bytes
            details = result.details
            assert isinstance(details, ReadDetails)
            assert details.start_line == offset
            shown = output_of(result).split("\n\n[已显示")[0].split("\n")
            assert len(shown) == details.end_line - details.start_line + 1
            for number, line in zip(range(details.start_line, details.end_line + 1), shown, strict=True):
                prefix = f"{number:>4}│ "
                assert line.startswith(prefix)
                seen.append(line.removeprefix(prefix))
            if not details.truncated:
                return seen
            assert output_of(result).endswith(f"offset={details.end_line + 1}]")
            offset = details.end_line + 1

    check()


# ## Lab 8.2 · workspace paths


@pytest.mark.lab8_2
@pytest.mark.edits("ensure_inside_workspace")
def test_workspace_rules_bind_read_write_and_edit(make_dir: Callable[[str], Path]) -> None:
    """外部绝对路径和指向外部的符号链接，是否同样挡住 Read、Write 与 Edit，且外部文件分毫未动？"""
    root = make_dir("pi-path-root-")
    outside = make_dir("pi-path-outside-")
    outside_file = outside / "secret.txt"
    outside_file.write_text("keep", encoding="utf-8")
    (root / "escape").symlink_to(outside)
    tools = create_coding_tools(cwd=str(root), containment="workspace")

    attempts = [
        call("outside-read", "read", {"path": str(outside_file)}),
        call("outside-write", "write", {"path": str(outside_file), "content": "replace"}),
        call("outside-edit", "edit", {"path": str(outside_file), "oldText": "keep", "newText": "replace"}),
    ]
    for attempt in attempts:
        result = execute(attempt, tools)
        assert result.is_error is True
        assert re.search(r"路径越过教学 workspace", output_of(result))

    symlink_attempts = [
        call("symlink-read", "read", {"path": "escape/secret.txt"}),
        call("symlink-write", "write", {"path": "escape/new.txt", "content": "new"}),
        call("symlink-edit", "edit", {"path": "escape/secret.txt", "oldText": "keep", "newText": "replace"}),
    ]
    for attempt in symlink_attempts:
        result = execute(attempt, tools)
        assert result.is_error is True
        assert re.search(r"符号链接越过教学 workspace", output_of(result))
    assert outside_file.read_text(encoding="utf-8") == "keep"
    assert not (outside / "new.txt").exists()


@pytest.mark.lab8_2
@pytest.mark.edits("ensure_inside_workspace")
def test_parent_paths_and_the_sibling_folder_that_shares_the_roots_name_are_outside(
    make_dir: Callable[[str], Path],
) -> None:
    """`../x` 以及名字以 root 开头的兄弟目录 `<root>evil`，是否都按“路径越过”被拒绝，而不是被当作 root 里
    面？"""
    root = make_dir("pi-path-sibling-")
    sibling = Path(f"{root}evil")
    sibling.mkdir()
    try:
        (sibling / "secret.txt").write_text("keep", encoding="utf-8")
        tools = create_coding_tools(cwd=str(root), containment="workspace")
        for attempt in (
            call("parent-read", "read", {"path": f"../{sibling.name}/secret.txt"}),
            call("sibling-read", "read", {"path": str(sibling / "secret.txt")}),
            call("sibling-write", "write", {"path": str(sibling / "new.txt"), "content": "x"}),
            call(
                "sibling-edit",
                "edit",
                {"path": f"../{sibling.name}/secret.txt", "oldText": "k", "newText": "K"},
            ),
        ):
            result = execute(attempt, tools)
            assert result.is_error is True, output_of(result)
            assert re.search(r"路径越过教学 workspace", output_of(result)), output_of(result)
        assert (sibling / "secret.txt").read_text(encoding="utf-8") == "keep"
        assert sorted(p.name for p in sibling.iterdir()) == ["secret.txt"]
    finally:
        shutil.rmtree(sibling, ignore_errors=True)


@pytest.mark.lab8_2
@pytest.mark.edits("ensure_inside_workspace")
def test_new_files_are_judged_by_their_nearest_existing_ancestor(make_dir: Callable[[str], Path]) -> None:
    """要新建的文件（连父目录都还不存在）是否按最近的已存在祖先判断：穿过外链的被拒，workspace 内的链接照常可
    用？"""
    root = make_dir("pi-path-new-")
    outside = make_dir("pi-path-new-outside-")
    (root / "escape").symlink_to(outside)
    (root / "real").mkdir()
    (root / "inner").symlink_to(root / "real")
    tools = create_coding_tools(cwd=str(root), containment="workspace")

    for attempt in (
        call("deep-write", "write", {"path": "escape/a/b/new.txt", "content": "x"}),
        call("deep-read", "read", {"path": "escape/a/missing.txt"}),
    ):
        refused = execute(attempt, tools)
        assert refused.is_error is True
        assert re.search(r"符号链接越过教学 workspace", output_of(refused))
    assert list(outside.iterdir()) == []

    (root / "real" / "sub").mkdir()
    (root / "real" / "sub" / "ok.txt").write_text("fine", encoding="utf-8")
    read = execute(call("inner-read", "read", {"path": "inner/sub/ok.txt"}), tools)
    assert read.is_error is False, output_of(read)
    assert output_of(read) == "   1│ fine"


# ## Lab 8.3 · Write and the mutation queue


@pytest.mark.lab8_3
@pytest.mark.edits("atomic_write", "write_file")
def test_write_creates_folders_replaces_the_whole_file_and_reports_evidence(
    make_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write 是否创建父目录、以 rename 整体替换文件（硬链接见证旧内容）、失败时不留临时文件，并让每次写入进入
    同一个默认队列？"""
    root = make_dir("pi-write-file-")
    mutation_runs = record_mutation_runs(monkeypatch)
    tools = create_coding_tools(cwd=str(root), containment="workspace")
    file = root / "nested" / "answer.txt"

    created = execute(call("write-create", "write", {"path": "nested/answer.txt", "content": "first"}), tools)
    assert created.is_error is False, output_of(created)
    assert file.read_text(encoding="utf-8") == "first"
    assert created.details == WriteDetails(path=str(file), bytes=5)
    hard_link_witness = root / "nested" / "first-version.txt"
    os.link(file, hard_link_witness)

    overwritten = execute(
        call("write-overwrite", "write", {"path": "nested/answer.txt", "content": "最终答案"}), tools
    )
    assert overwritten.is_error is False, output_of(overwritten)
    assert file.read_text(encoding="utf-8") == "最终答案"
    assert hard_link_witness.read_text(encoding="utf-8") == "first", (
        "覆盖必须替换目录项，不能直接改写原 inode"
    )
    assert isinstance(overwritten.details, WriteDetails)
    assert overwritten.details.bytes == utf8_size("最终答案")

    blocked = root / "nested" / "blocked"
    blocked.mkdir()
    (blocked / "keep.txt").write_text("keep", encoding="utf-8")
    failed = execute(
        call("write-rename-failure", "write", {"path": "nested/blocked", "content": "不能覆盖目录"}), tools
    )
    assert failed.is_error is True
    assert (blocked / "keep.txt").read_text(encoding="utf-8") == "keep"

    assert [key for key, _ in mutation_runs] == [str(file), str(file), str(blocked)]
    assert all(queue is mutation_runs[0][1] for _, queue in mutation_runs), (
        "所有 Write 必须共用同一个默认修改队列"
    )
    assert [name for name in os.listdir(file.parent) if ".pi-tmp-" in name] == []


@pytest.mark.lab8_3
@pytest.mark.edits("MutationQueue.run")
def test_mutation_queue_serialises_one_path_and_lets_other_paths_go_on() -> None:
    """同一路径的修改是否一个接一个、不同路径是否不必等待，失败的操作是否仍放行下一项？"""

    async def noop() -> None:
        return None

    async def scenario() -> list[str]:
        queue = MutationQueue()
        await queue.run("probe", noop)  # on the starter, the stub stops the test here
        first_started = asyncio.Event()
        release_first = asyncio.Event()
        order: list[str] = []

        async def first_op() -> None:
            order.append("same:first:start")
            first_started.set()
            await release_first.wait()
            order.append("same:first:end")

        async def second_op() -> None:
            order.append("same:second:start")
            order.append("same:second:end")

        async def other_op() -> None:
            order.append("other:start")
            order.append("other:end")

        first = asyncio.ensure_future(queue.run("same", first_op))
        await first_started.wait()
        second = asyncio.ensure_future(queue.run("same", second_op))
        other = asyncio.ensure_future(queue.run("other", other_op))

        # Bounded waits: a queue that makes "other" wait for "same" fails here instead of hanging.
        done, _ = await asyncio.wait([other], timeout=2)
        assert other in done, "不同路径的修改不应等待 same 的第一项"
        assert order == ["same:first:start", "other:start", "other:end"]

        release_first.set()
        await asyncio.gather(first, second)
        assert order == [
            "same:first:start",
            "other:start",
            "other:end",
            "same:first:end",
            "same:second:start",
            "same:second:end",
        ]

        async def failing() -> None:
            raise RuntimeError("expected failure")

        with pytest.raises(RuntimeError, match="expected failure"):
            await queue.run("failed", failing)

        async def next_op() -> None:
            order.append("failed:next-ran")

        await asyncio.wait_for(queue.run("failed", next_op), timeout=2)
        assert order[-1] == "failed:next-ran"
        return order

    asyncio.run(scenario())


@pytest.mark.lab8_3
@pytest.mark.edits("MutationQueue.run")
def test_a_waiter_cancelled_in_the_queue_does_not_let_the_next_one_jump_ahead() -> None:
    """排队中的第二项被取消后，第三项和随后到达的第四项是否仍等第一项结束才开始，且之后队列照常可用？"""

    async def scenario() -> list[str]:
        queue = MutationQueue()
        order: list[str] = []

        async def probe() -> None:
            return None

        await queue.run("probe", probe)  # on the starter, the stub stops the test here
        started = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> str:
            order.append("first:start")
            started.set()
            await release.wait()
            order.append("first:end")
            return "first"

        async def never() -> str:
            order.append("cancelled-one-ran")
            return "never"

        async def third_op() -> str:
            order.append("third")
            return "third"

        first = asyncio.ensure_future(queue.run("k", holder))
        await started.wait()
        second = asyncio.ensure_future(queue.run("k", never))
        third = asyncio.ensure_future(queue.run("k", third_op))
        await asyncio.sleep(0)  # let both reach the queue
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        # A request that arrives now, while the first still holds the path, must wait too.
        fourth = asyncio.ensure_future(queue.run("k", third_op))
        await asyncio.sleep(0)  # one loop turn: a queue that lost track of "k" would run it here
        assert order == ["first:start"]
        release.set()
        assert await first == "first"
        assert await asyncio.wait_for(third, timeout=2) == "third"
        assert await asyncio.wait_for(fourth, timeout=2) == "third"
        assert await asyncio.wait_for(queue.run("k", third_op), timeout=2) == "third"
        return order

    assert asyncio.run(scenario()) == ["first:start", "first:end", "third", "third", "third"]


# ## Lab 8.4 · Edit


@pytest.mark.lab8_4
@pytest.mark.edits("apply_edits", "commit_edits")
def test_edit_applies_dependent_replacements_in_order_and_reports_byte_counts(
    make_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edit 是否按顺序应用相互依赖的替换、整体替换目录项、报告前后字节数，并与 Write 共用同一个队列？"""
    root = make_dir("pi-edit-order-")
    file = root / "value.txt"
    source = "alpha beta"
    mutation_runs = record_mutation_runs(monkeypatch)
    tools = create_coding_tools(cwd=str(root), containment="workspace")
    written = execute(call("edit-setup", "write", {"path": "value.txt", "content": source}), tools)
    assert written.is_error is False, output_of(written)
    hard_link_witness = root / "before-edit.txt"
    os.link(file, hard_link_witness)

    result = execute(
        call(
            "edit-order",
            "edit",
            {
                "path": "value.txt",
                "edits": [
                    {"oldText": "alpha", "newText": "gamma"},
                    {"oldText": "gamma beta", "newText": "done"},
                ],
            },
        ),
        tools,
    )

    assert result.is_error is False, output_of(result)
    assert file.read_text(encoding="utf-8") == "done"
    assert hard_link_witness.read_text(encoding="utf-8") == source, (
        "Edit 必须在整批验证后替换目录项，不能直接改写原 inode"
    )
    assert result.details == EditDetails(
        path=str(file), old_bytes=utf8_size(source), new_bytes=utf8_size("done"), edits=2
    )
    deleted = execute(
        call("edit-delete", "edit", {"path": "value.txt", "oldText": "done", "newText": ""}), tools
    )
    assert deleted.is_error is False, output_of(deleted)
    assert file.read_text(encoding="utf-8") == ""
    assert [key for key, _ in mutation_runs] == [str(file), str(file), str(file)]
    assert all(queue is mutation_runs[0][1] for _, queue in mutation_runs), (
        "Write 与 Edit 必须共用同一个默认修改队列"
    )


@pytest.mark.lab8_4
@pytest.mark.edits("commit_edits", "apply_edits", "parse_edit_parameters")
def test_edit_refuses_empty_batches_empty_and_repeated_matches_and_never_half_applies(
    make_dir: Callable[[str], Path],
) -> None:
    """空批次、空 oldText、多重匹配和中途没有匹配，是否都被拒绝，且每次失败后文件都与原来一字不差？"""
    root = make_dir("pi-edit-errors-")
    file = root / "value.txt"
    tools = create_coding_tools(cwd=str(root), containment="workspace")

    file.write_text("one two", encoding="utf-8")
    empty_batch = execute(call("edit-empty-batch", "edit", {"path": "value.txt", "edits": []}), tools)
    assert empty_batch.is_error is True
    assert re.search(r"edits 不能为空", output_of(empty_batch))
    assert file.read_text(encoding="utf-8") == "one two"

    empty_match = execute(
        call("edit-empty-match", "edit", {"path": "value.txt", "oldText": "", "newText": "X"}), tools
    )
    assert empty_match.is_error is True
    assert re.search(r"oldText 不能为空", output_of(empty_match))
    assert file.read_text(encoding="utf-8") == "one two"

    file.write_text("same same", encoding="utf-8")
    repeated = execute(
        call("edit-repeated", "edit", {"path": "value.txt", "oldText": "same", "newText": "X"}), tools
    )
    assert repeated.is_error is True
    assert re.search(r"匹配多次", output_of(repeated))
    assert file.read_text(encoding="utf-8") == "same same"

    file.write_text("one two", encoding="utf-8")
    failed_batch = execute(
        call(
            "edit-rollback",
            "edit",
            {
                "path": "value.txt",
                "edits": [{"oldText": "one", "newText": "ONE"}, {"oldText": "missing", "newText": "X"}],
            },
        ),
        tools,
    )
    assert failed_batch.is_error is True
    assert re.search(r"edits\[1\] 没有匹配", output_of(failed_batch))
    assert file.read_text(encoding="utf-8") == "one two"


@pytest.mark.lab8_4
@pytest.mark.edits("apply_edits")
def test_edit_messages_name_the_failing_edit_and_overlapping_text_counts_once(
    make_dir: Callable[[str], Path],
) -> None:
    """失败消息是否与契约一字不差并指出第几项，重叠出现的文本（`aaa` 里的 `aa`）是否只算一次匹配？"""
    root = make_dir("pi-edit-messages-")
    file = root / "value.txt"
    file.write_text("aaa", encoding="utf-8")
    tools = create_coding_tools(cwd=str(root), containment="workspace")

    overlap = execute(
        call("edit-overlap", "edit", {"path": "value.txt", "oldText": "aa", "newText": "b"}), tools
    )
    assert overlap.is_error is False, output_of(overlap)
    assert file.read_text(encoding="utf-8") == "ba"

    file.write_text("x y x", encoding="utf-8")
    cases: list[tuple[dict[str, object], str]] = [
        ({"oldText": "x", "newText": "z"}, "Tool edit failed: edits[0] 匹配多次；请提供更精确的上下文"),
        (
            {"edits": [{"oldText": "y", "newText": "q"}, {"oldText": "", "newText": "q"}]},
            "Tool edit failed: edits[1].oldText 不能为空",
        ),
        ({"edits": ["x"]}, "Tool edit failed: 每个 edit 必须是 object"),
    ]
    for arguments, message in cases:
        result = execute(call("edit-message", "edit", {"path": "value.txt", **arguments}), tools)
        assert output_of(result) == message
        assert file.read_text(encoding="utf-8") == "x y x"
    not_object = execute(call("edit-not-object", "edit", ["value.txt"]), tools)
    assert output_of(not_object) == "Tool edit failed: 参数必须是 object"


@pytest.mark.lab8_4
@pytest.mark.edits("commit_edits")
def test_edit_keeps_permissions_and_refuses_a_file_it_cannot_read_as_utf8(
    make_dir: Callable[[str], Path],
) -> None:
    """Edit 是否保留文件的权限位（可执行脚本仍可执行），遇到非 UTF-8 文件是否拒绝并保持每个字节不变？"""
    root = make_dir("pi-edit-keep-")
    script = root / "run.sh"
    script.write_text("echo draft\n", encoding="utf-8")
    script.chmod(0o755)
    tools = create_coding_tools(cwd=str(root), containment="workspace")

    edited = execute(
        call("edit-script", "edit", {"path": "run.sh", "oldText": "draft", "newText": "done"}), tools
    )
    assert edited.is_error is False, output_of(edited)
    assert script.read_text(encoding="utf-8") == "echo done\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755

    binary = root / "data.bin"
    binary.write_bytes(b"name=\xff\xfe old")
    refused = execute(
        call("edit-binary", "edit", {"path": "data.bin", "oldText": "old", "newText": "new"}), tools
    )
    assert refused.is_error is True
    assert binary.read_bytes() == b"name=\xff\xfe old"


# ## Lab 8.5 · Bash


@pytest.mark.lab8_5
@pytest.mark.edits("run_command")
def test_bash_runs_in_the_workspace_keeps_exit_codes_and_guards_paths(
    make_dir: Callable[[str], Path],
) -> None:
    """Bash 是否在 cwd 里运行并返回输出、保留非零退出码，并在启动前拦下显式的 `../` 与绝对路径？"""
    root = make_dir("pi-bash-exit-")
    outside_marker = Path(f"{root}-outside.txt")
    tools = create_coding_tools(cwd=str(root), containment="workspace")
    try:
        succeeded = execute(call("bash-success", "bash", {"command": "printf 'ok\\n'; pwd"}), tools)
        assert succeeded.is_error is False, output_of(succeeded)
        assert re.match(r"ok\n", output_of(succeeded))
        assert output_of(succeeded).rstrip().split("\n")[-1] == os.path.realpath(root)
        assert isinstance(succeeded.details, BashDetails)
        assert succeeded.details.exit_code == 0

        failed = execute(call("bash-nonzero", "bash", {"command": "printf 'bad\\n' >&2; exit 7"}), tools)
        assert failed.is_error is True
        assert re.search(r"bad", output_of(failed))
        assert isinstance(failed.details, BashDetails)
        assert failed.details.exit_code == 7
        assert failed.details.timed_out is False

        for guarded_call in (
            call("bash-guard-parent", "bash", {"command": f"printf escaped > ../{outside_marker.name}"}),
            call("bash-guard-absolute", "bash", {"command": f"printf escaped > {outside_marker}"}),
        ):
            guarded = execute(guarded_call, tools)
            assert guarded.is_error is True
            assert re.search(r"guardrail", output_of(guarded))
            assert not outside_marker.exists()
    finally:
        outside_marker.unlink(missing_ok=True)


@pytest.mark.lab8_5
@pytest.mark.edits("run_command")
def test_bash_cancelled_before_it_starts_starts_no_process(make_dir: Callable[[str], Path]) -> None:
    """signal 在调用前已取消时，Bash 是否不启动任何进程，并以 aborted 的错误结果作答？"""
    root = make_dir("pi-bash-precancel-")
    tools = create_coding_tools(cwd=str(root), containment="workspace")
    controller = AbortController()
    controller.abort()

    result = execute(
        call("bash-precancel", "bash", {"command": "printf started > started.txt"}), tools, controller.signal
    )

    assert result.is_error is True
    assert isinstance(result.details, BashDetails)
    assert result.details.aborted is True
    assert (result.details.exit_code, result.details.timed_out) == (None, False)
    assert not (root / "started.txt").exists()


@pytest.mark.lab8_5
@pytest.mark.edits("bounded_output")
def test_bash_truncation_notice_counts_against_the_output_limit(
    make_dir: Callable[[str], Path], python: str
) -> None:
    """stdout 与 stderr 共用一个字节预算时，截断提示本身是否也算在上限之内？"""
    root = make_dir("pi-bash-output-")
    max_bash_output_bytes = 64
    tools = create_coding_tools(
        cwd=str(root), containment="workspace", max_bash_output_bytes=max_bash_output_bytes
    )
    command = (
        f"{python} -c \"import sys; sys.stdout.write('x' * 300); sys.stdout.flush(); "
        "sys.stderr.write('y' * 300)\""
    )

    result = execute(call("bash-output", "bash", {"command": command}), tools)

    assert result.is_error is False, output_of(result)
    assert isinstance(result.details, BashDetails)
    assert result.details.truncated is True
    assert utf8_size(output_of(result)) <= max_bash_output_bytes
    assert re.search(r"\[输出已截断\]$", output_of(result))


@pytest.mark.lab8_5
@pytest.mark.edits("bounded_output")
def test_bash_output_that_is_not_utf8_stays_readable_and_within_the_limit(
    make_dir: Callable[[str], Path], python: str
) -> None:
    """输出不是合法 UTF-8 时，Bash 是否用 U+FFFD 显示坏字节、保留其余文本，并且替换后仍不超过字节上限？"""
    root = make_dir("pi-bash-bytes-")
    small = create_coding_tools(cwd=str(root), containment="workspace")
    mixed = execute(
        call(
            "bash-mixed",
            "bash",
            {"command": f"{python} -c \"import sys; sys.stdout.buffer.write(b'ok\\xff!')\""},
        ),
        small,
    )
    assert mixed.is_error is False, output_of(mixed)
    assert output_of(mixed) == "ok\ufffd!"

    limited = create_coding_tools(cwd=str(root), containment="workspace", max_bash_output_bytes=64)
    exactly_at_limit = f"{python} -c \"import sys; sys.stdout.buffer.write(b'\\xff' * 64)\""
    result = execute(call("bash-invalid", "bash", {"command": exactly_at_limit}), limited)
    assert utf8_size(output_of(result)) <= 64
    assert isinstance(result.details, BashDetails)
    assert result.details.truncated is True
    assert output_of(result).endswith("[输出已截断]")
    assert output_of(result).startswith("\ufffd")


TIMEOUT_SCRIPT = """\
import os, signal, sys, time
def stop(*_):
    with open("timeout-stopped.txt", "w") as f:
        f.write("yes")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
open("timeout-ready.txt", "w").close()
time.sleep(float(sys.argv[1]))
"""

CANCEL_SCRIPT = """\
import os, signal, time
def stop(*_):
    with open("cancel-stopped.txt", "w") as f:
        f.write("yes")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
open("running.txt", "w").close()
time.sleep(20)
"""

DESCENDANT_SCRIPT = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open("descendant-ready.txt", "w").close()
time.sleep(3)
open("descendant-survived.txt", "w").close()
time.sleep(20)
"""

PARENT_SCRIPT = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "descendant.py"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open("descendant.pid", "w") as f:
    f.write(str(child.pid))
time.sleep(float(sys.argv[1]))
"""


#: The time limits a time-out test tries, shortest first. Its script must be ready (Python started, its
#: handler set) before the limit passes, and a busy machine can take more than 1.5 s to start Python.
TIME_LIMITS_MS = (1500, 6000, 15_000)
#: How much longer than the limit a script run under it sleeps (its argument): only the limit ends it,
#: and code that waits for it anyway (a descendant left running) fails after seconds, not minutes.
OUTLIVE_SECONDS = 5
#: The per-test limit of those tests: room for every limit above to be tried. A loop in the learner's
#: code is still stopped after two seconds of CPU (the report's own watch), not after this.
TIME_OUT_TEST_SECONDS = 45


def run_until_ready(
    root: Path, command: str, ready: Path, reap_pids: list[int] | None = None
) -> ToolResultMessage:
    """Run `command SECONDS` under a time limit it outlives (the script sleeps that long), trying a longer
    limit while `ready` was not written in time; the first run whose script got ready is judged."""
    pid_file = root / "descendant.pid"  # written by PARENT_SCRIPT: its descendant, to reap
    for limit_ms in TIME_LIMITS_MS:
        ready.unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)
        tools = create_coding_tools(cwd=str(root), containment="workspace", bash_timeout_ms=limit_ms)
        outlive = f"{command} {limit_ms / 1000 + OUTLIVE_SECONDS:g}"
        result = execute(call("bash-timeout", "bash", {"command": outlive}), tools)
        if reap_pids is not None and pid_file.exists():
            reap_pids.append(int(pid_file.read_text(encoding="utf-8")))
        if ready.exists():
            return result
    raise AssertionError(f"命令在 {TIME_LIMITS_MS[-1]} ms 的时限内都没有就绪：机器太忙？")


@pytest.mark.lab8_5
@pytest.mark.timeout(TIME_OUT_TEST_SECONDS)
@pytest.mark.edits("ProcessGroup.on_timeout", "kill_process_tree", "ProcessGroup.terminate")
def test_bash_tells_a_time_out_from_a_cancellation_and_ends_the_whole_process_group(
    make_dir: Callable[[str], Path], python: str, reap_pids: list[int]
) -> None:
    """超时与运行中的取消是否被区分（timed_out / aborted），进程是否先收到 SIGTERM，忽略 SIGTERM 的后代是否也
    被结束？"""
    root = make_dir("pi-bash-stop-")
    (root / "timeout.py").write_text(TIMEOUT_SCRIPT, encoding="utf-8")
    (root / "cancel.py").write_text(CANCEL_SCRIPT, encoding="utf-8")
    (root / "descendant.py").write_text(DESCENDANT_SCRIPT, encoding="utf-8")
    (root / "parent.py").write_text(PARENT_SCRIPT, encoding="utf-8")

    timed_out = run_until_ready(root, f"{python} timeout.py", root / "timeout-ready.txt")
    assert timed_out.is_error is True
    assert isinstance(timed_out.details, BashDetails)
    assert timed_out.details.timed_out is True
    assert timed_out.details.aborted is False
    assert (root / "timeout-stopped.txt").read_text(encoding="utf-8") == "yes"

    # A long limit: the test cancels the command itself, once it is ready, however slowly it starts.
    cancel_tools = create_coding_tools(cwd=str(root), containment="workspace", bash_timeout_ms=60_000)

    async def cancel_while_running(command: str, ready: Path) -> ToolResultMessage:
        controller = AbortController()
        running = asyncio.ensure_future(
            run_call(call("bash-cancel", "bash", {"command": command}), cancel_tools, controller.signal)
        )
        waiting = asyncio.ensure_future(wait_for_file(ready))
        await asyncio.wait([running, waiting], return_when=asyncio.FIRST_COMPLETED)
        if running.done():  # the command ended before it was ready: show why
            waiting.cancel()
            return running.result()
        await waiting
        controller.abort()
        return await running

    cancelled = asyncio.run(cancel_while_running(f"{python} cancel.py", root / "running.txt"))
    assert cancelled.is_error is True
    assert isinstance(cancelled.details, BashDetails)
    assert cancelled.details.aborted is True
    assert cancelled.details.timed_out is False
    assert (root / "cancel-stopped.txt").read_text(encoding="utf-8") == "yes"

    descendant_run = asyncio.run(
        cancel_while_running(f"{python} parent.py 20", root / "descendant-ready.txt")
    )
    reap_pids.append(int((root / "descendant.pid").read_text(encoding="utf-8")))
    assert descendant_run.is_error is True
    assert isinstance(descendant_run.details, BashDetails)
    assert descendant_run.details.aborted is True
    assert descendant_run.details.timed_out is False
    assert wait_until_ended(reap_pids[0]), "忽略 SIGTERM 的后代进程在 Bash 返回后仍在运行"
    assert not (root / "descendant-survived.txt").exists()


@pytest.mark.lab8_5
@pytest.mark.timeout(TIME_OUT_TEST_SECONDS)
@pytest.mark.edits("run_command")
def test_a_time_out_ends_descendants_that_ignore_sigterm(
    make_dir: Callable[[str], Path], python: str, reap_pids: list[int]
) -> None:
    """超时时，忽略 SIGTERM 的后代进程是否也随整个进程组被 SIGKILL 结束？"""
    root = make_dir("pi-bash-timeout-tree-")
    (root / "descendant.py").write_text(DESCENDANT_SCRIPT, encoding="utf-8")
    (root / "parent.py").write_text(PARENT_SCRIPT, encoding="utf-8")
    result = run_until_ready(root, f"{python} parent.py", root / "descendant-ready.txt", reap_pids)

    assert (root / "descendant.pid").exists(), "命令没有写下它的后代进程的 pid"
    assert isinstance(result.details, BashDetails)
    assert (result.details.timed_out, result.details.aborted) == (True, False)
    assert wait_until_ended(reap_pids[-1]), "超时后，忽略 SIGTERM 的后代进程仍在运行"


@pytest.mark.lab8_5
@pytest.mark.edits("run_command")
def test_a_cancellation_that_arrives_while_the_shell_starts_is_not_lost(
    make_dir: Callable[[str], Path],
) -> None:
    """取消恰好在 shell 启动期间到达（`subprocess_shell` 还在 await，abort 监听还没登记）时，是否仍然生效：
    命令被结束，结果是 aborted，而不是等它自己跑完？"""
    root = make_dir("pi-bash-early-cancel-")
    tools = create_coding_tools(cwd=str(root), containment="workspace", bash_timeout_ms=60_000)

    async def cancel_during_start() -> ToolResultMessage:
        controller = AbortController()
        running = asyncio.ensure_future(
            run_call(call("bash-early-cancel", "bash", {"command": "sleep 30"}), tools, controller.signal)
        )
        await asyncio.sleep(0)  # one loop turn: the call has checked the signal and is starting the shell
        controller.abort()
        done, _ = await asyncio.wait([running], timeout=5)
        if not done:
            running.cancel()
            raise AssertionError("启动期间到达的取消被忽略了：命令一直在运行")
        return running.result()

    result = asyncio.run(cancel_during_start())
    assert result.is_error is True
    assert isinstance(result.details, BashDetails)
    assert (result.details.aborted, result.details.timed_out) == (True, False)


GRANDCHILD_SCRIPT = """\
import subprocess, sys
hold = sys.argv[1] == "hold"
quiet = None if hold else subprocess.DEVNULL
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"],
                         stdin=subprocess.DEVNULL, stdout=quiet, stderr=quiet)
with open("grandchild.pid", "w") as f:
    f.write(str(child.pid))
print("shell done")
"""


@pytest.mark.lab8_5
@pytest.mark.edits("run_command")
@pytest.mark.parametrize("holds_pipe", [False, True], ids=["detached", "holding-stdout"])
def test_a_grandchild_that_outlives_its_shell_is_ended_with_the_call(
    make_dir: Callable[[str], Path], python: str, reap_pids: list[int], holds_pipe: bool
) -> None:
    """命令自己正常退出、却在后台留下孙进程（无论它是否还占着输出管道）时，Bash 是否立即返回并结束这个孙进
    程？"""
    root = make_dir("pi-bash-grandchild-")
    (root / "spawn.py").write_text(GRANDCHILD_SCRIPT, encoding="utf-8")
    # The limit is far above the run's real time (well under a second), so that a busy machine's slow
    # start is not taken for a Bash that waited on its grandchild (which sleeps for 20 s).
    tools = create_coding_tools(cwd=str(root), containment="workspace", bash_timeout_ms=15_000)

    started = time.monotonic()
    command = f"{python} spawn.py {'hold' if holds_pipe else 'quiet'}"
    result = execute(call("bash-grandchild", "bash", {"command": command}), tools)
    elapsed = time.monotonic() - started

    reap_pids.append(int((root / "grandchild.pid").read_text(encoding="utf-8")))
    assert result.is_error is False, output_of(result)
    assert output_of(result) == "shell done\n"
    assert isinstance(result.details, BashDetails)
    assert (result.details.exit_code, result.details.timed_out) == (0, False)
    assert elapsed < 12, "Bash 等到超时才返回：它在等孙进程关闭管道"
    assert wait_until_ended(reap_pids[0]), "命令结束后，它留下的孙进程仍在运行"


# ## Lab 8.6 · the tools in the agent loop


async def run_loop_with_tools(
    root: Path, calls: list[ToolCall], final_text: str
) -> tuple[AgentRunResult, ScriptedModel]:
    """Run 07's agent loop with a scripted model that makes `calls` one per turn, then answers."""
    model = ScriptedModel(
        [
            *(assistant_message([each], "toolUse") for each in calls),
            assistant_message([text(final_text)], "stop"),
        ]
    )
    tools = create_coding_tools(cwd=str(root), containment="workspace")
    run = await run_agent_loop(
        model=model,
        tools=tools,
        context=AgentContext(messages=[user_message("把 task.txt 改成 done 并检查结果")]),
    )
    for message in run.messages:
        if isinstance(message, ToolResultMessage):
            raise_stub(message)
    return run, model


@pytest.mark.lab8_6
def test_a_real_agent_loop_completes_read_edit_bash_with_every_call_paired(
    make_dir: Callable[[str], Path], python: str
) -> None:
    """真实的 agent loop 配上脚本模型，是否走完 Read → Edit → Bash，文件被改好，每个 call 都有配对结果？"""
    root = make_dir("pi-tools-loop-")
    (root / "task.txt").write_text("draft", encoding="utf-8")
    check = (
        f"{python} -c \"import sys; sys.exit(2) if open('task.txt', encoding='utf-8').read() != 'done' "
        "else sys.stdout.write('verified')\""
    )
    calls = [
        call("loop-read", "read", {"path": "task.txt"}),
        call("loop-edit", "edit", {"path": "task.txt", "oldText": "draft", "newText": "done"}),
        call("loop-bash", "bash", {"command": check}),
    ]

    run, model = asyncio.run(run_loop_with_tools(root, calls, "文件已经修改并通过检查。"))

    assert run.reason == "stop"
    assert (root / "task.txt").read_text(encoding="utf-8") == "done"
    results = [message for message in run.messages if isinstance(message, ToolResultMessage)]
    assert [(r.tool_call_id, r.tool_name, r.is_error) for r in results] == [
        (c.id, c.name, False) for c in calls
    ]
    assert re.search(r"verified", output_of(results[2]))
    assert len(model.requests) == 4
    assert [message.role for message in run.messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "assistant",
    ]


@pytest.mark.lab8_6
def test_the_model_is_shown_the_four_tools_and_edits_two_argument_shapes(
    make_dir: Callable[[str], Path],
) -> None:
    """模型收到的工具定义是否依次是 read、write、edit、bash，edit 的参数是否用模型的键
    （oldText、newText、edits）描述两种形状？"""
    root = make_dir("pi-tools-definitions-")
    (root / "task.txt").write_text("draft", encoding="utf-8")

    run, model = asyncio.run(
        run_loop_with_tools(root, [call("only-read", "read", {"path": "task.txt"})], "好")
    )

    assert run.reason == "stop"
    definitions = {tool.name: tool.parameters for tool in model.requests[0].tools or []}
    assert list(definitions) == ["read", "write", "edit", "bash"]
    assert definitions["read"]["required"] == ["path"]
    assert definitions["bash"]["required"] == ["command"]
    edit = definitions["edit"]
    assert edit["required"] == ["path"]
    assert set(edit["properties"]) == {"path", "oldText", "newText", "edits"}
    pair = edit["properties"]["edits"]["items"]
    assert pair["required"] == ["oldText", "newText"]
    assert pair["properties"] == {"oldText": {"type": "string"}, "newText": {"type": "string"}}
