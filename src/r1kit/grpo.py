"""The GRPO pipeline: a recipe in, a trained model out, on TRL's `GRPOTrainer`.

    pipeline = setup -> train -> finish
    setup:  seed, logging; every check that needs no weights (`check_before_loading`); the resume decision
            (`checkpoints`); the data (`prepare_dataset`: columns and rows checked); the trainer (`build_trainer`:
            tokenizer, model, rewards, callbacks, the completions recorder); r1kit_run.json and the start-up block
    train:  `trainer.train`, then its metrics and state
    finish: the final model and card, the final benchmark evaluations, optional evaluation and push, summary.json

What a run writes besides the model lives in `outputs`, the resume policy in `checkpoints`, the checks in `preflight`.

Launch it any of these ways:
    r1kit grpo --config recipe.yaml
    python -m r1kit.grpo --config recipe.yaml
    accelerate launch -m r1kit.grpo --config recipe.yaml
    torchrun --nproc_per_node 2 -m r1kit.grpo --config recipe.yaml
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from r1kit.checkpoints import find_resume_checkpoint
from r1kit.configs import GRPOConfig, GRPOScriptArguments
from r1kit.errors import ConfigError
from r1kit.reasoning_gym import GYM_PREFIX
from r1kit.tasks import BUILTIN_PREFIX

logger = logging.getLogger("r1kit")

# --------------------------------------------------------------------------------------------------------------------
# Checks that need no weights
# --------------------------------------------------------------------------------------------------------------------
def is_local_data(script_args: GRPOScriptArguments) -> bool:
    """Whether the dataset can be read without a hub (so a dry run may check its columns)."""

    def local(name: str) -> bool:
        return name.startswith((BUILTIN_PREFIX, GYM_PREFIX)) or Path(os.path.expanduser(name)).exists()

    if script_args.dataset_mixture is not None:
        return all(local(m.id) for m in script_args.dataset_mixture.datasets)
    return local(script_args.dataset_name)


def prepare_dataset(script_args: GRPOScriptArguments, training_args: GRPOConfig):
    """Loads the data, checks the rewards' columns and builds the conversational prompts. Returns the
    conversational dataset and the raw one (callbacks read the raw prompts)."""
    from datasets import DatasetDict

    from r1kit.data import get_dataset, to_conversations
    from r1kit.preflight import check_dataset

    dataset = get_dataset(script_args)
    check_dataset(script_args, training_args, dataset)
    raw = DatasetDict(dict(dataset))
    return to_conversations(dataset, script_args.dataset_prompt_column, training_args.system_prompt), raw


# --------------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------------
def generation_prompt_ends_in_think(tokenizer) -> bool:
    """Whether the chat template pre-fills `<think>` (R1-Distill style), so completions start inside the block."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - no template, or one that needs other inputs
        return False
    return str(text).rstrip().endswith("<think>")


def attach_callbacks(trainer) -> None:
    """Gives the callbacks that log through the trainer (`attach(trainer)`) their trainer, once it exists."""
    for callback in trainer.callback_handler.callbacks:
        if hasattr(callback, "attach"):
            callback.attach(trainer)


