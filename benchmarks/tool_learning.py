"""Does GRPO teach a model to use a tool? The shipped recipe with the jailed Python tool, and the same recipe without.

    OMP_NUM_THREADS=1 python benchmarks/tool_learning.py --quick          # one seed, both runs at once (~5 min, 2 cores)
    OMP_NUM_THREADS=1 python benchmarks/tool_learning.py --seeds 1 2 3    # the figures in docs/tools.md

Each seed trains `recipes/demo/grpo_tool_learning.yaml` (r1kit:tool-learner on r1kit:products, `tools: [python]`)
and the same recipe with its tool keys taken out, through `r1kit grpo`, the two side by side (one thread each). The
held-out accuracy is the recipe's own `heldout_accuracy` callback (greedy, 100 products never trained on, through the
tool loop when the run has tools) at step 0 and at the end; the tool calls per rollout are the training rollouts'
(`tools/calls_per_rollout`), the mean of the first 3 logged steps and of the last 3. The last line:

    tool use: held-out A -> B, tool calls X -> Y per rollout; without tools C -> D

(means over the seeds; accuracies as fractions). Each run's folder stays under --out for `r1kit report`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo" / "grpo_tool_learning.yaml"
TOOL_KEYS = ("tools", "max_tool_calling_iterations", "tool_time_limit", "tool_memory_mb", "tool_max_output",
             "tool_calls_per_rollout", "tool_seconds_per_rollout")


def without_tools(recipe: dict) -> dict:
    """The same recipe, every tool key taken out."""
    return {k: v for k, v in recipe.items() if k not in TOOL_KEYS}


def launch(recipe: dict, folder: Path, overrides: list[str]) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump({**recipe, "output_dir": str(folder / "run")}, sort_keys=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = (folder / "log.txt").open("w")
    return subprocess.Popen([sys.executable, "-m", "r1kit.grpo", "--config", str(path), *overrides], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)


def outcome(folder: Path) -> dict:
    """Held-out accuracy at the first and last evaluation, and tool calls per rollout early and late."""
    run = folder / "run"
    heldout = [json.loads(line) for line in (run / "heldout_accuracy.jsonl").read_text().splitlines() if line.strip()]
    heldout.sort(key=lambda r: r["step"])
    states = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    states += [run / "trainer_state.json"] if (run / "trainer_state.json").is_file() else []
    log = json.loads(states[-1].read_text())["log_history"] if states else []
    calls = [e["tools/calls_per_rollout"] for e in log if "tools/calls_per_rollout" in e]
    return {"before": heldout[0]["accuracy"], "after": heldout[-1]["accuracy"],
            "curve": [(r["step"], r["accuracy"], r.get("tool_calls")) for r in heldout],
            "calls_before": statistics.mean(calls[:3]) if calls else 0.0,
            "calls_after": statistics.mean(calls[-3:]) if calls else 0.0}


def one_seed(seed: int, out: Path, steps: int | None) -> tuple[dict, dict, float]:
    recipe = yaml.safe_load(RECIPE.read_text())
    overrides = ["--seed", str(seed)] + (["--max_steps", str(steps)] if steps else [])
    started = time.monotonic()
    runs = {"tools": launch(recipe, out / f"seed{seed}-tools", overrides),
            "none": launch(without_tools(recipe), out / f"seed{seed}-without", overrides)}
    for name, process in runs.items():
        if process.wait() != 0:
            folder = out / f"seed{seed}-{'tools' if name == 'tools' else 'without'}"
            raise SystemExit(f"r1kit grpo failed (exit {process.returncode}); see {folder / 'log.txt'}")
    return outcome(out / f"seed{seed}-tools"), outcome(out / f"seed{seed}-without"), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed (42): the recipe as shipped")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="max_steps (default: the recipe's)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/r1kit-tool-learning"))
    opts = parser.parse_args()
    seeds = [42] if opts.quick else opts.seeds
    results = []
    for seed in seeds:
        tools, none, seconds = one_seed(seed, opts.out, opts.steps)
        results.append((tools, none))
        load = os.getloadavg()[0]
        print(f"seed {seed} ({seconds:.0f} s, load {load:.1f}): with the tool, held-out {tools['before']:.2f} -> "
              f"{tools['after']:.2f}, tool calls {tools['calls_before']:.2f} -> {tools['calls_after']:.2f} per "
              f"rollout; without tools {none['before']:.2f} -> {none['after']:.2f}", flush=True)
        print("  held-out (step, accuracy, tool calls per problem): " +
              ", ".join(f"({s}, {a:.2f}, {c:.2f})" for s, a, c in tools["curve"]), flush=True)

    def mean(which: int, key: str) -> float:
        return statistics.mean(r[which][key] for r in results)

    print(f"tool use: held-out {mean(0, 'before'):.2f} -> {mean(0, 'after'):.2f}, tool calls "
          f"{mean(0, 'calls_before'):.2f} -> {mean(0, 'calls_after'):.2f} per rollout; without tools "
          f"{mean(1, 'before'):.2f} -> {mean(1, 'after'):.2f}")


if __name__ == "__main__":
    main()
