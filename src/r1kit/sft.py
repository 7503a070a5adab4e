"""Supervised fine-tuning on TRL's `SFTTrainer`: the distillation stage of the R1 recipe, from a YAML recipe.

    r1kit sft --config recipes/OpenR1-Distill-7B/sft.yaml         # Open-R1's recipes, their keys unchanged
    r1kit sft --config recipes/demo/sft.yaml                      # the embedded demo's cold start, on CPU
    r1kit sft --config RECIPE --dry-run [--world-size N]          # check only, load no model
    r1kit sft --config RECIPE --world-size N                      # N processes of this machine (r1kit launch)

The pipeline mirrors `r1kit grpo`: strict recipe parsing (unknown keys, key migrations), checks before anything
loads, the dataset (a Hub id, local files or folders, a mixture, or the built-in `r1kit:addition` worked solutions),
the tokenizer (the recipe's `chat_template`, ChatML when the tokenizer has none, as Open-R1's sft.py), the model,
Open-R1's callbacks (Hub revisions, per-checkpoint benchmarks), `resume: auto | never | path`, the same run life
(one run per output_dir, SIGTERM/SIGINT: a checkpoint and exit 75, a completed run left alone) and the same outputs
(`r1kit_run.json`, metrics, trainer state, a model card). Conversational data comes in a `messages` column, as in
Open-R1's datasets, or as prompt/completion.

With `model_name_or_path: r1kit:scratch` it builds a character-level tokenizer and a small Llama (sizes from the
recipe), and `stop_at_accuracy` stops once greedy held-out accuracy on the built-in task reaches a target (the demo
stops early on purpose, so that GRPO has room to improve it); `publish_to` copies the final model to a folder.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from datasets import Dataset

from r1kit import records
from r1kit.benchmarking.callbacks import EvaluateBenchmarksCallback, HeldOutAccuracyCallback, get_callbacks
from r1kit.config.keys import usage
from r1kit.config.recipe import SFT_TYPES, run_recipe_command
from r1kit.config.schema import ModelConfig, SFTConfig, SFTScriptArguments
from r1kit.console import add_pass_through_command
from r1kit.errors import ConfigError
from r1kit.launching import launch
from r1kit.loading import data
from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama, get_model, get_peft_config, get_tokenizer
from r1kit.run import pipeline as runs
from r1kit.run import preflight
from r1kit.run.lifecycle import RunStopped
from r1kit.sources.tasks import addition_problems, sft_rows
from r1kit.training.trainer import R1SFTTrainer

logger = logging.getLogger(__name__)
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------
def load_sft_data(script_args: SFTScriptArguments, training_args: SFTConfig) -> Any:
    """The training split: the built-in task's worked solutions, or the recipe's dataset (Open-R1's `messages`
    column, or prompt/completion). Raises ConfigError for data SFT cannot train on."""
    if script_args.uses_builtin_task:
        return Dataset.from_list(sft_rows("train", script_args.train_size, training_args.seed))
    dataset = data.get_dataset(script_args)
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
# The run: the shared skeleton (r1kit.run.pipeline) around TRL's SFTTrainer
# --------------------------------------------------------------------------------------------------------------------
def pipeline(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig) -> dict:
    """Runs an SFT recipe end to end; returns the summary (steps, seconds, metrics, held-out accuracy)."""
    checkpoint = runs.prepare(training_args, lambda: preflight.check_sft_recipe(script_args, training_args, model_args),
                              (script_args, training_args, model_args))
    for note in runs.resume_notes():  # what changed since the checkpoint, and what is done about it
        runs.startup_logger.info("r1kit sft: resume %s", note)
    train_rows = load_sft_data(script_args, training_args)
    model, tokenizer = build_or_load(script_args, model_args, training_args)
    logger.info("Model: %s parameters; %s training rows", f"{sum(p.numel() for p in model.parameters()):,}",
                f"{len(train_rows):,}")
    is_main = training_args.process_index == 0
    callbacks = get_callbacks(script_args, training_args, None, tokenizer, is_main)
    tracker = heldout_tracker(script_args, training_args, tokenizer)
    if tracker is not None:
        callbacks.append(tracker)
    with data.progress_bars(len(train_rows) >= data.SMALL_ROWS):  # TRL's tokenising passes over small data flash past
        trainer = R1SFTTrainer(model=model, args=training_args, train_dataset=train_rows, processing_class=tokenizer,
                             callbacks=callbacks, peft_config=get_peft_config(model_args))  # use_peft: LoRA
    evaluators = [c for c in callbacks if isinstance(c, EvaluateBenchmarksCallback)]
    for evaluator in evaluators:
        evaluator.attach(trainer)
    run = runs.Run(trainer, checkpoint, len(train_rows), script_args.dataset_name, tracker, evaluators,
                   model_name=model_args.model_name_or_path)
    if trainer.accelerator.is_main_process:
        runs.write_run_metadata(training_args, checkpoint)
        for line in startup_lines(script_args, training_args, model_args, model, len(train_rows), checkpoint):
            runs.startup_logger.info(line)
    metrics = runs.train(run)
    runs.finish(run)
    history = tracker.history if tracker else []
    summary = {"steps": trainer.state.global_step, "train_seconds": round(metrics["train_runtime"], 1),
               "train_loss": metrics.get("train_loss"), "heldout_accuracy": history[-1]["accuracy"] if history else None,
               "curve": [(r["step"], r["accuracy"]) for r in history]}
    runs.write_json(run, "sft_summary.json", summary)
    if script_args.publish_to and trainer.accelerator.is_main_process:
        publish(Path(training_args.output_dir), Path(script_args.publish_to), summary)
    runs.complete(run)
    return summary


def startup_lines(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig, model, rows: int,
                  checkpoint: str | None) -> list[str]:
    """The start-up block, as `r1kit grpo` prints one: what trains, on what, for how long, and where it goes."""
    params = sum(p.numel() for p in model.parameters())
    source = script_args.dataset_name or "a mixture"
    steps = (f"up to {training_args.max_steps:,}" if training_args.max_steps > 0
             else f"{training_args.num_train_epochs:g} epoch(s)")
    stop = (f"; stops once held-out accuracy reaches {script_args.stop_at_accuracy:.0%} (checked every "
            f"{script_args.eval_every_steps} steps)" if script_args.uses_builtin_task and script_args.stop_at_accuracy
            else "")
    lines = ["r1kit sft",
             f"  model    {model_args.model_name_or_path} ({params:,} parameters; {training_args.device})",
             f"  data     {source}: {rows:,} training rows",
             f"  steps    {steps}, {training_args.per_device_train_batch_size} rows each (learning rate "
             f"{training_args.learning_rate:g}){stop}",
             f"  output   {training_args.output_dir}"
             + (f"; the model is copied to {script_args.publish_to}" if script_args.publish_to else ""),
             f"  resume   {'continues ' + checkpoint if checkpoint else 'starts at step 0'}"]
    return lines


def heldout_tracker(script_args: SFTScriptArguments, training_args: SFTConfig, tokenizer) -> HeldOutAccuracyCallback | None:
    """Greedy accuracy on the built-in task's held-out problems (and `stop_at_accuracy`); None for other data."""
    if not script_args.uses_builtin_task:
        return None
    heldout = addition_problems("test", script_args.heldout_size)
    return HeldOutAccuracyCallback(
        tokenizer, [r["prompt"] for r in heldout], [r["solution"] for r in heldout], training_args.output_dir,
        every_steps=script_args.eval_every_steps, max_new_tokens=64, stop_at=script_args.stop_at_accuracy,
    )


