"""What every training run shares, GRPO and SFT alike, around the trainer each command builds:

    prepare(training_args, check, recipe)   seed, threads, logging, the output folder's lock (`r1kit.run.lifecycle`),
                                 the resume decision (the run's ledger first, then the checkpoint, then its contract
                                 against the recipe: `r1kit.state.contract`), W&B variables -> checkpoint
    train(run)                   trainer.train (resuming, stopping cleanly on SIGTERM/SIGINT, training again from a
                                 tripwire's rollback), then its metrics and state -> metrics
    finish(run, metrics)         the final model and card, final benchmark evaluations, the Hub push
    complete(run)                the completion record; the lock released

and the files a run writes besides the model: `r1kit_run.json` (status; its contract: the resolved recipe, the
model's identity, world size and global batch; its segments, one per start; versions), `r1kit_checkpoint.json` in
every checkpoint (the contract at the save, and the rollback branch it was saved on), `summary.json` /
`sft_summary.json` (each command's; GRPO's rewritten at every save, with its status), and what a dry run prints
(`resolved_recipe`). Only the main process writes; every process computes. How a run stops, and its exit codes:
`r1kit.run.lifecycle`.
"""

from __future__ import annotations

import ast
import copy
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from r1kit import credentials, records
from r1kit.benchmarking.callbacks import EvaluateBenchmarksCallback, EvaluationInterrupted, HeldOutAccuracyCallback
from r1kit.config.schema import RunFields
from r1kit.console import EXIT_INTERRUPTED
from r1kit.errors import ConfigError, GenerationUnavailable, one_line
from r1kit.hub import looks_local
from r1kit.integrity import tripwires
from r1kit.loading.data import DATA_SUFFIXES
from r1kit.machine import from_main
from r1kit.run.lifecycle import (
    Lifecycle,
    StartShift,
    StopAtStepEnd,
    TrainingDone,
    begin,
    current,
    current_contract,
    decide_resume,
    now,
    stop_before_training,
    stop_generation_lost,
    stop_halted,
    stop_interrupted,
    stop_peer_lost,
    update_run_record,
)
from r1kit.run.watchdog import lost_a_peer, watch_launcher
from r1kit.state import checkpoints, contract, ledger
from r1kit.state.checkpoints import CHECKPOINT_RECORD, RUN_RECORD, find_resume_checkpoint, read_run_record

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
        summary_file (`str` or `None`): the summary (`summary.json`) `write_summary` keeps as the run goes.
    """

    trainer: Any
    checkpoint: str | None
    train_rows: int
    dataset_name: str | None = None
    heldout: HeldOutAccuracyCallback | None = None
    evaluators: list[EvaluateBenchmarksCallback] = field(default_factory=list)
    model_name: str | None = None
    summary_file: str | None = None  # GRPO's summary.json, rewritten at every save with the run's status


def prepare(training_args: RunFields, check: Callable[[], None], recipe: tuple = ()) -> str | None:
    """Seed, torch threads, logging; then `check()` (the command's pre-flight: nothing is decided about a run that
    cannot start); then the output folder's lock and signals (`begin`: raises ConfigError when another run holds the
    folder, `RunAlreadyComplete` when `resume: auto` finds nothing left to train, `RunHalted` for a run a tripwire
    stopped), the resume decision (`lifecycle.decide_resume` on the main process: ConfigError for a checkpoint the
    recipe may not continue; the checkpoint's values set back on `recipe`, the parsed dataclasses, under
    `resume_changes: checkpoint`) and the W&B variables. Returns the checkpoint to resume from (None: step 0)."""
    import torch  # deferred: torch
    from transformers import set_seed

    set_seed(training_args.seed)
    if training_args.torch_num_threads:
        torch.set_num_threads(training_args.torch_num_threads)
    credentials.seal(training_args)  # (parse_recipe sealed a parsed recipe already; arguments built in code too)
    setup_logging(training_args)
    log_process(training_args)
    check()
    if training_args.world_size > 1:  # a worker whose launcher is killed stops too
        watch_launcher(training_args.process_index,
                       record=lambda **fields: current() is not None and current().record_exit(**fields))
    life = begin(training_args, recipe)
    decision = from_main(decide_resume(training_args, recipe) if life.is_main else None, training_args.world_size)
    if decision.error:
        life.end()
        raise ConfigError(decision.error)
    contract.keep_checkpoint_values(recipe, decision.keep)
    life.resume = decision
    if life.is_main and recipe:  # what this run records of itself (after any value kept from the checkpoint)
        life.contract = current_contract(training_args, recipe, decision.identity)
    export_wandb_env(training_args)
    return decision.checkpoint


def resume_notes() -> list[str]:
    """The start-up block's lines about the resume: what changed and what was done about it."""
    life = current()
    return list(life.resume.notes) if life is not None and life.resume is not None else []


