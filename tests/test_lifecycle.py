"""A run's life, GRPO and SFT alike: SIGTERM or SIGINT saves a checkpoint and exits 75 (interrupted, resumable) and
the same command then continues exactly; a completed run is left alone by `resume: auto`; one run per output_dir
(a lock naming its holder, a stale one taken over, a deleted folder an error). Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from r1kit.errors import ConfigError
from r1kit.run import lifecycle
from r1kit.state.checkpoints import completed_run
from tests.helpers import raises_naming, tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 240  # a cold start on a busy 2-core machine: imports, data, model, first step
SFT_MESSAGES = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                              {"role": "assistant", "content": f"<think>{i} and {i}</think><answer>{2 * i}</answer>"}]}
                for i in range(48)]


# --------------------------------------------------------------------------------------------------------------------
# Helpers: a training command in a subprocess, watched line by line, every wait bounded
# --------------------------------------------------------------------------------------------------------------------
class Command:
    """A training command in its own process; its output (stdout and stderr) is read by a thread into `lines`."""

    def __init__(self, command: str, recipe: Path, *flags: str):
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", f"r1kit.{command}", "--config", str(recipe), *flags],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, seconds: float = STARTUP_SECONDS) -> None:
        """Until a line holds `text`; fails when the process ends first or `seconds` pass."""
        deadline = time.monotonic() + seconds
        while not any(text in line for line in list(self.lines)):
            assert self.proc.poll() is None, f"ended (exit {self.proc.returncode}) before {text!r}:\n{self.log[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} within {seconds} s:\n{self.log[-3000:]}"
            time.sleep(0.01)

    def wait_for_path(self, path: Path, seconds: float = STARTUP_SECONDS) -> None:
        """Until `path` exists (a file the run writes: an event, not a guess at how long a step takes)."""
        deadline = time.monotonic() + seconds
        while not path.exists():
            assert self.proc.poll() is None, f"ended (exit {self.proc.returncode}) before {path}:\n{self.log[-3000:]}"
            assert time.monotonic() < deadline, f"no {path} within {seconds} s:\n{self.log[-3000:]}"
            time.sleep(0.01)

    def finish(self, seconds: float = 300) -> int:
        """The exit code, waiting at most `seconds` (then the process is killed and the test fails)."""
        try:
            code = self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running after {seconds} s:\n{self.log[-3000:]}")
        self.reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    @property
    def log(self) -> str:
        return "".join(self.lines)


def run_to_end(command: str, recipe: Path, *flags: str, seconds: float = 600) -> tuple[int, str]:
    cmd = Command(command, recipe, *flags)
    try:
        code = cmd.finish(seconds)
    finally:
        cmd.kill()
    return code, cmd.log


def run_here(command: str, recipe: Path) -> None:
    """`r1kit COMMAND --config RECIPE`'s pipeline, in this process: a reference run, or a run that must refuse (its
    error raised here), without a process start of its own (imports: ~5 CPU-seconds)."""
    from r1kit import grpo, sft
    from r1kit.config.recipe import GRPO_TYPES, parse_args

    module, types = {"grpo": (grpo, GRPO_TYPES), "sft": (sft, sft.SFT_TYPES)}[command]
    module.pipeline(*parse_args(["--config", str(recipe)], None, types))


def losses(output_dir: Path) -> dict[int, dict]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return {e["step"]: e for e in state["log_history"] if "loss" in e}


def interrupt_after_first_step(command: str, recipe: Path, signal_number: int,
                               again_after_the_save: bool = False) -> tuple[int, str]:
    """Starts the command, sends `signal_number` once it has logged a step, returns (exit code, output). With
    `again_after_the_save`, keeps sending it from the line that says the checkpoint is saved until the process ends (a
    launcher passing Slurm's signal on, an impatient user)."""
    cmd = Command(command, recipe)
    try:
        cmd.wait_for("{'loss'")  # the trainer's log line of a finished step
        cmd.proc.send_signal(signal_number)
        if again_after_the_save:
            cmd.wait_for(f"Interrupted by {signal.Signals(signal_number).name}")  # said just after the save
            sent = 0
            while cmd.proc.poll() is None:
                cmd.proc.send_signal(signal_number)
                sent += 1
                time.sleep(0.005)
            assert sent >= 1, "the process ended before a second signal"
        return cmd.finish(), cmd.log
    finally:
        cmd.kill()


def assert_interrupted_cleanly(code: int, log: str, out: Path, signal_name: str, max_steps: int) -> int:
    """Exit 75, one line naming the signal and the saved checkpoint, no traceback, no final model. Returns the step."""
    assert code == lifecycle.EXIT_INTERRUPTED, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    said = [line for line in log.splitlines() if f"Interrupted by {signal_name} at step" in line]
    assert len(said) == 1, log[-3000:]
    record = json.loads((out / "r1kit_run.json").read_text())
    step = record["global_step"]
    assert record["status"] == "interrupted" and 1 <= step < max_steps
    assert f"checkpoint-{step}" in said[0]
    checkpoint = out / f"checkpoint-{step}"
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        assert (checkpoint / name).is_file(), name
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    assert not (out / "model.safetensors").exists() and not (out / "train_results.json").exists()  # nothing looks final
    return step


def assert_same_losses(resumed: dict[int, dict], full: dict[int, dict], steps, keys=("loss", "grad_norm")) -> None:
    for step in steps:
        for key in keys:
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-5, abs=1e-7), (step, key)


