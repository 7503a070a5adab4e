"""What every training run shares, GRPO and SFT alike, around the trainer each command builds:

    prepare(training_args)       seed, threads, logging, the resume decision, W&B variables -> checkpoint
    train(run)                   trainer.train (resuming), then its metrics and state -> metrics
    finish(run, metrics)         the final model and card, final benchmark evaluations, the Hub push

and the files a run writes besides the model: `r1kit_run.json` (world size, resumed-from checkpoint, versions),
`summary.json` / `sft_summary.json` (each command's), and what a dry run prints (`resolved_recipe`). Only the main
process writes; every process computes.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from r1kit.callbacks import EvaluateBenchmarksCallback, HeldOutAccuracyCallback
from r1kit.checkpoints import find_resume_checkpoint
from r1kit.config.schema import RunFields

logger = logging.getLogger(__name__)
startup_logger = logging.getLogger("r1kit.startup")  # the start-up block: plain lines on the main process


@dataclass
class Run:
    """A built run: the trainer and the handles `finish` needs (no scanning the trainer's callbacks for them).

    Args:
        trainer: the TRL trainer (`R1Trainer` or `SFTTrainer`).
        checkpoint (`str` or `None`): the checkpoint training resumes from.
        train_rows (`int`): rows in the training split.
        dataset_name (`str` or `None`): the recipe's dataset, for the model card and the Hub push.
        heldout (`HeldOutAccuracyCallback` or `None`): the held-out accuracy tracker, when the run has one.
        evaluators (`list[EvaluateBenchmarksCallback]`): per-checkpoint benchmark evaluations.
        model_name (`str` or `None`): the model as the recipe names it (`model_name_or_path`: a Hub id, a path or
            `r1kit:<model>`), recorded in the saved files instead of this machine's cache path.
    """

    trainer: Any
    checkpoint: str | None
    train_rows: int
    dataset_name: str | None = None
    heldout: HeldOutAccuracyCallback | None = None
    evaluators: list[EvaluateBenchmarksCallback] = field(default_factory=list)
    model_name: str | None = None


def prepare(training_args: RunFields, check: Callable[[], None]) -> str | None:
    """Seed, torch threads, logging; then `check()` (the command's pre-flight: nothing is decided about a run that
    cannot start); then the resume decision and the W&B variables. Returns the checkpoint to resume from (None:
    start at step 0)."""
    import torch  # deferred: torch
    from transformers import set_seed

    set_seed(training_args.seed)
    if training_args.torch_num_threads:
        torch.set_num_threads(training_args.torch_num_threads)
    setup_logging(training_args)
    log_process(training_args)
    check()
    checkpoint = find_resume_checkpoint(training_args.output_dir, training_args.resume)
    export_wandb_env(training_args)
    return checkpoint


def train(run: Run) -> dict:
    """Trains (from the run's checkpoint when resuming); saves the metrics and the trainer state."""
    logger.info("*** Train ***")
    metrics = run.trainer.train(resume_from_checkpoint=run.checkpoint).metrics
    metrics["train_samples"] = run.train_rows
    run.trainer.log_metrics("train", metrics)
    run.trainer.save_metrics("train", metrics)
    run.trainer.save_state()
    return metrics


def finish(run: Run, evaluate: bool = False) -> None:
    """The final model and card, the final benchmark evaluations (waited for), with `evaluate` the `do_eval` pass
    (`run_eval`), and the Hub push (last, so that the pushed folder holds the evaluation results too)."""
    trainer, output_dir = run.trainer, run.trainer.args.output_dir
    logger.info("*** Save model ***")
    save_final_model(trainer, output_dir, run.dataset_name, run.model_name)
    for evaluator in run.evaluators:
        evaluator.finish(output_dir, trainer.state.global_step)
    if run.evaluators:
        trainer.save_state()  # with the evaluation metrics logged since
    if evaluate:
        run_eval(run)
    if trainer.args.push_to_hub:
        logger.info("Pushing to the Hub...")
        push_as_saved(trainer, run.dataset_name)


def run_eval(run: Run) -> None:
    """`do_eval`: the trainer's evaluation on the eval split, its metrics logged and saved."""
    trainer = run.trainer
    if trainer.eval_dataset is None:
        logger.warning("do_eval is set but there is no eval dataset (eval_strategy: no); skipping evaluation.")
        return
    logger.info("*** Evaluate ***")
    eval_metrics = trainer.evaluate()
    eval_metrics["eval_samples"] = len(trainer.eval_dataset)
    trainer.log_metrics("eval", eval_metrics)
    trainer.save_metrics("eval", eval_metrics)


# --------------------------------------------------------------------------------------------------------------------
# Logging
# --------------------------------------------------------------------------------------------------------------------
def setup_logging(training_args: RunFields) -> None:
    import datasets  # deferred: datasets
    import transformers

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    level = training_args.get_process_log_level()  # the main process at log_level, the others at log_level_replica
    logging.getLogger("r1kit").setLevel(level)  # every r1kit module logs under it (getLogger(__name__))
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


def log_process(training_args: RunFields) -> None:
    logger.log(
        logging.WARNING if training_args.world_size > 1 else logging.INFO,  # one process: the start-up block says it
        "Process rank %s / world size %s, device %s, distributed: %s, bf16: %s",
        training_args.process_index, training_args.world_size, training_args.device,
        training_args.parallel_mode.value, training_args.bf16,
    )
    logger.info("Training arguments %s", training_args)


def export_wandb_env(training_args: RunFields) -> None:
    if "wandb" not in (training_args.report_to or []):
        return
    for name, value in (
        ("WANDB_ENTITY", training_args.wandb_entity),
        ("WANDB_PROJECT", training_args.wandb_project),
        ("WANDB_RUN_GROUP", training_args.wandb_run_group),
    ):
        if value is not None:
            os.environ[name] = value


# --------------------------------------------------------------------------------------------------------------------
# Files a run writes
# --------------------------------------------------------------------------------------------------------------------
def write_run_metadata(training_args: RunFields, resumed_from: str | None) -> None:
    """`OUTPUT_DIR/r1kit_run.json`: world size, the checkpoint resumed from, versions, the command line."""
    import torch  # deferred: torch
    import transformers
    import trl

    meta = {
        "world_size": training_args.world_size,
        "resumed_from": resumed_from,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "argv": sys.argv,
    }
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(training_args.output_dir) / "r1kit_run.json").write_text(json.dumps(meta, indent=2))


def save_final_model(trainer, output_dir: str, dataset_name: str | None, model_name: str | None = None) -> None:
    """The final model, which stops at EOS in generation (as Open-R1 sets it, so that pipeline() stops), its
    tokenizer, and on the main process a model card and a config with the KV cache on.

    A full run saves the trained model as the trainer does. A LoRA run saves the model merged with its adapter (what
    `from_pretrained(output_dir)` and `vllm.LLM(output_dir)` load) and the adapter itself in `output_dir/adapter/`;
    the merge happens on a CPU copy, so the trainer's model (a later `evaluate`) is untouched. Either way the saved
    files name the base model as the recipe did (`model_name`), never by this machine's cache path, and carry no
    machine-only keys (`local_files_only`)."""
    tokenizer = trainer.processing_class
    trainer.model.generation_config.eos_token_id = tokenizer.eos_token_id
    model = trainer.accelerator.unwrap_model(trainer.model)
    loaded_from = str(getattr(model.config, "_name_or_path", "") or "")  # the folder the weights came from
    lora = is_peft(model)
    if lora:
        save_merged_and_adapter(trainer, output_dir)
    else:
        trainer.save_model(output_dir)
    if not trainer.accelerator.is_main_process:
        return
    try:
        trainer.create_model_card(dataset_name=dataset_name, tags=["r1kit"])
    except Exception as e:  # noqa: BLE001 - a model card is never worth a lost run
        logger.warning("Could not write the model card: %s", e)
    if not lora:  # the merged model saved its own config, KV cache on
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(output_dir)
    for folder in (Path(output_dir), Path(output_dir) / ADAPTER_DIR):
        portable_files(folder, model_name, loaded_from)


ADAPTER_DIR = "adapter"  # a LoRA run's adapter, beside the merged model at the top of output_dir
MACHINE_KEYS = ("local_files_only", "is_local")  # how this machine loaded the files, not what they are
NAME_KEYS = ("_name_or_path", "name_or_path", "base_model_name_or_path")  # the base model, by the recipe's name


def is_peft(model) -> bool:
    from peft import PeftModel  # deferred: peft

    return isinstance(model, PeftModel)


def save_merged_and_adapter(trainer, output_dir: str) -> None:
    """A LoRA run's final save: the full weights gathered the trainer's way (`accelerator.get_state_dict`, which
    gathers ZeRO-3 shards: every process calls it), then on the main process the adapter to `output_dir/adapter/`
    and, at the top, the model merged on a CPU copy (peft's `merge_and_unload`), with the tokenizer."""
    import torch  # deferred: torch

    try:
        state_dict = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    except ValueError as e:  # ZeRO-3 without stage3_gather_16bit_weights_on_model_save: no full weights to merge
        logger.warning("Cannot gather the full weights (%s); saving the adapter only, as the trainer does.", e)
        trainer.save_model(str(Path(output_dir) / ADAPTER_DIR))
        return
    if not trainer.accelerator.is_main_process:
        return
    for stale in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):  # copied there by a
        (Path(output_dir) / stale).unlink(missing_ok=True)  # checkpoint push (hub_strategy every_save): not the model
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    peft_model.save_pretrained(str(Path(output_dir) / ADAPTER_DIR), state_dict=state_dict)
    merged = merged_copy(peft_model, state_dict)
    merged.config.use_cache = True
    merged.save_pretrained(output_dir)
    trainer.processing_class.save_pretrained(output_dir)
    torch.save(trainer.args, Path(output_dir) / "training_args.bin")  # as the trainer saves it