def train(run: Run) -> dict:
    """Trains (from the run's checkpoint when resuming); saves the metrics and the trainer state. On SIGTERM or
    SIGINT the current step ends, a checkpoint is saved and `RunInterrupted` is raised (no final metrics yet); when
    a tripwire stops training, `RunHalted`."""
    logger.info("*** Train ***")
    trainer = run.trainer
    life, own = (current(), False) if current() is not None else (Lifecycle.for_trainer(trainer), True)
    if getattr(trainer.args, "enable_jit_checkpoint", False):
        logger.info("enable_jit_checkpoint: r1kit handles SIGTERM itself (the step ends, a checkpoint is saved, exit "
                    "code %s); transformers' JIT checkpoint stays unused.", EXIT_INTERRUPTED)
    shift = StartShift(trainer.args.seed)
    if life.resume is not None:
        shift.arm(life.resume.lr_factor, life.resume.reseed)
    added = [StopAtStepEnd(life), shift] + ([RecordCheckpoint(run, life.contract)] if life.is_main else [])
    for callback in added:
        trainer.add_callback(callback)
    if run.heldout is not None:  # a signal ends an evaluation at the next token; an interrupted run has no final one
        run.heldout.stop_requested = lambda: life.received is not None
        run.heldout.interrupted = lambda: life.stopped_at is not None
    life.start_training(trainer.state.global_step)  # after the trainer's construction: its JIT checkpoint callback took SIGTERM there
    tied = TiedKeysAreNotMissing(trainer.model)
    logging.getLogger("transformers.trainer").addFilter(tied)
    try:
        metrics = train_with_rollbacks(trainer, run.checkpoint, life, shift)
    except TrainingDone:  # resumed from a checkpoint at the last step: the final model is written from it
        metrics = {"train_runtime": 0.0}
    except EvaluationInterrupted:
        stop_before_training(trainer, life, run.checkpoint)
    except GenerationUnavailable as e:  # the generator is gone: exit 75, resumable from the last checkpoint
        stop_generation_lost(trainer, life, e)
    except Exception as e:
        if not lost_a_peer(e, trainer.args.world_size):
            life.record_exit(**ending(e))
            life.end()
            raise
        stop_peer_lost(trainer, life, e)  # another rank is gone: exit 75, resumable from the last checkpoint
    except BaseException as e:
        life.record_exit(**ending(e))
        life.end()  # the run is over: its lock and the signals are let go
        raise
    finally:
        logging.getLogger("transformers.trainer").removeFilter(tied)
        life.training_ended()
        for callback in added:
            trainer.remove_callback(callback)
        if own:
            life.end()
    if life.stopped_at is not None:
        write_summary(run, "interrupted")
        stop_interrupted(trainer, life)
    stop = from_main(ledger.active_stop(trainer.args.output_dir) if life.is_main else None, trainer.args.world_size)
    if stop is not None:  # a tripwire's stop: the state is kept (r1kit report), no final model
        save_state(trainer)
        write_summary(run, "stopped")
        stop_halted(trainer, life, stop)
    metrics["train_samples"] = run.train_rows
    logger.debug("train metrics: %s", metrics)  # (TRL's `***** train metrics *****` block: the files have them)
    save_metrics(run.trainer, "train", metrics)
    save_state(run.trainer)
    return metrics


