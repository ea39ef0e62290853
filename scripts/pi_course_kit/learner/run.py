"""`pi-course run`: run the learner's own `pi_course` as an agent against an OpenAI-compatible model.

The kit never imports the learner's package: it works out what the folder's checkpoint can run (the
`run = [...]` words of its lineage in course.toml), the endpoint (flags, the environment, the folder's
`.env`) and the workspace, then starts `run_driver.py` in the folder's interpreter and waits for it.
With no endpoint configured the run is offline, and says so: a local server replays the course's
recorded session (`[run]` in course.toml) through the learner's own transport and adapter.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import META_DIR, PracticeFolder, open_folder
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.learner import run_server

BASE_URL_ENV = "OPENAI_COMPATIBLE_BASE_URL"
API_KEY_ENV = "OPENAI_COMPATIBLE_API_KEY"
MODEL_ENV = "OPENAI_COMPATIBLE_MODEL"
DRIVER = Path(__file__).with_name("run_driver.py")
#: The kit's output modes, and the feature a checkpoint needs for each.
MODES = ("text", "json", "rpc")
#: What each word of `run = [...]` lets a run do, for the line that says which checkpoint brings it.
FEATURES = {
    "chat": "a streamed chat turn through your provider adapter",
    "tools": "the coding tools in a workspace",
    "agent": "the stateful Agent",
    "runtime": "the Runtime with a session file and the output modes json and rpc",
    "compaction": "a context built within a token budget, compacted into a summary when it overflows",
    "resources": "the workspace's resources (AGENTS.md, templates/, skills/) in the system prompt",
    "tool_search": "tool_search, which loads deferred tools when the model asks",
    "codemode": "codemode, which runs the model's scripts over the tools",
    "mcp": "an MCP client, to start the servers a config file lists",
    "virtual_models": "a catalog of models and a virtual model that routes between them",
}
#: The default token budget of one model request (--context-tokens), and the least one that leaves room.
CONTEXT_TOKENS, LEAST_CONTEXT_TOKENS = 128_000, 200
#: What a server entry of the --mcp file may say (the `mcpServers` shape MCP clients share; stdio only).
MCP_KEYS = ("command", "args", "env", "exposure", "type")
#: How a server's tools join the registry: declared at once, or found and loaded through tool_search.
MCP_EXPOSURES = ("direct", "deferred")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the prompt, the endpoint, the workspace and the mode."""
    parser.add_argument("prompt", nargs="*", help=_("what to ask (default: one prompt per line of input)"))
    parser.add_argument(
        "--base-url", help=_("the OpenAI-compatible base URL (default: ${env})").format(env=BASE_URL_ENV)
    )
    parser.add_argument(
        "--model",
        help=_(
            "the model's name (default: ${env}); from the virtual models on, several names separated by "
            "commas, between which a virtual model routes"
        ).format(env=MODEL_ENV),
    )
    parser.add_argument(
        "--select",
        metavar="ID",
        help=_(
            "put a model_change selecting ID on the session's branch: one of the --model names, or the "
            "virtual model (from the virtual models on)"
        ),
    )
    parser.add_argument(
        "--api-key-env",
        default=API_KEY_ENV,
        metavar="NAME",
        help=_("the environment variable (or .env entry) holding the API key (default: {env})").format(
            env=API_KEY_ENV
        ),
    )
    parser.add_argument("--workspace", help=_("the folder the coding tools work in (default: workspace/)"))
    parser.add_argument("--mode", choices=MODES, default="text", help=_("how answers are written"))
    parser.add_argument(
        "--resume",
        metavar="FILE",
        help=_("go on with a session file an earlier run saved (from the Runtime on)"),
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help=_("commit every step to a file before showing it, so --resume goes on after a crash"),
    )
    parser.add_argument(
        "--context-tokens",
        type=_context_tokens,
        metavar="N",
        help=_(
            "the token budget of each request's context (default {default}); a small one shows your "
            "compaction at work (from the context builder on)"
        ).format(default=CONTEXT_TOKENS),
    )
    parser.add_argument(
        "--mcp",
        metavar="FILE",
        help=_(
            "start the MCP servers a JSON file lists, "
            '{"mcpServers": {"NAME": {"command": ..., "args": [...]}}}, '
            "and give the agent their tools (from the MCP client on)"
        ),
    )
    parser.add_argument(
        "--extension",
        action="append",
        metavar="FILE",
        help=_(
            "load the extension FILE (a .py file with a default(context) factory) through your extension "
            "host; naming it here is the trust gate's yes, since its code runs as you (from the Runtime on; "
            "may be repeated)"
        ),
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help=_("run the tools that ask first (course.toml [run] ask) without asking"),
    )


