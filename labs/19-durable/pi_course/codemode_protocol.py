"""The messages between the host and a codemode worker process, and the prelude the worker runs first.

The worker is a separate Python process (`codemode_worker`) that talks to its host over its standard
streams, one JSON object a line. Tool arguments, tool results and the script's return value cross as
JSON strings: the worker only moves strings into and out of its QuickJS VM and never builds structured
values of its own. The host writes `CodemodeWorkerData` as the first line, then one
`HostToWorkerMessage` per finished tool call; the worker writes `WorkerToHostMessage`s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

#: The most `console.*` output one execution keeps: characters in all, and calls. The host keeps every
#: line until the script ends, so a printing loop without a cap would exhaust the host's memory; the
#: call cap covers a loop that prints empty strings.
MAX_OUTPUT_CHARS = 16 * 1024 * 1024
MAX_OUTPUT_ITEMS = 100_000


# One encoder for every message: json.dumps with options builds a new encoder on each call.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def compact_json(value: object) -> str:
    """JSON.stringify's compact form (raises TypeError or ValueError for what JSON cannot hold)."""
    return _COMPACT.encode(value)


@dataclass
class CodemodeToolInfo:
    """One tool as the script sees it: `tools.<name>(args)` and an entry of `ALL_TOOLS`."""

    name: str
    description: str

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {"name": self.name, "description": self.description}


@dataclass
class CodemodeWorkerData:
    """The first line the host writes: what one execution runs, and in how much memory."""

    #: An async function body: `return` and top-level `await` are allowed.
    code: str
    tools: list[CodemodeToolInfo]
    memory_limit_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The wire form, with the course's camelCase keys."""
        return {
            "code": self.code,
            "tools": [tool.to_dict() for tool in self.tools],
            "memoryLimitBytes": self.memory_limit_bytes,
        }


@dataclass
class WorkerToHostMessageCall:
    """The script called `tools.<name>(args)`; `args` is the argument's JSON, None for undefined."""

    id: int
    name: str
    args: str | None = None
    type: Literal["call"] = "call"

    def to_dict(self) -> dict[str, Any]:
        """The wire form, leaving out an undefined argument."""
        wire: dict[str, Any] = {"type": self.type, "id": self.id, "name": self.name}
        if self.args is not None:
            wire["args"] = self.args
        return wire


@dataclass
class WorkerToHostMessageOutput:
    """One `console.*` call, its arguments already joined into a line of text."""

    text: str
    type: Literal["output"] = "output"

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {"type": self.type, "text": self.text}


@dataclass
class WorkerToHostMessageDone:
    """The script settled: `value` is the returned JSON (None for undefined) when ok, else `error` is
    the JSON of `{name?, message, stack?}`."""

    ok: bool
    value: str | None = None
    error: str | None = None
    type: Literal["done"] = "done"

    def to_dict(self) -> dict[str, Any]:
        """The wire form: `value` only when ok and defined, `error` only when not ok."""
        wire: dict[str, Any] = {"type": self.type, "ok": self.ok}
        if self.ok and self.value is not None:
            wire["value"] = self.value
        if not self.ok:
            wire["error"] = self.error
        return wire


@dataclass
class WorkerToHostMessageCrash:
    """The VM or the worker failed outside the script's control (it could not even start, say)."""

    message: str
    type: Literal["crash"] = "crash"

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {"type": self.type, "message": self.message}


WorkerToHostMessage = (
    WorkerToHostMessageCall | WorkerToHostMessageOutput | WorkerToHostMessageDone | WorkerToHostMessageCrash
)


@dataclass
class HostToWorkerMessage:
    """A tool call finished: `payload` is the result's JSON when ok (None for undefined), else the error
    message the script's promise rejects with."""

    id: int
    ok: bool
    payload: str | None = None
    type: Literal["result"] = "result"

    def to_dict(self) -> dict[str, Any]:
        """The wire form, leaving out an undefined payload."""
        wire: dict[str, Any] = {"type": self.type, "id": self.id, "ok": self.ok}
        if self.payload is not None:
            wire["payload"] = self.payload
        return wire


ProtocolMessage = CodemodeWorkerData | WorkerToHostMessage | HostToWorkerMessage


def encode_message(message: ProtocolMessage) -> bytes:
    """One protocol line: the message's compact JSON and a newline, in UTF-8."""
    return (compact_json(message.to_dict()) + "\n").encode("utf-8")