def build_trainer(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: Any, dataset, raw_dataset=None):
    """Tokenizer, model, rewards, callbacks and the trainer (TRL's `GRPOTrainer` with r1kit's sampling, see
    `r1kit.sampling`), as Open-R1 builds them."""
    from trl import get_peft_config

    from r1kit.callbacks import get_callbacks
    from r1kit.modeling import get_model, get_tokenizer
    from r1kit.outputs import CompletionsRecorder
    from r1kit.rewards import get_reward_funcs
    from r1kit.sampling import SamplingGRPOTrainer, curriculum_reward_index

    tokenizer = get_tokenizer(model_args, training_args)
    if script_args.format_think_prefilled is None:
        script_args.format_think_prefilled = generation_prompt_ends_in_think(tokenizer)
    is_main = training_args.process_index == 0
    callbacks = get_callbacks(script_args, training_args, raw_dataset or dataset, tokenizer, is_main)
    model = get_model(model_args, training_args)
    reward_funcs = get_reward_funcs(script_args, training_args)
    eval_dataset = None
    if training_args.eval_strategy != "no":
        if script_args.dataset_test_split not in dataset:
            raise ConfigError(
                f"eval_strategy is '{training_args.eval_strategy}' but the dataset has no split "
                f"'{script_args.dataset_test_split}'; splits: {', '.join(dataset)}"
            )
        eval_dataset = dataset[script_args.dataset_test_split]
    trainer = SamplingGRPOTrainer(  # TRL's GRPOTrainer, plus dynamic sampling and the curriculum when turned on
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=eval_dataset,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
        processing_class=tokenizer,
        curriculum_reward_index=curriculum_reward_index(script_args.reward_funcs, training_args),
    )
    attach_callbacks(trainer)
    recorder = CompletionsRecorder(training_args.output_dir, enabled=training_args.log_completions_file and is_main)
    recorder.attach(trainer)  # every scored completion, with every reward's score, to completions.jsonl
    if training_args.compact_progress:
        from transformers.trainer_callback import ProgressCallback

        from r1kit.callbacks import CompactProgressCallback

        if trainer.pop_callback(ProgressCallback) is not None:  # absent when disable_tqdm
            trainer.add_callback(CompactProgressCallback())
    return trainer


def pipeline(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: Any) -> dict:
    """Runs a GRPO recipe end to end; returns the training metrics."""
    trainer, dataset, checkpoint = setup(script_args, training_args, model_args)
    metrics = train(trainer, dataset[script_args.dataset_train_split], checkpoint)
    return finish(trainer, metrics, script_args, training_args)


def setup(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: Any):
    """Seed and logging, every check that needs no weights, the resume decision, the data, then the trainer (model,
    rewards, callbacks). Returns (trainer, dataset, checkpoint to resume from)."""
    from transformers import set_seed

    from r1kit.outputs import export_wandb_env, setup_logging, startup_logger, startup_summary, write_run_metadata
    from r1kit.preflight import check_before_loading

    set_seed(training_args.seed)
    if training_args.torch_num_threads:
        import torch

        torch.set_num_threads(training_args.torch_num_threads)
    setup_logging(training_args)
    log_process(training_args)
    check_before_loading(script_args, training_args, model_args)  # everything that needs no weights (preflight.py)
    checkpoint = find_resume_checkpoint(training_args.output_dir, training_args.resume)
    export_wandb_env(training_args)
    dataset, raw_dataset = prepare_dataset(script_args, training_args)
    trainer = build_trainer(script_args, training_args, model_args, dataset, raw_dataset)
    if trainer.accelerator.is_main_process:
        write_run_metadata(training_args, checkpoint, training_args.world_size)
    startup_logger.info(startup_summary(script_args, training_args, model_args, trainer, dataset, checkpoint))
    return trainer, dataset, checkpoint


def log_process(training_args: GRPOConfig) -> None:
    logger.log(
        logging.WARNING if training_args.world_size > 1 else logging.INFO,  # one process: the start-up block says it
        "Process rank %s / world size %s, device %s, distributed: %s, bf16: %s",
        training_args.process_index, training_args.world_size, training_args.device,
        training_args.parallel_mode.value, training_args.bf16,
    )
    logger.info("Training arguments %s", training_args)


def train(trainer, train_split, checkpoint: str | None) -> dict:
    """Trains (from `checkpoint` when resuming); saves the metrics and the trainer state."""
    logger.info("*** Train ***")
    metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
    metrics["train_samples"] = len(train_split)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    return metrics