def merged_copy(peft_model, state_dict: dict):
    """The base model with the adapter merged in, built on the CPU from `state_dict` (the PEFT model's full weights):
    the model is laid out on the meta device (no memory, no ZeRO-3 partitioning), given copies of the weights and of
    the buffers the state dict leaves out (rotary frequencies), then merged by peft. `peft_model` is not changed."""
    import torch  # deferred: torch
    from peft import get_peft_model  # deferred: peft

    base = peft_model.get_base_model()
    config = copy.deepcopy(base.config)
    with torch.device("meta"):
        shell = get_peft_model(type(base)(config), copy.deepcopy(peft_model.peft_config[peft_model.active_adapter]),
                               adapter_name=peft_model.active_adapter)
    weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in state_dict.items()}
    unexpected = shell.load_state_dict(weights, strict=False, assign=True).unexpected_keys
    if unexpected:
        raise RuntimeError(f"merging the adapter: weights the model does not have: {unexpected[:5]}")
    live_buffers = dict(peft_model.named_buffers())
    for name, buffer in list(shell.named_buffers()):
        if buffer.is_meta:  # a buffer outside the state dict (persistent=False): computed at build, same on every rank
            module_name, _, buffer_name = name.rpartition(".")
            shell.get_submodule(module_name)._buffers[buffer_name] = live_buffers[name].detach().to("cpu", copy=True)
    shell.get_base_model().tie_weights()  # load_state_dict(assign=True) unties tied embeddings (untied: no change)
    merged = shell.merge_and_unload()
    still_meta = [name for name, tensor in [*merged.named_parameters(), *merged.named_buffers()] if tensor.is_meta]
    if still_meta:
        raise RuntimeError(f"merging the adapter: weights missing from the gathered state dict: {still_meta[:5]}")
    merged.generation_config = copy.deepcopy(base.generation_config)
    return merged


