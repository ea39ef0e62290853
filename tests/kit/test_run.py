"""`pi-course run`: the learner's own pi_course as an agent, against a real HTTP server on 127.0.0.1.

The server is the focused tests' own `tests/focused/sse_server.py` (a real asyncio HTTP server that
streams each scripted reply in the chunks a test chooses, can hold or drop a connection, and records every
request), run on an event loop of its own in a thread, since the learner's code runs in another process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from learner_support import CLI, make_folder, snapshot, solve
from pi_course_kit.core.manifest import Course

KEY = "sk-test-7c1f9e-never-shown"
FOCUSED = Path(__file__).resolve().parents[1] / "focused"


def _load_sse() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_sse_server", FOCUSED / "sse_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


sse = _load_sse()


@contextmanager
def serving(*replies: Any) -> Iterator[Any]:
    """The focused tests' SSE server on its own loop in a thread, for the block."""
    ready: list[Any] = []
    started = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        async with sse.sse_server(*replies) as server:
            ready.append(server)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30), "the SSE server did not start"
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def tool_reply(number: int, name: str, arguments: dict[str, Any]) -> Any:
    """A reply of one tool call whose arguments arrive in three pieces, the events cut across reads."""
    text = json.dumps(arguments, ensure_ascii=False)
    third = len(text) // 3
    payloads: list[object] = [
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": f"call_{number}", "type": "function", "function": {"name": name}}
                ]
            }
        )
    ]
    for piece in (text[:third], text[third : 2 * third], text[2 * third :]):
        payloads.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    payloads += [
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    payloads.append("[DONE]")
    return sse.Reply(sse.split_in_half(payloads))


def text_reply(text: str) -> Any:
    half = len(text) // 2
    payloads: list[object] = [
        chunk({"content": text[:half]}),
        chunk({"content": text[half:]}),
        chunk({}, "stop"),
    ]
    return sse.Reply([sse.sse_event(p) for p in [*payloads, "[DONE]"]])


def run_pi(folder: Path, args: Sequence[str], env: dict[str, str] | None = None, stdin: str = "") -> Any:
    """`pi-course --lang en run ARGS` in `folder`, with no endpoint of the machine's own in the
    environment."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("OPENAI_COMPATIBLE_") and k != "PYTHONPATH"
    }
    return subprocess.run(
        [*CLI, "--lang", "en", "run", *args],
        cwd=folder,
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )


def interrupt_run(
    folder: Path, args: Sequence[str], env: dict[str, str], ready: Callable[[], bool], presses: int = 1
) -> tuple[int, str, str]:
    """Start `pi-course --lang en run ARGS` in its own process group, wait until `ready()`, then press
    Ctrl-C `presses` times (to the whole group, as a terminal does); (exit code, stdout, stderr).

    Whatever fails, the group is killed at the end: a driver left spinning would eat a core for good.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_COMPATIBLE_")}
    child = subprocess.Popen(
        [*CLI, "--lang", "en", "run", *args],
        cwd=folder,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for _ in range(600):
            if ready():
                break
            time.sleep(0.1)
        assert ready(), "the run never got to the point where Ctrl-C is pressed"
        for _ in range(presses):
            time.sleep(0.5)  # let the first event arrive, or the handler see the press before
            os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=60)
        return child.returncode, out, err
    finally:
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)


def live(server: Any) -> dict[str, str]:
    return {
        "OPENAI_COMPATIBLE_BASE_URL": server.url("/v1"),
        "OPENAI_COMPATIBLE_MODEL": "test-model",
        "OPENAI_COMPATIBLE_API_KEY": KEY,
    }


def solved(course: Course, checkpoint_id: str, dest: Path) -> Path:
    """A practice folder whose pi_course is the checkpoint's solution (a learner who finished)."""
    checkpoint = course.checkpoint(checkpoint_id)
    folder = make_folder(course, checkpoint, dest)
    solve(course, checkpoint, folder)
    return folder


