"""What the second opinion costs per training step: the embedded demo recipe with `second_opinion_samples` 0 and 4,
side by side, same seed, interleaved (off, on, off, on, ...), each run in this process after one warm-up.

    OMP_NUM_THREADS=1 python benchmarks/second_opinion.py [--steps 20] [--rounds 2] [--samples 4] [--out DIR]

Reported per variant: seconds per step (the trainer's train_runtime / steps; held-out accuracy off), and for the runs
with the second opinion the seconds its listener itself spent (its own clock, so the ratio is not blurred by the
noise between runs). Goal: at most 5 % of a demo step. Writes results.json under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from r1kit import grpo
from r1kit.config.recipe import DEFAULT_RECIPE, parse_args
from r1kit.integrity.second_opinion import SecondOpinion
from r1kit.run import pipeline as runs


def one_run(out: Path, steps: int, samples: int) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    recipe = out.parent / "recipe.yaml"  # the demo recipe without held-out accuracy (its evaluations are not steps)
    recipe.write_text(yaml.safe_dump({**yaml.safe_load(Path(DEFAULT_RECIPE).read_text()), "callbacks": []}))
    argv = ["--config", str(recipe), "--max_steps", str(steps),
            "--second_opinion_samples", str(samples), "--output_dir", str(out), "--resume", "never",
            "--save_steps", "100000", "--compact_progress", "false", "--disable_tqdm", "true", "--log_level", "error"]
    script_args, training_args, model_args = parse_args(argv)
    run = grpo.setup(script_args, training_args, model_args)
    metrics = runs.train(run)
    listener = next((x for x in run.trainer.reward_listeners if isinstance(x, SecondOpinion)), None)
    runs.complete(run)
    return {"samples": samples, "seconds_per_step": metrics["train_runtime"] / steps,
            "listener_seconds_per_step": listener.seconds / steps if listener else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="r1kit-second-opinion-"))
    opts = parser.parse_args()
    out = Path(opts.out)
    one_run(out / "warmup", 2, opts.samples)  # imports, verifier workers, the model's first load
    results = []
    for round_ in range(opts.rounds):
        for samples in (0, opts.samples):
            results.append({"round": round_, **one_run(out / f"r{round_}-s{samples}", opts.steps, samples)})
            print(json.dumps(results[-1]))
    off = statistics.mean(r["seconds_per_step"] for r in results if r["samples"] == 0)
    on = statistics.mean(r["seconds_per_step"] for r in results if r["samples"] > 0)
    own = statistics.mean(r["listener_seconds_per_step"] for r in results if r["samples"] > 0)
    summary = {"off_s_per_step": off, "on_s_per_step": on, "step_ratio": on / off,
               "listener_s_per_step": own, "listener_share_of_step": own / on, "runs": results}
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"step {off:.3f} s off, {on:.3f} s on (x{on / off:.3f}); the listener itself {own * 1000:.1f} ms per step "
          f"({own / on:.2%} of a step). {out / 'results.json'}")


if __name__ == "__main__":
    main()
