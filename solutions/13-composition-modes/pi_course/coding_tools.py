"""Checkpoint 08: Read, Write, Edit and Bash work on one workspace, on real files and real processes.

`workspace` containment is a teaching guardrail against common slips, not a security sandbox: it does
not stand in for the operating system's isolation of shells, symbolic links and child processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal as signals
import stat
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from .messages import AbortSignal, now_ms, text
from .tool import (
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    object_schema,
    optional_positive_integer,
    string_value,
)

T = TypeVar("T")

ContainmentMode: TypeAlias = Literal["workspace", "unrestricted"]


# ## Options and details (declared for every lab)


@dataclass(frozen=True)
class CodingToolsOptions:
    """One workspace's settings, shared by its four tools; `cwd` is already absolute."""

    cwd: str
    containment: ContainmentMode
    max_read_bytes: int = 48_000
    max_read_lines: int = 240
    max_bash_output_bytes: int = 96_000
    bash_timeout_ms: int = 30_000


@dataclass
class ReadDetails:
    """What one Read saw: the whole file (`bytes`, `lines`) and the window shown (`start_line`…)."""

    path: str
    bytes: int
    lines: int
    start_line: int
    end_line: int
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "path": self.path,
            "bytes": self.bytes,
            "lines": self.lines,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "truncated": self.truncated,
        }


@dataclass
class WriteDetails:
    """The evidence of one Write: the final path and the UTF-8 bytes written."""

    path: str
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form."""
        return {"path": self.path, "bytes": self.bytes}


@dataclass
class EditDetails:
    """The evidence of one Edit: the file's size before and after, and how many replacements."""

    path: str
    old_bytes: int
    new_bytes: int
    edits: int

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "path": self.path,
            "oldBytes": self.old_bytes,
            "newBytes": self.new_bytes,
            "edits": self.edits,
        }


@dataclass
class BashDetails:
    """How one command ended; `exit_code` is None when a signal ended it or it never started."""

    command: str
    exit_code: int | None
    timed_out: bool
    aborted: bool
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form, with the course's camelCase keys."""
        return {
            "command": self.command,
            "exitCode": self.exit_code,
            "timedOut": self.timed_out,
            "aborted": self.aborted,
            "truncated": self.truncated,
        }


def utf8_length(value: str) -> int:
    """The size of `value` in UTF-8 bytes: every limit and every count in this module is in bytes."""
    return len(value.encode("utf-8"))


# ## Lab 8.1 · Read: a window of whole lines


def read_tool(options: CodingToolsOptions) -> Tool[dict[str, Any], ReadDetails]:
    """The `read` tool: path, and an optional 1-based `offset` and line `limit`."""

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[ReadDetails]:
        file = resolved_path(options.cwd, parameters["path"], options.containment)
        return read_window(file, parameters["offset"], parameters["limit"], options)

    return Tool(
        "read",
        "按行数和字节上限读取 UTF-8 文件",
        object_schema(
            {"path": string_value, "offset": optional_positive_integer, "limit": optional_positive_integer}
        ),
        execute,
    )


def continuation_notice(first: int, last: int, total: int) -> str:
    """The line after a window of lines `first`…`last` that tells the model where to read on; none
    when the window reaches the end of the file."""
    if last >= total:
        return ""
    return f"\n\n[已显示第 {first}-{last} 行，共 {total} 行；继续读取：offset={last + 1}]"


def read_window(
    file: str, offset: int | None, limit: int | None, options: CodingToolsOptions
) -> ToolOutput[ReadDetails]:
    """Number the lines from `offset` on, keep the longest run of whole lines that fits the byte limit
    together with its continuation notice, and describe exactly that window in the details."""
    # BEGIN LAB 8.1
    with open(file, "rb") as handle:
        data = handle.read()
    # A Read only observes: bytes that are not UTF-8 are shown as U+FFFD, never refused.
    source_lines = data.decode("utf-8", errors="replace").split("\n")
    total = len(source_lines)
    start = max(0, (offset or 1) - 1)
    if start >= total:
        raise ValueError(f"offset={start + 1} 超出文件范围；文件共 {total} 行")
    wanted = min(limit or options.max_read_lines, options.max_read_lines)
    requested_end = min(total, start + wanted)

    numbered: list[str] = []
    body_bytes, end = 0, start
    for last in range(start + 1, requested_end + 1):
        numbered.append(f"{last:>4}│ {source_lines[last - 1]}")
        body_bytes += utf8_length(numbered[-1]) + (1 if last > start + 1 else 0)  # and the "\n" before it
        # No break: the last line of the file needs no notice, so a longer window may fit after all.
        # The notice is part of what the model receives, so it counts against the limit too.
        if body_bytes + utf8_length(continuation_notice(start + 1, last, total)) <= options.max_read_bytes:
            end = last
    if end == start:
        # Half a line cannot be continued: offset counts whole lines only.
        raise ValueError(
            f"maxReadBytes={options.max_read_bytes} 太小，无法返回从第 {start + 1} 行开始的完整可续读结果"
        )
    details = ReadDetails(
        path=file,
        bytes=len(data),
        lines=total,
        start_line=start + 1,
        end_line=end,
        truncated=end < total,
    )
    selected = "\n".join(numbered[: end - start]) + continuation_notice(start + 1, end, total)
    return ToolOutput(content=[text(selected)], details=details)
    # END LAB 8.1


