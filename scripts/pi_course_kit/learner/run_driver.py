"""The driver of `pi-course run`: composes the learner's own package into an agent and runs it.

This file is run as a script by the practice folder's interpreter (`python -P run_driver.py CONFIG`), with
the folder first on `sys.path`: it imports the learner's package and nothing of the kit, since the kit
process never imports a course package. It uses only what its checkpoint has, as the kit tells it in
CONFIG (a JSON file): `features` is the lineage's list from course.toml ("chat", "tools", "agent",
"session", "compaction", "runtime", "tool_search", "codemode", "mcp", "virtual_models", "durable"). Every
line a learner
reads comes translated in CONFIG's `messages`; the API key is read from the environment variable CONFIG
names and goes nowhere but the learner's transport (it leaves the environment before any tool or MCP
server starts).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

#: How a learner's unfinished piece announces itself (pi_course's `LabNotImplemented`).
STUB = re.compile(r"Lab (\S+?) not implemented")
HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")

EXIT_MODEL_ERROR = 1
EXIT_STUB = 3
EXIT_INTERRUPTED = 130
#: How long the first prompt waits for every MCP server to connect or fail before saying which did.
MCP_SETTLE = 10.0
#: How many of a server's tool names its line shows.
MCP_NAMES_SHOWN = 6


class Stop(Exception):
    """End the run with one line for the learner and an exit code."""

    def __init__(self, line: str, code: int) -> None:
        super().__init__(line)
        self.line = line
        self.code = code


class Driver:
    """One run: the configuration, the learner's package, and how its events are shown."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.pc: Any = importlib.import_module(config["package"])
        self.features: set[str] = set(config["features"])
        self.mode: str = config["mode"]
        self.text_mode = self.mode == "text"
        self.stub: str | None = None  # a lab whose stub a tool result reported
        self.abort: Callable[[], None] = lambda: None
        self.running = False  # a prompt is being answered (Ctrl-C aborts it, else ends the run)
        self.model_: Any = None
        self.models_: dict[str, Any] = {}  # every model named, by name (one, or from 18 several)
        self.routing = False  # from 18: requests go through the learner's catalog and request hook
        # Typed at a terminal while an answer runs, a line steers it (`steered`); piped lines are prompts.
        self.interactive = config["prompts"] is None and self.text_mode and sys.stdin.isatty()
        self.pending: asyncio.Future[str] | None = None  # the one read of stdin in progress
        self.backlog: list[str] = []  # lines typed during an answer that could not steer it: prompts
        self.ended = False  # stdin reached its end
        self.steer_read: asyncio.Future[str] | None = None  # `steered`'s wait for a line, if any
        self.asking: asyncio.Future[None] | None = None  # a tool's question, until it has its answer

    # -- lines --------------------------------------------------------------------------------------

    def say(self, key: str, **values: object) -> str:
        line: str = self.config["messages"][key].format(**values)
        return line

    def show(self, value: str, end: str = "\n") -> None:
        """Progress for a person: stdout in text mode, stderr where stdout carries JSON lines."""
        print(value, end=end, file=sys.stdout if self.text_mode else sys.stderr, flush=True)

    def stub_stop(self, lab: str) -> Stop:
        marker = self.config["markers"].get(lab, "lab" + lab.replace(".", "_"))
        return Stop(self.say("stub", lab=lab, command=f"python -m pytest -m {marker}"), EXIT_STUB)

    def failure(self, message: str) -> Stop:
        """One actionable line for a failed model request (the learner's transport wrote `message`)."""
        if stub := STUB.search(message):
            return self.stub_stop(stub.group(1))
        url, model = self.config["base_url"], self.config["model"]
        status = HTTP_STATUS.search(message)
        if status and status.group(1) in ("401", "403"):
            line = self.say("refused_key", status=status.group(1), variable=self.config["api_key_env"])
        elif status and status.group(1) == "404":
            line = self.say("not_found", model=model, url=url)
        elif status:
            line = self.say("http_status", status=status.group(1), url=url)
        elif re.search(r"without a finish|incomplete|peer closed|disconnected", message, re.IGNORECASE):
            line = self.say("dropped", url=url)
        elif re.search(r"connect|refused|unreachable|name or service", message, re.IGNORECASE):
            line = self.say("unreachable", url=url)
        else:
            line = self.say("model_error", message=message.splitlines()[0] if message else "?")
        return Stop(line, EXIT_MODEL_ERROR)

    # -- the pieces the checkpoint has ----------------------------------------------------------------

    def model(self) -> Any:
        """The first model named; every one of them is in `models_`, over one transport."""
        # Taken out of the environment: the bash tool's commands (and so the model) must not see it.
        key = os.environ.pop(self.config["api_key_env"], "")
        transport = self.pc.create_openai_compatible_transport(base_url=self.config["base_url"], api_key=key)
        for name in self.config["models"]:
            self.models_[name] = self.pc.create_openai_compatible_model(
                provider="openai-compatible", model=name, transport=transport
            )
        return self.models_[self.config["models"][0]]

    def catalog(self) -> Any:
        """18: the models named, as physical models of the learner's catalog, and the virtual one."""
        catalog = self.pc.ModelCatalog()
        for name, model in self.models_.items():
            catalog.register_physical(name, model)
        if self.config["virtual_model"]:
            catalog.register_virtual(self.pc.VirtualModel(id=self.config["virtual_model"], route=self.route))
        return catalog

    def route(self, request: Any) -> Any:
        """The virtual model's rule: the models in turn, counting requests in the state on the branch."""
        state = request.state if isinstance(request.state, dict) else {}
        done = state.get("count")
        count = (done if isinstance(done, int) and done >= 0 else 0) + 1
        names = self.config["models"]
        return self.pc.ModelRoute(model=names[(count - 1) % len(names)], state={"count": count})

    def tools(self) -> Any:
        """The coding tools in the workspace; the ones CONFIG's `ask` names ask before they run."""
        registry = self.pc.create_coding_tools(cwd=self.config["workspace"], containment="workspace")
        tools = self.pc.ToolRegistry([self.gated(tool) for tool in registry.list()])
        if "codemode" in self.features and self.config["yes"]:
            # From 16, with --yes only: a script calls write and bash inside its worker's deadline,
            # where a question could not wait for a person's answer.
            tools.register(self.gated(self.pc.create_codemode_tool(tools)))  # gated: its details as JSON
        return tools

    def gated(self, tool: Any) -> Any:
        """The tool, asking first where CONFIG says so, with details a session file can carry."""
        execute = tool.execute
        ask = not self.config["yes"] and tool.name in self.config["ask"]

        async def run_tool(parameters: Any, context: Any) -> Any:
            if ask and self.mode == "rpc":
                raise PermissionError(self.say("denied_rpc"))  # stdin carries the requests, not answers
            if ask:
                shown = json.dumps(
                    parameters if isinstance(parameters, dict) else str(parameters), ensure_ascii=False
                )
                print(
                    self.say("ask", tool=tool.name, arguments=shown[:200]),
                    end=" ",
                    file=sys.stderr,
                    flush=True,
                )
                answer = await self.answer()
                if not sys.stdin.isatty():
                    print(answer.strip(), file=sys.stderr)  # a terminal has echoed the answer already
                if answer.strip().lower() not in ("y", "yes"):
                    raise PermissionError(self.say("denied"))
            output = await execute(parameters, context)
            # 08's details are dataclasses with `to_dict`; a session entry holds plain JSON only.
            to_dict = getattr(output.details, "to_dict", None)
            return dataclasses.replace(output, details=to_dict()) if callable(to_dict) else output

        return dataclasses.replace(tool, execute=run_tool)

    async def resources(self) -> Any:
        """From 12, the workspace's resource catalog by the learner's discover_resources (AGENTS.md,
        templates/, skills/), which 13's Runtime puts into the system; an empty one before 12."""
        pc, root = self.pc, self.config["workspace"]
        if "resources" not in self.features:
            return pc.ResourceCatalog(resources=[], instructions=[], skills=[], templates=[])
        try:
            catalog = await pc.discover_resources([root])
        except ValueError as error:  # a file of the workspace the learner's checks refuse
            raise Stop(self.say("bad_resources", root=root, error=str(error).splitlines()[0]), 2) from None
        if catalog.resources:
            names = ", ".join(pc.resource_key(resource) for resource in catalog.resources)
            self.show(self.say("resources", root=root, names=names))
        return catalog

    async def extensions(self, registry: Any) -> Any:
        """12: the files `--extension` names, loaded by the learner's `load_extension` into their host.

        The person named each file on the command line: that is the trust gate's answer, and the gate
        still comes first (the learner's code asks it before importing anything).
        """
        listed = self.config["extensions"]
        if not listed:
            return None
        pc = self.pc
        host = pc.create_extension_host(
            registry,
            hook_timeout_ms=self.config["extension_hook_timeout_ms"],
            on_diagnostic=lambda found: self.show(
                self.say(
                    "extension_hook",
                    id=found.extension_id,
                    hook=found.hook,
                    kind=found.kind,
                    message=(found.message.splitlines() or [""])[0],
                )
            ),
        )
        named = {entry["path"] for entry in listed}
        for entry in listed:
            before = {tool.name for tool in registry.list()}
            try:
                await pc.load_extension(
                    pc.ExtensionSource(id=entry["id"], path=entry["path"]),
                    is_trusted=lambda source: source.path in named,
                    import_module=pc.import_extension_file,
                    host=host,
                )
            except (Exception, SystemExit) as error:  # its top level may even call sys.exit
                if STUB.search(str(error)):
                    raise  # the learner's lab: main() names it
                first = (f"{type(error).__name__}: {error}".splitlines() or [""])[0]
                raise Stop(self.say("extension_failed", file=entry["path"], error=first), 2) from None
            added = sorted({tool.name for tool in registry.list()} - before)
            self.show(self.say("extension_loaded", id=entry["id"], tools=", ".join(added) or "-"))
        return host

    def mcp_runtime(self, registry: Any, *, direct: bool = False) -> Any:
        """17: the learner's MCP runtime over the servers CONFIG names (the file `--mcp` gave), each started
        by the learner's stdio transport in the workspace; their tools join `registry` as they connect.
        From 15 the learner's tool_search joins it too when a server's tools are deferred (the default):
        it is how the model loads them. `direct` declares every server's tools at once (19's durable
        harness takes a fixed list of tools, so nothing could load a deferred one). None when there is
        no server (or no MCP client yet)."""
        servers = [
            {**server, "exposure": "direct"} if direct else server
            for server in self.config.get("mcp_servers") or []
        ]
        if not servers or "mcp" not in self.features:
            return None
        pc = self.pc

        def transport(server: dict[str, Any]) -> Callable[[], Any]:
            # The run's environment (the API key already taken out of it) with the server's own entries.
            env = {**os.environ, **server["env"]}
            return lambda: pc.StdioTransport(
                command=server["command"], args=server["args"], cwd=self.config["workspace"], env=env
            )

        configs = [
            pc.McpServerConfig(
                name=server["name"], create_transport=transport(server), exposure=server["exposure"]
            )
            for server in servers
        ]
        if "tool_search" in self.features and any(server["exposure"] == "deferred" for server in servers):
            registry.register(pc.create_tool_search_tool(registry))
        return pc.create_mcp_runtime(registry, servers=configs)

    async def show_servers(self, mcp: Any) -> None:
        """One line per server once each has connected or failed (at most MCP_SETTLE seconds)."""
        deadline = time.monotonic() + MCP_SETTLE
        while time.monotonic() < deadline and any(s.state == "connecting" for s in mcp.status()):
            await asyncio.sleep(0.05)
        for status in mcp.status():
            if status.state == "connected":
                names = list(status.tools)
                tools = ", ".join(names[:MCP_NAMES_SHOWN]) + (" …" if len(names) > MCP_NAMES_SHOWN else "")
                self.show(self.say("mcp_connected", name=status.name, tools=tools or "-"))
            else:
                error = status.error or status.state
                self.show(self.say("mcp_failed", name=status.name, error=str(error).splitlines()[0]))

    def on_loop_event(self, event: Any) -> None:
        """Show one event of the loop: streamed text, each tool call and its result's first line."""
        kind = getattr(event, "type", "")
        if kind == "assistant_message" and self.routing:
            # The dispatch, as the learner's loop recorded it on the reply: never a virtual model.
            self.show(self.say("dispatched", model=event.message.model))
        if kind == "model_event" and getattr(event.event, "type", "") == "text_delta":
            if self.text_mode and "runtime" not in self.features:
                self.show(event.event.delta, end="")
        elif kind == "assistant_message" and self.text_mode and "runtime" not in self.features:
            if self.pc.text_of(event.message):
                self.show("")
        elif kind == "tool_start":
            shown = json.dumps(event.call.arguments, ensure_ascii=False)
            self.show(f"· {event.call.name} {shown[:160]}")
        elif kind in ("tool_end", "tool_skipped"):
            result = self.pc.text_of(event.result)
            if stub := STUB.search(result):
                self.stub = stub.group(1)
                self.abort()  # a stub tool cannot do the task: stop asking the model
            first = (result.strip().splitlines() or [""])[0]
            self.show(f"  {'✗' if event.result.is_error else '✓'} {first[:160]}")

    # -- one prompt, by feature -----------------------------------------------------------------------

    def check_result(self, result: Any) -> None:
        if self.stub is not None:
            raise self.stub_stop(self.stub)
        if result.reason == "aborted":
            raise Stop(self.say("interrupted", session=self.session_note()), EXIT_INTERRUPTED)
        if result.reason == "error":
            last = result.messages[-1] if result.messages else None
            raise self.failure(getattr(last, "error_message", None) or "")

    async def chat(self, messages: list[Any], prompt: str, controller: Any) -> None:
        """05: one streamed turn of the provider adapter, no tools."""
        messages.append(self.pc.user_message(prompt))
        stream = self.model_.stream(self.pc.AgentContext(messages=list(messages)), signal=controller.signal)
        async for event in stream:
            if getattr(event, "type", "") == "text_delta":
                self.show(event.delta, end="")
        final = await stream.result()
        self.show("")
        if final.stop_reason == "aborted":
            raise Stop(self.say("interrupted", session=self.session_note()), EXIT_INTERRUPTED)
        if final.stop_reason == "error":
            raise self.failure(final.error_message or "")
        messages.append(final)

    def session_note(self) -> str:
        file = self.config.get("session_file")
        return self.say("session_kept", file=file) if file and "session" in self.features else ""

    async def main(self, prompts: list[str] | None) -> None:
        self.model_ = self.model()
        main_task = asyncio.current_task()
        assert main_task is not None

        def on_interrupt() -> None:
            # The first Ctrl-C aborts the answer in progress through the learner's own signal; one
            # while no answer runs (or a second one) ends the run.
            if self.running:
                self.running = False
                self.abort()
            else:
                main_task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_interrupt)
        if self.config["durable"]:
            await self.with_durable(prompts)
            return
        if "runtime" in self.features:
            await self.with_runtime(prompts)
            return
        if "session" in self.features:
            await self.with_session(prompts)
            return
        system = self.pc.SystemMessage(content=self.config["system_prompt"], timestamp=0)
        messages: list[Any] = [system]
        agent = None
        if "agent" in self.features:
            agent = self.pc.Agent(
                model=self.model_, tools=self.tools(), system_prompt=self.config["system_prompt"]
            )
            agent.subscribe(lambda event: self.on_loop_event(event.event) if event.type == "loop" else None)
            self.abort = agent.abort
        async for prompt in self.prompts(prompts):
            self.running = True
            if agent is not None:
                self.check_result(await self.steered(agent.prompt(prompt), agent.steer))
            elif "tools" in self.features:
                messages.append(self.pc.user_message(prompt))
                result = await self.loop_turn(messages)
                self.check_result(result)
                messages = result.messages
            else:
                controller = self.pc.AbortController()
                self.abort = controller.abort
                await self.chat(messages, prompt, controller)

    async def with_session(self, prompts: list[str] | None) -> None:
        """10-12: the loop over the learner's JSONL session store. Each message is appended as an entry
        under the one before it as soon as it exists, so an interrupted run leaves a file that `--resume`
        goes on from (its last entry is the leaf). From 11 on, the model gets the context the learner's
        `build_context` makes of the path within a budget, no longer the whole transcript."""
        pc, file = self.pc, self.config["session_file"]
        try:
            store = await pc.JsonlSessionStore.open(file)
            entries = await store.entries()
            path = pc.path_to(entries, entries[-1].id) if entries and self.config["resume"] else []
        except ValueError as error:
            raise Stop(self.say("bad_session", file=file, error=error), 2) from None

        async def add(entry: Any) -> None:
            await store.append(entry)
            path.append(entry)

        async def keep(message: Any) -> None:
            leaf = path[-1].id if path else None
            await add(
                pc.MessageSessionEntry(
                    id=uuid.uuid4().hex, parent_id=leaf, timestamp=now_ms(), message=message
                )
            )

        if not path:
            await keep(self.pc.SystemMessage(content=self.config["system_prompt"], timestamp=0))
        async for prompt in self.prompts(prompts):
            self.running = True
            await keep(pc.user_message(prompt))
            context = await self.context(path, add)
            result = await self.loop_turn(context)
            for message in result.messages[len(context) :]:
                await keep(message)
            self.check_result(result)
        if self.text_mode:
            self.show(self.say("session_saved", file=file))

    async def loop_turn(self, messages: list[Any]) -> Any:
        """One run of the learner's agent loop over `messages`, which Ctrl-C aborts through its signal."""
        controller = self.pc.AbortController()
        self.abort = controller.abort
        return await self.pc.run_agent_loop(
            model=self.model_,
            tools=self.tools(),
            context=self.pc.AgentContext(messages=messages),
            signal=controller.signal,
            on_event=self.on_loop_event,
        )

    def budget(self) -> dict[str, Any]:
        """The token budget of one request (CONFIG's `context_tokens`), as 11's build_context takes it:
        the reply's share and the margin in the proportions of the default (8,000 and 2,000 of 128,000)."""
        total = float(self.config["context_tokens"])
        return {
            "max_tokens": total,
            "reserved_output": total / 16,
            "safety_margin": total / 64,
            "estimate_tokens": estimate_tokens,
        }

    async def context(self, path: list[Any], add: Callable[[Any], Awaitable[None]]) -> list[Any]:
        """The messages the model gets: the path's (10), or from 11 the learner's context within the
        budget. When older interactions would fall away, the model first summarizes them, and the
        learner's compaction entry joins the session (`add`), so the next context carries the summary."""
        if "compaction" not in self.features:
            return [entry.message for entry in path if isinstance(entry, self.pc.MessageSessionEntry)]
        built = self.pc.build_context(path, **self.budget())
        if built.reason != "trimmed" or not self.config.get("compaction_prompt"):
            return list(built.messages)
        summary, dropped = await self.summarize(path, set(built.kept_entry_ids))
        if summary is None:
            return list(built.messages)
        entry = self.pc.create_compaction_entry(
            path,
            id=uuid.uuid4().hex,
            timestamp=now_ms(),
            summary=summary,
            first_kept_entry_id=built.kept_entry_ids[0],
            tokens_before=sum(estimate_tokens(message) for message in dropped) + built.tokens.total,
        )
        await add(entry)
        self.show(self.say("compacted", count=len(dropped)))
        return list(self.pc.build_context(path, **self.budget()).messages)

    async def summarize(self, path: list[Any], kept: set[str]) -> tuple[Any, list[Any]]:
        """(the learner's CompactionSummary of what falls out of the budget, those messages), asked of the
        model through the learner's loop with no tools; (None, ...) when its reply is not the JSON asked."""
        pc = self.pc
        compaction = pc.latest_compaction(path)
        dropped = [
            entry.message
            for entry in pc.message_candidates(path, compaction)
            if entry.id not in kept and entry.message.role != "system"
        ]
        earlier = pc.compaction_summary_text(compaction[0].summary) + "\n\n" if compaction else ""
        request = [
            pc.SystemMessage(content=self.config["compaction_prompt"], timestamp=0),
            pc.user_message(earlier + "\n".join(describe(pc, message) for message in dropped)),
        ]
        controller = pc.AbortController()
        self.abort = controller.abort
        result = await pc.run_agent_loop(
            model=self.model_,
            tools=pc.ToolRegistry([]),
            context=pc.AgentContext(messages=request),
            signal=controller.signal,
        )
        self.check_result(result)
        try:
            return summary_of(pc, pc.text_of(result.messages[-1])), dropped
        except ValueError:  # the reason stays out: its words are Python's, not the run's language
            self.show(self.say("not_compacted"))
            return None, dropped

    async def with_durable(self, prompts: list[str] | None) -> None:
        """19: the durable harness; the store is written to the run's file after every commit, so a
        crash or Ctrl-C leaves a file that `--resume` goes on from (an interrupted task first)."""
        pc, file = self.pc, self.config["session_file"]
        store = pc.DurableStore()
        if self.config["resume"]:
            try:
                data = json.loads(Path(file).read_text(encoding="utf-8"))
                snapshot = pc.DurableSnapshot(seq=data["seq"], entries=data["entries"], tasks=data["tasks"])
                store = pc.DurableStore.from_snapshot(snapshot)
            except (ValueError, KeyError, TypeError) as error:
                raise Stop(self.say("bad_session", file=file, error=error), 2) from None
        store.on_commit(lambda seq, writes: write_atomically(file, store.snapshot().to_dict()))
        registry = self.tools()
        mcp = self.mcp_runtime(registry, direct=True)
        try:
            if mcp is not None:
                # The harness takes its tools when it opens: first the servers (the learner's own bounded
                # wait of 17.5), so that their tools are in the registry by then.
                await mcp.wait_for_direct_servers()
                await self.show_servers(mcp)
            await self.durable_turns(store, registry, prompts)
        finally:
            if mcp is not None:
                await mcp.close()  # the servers' processes end with the run

    async def durable_turns(self, store: Any, registry: Any, prompts: list[str] | None) -> None:
        """The durable harness over the registry's tools: what an interrupted run left first, then each
        prompt."""
        pc, file = self.pc, self.config["session_file"]
        # 19's harness parses a call's arguments, then hands the parsed value to 06's executor, which
        # parses again: fine for a dict schema, not for 08's edit, whose parse makes a dataclass.
        tools = [
            pc.DurableToolRegistration(
                tool=tool, replay="safe" if tool.name in self.config["replay_safe"] else None
            )
            for tool in map(parsed_once, registry.list())
        ]
        harness = await pc.DurableHarness.open(
            store=store, model=self.model_, create_id=lambda: uuid.uuid4().hex, tools=tools
        )
        controller = pc.AbortController()
        self.abort = controller.abort
        shown = len(harness.messages(CONVERSATION))

        async def go_on() -> None:
            nonlocal shown
            self.running = True
            await harness.run(signal=controller.signal)
            messages = harness.messages(CONVERSATION)
            for message in messages[shown:]:
                self.show_message(message)
            shown = len(messages)
            if self.stub is not None:
                raise self.stub_stop(self.stub)
            if controller.signal.aborted:
                raise Stop(
                    self.say("interrupted", session=self.say("session_kept", file=file)), EXIT_INTERRUPTED
                )
            last = messages[-1] if messages else None
            self.check_result(_Ended(reason=getattr(last, "stop_reason", "stop"), messages=messages))

        await go_on()  # first what an interrupted run left pending
        async for prompt in self.prompts(prompts):
            await harness.prompt(CONVERSATION, prompt)
            await go_on()
        if self.text_mode:
            self.show(self.say("session_saved", file=file))

    def show_message(self, message: Any) -> None:
        """Show one committed message of the durable conversation (its calls, results and text)."""
        if message.role == "assistant":
            for block in message.content:
                if getattr(block, "type", "") == "toolCall":
                    self.on_loop_event(_Event("tool_start", call=block))
            if self.pc.text_of(message):
                self.show(self.pc.text_of(message))
        elif message.role == "toolResult":
            self.on_loop_event(_Event("tool_end", result=message))

    async def with_runtime(self, prompts: list[str] | None) -> None:
        """13: the learner's Runtime over a JSONL session file; `run_mode` writes each answer."""
        pc = self.pc
        try:
            store = await pc.JsonlSessionStore.open(self.config["session_file"])
            entries = await store.entries()
        except ValueError as error:
            raise Stop(self.say("bad_session", file=self.config["session_file"], error=error), 2) from None
        # Resuming is choosing the branch that ends at the file's last entry; a new file has none.
        leaf = entries[-1].id if entries and self.config["resume"] else None
        shares = self.budget()
        budget = pc.ContextBudget(
            total=shares["max_tokens"],
            reserved_output=shares["reserved_output"],
            safety_margin=shares["safety_margin"],
            estimate_tokens=estimate_tokens,
        )
        registry = self.tools()
        resources = await self.resources()
        host = await self.extensions(registry)
        mcp = self.mcp_runtime(registry)
        # 17's Runtime asks its section providers before every prompt: the servers' list joins the system.
        providers: dict[str, Any] = {"section_providers": [mcp]} if mcp is not None else {}
        if host is not None:
            providers["extension_host"] = host  # its hooks wrap the Runtime's tool executor
        virtual, select = self.config["virtual_model"], self.config["select"]
        self.routing = "virtual_models" in self.features and (virtual is not None or select is not None)
        catalog = None
        if self.routing:
            # 18: the learner's hook reads the selection off the branch and asks their catalog before
            # every request; with no model_change on the branch, the virtual model (or the one model).
            catalog = self.catalog()
            routing = pc.create_virtual_model_routing(
                catalog, default_model_id=virtual or self.config["models"][0]
            )
            providers["prepare_request"] = routing.prepare_request
        runtime = await pc.create_runtime(
            pc.RuntimeConfig(active_leaf_id=leaf, context=budget, system_prompt=self.config["system_prompt"]),
            pc.RuntimeDeps(
                model=self.model_,
                tools=registry,
                session=store,
                resources=resources,
                create_id=lambda: uuid.uuid4().hex,
                now=lambda: time.time_ns() // 1_000_000,
                **providers,
            ),
        )
        runtime.control.subscribe(
            lambda event: self.on_loop_event(event.event) if event.type == "loop" else None
        )
        self.abort = runtime.control.abort
        learner_mode = self.config["runtime_modes"][self.mode]
        # A new session starts with the chapter's first entry, the selection; --select adds one anywhere.
        chosen = select or (virtual if leaf is None else None)
        if catalog is not None and chosen is not None:
            await pc.select_model(runtime, catalog, chosen)
            self.show(self.say("selected", model=chosen))
        try:
            if mcp is not None:
                await self.show_servers(mcp)
            async for prompt in self.prompts(prompts):
                self.running = True
                result = await self.steered(
                    pc.run_mode(runtime, learner_mode, prompt, Output()), runtime.control.steer
                )
                if self.text_mode:
                    print(flush=True)
                self.check_result(result)
        finally:
            await runtime.dispose()
            if mcp is not None:
                await mcp.close()  # the servers' processes end with the run
        if self.text_mode:
            self.show(self.say("session_saved", file=self.config["session_file"]))

    async def prompts(self, given: list[str] | None) -> AsyncIterator[str]:
        """The prompts of the command line, else one per line of stdin (rpc: one JSON request a line)."""
        if given is not None:
            for prompt in given:
                if self.config["show_prompts"]:
                    self.show(f"> {prompt}")
                yield prompt
            return
        while True:
            self.running = False
            if self.backlog:
                yield self.backlog.pop(0)
                continue
            if self.ended:
                return
            if self.text_mode and sys.stdin.isatty():
                print("> ", end="", flush=True)
            line = await self.next_line()
            if not line:
                return
            if self.mode == "rpc":
                try:
                    request = json.loads(line)
                except ValueError:
                    request = None
                asked = request.get("prompt") if isinstance(request, dict) else None
                if not isinstance(asked, str):
                    raise Stop(self.say("bad_rpc"), 2)
                yield asked
            elif line.strip():
                yield line.rstrip("\n")

    async def next_line(self) -> str:
        """The next line of stdin ("" at its end), from the read already in progress if there is one."""
        if self.pending is None:
            self.pending = asyncio.ensure_future(read_line())
        pending = self.pending  # shared: `steered` and a tool's question may both wait for this line
        try:
            return await asyncio.shield(pending)
        finally:
            if pending.done() and self.pending is pending:
                self.pending = None

    async def answer(self) -> str:
        """The answer to a tool's question: the next line, which `steered` leaves alone meanwhile."""
        self.asking = asyncio.get_running_loop().create_future()
        if self.steer_read is not None:
            self.steer_read.cancel()  # the read goes on (shielded): its line is this answer
        try:
            return await self.next_line()
        finally:
            self.asking.set_result(None)
            self.asking = None

    async def steered(self, answer: Awaitable[Any], steer: Callable[[str], None]) -> Any:
        """Await one prompt's answer. At a terminal, a line typed meanwhile goes to `steer` (the learner's
        `Agent.steer`, from 13 `RuntimeControl.steer`): the model reads it after the tool batch in
        progress, 09's rule. A line that can no longer steer (the turn has ended) is the next prompt."""
        run = asyncio.ensure_future(answer)
        while self.interactive and not self.ended and not run.done():
            if self.asking is not None:  # a tool asks: the line typed now is its answer
                await asyncio.wait({run, self.asking}, return_when=asyncio.FIRST_COMPLETED)
                continue
            reading = self.steer_read = asyncio.ensure_future(self.next_line())
            await asyncio.wait({run, reading}, return_when=asyncio.FIRST_COMPLETED)
            self.steer_read = None
            if reading.cancelled():  # a question began: its answer was taken there
                continue
            if not reading.done():
                reading.cancel()  # the read itself goes on (shielded) and serves the next prompt
                break
            line = reading.result()
            if not line:
                self.ended = True
            elif line.strip():
                try:
                    steer(line.rstrip("\n"))
                    self.show(self.say("steered", text=line.strip()))
                except RuntimeError:  # no run to steer any more: 09's refusal
                    self.backlog.append(line.rstrip("\n"))
        return await run


