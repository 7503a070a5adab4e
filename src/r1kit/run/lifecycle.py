"""A run's life, GRPO and SFT alike: one run per output folder, a clean stop on SIGTERM/SIGINT, a completed run left
alone, a stopped run kept stopped, and the exit code each outcome gets.

    begin(training_args)      the output folder's lock (`_r1kit.lock`, held until the run ends), the stop signals; a
                              completed run (`RunAlreadyComplete`, exit 0) or a run a tripwire stopped (`RunHalted`,
                              exit 3, until `resume_after_stop`) goes no further
    StopAtStepEnd             a signal reaching any process stops every process at the same step end, with a save
    stop_interrupted          the interruption recorded and said; `RunInterrupted` (exit 75: the same command resumes)
    stop_halted               a tripwire's stop recorded and said; `RunHalted` (exit 3); no final model
    decide_resume             the run's ledger read first (a decided rollback acted on), then the checkpoint, then
                              its contract against this launch's (`r1kit.state.contract`): refused, or what to do
    StartShift                what a training start owes a decision taken elsewhere: the loaded learning rate scaled
                              (a rollback's cut, a new learning rate re-anchored) and the sampling seed moved on

The commands catch `RunStopped` and return its exit code (`r1kit.console`: the codes).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, set_seed

from r1kit import console, credentials, records
from r1kit.console import EXIT_INTERRUPTED, EXIT_STOPPED
from r1kit.errors import ConfigError, one_line
from r1kit.integrity.tripwires import cut_learning_rate
from r1kit.launching.sharding import requested
from r1kit.loading.modeling import resolve_model_path
from r1kit.machine import from_main
from r1kit.run.watchdog import Watchdog, failed_in
from r1kit.state import contract, ledger
from r1kit.state.checkpoints import (
    CHECKPOINT_RECORD,
    RUN_RECORD,
    completed_run,
    find_resume_checkpoint,
    read_run_record,
    sharding_refusal,
)

logger = logging.getLogger(__name__)

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


class RunHalted(RunStopped):
    """A tripwire stopped the run (now, or before: it stays stopped until `resume_after_stop`)."""

    exit_code = EXIT_STOPPED


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
    unsaved (exit 130); a second SIGTERM (a launcher passing Slurm's on) is ignored: the run is already stopping. When
    the run ends the handlers go back as they were, except a training command's own, which become SIG_IGN
    (`console.after_run`: the exit code is decided). The signals are handled in the process that installed the
    handlers only; a process forked from it (a worker pool) keeps the behaviour it had before."""

    def __init__(self, output_dir: str, is_main: bool, world_size: int):
        self.output_dir, self.is_main, self.world_size = output_dir, is_main, world_size
        self.lock: OutputLock | None = None
        self.received: int | None = None  # the first stop signal
        self.phase = "setup"  # then "training", then "finishing"
        self.stopped_at: int | None = None  # the step training stopped at, on a signal
        self.stop_signal = 0  # the signal it stopped on, as the processes agreed (perhaps received by another one)
        self.previous: dict[int, Any] = {}
        self.pid = os.getpid()
        self.resume: Resume | None = None  # the resume decision (`decide_resume`), as the main process took it
        self.contract: dict | None = None  # what this run records of itself (main process; r1kit.state.contract)
        self.watchdog: Watchdog | None = None  # the bound on every step, armed when training starts
        self.bounds = (1800.0, 300.0, 0)  # (stall_timeout, stop_grace_seconds, rank): `bound_by`

    def bound_by(self, args) -> Lifecycle:
        """The watchdog's bounds from the run's arguments: `stall_timeout` (else twice `ddp_timeout`: a collective
        times out by itself there, so a healthy long step is never cut at it), `stop_grace_seconds`."""
        stall = getattr(args, "stall_timeout", None) or 2 * (getattr(args, "ddp_timeout", None) or 1800)
        self.bounds = (float(stall), float(getattr(args, "stop_grace_seconds", 300.0)), int(args.process_index))
        return self

    @classmethod
    def for_trainer(cls, trainer) -> Lifecycle:
        """Signals only, for a trainer built without `prepare` (no lock)."""
        life = cls(trainer.args.output_dir, trainer.accelerator.is_main_process, trainer.args.world_size)
        return life.bound_by(trainer.args)

    def hold_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python runs signal handlers on the main thread only; elsewhere the defaults stay
        for number in STOP_SIGNALS:
            previous = signal.signal(number, self.on_signal)
            self.previous.setdefault(number, previous)

    def start_training(self, step: int = 0) -> None:
        self.phase = "training"
        self.hold_signals()
        if self.watchdog is None:
            stall, grace, rank = self.bounds
            self.watchdog = Watchdog(stall, grace, rank, record=self.record_exit)
        self.watchdog.start(step)
        if self.received is not None:  # a signal came while the trainer was built: its grace runs already
            self.watchdog.stopping(signal.Signals(self.received).name)

    def training_ended(self) -> None:
        self.phase = "finishing"
        if self.watchdog is not None:
            self.watchdog.training_ended()

    def on_signal(self, number: int, frame) -> None:
        if os.getpid() != self.pid:  # a forked worker: its old behaviour
            self.pass_on(number, frame)
            return
        name = signal.Signals(number).name
        if self.received is None:
            self.received = number
            if self.watchdog is not None:  # the step has stop_grace_seconds to end and save, then exit 75 unsaved
                self.watchdog.stopping(name)
            if self.phase == "setup":
                self.say(f"r1kit: {name} before training started: stopping; nothing to save. The same command "
                         f"starts the run again (exit code {EXIT_INTERRUPTED}).")
                self.record_exit("interrupted", signal=name, before_training=True)
                raise SystemExit(EXIT_INTERRUPTED)
            again = "; Ctrl-C again stops at once, unsaved" if number == signal.SIGINT else ""
            if self.phase == "training":
                self.say(f"r1kit: {name} received: finishing this step (a held-out evaluation under way stops now), "
                         f"then saving a checkpoint{again}.")
            else:
                self.say(f"r1kit: {name} received: training is done; writing the final model first{again}.")
            return
        if number == signal.SIGINT:
            self.say("r1kit: second SIGINT: stopping now; nothing more is saved.")
            self.record_exit("interrupted", signal="SIGINT", unsaved=True)
            raise SystemExit(130)

    def record_exit(self, status: str, **fields) -> None:
        """`r1kit_run.json` says how the run ended when it ends other than through `complete`, `stop_interrupted` or
        `stop_halted` (a second Ctrl-C, a signal before training, an error): main process, and only while the
        record is this process's and still says `running` (its step stays the last one saved, where a resume
        starts). Never raises: the process is on its way out with its own exit code."""
        if not self.is_main:
            return
        try:
            record = read_run_record(self.output_dir)
            if record.get("status") == "running" and record.get("pid") == os.getpid():
                update_run_record(self.output_dir, status=status, ended=now(), **fields)
        except Exception as e:  # noqa: BLE001 (a record we cannot write must not hide why the run ended)
            self.say(f"r1kit: could not update {RUN_RECORD}: {type(e).__name__}: {e}")

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
        """Releases the lock and puts the previous signal handlers back (in a training command's process, a stop
        signal is ignored from here on: `console.after_run`)."""
        global _current
        if threading.current_thread() is threading.main_thread():
            for number, previous in self.previous.items():
                if signal.getsignal(number) == self.on_signal:
                    signal.signal(number, console.after_run(previous))
        self.previous = {}
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if _current is self:
            _current = None