def dry_run(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig) -> str:
    """Checks an SFT recipe without loading a model (local data is loaded and its columns checked); returns the
    resolved configuration as YAML."""
    preflight.check_sft_recipe(script_args, training_args, model_args, dry_run=True)
    if script_args.uses_builtin_task or data.is_local(script_args):
        load_sft_data(script_args, training_args)
    return runs.resolved_recipe(script_args, training_args, model_args) + (
        "recipe OK: keys, values, paths and (local) dataset columns checked; no model loaded.")


SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "special_tokens_map.json")


def publish(source: Path, target: Path, summary: dict) -> None:
    """Copies the model and tokenizer files (no optimizer or trainer state) to `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)
    records.write_json(target / "sft_summary.json", summary)
    logger.info("Published the model to %s", target)


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit sft --config recipe.yaml [--dry-run [--world-size N]] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `sft` to the `r1kit` command."""
    return add_pass_through_command(subparsers, "sft", "supervised fine-tuning (distillation, cold start) from a recipe", run)


def run(args) -> int:
    """`r1kit sft`: parse the recipe strictly, then train (or only check, with --dry-run)."""
    processes, argv = launch.world_size(args.argv)
    if processes > 1:  # --world-size N: N processes of this machine, through r1kit launch
        return launch.local("sft", argv, processes)
    return run_recipe_command(argv, usage("sft"), SFT_TYPES, dry_run, train_and_report)


def train_and_report(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig) -> int:
    try:
        summary = pipeline(script_args, training_args, model_args)
    except RunStopped as stop:  # interrupted (75), stopped (3), already complete (0): said in one line
        return stop.exit_code
    accuracy = "" if summary["heldout_accuracy"] is None else f", held-out accuracy {summary['heldout_accuracy']}"
    print(f"SFT done: {summary['steps']} steps, {summary['train_seconds']} s, train loss {summary['train_loss']}{accuracy}")
    return 0


if __name__ == "__main__":
    from r1kit.console import run_module

    sys.exit(run_module("sft", add_parser))
