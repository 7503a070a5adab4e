"""Does spending generation where the signal is pay off? Baseline GRPO, dynamic sampling, and dynamic sampling with
the pass-rate curriculum, on a task where many groups carry no signal.

    OMP_NUM_THREADS=1 python benchmarks/sampling.py [--seeds 42 43 44] [--steps 140] [--out /tmp/r1kit-sampling-bench]

The task is the embedded demo (the shipped 0.6 M-parameter model and its recipe) on additions of 1 to 6 digits
(`dataset_options: {min_digits: 1, max_digits: 6, train_size: 400}`): short sums are mostly right, long ones never,
so many groups have zero reward variance once the format is learned, and each prompt comes back about 5 times. For each seed the three variants run one after another, in fresh processes, with
held-out greedy accuracy measured every 10 steps together with the training time spent so far (evaluations
excluded). Reported per seed and variant: the baseline's final held-out accuracy, each variant's accuracy at the
baseline's training time (equal wall-clock), and the training time each needs to first reach the baseline's final
accuracy, as a fraction of the baseline's. Goal: the best variant reaches it in at most 0.75x the baseline's time,
every seed. Writes results.json and accuracy_vs_time.png under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# 400 training problems: about 5.6 appearances each in 140 steps, so a prompt's record has something to say.
TASK = ["--dataset_options", '{"min_digits": 1, "max_digits": 6, "train_size": 400}', "--heldout_eval_steps", "10"]
VARIANTS = {
    "baseline": [],
    "dynamic": ["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "4"],
    "dynamic+curriculum": [
        "--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "4",
        "--curriculum_skip_solved", "2", "--curriculum_pass_rate_window", "0.05", "0.95",
        "--curriculum_explore", "0.1", "--curriculum_reward", "accuracy",
    ],
}


def run(variant: str, seed: int, steps: int, out: Path) -> dict:
    """One training run in a fresh process; returns its held-out curve and sampling figures."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "r1kit", "grpo", "--seed", str(seed), "--max_steps", str(steps),
               "--output_dir", str(out), "--resume", "never", *TASK, *VARIANTS[variant]]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{variant} seed {seed} failed:\n{result.stderr[-3000:]}")
    wall = time.perf_counter() - start
    curve = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    state = json.loads((out / "trainer_state.json").read_text())
    steps_logged = [e for e in state["log_history"] if "frac_reward_zero_std" in e]

    def mean(key):
        values = [e[key] for e in steps_logged if key in e]
        return sum(values) / len(values) if values else None

    return {"variant": variant, "seed": seed, "wall_seconds": round(wall, 1), "curve": curve,
            "frac_reward_zero_std": mean("frac_reward_zero_std"), "generation_rounds": mean("sampling/generation_rounds"),
            "groups_generated": mean("sampling/groups_generated"), "dropped": mean("sampling/zero_std_groups_dropped")}


def accuracy_at(curve: list[dict], seconds: float) -> float:
    """Held-out accuracy of the last evaluation made within `seconds` of training."""
    return [p["accuracy"] for p in curve if p["train_seconds"] <= seconds + 1e-6][-1]


def time_to_reach(curve: list[dict], accuracy: float) -> float | None:
    """Training seconds at the first evaluation after the start that reaches `accuracy` (None: never)."""
    return next((p["train_seconds"] for p in curve[1:] if p["accuracy"] >= accuracy - 1e-9), None)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in results})
    fig, axes = plt.subplots(1, len(seeds), figsize=(5 * len(seeds), 4), squeeze=False)
    for ax, seed in zip(axes[0], seeds):
        for r in (r for r in results if r["seed"] == seed):
            ax.plot([p["train_seconds"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]], marker=".",
                    label=r["variant"])
        ax.set(title=f"seed {seed}", xlabel="training seconds (evaluations excluded)", ylabel="held-out accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--steps", type=int, default=140, help="GRPO steps per run (the demo recipe's)")
    parser.add_argument("--out", default="/tmp/r1kit-sampling-bench")
    opts = parser.parse_args()
    out = Path(opts.out)
    results, ratios = [], []
    for seed in opts.seeds:
        runs = {variant: run(variant, seed, opts.steps, out / f"seed{seed}" / variant.replace("+", "_"))
                for variant in VARIANTS}
        results.extend(runs.values())
        base = runs["baseline"]["curve"]
        budget, target = base[-1]["train_seconds"], base[-1]["accuracy"]
        print(f"seed {seed}: baseline {base[0]['accuracy']:.3f} -> {target:.3f} in {budget:.0f} s of training",
              flush=True)
        best = None
        for variant, r in runs.items():
            reach = time_to_reach(r["curve"], target)
            ratio = reach / budget if reach is not None else None
            if variant != "baseline" and ratio is not None:
                best = ratio if best is None else min(best, ratio)
            r.update(accuracy_at_baseline_time=accuracy_at(r["curve"], budget), time_to_baseline_final=reach,
                     time_ratio=ratio)
            print(f"  {variant:19s} acc@{budget:.0f}s {r['accuracy_at_baseline_time']:.3f}  final "
                  f"{r['curve'][-1]['accuracy']:.3f} after {r['curve'][-1]['train_seconds']:.0f} s  reaches "
                  f"{target:.3f} at {'never' if reach is None else f'{reach:.0f} s ({ratio:.2f}x)'}  "
                  f"zero-std {r['frac_reward_zero_std']:.2f}  rounds {r['generation_rounds'] or 1:.2f}  "
                  f"groups/step {r['groups_generated'] or 16:.1f}", flush=True)
        ratios.append(best)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "accuracy_vs_time.png")
    met = all(r is not None and r <= 0.75 for r in ratios)
    shown = ", ".join("never" if r is None else f"{r:.2f}x" for r in ratios)
    print(f"best variant's time to the baseline's final accuracy, per seed: {shown} (goal <= 0.75x every seed: "
          f"{'met' if met else 'not met'}). Curves: {out / 'accuracy_vs_time.png'}")


if __name__ == "__main__":
    main()
