"""What a run shows and writes besides the model: logging and the start-up block, `r1kit_run.json` (world size,
resumed-from checkpoint, versions), `completions.jsonl` (every scored completion with every reward), `summary.json`
(held-out accuracy before and after), and the final save (the model stops at EOS; the model card). Shared by
`r1kit grpo` and `r1kit sft`; only the main process writes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

logger = logging.getLogger("r1kit")
startup_logger = logging.getLogger("r1kit.startup")


def setup_logging(training_args: Any) -> None:
    import datasets
    import transformers

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    level = training_args.get_process_log_level()  # the main process at log_level, the others at log_level_replica
    logger.setLevel(level)
    logging.getLogger("r1kit").setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    # The start-up block: plain lines, shown at the default level on the main process (log_level: error hides it).
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    startup_logger.handlers = [handler]
    startup_logger.propagate = False
    startup_logger.setLevel(logging.INFO if training_args.process_index == 0 and level <= logging.WARNING else logging.ERROR)


def export_wandb_env(training_args: Any) -> None:
    if "wandb" not in (training_args.report_to or []):
        return
    for name, value in (
        ("WANDB_ENTITY", training_args.wandb_entity),
        ("WANDB_PROJECT", training_args.wandb_project),
        ("WANDB_RUN_GROUP", training_args.wandb_run_group),
    ):
        if value is not None:
            os.environ[name] = value


def write_run_metadata(training_args: Any, resumed_from: str | None, world_size: int) -> None:
    import torch
    import transformers
    import trl

    meta = {
        "world_size": world_size,
        "resumed_from": resumed_from,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "argv": sys.argv,
    }
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(training_args.output_dir) / "r1kit_run.json").write_text(json.dumps(meta, indent=2))


def startup_summary(script_args, training_args, model_args, trainer, dataset, checkpoint: str | None) -> str:
    """The block a run starts with: model, data (rows per split), rewards and weights, steps, output folder, resume."""

    from r1kit.data import split_sizes

    params = sum(p.numel() for p in trainer.model.parameters())
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    dtype = next(trainer.model.parameters()).dtype
    precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else str(dtype).replace("torch.", "")
    weights = training_args.reward_weights or [1.0] * len(script_args.reward_funcs)
    args, world = training_args, training_args.world_size
    completions_per_step = args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    prompts_per_step = completions_per_step // args.num_generations
    train_rows = len(dataset[script_args.dataset_train_split])
    if args.max_steps > 0:
        steps = f"{args.max_steps:,}"
    else:
        per_epoch = math.ceil(train_rows * args.num_generations * args.num_iterations / completions_per_step)
        steps = f"about {math.ceil(per_epoch * args.num_train_epochs):,} ({args.num_train_epochs:g} epochs)"
    source = script_args.dataset_name or f"mixture of {len(script_args.dataset_mixture.datasets)} datasets"
    if checkpoint:
        resume = f"continues {checkpoint} (resume: {args.resume})"
    else:
        resume = "starts at step 0" + (" (resume: never)" if args.resume == "never" else "")
    lines = [
        "r1kit grpo",
        f"  model    {model_args.model_name_or_path} ({params:,} parameters"
        + (", all trainable" if trainable == params else f", {trainable:,} trainable")
        + f"; {precision} on {args.device}" + (f" x {world} processes" if world > 1 else "") + ")",
        f"  data     {source}: {split_sizes(dataset)} rows; trains on '{script_args.dataset_train_split}', "
        f"prompt column '{script_args.dataset_prompt_column}'",
        "  rewards  " + ", ".join(f"{name} x{w:g}" for name, w in zip(script_args.reward_funcs, weights)),
        f"  steps    {steps}, each {prompts_per_step} prompts x {args.num_generations} completions "
        f"(learning rate {args.learning_rate:g}, {getattr(args.lr_scheduler_type, 'value', args.lr_scheduler_type)})",
        f"  output   {args.output_dir}",
        f"  resume   {resume}",
    ]
    sampling = sampling_line(args)
    if sampling:
        lines.insert(-2, sampling)
    return "\n".join(lines)


def sampling_line(args) -> str | None:
    """The start-up line for dynamic sampling and the curriculum, when either is on."""
    from r1kit.sampling import CurriculumRules

    parts = []
    if getattr(args, "dynamic_sampling", False):
        parts.append(f"dynamic sampling (groups without signal dropped, up to {args.dynamic_sampling_max_rounds} "
                     "generation rounds)")
    rules = CurriculumRules.from_args(args)
    if rules.active:
        skips = [f"solved in the last {rules.skip_solved}" if rules.skip_solved else "",
                 f"pass rate outside [{rules.window[0]:g}, {rules.window[1]:g}]" if rules.window else ""]
        parts.append(f"curriculum by {args.curriculum_reward} (skips prompts {' or '.join(s for s in skips if s)}; "
                     f"explore {rules.explore:g})")
    return "  sampling " + "; ".join(parts) if parts else None


def write_summary(trainer, metrics: dict, training_args: Any) -> dict | None:
    """`OUTPUT_DIR/summary.json` (accuracy before/after, seconds, steps) when held-out accuracy was tracked."""
    from r1kit.callbacks import HeldOutAccuracyCallback

    tracker = next((c for c in trainer.callback_handler.callbacks if isinstance(c, HeldOutAccuracyCallback)), None)
    if tracker is None or not tracker.history or not trainer.accelerator.is_main_process:
        return None
    history = sorted(tracker.history, key=lambda r: r["step"])
    summary = {
        "accuracy_before": history[0]["accuracy"],
        "accuracy_after": history[-1]["accuracy"],
        "train_seconds": round(metrics.get("train_runtime", 0.0), 1),
        "steps": trainer.state.global_step,
        "output_dir": str(Path(training_args.output_dir).resolve()),
        "accuracy_curve": [(r["step"], r["accuracy"]) for r in history],
    }
    (Path(training_args.output_dir) / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def resolved_recipe(script_args: Any, training_args: Any, model_args: Any) -> str:
    """What a dry run prints: the three argument objects as parsed (plain values only) and the checkpoint a run would
    resume from, as YAML."""
    import yaml

    from r1kit.checkpoints import find_resume_checkpoint

    def plain(obj):
        data = obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
        return {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}

    resolved = {
        "script_arguments": plain(script_args),
        "model_arguments": plain(model_args),
        "training_arguments": plain(training_args),
        "resume_from": find_resume_checkpoint(training_args.output_dir, training_args.resume),
    }
    return yaml.safe_dump(resolved, sort_keys=False)


def save_final_model(trainer, training_args, dataset_name: str | None) -> None:
    """The final model, which stops at EOS in generation (as Open-R1 sets it, so that pipeline() stops), its
    tokenizer, and on the main process a model card and a config with the KV cache on."""
    tokenizer = trainer.processing_class
    trainer.model.generation_config.eos_token_id = tokenizer.eos_token_id
    trainer.save_model(training_args.output_dir)
    if not trainer.accelerator.is_main_process:
        return
    try:
        trainer.create_model_card(dataset_name=dataset_name, tags=["r1kit"])
    except Exception as e:  # noqa: BLE001 - a model card is never worth a lost run
        logger.warning("Could not write the model card: %s", e)
    trainer.model.config.use_cache = True
    trainer.model.config.save_pretrained(training_args.output_dir)


class CompletionsRecorder:
    """Writes every scored completion to `OUTPUT_DIR/completions.jsonl` with its step, prompt and the score of every
    reward: what the model wrote, without wandb.

    It wraps the trainer's reward calculation rather than a reward function, so each row holds every reward's score
    whatever their kinds and order (plain functions, `async def` functions that TRL runs concurrently, reward models).
    Only the main process writes (its own share of the batch); rows from evaluation carry `"mode": "eval"`.
    """

    def __init__(self, output_dir: str, enabled: bool = True):
        self.path = Path(output_dir) / "completions.jsonl"
        self.enabled = enabled

    def attach(self, trainer) -> None:
        """Records from now on each batch that `trainer` (a TRL `GRPOTrainer`) scores."""
        if not self.enabled:
            return
        calculate = getattr(trainer, "_calculate_rewards", None)
        if calculate is None:  # a TRL whose internals moved: say so rather than leave an empty file
            logger.warning("This TRL's GRPOTrainer has no _calculate_rewards: completions.jsonl will not be written.")
            return

        def calculate_and_record(inputs, prompts, completions, completion_ids_list):
            rewards = calculate(inputs, prompts, completions, completion_ids_list)
            # Gathered over processes, in rank order: this process's rows are its own slice.
            n, rank = len(prompts), trainer.accelerator.process_index
            training = trainer.model.training
            step = trainer.state.global_step + 1 if training else trainer.state.global_step
            self.write(step, "train" if training else "eval", prompts, completions, list(trainer.reward_func_names),
                       rewards[rank * n : (rank + 1) * n].tolist(),
                       getattr(trainer, "generation_round", None) if training else None)
            return rewards

        trainer._calculate_rewards = calculate_and_record

    def write(self, step: int, mode: str, prompts: list, completions: list, names: list[str],
              scores: list[list[float]], generation_round: int | None = None) -> None:
        """Appends one row per completion; a reward's `None` (NaN in TRL's tensor) stays `null`. With dynamic
        sampling, rows carry their generation `round` (a step may score several rounds, dropped groups included)."""
        from r1kit.rewards.text import completion_text

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            for prompt, completion, row_scores in zip(prompts, completions, scores):
                row = {
                    "step": step,
                    "mode": mode,
                    "prompt": completion_text(prompt[-1:]) if isinstance(prompt, list) else prompt,
                    "completion": completion_text(completion),
                    "rewards": {name: None if math.isnan(v) else v for name, v in zip(names, row_scores)},
                }
                if generation_round is not None:
                    row["round"] = generation_round
                f.write(json.dumps(row) + "\n")