# ## Lab 8.2 · one set of path rules for Read, Write and Edit


def resolved_path(cwd: str, candidate: str, containment: ContainmentMode) -> str:
    """The absolute path a file tool will use: `candidate` taken relative to `cwd`, then, in
    `workspace` mode, checked to stay inside it (by name, then through every symbolic link)."""
    root = os.path.abspath(cwd)
    resolved = os.path.abspath(os.path.join(root, candidate))
    if containment == "workspace":
        ensure_inside_workspace(root, resolved, candidate)
    return resolved


def is_inside(root: str, candidate: str) -> bool:
    """True when `candidate` is `root` or below it (both absolute, both already resolved)."""
    # BEGIN LAB 8.2
    return os.path.commonpath([root, candidate]) == root
    # END LAB 8.2


def ensure_inside_workspace(root: str, resolved: str, candidate: str) -> None:
    """Refuse a path that leaves `root`: by its name (`..`, an absolute path), or through a symbolic
    link; a path that does not exist yet is judged by its nearest existing ancestor."""
    # BEGIN LAB 8.2
    # The separator matters: without it, the sibling folder "<root>evil" would pass as inside.
    prefix = root if root.endswith(os.sep) else root + os.sep
    if resolved != root and not resolved.startswith(prefix):
        raise ValueError(f"路径越过教学 workspace：{candidate}")
    # realpath follows every link that exists along the way and keeps the missing tail as it is, so
    # a new file is judged by where its nearest existing ancestor really is.
    real_root = os.path.realpath(root)
    real_target = os.path.realpath(resolved)
    if not is_inside(real_root, real_target):
        raise ValueError(f"符号链接越过教学 workspace：{candidate}")
    # END LAB 8.2


# ## Lab 8.3 · Write: a whole file, committed by rename; one queue per path


class MutationQueue:
    """Runs the changes to one key (a resolved path) one after another, and different keys in parallel."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    async def run(self, key: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Wait for the earlier operations on `key`, run `operation`, then let the next one go, even
        when this one failed."""
        # BEGIN LAB 8.3 MutationQueue.run
        # One lock per key, and a count of who holds or waits for it, so the table forgets idle keys.
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:  # an asyncio.Lock wakes its waiters in arrival order
                return await operation()
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]
        # END LAB 8.3


#: The one queue that every Write and Edit goes through, whichever registry created them.
mutations = MutationQueue()


def atomic_write(file: str, value: str) -> None:
    """Create the parent folders, write a temporary file beside `file`, then rename it over `file`:
    the path switches to the complete new content at once, and no temporary file is left behind."""
    # BEGIN LAB 8.3
    os.makedirs(os.path.dirname(file), exist_ok=True)
    temporary = f"{file}.pi-tmp-{os.getpid()}-{now_ms()}"
    try:
        with open(temporary, "x", encoding="utf-8", newline="") as handle:
            handle.write(value)
        # An edited script stays executable: the new file takes the old one's permission bits.
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.chmod(temporary, stat.S_IMODE(os.stat(file).st_mode))
        os.replace(temporary, file)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    # END LAB 8.3


def write_tool(options: CodingToolsOptions) -> Tool[dict[str, Any], WriteDetails]:
    """The `write` tool: path and the file's complete new content."""

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[WriteDetails]:
        # The path rules (Lab 8.2) run before Write's own work, so a refused path never reaches it.
        file = resolved_path(options.cwd, parameters["path"], options.containment)
        return await write_file(file, parameters["content"])

    return Tool(
        "write",
        "显式创建或完整覆盖一个 UTF-8 文件",
        object_schema({"path": string_value, "content": string_value}),
        execute,
    )


