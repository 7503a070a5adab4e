"""What every training run shares, GRPO and SFT alike, around the trainer each command builds:

    prepare(training_args)       seed, threads, logging, the output folder's lock, the resume decision, W&B variables
                                 -> checkpoint
    train(run)                   trainer.train (resuming, stopping cleanly on SIGTERM/SIGINT), then its metrics and
                                 state -> metrics
    finish(run, metrics)         the final model and card, final benchmark evaluations, the Hub push
    complete(run)                the completion record; the lock released

and the files a run writes besides the model: `r1kit_run.json` (status, world size, resumed-from checkpoint,
versions), `summary.json` / `sft_summary.json` (each command's), and what a dry run prints (`resolved_recipe`). Only
the main process writes; every process computes.

A run's life (`Lifecycle`): one run per output folder (`_r1kit.lock`, held from `prepare` to `complete`); SIGTERM or
SIGINT during training finishes the current step, saves a checkpoint and stops with `RunInterrupted` (the command
exits 75, EX_TEMPFAIL: interrupted, resumable), every process stopping at the same step; a completed run is left
alone by `resume: auto` (`RunAlreadyComplete`, exit 0). The commands catch `RunStopped` and return its exit code.
"""

from __future__ import annotations

import copy
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from r1kit import credentials, records, tripwires
from r1kit.callbacks import EvaluateBenchmarksCallback, HeldOutAccuracyCallback
from r1kit.checkpoints import RUN_RECORD, completed_run, find_resume_checkpoint, read_run_record
from r1kit.config.schema import RunFields
from r1kit.errors import ConfigError
from r1kit.machine import from_main

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
    cannot start); then the output folder's lock and signals (`begin`: raises ConfigError when another run holds the
    folder, `RunAlreadyComplete` when `resume: auto` finds nothing left to train), the resume decision and the W&B
    variables. Returns the checkpoint to resume from (None: start at step 0)."""
    import torch  # deferred: torch
    from transformers import set_seed

    set_seed(training_args.seed)
    if training_args.torch_num_threads:
        torch.set_num_threads(training_args.torch_num_threads)
    credentials.seal(training_args)  # (parse_recipe sealed a parsed recipe already; arguments built in code too)
    setup_logging(training_args)
    log_process(training_args)
    check()
    begin(training_args)
    checkpoint = find_resume_checkpoint(training_args.output_dir, training_args.resume,
                                        training_args.resume_without_optimizer)
    export_wandb_env(training_args)
    return checkpoint


def train(run: Run) -> dict:
    """Trains (from the run's checkpoint when resuming); saves the metrics and the trainer state. On SIGTERM or
    SIGINT the current step ends, a checkpoint is saved and `RunInterrupted` is raised (no final metrics yet)."""
    logger.info("*** Train ***")
    trainer = run.trainer
    life, own = (_current, False) if _current is not None else (Lifecycle.for_trainer(trainer), True)
    if getattr(trainer.args, "enable_jit_checkpoint", False):
        logger.info("enable_jit_checkpoint: r1kit handles SIGTERM itself (the step ends, a checkpoint is saved, exit "
                    "code %s); transformers' JIT checkpoint stays unused.", EXIT_INTERRUPTED)
    stopper = StopAtStepEnd(life)
    trainer.add_callback(stopper)
    life.start_training()  # after the trainer's construction: its JIT checkpoint callback took SIGTERM there
    try:
        metrics = train_with_rollbacks(trainer, run.checkpoint)
    except TrainingDone:  # resumed from a checkpoint at the last step: the final model is written from it
        metrics = {"train_runtime": 0.0}
    except BaseException:
        life.end()  # the run is over: its lock and the signals are let go
        raise
    finally:
        life.phase = "finishing"
        trainer.remove_callback(stopper)
        if own:
            life.end()
    if life.stopped_at is not None:
        stop_interrupted(run, life)
    metrics["train_samples"] = run.train_rows
    run.trainer.log_metrics("train", metrics)
    save_metrics(run.trainer, "train", metrics)
    save_state(run.trainer)
    return metrics


def train_with_rollbacks(trainer, checkpoint: str | None) -> dict:
    """`trainer.train`, again from an earlier checkpoint each time a tripwire asks for a rollback (`r1kit.tripwires`:
    the wire names the checkpoint and the learning rate factor, and bounds how often); returns the last training
    call's metrics. Every process takes the main process's decision."""
    rollbacks = 0
    while True:
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
        output_dir = trainer.args.output_dir
        rollback = from_main(tripwires.take_rollback(output_dir) if trainer.accelerator.is_main_process else None,
                             trainer.args.world_size)
        if rollback is None:
            return metrics
        checkpoint = rollback["checkpoint"]
        if trainer.accelerator.is_main_process:
            logger.warning("Tripwire %s at step %s: training again from %s with the learning rate x%g.",
                           rollback.get("wire"), rollback.get("step"), checkpoint, rollback.get("lr_factor"))
        rollbacks += 1
        tripwires.prepare_rollback(trainer, rollback, rollbacks)


def finish(run: Run, evaluate: bool = False) -> None:
    """The final model and card, the final benchmark evaluations (waited for), with `evaluate` the `do_eval` pass
    (`run_eval`), and the Hub push (last, so that the pushed folder holds the evaluation results too)."""
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
    if _current is not None:
        _current.end()


# --------------------------------------------------------------------------------------------------------------------
# A run's life: one run per output folder, a clean stop on SIGTERM/SIGINT, a completed run left alone
# --------------------------------------------------------------------------------------------------------------------
EXIT_INTERRUPTED = 75  # sysexits.h EX_TEMPFAIL: interrupted, resumable; the same command continues the run
LOCK_FILE = "_r1kit.lock"  # "_*": the trainer's Hub uploads leave it out
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunStopped(Exception):
    """The run stopped early on purpose and has said why in one line; the command exits with `exit_code`."""

    exit_code = 0


class RunInterrupted(RunStopped):
    """SIGTERM or SIGINT during training: the step finished, a checkpoint was saved; the same command resumes."""

    exit_code = EXIT_INTERRUPTED


class RunAlreadyComplete(RunStopped):
    """`resume: auto` found a completed run in `output_dir` and the recipe asks nothing more of it."""


class OutputLock:
    """One run per output folder: an exclusive `flock` on `OUTPUT_DIR/_r1kit.lock`, held while the run lives, the
    file naming its holder (pid, host, since when). The kernel drops the lock when its process ends however it ends,
    so a lock left by a killed run is free; its file still names that run, which is how a take-over is noticed. The
    file is emptied, never deleted, on release: a deleted lock file would let two runs lock two different files."""

    def __init__(self, folder: Path, fd: int):
        self.path, self.fd = folder / LOCK_FILE, fd
        stat = os.fstat(fd)
        self.identity = (stat.st_dev, stat.st_ino)

    @classmethod
    def acquire(cls, folder: Path) -> OutputLock | None:
        """The lock, or ConfigError naming the run holding it; None (warned) on a file system without locks."""
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(read_holder(fd))
            os.close(fd)
            raise ConfigError(f"output_dir: {folder} is in use by another run ({holder}); wait for it to end, or "
                              "choose another output_dir") from None
        except OSError as e:  # a file system without flock (some network mounts)
            os.close(fd)
            logger.warning("Cannot lock output_dir %s (%s): a second run into it would not be noticed.", folder,
                           e.strerror or e)
            return None
        previous = read_holder(fd)
        if previous:
            logger.warning("Taking over the lock of output_dir %s from a run that is gone (%s).", folder,
                           describe_holder(previous))
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": now(),
                  "argv": credentials.redact_argv(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        return cls(folder, fd)

    def intact(self) -> bool:
        """Whether the lock file is still the one this run locked (not deleted with its folder, nor replaced)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == self.identity

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            os.ftruncate(self.fd, 0)  # no holder named: the next run starts without a take-over line
        except OSError:
            pass
        os.close(self.fd)  # closing the last descriptor drops the flock
        self.fd = -1


def read_holder(fd: int) -> dict:
    try:
        holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except (OSError, ValueError):
        return {"unreadable": True}
    return holder if isinstance(holder, dict) else {"unreadable": True}


def describe_holder(holder: dict) -> str:
    if not holder or "pid" not in holder:
        return "holder not recorded"
    return f"pid {holder.get('pid')} on host {holder.get('host', '?')}, since {holder.get('since', '?')}"


class Lifecycle:
    """One run's hold on its output folder and on SIGTERM/SIGINT, from `prepare` until it completes or stops.

    A signal before training stops the process at once (exit 75: nothing trained yet, nothing to save). During
    training it is deferred to the end of the current step, where every process learns of it (`StopAtStepEnd`), saves
    and stops. After training the run finishes (final model, records) and exits 0. A second SIGINT stops at once,
    unsaved (exit 130); a second SIGTERM (a launcher passing Slurm's on) is ignored: the run is already stopping. The
    signals are handled in the process that installed the handlers only; a process forked from it (a worker pool)
    keeps the behaviour it had before."""

    def __init__(self, output_dir: str, is_main: bool, world_size: int):
        self.output_dir, self.is_main, self.world_size = output_dir, is_main, world_size
        self.lock: OutputLock | None = None
        self.received: int | None = None  # the first stop signal
        self.phase = "setup"  # then "training", then "finishing"
        self.stopped_at: int | None = None  # the step training stopped at, on a signal
        self.stop_signal = 0  # the signal it stopped on, as the processes agreed (perhaps received by another one)
        self.previous: dict[int, Any] = {}
        self.pid = os.getpid()

    @classmethod
    def for_trainer(cls, trainer) -> Lifecycle:
        """Signals only, for a trainer built without `prepare` (no lock)."""
        return cls(trainer.args.output_dir, trainer.accelerator.is_main_process, trainer.args.world_size)

    def hold_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python runs signal handlers on the main thread only; elsewhere the defaults stay
        for number in STOP_SIGNALS:
            previous = signal.signal(number, self.on_signal)
            self.previous.setdefault(number, previous)

    def start_training(self) -> None:
        self.phase = "training"
        self.hold_signals()

    def on_signal(self, number: int, frame) -> None:
        if os.getpid() != self.pid:  # a forked worker: its old behaviour
            self.pass_on(number, frame)
            return
        name = signal.Signals(number).name
        if self.received is None:
            self.received = number
            if self.phase == "setup":
                self.say(f"r1kit: {name} before training started: stopping; nothing to save. The same command "
                         f"starts the run again (exit code {EXIT_INTERRUPTED}).")
                raise SystemExit(EXIT_INTERRUPTED)
            again = "; Ctrl-C again stops at once, unsaved" if number == signal.SIGINT else ""
            if self.phase == "training":
                self.say(f"r1kit: {name} received: finishing this step, then saving a checkpoint{again}.")
            else:
                self.say(f"r1kit: {name} received: training is done; writing the final model first{again}.")
            return
        if number == signal.SIGINT:
            self.say("r1kit: second SIGINT: stopping now; nothing more is saved.")
            raise SystemExit(130)

    def pass_on(self, number: int, frame) -> None:
        previous = self.previous.get(number, signal.SIG_DFL)
        if callable(previous):
            previous(number, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    def say(self, line: str) -> None:
        """One line on stderr, from a signal handler (no logging lock taken: the handler may interrupt a log call)."""
        if self.is_main:
            try:
                os.write(2, (line + "\n").encode())
            except OSError:
                pass

    def step_end_flags(self, args) -> tuple[int, bool]:
        """(the stop signal's number or 0, folder lost), agreed by every process: a signal reaching any one process
        stops all of them at the same step, so that no process waits in a collective (a checkpoint save) that the
        others never enter."""
        stop = int(self.received or 0)
        lost = self.is_main and not self.folder_intact()
        if self.world_size > 1:
            import torch  # deferred: torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                flags = torch.tensor([stop, int(lost)], device=args.device)  # CUDA under NCCL
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
                stop, lost = int(flags[0]), bool(flags[1])
        return stop, lost

    def folder_intact(self) -> bool:
        return self.lock.intact() if self.lock is not None else Path(self.output_dir).is_dir()

    def end(self) -> None:
        """Releases the lock and puts the previous signal handlers back."""
        global _current
        if threading.current_thread() is threading.main_thread():
            for number, previous in self.previous.items():
                if signal.getsignal(number) == self.on_signal:
                    signal.signal(number, previous)
        self.previous = {}
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if _current is self:
            _current = None


_current: Lifecycle | None = None  # the run this process is running (one at a time)


def begin(training_args: RunFields) -> Lifecycle:
    """Takes the output folder for this run (the main process locks it) and the stop signals. Raises ConfigError when
    another run holds the folder, `RunAlreadyComplete` when `resume: auto` finds a completed run with nothing more to
    train; every process raises alike (the main process decides)."""
    global _current
    if _current is not None:  # an earlier run in this process that ended in an exception
        _current.end()
    life = Lifecycle(training_args.output_dir, training_args.process_index == 0, training_args.world_size)
    verdict = None
    if life.is_main:
        try:
            Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
            life.lock = OutputLock.acquire(Path(training_args.output_dir))
            if training_args.resume == "auto":
                done = completed_run(training_args.output_dir, training_args.max_steps, training_args.num_train_epochs)
                verdict = ("complete", done) if done else None
        except ConfigError as e:
            verdict = ("error", str(e))
    verdict = from_main(verdict, training_args.world_size)
    if verdict is not None:
        life.end()
        kind, message = verdict
        if kind == "error":
            raise ConfigError(message)
        if life.is_main:
            logger.warning(message)
        raise RunAlreadyComplete(message)
    life.hold_signals()
    _current = life
    return life


class TrainingDone(Exception):
    """Raised at the start of training when the checkpoint resumed from is already at `max_steps`."""


class StopAtStepEnd(TrainerCallback):
    """At each step end: every process agrees whether to stop (a signal reached one of them) and whether the output
    folder is gone. Stopping saves a checkpoint of the step (whatever `save_strategy` and `save_steps` say) and ends
    training; a lost folder is an error, before anything is saved into a folder that a later run would not find.

    At the start: a checkpoint already at `max_steps` (a run killed while writing its final model) trains no further
    step (the trainer would train one past `max_steps`); `train` then goes on to write the final model from it."""

    def __init__(self, life: Lifecycle):
        self.life = life

    def on_train_begin(self, args, state, control, **kwargs):
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            if self.life.is_main:
                logger.warning("The checkpoint resumed from is at step %s of %s: nothing left to train; writing the "
                               "final model from it.", state.global_step, state.max_steps)
            raise TrainingDone()

    def on_step_end(self, args, state, control, **kwargs):
        stop, lost = self.life.step_end_flags(args)
        if lost:
            raise ConfigError(f"output_dir: {self.life.output_dir} was deleted or replaced during step "
                              f"{state.global_step} (its {LOCK_FILE} is gone); this run's checkpoints and records "
                              "would be lost, so it stops here")
        if stop and state.global_step < state.max_steps:  # at the last step the run just finishes
            control.should_save = True
            control.should_training_stop = True
            self.life.stopped_at, self.life.stop_signal = state.global_step, stop
        return control


def stop_interrupted(run: Run, life: Lifecycle) -> None:
    """After training stopped on a signal: records the interruption in `r1kit_run.json`, says so in one line and
    raises `RunInterrupted`. No final model is written: a model of an unfinished run must not look final."""
    trainer, step = run.trainer, life.stopped_at
    name = signal.Signals(life.stop_signal).name
    checkpoint = Path(trainer.args.output_dir) / f"checkpoint-{step}"
    if trainer.accelerator.is_main_process:
        update_run_record(trainer.args.output_dir, status="interrupted", global_step=step, signal=name,
                          checkpoint=str(checkpoint), interrupted=now())
    message = (f"Interrupted by {name} at step {step} of {trainer.state.max_steps}: saved {checkpoint}; the same "
               f"command resumes from it (exit code {EXIT_INTERRUPTED}).")
    if trainer.accelerator.is_main_process:
        logger.warning(message)
    life.end()
    raise RunInterrupted(message)


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
    """`OUTPUT_DIR/r1kit_run.json`: status `running`, world size, the checkpoint resumed from, versions, the command
    line, host, process and start time. `complete` or an interruption updates its status."""
    import torch  # deferred: torch
    import transformers
    import trl

    meta = {
        "status": "running",
        "world_size": training_args.world_size,
        "resumed_from": resumed_from,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "argv": credentials.redact_argv(sys.argv),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": now(),
    }
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    records.write_json(Path(training_args.output_dir) / RUN_RECORD, meta)


def update_run_record(output_dir: str, **fields) -> None:
    """Sets `fields` in `OUTPUT_DIR/r1kit_run.json`, keeping the rest."""
    records.write_json(Path(output_dir) / RUN_RECORD, {**read_run_record(output_dir), **fields})


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


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


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
        # every segment of a resumed run, evaluations excluded; this segment's runtime when none was recorded
        "train_seconds": round(history[-1].get("train_seconds") or metrics.get("train_runtime", 0.0), 1),
        "steps": run.trainer.state.global_step,
        "output_dir": str(Path(run.trainer.args.output_dir).resolve()),
        "accuracy_curve": [(r["step"], r["accuracy"]) for r in history],
    }


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
    resolved["resume_from"] = find_resume_checkpoint(training_args.output_dir, training_args.resume,
                                                    getattr(training_args, "resume_without_optimizer", False))
    return yaml.safe_dump(resolved, sort_keys=False)