_current: Lifecycle | None = None  # the run this process is running (one at a time)


def current() -> Lifecycle | None:
    return _current


def begin(training_args, recipe: tuple = ()) -> Lifecycle:
    """Takes the output folder for this run (the main process locks it) and the stop signals. Raises ConfigError when
    another run holds the folder, `RunAlreadyComplete` when `resume: auto` finds a completed run with nothing more to
    train, `RunHalted` when a tripwire stopped the run and `resume_after_stop` is not set; every process raises alike
    (the main process decides)."""
    global _current
    if _current is not None:  # an earlier run in this process that ended in an exception
        _current.end()
    life = Lifecycle(training_args.output_dir, training_args.process_index == 0, training_args.world_size)
    life.bound_by(training_args)
    verdict = None
    if life.is_main:
        try:
            Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
            life.lock = OutputLock.acquire(Path(training_args.output_dir))
            verdict = held_by_tripwire(training_args)
            if verdict is None and training_args.resume == "auto":
                done = completed_run(training_args.output_dir, training_args.max_steps, training_args.num_train_epochs)
                refused = finished_run_refusal(training_args, recipe) if done else None
                verdict = ("error", refused) if refused else ("complete", done) if done else None
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
        raise RunHalted(message) if kind == "halted" else RunAlreadyComplete(message)
    life.hold_signals()
    _current = life
    return life