async def write_file(file: str, content: str) -> ToolOutput[WriteDetails]:
    """Queue the atomic write of `file` (already resolved) under its path, and report what was written."""
    # BEGIN LAB 8.3
    await mutations.run(file, lambda: _run_sync(atomic_write, file, content))
    size = utf8_length(content)
    return ToolOutput(content=[text(f"已写入 {size} bytes")], details=WriteDetails(path=file, bytes=size))
    # END LAB 8.3


async def _run_sync(function: Callable[..., T], *arguments: Any) -> T:
    """Run a plain function as the queue's operation (the queue expects a coroutine)."""
    return function(*arguments)


# ## Lab 8.4 · Edit: check the whole batch, then write once


@dataclass
class ExactEdit:
    """One replacement: `old_text` must occur exactly once in the text it is applied to."""

    old_text: str
    new_text: str


@dataclass
class EditParameters:
    """Edit's arguments in one shape: the single `oldText`/`newText` form becomes a batch of one."""

    path: str
    edits: list[ExactEdit]


def parse_edit_parameters(value: object) -> EditParameters:
    """Accept `{path, oldText, newText}` or `{path, edits: [{oldText, newText}, …]}`; refuse an empty
    batch."""
    # BEGIN LAB 8.4
    if not isinstance(value, dict):
        raise ValueError("参数必须是 object")
    path = string_value(value.get("path"))
    raw_edits = value.get("edits")
    if not isinstance(raw_edits, list):
        raw_edits = [{"oldText": value.get("oldText"), "newText": value.get("newText")}]
    if not raw_edits:
        raise ValueError("edits 不能为空")
    edits = []
    for edit in raw_edits:
        if not isinstance(edit, dict):
            raise ValueError("每个 edit 必须是 object")
        edits.append(ExactEdit(string_value(edit.get("oldText")), string_value(edit.get("newText"))))
    return EditParameters(path, edits)
    # END LAB 8.4


def apply_edits(current: str, edits: list[ExactEdit]) -> str:
    """Apply the edits in order to one copy in memory: a later edit sees what the earlier ones made.
    Each `old_text` must be non-empty and match exactly once; an empty `new_text` deletes."""
    # BEGIN LAB 8.4
    result = current
    for index, edit in enumerate(edits):
        if not edit.old_text:
            raise ValueError(f"edits[{index}].oldText 不能为空")
        first = result.find(edit.old_text)
        if first < 0:
            raise ValueError(f"edits[{index}] 没有匹配")
        # A second match after the end of the first one means the caller did not say which one.
        if result.find(edit.old_text, first + len(edit.old_text)) >= 0:
            raise ValueError(f"edits[{index}] 匹配多次；请提供更精确的上下文")
        result = result[:first] + edit.new_text + result[first + len(edit.old_text) :]
    return result
    # END LAB 8.4


class EditSchema:
    """Edit's schema: its own parser (two argument shapes), and the JSON Schema shown to the model."""

    def parse(self, value: object) -> EditParameters:
        """Check the model's arguments."""
        return parse_edit_parameters(value)

    @property
    def json_schema(self) -> dict[str, Any]:
        """What the model is told about Edit's arguments (Lab 8.6)."""
        return edit_json_schema()


def edit_tool(options: CodingToolsOptions) -> Tool[EditParameters, EditDetails]:
    """The `edit` tool: path, and one exact replacement or a batch of them."""

    async def execute(parameters: EditParameters, context: ToolContext) -> ToolOutput[EditDetails]:
        file = resolved_path(options.cwd, parameters.path, options.containment)
        return await edit_file(file, parameters.edits)

    return Tool("edit", "先验证一批唯一精确匹配，再一次写回文件", EditSchema(), execute)


def commit_edits(file: str, edits: list[ExactEdit]) -> ToolOutput[EditDetails]:
    """Read `file` (already resolved), apply the whole batch in memory, write the result once."""
    # BEGIN LAB 8.4
    with open(file, encoding="utf-8", newline="") as handle:
        current = handle.read()  # strict UTF-8: an Edit never rewrites bytes it could not read
    # Any failure is raised here, before anything is written: the file stays as it was.
    result = apply_edits(current, edits)
    atomic_write(file, result)
    count = len(edits)
    details = EditDetails(
        path=file, old_bytes=utf8_length(current), new_bytes=utf8_length(result), edits=count
    )
    return ToolOutput(content=[text(f"已完成 {count} 处精确替换")], details=details)
    # END LAB 8.4