# --------------------------------------------------------------------------------------------------------------------
# Preemption: a real training process, signalled
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_grpo_on_sigterm_saves_exits_75_whatever_follows_and_resumes_exactly(tmp_path, tiny_model_dir, math_jsonl):
    max_steps = 5
    reward = {"reward_funcs": ["tests.rewards_for_tests:slow_length_variety"]}  # a step takes ~1 s: room to signal
    full = tmp_path / "full"
    run_here("grpo", write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, full, max_steps=max_steps,
                                                          **reward)))

    out = tmp_path / "out"
    # save_strategy no: the stop saves anyway. enable_jit_checkpoint: transformers' own SIGTERM handling must not
    # turn the stop into a run that looks finished (it used to write the final model and exit 0).
    recipe = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=max_steps,
                                                  save_strategy="no", enable_jit_checkpoint=True, **reward))
    # More SIGTERMs while the process, its checkpoint saved, is on its way out: the exit code stays 75 (it used to
    # die of the signal: -15)
    code, log = interrupt_after_first_step("grpo", recipe, signal.SIGTERM, again_after_the_save=True)
    step = assert_interrupted_cleanly(code, log, out, "SIGTERM", max_steps)

    run_here("grpo", recipe)  # the same recipe, resumed in this process (the command's own resume line and exit 0:
    # tests/test_grpo.py::test_rerun_tells_the_user_it_resumes_and_how_to_start_fresh)
    resumed = losses(out)
    assert sorted(resumed) == list(range(1, max_steps + 1))
    assert_same_losses(resumed, losses(full), range(step + 1, max_steps + 1), ("loss", "grad_norm", "reward"))
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "completed" and record["global_step"] == max_steps
    assert [(s["from_step"], s["status"]) for s in record["segments"]] == [(0, "interrupted"), (step, "completed")]
    assert (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_sft_on_sigint_saves_exits_75_and_resumes_exactly(tmp_path, tiny_model_dir):
    data = tmp_path / "messages.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in SFT_MESSAGES))
    max_steps = 200  # ~30 steps a second here: the signal lands long before the end

    def recipe(out: Path, **keys) -> Path:
        return write_recipe(tmp_path, model_name_or_path=str(tiny_model_dir), dataset_name=str(data), max_length=64,
                            per_device_train_batch_size=8, max_steps=max_steps, save_steps=1000, logging_steps=1,
                            learning_rate=1.0e-3, lr_scheduler_type="constant", report_to="none", bf16=False,
                            output_dir=str(out), seed=3, **keys)

    full = tmp_path / "full"
    run_here("sft", recipe(full))

    out = tmp_path / "out"
    path = recipe(out)  # save_steps 1000: no checkpoint would exist without the stop
    code, log = interrupt_after_first_step("sft", path, signal.SIGINT)
    assert "KeyboardInterrupt" not in log
    step = assert_interrupted_cleanly(code, log, out, "SIGINT", max_steps)

    run_here("sft", path)  # resumed in this process
    assert [s["from_step"] for s in json.loads((out / "r1kit_run.json").read_text())["segments"]] == [0, step]
    resumed = losses(out)
    assert sorted(resumed) == list(range(1, max_steps + 1))
    assert_same_losses(resumed, losses(full), range(step + 1, max_steps + 1))

    # A finished run stays finished: the same command again says so and trains nothing.
    def files():  # every file but the lock, which each run takes and lets go of
        return {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != lifecycle.LOCK_FILE}

    before = files()
    code, log = run_to_end("sft", path)
    assert code == 0, log[-3000:]
    assert len([line for line in log.splitlines() if "holds a completed run" in line]) == 1, log[-3000:]
    assert "Resuming from" not in log and "'loss'" not in log
    assert files() == before


# --------------------------------------------------------------------------------------------------------------------
# One run per output_dir
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_run_into_a_busy_output_dir_is_refused_and_a_deleted_folder_stops_the_first(
        tmp_path, tiny_model_dir, math_jsonl, monkeypatch):
    """The first run waits in step 2's reward (a gate, not a race with the clock: on a busy machine it used to finish
    all its steps before the second run had started) until the second run has been refused and the folder moved."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("R1KIT_TEST_GATE", str(gate))
    monkeypatch.setenv("R1KIT_TEST_GATE_AT", "2")
    path = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=1000,
                                                reward_funcs=["tests.rewards_for_tests:gated_length_variety"]))
    first = Command("grpo", path)
    try:
        first.wait_for_path(gate / "waiting-0")
        monkeypatch.delenv("R1KIT_TEST_GATE")  # the second run must not wait at the gate
        # The second run, in this process: refused in one line (a ConfigError: one `r1kit: error:` line and exit 2
        # from the command, as the first run's own error below shows)
        with raises_naming(f"pid {first.proc.pid}", str(out), "since"):
            run_here("grpo", path)
        assert first.proc.poll() is None  # the first run is untouched

        # The folder vanishes mid-run (moved away: atomic, while the run writes into it): an error at the next step
        # end, not a silent success into a folder made again.
        out.rename(tmp_path / "gone")
        (gate / "go").touch()
        code = first.finish()
    finally:
        first.kill()
    errors = [line for line in first.log.splitlines() if "r1kit: error:" in line]
    assert code == 2 and len(errors) == 1, first.log[-3000:]
    assert "output_dir" in errors[0] and str(out) in errors[0] and "step" in errors[0]
    assert not (out / "model.safetensors").exists()


def test_the_lock_names_its_holder_and_a_stale_one_is_taken_over(tmp_path, caplog):
    held = lifecycle.OutputLock.acquire(tmp_path)
    with raises_naming("output_dir", str(tmp_path), f"pid {os.getpid()}"):
        lifecycle.OutputLock.acquire(tmp_path)
    # The holder dies without releasing: the kernel drops its flock, its file still names it.
    os.close(held.fd)
    caplog.clear()
    taken = lifecycle.OutputLock.acquire(tmp_path)
    takeovers = [r.getMessage() for r in caplog.records if "Taking over" in r.getMessage()]
    assert len(takeovers) == 1 and f"pid {os.getpid()}" in takeovers[0]
    taken.release()
    caplog.clear()
    lifecycle.OutputLock.acquire(tmp_path).release()  # released cleanly: no take-over line
    assert not [r for r in caplog.records if "Taking over" in r.getMessage()]


def test_step_end_stops_with_a_save_on_a_signal_and_fails_on_a_lost_folder(tmp_path):
    life = lifecycle.Lifecycle(str(tmp_path), is_main=True, world_size=1)
    life.lock = lifecycle.OutputLock.acquire(tmp_path)
    stopper, args = lifecycle.StopAtStepEnd(life), SimpleNamespace(device="cpu")
    state, control = TrainerState(global_step=2, max_steps=5), TrainerControl()
    stopper.on_step_end(args, state, control)
    assert not (control.should_save or control.should_training_stop)  # no signal: nothing changes

    life.received = signal.SIGTERM
    stopper.on_step_end(args, state, control)
    assert control.should_save and control.should_training_stop and life.stopped_at == 2

    last, control = TrainerState(global_step=5, max_steps=5), TrainerControl()
    life.stopped_at = None
    stopper.on_step_end(args, last, control)
    assert life.stopped_at is None  # at the last step the run just finishes (and writes its final model)

    replaced = tmp_path / lifecycle.LOCK_FILE
    replaced.unlink()
    replaced.write_text("")  # the folder deleted and made again by someone else: not this run's lock
    with raises_naming("output_dir", str(tmp_path), "step"):
        stopper.on_step_end(args, state, TrainerControl())
    life.end()


def test_signals_before_during_and_after_training(tmp_path):
    """Before training: stop at once (75). During: remember, stop at the step end; a second SIGINT stops at once
    (130), a second SIGTERM is ignored. The previous handlers come back at the end."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def deliver(number):
        os.kill(os.getpid(), number)
        for _ in range(200):  # Python runs the handler between two bytecodes of the main thread
            time.sleep(0.005)

    life = lifecycle.Lifecycle(str(tmp_path), is_main=False, world_size=1)
    life.hold_signals()
    try:
        with pytest.raises(SystemExit) as stopped:
            deliver(signal.SIGTERM)
        assert stopped.value.code == lifecycle.EXIT_INTERRUPTED

        life.received, life.phase = None, "training"
        deliver(signal.SIGTERM)
        deliver(signal.SIGTERM)  # a launcher passing Slurm's signal on: already stopping
        assert life.received == signal.SIGTERM
        life.received = None
        deliver(signal.SIGINT)
        with pytest.raises(SystemExit) as stopped:
            deliver(signal.SIGINT)
        assert stopped.value.code == 130
    finally:
        life.end()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# --------------------------------------------------------------------------------------------------------------------
# A finished run stays finished
# --------------------------------------------------------------------------------------------------------------------
def test_a_completed_run_is_left_alone_unless_more_is_asked(tmp_path):
    def record(**fields):
        (tmp_path / "r1kit_run.json").write_text(json.dumps({"status": "completed", **fields}))

    record(global_step=6, max_steps=6, num_train_epochs=3.0)
    said = completed_run(str(tmp_path), 6, 3.0)
    assert said and "step 6" in said and "max_steps" in said and "resume: never" in said
    assert completed_run(str(tmp_path), 4, 3.0)  # fewer steps asked: still nothing to do
    assert completed_run(str(tmp_path), 8, 3.0) is None  # max_steps raised: train on
    record(global_step=12, max_steps=-1, num_train_epochs=2.0)  # counted in epochs
    assert completed_run(str(tmp_path), -1, 2.0)
    assert completed_run(str(tmp_path), -1, 3.0) is None
    for status in ("running", "interrupted"):
        record(status=status, global_step=6, max_steps=6)
        assert completed_run(str(tmp_path), 6, 3.0) is None
    (tmp_path / "r1kit_run.json").write_text('{"status": "compl')  # torn: not a completion
    assert completed_run(str(tmp_path), 6, 3.0) is None


def test_begin_refuses_a_completed_run_under_resume_auto_only(tmp_path):
    (tmp_path / "r1kit_run.json").write_text(json.dumps({"status": "completed", "global_step": 3, "max_steps": 3}))
    args = SimpleNamespace(output_dir=str(tmp_path), process_index=0, world_size=1, resume="auto", max_steps=3,
                           num_train_epochs=3.0)
    with pytest.raises(lifecycle.RunAlreadyComplete) as done:
        lifecycle.begin(args)
    assert done.value.exit_code == 0
    lifecycle.OutputLock.acquire(tmp_path).release()  # the refused run let go of the folder
    args.resume = "never"
    life = lifecycle.begin(args)
    try:
        with pytest.raises(ConfigError):  # and a started one holds it
            lifecycle.OutputLock.acquire(tmp_path)
    finally:
        life.end()


@pytest.mark.slow
def test_grpo_killed_while_writing_its_final_model_finishes_without_training_past_max_steps(
        tmp_path, tiny_model_dir, math_jsonl, caplog):
    import torch
    from safetensors.torch import load_file

    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline

    out = tmp_path / "out"
    args = ["--config", str(write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2,
                                                                  save_steps=2)))]
    pipeline(*parse_args(args))
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "completed"
    with pytest.raises(lifecycle.RunAlreadyComplete):  # rerun: nothing to do (it used to train step 3, then 4, ...)
        pipeline(*parse_args(args))
    assert not (out / "checkpoint-3").exists()
    # What the finished run is not: another recipe in its folder, or one that stops before the step it reached, is
    # refused in one line (exit 2 from the command) before anything loads; a safe change (logging) is the same run.
    record = (out / "r1kit_run.json").read_bytes()
    for changed, named in (({"learning_rate": 5.0e-4, "reward_funcs": ["accuracy"]}, ("another recipe", "learning_rate",
                                                                                        "reward_funcs")),
                           ({"max_steps": 1}, ("completed at step 2", "max_steps 1"))):
        folder = tmp_path / f"other-{len(changed)}"
        folder.mkdir()
        other = write_recipe(folder, **{**tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=2),
                                        **changed})
        with raises_naming(*named):
            pipeline(*parse_args(["--config", str(other)]))
    quieter = tmp_path / "quieter"
    quieter.mkdir()
    with pytest.raises(lifecycle.RunAlreadyComplete):
        pipeline(*parse_args(["--config", str(write_recipe(quieter, **tiny_recipe(
            tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=2, logging_steps=2)))]))
    assert (out / "r1kit_run.json").read_bytes() == record

    # A kill while the final model was being written: checkpoint-2 is there, the record still says running.
    lifecycle.update_run_record(str(out), status="running")
    (out / "model.safetensors").unlink()
    pipeline(*parse_args(args))
    assert not (out / "checkpoint-3").exists()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert "nothing left to train" in caplog.text
    final, saved = load_file(out / "model.safetensors"), load_file(out / "checkpoint-2" / "model.safetensors")
    assert final.keys() == saved.keys() and all(torch.equal(final[k], saved[k]) for k in final)
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "completed"