class TiedKeysAreNotMissing(logging.Filter):
    """Drops transformers' "There were missing keys in the checkpoint model loaded: [...]" on a resume when every key
    it names is a weight tied to one that was loaded (a tied LM head: the checkpoint stores the shared tensor once,
    under the embedding's name). It read like a damaged checkpoint; any other missing key is still said."""

    PREFIX = "There were missing keys in the checkpoint model loaded: "

    def __init__(self, model):
        super().__init__()
        self.model = model

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        try:
            keys = ast.literal_eval(message[len(self.PREFIX):].rstrip().rstrip("."))
        except (ValueError, SyntaxError):
            return True
        return not (isinstance(keys, list) and keys and set(keys) <= tied_names(self.model))


def tied_names(model) -> set[str]:
    """The names of the parameters that share their tensor with another parameter of `model`."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {name for group in names.values() if len(group) > 1 for name in group}


def ending(error: BaseException) -> dict:
    """What `r1kit_run.json` says when `error` ends training: a Ctrl-C is an interruption (the last checkpoint
    saved is where the same command resumes), anything else a failure, with the one line that says why."""
    if isinstance(error, KeyboardInterrupt) or (isinstance(error, SystemExit) and error.code == 130):
        return {"status": "interrupted", "signal": "SIGINT", "unsaved": True}
    return {"status": "failed", "error": one_line(error) or type(error).__name__}


def train_with_rollbacks(trainer, checkpoint: str | None, life: Lifecycle, shift: StartShift) -> dict:
    """`trainer.train`, again from an earlier checkpoint each time a tripwire decided a rollback (`r1kit.integrity.tripwires`
    wrote it to the run's ledger: the checkpoint, the learning rate factor; it bounds how often); returns the last
    training call's metrics. The main process acts on the decision (`ledger.settle`: the abandoned checkpoints
    moved aside) and every process takes it. A stop signal in the same step leaves the rollback to the resume."""
    output_dir = trainer.args.output_dir
    while True:
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
        if life.stopped_at is not None:
            return metrics
        rollback = from_main(ledger.settle(output_dir) if life.is_main else None, trainer.args.world_size)
        if rollback is None:
            return metrics
        checkpoint = rollback["checkpoint"]
        if life.is_main:
            logger.warning("Tripwire %s at step %s: training again from %s with the learning rate x%g (the "
                           "checkpoints after it moved to %s).", rollback.get("wire"), rollback.get("step"),
                           checkpoint, rollback.get("lr_factor"),
                           Path(output_dir) / ledger.ABANDONED / f"rollback-{rollback['number']}")
        tripwires.prepare_rollback(trainer)
        shift.arm(float(rollback["lr_factor"]), int(rollback["number"]))


class RecordCheckpoint(TrainerCallback):
    """Main process, at every save: the run's contract in the checkpoint (`r1kit_checkpoint.json`, with its step and
    the rollback branch it was saved on), the step in `r1kit_run.json`, and summary.json as of this checkpoint."""

    def __init__(self, run: Run, contract_now: dict | None):
        self.run, self.contract = run, contract_now

    def on_save(self, args, state, control, **kwargs):
        output_dir = args.output_dir
        folder = Path(output_dir) / f"checkpoint-{state.global_step}"
        if self.contract is not None and folder.is_dir():
            branch = len(ledger.read(output_dir)["rollbacks"])
            records.write_json(folder / CHECKPOINT_RECORD, {**self.contract, "step": state.global_step,
                                                            "branch": branch})
        if (Path(output_dir) / RUN_RECORD).is_file():
            update_run_record(output_dir, global_step=state.global_step)
        write_summary(self.run, "running")


def finish(run: Run, evaluate: bool = False) -> None:
    """The final model and card, the final benchmark evaluations (waited for), with `evaluate` the `do_eval` pass
    (`run_eval`), and the Hub push (last, so that the pushed folder holds the evaluation results too)."""
    try:
        _finish(run, evaluate)
    except BaseException as e:
        if current() is not None:  # r1kit_run.json must not say `running` for a run that ended here
            current().record_exit(**ending(e))
        raise


def _finish(run: Run, evaluate: bool) -> None:
    trainer, output_dir = run.trainer, run.trainer.args.output_dir
    logger.info("*** Save model ***")
    save_final_model(trainer, output_dir, run.dataset_name, run.model_name)
    for evaluator in run.evaluators:
        evaluator.finish(output_dir, trainer.state.global_step)
    if run.evaluators:
        save_state(trainer)  # with the evaluation metrics logged since
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
    save_metrics(trainer, "eval", eval_metrics)


def complete(run: Run) -> None:
    """The last call of a run: `r1kit_run.json` records it completed (the step reached, `max_steps`, epochs), so that
    `resume: auto` leaves it alone; then the output folder's lock and the signal handlers are released."""
    trainer = run.trainer
    if trainer.accelerator.is_main_process:
        update_run_record(trainer.args.output_dir, status="completed", global_step=trainer.state.global_step,
                          max_steps=trainer.args.max_steps, num_train_epochs=trainer.args.num_train_epochs,
                          finished=now())
    if current() is not None:
        current().end()


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
    """`OUTPUT_DIR/r1kit_run.json`: status `running`; the run's contract (the resolved recipe, the model's identity,
    world size, global batch: `r1kit.state.contract`); its segments (each start of the run: from which checkpoint and
    step, then its status and the step it reached; a fresh start begins the list again); the checkpoint resumed
    from, versions, the command line, host, process and start time. Saves, `complete`, an interruption or a stop
    update it."""
    import torch  # deferred: torch
    import transformers
    import trl

    life = current()
    previous = read_run_record(training_args.output_dir).get("segments") if resumed_from else None
    from_step = ledger.step_of(resumed_from) or 0
    segment = {"started": now(), "resumed_from": resumed_from, "from_step": from_step, "status": "running",
               "global_step": from_step, "world_size": training_args.world_size}
    meta = {
        "status": "running",
        **(life.contract if life is not None and life.contract else {"world_size": training_args.world_size}),
        "resumed_from": resumed_from,
        "segments": [*(previous if isinstance(previous, list) else []), segment],
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "argv": credentials.redact_argv(sys.argv),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": now(),
    }
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    records.write_json(Path(training_args.output_dir) / RUN_RECORD, meta)