async def edit_file(file: str, edits: list[ExactEdit]) -> ToolOutput[EditDetails]:
    """Commit the edits in the same queue as Write, under the same resolved path."""
    # BEGIN LAB 8.4
    return await mutations.run(file, lambda: _run_sync(commit_edits, file, edits))
    # END LAB 8.4


# ## Lab 8.5 · Bash: every way a command can end gives one bounded result

#: How long a process group gets between SIGTERM and SIGKILL.
KILL_GRACE_SECONDS = 0.1
#: In workspace mode, a command may not name an absolute path, a home path or a parent folder.
GUARDRAIL = re.compile(r"(^|[\s;&|])(?:/|~/|\.\./)")
TRUNCATED_NOTICE = "\n… [输出已截断]"


def bash_tool(options: CodingToolsOptions) -> Tool[dict[str, Any], BashDetails]:
    """The `bash` tool: one shell command, run in the workspace folder."""

    async def execute(parameters: dict[str, Any], context: ToolContext) -> ToolOutput[BashDetails]:
        return await run_command(parameters["command"], options, context.signal)

    return Tool(
        "bash",
        "在指定 cwd 启动可取消、有超时和输出上限的子进程",
        object_schema({"command": string_value}),
        execute,
    )


def kill_process_tree(pid: int, signal: int) -> None:
    """Send `signal` to the whole process group led by `pid`, or to the process alone if there is no
    such group; a process that has already gone is not an error."""
    # BEGIN LAB 8.5
    try:
        os.killpg(pid, signal)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal)
    # END LAB 8.5


def group_alive(pid: int) -> bool:
    """True while some process is still in the process group led by `pid`."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, we just may not signal it
    return True


def utf8_prefix(value: str, max_bytes: int) -> str:
    """The longest prefix of `value` whose UTF-8 form fits in `max_bytes`, never half a character."""
    # BEGIN LAB 8.5
    if max_bytes <= 0:
        return ""
    return value.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    # END LAB 8.5


def bounded_output(captured: bytes, truncated: bool, max_bytes: int) -> tuple[str, bool]:
    """The text the model sees, at most `max_bytes` UTF-8 bytes notice included, and whether it was cut.
    Bytes that are not UTF-8 become U+FFFD, three bytes each, so decoding alone can overflow the limit."""
    # BEGIN LAB 8.5
    output = captured.decode("utf-8", errors="replace")
    truncated = truncated or utf8_length(output) > max_bytes
    if truncated:
        notice = utf8_prefix(TRUNCATED_NOTICE, max_bytes)
        output = utf8_prefix(output, max(0, max_bytes - utf8_length(notice))) + notice
    return output, truncated
    # END LAB 8.5


class OutputCollector(asyncio.SubprocessProtocol):
    """Hears one process: its output on both pipes (one shared byte budget), its exit, and the moment
    every pipe has closed too (the process and anything that inherited its pipes are done)."""

    def __init__(self, max_bytes: int, loop: asyncio.AbstractEventLoop) -> None:
        self.max_bytes = max_bytes
        self.captured = bytearray()
        self.truncated = False
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        """Keep what fits the budget; later data is still read (a pipe nobody drains would stop the
        process), only not kept."""
        accepted = data[: max(0, self.max_bytes - len(self.captured))]
        self.captured.extend(accepted)
        if len(accepted) < len(data):
            self.truncated = True

    def process_exited(self) -> None:
        """The shell has exited (its pipes may still be open in a descendant)."""
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        """Exited, and every pipe closed: the course's "close"."""
        if not self.closed.done():
            self.closed.set_result(None)


class ProcessGroup:
    """The process group of one running command: how it is told to stop, and what stopped it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.timed_out = False
        self.aborted = False
        self._loop = asyncio.get_running_loop()
        self._force_kill: asyncio.TimerHandle | None = None
        self._killed: asyncio.Future[None] = self._loop.create_future()

    def on_timeout(self) -> None:
        """The time limit has passed: remember that, and end the group."""
        # BEGIN LAB 8.5
        self.timed_out = True
        self.terminate()
        # END LAB 8.5

    def on_abort(self) -> None:
        """The caller cancelled the run: remember that, and end the group."""
        # BEGIN LAB 8.5
        self.aborted = True
        self.terminate()
        # END LAB 8.5

    def terminate(self) -> None:
        """SIGTERM to the whole group now, SIGKILL after KILL_GRACE_SECONDS; a second request (a time-out
        and an abort close together) shares the first one's pending SIGKILL."""
        # BEGIN LAB 8.5
        kill_process_tree(self.pid, signals.SIGTERM)
        if self._force_kill is None:
            self._force_kill = self._loop.call_later(KILL_GRACE_SECONDS, self._send_kill)
        # END LAB 8.5

    def _send_kill(self) -> None:
        kill_process_tree(self.pid, signals.SIGKILL)
        self._killed.set_result(None)

    async def settled(self) -> None:
        """Wait for the SIGKILL step, if an end was requested: only then is every descendant gone."""
        if self._force_kill is not None:
            await self._killed

    def close(self) -> None:
        """Drop a SIGKILL step that is still pending (the call is over)."""
        if self._force_kill is not None:
            self._force_kill.cancel()