# --------------------------------------------------------------------------------------------------------------------
# Slurm: the signal ahead of the time limit, and a requeue on the resumable exit code
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("launcher_exit", "requeued"), [(75, True), (143, True), (0, False), (3, False), (1, False)])
def test_train_slurm_requeues_an_interrupted_run_only(tmp_path, launcher_exit, requeued):
    script = REPO / "slurm" / "train.slurm"
    header = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --requeue" in header and any(line.startswith("#SBATCH --signal=TERM@") for line in header)
    fake = tmp_path / "bin"  # Slurm's commands, standing in: srun exits as the launcher would, scontrol records
    fake.mkdir()
    (fake / "srun").write_text(f"#!/bin/sh\necho \"$TORCH_ELASTIC_SHUTDOWN_TIMEOUT\" > {tmp_path}/grace\n"
                               f"exit {launcher_exit}\n")
    (fake / "scontrol").write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then echo node1; else echo \"$@\" >> "
                                   f"{tmp_path}/scontrol; fi\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    recipe = write_recipe(tmp_path, model_name_or_path="some/model")
    env = {**os.environ, "PATH": f"{fake}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_ID": "4242"}
    result = subprocess.run(["bash", str(script), "--recipe", str(recipe)], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == launcher_exit, result.stderr
    assert int((tmp_path / "grace").read_text()) >= 300  # accelerate's agent waits for the save, not torch's 30 s
    calls = (tmp_path / "scontrol").read_text() if (tmp_path / "scontrol").exists() else ""
    assert (calls == "requeue 4242\n") is requeued, calls
