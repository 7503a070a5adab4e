"""The embedded demo, in full, for several seeds: held-out accuracy before and after GRPO, and wall time.

    python benchmarks/demo.py [--seeds 42 43 44] [--out /tmp/r1kit-demo-bench]

Each seed runs `r1kit grpo --seed S` (the embedded default recipe, unchanged otherwise) in a fresh process with
OMP_NUM_THREADS=1, one after the other. Goal: at least +30 points of held-out accuracy for every seed, within about
180 s of training per seed on 2 cores that other work shares.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--out", default="/tmp/r1kit-demo-bench")
    opts = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for seed in opts.seeds:
        out = Path(opts.out) / f"seed{seed}"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "r1kit", "grpo", "--seed", str(seed), "--output_dir", str(out),
                        "--resume", "never"], env=env, check=True, capture_output=True)
        wall = time.perf_counter() - start
        summary = json.loads((out / "summary.json").read_text())
        rows.append((seed, summary["accuracy_before"], summary["accuracy_after"], summary["train_seconds"], wall))
        print(f"seed {seed}: held-out accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
              f"({(summary['accuracy_after'] - summary['accuracy_before']) * 100:+.1f} points), "
              f"train {summary['train_seconds']:.0f} s, wall {wall:.0f} s", flush=True)
    gains = [(after - before) * 100 for _, before, after, _, _ in rows]
    trains, walls = [t for *_, t, _ in rows], [w for *_, w in rows]
    print(f"gain: min {min(gains):+.1f}, mean {sum(gains) / len(gains):+.1f} points; training: max {max(trains):.0f} s, "
          f"wall: max {max(walls):.0f} s (goal: >= +30 points every seed, about 180 s of training)")


if __name__ == "__main__":
    main()