def assert_one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("checkpoint_id", "durable"), [("08", []), ("13", []), ("19", []), ("19", ["--durable"])]
)
def test_the_learners_code_reads_edits_and_runs_through_a_streaming_server(
    real_course: Course, tmp_path: Path, checkpoint_id: str, durable: list[str]
) -> None:
    """Does the learner's own code drive read, edit and a command through a real SSE server, key kept
    secret?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    (folder / "workspace").mkdir()
    (folder / "workspace" / "notes.py").write_text('print("draft")\n', encoding="utf-8")
    kit_before = snapshot(folder / "pi_course") | snapshot(folder / "tests")
    replies = [
        tool_reply(1, "read", {"path": "notes.py"}),
        tool_reply(2, "edit", {"path": "notes.py", "oldText": "draft", "newText": "最终版"}),
        tool_reply(3, "bash", {"command": "python3 notes.py"}),
        text_reply("改好了：notes.py 现在打印 最终版。"),
    ]
    with serving(*replies) as server:
        done = run_pi(folder, [*durable, "--yes", "把 draft 改成 最终版 并运行"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert (folder / "workspace" / "notes.py").read_text(encoding="utf-8") == 'print("最终版")\n'
    assert "改好了：notes.py 现在打印 最终版。" in done.stdout
    assert len(requests) == 4
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in requests)
    last = requests[-1].json()
    assert last["model"] == "test-model" and {t["function"]["name"] for t in last["tools"]} >= {
        "read",
        "bash",
    }
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["name"] for m in tool_messages] == ["read", "edit", "bash"]
    assert "draft" in tool_messages[0]["content"] and "最终版" in tool_messages[2]["content"]
    assert KEY not in done.stdout + done.stderr
    assert snapshot(folder / "pi_course") | snapshot(folder / "tests") == kit_before
    sessions = sorted((folder / ".pi-course" / "sessions").glob("*.json*"))
    if checkpoint_id == "08":
        assert sessions == []
    elif durable:
        [file] = sessions
        store = json.loads(file.read_text(encoding="utf-8"))
        assert KEY not in json.dumps(store, ensure_ascii=False)
        assert {task["status"] for task in store["tasks"].values()} == {"completed"}
        roles = [entry["entry"]["message"]["role"] for entry in store["entries"].values()]
        assert roles.count("toolResult") == 3
    else:
        assert len(sessions) == 1 and sessions[0].suffix == ".jsonl"
        text = sessions[0].read_text(encoding="utf-8")
        assert KEY not in text
        entries = [json.loads(line) for line in text.splitlines()]
        assert any(e.get("message", {}).get("role") == "toolResult" for e in entries)


def test_the_bash_tool_never_sees_the_key(real_course: Course, tmp_path: Path) -> None:
    """Can a command the model runs read the API key from its environment (it must not)?"""
    folder = solved(real_course, "09", tmp_path / "practice")
    replies = [tool_reply(1, "bash", {"command": "env; echo done"}), text_reply("看过了。")]
    with serving(*replies) as server:
        done = run_pi(folder, ["--yes", "看看环境变量"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    [result] = [m for m in requests[1].json()["messages"] if m["role"] == "tool"]
    assert "done" in result["content"] and "PATH=" in result["content"]
    assert KEY not in result["content"] and KEY not in done.stdout + done.stderr


def test_a_chat_turn_at_05_streams_the_reply_configured_from_dotenv(
    real_course: Course, tmp_path: Path
) -> None:
    """At 05, is one streamed turn answered, with the endpoint, model and key taken from the folder's .env?"""
    folder = solved(real_course, "05", tmp_path / "practice")
    with serving(text_reply("你好，我是流式回复。")) as server:
        (folder / ".env").write_text(
            "\n".join(f"{k}={v}" for k, v in live(server).items()) + "\n", encoding="utf-8"
        )
        done = run_pi(folder, ["你好"])
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "你好，我是流式回复。"
    assert len(requests) == 1 and "tools" not in requests[0].json()
    assert requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            sse.Reply([b'{"error": "bad key"}'], status=401, content_type="application/json"),
            "refused the API key",
        ),
        (sse.Reply([b'{"error": "no such model"}'], status=404, content_type="application/json"), "no model"),
        (None, "cannot reach"),
    ],
    ids=["401", "404", "refused"],
)
def test_a_failing_endpoint_is_one_line_to_act_on(
    real_course: Course, tmp_path: Path, reply: Any, expected: str
) -> None:
    """Is a refused key, an unknown model or a wrong URL one line saying what to check, with no traceback?"""
    folder = solved(real_course, "05", tmp_path / "practice")
    with serving(*([reply] if reply else [])) as server:
        env = live(server)
        if reply is None:
            env["OPENAI_COMPATIBLE_BASE_URL"] = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        done = run_pi(folder, ["hi"], env=env)
    assert done.returncode == 1
    line = assert_one_line(done.stderr)
    assert expected in line and KEY not in done.stdout + done.stderr


def test_a_dropped_stream_is_one_line(real_course: Course, tmp_path: Path) -> None:
    """When the server drops the connection mid-reply, is that one line, with no traceback?"""
    folder = solved(real_course, "05", tmp_path / "practice")
    reply = sse.Reply([sse.sse_event(chunk({"content": "半句"})), sse.DROP])
    with serving(reply) as server:
        done = run_pi(folder, ["hi"], env=live(server))
    assert done.returncode == 1
    assert "closed the stream" in assert_one_line(done.stderr)


def test_a_stub_lab_names_the_lab_and_its_test_command(real_course: Course, tmp_path: Path) -> None:
    """At 09's starter, does run stop at the first stub with `Lab 9.2 not implemented` and its marker's
    command?"""
    folder = make_folder(real_course, real_course.checkpoint("09"), tmp_path / "practice")
    done = run_pi(folder, ["--yes"])
    assert done.returncode == 3
    line = done.stderr.splitlines()[-1]
    assert "Lab 9.2 not implemented" in line and "python -m pytest -m lab9_2" in line
    assert "Traceback" not in done.stderr


def test_a_stub_inside_a_tool_stops_the_run_at_that_lab(real_course: Course, tmp_path: Path) -> None:
    """When the write tool's lab is a stub again, does the run stop there with that lab's line, not go on?"""
    folder = solved(real_course, "08", tmp_path / "practice")
    reset = subprocess.run(
        [*CLI, "--lang", "en", "reset", "8.3"], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert reset.returncode == 0, reset.stderr
    done = run_pi(folder, ["--yes"])
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1].startswith("Lab 8.3 not implemented")
    assert "· read" not in done.stdout  # the model was not asked again after the stub


def test_before_05_it_names_the_checkpoint_that_brings_a_model(real_course: Course, tmp_path: Path) -> None:
    """At 04, does run say in one line what is missing and that checkpoint 05 brings it?"""
    folder = make_folder(real_course, real_course.checkpoint("04"), tmp_path / "practice")
    done = run_pi(folder, [])
    assert done.returncode == 2
    line = assert_one_line(done.stderr)
    assert "checkpoint 05" in line and "pi-course practice 05 DIR --from ." in line


def test_offline_by_default_the_recorded_session_runs_through_the_learners_code(
    real_course: Course, tmp_path: Path
) -> None:
    """With no endpoint, does run say it is offline and replay the recording through the learner's tools?"""
    folder = solved(real_course, "08", tmp_path / "practice")
    done = run_pi(folder, ["--yes"])
    assert done.returncode == 0, done.stderr
    assert "offline" in done.stderr and "OPENAI_COMPATIBLE_BASE_URL" in done.stderr
    assert (folder / "workspace" / "greet.py").read_text(encoding="utf-8") == 'print("你好")\n'
    assert "· bash" in done.stdout and "✓ 你好" in done.stdout