def _decode(line: str | bytes) -> dict[str, Any] | None:
    """A JSON object from one line, or None for anything else."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_codemode_worker_data(line: str | bytes) -> CodemodeWorkerData | None:
    """The first line the worker reads, or None when it is not one."""
    wire = _decode(line)
    if (
        wire is None
        or not isinstance(code := wire.get("code"), str)
        or not isinstance(wire.get("tools"), list)
    ):
        return None
    tools = []
    for entry in wire["tools"]:
        if not isinstance(entry, dict) or not isinstance(name := entry.get("name"), str):
            return None
        tools.append(CodemodeToolInfo(name=name, description=_text(entry.get("description")) or ""))
    return CodemodeWorkerData(
        code=code, tools=tools, memory_limit_bytes=_integer(wire.get("memoryLimitBytes"))
    )


def parse_worker_to_host_message(line: str | bytes) -> WorkerToHostMessage | None:
    """A message from the worker, or None when the line is not one (the host ignores it)."""
    wire = _decode(line)
    if wire is None:
        return None
    kind = wire.get("type")
    if (
        kind == "call"
        and (call_id := _integer(wire.get("id"))) is not None
        and isinstance(wire.get("name"), str)
    ):
        return WorkerToHostMessageCall(id=call_id, name=wire["name"], args=_text(wire.get("args")))
    if kind == "output" and isinstance(wire.get("text"), str):
        return WorkerToHostMessageOutput(text=wire["text"])
    if kind == "done" and isinstance(wire.get("ok"), bool):
        if wire["ok"]:
            return WorkerToHostMessageDone(ok=True, value=_text(wire.get("value")))
        return WorkerToHostMessageDone(ok=False, error=_text(wire.get("error")) or "{}")
    if kind == "crash" and isinstance(wire.get("message"), str):
        return WorkerToHostMessageCrash(message=wire["message"])
    return None


def parse_host_to_worker_message(line: str | bytes) -> HostToWorkerMessage | None:
    """A message from the host, or None when the line is not one (the worker ignores it)."""
    wire = _decode(line)
    if wire is None or wire.get("type") != "result":
        return None
    call_id = _integer(wire.get("id"))
    if call_id is None or not isinstance(wire.get("ok"), bool):
        return None
    return HostToWorkerMessage(id=call_id, ok=wire["ok"], payload=_text(wire.get("payload")))


#: The name under which the worker hands its bridge function to the VM, for the prelude to take it away.
BRIDGE_GLOBAL = "__codemode_bridge"
#: The name of the VM's own function that the prelude calls before it reports how the script ended, and
#: takes away like the bridge: it gives the VM room to build the report when the script has used up its
#: memory limit.
HEADROOM_GLOBAL = "__codemode_headroom"
#: How much that room is, in bytes beyond the memory limit.
REPORT_HEADROOM_BYTES = 4 * 1024 * 1024

# The prelude is JavaScript that the worker evaluates in the fresh VM before the script. The VM is a
# separate engine in a separate process, so this is not a realm boundary: the prelude closes the host's
# bridge into a closure the script cannot reach, and builds `tools`, `ALL_TOOLS` and `console` on it.
#
# It evaluates to a function `(bridge, toolsJson) => control`, where the bridge is called as
# `bridge("call", id, name, argsJson)`, `bridge("output", text)` and `bridge("done", ok, json)`, and
# `control` is the one handle the worker keeps:
# - `control("run", code)` compiles the script as an async function body and starts it;
# - `control("settle", id, ok, payload)` settles one tool call;
# - `control("stalled")` reports a script that waits while no tool call is pending: with no timers and
#   no I/O in the VM, nothing could ever wake it.
#
# Reading a `tools.<name>` that does not exist throws a TypeError naming close names at once, instead of
# a later "not a function". Before it builds a report of how the script ended, the prelude calls the VM's
# `headroom` function (HEADROOM_GLOBAL): a script that ran out of memory is still reported as such.
PRELUDE_SOURCE = (
    r"""(function (bridge, toolsJson) {
  "use strict";
  const headroom = typeof globalThis.HEADROOM_GLOBAL === "function" ? globalThis.HEADROOM_GLOBAL : () => {};
  delete globalThis.HEADROOM_GLOBAL;
  // Our own references: the script may replace these globals once it runs.
  const toJson = JSON.stringify;
  const fromJson = JSON.parse;
  const then = Promise.prototype.then;
  const evaluate = eval;
  const BaseError = Error;
  const MissingTool = TypeError;
  const OverLimit = RangeError;
  const hasOwn = Object.prototype.hasOwnProperty;
  const PRELUDE_FRAME = /^\s*at (run|control) \(<input>:\d+\)$|^\s*at eval \(native\)$/;
  const waiting = new Map();
  let lastId = 0;
  let settled = false;
  let chars = 0;
  let items = 0;

  function report(ok, payload) {
    if (settled) return;
    settled = true;
    bridge("done", ok, payload);
  }

  function encode(value) {
    return value === undefined ? undefined : toJson(value);
  }

  function readable(error) {
    const head = error.message ? error.name + ": " + error.message : String(error.name);
    // The prelude's own frames (and the eval that compiled the script) are left out.
    const frames = typeof error.stack === "string"
      ? error.stack.split("\n").filter((line) => line.trim() !== "" && !PRELUDE_FRAME.test(line))
      : [];
    return [head].concat(frames).join("\n");
  }

  function show(value) {
    if (typeof value === "string") return value;
    if (value instanceof BaseError) return readable(value);
    try {
      const json = toJson(value);
      return json === undefined ? String(value) : json;
    } catch (_) {
      return String(value);
    }
  }

  function failure(error) {
    if (error instanceof BaseError) {
      return toJson({ name: error.name, message: error.message, stack: readable(error) });
    }
    return toJson({ message: show(error) });
  }

  function invoke(name) {
    return function (...args) {
      return new Promise((resolve, reject) => {
        let json;
        try {
          json = encode(args[0]);
        } catch (error) {
          reject(error);
          return;
        }
        lastId += 1;
        waiting.set(lastId, [resolve, reject]);
        bridge("call", lastId, name, json);
      });
    };
  }

  const table = Object.create(null);
  const listing = [];
  for (const entry of fromJson(toolsJson)) {
    if (hasOwn.call(table, entry.name)) continue;
    table[entry.name] = invoke(entry.name);
    listing.push(Object.freeze({ name: entry.name, description: entry.description }));
  }
  Object.freeze(table);
  Object.freeze(listing);
  const names = listing.map((entry) => entry.name);
  const squash = (name) => name.toLowerCase().replace(/[^a-z0-9]/g, "");

  function missing(property) {
    const wanted = squash(property);
    let close = names.filter((name) => squash(name) === wanted);
    if (close.length === 0 && wanted !== "") {
      close = names.filter((name) => squash(name).includes(wanted) || wanted.includes(squash(name)));
    }
    let message = "tools." + property + " does not exist.";
    if (close.length > 0) {
      message += " Did you mean " + close.slice(0, 5).map((name) => "tools." + name).join(", ") + "?";
    } else if (names.length <= 20) {
      message += " Available: " + names.join(", ") + ".";
    }
    return new MissingTool(message + " ALL_TOOLS lists every tool.");
  }

  const tools = new Proxy(table, {
    get(target, property, receiver) {
      const unknown = typeof property === "string" && !(property in target) &&
        !(property in Object.prototype) && property !== "then" && property !== "toJSON";
      if (unknown) throw missing(property);
      return Reflect.get(target, property, receiver);
    },
  });

  // Past the cap the script fails: done() reports it first, so a script that catches the error still
  // cannot print any further.
  function write(text) {
    if (settled) return;
    chars += text.length;
    items += 1;
    if (chars > MAX_OUTPUT_CHARS || items > MAX_OUTPUT_ITEMS) {
      const error = new OverLimit(
        "script output exceeded the limit of MAX_OUTPUT_CHARS characters or " +
          "MAX_OUTPUT_ITEMS console calls. Print a summary instead.",
      );
      report(false, failure(error));
      throw error;
    }
    bridge("output", text);
  }

  const levels = {};
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    levels[level] = (...values) => write(values.map(show).join(" "));
  }
  const console = Object.freeze(levels);

  Object.defineProperty(globalThis, "tools", { value: tools, enumerable: true });
  Object.defineProperty(globalThis, "ALL_TOOLS", { value: listing, enumerable: true });
  Object.defineProperty(globalThis, "console", { value: console, enumerable: true });

  function settle(id, ok, payload) {
    const entry = waiting.get(id);
    if (entry === undefined) return;
    waiting.delete(id);
    if (!ok) {
      entry[1](new BaseError(payload));
      return;
    }
    let value;
    try {
      value = payload == null ? undefined : fromJson(payload);
    } catch (error) {
      entry[1](error);
      return;
    }
    entry[0](value);
  }

  function run(code) {
    let body;
    let running;
    try {
      // The body shares its first line with the wrapper, so reported lines are the script's own.
      body = evaluate("(async function (tools, console) {" + code + "\n})");
      running = body(tools, console);
    } catch (error) {
      headroom();
      report(false, failure(error));
      return;
    }
    then.call(
      running,
      (value) => {
        headroom();
        let json;
        try {
          json = encode(value);
        } catch (error) {
          report(false, failure(error));
          return;
        }
        report(true, json);
      },
      (error) => {
        headroom();
        report(false, failure(error));
      },
    );
  }

  function stalled() {
    if (settled || waiting.size > 0) return false;
    headroom();
    report(false, toJson({
      name: "Error",
      message: "The script is waiting on a promise that can never settle: no tool call is pending, " +
        "and timers do not exist here.",
    }));
    return true;
  }

  return function control(command, first, second, third) {
    if (command === "run") return run(first);
    if (command === "settle") return settle(first, second, third);
    if (command === "stalled") return stalled();
    return undefined;
  };
})""".replace("MAX_OUTPUT_CHARS", str(MAX_OUTPUT_CHARS))
    .replace("MAX_OUTPUT_ITEMS", str(MAX_OUTPUT_ITEMS))
    .replace("HEADROOM_GLOBAL", HEADROOM_GLOBAL)
)
