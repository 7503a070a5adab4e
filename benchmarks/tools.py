"""The Python tool's throughput: jailed calls per second one after another (as TRL's tool loop asks for them) against a
turn's calls run at once (r1kit's prefetch), side by side, interleaved; and, from a run's logs, a step's tool share.

    OMP_NUM_THREADS=1 python benchmarks/tools.py [--calls 32] [--repeats 3] [--run OUTPUT_DIR]

Each call is a small program (`print(<a> * <b>)`) in a fresh jail (r1kit.sandbox). `--run` reads a tool-use run's
`trainer_state.json` (e.g. benchmarks/tools_demo.py's `grpo` folder) and prints the share of each step's time spent
running programs (`tools/batch_seconds` / `step_time`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def calls_per_second(calls: int, repeats: int) -> tuple[float, float]:
    from r1kit.training.tools import ToolLimits, prefetch, python_environment

    environment = python_environment(ToolLimits(calls=calls))
    programs = [f"print({100 + i} * {200 + i})" for i in range(calls)]
    turn = [[{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "python", "arguments": {"code": code}}}]}] for code in programs]
    one_by_one, at_once = [], []
    for repeat in range(repeats):
        for way in (("one", "batch") if repeat % 2 == 0 else ("batch", "one")):
            rollouts = [environment() for _ in programs]
            environment.prefetched.put({})
            start = time.perf_counter()
            if way == "batch":
                prefetch(environment, turn)
            replies = [rollout.python(code) for rollout, code in zip(rollouts, programs)]
            seconds = time.perf_counter() - start
            assert all(reply.strip().isdigit() for reply in replies), replies[:3]
            (at_once if way == "batch" else one_by_one).append(calls / seconds)
    return statistics.median(one_by_one), statistics.median(at_once)


def tool_share(run: Path) -> None:
    log = json.loads((run / "trainer_state.json").read_text())["log_history"]
    steps = [e for e in log if "tools/batch_seconds" in e and e.get("step_time")]
    if not steps:
        print(f"{run}: no tool timings logged")
        return
    shares = [e["tools/batch_seconds"] / e["step_time"] for e in steps]
    print(f"{run}: programs took {statistics.median(shares):.1%} of a step (median of {len(steps)} steps; "
          f"{statistics.median(e['tools/batch_seconds'] for e in steps):.2f} s of "
          f"{statistics.median(e['step_time'] for e in steps):.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run", type=Path)
    opts = parser.parse_args()
    one, batch = calls_per_second(opts.calls, opts.repeats)
    print(f"{opts.calls} jailed calls: {one:.1f} calls/s one after another, {batch:.1f} calls/s a turn at once "
          f"({batch / one:.2f}x)")
    if opts.run:
        tool_share(opts.run)


if __name__ == "__main__":
    main()