def test_write_and_bash_ask_first_and_a_refusal_runs_nothing(real_course: Course, tmp_path: Path) -> None:
    """Without --yes, do write and bash ask, and does an answer other than y keep them from running?"""
    folder = solved(real_course, "08", tmp_path / "practice")
    done = run_pi(folder, [], stdin="n\nn\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("[y/N]") == 2
    assert not (folder / "workspace" / "greet.py").exists()
    assert "the user did not allow this call" in done.stdout


@pytest.mark.parametrize("place", ["pi_course", "tests", "."])
def test_the_workspace_is_never_the_learners_code_or_tests(
    real_course: Course, tmp_path: Path, place: str
) -> None:
    """Is a workspace that would hold or be pi_course/ or tests/ refused in one line?"""
    folder = solved(real_course, "08", tmp_path / "practice")
    done = run_pi(folder, ["--yes", "--workspace", str(folder / place)])
    assert done.returncode == 2
    assert "--workspace" in assert_one_line(done.stderr)


@pytest.mark.parametrize("checkpoint_id", ["09", "10", "13"])
def test_ctrl_c_aborts_the_run_and_keeps_the_session_readable(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """At 09, 10 and 13, does Ctrl-C during a streamed reply end in one line, exit 130, and (from 10, which
    keeps a session file) a session that parses, ending with the aborted reply?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    held = sse.Reply([sse.sse_event(chunk({"content": "正在"})), sse.HOLD])
    with serving(held) as server:
        code, out, err = interrupt_run(folder, ["--yes", "hi"], live(server), lambda: bool(server.requests))
    assert code == 130, err
    assert "interrupted" in assert_one_line(err) and KEY not in out + err
    files = list((folder / ".pi-course" / "sessions").glob("*.jsonl"))
    assert len(files) == (0 if checkpoint_id == "09" else 1)
    for file in files:
        entries = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
        assert [e["message"]["role"] for e in entries if e["type"] == "message"][-2:] == ["user", "assistant"]
        assert entries[-1]["message"]["stopReason"] == "aborted"


def test_json_and_rpc_modes_write_the_learners_json_lines(real_course: Course, tmp_path: Path) -> None:
    """At 13, does --mode json write one JSON line per prompt, and --mode rpc answer each request line?"""
    folder = solved(real_course, "13", tmp_path / "practice")
    with serving(text_reply("第一"), text_reply("第二"), text_reply("第三")) as server:
        as_json = run_pi(folder, ["--mode", "json", "一"], env=live(server))
        rpc = run_pi(
            folder,
            ["--mode", "rpc"],
            env=live(server),
            stdin='{"prompt": "二"}\n{"prompt": "三"}\nnot json\n',
        )
    assert as_json.returncode == 0, as_json.stderr
    [line] = as_json.stdout.splitlines()
    answer = json.loads(line)
    assert answer["reason"] == "stop" and answer["messages"][-1]["content"][0]["text"] == "第一"
    assert rpc.returncode == 2
    answers = [json.loads(line) for line in rpc.stdout.splitlines()]
    assert [a["messages"][-1]["content"][0]["text"] for a in answers] == ["第二", "第三"]
    assert "rpc mode reads one JSON object per line" in assert_one_line(rpc.stderr)


@pytest.mark.parametrize("checkpoint_id", ["10", "11", "13"])
def test_resume_goes_on_with_the_saved_session(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """From 10 on (the learner's session store; 11 its context builder; 13 the Runtime), does --resume FILE
    send the saved turn again as context and append the new one to the same file?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    with serving(text_reply("记住了：蓝色。"), text_reply("你说的是蓝色。")) as server:
        first = run_pi(folder, ["我喜欢蓝色"], env=live(server))
        [file] = (folder / ".pi-course" / "sessions").glob("*.jsonl")
        saved = file.read_text(encoding="utf-8")
        second = run_pi(folder, ["--resume", str(file), "我喜欢什么颜色？"], env=live(server))
        requests = list(server.requests)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    sent = [m["content"] for m in requests[1].json()["messages"] if m["role"] in ("user", "assistant")]
    assert sent == ["我喜欢蓝色", "记住了：蓝色。", "我喜欢什么颜色？"]
    grown = file.read_text(encoding="utf-8")
    assert grown.startswith(saved) and len(grown.splitlines()) == len(saved.splitlines()) + 2
    assert list((folder / ".pi-course" / "sessions").glob("*.jsonl")) == [file]


def test_at_10_every_message_is_an_entry_of_the_learners_store_under_the_one_before(
    real_course: Course, tmp_path: Path
) -> None:
    """At 10, does the session file hold one entry per message (system, prompt, calls, results, answer),
    each hung under the one before, as the learner's own store reads it back?"""
    folder = solved(real_course, "10", tmp_path / "practice")
    done = run_pi(folder, ["--yes"])  # offline: the recorded coding session
    assert done.returncode == 0, done.stderr
    [file] = (folder / ".pi-course" / "sessions").glob("*.jsonl")
    entries = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    roles = [entry["message"]["role"] for entry in entries]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant" and "toolResult" in roles
    assert [entry["parentId"] for entry in entries] == [None, *(entry["id"] for entry in entries[:-1])]


def test_before_10_resume_is_refused_naming_what_is_missing(real_course: Course, tmp_path: Path) -> None:
    """At 09, with no session store yet, is --resume one line saying the checkpoint has no session file?"""
    folder = solved(real_course, "09", tmp_path / "practice")
    done = run_pi(folder, ["--resume", "nothing.jsonl", "hi"])
    assert done.returncode == 2
    assert "--resume needs a session file" in assert_one_line(done.stderr)


def test_resume_refuses_a_file_that_is_not_a_session(real_course: Course, tmp_path: Path) -> None:
    """Is a --resume file that is not a session one line, leaving the file as it was?"""
    folder = solved(real_course, "13", tmp_path / "practice")
    bogus = folder / "notes.jsonl"
    bogus.write_text('{"not": "an entry"}\n', encoding="utf-8")
    done = run_pi(folder, ["--resume", str(bogus), "hi"])
    assert done.returncode == 2
    assert "cannot be resumed" in assert_one_line(done.stderr.split("\n", 1)[1])
    assert bogus.read_text(encoding="utf-8") == '{"not": "an entry"}\n'


def test_a_durable_run_cut_by_ctrl_c_goes_on_with_resume(real_course: Course, tmp_path: Path) -> None:
    """At 19 with --durable, after Ctrl-C mid-reply, does --resume run the interrupted request again and
    finish?"""
    folder = solved(real_course, "19", tmp_path / "practice")
    held = sse.Reply([sse.sse_event(chunk({"content": "一半"})), sse.HOLD])
    with serving(held, text_reply("完整的回答。")) as server:
        code, _out, err = interrupt_run(
            folder, ["--durable", "hi"], live(server), lambda: bool(server.requests)
        )
        assert code == 130, err
        [file] = (folder / ".pi-course" / "sessions").glob("durable-*.json")
        store = json.loads(file.read_text(encoding="utf-8"))
        assert [task["status"] for task in store["tasks"].values()] == ["running"]
        resumed = run_pi(folder, ["--durable", "--resume", str(file)], env=live(server), stdin="")
        requests = list(server.requests)
    assert resumed.returncode == 0, resumed.stderr
    assert "完整的回答。" in resumed.stdout
    assert len(requests) == 2 and requests[1].json()["messages"][-1] == {"role": "user", "content": "hi"}
    store = json.loads(file.read_text(encoding="utf-8"))
    assert [task["status"] for task in store["tasks"].values()] == ["completed"]


def test_rpc_mode_without_yes_runs_no_write(real_course: Course, tmp_path: Path) -> None:
    """In rpc mode stdin carries requests: without --yes, is a write refused (not asked) and the file
    untouched?"""
    folder = solved(real_course, "13", tmp_path / "practice")
    replies = [tool_reply(1, "write", {"path": "x.txt", "content": "x"}), text_reply("没写。")]
    with serving(*replies) as server:
        done = run_pi(folder, ["--mode", "rpc"], env=live(server), stdin='{"prompt": "写 x.txt"}\n')
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert not (folder / "workspace" / "x.txt").exists()
    [result] = [m for m in requests[1].json()["messages"] if m["role"] == "tool"]
    assert "rpc mode cannot ask" in result["content"]


def test_ctrl_c_three_times_stops_learner_code_that_never_awaits(real_course: Course, tmp_path: Path) -> None:
    """When the learner's code spins without awaiting, does a third Ctrl-C end the run in one line, exit
    130?"""
    folder = solved(real_course, "05", tmp_path / "practice")
    adapter = folder / "pi_course" / "provider_adapter.py"
    source = adapter.read_text(encoding="utf-8")
    spin = "    # BEGIN LAB 5.1\n    result: list[ProviderWireMessage] = []\n"
    assert source.count(spin) == 1
    marker = tmp_path / "spinning"
    spinning = f"    open({str(marker)!r}, 'w').close()\n    while True:\n        pass\n"
    adapter.write_text(source.replace(spin, spin + spinning), encoding="utf-8")
    code, out, err = interrupt_run(folder, ["hi"], {}, marker.exists, presses=3)
    assert code == 130
    offline, *rest = err.splitlines()
    assert offline.startswith("offline:") and rest == ["interrupted"] and "Traceback" not in out


# -- MCP servers from a config file (15's tool_search, 17's client) -------------------------------------

MCP_SERVER = Path(__file__).with_name("mcp_words.py")


def mcp_config(folder: Path, **servers: dict[str, Any]) -> Path:
    """An `--mcp` file in the folder listing `servers` (name: entry)."""
    file = folder / "mcp.json"
    file.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return file


def words_server(**extra: Any) -> dict[str, Any]:
    """The SDK server of mcp_words.py, started by the folder's interpreter."""
    return {"command": sys.executable, "args": [str(MCP_SERVER)], **extra}


def declared(request: Any) -> set[str]:
    return {tool["function"]["name"] for tool in request.json().get("tools", [])}


@pytest.mark.parametrize("checkpoint_id", ["17", "19"])
def test_a_deferred_mcp_tool_is_found_with_tool_search_then_called_through_the_learners_client(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """With an --mcp file, does the learner's own client start the server, keep its tools out of the model's
    list until the learner's tool_search loads them, call them, and put the servers' list into the system
    prompt, while the server never sees the API key?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    config = mcp_config(folder, words=words_server())
    replies = [
        tool_reply(1, "tool_search", {"query": "count the words"}),
        tool_reply(2, "mcp__words__word_count", {"text": "一 二 三"}),
        tool_reply(3, "tool_search", {"query": "environment variable"}),
        tool_reply(4, "mcp__words__has_variable", {"name": "OPENAI_COMPATIBLE_API_KEY"}),
        text_reply("三个词。"),
    ]
    with serving(*replies) as server:
        done = run_pi(folder, ["--mcp", config.name, "数一数 一 二 三 有几个词"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert (
        "MCP server words: connected; tools: mcp__words__word_count, mcp__words__has_variable" in done.stdout
    )
    assert "三个词。" in done.stdout
    assert len(requests) == 5
    first, after_search = declared(requests[0]), declared(requests[1])
    assert "tool_search" in first and not any(name.startswith("mcp__") for name in first)
    assert "mcp__words__word_count" in after_search
    system = [m["content"] for m in requests[0].json()["messages"] if m["role"] == "system"]
    assert any("MCP servers:" in str(text) and "- words: connected" in str(text) for text in system), system
    results = [m["content"] for m in requests[-1].json()["messages"] if m["role"] == "tool"]
    assert results[0].startswith("Loaded ") and "mcp__words__word_count" in results[0], results
    assert results[1] == "3" and results[3] == "false", results
    assert KEY not in done.stdout + done.stderr


def test_with_durable_a_servers_tools_are_declared_at_once_and_the_call_is_kept(
    real_course: Course, tmp_path: Path
) -> None:
    """At 19 with --durable and an --mcp file (its server deferred by default), are the server's tools in
    the first request's list (the harness takes a fixed list, so nothing could load them later), is the
    call made through the learner's client, and does the durable file keep its result, readable?"""
    folder = solved(real_course, "19", tmp_path / "practice")
    config = mcp_config(folder, words=words_server())
    with serving(tool_reply(1, "mcp__words__word_count", {"text": "a b"}), text_reply("两个。")) as server:
        done = run_pi(folder, ["--durable", "--mcp", config.name, "count a b"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "MCP server words: connected; tools: mcp__words__word_count" in done.stdout
    assert "两个。" in done.stdout
    first = declared(requests[0])
    assert {"mcp__words__word_count", "mcp__words__has_variable"} <= first and "tool_search" not in first
    results = [m["content"] for m in requests[-1].json()["messages"] if m["role"] == "tool"]
    assert results == ["2"]
    [file] = (folder / ".pi-course" / "sessions").glob("durable-*.json")
    kept = json.dumps(json.loads(file.read_text(encoding="utf-8")), ensure_ascii=False)
    assert "mcp__words__word_count" in kept and "两个。" in kept


def test_a_direct_server_is_declared_at_once_and_one_that_cannot_start_is_one_line(
    real_course: Course, tmp_path: Path
) -> None:
    """Is a server whose exposure is direct declared from the first request, with no tool_search, and does a
    server whose command does not exist cost one line while the run goes on?"""
    folder = solved(real_course, "17", tmp_path / "practice")
    missing = str(tmp_path / "no-such-server")
    config = mcp_config(
        folder, words=words_server(exposure="direct"), gone={"command": missing, "exposure": "direct"}
    )
    with serving(tool_reply(1, "mcp__words__word_count", {"text": "a b"}), text_reply("两个。")) as server:
        done = run_pi(folder, ["--mcp", str(config), "count a b"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    [failed] = [line for line in done.stdout.splitlines() if "did not connect" in line]
    assert failed.startswith("MCP server gone did not connect: ") and missing in failed
    first = declared(requests[0])
    assert {"mcp__words__word_count", "mcp__words__has_variable"} <= first and "tool_search" not in first
    results = [m["content"] for m in requests[-1].json()["messages"] if m["role"] == "tool"]
    assert results == ["2"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"mcpServers": {}}, 'no "mcpServers" object naming at least one server'),
        ({"mcpServers": {"w": {"args": []}}}, "server 'w' needs a \"command\" string"),
        ({"mcpServers": {"w": {"command": "x", "arg": []}}}, "server 'w' has unknown keys arg"),
        ({"mcpServers": {"w": {"command": "x", "exposure": "codemode"}}}, '"exposure" must be one of'),
        ({"mcpServers": {"w": {"command": "x", "type": "http"}}}, "only stdio servers"),
        ({"mcpServers": {"w": {"command": "x", "env": {"A": 1}}}}, '"env" must map names to strings'),
        ('{"mcpServers": ', "not valid JSON (line 1, column 16)"),
    ],
)
def test_a_wrong_mcp_file_is_one_line_naming_what_is_wrong(
    real_course: Course, tmp_path: Path, entry: dict[str, Any] | str, says: str
) -> None:
    """Does a config file of the wrong shape stop the run before it starts, in one line saying what is off?"""
    folder = solved(real_course, "17", tmp_path / "practice")
    text = entry if isinstance(entry, str) else json.dumps(entry)
    (folder / "mcp.json").write_text(text, encoding="utf-8")
    done = run_pi(folder, ["--mcp", "mcp.json", "hi"])
    assert done.returncode == 2
    line = assert_one_line(done.stderr)
    assert says in line and "mcp.json" in line


def test_before_17_mcp_is_refused_naming_the_checkpoint_that_brings_it(
    real_course: Course, tmp_path: Path
) -> None:
    """Asked for --mcp at 16, does the run say in one line that checkpoint 17 brings the MCP client?"""
    folder = solved(real_course, "16", tmp_path / "practice")
    config = mcp_config(folder, words=words_server())
    done = run_pi(folder, ["--mcp", str(config), "hi"])
    assert done.returncode == 2
    line = assert_one_line(done.stderr)
    assert "needs an MCP client" in line and "checkpoint 17" in line and "--from ." in line


# -- compaction from 11: a small --context-tokens makes older interactions fall out of the budget ---------

SUMMARY = {
    "goal": "数清楚甲字",
    "constraints": [],
    "completed": ["第一轮回答了一长串甲"],
    "decisions": [],
    "changedFiles": [],
    "unresolved": [],
    "next": ["回答第二个问题"],
}


def compacting_run(folder: Path, summary_reply: str) -> tuple[Any, list[Any]]:
    """Two prompts at an 800-token budget: the first answer alone overflows it by the second prompt."""
    replies = [text_reply("甲" * 2800), text_reply(summary_reply), text_reply("第二轮的回答。")]
    with serving(*replies) as server:
        done = run_pi(folder, ["--context-tokens", "800"], env=live(server), stdin="第一个问题\n第二个问题\n")
        return done, list(server.requests)


def test_at_11_what_overflows_the_budget_becomes_the_learners_compaction_summary(
    real_course: Course, tmp_path: Path
) -> None:
    """When the first answer no longer fits, is the model asked (with no tools) for a summary of it, is the
    learner's compaction entry written to the session, and does the next request carry the learner's summary
    text instead of the old answer?"""
    folder = solved(real_course, "11", tmp_path / "practice")
    done, requests = compacting_run(folder, "```json\n" + json.dumps(SUMMARY, ensure_ascii=False) + "\n```")
    assert done.returncode == 0, done.stderr
    assert "compacted: 2 earlier messages became a summary in the session file" in done.stdout
    assert len(requests) == 3
    asked = requests[1].json()
    assert not asked.get("tools")
    assert asked["messages"][0]["role"] == "system" and "changedFiles" in asked["messages"][0]["content"]
    assert "[assistant] 甲甲甲" in asked["messages"][1]["content"]
    turn = json.dumps(requests[2].json()["messages"], ensure_ascii=False)
    assert "甲" * 50 not in turn and "数清楚甲字" in turn and "回答第二个问题" in turn
    assert requests[2].json()["messages"][-1]["content"] == "第二个问题"
    [file] = (folder / ".pi-course" / "sessions").glob("*.jsonl")
    entries = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    [compaction] = [entry for entry in entries if entry["type"] == "compaction"]
    assert compaction["summary"] == SUMMARY
    assert compaction["parentId"] == entries[entries.index(compaction) - 1]["id"]


def test_a_summary_that_is_not_json_keeps_the_turn_going_within_the_budget(
    real_course: Course, tmp_path: Path
) -> None:
    """Does a reply that is not the summary asked for cost one line, write no compaction, and still send
    the second prompt within the budget (the old answer left out)?"""
    folder = solved(real_course, "11", tmp_path / "practice")
    done, requests = compacting_run(folder, "我不想写 JSON。")
    assert done.returncode == 0, done.stderr
    assert "not compacted: the model's summary was not the JSON asked for" in done.stdout
    turn = json.dumps(requests[2].json()["messages"], ensure_ascii=False)
    assert "甲" * 50 not in turn
    [file] = (folder / ".pi-course" / "sessions").glob("*.jsonl")
    types = [json.loads(line)["type"] for line in file.read_text(encoding="utf-8").splitlines()]
    assert "compaction" not in types and types.count("message") == 5


def test_before_11_a_context_budget_is_refused_naming_the_checkpoint_that_brings_it(
    real_course: Course, tmp_path: Path
) -> None:
    """Asked for --context-tokens at 10, does the run say in one line that checkpoint 11 brings it?"""
    folder = solved(real_course, "10", tmp_path / "practice")
    done = run_pi(folder, ["--context-tokens", "800", "hi"])
    assert done.returncode == 2
    line = assert_one_line(done.stderr)
    assert "--context-tokens" in line and "checkpoint 11" in line


# -- steering from 09: a line typed at the terminal while an answer runs ---------------------------------


class Terminal:
    """`pi-course --lang en run ARGS` with a pseudo-terminal as its stdin, stdout and stderr, as a person
    types and reads."""

    def __init__(self, folder: Path, args: Sequence[str], env: dict[str, str]) -> None:
        import pty

        self.master, child_end = pty.openpty()
        base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_COMPATIBLE_")}
        self.process = subprocess.Popen(
            [*CLI, "--lang", "en", "run", *args],
            cwd=folder,
            env={**base, **env},
            stdin=child_end,
            stdout=child_end,
            stderr=child_end,
            start_new_session=True,
        )
        os.close(child_end)
        self.seen = b""

    def wait_for(self, text: str, seconds: float = 60) -> None:
        """Read the terminal until `text` has appeared (or fail, showing what did)."""
        import select

        deadline = time.monotonic() + seconds
        while text.encode() not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, self.seen.decode(errors="replace")[-2000:]
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    assert text.encode() in self.seen, self.seen.decode(errors="replace")[-2000:]

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> tuple[int, str]:
        """End the input (Ctrl-D) and wait; (exit code, what the terminal showed)."""
        try:
            self.type("\x04")
            self.process.wait(timeout=60)
            return self.process.returncode, self.seen.decode(errors="replace")[-3000:]
        finally:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            os.close(self.master)


@pytest.mark.parametrize("checkpoint_id", ["09", "13"])
def test_a_line_typed_while_the_tools_run_steers_the_answer(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """Typed at the terminal while a command runs, does a line go to the learner's steer (Agent.steer, from
    13 RuntimeControl.steer) and reach the model's next request right after the tool result?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    replies = [tool_reply(1, "bash", {"command": "sleep 2; echo slept"}), text_reply("好，改成英文。")]
    with serving(*replies) as server:
        terminal = Terminal(folder, ["--yes"], live(server))
        try:
            terminal.wait_for("> ")
            terminal.type("数一数文件\n")
            terminal.wait_for("· bash")
            terminal.type("用英文回答\n")
            terminal.wait_for("steering: 用英文回答")
            terminal.wait_for("好，改成英文。")
        finally:
            code, err = terminal.close()
        requests = list(server.requests)
    assert code == 0, err
    assert len(requests) == 2
    messages = requests[1].json()["messages"]
    assert [m["role"] for m in messages[-2:]] == ["tool", "user"], messages
    assert "slept" in messages[-2]["content"] and messages[-1]["content"] == "用英文回答"


def test_at_the_terminal_a_tools_question_takes_the_typed_answer_not_the_steering(
    real_course: Course, tmp_path: Path
) -> None:
    """Asked at the terminal whether bash may run, is the `y` typed the question's answer (the command
    runs), never a steering line?"""
    folder = solved(real_course, "09", tmp_path / "practice")
    replies = [tool_reply(1, "bash", {"command": "echo ran"}), text_reply("跑完了。")]
    with serving(*replies) as server:
        terminal = Terminal(folder, [], live(server))
        try:
            terminal.wait_for("> ")
            terminal.type("跑一下\n")
            terminal.wait_for("[y/N]")
            terminal.type("y\n")
            terminal.wait_for("跑完了。")
        finally:
            code, err = terminal.close()
        requests = list(server.requests)
    assert code == 0, err
    assert b"steering:" not in terminal.seen
    tool_messages = [m for m in requests[1].json()["messages"] if m["role"] == "tool"]
    assert [m["content"].strip() for m in tool_messages] == ["ran"]


@pytest.mark.parametrize("checkpoint_id", ["16", "19"])
def test_from_16_with_yes_the_models_script_calls_the_tools_through_the_learners_codemode(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """With --yes, is the learner's codemode tool declared, and does the model's script read a file through
    it in the learner's QuickJS worker; without --yes, is codemode left out (a script cannot stop to ask)?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    (folder / "workspace").mkdir()
    (folder / "workspace" / "notes.py").write_text('print("draft")\n', encoding="utf-8")
    script = 'const found = await tools.read({ path: "notes.py" }); return found.text;'
    replies = [tool_reply(1, "codemode", {"code": script}), text_reply("读到了。"), text_reply("好。")]
    with serving(*replies) as server:
        done = run_pi(folder, ["--yes", "读 notes.py"], env=live(server))
        asked = run_pi(folder, ["再看看"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert asked.returncode == 0, asked.stderr
    assert "codemode" in declared(requests[0]) and "codemode" not in declared(requests[2])
    [result] = [m["content"] for m in requests[1].json()["messages"] if m["role"] == "tool"]
    assert 'print(\\"draft\\")' in result, result


def test_from_13_the_workspaces_resources_join_the_system_through_the_learners_catalog(
    real_course: Course, tmp_path: Path
) -> None:
    """Does the workspace's AGENTS.md and a skill's name and description, found by the learner's
    discover_resources (12), reach the model's system prompt through the learner's Runtime (13), and does a
    SKILL.md the learner's checks refuse end the run in one line?"""
    folder = solved(real_course, "13", tmp_path / "practice")
    workspace = folder / "workspace"
    (workspace / "skills" / "greet").mkdir(parents=True)
    (workspace / "AGENTS.md").write_text("回答时先说“收到”。\n", encoding="utf-8")
    skill = "---\nname: greet\ndescription: 用三种语言问好\n---\n先说你好。\n"
    (workspace / "skills" / "greet" / "SKILL.md").write_text(skill, encoding="utf-8")
    with serving(text_reply("收到。")) as server:
        done = run_pi(folder, ["你好"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert (
        "resources from " in done.stdout
        and "instructions:AGENTS" in done.stdout
        and "skill:greet" in done.stdout
    )
    system = "\n".join(str(m["content"]) for m in requests[0].json()["messages"] if m["role"] == "system")
    assert "回答时先说“收到”。" in system and "- greet: 用三种语言问好" in system
    assert "先说你好。" not in system  # a skill's body waits for its activation
    (workspace / "skills" / "greet" / "SKILL.md").write_text("---\nname: greet\n", encoding="utf-8")
    with serving() as server:
        broken = run_pi(folder, ["你好"], env=live(server))
        assert server.requests == []
    assert broken.returncode == 2
    line = assert_one_line(broken.stderr)
    assert line.startswith("the resources in ") and "cannot be read: " in line


# -- virtual models from 18: several models behind the learner's catalog, routed by their request hook ---

TWO_MODELS = "fast-v1,smart-v1"


def session_entries(file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def dispatch_lines(stdout: str) -> list[str]:
    return [line.removeprefix("→ dispatched to ") for line in stdout.splitlines() if line.startswith("→ ")]


@pytest.mark.parametrize("checkpoint_id", ["18", "19"])
def test_from_18_a_virtual_model_routes_each_request_and_the_branch_keeps_selection_dispatch_and_state(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """With --model fast-v1,smart-v1, does each request go to the model the virtual model auto picks in
    turn, through the learner's own hook, with the selection, each reply's dispatch and the router's state
    on the session branch, so that --resume routes on from the stored count and --select changes it?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    replies = [
        tool_reply(1, "write", {"path": "a.txt", "content": "一"}),
        text_reply("写好了。"),
        text_reply("还是一。"),
        text_reply("换成了 smart。"),
    ]
    with serving(*replies) as server:
        env = {**live(server), "OPENAI_COMPATIBLE_MODEL": TWO_MODELS}
        first = run_pi(folder, ["--yes", "写 a.txt"], env=env)
        [file] = (folder / ".pi-course" / "sessions").glob("*.jsonl")
        after_first = session_entries(file)
        second = run_pi(folder, ["--resume", str(file), "再说一遍"], env=env)
        third = run_pi(folder, ["--resume", str(file), "--select", "smart-v1", "换一个"], env=env)
        requests = list(server.requests)
    assert [done.returncode for done in (first, second, third)] == [0, 0, 0], first.stderr + second.stderr
    # The provider only ever sees physical models: auto's turns, then the physical selection.
    assert [request.json()["model"] for request in requests] == ["fast-v1", "smart-v1", "fast-v1", "smart-v1"]
    entries = session_entries(file)
    assert entries[: len(after_first)] == after_first  # resuming only appends
    metadata = [(entry["key"], entry["value"]) for entry in entries if entry["type"] == "metadata"]
    state = [("virtual_model_state", {"modelId": "auto", "state": {"count": n}}) for n in (1, 2, 3)]
    assert metadata == [
        ("model_change", {"modelId": "auto"}),
        *state,
        ("model_change", {"modelId": "smart-v1"}),
    ]
    # The selection is the session's first entry; each turn's state follows its messages.
    assert entries[0]["type"] == "metadata" and entries[0]["parentId"] is None
    assert after_first[-1]["value"] == state[1][1] and after_first[-2]["value"] == state[0][1]
    replies_sent = [
        e["message"]["model"]
        for e in entries
        if e["type"] == "message" and e["message"]["role"] == "assistant"
    ]
    assert replies_sent == ["fast-v1", "smart-v1", "fast-v1", "smart-v1"]
    assert dispatch_lines(first.stdout) == ["fast-v1", "smart-v1"]
    assert dispatch_lines(second.stdout) == ["fast-v1"] and dispatch_lines(third.stdout) == ["smart-v1"]
    assert "selected auto" in first.stdout and "selected" not in second.stdout
    assert "selected smart-v1" in third.stdout
    assert KEY not in file.read_text(encoding="utf-8")


def test_offline_at_18_the_recording_is_routed_between_two_model_names(
    real_course: Course, tmp_path: Path
) -> None:
    """Offline at 18, does the recorded session show the virtual model sending its requests in turn?"""
    folder = solved(real_course, "18", tmp_path / "practice")
    done = run_pi(folder, ["--yes"])
    assert done.returncode == 0, done.stderr
    assert "offline" in done.stderr and "selected auto" in done.stdout
    assert dispatch_lines(done.stdout) == ["fast-v1", "smart-v1", "fast-v1", "smart-v1", "fast-v1"]
    assert (folder / "workspace" / "greet.py").read_text(encoding="utf-8") == 'print("你好")\n'


@pytest.mark.parametrize(
    ("checkpoint_id", "args", "says"),
    [
        ("17", ["--model", TWO_MODELS], "needs a catalog of models"),
        ("17", ["--select", "auto"], "needs a catalog of models"),
        ("18", ["--model", TWO_MODELS, "--select", "slow-v1"], "choose one of fast-v1, smart-v1, auto"),
        ("18", ["--model", "fast-v1,,smart-v1"], "an empty name between its commas"),
        ("18", ["--model", "fast-v1,fast-v1"], "names fast-v1 more than once"),
        ("18", ["--model", "auto,smart-v1"], "the virtual model's id here"),
        ("19", ["--durable", "--model", TWO_MODELS], "--durable asks one model for every request"),
    ],
)
def test_a_model_list_the_checkpoint_cannot_route_is_one_line(
    real_course: Course, tmp_path: Path, checkpoint_id: str, args: list[str], says: str
) -> None:
    """Several models before 18, a selection that is not among them, a malformed list, or several models
    for the durable harness: is each one line saying what to change, before any request is made?"""
    folder = make_folder(real_course, real_course.checkpoint(checkpoint_id), tmp_path / "practice")
    with serving() as server:
        done = run_pi(folder, [*args, "hi"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 2 and requests == []
    line = assert_one_line(done.stderr)
    assert says in line
    if checkpoint_id == "17":
        assert "checkpoint 18" in line and "--from ." in line


# -- extensions from 13: files named with --extension, loaded through the learner's trust gate and host --

EXTENSION = '''"""A shout tool, and a hook that refuses bash."""
from pathlib import Path

from pi_course import BeforeToolDecisionDeny, Tool, ToolOutput, object_schema, string_value, text

Path(__file__).with_name("imported.txt").write_text("top level ran", "utf-8")


async def shout(parameters, context):
    return ToolOutput([text(parameters["word"].upper() + "!")])


def refuse_bash(call):
    return BeforeToolDecisionDeny(reason="this extension allows no bash") if call.name == "bash" else None


def broken_after(result):
    raise RuntimeError("the after hook broke")


def default(context):
    schema = object_schema({"word": string_value})
    context.register_tool(Tool(name="shout", description="shout a word", schema=schema, execute=shout))
    context.on("beforeToolCall", refuse_bash)
    context.on("afterToolResult", broken_after)
'''


def tool_messages(request: Any) -> list[str]:
    return [str(m["content"]) for m in request.json()["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("checkpoint_id", ["13", "18"])
def test_an_extension_named_on_the_command_line_adds_its_tool_and_its_hook_guards_the_calls(
    real_course: Course, tmp_path: Path, checkpoint_id: str
) -> None:
    """With --extension FILE, does the learner's load_extension import the file through their trust gate,
    so its tool reaches the model and its beforeToolCall hook, in the learner's host around the Runtime's
    executor, refuses the bash call before anything runs, while a failing afterToolResult hook is one line?"""
    folder = solved(real_course, checkpoint_id, tmp_path / "practice")
    extension = tmp_path / "extensions" / "guard.py"
    extension.parent.mkdir()
    extension.write_text(EXTENSION, encoding="utf-8")
    replies = [
        tool_reply(1, "shout", {"word": "hi"}),
        tool_reply(2, "bash", {"command": "touch made.txt"}),
        text_reply("喊过了。"),
    ]
    with serving(*replies) as server:
        done = run_pi(folder, ["--yes", "--extension", str(extension), "喊一声"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert "extension guard: loaded through your trust gate; tools: shout" in done.stdout
    # A hook that fails is the learner host's diagnostic, one line each, and the run goes on.
    failed = "extension guard: its afterToolResult hook failed (error): the after hook broke"
    assert done.stdout.count(failed) == 1  # after the shout; a denied call has no after hooks
    offered = [tool["function"]["name"] for tool in requests[0].json()["tools"]]
    assert "shout" in offered and "bash" in offered
    assert tool_messages(requests[1]) == ["HI!"]
    assert "this extension allows no bash" in tool_messages(requests[2])[-1]
    assert not (folder / "workspace" / "made.txt").exists()


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (None, "no extension file"),
        ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
        ("VALUE = 1\n", "缺少 default factory"),
    ],
)
def test_an_extension_that_cannot_load_is_one_line_before_any_request(
    real_course: Course, tmp_path: Path, source: str | None, says: str
) -> None:
    """A missing file, one whose top level raises, one with no default factory: is each one line naming
    the file, with no request made? And an extension file in the workspace is never imported unasked?"""
    folder = solved(real_course, "13", tmp_path / "practice")
    extension = tmp_path / "broken.py"
    if source is not None:
        extension.write_text(source, encoding="utf-8")
    unasked = folder / "workspace" / "extensions" / "guard.py"
    unasked.parent.mkdir(parents=True)
    unasked.write_text(EXTENSION, encoding="utf-8")
    with serving() as server:
        done = run_pi(folder, ["--extension", str(extension), "hi"], env=live(server))
        requests = list(server.requests)
    assert done.returncode == 2 and requests == []
    line = assert_one_line(done.stderr)
    assert says in line and "broken.py" in line
    assert not (unasked.parent / "imported.txt").exists()


def test_before_13_an_extension_is_refused_naming_the_checkpoint_that_brings_the_runtime(
    real_course: Course, tmp_path: Path
) -> None:
    """At 12, where the host exists but nothing composes it, does --extension say in one line that 13
    brings the Runtime, without importing the file?"""
    folder = solved(real_course, "12", tmp_path / "practice")
    extension = tmp_path / "guard.py"
    extension.write_text(EXTENSION, encoding="utf-8")
    done = run_pi(folder, ["--extension", str(extension), "hi"])
    assert done.returncode == 2
    line = assert_one_line(done.stderr)
    assert "--extension" in line and "checkpoint 13" in line
    assert not (tmp_path / "imported.txt").exists()