def save_state(trainer) -> None:
    """`OUTPUT_DIR/trainer_state.json`, atomically (transformers writes it in place, and a kill leaves it empty)."""
    if trainer.is_world_process_zero():
        records.write_text(Path(trainer.args.output_dir) / "trainer_state.json",
                           json.dumps(asdict(trainer.state), indent=2, sort_keys=True) + "\n")


def save_metrics(trainer, split: str, metrics: dict) -> None:
    """`OUTPUT_DIR/<split>_results.json` and the merged `all_results.json`, as transformers' `save_metrics` writes
    them, atomically."""
    if not trainer.is_world_process_zero():
        return
    output_dir = Path(trainer.args.output_dir)
    records.write_json(output_dir / f"{split}_results.json", metrics, indent=4)
    try:
        merged = json.loads((output_dir / "all_results.json").read_text())
    except (OSError, ValueError):
        merged = {}
    records.write_json(output_dir / "all_results.json", {**(merged if isinstance(merged, dict) else {}), **metrics},
                       indent=4)


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
        trainer.create_model_card(dataset_name=hub_dataset(dataset_name), tags=["r1kit"])
        if dataset_name and hub_dataset(dataset_name) is None:  # named, not linked as huggingface.co/datasets/...
            with (Path(output_dir) / "README.md").open("a") as card:
                card.write(f"\nTrained on `{dataset_name}` (local data or a built-in task, not a Hub dataset).\n")
    except Exception as e:  # noqa: BLE001 - a model card is never worth a lost run
        logger.warning("Could not write the model card: %s", e)
    if not lora:  # the merged model saved its own config, KV cache on
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(output_dir)
    for folder in (Path(output_dir), Path(output_dir) / ADAPTER_DIR):
        portable_files(folder, model_name, loaded_from)