def portable_files(folder: Path, model_name: str | None, loaded_from: str) -> None:
    """Rewrites the JSON and card files in `folder` that name this machine: machine-only keys (`local_files_only`)
    go, and the base model is named as the recipe named it, not by the path it was loaded from (a cache folder, such
    as the float32 copy of a GGUF, which exists on no other machine)."""
    if not folder.is_dir():
        return
    foreign = loaded_from if model_name and loaded_from and loaded_from != model_name else None
    for path in [*sorted(folder.glob("*.json")), folder / "README.md"]:
        if not path.is_file():
            continue
        original = text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else None
        if isinstance(data, dict):
            kept = {key: value for key, value in data.items() if key not in MACHINE_KEYS}
            for key in NAME_KEYS:
                if model_name and key in kept:
                    kept[key] = model_name
            if kept != data:
                text = json.dumps(kept, indent=2, ensure_ascii=False) + "\n"
        if foreign:
            text = text.replace(foreign, model_name)
        if text != original:
            path.write_text(text, encoding="utf-8")


def push_as_saved(trainer, dataset_name: str | None) -> None:
    """`trainer.push_to_hub` (the repo, the model card, waiting for checkpoint pushes, the upload) of the folder as
    `save_final_model` wrote it: the trainer's own re-save before the upload is skipped, since for a LoRA run it would
    put the adapter back at the top, naming its base by this machine's path."""
    trainer.save_model = lambda *args, **kwargs: None  # on this instance, for the push only
    try:
        trainer.push_to_hub(dataset_name=dataset_name, tags=["r1kit"])
    finally:
        del trainer.save_model


def heldout_summary(run: Run, metrics: dict) -> dict | None:
    """Held-out accuracy before and after, training seconds and steps, when the run tracked accuracy."""
    if run.heldout is None or not run.heldout.history:
        return None
    history = sorted(run.heldout.history, key=lambda r: r["step"])
    return {
        "accuracy_before": history[0]["accuracy"],
        "accuracy_after": history[-1]["accuracy"],
        "train_seconds": round(metrics.get("train_runtime", 0.0), 1),
        "steps": run.trainer.state.global_step,
        "output_dir": str(Path(run.trainer.args.output_dir).resolve()),
        "accuracy_curve": [(r["step"], r["accuracy"]) for r in history],
    }


def write_json(run: Run, name: str, content: dict) -> None:
    """`OUTPUT_DIR/<name>` on the main process."""
    if run.trainer.accelerator.is_main_process:
        (Path(run.trainer.args.output_dir) / name).write_text(json.dumps(content, indent=2))


def resolved_recipe(*args: Any) -> str:
    """What a dry run prints: the argument objects as parsed (plain values only) and the checkpoint a run would
    resume from, as YAML."""

    def plain(obj):
        data = obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
        return {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}

    script_args, training_args, model_args, *more = args  # the order every recipe command parses in
    resolved = {"script_arguments": plain(script_args), "model_arguments": plain(model_args),
                "training_arguments": plain(training_args)}
    if more:
        resolved["filter_arguments"] = plain(more[0])
    resolved["resume_from"] = find_resume_checkpoint(training_args.output_dir, training_args.resume)
    return yaml.safe_dump(resolved, sort_keys=False)