def finished_run_refusal(training_args, recipe: tuple) -> str | None:
    """Why this recipe may not call a completed run in its output folder its own (`contract.finished_run_refusal`)."""
    record = read_run_record(training_args.output_dir)
    current = current_contract(training_args, recipe) if recipe and "recipe" in record else {}
    return contract.finished_run_refusal(record, current, training_args.max_steps, int(record["global_step"]),
                                         training_args.output_dir)


def held_by_tripwire(training_args) -> tuple[str, str] | None:
    """("halted", the line to say) when a tripwire stopped the run in `output_dir` (its ledger says so: written
    before the stop, so a crash cannot lose it) and the recipe neither sets `resume_after_stop` nor starts over
    (`resume: never`); with `resume_after_stop` the stop is released, and said."""
    stop = ledger.active_stop(training_args.output_dir)
    if stop is None or training_args.resume == "never":
        return None
    if training_args.resume_after_stop:
        ledger.release_stop(training_args.output_dir)
        logger.warning("resume_after_stop: continuing the run tripwire %s stopped at step %s.", stop.get("wire"),
                       stop.get("step"))
        return None
    return ("halted", f"{training_args.output_dir} holds a run that a tripwire stopped at step {stop.get('step')} "
                      f"({stop.get('reason')}); nothing trained (exit code {EXIT_STOPPED}). Look at it (r1kit report "
                      f"{training_args.output_dir}); to train on anyway set resume_after_stop: true, or resume: never "
                      "to start over")


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
        watchdog = self.life.watchdog
        if watchdog is not None:
            watchdog.beat(state.global_step)
            watchdog.saving = bool(control.should_save)  # the save comes after this callback: a bound waits for it
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.life.watchdog is not None:
            self.life.watchdog.saving = False
            self.life.watchdog.beat(state.global_step)


def stop_interrupted(trainer, life: Lifecycle) -> None:
    """After training stopped on a signal: records the interruption in `r1kit_run.json`, says so in one line and
    raises `RunInterrupted`. No final model is written: a model of an unfinished run must not look final."""
    step, output_dir = life.stopped_at, trainer.args.output_dir
    name = signal.Signals(life.stop_signal).name
    checkpoint = Path(output_dir) / f"checkpoint-{step}"
    rollback = ledger.excluded(ledger.read(output_dir), step)  # a rollback decided at this very step end
    resumes = f"resumes from {rollback['checkpoint']} (the tripwire's rollback)" if rollback else "resumes from it"
    message = (f"Interrupted by {name} at step {step} of {trainer.state.max_steps}: saved {checkpoint}; the same "
               f"command {resumes} (exit code {EXIT_INTERRUPTED}).")
    _stop(trainer, life, RunInterrupted(message), status="interrupted", global_step=step, signal=name,
          checkpoint=str(checkpoint), interrupted=now())


def stop_before_training(trainer, life: Lifecycle, checkpoint: str | None) -> None:
    """A stop signal ended the held-out evaluation that opens training: nothing trained, nothing to save. Records
    the interruption (the run resumes where it started: `checkpoint`, or from scratch), says so in one line and
    raises `RunInterrupted` (exit 75)."""
    name = signal.Signals(life.received or signal.SIGTERM).name
    step = trainer.state.global_step
    start = f"resumes from {checkpoint}" if checkpoint else "starts it again"
    message = (f"Interrupted by {name} during the held-out evaluation at step {step}, before training: nothing to "
               f"save; the same command {start} (exit code {EXIT_INTERRUPTED}).")
    _stop(trainer, life, RunInterrupted(message), status="interrupted", global_step=step, signal=name,
          checkpoint=checkpoint, interrupted=now())


def stop_generation_lost(trainer, life: Lifecycle, error: BaseException) -> None:
    """The rollout generator failed beyond its retries (`GenerationUnavailable`: a vLLM server gone, a producer that
    keeps failing): nothing after the last checkpoint is saved, the checkpoint itself is intact. Records the
    interruption, says so in one line and raises `RunInterrupted` (exit 75: the same command resumes from it once the
    generator is back)."""
    step, output_dir = trainer.state.global_step, trainer.args.output_dir
    saved = [f for f in Path(output_dir).glob("checkpoint-*") if f.name.split("-")[-1].isdigit()]
    last = str(max(saved, key=lambda f: int(f.name.split("-")[-1]))) if saved else None
    where = f"resumes from {last}" if last else "starts it again (no checkpoint yet)"
    message = (f"Generation failed at step {step} of {trainer.state.max_steps}: {error}; the last checkpoint is "
               f"intact and the same command {where} once the generator is back (exit code {EXIT_INTERRUPTED}).")
    _stop(trainer, life, RunInterrupted(message), status="interrupted", global_step=step, reason="generation failed",
          checkpoint=last, interrupted=now())


