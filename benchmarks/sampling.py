"""Does spending generation where the signal is pay off? Baseline GRPO, dynamic sampling, dynamic sampling with the
pass-rate curriculum, and the curriculum alone, on a task where most groups carry no signal.

    OMP_NUM_THREADS=1 python benchmarks/sampling.py [--seeds 42 43 44] [--steps 140] [--out /tmp/r1kit-sampling-bench]

The task is the embedded demo (the shipped 0.6 M-parameter model and its recipe) on additions of 1 to 6 digits, with
the accuracy reward alone (see TASK): short sums are mostly right and long ones never, so most groups have zero
reward variance. For each seed the variants run one after another, in fresh processes, with held-out greedy accuracy
measured every 10 steps together with the training time spent so far (evaluations excluded). Accuracies are means of
3 consecutive evaluations (SMOOTH). Reported per seed and variant: accuracy at the baseline's training time (equal
wall-clock), and the training time each needs to reach the baseline's final accuracy, as a fraction of the
baseline's. Goal: the best variant reaches it in at most 0.75x the baseline's time, every seed. Writes results.json
and accuracy_vs_time.png under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# 400 training problems (each comes back about 5.6 times in 140 steps, so a prompt's record has something to say) and
# 500 held-out ones (a 1-point difference is 5 problems); the accuracy reward alone, so that a group of all-right or
# all-wrong answers has no signal at all (the format rewards would give most groups a little variance).
TASK = ["--dataset_options", '{"min_digits": 1, "max_digits": 6, "train_size": 400, "test_size": 500}',
        "--heldout_size", "500", "--heldout_eval_steps", "10", "--reward_funcs", "accuracy", "--reward_weights", "1.0"]
CURRICULUM = ["--curriculum_skip_solved", "2", "--curriculum_pass_rate_window", "0.05", "0.95",
              "--curriculum_explore", "0.1", "--curriculum_reward", "accuracy"]
DYNAMIC = ["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "4"]
VARIANTS = {
    "baseline": [],
    "dynamic": DYNAMIC,
    "dynamic+curriculum": DYNAMIC + CURRICULUM,
    "curriculum": CURRICULUM,
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


SMOOTH = 3  # evaluations averaged: one evaluation's noise (about +-2 points) must not decide a crossing


def smoothed(curve: list[dict]) -> list[tuple[float, float]]:
    """(training seconds, mean accuracy of this evaluation and the SMOOTH - 1 before it), from the SMOOTH-th on."""
    return [(curve[i]["train_seconds"], sum(p["accuracy"] for p in curve[i - SMOOTH + 1 : i + 1]) / SMOOTH)
            for i in range(SMOOTH - 1, len(curve))]


def accuracy_at(curve: list[dict], seconds: float) -> float | None:
    """Smoothed held-out accuracy at the last evaluation made within `seconds` of training (None: too few)."""
    within = [acc for t, acc in smoothed(curve) if t <= seconds + 1e-6]
    return within[-1] if within else None


def time_to_reach(curve: list[dict], accuracy: float) -> float | None:
    """Training seconds at the first evaluation whose smoothed accuracy reaches `accuracy` (None: never)."""
    return next((t for t, acc in smoothed(curve) if acc >= accuracy - 1e-9), None)


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
        budget, target = base[-1]["train_seconds"], smoothed(base)[-1][1]
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
            equal_time = r["accuracy_at_baseline_time"]
            print(f"  {variant:19s} acc@{budget:.0f}s {'-' if equal_time is None else f'{equal_time:.3f}'}  final "
                  f"{smoothed(r['curve'])[-1][1]:.3f} after {r['curve'][-1]['train_seconds']:.0f} s  reaches "
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