CONVERSATION = "run"


class _Event:
    """A loop-like event made from a committed durable message, for `on_loop_event`."""

    def __init__(self, type: str, **fields: Any) -> None:
        self.type = type
        self.__dict__.update(fields)


class _Ended:
    """How a durable prompt ended, shaped like a run's result for `check_result`."""

    def __init__(self, reason: str, messages: list[Any]) -> None:
        self.reason = "stop" if reason in ("toolUse", "length") else reason
        self.messages = messages


class _ParsedOnce:
    """A schema that lets a value its inner schema already parsed (a dataclass) through unchanged."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.json_schema = getattr(inner, "json_schema", None)

    def parse(self, value: object) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return value
        return self.inner.parse(value)


def parsed_once(tool: Any) -> Any:
    """The tool with a schema that accepts its own parsed parameters again."""
    return dataclasses.replace(tool, schema=_ParsedOnce(tool.schema))


def write_atomically(file: str, value: object) -> None:
    """Replace `file` with `value` as JSON in one rename: a crash leaves the old store or the new one."""
    temporary = f"{file}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, file)


async def read_line() -> str:
    """One line of stdin ("" at its end), read in a daemon thread so that Ctrl-C is heard meanwhile."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()

    def read() -> None:
        value = sys.stdin.readline()
        loop.call_soon_threadsafe(lambda: None if line.done() else line.set_result(value))

    threading.Thread(target=read, daemon=True).start()
    return await line