def stop_peer_lost(trainer, life: Lifecycle, error: BaseException) -> None:
    """A collective failed because another rank is gone (its watchdog ended it, it crashed, it was killed) or never
    came within `ddp_timeout`: this rank says in one line what it was doing, the record says interrupted (main
    process), and `RunInterrupted` is raised (exit 75; a rank that crashed keeps its own code, which the launch
    reports first). Nothing after the last checkpoint is saved: a save is a collective of every rank."""
    rank, step = trainer.args.process_index, trainer.state.global_step
    line = (f"r1kit: rank {rank}: another rank stopped or never came ({one_line(error)[:200]}): stopping, unsaved, "
            f"after step {step}; it was {failed_in(error)}. The last checkpoint is intact: the same command resumes "
            f"from it (exit code {EXIT_INTERRUPTED}).")
    try:
        os.write(2, ("\n" + line + "\n").encode())
    except OSError:
        pass
    life.record_exit("interrupted", unsaved=True, reason="another rank stopped or never came")
    life.end()
    raise RunInterrupted(line)


def _stop(trainer, life: Lifecycle, stop: RunStopped, **record) -> None:
    """The end of a stopped run: `r1kit_run.json` records how (main process), the one line is said, the run lets go
    of its folder and signals, and `stop` is raised."""
    if trainer.accelerator.is_main_process:
        update_run_record(trainer.args.output_dir, **record)
        logger.warning(str(stop))
    life.end()
    raise stop


def stop_halted(trainer, life: Lifecycle, stop: dict) -> None:
    """After a tripwire stopped training: records `"status": "stopped"` in `r1kit_run.json`, says so in one line and
    raises `RunHalted` (exit 3). No final model is written, and the same command does not train on."""
    output_dir, step = trainer.args.output_dir, trainer.state.global_step
    message = (f"Stopped by a tripwire at step {step} of {trainer.state.max_steps} ({stop.get('reason')}); no final "
               f"model written; the same command keeps it stopped until resume_after_stop: true (exit code "
               f"{EXIT_STOPPED}). See r1kit report {output_dir}.")
    _stop(trainer, life, RunHalted(message), status="stopped", global_step=step, tripwire=stop, stopped=now())


class StartShift(TrainerCallback):
    """At the next training start, once the checkpoint's optimizer and schedule are loaded: the learning rate (every
    parameter group and the schedule's base rates) times `factor`; at its first step, once the checkpoint's random
    state is restored: the sampling seed moved on by `reseed` (seed + 7919 x reseed: the checkpoint's own state
    would draw the same completions and replay what a rollback abandoned). Armed by a rollback, or by a resume that
    continues a rollback's branch from a checkpoint saved before it or takes a new learning rate."""

    def __init__(self, seed: int):
        self.seed = seed
        self.factor: float | None = None
        self.reseed: int | None = None

    def arm(self, factor: float | None, reseed: int | None) -> None:
        self.factor = factor if factor is not None and factor != 1.0 else None
        self.reseed = reseed

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if self.factor is not None:
            cut_learning_rate(optimizer, lr_scheduler, self.factor)
            self.factor = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.reseed is not None:
            set_seed(self.seed + ledger.RESEED_STRIDE * self.reseed)
            self.reseed = None


# --------------------------------------------------------------------------------------------------------------------
# The resume decision
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class Resume:
    """The resume decision, taken on the main process and shared: the checkpoint (None: step 0), or the `error`
    that refuses it; the start-up block's `notes`; fields to set back to the checkpoint's values (`keep`); the
    loaded learning rate's factor and the rollback number to reseed with (`StartShift`); the model's identity."""

    checkpoint: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    keep: dict = field(default_factory=dict)
    lr_factor: float | None = None
    reseed: int | None = None
    identity: tuple | None = None