async def run_command(
    command: str, options: CodingToolsOptions, signal: AbortSignal | None = None
) -> ToolOutput[BashDetails]:
    """Run `command` with /bin/sh in the workspace folder, in a process group of its own, and settle
    it into one result: output (stdout and stderr share one byte budget), exit code, time-out, abort."""
    # BEGIN LAB 8.5
    if options.containment == "workspace" and GUARDRAIL.search(command):
        raise ValueError("教学 guardrail 不允许命令中显式出现绝对路径或 ../")
    if signal is not None and signal.aborted:
        details = BashDetails(command, exit_code=None, timed_out=False, aborted=True, truncated=False)
        return ToolOutput([text("运行已经取消，因此命令没有启动。")], details, is_error=True)

    loop = asyncio.get_running_loop()
    transport, process = await loop.subprocess_shell(
        lambda: OutputCollector(options.max_bash_output_bytes, loop),
        command,
        cwd=options.cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: one signal reaches every descendant
    )
    group = ProcessGroup(transport.get_pid())
    if signal is not None:
        signal.add_event_listener("abort", group.on_abort)
        if signal.aborted:  # aborted while the shell was starting: no event will come for it now
            group.on_abort()
    timer = loop.call_later(options.bash_timeout_ms / 1000, group.on_timeout)
    try:
        await process.exited
        # The shell is gone; whatever it left running in its group must not outlive the call.
        if group_alive(group.pid):
            group.terminate()
        await process.closed
        await group.settled()
    except BaseException:
        # Cancelled from outside: leave nothing running behind us.
        kill_process_tree(group.pid, signals.SIGKILL)
        raise
    finally:
        timer.cancel()
        group.close()
        if signal is not None:
            signal.remove_event_listener("abort", group.on_abort)
        transport.close()

    # A negative return code means a signal ended the shell: there is no exit code.
    returncode = transport.get_returncode()
    exit_code = returncode if returncode is not None and returncode >= 0 else None
    output, truncated = bounded_output(
        bytes(process.captured), process.truncated, options.max_bash_output_bytes
    )
    details = BashDetails(
        command, exit_code, timed_out=group.timed_out, aborted=group.aborted, truncated=truncated
    )
    shown = output or f"(exit {exit_code if exit_code is not None else 'signal'})"
    return ToolOutput([text(shown)], details, is_error=exit_code != 0 or group.timed_out or group.aborted)
    # END LAB 8.5


# ## Lab 8.6 · the four tools in the agent loop


def edit_json_schema() -> dict[str, Any]:
    """The JSON Schema of Edit's arguments as a provider shows it to the model: a path, and either
    one `oldText`/`newText` pair or an `edits` array of such pairs (the model's own JSON keys)."""
    # BEGIN LAB 8.6
    pair = {"oldText": {"type": "string"}, "newText": {"type": "string"}}
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            **pair,
            "edits": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": pair,
                    "required": ["oldText", "newText"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    # END LAB 8.6


def create_coding_tools(
    *,
    cwd: str,
    containment: ContainmentMode,
    max_read_bytes: int = 48_000,
    max_read_lines: int = 240,
    max_bash_output_bytes: int = 96_000,
    bash_timeout_ms: int = 30_000,
) -> ToolRegistry:
    """One registry of read, write, edit and bash, all bound to the workspace `cwd`."""
    if containment not in ("workspace", "unrestricted"):
        # A typo must never switch the guardrail off.
        raise ValueError(f"containment 必须是 workspace 或 unrestricted：{containment!r}")
    options = CodingToolsOptions(
        cwd=os.path.abspath(cwd),
        containment=containment,
        max_read_bytes=max_read_bytes,
        max_read_lines=max_read_lines,
        max_bash_output_bytes=max_bash_output_bytes,
        bash_timeout_ms=bash_timeout_ms,
    )
    return ToolRegistry([read_tool(options), write_tool(options), edit_tool(options), bash_tool(options)])
