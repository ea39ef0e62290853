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

from .lab import LabNotImplemented
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
    raise LabNotImplemented("8.1", "read_window")


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
    raise LabNotImplemented("8.2", "is_inside")


def ensure_inside_workspace(root: str, resolved: str, candidate: str) -> None:
    """Refuse a path that leaves `root`: by its name (`..`, an absolute path), or through a symbolic
    link; a path that does not exist yet is judged by its nearest existing ancestor."""
    raise LabNotImplemented("8.2", "ensure_inside_workspace")


# ## Lab 8.3 · Write: a whole file, committed by rename; one queue per path


class MutationQueue:
    """Runs the changes to one key (a resolved path) one after another, and different keys in parallel."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    async def run(self, key: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Wait for the earlier operations on `key`, run `operation`, then let the next one go, even
        when this one failed."""
        raise LabNotImplemented("8.3", "MutationQueue.run")


#: The one queue that every Write and Edit goes through, whichever registry created them.
mutations = MutationQueue()


def atomic_write(file: str, value: str) -> None:
    """Create the parent folders, write a temporary file beside `file`, then rename it over `file`:
    the path switches to the complete new content at once, and no temporary file is left behind."""
    raise LabNotImplemented("8.3", "atomic_write")


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
    raise LabNotImplemented("8.3", "write_file")


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
    raise LabNotImplemented("8.4", "parse_edit_parameters")


def apply_edits(current: str, edits: list[ExactEdit]) -> str:
    """Apply the edits in order to one copy in memory: a later edit sees what the earlier ones made.
    Each `old_text` must be non-empty and match exactly once; an empty `new_text` deletes."""
    raise LabNotImplemented("8.4", "apply_edits")


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
    raise LabNotImplemented("8.4", "commit_edits")


async def edit_file(file: str, edits: list[ExactEdit]) -> ToolOutput[EditDetails]:
    """Commit the edits in the same queue as Write, under the same resolved path."""
    raise LabNotImplemented("8.4", "edit_file")


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
    raise LabNotImplemented("8.5", "kill_process_tree")


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
    raise LabNotImplemented("8.5", "utf8_prefix")


def bounded_output(captured: bytes, truncated: bool, max_bytes: int) -> tuple[str, bool]:
    """The text the model sees, at most `max_bytes` UTF-8 bytes notice included, and whether it was cut.
    Bytes that are not UTF-8 become U+FFFD, three bytes each, so decoding alone can overflow the limit."""
    raise LabNotImplemented("8.5", "bounded_output")


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
        raise LabNotImplemented("8.5", "ProcessGroup.on_timeout")

    def on_abort(self) -> None:
        """The caller cancelled the run: remember that, and end the group."""
        raise LabNotImplemented("8.5", "ProcessGroup.on_abort")

    def terminate(self) -> None:
        """SIGTERM to the whole group now, SIGKILL after KILL_GRACE_SECONDS; a second request (a time-out
        and an abort close together) shares the first one's pending SIGKILL."""
        raise LabNotImplemented("8.5", "ProcessGroup.terminate")

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
    raise LabNotImplemented("8.5", "run_command")


# ## Lab 8.6 · the four tools in the agent loop


def edit_json_schema() -> dict[str, Any]:
    """The JSON Schema of Edit's arguments as a provider shows it to the model: a path, and either
    one `oldText`/`newText` pair or an `edits` array of such pairs (the model's own JSON keys)."""
    raise LabNotImplemented("8.6", "edit_json_schema")


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