def decide_resume(training_args, recipe: tuple) -> Resume:
    """Main process. The run's ledger first: a rollback decided but not acted on (a crash came between) is acted on
    now, and a fresh start archives the ledger. Then the checkpoint (`find_resume_checkpoint`, which passes over
    the checkpoints of an abandoned stretch), then its contract against this launch's (`contract.decide`), then
    what a checkpoint saved before the newest rollback owes that rollback's branch (its cut, its seed)."""
    output_dir = training_args.output_dir
    if training_args.resume != "never":
        settled = ledger.settle(output_dir)
        if settled:
            logger.warning("The tripwire rollback decided at step %s (back to %s) is acted on now: the checkpoints "
                           "after it moved to %s.", settled["step"], Path(settled["checkpoint"]).name,
                           Path(output_dir) / ledger.ABANDONED / f"rollback-{settled['number']}")
    try:
        checkpoint = find_resume_checkpoint(output_dir, training_args.resume, training_args.resume_without_optimizer)
    except ConfigError as e:
        return Resume(error=str(e))
    if checkpoint is None:
        archived = ledger.archive(output_dir)
        if archived:
            logger.warning("Starting at step 0: the tripwire decisions of the run before moved to %s.", archived)
        return Resume()
    refused = sharding_refusal(Path(checkpoint), requested(training_args).engine, training_args.world_size)
    if refused:
        return Resume(error=refused)
    decision = Resume(checkpoint=checkpoint)
    if recipe:
        decision.identity = identity(recipe)
        judge(decision, training_args, recipe, checkpoint)
    step = ledger.step_of(checkpoint)
    if step is not None and Path(checkpoint).resolve().parent == Path(output_dir).resolve():
        shift = ledger.resume_shift(ledger.read(output_dir), step)
        if shift:
            decision.lr_factor = (decision.lr_factor or 1.0) * shift[0]
            decision.reseed = shift[1]
            decision.notes.append(f"branch   tripwire rollback {shift[1]}: the learning rate x{shift[0]:g} and its "
                                  "own sampling seed, as the rollback decided")
    return decision


def judge(decision: Resume, training_args, recipe: tuple, checkpoint: str) -> None:
    """The checkpoint's contract against this launch's, into `decision` (`contract.decide`)."""
    saved = checkpoint_contract(checkpoint, training_args.output_dir)
    if saved is None:
        decision.notes.append(f"compared nothing: {Path(checkpoint).name} records no recipe (an older r1kit saved it)")
        return
    changes = contract.compare(saved, current_contract(training_args, recipe, decision.identity))
    verdict = contract.decide(changes, training_args.resume_changes, checkpoint)
    decision.error, decision.notes, decision.keep = verdict.error, verdict.notes, verdict.keep
    decision.lr_factor = verdict.lr_factor


def checkpoint_contract(checkpoint: str, output_dir: str) -> dict | None:
    """The contract a checkpoint was saved under: its `r1kit_checkpoint.json`, else (a crash between the trainer's
    save and r1kit's record) the run record of its output folder; None when neither has one."""
    try:
        return json.loads((Path(checkpoint) / CHECKPOINT_RECORD).read_text())
    except (OSError, ValueError):
        pass
    if Path(checkpoint).resolve().parent != Path(output_dir).resolve():
        return None
    record = read_run_record(output_dir)
    return record if "recipe" in record else None


def identity(recipe: tuple) -> tuple:
    """(model identity, tokenizer fingerprint) of the recipe's model: the files it loads from (`r1kit:scratch` is
    built from the recipe's own fields)."""
    model_args = next(obj for obj in recipe if hasattr(obj, "model_name_or_path"))
    name, revision = model_args.model_name_or_path, getattr(model_args, "model_revision", None)
    path = None if name == "r1kit:scratch" else resolve_model_path(name, getattr(model_args, "gguf_file", None))
    return contract.model_identity(name, revision, path), contract.tokenizer_identity(path)


def current_contract(training_args, recipe: tuple, known: tuple | None = None) -> dict:
    model, tokenizer = known or identity(recipe)
    return contract.describe(recipe, model, tokenizer, training_args.world_size)


# --------------------------------------------------------------------------------------------------------------------
# The run record
# --------------------------------------------------------------------------------------------------------------------
def update_run_record(output_dir: str, **fields) -> None:
    """Sets `fields` in `OUTPUT_DIR/r1kit_run.json`, keeping the rest; a status and step go to the newest segment
    too (each start of the run is one: `r1kit.run.pipeline.write_run_metadata`)."""
    record = {**read_run_record(output_dir), **fields}
    segments = record.get("segments")
    if isinstance(segments, list) and segments and isinstance(segments[-1], dict):
        for key in ("status", "global_step"):
            if key in fields:
                segments[-1][key] = fields[key]
    records.write_json(Path(output_dir) / RUN_RECORD, record)


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def lock_held(folder: str | Path) -> bool:
    """Whether a live run holds `folder` (its `_r1kit.lock` is locked); nothing is written."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (closing drops a lock this call took)
    return False