def _context_tokens(value: str) -> int:
    """argparse's type for --context-tokens: a whole number of tokens, enough to hold a request."""
    try:
        tokens = int(value)
    except ValueError:
        tokens = 0
    if tokens < LEAST_CONTEXT_TOKENS:
        raise argparse.ArgumentTypeError(
            _("{value!r} is not a number of tokens of at least {least}").format(
                value=value, least=LEAST_CONTEXT_TOKENS
            )
        )
    return tokens


def read_dotenv(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines of a `.env` file (comments, `export ` and quotes allowed); {} when there is none."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def run_table(course: Course) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """course.toml's `[run]` table, and each checkpoint's own `run = [...]` words."""
    with course.path.open("rb") as handle:
        data = tomllib.load(handle)
    table = data.get("run")
    if not isinstance(table, dict):
        raise KitError(
            _("{path} has no [run] table: this course does not say what `pi-course run` can do").format(
                path=course.path
            )
        )
    own = {str(entry.get("id")): tuple(entry.get("run", ())) for entry in data.get("checkpoints", [])}
    return table, own


def lineage_features(course: Course, checkpoint: Checkpoint, own: dict[str, tuple[str, ...]]) -> list[str]:
    """The run words of a checkpoint and every ancestor, oldest first."""
    chain: list[Checkpoint] = []
    current: Checkpoint | None = checkpoint
    while current is not None:
        chain.insert(0, current)
        current = course.checkpoint(current.parent) if current.parent else None
    return [word for ancestor in chain for word in own.get(ancestor.id, ())]


def first_with(course: Course, own: dict[str, tuple[str, ...]], word: str) -> Checkpoint | None:
    """The first checkpoint of the course whose lineage has `word`."""
    return next((c for c in course.checkpoints if word in lineage_features(course, c, own)), None)


def workspace_for(folder: PracticeFolder, chosen: str | None, default: str) -> Path:
    """The workspace: inside or beside the folder, never the folder itself, its package or its tests."""
    workspace = (Path(chosen) if chosen else folder.root / default).expanduser().resolve()
    guarded = [folder.root / name for name in (*sorted(folder.packages), "tests", META_DIR)]
    for place in guarded:
        place = place.resolve()
        if workspace == place or place.is_relative_to(workspace) or workspace.is_relative_to(place):
            raise KitError(
                _(
                    "the workspace {path} would let the tools change {guarded}; choose another with "
                    "--workspace"
                ).format(path=workspace, guarded=folder.relative(place))
            )
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace


def driver_messages() -> dict[str, str]:
    """Every line the driver may print, in the run's language (the driver has no catalog of its own)."""
    return {
        "stub": _("Lab {lab} not implemented: finish it first; `{command}` tests it"),
        "refused_key": _(
            "the server refused the API key (HTTP {status}): check {variable}, in the environment or .env"
        ),
        "not_found": _(
            "the server knows no model {model!r} at {url} (HTTP 404): check --model or the base URL"
        ),
        "http_status": _("the server at {url} answered HTTP {status}: try again, or check the endpoint"),
        "unreachable": _("cannot reach {url}: check --base-url and that the server is running"),
        "dropped": _("the server at {url} closed the stream before the reply was complete: try again"),
        "model_error": _("the model request failed: {message}"),
        "crashed": _("your pi_course stopped with {error}; run `pi-course check` to find which lab"),
        "interrupted": _("interrupted{session}"),
        "session_kept": _("; the session is kept in {file}"),
        "session_saved": _("session saved in {file}"),
        "ask": _("run {tool} {arguments}? [y/N]"),
        "denied": _("the user did not allow this call"),
        "denied_rpc": _("not run: rpc mode cannot ask before a call; pass --yes to allow it"),
        "bad_session": _("the session file {file} cannot be resumed: {error}"),
        "bad_rpc": _('rpc mode reads one JSON object per line, e.g. {{"prompt": "..."}}'),
        "mcp_connected": _("MCP server {name}: connected; tools: {tools}"),
        "mcp_failed": _("MCP server {name} did not connect: {error}; the run goes on without its tools"),
        "resources": _("resources from {root}: {names}"),
        "bad_resources": _("the resources in {root} cannot be read: {error}"),
        "steered": _("steering: {text} (the model reads it once the tools running now are done)"),
        "compacted": _("compacted: {count} earlier messages became a summary in the session file"),
        "extension_loaded": _("extension {id}: loaded through your trust gate; tools: {tools}"),
        "extension_failed": _("the extension {file} cannot be loaded: {error}"),
        "extension_hook": _("extension {id}: its {hook} hook failed ({kind}): {message}"),
        "selected": _(
            "selected {model}: a model_change on the session's branch; each reply says where it went"
        ),
        "dispatched": _("→ dispatched to {model}"),
        "not_compacted": _(
            "not compacted: the model's summary was not the JSON asked for; "
            "this turn keeps what fits the budget"
        ),
    }


def mcp_servers(file: str) -> list[dict[str, Any]]:
    """The servers of an `--mcp` file, each as the driver takes it; one line saying what is wrong if not."""
    path = Path(file).expanduser()

    def wrong(what: str) -> KitError:
        return KitError(
            _("{file}: {what}; see `pi-course run --help` for the shape").format(file=path, what=what)
        )

    if not path.is_file():
        raise KitError(_("no MCP config file {file}").format(file=path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:  # its words are English: only where it stopped is shown
        raise wrong(
            _("not valid JSON (line {line}, column {column})").format(line=error.lineno, column=error.colno)
        ) from None
    except (OSError, UnicodeDecodeError):
        raise wrong(_("cannot be read as UTF-8 text")) from None
    listed = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(listed, dict) or not listed:
        raise wrong(_('no "mcpServers" object naming at least one server'))
    servers: list[dict[str, Any]] = []
    for name, entry in listed.items():
        if not isinstance(entry, dict):
            raise wrong(_("server {name!r} is not an object").format(name=name))
        unknown = sorted(set(entry) - set(MCP_KEYS))
        if unknown:
            raise wrong(
                _("server {name!r} has unknown keys {keys} (known: {known})").format(
                    name=name, keys=", ".join(unknown), known=", ".join(MCP_KEYS)
                )
            )
        command, args = entry.get("command"), entry.get("args", [])
        env, exposure = entry.get("env", {}), entry.get("exposure", "deferred")
        if entry.get("type", "stdio") != "stdio":
            raise wrong(_("server {name!r}: only stdio servers can be started here").format(name=name))
        if not isinstance(command, str) or not command:
            raise wrong(_('server {name!r} needs a "command" string').format(name=name))
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise wrong(_('server {name!r}: "args" must be a list of strings').format(name=name))
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise wrong(_('server {name!r}: "env" must map names to strings').format(name=name))
        if exposure not in MCP_EXPOSURES:
            raise wrong(
                _('server {name!r}: "exposure" must be one of {choices}').format(
                    name=name, choices=", ".join(MCP_EXPOSURES)
                )
            )
        servers.append({"name": name, "command": command, "args": args, "env": env, "exposure": exposure})
    return servers


def extension_files(files: Sequence[str], *, durable: bool) -> list[dict[str, str]]:
    """The `--extension` files as the driver loads them (an id, the file's stem, and its absolute path)."""
    if files and durable:
        raise KitError(
            _("--durable runs the durable harness, which has no extension host: leave out --extension")
        )
    extensions: list[dict[str, str]] = []
    for file in files:
        path = Path(file).expanduser().resolve()
        if not path.is_file() or path.suffix != ".py":
            raise KitError(
                _("no extension file {file}: name a .py file with a default(context) factory").format(
                    file=path
                )
            )
        if any(entry["id"] == path.stem for entry in extensions):
            raise KitError(_("two extensions are named {id}: rename one of the files").format(id=path.stem))
        extensions.append({"id": path.stem, "path": str(path)})
    return extensions


def session_for(folder: PracticeFolder, features: Sequence[str], args: argparse.Namespace) -> str | None:
    """The run's session file (the session store's JSONL from 10 on, or with --durable the harness's
    store): the one `--resume` names, else a new one under .pi-course/sessions."""
    if args.durable and "durable" not in features:
        raise KitError(_("--durable needs the durable harness, which this checkpoint does not have yet"))
    if "session" not in features:
        if args.resume:
            raise KitError(_("--resume needs a session file, which this checkpoint does not have yet"))
        return None
    if args.resume:
        file = Path(args.resume).expanduser().resolve()
        if not file.is_file():
            raise KitError(
                _("no session file {file}: name one that an earlier `pi-course run` saved").format(file=file)
            )
        return str(file)
    sessions = folder.root / META_DIR / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return str(sessions / (f"durable-{stamp}.json" if args.durable else f"session-{stamp}.jsonl"))


def offline_kind(features: Sequence[str]) -> str:
    """Which recording an offline run plays: the coding session where there are tools, else the chat."""
    return "coding" if "tools" in features else "chat"


@dataclass(frozen=True)
class Endpoint:
    """Where the run's requests go: a live server, or the local replay server when offline."""

    base_url: str
    #: The names the model requests carry: one, or from the virtual models on, several.
    models: list[str]
    #: The driver's extra environment: the API key under the variable the run names.
    secret_env: dict[str, str]
    offline: bool


def model_names(value: str) -> list[str]:
    """The names of `--model` (or its variable): one, or several separated by commas, each once."""
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise KitError(_("--model {value!r} has an empty name between its commas").format(value=value))
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise KitError(_("--model names {names} more than once").format(names=", ".join(twice)))
    return names


def endpoint(
    args: argparse.Namespace, folder: PracticeFolder, table: dict[str, Any], features: Sequence[str]
) -> Endpoint:
    """A live endpoint from the flags, the environment and .env; offline (no base URL yet) without one."""
    dotenv = read_dotenv(folder.root / ".env")

    def setting(flag: str | None, name: str) -> str:
        return flag or os.environ.get(name) or dotenv.get(name, "")

    base_url = setting(args.base_url, BASE_URL_ENV)
    if base_url:
        model = setting(args.model, MODEL_ENV)
        key = os.environ.get(args.api_key_env) or dotenv.get(args.api_key_env, "")
        if not model:
            raise KitError(
                _("no model named: set {env} (in the environment or .env) or pass --model").format(
                    env=MODEL_ENV
                )
            )
        if not key:
            raise KitError(
                _(
                    "no API key in {env}: set it in the environment or .env, or name another variable with "
                    "--api-key-env"
                ).format(env=args.api_key_env)
            )
        return Endpoint(base_url, model_names(model), {args.api_key_env: key}, offline=False)
    # Offline from the virtual models on, the recording plays under several names, so that the routing
    # shows (the durable harness asks one model).
    several = "virtual_models" in features and not args.durable
    names = [str(name) for name in table.get("offline_models", ())] if several else []
    return Endpoint("", names or ["recorded"], {args.api_key_env: "offline"}, offline=True)


@contextmanager
def served(chosen: Endpoint, table: dict[str, Any], features: Sequence[str]) -> Iterator[Endpoint]:
    """The endpoint itself when live; offline, with the base URL of a replay server that runs for the
    block."""
    if not chosen.offline:
        yield chosen
        return
    recording = table.get(f"offline_{offline_kind(features)}", [])
    with run_server.replaying(list(run_server.recorded_replies(recording))) as server:
        print(
            _(
                "offline: a recorded session replayed through your own pi_course by a local server; to go "
                "live, set {base}, {key} and {model} (in the environment or .env) or pass --base-url and "
                "--model"
            ).format(base=BASE_URL_ENV, key=API_KEY_ENV, model=MODEL_ENV),
            file=sys.stderr,
            flush=True,
        )
        yield dataclasses.replace(chosen, base_url=server.base_url)


def _missing(
    course: Course, checkpoint: Checkpoint, own: dict[str, tuple[str, ...]], needed: str, flag: str
) -> int:
    """Say that `pi-course run{flag}` needs the feature `needed`, and which checkpoint brings it; exit 2."""
    bringer = first_with(course, own, needed)
    where = (
        _("checkpoint {id} ({title}) brings it: `pi-course practice {id} DIR{source}`").format(
            id=bringer.id,
            title=bringer.shown_title,
            source=" --from ." if bringer.parent == checkpoint.id else "",
        )
        if bringer
        else _("no checkpoint of this course brings it")
    )
    print(
        _("`pi-course run{mode}` needs {what}, which checkpoint {here} does not have yet; {where}").format(
            mode=flag, what=_(FEATURES[needed]), here=checkpoint.id, where=where
        ),
        file=sys.stderr,
    )
    return 2


def run(args: argparse.Namespace) -> int:
    """Check what the folder can run, then start the driver in the folder's interpreter and wait for it."""
    folder = open_folder()
    course, checkpoint = folder.made_from()
    table, own = run_table(course)
    features = lineage_features(course, checkpoint, own)
    # (the feature a run needs, the flag that asks for it)
    needs = [("chat", "")] if args.mode == "text" else [("runtime", f" --mode {args.mode}")]
    if args.mcp:
        needs.append(("mcp", " --mcp"))
    if args.context_tokens is not None:
        needs.append(("compaction", " --context-tokens"))
    if args.select is not None:
        needs.append(("virtual_models", " --select"))
    if args.extension:
        needs.append(("runtime", " --extension"))
    for needed, flag in needs:
        if needed not in features:
            return _missing(course, checkpoint, own, needed, flag)
    servers = mcp_servers(args.mcp) if args.mcp else []
    extensions = extension_files(args.extension or [], durable=bool(args.durable))
    workspace = workspace_for(folder, args.workspace, str(table.get("workspace", "workspace")))
    session_file = session_for(folder, features, args)
    chosen = endpoint(args, folder, table, features)
    if len(chosen.models) > 1 and "virtual_models" not in features:
        return _missing(course, checkpoint, own, "virtual_models", " --model A,B")
    virtual = routed_models(table, chosen.models, args)
    with served(chosen, table, features) as chosen:
        # rpc reads its requests from stdin; otherwise offline with no prompt asks the recorded one.
        recorded = chosen.offline and args.mode != "rpc" and not args.prompt
        prompts = (
            [str(table.get(f"offline_{offline_kind(features)}_prompt", ""))]
            if recorded
            else (list(args.prompt) or None)
        )
        config = {
            "package": course.package,
            "folder": str(folder.root),
            "features": features,
            "base_url": chosen.base_url,
            "model": ", ".join(chosen.models),
            "models": chosen.models,
            "virtual_model": virtual,
            "select": args.select,
            "api_key_env": args.api_key_env,
            "workspace": str(workspace),
            "ask": list(table.get("ask", ())),
            "yes": bool(args.yes),
            "system_prompt": str(table.get("system_prompt", "")),
            "prompts": prompts,
            "show_prompts": recorded,
            "mode": args.mode,
            "runtime_modes": dict(table.get("runtime_modes", {})),
            "session_file": session_file,
            "resume": bool(args.resume),
            "durable": bool(args.durable),
            "replay_safe": list(table.get("replay_safe", ())),
            "mcp_servers": servers,
            "extensions": extensions,
            "extension_hook_timeout_ms": int(table.get("extension_hook_timeout_ms", 5000)),
            "context_tokens": args.context_tokens or CONTEXT_TOKENS,
            "compaction_prompt": str(table.get("compaction_prompt", "")),
            "markers": {lab.id: lab.marker for lab in checkpoint.tree_labs},
            "messages": driver_messages(),
        }
        return launch(folder.root, config, chosen.secret_env)


def routed_models(table: dict[str, Any], models: list[str], args: argparse.Namespace) -> str | None:
    """The virtual model that routes between several models (None for one), once `--select` is checked."""
    virtual = str(table.get("virtual_model", "auto")) if len(models) > 1 else None
    if args.durable and (virtual is not None or args.select is not None):
        raise KitError(
            _("--durable asks one model for every request: name one with --model, and no --select")
        )
    if virtual in models:
        raise KitError(
            _("--model names {id}, which is the virtual model's id here: rename that model").format(
                id=virtual
            )
        )
    choices = [*models, *([virtual] if virtual else [])]
    if args.select is not None and args.select not in choices:
        raise KitError(
            _("--select {id} is not a model of this run: choose one of {choices}").format(
                id=args.select, choices=", ".join(choices)
            )
        )
    return virtual


def launch(root: Path, config: dict[str, Any], secret_env: dict[str, str]) -> int:
    """Run the driver in the folder's interpreter (its folder first on sys.path); the key only in its env."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update(secret_env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="pi-course-run-") as tmp:
        config_file = Path(tmp) / "run.json"
        config_file.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
        # -P: the driver's own folder is not put on sys.path; the driver puts the practice folder first.
        child = subprocess.Popen([sys.executable, "-P", str(DRIVER), str(config_file)], cwd=root, env=env)
        interrupts = 0
        while True:
            try:
                code = child.wait()
            except KeyboardInterrupt:
                # The terminal sent Ctrl-C to the driver too: it aborts the learner's run and says so. A
                # third one stops a driver that cannot hear it (learner code spinning without awaiting).
                interrupts += 1
                if interrupts >= 3:
                    child.kill()
                continue
            if code < 0:  # killed: the driver could not say so itself
                print(_("interrupted{session}").format(session=""), file=sys.stderr)
                return 130
            return code
