#!/usr/bin/env python3
"""Where the kit's suite leaves a core idle: idle CPU time given to the tests that were running then.

Run from the repository root with the kit's venv, on a machine with nothing else running (Linux: it
reads /proc/stat):

    python benchmarks/bench_suite_waits.py [-n 2] [--top 15] [--keep DIR] [-- PYTEST ARGS]

It runs the kit's suite with N workers and a small plugin that writes when each test starts and ends
on each worker, while a thread reads the machine's busy and total CPU time every half second. For each
half second, the idle core time (cores × wall − busy) is shared among the tests running then. A test
that waits (a browser page going quiet, a time limit running out, a kernel starting) collects idle
time; one that computes collects none. Prints the suite's wall, busy CPU and idle core time, when
each worker's last test ended (a worker done early leaves its core idle), then one Markdown row per
test function (parameters folded): idle, wall on its worker, busy share. `--keep DIR` saves the
per-worker start and end logs.

Why by hand: pytest's `--durations` and JUnit give each test's wall time only, and the busy CPU of
the processes a test starts (Chromium, kernels, sandboxes, fork servers) is not its worker's.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "bench_waits_plugin"
PLUGIN_SOURCE = '''
"""Writes each test's start and end (monotonic clock) to a file per xdist worker."""
import os
import time

import pytest


def _log(kind, nodeid):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["BENCH_WAITS_DIR"], f"{worker}.log"), "a", encoding="utf-8") as out:
        out.write(f"{kind} {time.monotonic():.3f} {nodeid}\\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _log("S", item.nodeid)
    yield
    _log("E", item.nodeid)
'''
HALF_SECOND = 0.5


def _cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine: user, nice, system, irq, softirq, steal; plus idle,
    iowait."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _sample(samples: list[tuple[float, int, int]], stop: threading.Event) -> None:
    while not stop.is_set():
        samples.append((time.monotonic(), *_cpu()))
        stop.wait(HALF_SECOND)


def _runs(folder: Path) -> dict[str, list[tuple[float, float, str]]]:
    """Per worker, (start, end, node id) of every test, in start order."""
    runs: dict[str, list[tuple[float, float, str]]] = {}
    for log in folder.glob("*.log"):
        started: dict[str, float] = {}
        done: list[tuple[float, float, str]] = []
        for line in log.read_text(encoding="utf-8").splitlines():
            kind, stamp, nodeid = line.split(" ", 2)
            if kind == "S":
                started[nodeid] = float(stamp)
            elif nodeid in started:
                done.append((started.pop(nodeid), float(stamp), nodeid))
        runs[log.stem] = sorted(done)
    return runs


def _function(nodeid: str) -> str:
    module, _, name = nodeid.partition("::")
    return f"{Path(module).name}::{name.split('[')[0]}"


def report(
    samples: list[tuple[float, int, int]], runs: dict[str, list[tuple[float, float, str]]], top: int
) -> None:
    """Print the totals and the tests that collected the most idle core time."""
    hertz = os.sysconf("SC_CLK_TCK")
    cores = len(os.sched_getaffinity(0))
    starts = {worker: [run[0] for run in done] for worker, done in runs.items()}
    idle: dict[str, float] = collections.defaultdict(float)
    wall: dict[str, float] = collections.defaultdict(float)
    busy: dict[str, float] = collections.defaultdict(float)
    total_idle = total_busy = 0.0
    for (before, busy_before, _), (after, busy_after, _) in itertools.pairwise(samples):
        seconds = after - before
        used = (busy_after - busy_before) / hertz
        spare = max(0.0, cores * seconds - used)
        total_idle, total_busy = total_idle + spare, total_busy + used
        middle = (before + after) / 2
        running = []
        for worker, done in runs.items():
            index = bisect.bisect_right(starts[worker], middle) - 1
            if index >= 0 and done[index][0] <= middle <= done[index][1]:
                running.append(_function(done[index][2]))
        for name in running:
            idle[name] += spare / len(running)
            busy[name] += used / len(running)
            wall[name] += seconds
    span = samples[-1][0] - samples[0][0] if samples else 0.0
    print(
        f"wall {span:.0f} s, busy CPU {total_busy:.0f} s, idle core time {total_idle:.0f} s ({cores} cores)"
    )
    # The tail: a worker that runs out of groups early leaves its core idle until the last one ends.
    origin = samples[0][0] if samples else 0.0
    for worker, done in sorted(runs.items()):
        if done:
            print(f"{worker}: {len(done)} tests, last one ended at {done[-1][1] - origin:.0f} s")
    print("\n| idle s | wall s | busy s | test |\n| ---: | ---: | ---: | --- |")
    for name, seconds in sorted(idle.items(), key=lambda item: -item[1])[:top]:
        print(f"| {seconds:.0f} | {wall[name]:.0f} | {busy[name]:.0f} | `{name}` |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--workers", default="2", help="xdist workers (default: 2)")
    parser.add_argument("--top", type=int, default=15, help="rows to print (default: 15)")
    parser.add_argument("--keep", type=Path, help="copy the per-worker start/end logs into this folder")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as scratch:
        folder = Path(scratch)
        (folder / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
        logs = folder / "logs"
        logs.mkdir()
        # Only this pytest loads the plugin (-p); the runs the suite starts strip PYTHONPATH or ignore it.
        env = dict(os.environ, PYTHONPATH=str(folder), BENCH_WAITS_DIR=str(logs))
        samples: list[tuple[float, int, int]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample, args=(samples, stop), daemon=True)
        sampler.start()
        command = [sys.executable, "-m", "pytest", "-n", args.workers, "-p", PLUGIN, "-q", *args.pytest_args]
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        stop.set()
        sampler.join()
        report(samples, _runs(logs), args.top)
        if args.keep:
            shutil.copytree(logs, args.keep, dirs_exist_ok=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