def finish(trainer, metrics: dict, script_args: GRPOScriptArguments, training_args: GRPOConfig) -> dict:
    """The final model and card, the final benchmark evaluations, the optional evaluation and push, summary.json."""
    from r1kit.callbacks import EvaluateBenchmarksCallback
    from r1kit.outputs import save_final_model, write_summary

    logger.info("*** Save model ***")
    save_final_model(trainer, training_args, script_args.dataset_name)
    evaluators = [c for c in trainer.callback_handler.callbacks if isinstance(c, EvaluateBenchmarksCallback)]
    for evaluator in evaluators:
        evaluator.finish(training_args.output_dir, trainer.state.global_step)
    if evaluators:
        trainer.save_state()  # with the evaluation metrics logged since
    if training_args.do_eval:
        if trainer.eval_dataset is None:
            logger.warning("do_eval is set but there is no eval dataset (eval_strategy: no); skipping evaluation.")
        else:
            logger.info("*** Evaluate ***")
            eval_metrics = trainer.evaluate()
            eval_metrics["eval_samples"] = len(trainer.eval_dataset)
            trainer.log_metrics("eval", eval_metrics)
            trainer.save_metrics("eval", eval_metrics)
    if training_args.push_to_hub:
        logger.info("Pushing to the Hub...")
        trainer.push_to_hub(dataset_name=script_args.dataset_name, tags=["r1kit"])
    summary = write_summary(trainer, metrics, training_args)
    if summary:
        metrics["summary"] = summary
    return metrics


def dry_run(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: Any) -> str:
    """Checks a recipe without loading a model; returns the resolved configuration as YAML."""
    from r1kit.outputs import resolved_recipe
    from r1kit.preflight import check_before_loading

    check_before_loading(script_args, training_args, model_args, dry_run=True)
    if is_local_data(script_args):
        dataset, raw = prepare_dataset(script_args, training_args)
        from r1kit.callbacks import get_callbacks

        get_callbacks(script_args, training_args, raw, None)  # a callback's own data checks
    else:
        logger.info("Dataset %s is remote: its columns are checked when the run starts.", script_args.dataset_name)

    return resolved_recipe(script_args, training_args, model_args)


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit grpo [--config recipe.yaml] [--dry-run [--world-size N]] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
HELP = """Every field of GRPOScriptArguments, GRPOConfig and TRL's ModelConfig is a --flag that overrides the recipe
(no --config: the embedded demo recipe). --dry-run validates the recipe (keys, cross-field rules, local dataset
columns) and prints it; add --world-size N to check it as launched on N processes."""


def add_parser(subparsers):
    """Adds `grpo` to the `r1kit` command."""
    from r1kit.console import add_pass_through_command

    return add_pass_through_command(subparsers, "grpo", "train with GRPO from a recipe", run)


def run(args) -> int:
    """`r1kit grpo`: parse the recipe strictly, then train (or only check, with --dry-run)."""
    from r1kit.configs import parse_args
    from r1kit.console import parse_world_size, shape_warnings

    argv = list(args.argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip() + "\n\n" + HELP)
        return 0
    dry = "--dry-run" in argv
    argv, world_size = parse_world_size([a for a in argv if a != "--dry-run"], dry)
    shape_warnings()
    script_args, training_args, model_args = parse_args(argv, world_size=world_size)
    if dry:
        print(dry_run(script_args, training_args, model_args))
        print("recipe OK: keys, values, paths, cross-field rules and (local) dataset columns checked; no model loaded.")
        return 0
    metrics = pipeline(script_args, training_args, model_args)
    if "summary" in metrics:
        print_summary(metrics["summary"])
    return 0


def print_summary(summary: dict) -> None:
    before, after = summary["accuracy_before"], summary["accuracy_after"]
    print(
        f"\nHeld-out accuracy {before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} points) "
        f"in {summary['steps']} GRPO steps, {summary['train_seconds']:.0f} s of training.\n"
        f"Outputs: {summary['output_dir']} (model, completions.jsonl, summary.json). "
        f"Draw the curves: r1kit report {summary['output_dir']}"
    )


if __name__ == "__main__":
    from r1kit.console import run_module

    sys.exit(run_module("grpo", add_parser))
