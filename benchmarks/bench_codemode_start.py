"""Time how soon a codemode script reaches its first tool call, and whether the course's 100 ms holds.

Usage (kit venv active, from the repository root):

    python benchmarks/bench_codemode_start.py [--tree solutions/16-codemode] [--runs 20] [--pause 0.3]

Each run is one `run_codemode_script` on a fresh event loop (as the focused tests run it), after a pause
that stands for the model's turn between two codemode calls. It reports, over the runs: the time from
the call to the first `tools.<name>()` reaching the host, the whole execution of `return 1`, and how many
executions with the course's 100 ms deadline recorded their pending call as `cancelled` (the course's
test #9 expects all of them to). The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path("solutions/16-codemode"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between two executions")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    import pi_course  # the tree's own package; the kit never imports it elsewhere

    first_call: list[float] = []
    whole: list[float] = []
    held = 0

    async def reached(started: float) -> float:
        seen: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def probe(_args: object, _context: Any) -> object:
            if not seen.done():
                seen.set_result(time.monotonic() - started)
            return None

        tools = {"probe": pi_course.CodemodeScriptTool(execute=probe)}
        await pi_course.run_codemode_script("await tools.probe(); return 1;", tools=tools)
        return seen.result()

    async def wait_100ms() -> bool:
        async def wait(_args: object, context: Any) -> object:
            gone: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            context.signal.add_event_listener("abort", lambda: gone.set_exception(RuntimeError("aborted")))
            return await gone

        tools = {"wait": pi_course.CodemodeScriptTool(execute=wait)}
        result = await pi_course.run_codemode_script("await tools.wait();", tools=tools, timeout_ms=100)
        return [call.to_dict() for call in result.calls] == [{"name": "wait", "status": "cancelled"}]

    load_before = os.getloadavg()
    for _ in range(args.runs):
        time.sleep(args.pause)
        first_call.append(asyncio.run(reached(time.monotonic())))
        time.sleep(args.pause)
        started = time.monotonic()
        asyncio.run(pi_course.run_codemode_script("return 1;"))
        whole.append(time.monotonic() - started)
        time.sleep(args.pause)
        held += asyncio.run(wait_100ms())
    load_after = os.getloadavg()

    def row(name: str, values: list[float]) -> str:
        ms = sorted(v * 1000 for v in values)
        return f"| {name} | {statistics.median(ms):.0f} | {ms[0]:.0f} | {ms[-1]:.0f} |"

    print(f"tree {args.tree}, {args.runs} runs, pause {args.pause} s")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print("| what | median ms | min ms | max ms |")
    print("| --- | ---: | ---: | ---: |")
    print(row("call to the first tool call on the host", first_call))
    print(row("whole execution of `return 1`", whole))
    print(f"100 ms deadline, pending call recorded as cancelled: {held} of {args.runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
