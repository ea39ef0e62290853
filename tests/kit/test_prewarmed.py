"""The warm launcher verify and the mutation runs use: a fork of a server that has imported pytest must run
a tree exactly as `python -m pytest` in a fresh interpreter would, and a time limit must end the whole run."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from pathlib import Path

import pytest
from pi_course_kit.core.runner import Launch, RunResult, run_in_subprocess, run_tests
from pi_course_kit.instructor import prewarmed

#: A focused test that writes down how its interpreter was started, then passes or fails on demand.
PROBE = textwrap.dedent(
    """
    import json, os, sys

    def test_probe():
        facts = {
            "cwd": os.getcwd(),
            "path0": sys.path[0],
            "path": sys.path[1:],
            "env": sorted(k for k in os.environ if k not in ("PWD", "PI_COURSE_PREWARMED", "_")),
            "own_group": os.getpgrp() == os.getpid(),
            "warm": os.environ.get("PI_COURSE_PREWARMED") == "1",
            "bytecode": sys.dont_write_bytecode,
            "modules": "tree_module" in sys.modules,
        }
        import tree_module
        with open(os.environ["PROBE_OUT"], "w") as out:
            json.dump(facts, out)
        assert tree_module.VALUE == int(os.environ["PROBE_WANT"])
    """
)


def make_tree(root: Path, value: int) -> Path:
    root.mkdir(parents=True)
    (root / "test_probe.py").write_text(PROBE, encoding="utf-8")
    (root / "tree_module.py").write_text(f"VALUE = {value}\n", encoding="utf-8")
    return root


def probe(tree: Path, want: int, launch: Launch) -> tuple[RunResult, dict[str, object]]:
    out = tree.parent / f"{tree.name}.json"
    env = dict(os.environ, PROBE_OUT=str(out), PROBE_WANT=str(want))
    result = run_tests(tree, env=env, launch=launch, timeout=120)
    return result, json.loads(out.read_text(encoding="utf-8"))


def test_a_forked_run_sees_what_a_fresh_interpreter_sees(tmp_path: Path) -> None:
    """Run warm and cold on the same tree: the same folder, sys.path, environment and exit code, and only the
    warm one marked? Each run imports the tree's own module afresh (two trees with one module name)."""
    first = make_tree(tmp_path / "one", 1)
    second = make_tree(tmp_path / "two", 2)
    warm, warm_facts = probe(first, 1, prewarmed.launch)
    cold, cold_facts = probe(first, 1, run_in_subprocess)
    assert warm.returncode == cold.returncode == 0
    assert warm_facts["warm"] is True and cold_facts["warm"] is False
    for key in ("cwd", "path0", "path", "env", "bytecode", "modules"):
        assert warm_facts[key] == cold_facts[key], key
    assert warm_facts["cwd"] == str(first) and warm_facts["own_group"] is True
    # The second tree's module has the same name: a fork must not see the first one's.
    failed, facts = probe(second, 1, prewarmed.launch)
    assert facts["cwd"] == str(second)
    assert failed.returncode == 1 and "1 failed" in failed.output


def test_a_run_over_its_time_limit_is_ended_with_its_subprocesses(tmp_path: Path) -> None:
    """Does a run that outlives its limit come back timed out within seconds, its own subprocess killed
    too?"""
    tree = tmp_path / "slow"
    tree.mkdir()
    pid_file = tmp_path / "child.pid"
    (tree / "test_slow.py").write_text(
        textwrap.dedent(
            f"""
            import subprocess, time

            def test_slow():
                child = subprocess.Popen(["sleep", "300"])
                open({str(pid_file)!r}, "w").write(str(child.pid))
                time.sleep(300)
            """
        ),
        encoding="utf-8",
    )
    started = time.monotonic()
    result = run_tests(tree, timeout=3, launch=prewarmed.launch)
    assert result.timed_out and result.returncode == -9
    assert time.monotonic() - started < 60
    child = int(pid_file.read_text(encoding="utf-8"))
    for _ in range(100):  # killed at once; its parent reaps it a moment later
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the run's subprocess {child} survived the time limit")


def test_without_a_server_the_run_starts_a_fresh_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the server is gone, does the run still happen, in a fresh interpreter, with the same result?"""
    tree = make_tree(tmp_path / "tree", 3)
    server = prewarmed._server()
    server.process.kill()
    server.process.wait()
    monkeypatch.setattr(prewarmed._Server, "run", lambda self, request: None)
    result, facts = probe(tree, 3, prewarmed.launch)
    assert result.returncode == 0 and facts["warm"] is False
    monkeypatch.undo()
    again, facts = probe(tree, 3, prewarmed.launch)  # a new server replaces the dead one
    assert again.returncode == 0 and facts["warm"] is True


def test_a_threads_server_ends_with_its_thread(tmp_path: Path) -> None:
    """verify runs each checkpoint in a new pool of threads: does each thread's server end when its thread
    does, instead of one idle interpreter per pool staying until the process exits?"""
    tree = make_tree(tmp_path / "tree", 4)
    servers: list[prewarmed._Server] = []

    def work() -> None:
        probe(tree, 4, prewarmed.launch)
        servers.append(prewarmed._server())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    process = servers.pop().process
    assert process.wait(timeout=10) == 0