def hub_dataset(name: str | None) -> str | None:
    """`name` as a Hub dataset id for the model card's link; None for a local file or folder and a built-in task
    (`r1kit:addition`, `reasoning-gym:chain_sum`), which the card used to link as huggingface.co/datasets/<path>."""
    if not name or ":" in name or looks_local(name, DATA_SUFFIXES) or Path(os.path.expanduser(name)).exists():
        return None
    return name


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
        trainer.push_to_hub(dataset_name=hub_dataset(dataset_name), tags=["r1kit"])
    finally:
        del trainer.save_model


def heldout_summary(run: Run, metrics: dict, status: str = "completed") -> dict | None:
    """Held-out accuracy before and after, training seconds and steps, when the run tracked accuracy; with the run's
    status and its segments (r1kit_run.json), so that a summary of a run in progress or stopped says so."""
    if run.heldout is None or not run.heldout.history:
        return None
    history = sorted(run.heldout.history, key=lambda r: r["step"])
    segments = read_run_record(run.trainer.args.output_dir).get("segments") or []
    return {
        "status": status,
        "accuracy_before": history[0]["accuracy"],
        "accuracy_after": history[-1]["accuracy"],
        # every segment of a resumed run, evaluations excluded; this segment's runtime when none was recorded
        "train_seconds": round(history[-1].get("train_seconds") or metrics.get("train_runtime", 0.0), 1),
        "steps": run.trainer.state.global_step,
        "segments": [(s.get("from_step"), s.get("global_step"), s.get("status")) for s in segments
                     if isinstance(s, dict)],
        "output_dir": str(Path(run.trainer.args.output_dir).resolve()),
        "accuracy_curve": [(r["step"], r["accuracy"]) for r in history],
    }


def write_summary(run: Run, status: str) -> None:
    """summary.json as the run stands (`heldout_summary` with `status`), when it tracks held-out accuracy (GRPO)."""
    if run.trainer.accelerator.is_main_process and getattr(run, "summary_file", None):
        summary = heldout_summary(run, {}, status)
        if summary:
            records.write_json(Path(run.trainer.args.output_dir) / run.summary_file, summary)


def write_json(run: Run, name: str, content: dict) -> None:
    """`OUTPUT_DIR/<name>` on the main process, written atomically (`records.write_json`)."""
    if run.trainer.accelerator.is_main_process:
        records.write_json(Path(run.trainer.args.output_dir) / name, content)


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
    # As the run would see it: a completed run that the recipe asks nothing more of is not resumed (the run says so
    # and trains nothing), so the dry run says that, not which checkpoint it would resume from
    done = (checkpoints.completed_run(training_args.output_dir, training_args.max_steps, training_args.num_train_epochs)
            if training_args.resume == "auto" else None)
    if done:
        resolved["resume_from"] = None
        resolved["run_state"] = done
    else:
        resolved["resume_from"] = find_resume_checkpoint(training_args.output_dir, training_args.resume,
                                                        getattr(training_args, "resume_without_optimizer", False))
    return yaml.safe_dump(resolved, sort_keys=False)