class Output:
    """`run_mode`'s sink: stdout, flushed at once."""

    def write(self, value: str) -> None:
        sys.stdout.write(value)
        sys.stdout.flush()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


#: The summary's JSON keys (the course's wire names) and CompactionSummary's fields, lists after `goal`.
SUMMARY_LISTS = {
    "constraints": "constraints",
    "completed": "completed",
    "decisions": "decisions",
    "changedFiles": "changed_files",
    "unresolved": "unresolved",
    "next": "next",
}


def describe(pc: Any, message: Any) -> str:
    """One message as a line of the transcript the model summarizes: its role, its text, its calls."""
    who = f"{message.role} {message.tool_name}" if message.role == "toolResult" else message.role
    line = f"[{who}] {pc.text_of(message)}"
    calls = [block for block in getattr(message, "content", []) if getattr(block, "type", "") == "toolCall"]
    for call in calls:
        line += f" [call {call.name} {json.dumps(call.arguments, ensure_ascii=False)}]"
    return line[:4000]


def summary_of(pc: Any, reply: str) -> Any:
    """The learner's CompactionSummary of the JSON the model replied (fenced or not); else ValueError."""
    text = reply.strip()
    if fence := re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL):
        text = fence.group(1)
    data = json.loads(text)  # json.JSONDecodeError is a ValueError
    if not isinstance(data, dict) or not isinstance(data.get("goal"), str):
        raise ValueError('no JSON object with a "goal" string')
    lists = {field: data.get(key, []) for key, field in SUMMARY_LISTS.items()}
    for key, field in SUMMARY_LISTS.items():
        if not isinstance(lists[field], list) or not all(isinstance(item, str) for item in lists[field]):
            raise ValueError(f'"{key}" is not a list of strings')
    return pc.CompactionSummary(goal=data["goal"], **lists)


def estimate_tokens(value: Any) -> float:
    """About four characters a token: enough for a budget check, no tokenizer needed."""
    text = value if isinstance(value, str) else json.dumps(value.to_dict(), ensure_ascii=False, default=str)
    return len(text) / 4 + 1


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    sys.path.insert(0, config["folder"])
    try:
        driver = Driver(config)
        asyncio.run(driver.main(config["prompts"]))
    except Stop as stop:
        print(stop.line, file=sys.stderr, flush=True)
        return stop.code
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(config["messages"]["interrupted"].format(session=""), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Exception as error:  # the learner's code failed: one line, never a traceback
        text = f"{type(error).__name__}: {error}"
        if stub := STUB.search(str(error)):
            marker = config["markers"].get(stub.group(1), "")
            line = config["messages"]["stub"].format(
                lab=stub.group(1), command=f"python -m pytest -m {marker}"
            )
            print(line, file=sys.stderr, flush=True)
            return EXIT_STUB
        print(config["messages"]["crashed"].format(error=text.splitlines()[0]), file=sys.stderr, flush=True)
        return EXIT_MODEL_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
