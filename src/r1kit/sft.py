"""Supervised fine-tuning on TRL's `SFTTrainer`: the distillation stage of the R1 recipe, from a YAML recipe.

    r1kit sft --config recipes/OpenR1-Distill-7B/sft.yaml         # Open-R1's recipes, their keys unchanged
    r1kit sft --config recipes/demo/sft.yaml                      # the embedded demo's cold start, on CPU
    r1kit sft --config RECIPE --dry-run [--world-size N]          # check only, load no model

The pipeline mirrors `r1kit grpo`: strict recipe parsing (unknown keys, key migrations), checks before anything
loads, the dataset (a Hub id, local files or folders, a mixture, or the built-in `r1kit:addition` worked solutions),
the tokenizer (the recipe's `chat_template`, ChatML when the tokenizer has none, as Open-R1's sft.py), the model,
Open-R1's callbacks (Hub revisions, per-checkpoint benchmarks), `resume: auto | never | path`, and the same outputs
(`r1kit_run.json`, metrics, trainer state, a model card). Conversational data comes in a `messages` column, as in
Open-R1's datasets, or as prompt/completion.

With `model_name_or_path: r1kit:scratch` it builds a character-level tokenizer and a small Llama (sizes from the
recipe), and `stop_at_accuracy` stops once greedy held-out accuracy on the built-in task reaches a target (the demo
stops early on purpose, so that GRPO has room to improve it); `publish_to` copies the final model to a folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ScriptArguments

from r1kit.configs import check_data_fields
from r1kit.errors import ConfigError

logger = logging.getLogger("r1kit")
BUILTIN_TASK = "r1kit:addition"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@dataclass
class SFTScriptArguments(ScriptArguments):
    """Data and model-construction arguments of an SFT run.

    Args:
        dataset_name (`str` or `None`, defaults to `"r1kit:addition"`): Hub id, local file or folder, or the built-in
            task `r1kit:addition` (worked solutions of multi-digit additions). Either this or `dataset_mixture`.
        dataset_mixture (`dict` or `None`, defaults to `None`): Open-R1's `{datasets: [{id, config, split, columns,
            weight}], seed, test_split_size}`.
        train_size (`int`, defaults to `20000`): training problems generated for `r1kit:addition`.
        heldout_size (`int`, defaults to `200`): test problems for the accuracy checks (`r1kit:addition`).
        eval_every_steps (`int`, defaults to `25`): steps between accuracy checks (`r1kit:addition`).
        stop_at_accuracy (`float` or `None`, defaults to `None`): stop once held-out accuracy reaches this.
        hidden_size / num_layers / num_heads (`int`): model size when building from scratch (`r1kit:scratch`).
        characters (`str` or `None`, defaults to `None`): vocabulary of a tokenizer built from scratch.
        publish_to (`str` or `None`, defaults to `None`): copy the final model and tokenizer here.
    """

    dataset_name: str | None = field(default=BUILTIN_TASK, metadata={"help": "Dataset: Hub id, local path or built-in."})
    dataset_mixture: dict[str, Any] | None = field(default=None, metadata={"help": "Open-R1's dataset mixture."})
    train_size: int = field(default=20000, metadata={"help": "Training problems generated (r1kit:addition)."})
    heldout_size: int = field(default=200, metadata={"help": "Held-out problems for accuracy checks (r1kit:addition)."})
    eval_every_steps: int = field(default=25, metadata={"help": "Steps between accuracy checks (r1kit:addition)."})
    stop_at_accuracy: float | None = field(default=None, metadata={"help": "Stop once held-out accuracy reaches this."})
    hidden_size: int = field(default=128, metadata={"help": "Hidden size of a model built from scratch."})
    num_layers: int = field(default=4, metadata={"help": "Layers of a model built from scratch."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads of a model built from scratch."})
    characters: str | None = field(default=None, metadata={"help": "Characters of a tokenizer built from scratch."})
    publish_to: str | None = field(default=None, metadata={"help": "Copy the final model and tokenizer here."})

    def __post_init__(self):
        check_data_fields(self)


# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------
def load_sft_data(script_args: SFTScriptArguments, training_args) -> Any:
    """The training split: the built-in task's worked solutions, or the recipe's dataset (Open-R1's `messages`
    column, or prompt/completion). Raises ConfigError for data SFT cannot train on."""
    from datasets import Dataset

    from r1kit.data import get_dataset

    if script_args.dataset_mixture is None and script_args.dataset_name == BUILTIN_TASK:
        from r1kit.tasks import sft_rows

        return Dataset.from_list(sft_rows("train", script_args.train_size, training_args.seed))
    dataset = get_dataset(script_args)
    split = script_args.dataset_train_split
    if split not in dataset:
        raise ConfigError(f"dataset_train_split '{split}' not found; splits: {', '.join(dataset)}")
    train = dataset[split]
    columns = set(train.column_names)
    text_field = training_args.dataset_text_field
    if not ({"messages"} <= columns or {"prompt", "completion"} <= columns or text_field in columns):
        raise ConfigError(
            f"dataset: SFT needs a `messages` column (Open-R1's conversations), prompt/completion, or the text column "
            f"`{text_field}` (dataset_text_field); found {sorted(columns)}"
        )
    return train


def build_or_load(script_args: SFTScriptArguments, model_args, training_args):
    """(model, tokenizer): built from scratch for `r1kit:scratch`, else loaded, with ChatML when the tokenizer has
    no chat template."""
    from r1kit.modeling import build_char_tokenizer, build_tiny_llama, get_model, get_tokenizer

    if model_args.model_name_or_path == "r1kit:scratch":
        tokenizer = build_char_tokenizer(script_args.characters) if script_args.characters else build_char_tokenizer()
        model = build_tiny_llama(tokenizer, script_args.hidden_size, script_args.num_layers, script_args.num_heads,
                                 seed=training_args.seed)
        return model, tokenizer
    tokenizer = get_tokenizer(model_args, training_args)
    if tokenizer.chat_template is None:
        logger.info("The tokenizer has no chat template: using ChatML.")
        tokenizer.chat_template = CHATML
    return get_model(model_args, training_args), tokenizer


# --------------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------------
def pipeline(script_args: SFTScriptArguments, training_args, model_args) -> dict:
    """Runs an SFT recipe end to end; returns the summary (steps, seconds, metrics, held-out accuracy)."""
    from transformers import set_seed
    from trl import SFTTrainer

    from r1kit.callbacks import HeldOutAccuracyCallback, get_callbacks
    from r1kit.checkpoints import find_resume_checkpoint
    from r1kit.data import SMALL_ROWS, progress_bars
    from r1kit.grpo import attach_callbacks
    from r1kit.outputs import export_wandb_env, save_final_model, setup_logging, write_run_metadata
    from r1kit.preflight import check_sft_before_loading

    set_seed(training_args.seed)
    if training_args.torch_num_threads:
        import torch

        torch.set_num_threads(training_args.torch_num_threads)
    setup_logging(training_args)
    check_sft_before_loading(script_args, training_args, model_args)
    checkpoint = find_resume_checkpoint(training_args.output_dir, training_args.resume)
    export_wandb_env(training_args)
    train = load_sft_data(script_args, training_args)
    model, tokenizer = build_or_load(script_args, model_args, training_args)
    logger.info("Model: %s parameters; %s training rows", f"{sum(p.numel() for p in model.parameters()):,}", f"{len(train):,}")
    is_main = training_args.process_index == 0
    callbacks = get_callbacks(script_args, training_args, None, tokenizer, is_main)
    tracker = None
    if script_args.dataset_mixture is None and script_args.dataset_name == BUILTIN_TASK:
        from r1kit.tasks import addition_problems

        heldout = addition_problems("test", script_args.heldout_size)
        tracker = HeldOutAccuracyCallback(
            tokenizer, [r["prompt"] for r in heldout], [r["solution"] for r in heldout], training_args.output_dir,
            every_steps=script_args.eval_every_steps, max_new_tokens=64, stop_at=script_args.stop_at_accuracy,
        )
        callbacks.append(tracker)
    with progress_bars(len(train) >= SMALL_ROWS):  # TRL's tokenising passes over small data flash past
        trainer = SFTTrainer(model=model, args=training_args, train_dataset=train, processing_class=tokenizer,
                             callbacks=callbacks)
    attach_callbacks(trainer)
    if trainer.accelerator.is_main_process:
        write_run_metadata(training_args, checkpoint, training_args.world_size)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = result.metrics
    metrics["train_samples"] = len(train)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    save_final_model(trainer, training_args, script_args.dataset_name)
    from r1kit.callbacks import EvaluateBenchmarksCallback

    for evaluator in [c for c in trainer.callback_handler.callbacks if isinstance(c, EvaluateBenchmarksCallback)]:
        evaluator.finish(training_args.output_dir, trainer.state.global_step)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name, tags=["r1kit"])
    final = tracker.history[-1] if tracker and tracker.history else {}
    summary = {"steps": trainer.state.global_step, "train_seconds": round(metrics["train_runtime"], 1),
               "train_loss": metrics.get("train_loss"), "heldout_accuracy": final.get("accuracy"),
               "curve": [(r["step"], r["accuracy"]) for r in tracker.history] if tracker else []}
    (Path(training_args.output_dir) / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    if script_args.publish_to:
        publish(Path(training_args.output_dir), Path(script_args.publish_to), summary)
    return summary


def dry_run(script_args: SFTScriptArguments, training_args, model_args) -> str:
    """Checks an SFT recipe without loading a model (local data is loaded and its columns checked); returns the
    resolved configuration as YAML."""

    from r1kit.grpo import is_local_data
    from r1kit.outputs import resolved_recipe
    from r1kit.preflight import check_sft_before_loading

    check_sft_before_loading(script_args, training_args, model_args, dry_run=True)
    if script_args.dataset_name == BUILTIN_TASK or is_local_data(script_args):
        load_sft_data(script_args, training_args)

    return resolved_recipe(script_args, training_args, model_args)


SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "special_tokens_map.json")


def publish(source: Path, target: Path, summary: dict) -> None:
    """Copies the model and tokenizer files (no optimizer or trainer state) to `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)
    (target / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    logger.info("Published the model to %s", target)


def parse(argv: list[str], world_size: int | None = None):
    """The recipe and flags, parsed strictly (unknown keys, key migrations, types and choices), for `world_size`."""
    from r1kit.configs import ModelConfig, SFTConfig, parse_args

    return parse_args(argv, default_config=None, dataclass_types=(SFTScriptArguments, SFTConfig, ModelConfig),
                      world_size=world_size)


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit sft --config recipe.yaml [--dry-run [--world-size N]] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `sft` to the `r1kit` command."""
    from r1kit.console import add_pass_through_command

    return add_pass_through_command(subparsers, "sft", "supervised fine-tuning (distillation, cold start) from a recipe", run)


def run(args) -> int:
    """`r1kit sft`: parse the recipe strictly, then train (or only check, with --dry-run)."""
    from r1kit.console import parse_world_size, shape_warnings

    argv = list(args.argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    dry = "--dry-run" in argv
    argv, world_size = parse_world_size([a for a in argv if a != "--dry-run"], dry)
    shape_warnings()
    script_args, training_args, model_args = parse(argv, world_size)
    if dry:
        print(dry_run(script_args, training_args, model_args))
        print("recipe OK: keys, values, paths and (local) dataset columns checked; no model loaded.")
        return 0
    summary = pipeline(script_args, training_args, model_args)
    accuracy = "" if summary["heldout_accuracy"] is None else f", held-out accuracy {summary['heldout_accuracy']}"
    print(f"SFT done: {summary['steps']} steps, {summary['train_seconds']} s, train loss {summary['train_loss']}{accuracy}")
    return 0


if __name__ == "__main__":
    from r1kit.console import run_module

    sys.exit(run_module("sft", add_parser))
