"""One exit code per outcome on every launch path (r1kit.launching.launch): a 2-process run interrupted under
`r1kit grpo --world-size 2` (one rank signalled), `r1kit launch torchrun` (the launcher alone) and `r1kit launch
accelerate launch` (every process, several times) exits 75 (torchrun and accelerate launch alone say 1 or 143 for it,
with a traceback), and the same command resumes; a 2-process checkpoint is not resumed on one process. (Plain
`r1kit grpo`: tests/test_lifecycle.py; a tripwire's stop, 3: tests/test_distributed.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from r1kit.console import EXIT_COMPLETED, EXIT_INTERRUPTED, EXIT_STOPPED
from r1kit.launching.launch import outcome, world_size
from tests.helpers import descendants, process_parents, raises_naming, tiny_recipe, write_recipe
from tests.test_lifecycle import Command, run_here

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 300  # two ranks starting on a busy 2-core machine
SLOW = ["accuracy", "tests.rewards_for_tests:slow_length_variety"]  # a step of ~1 s: room to signal mid-run


def test_the_outcome_is_what_the_workers_agree_on():
    assert outcome({"0": 75, "1": 75}, 2, True, 1) == EXIT_INTERRUPTED  # the launcher said 1
    assert outcome({"0": 75}, 2, True, 1) == EXIT_INTERRUPTED  # one killed by its launcher after the stop
    assert outcome({"0": 3, "1": 3}, 2, False, 1) == EXIT_STOPPED
    assert outcome({"0": 0, "1": 0}, 2, False, 0) == EXIT_COMPLETED
    assert outcome({"0": 0}, 2, False, 1) == 1  # one worker never said how it ended: a failure
    assert outcome({"0": 75, "1": 1}, 2, True, 1) == 1  # a crash is the run's, whatever else happened
    assert outcome({"0": 2, "1": 2}, 2, False, 1) == 2
    assert outcome({}, 0, True, 1) == EXIT_INTERRUPTED  # stopped before any worker started
    assert outcome({}, 0, False, 2) == 2  # the launcher's own error
    assert world_size(["--config", "r.yaml", "--world-size", "2"]) == (2, ["--config", "r.yaml"])
    assert world_size(["--world-size=3"]) == (3, [])
    assert world_size(["--dry-run", "--world-size", "2"]) == (1, ["--dry-run", "--world-size", "2"])
    with raises_naming("--world-size"):
        world_size(["--world-size", "two"])


class Launch(Command):
    """`python -m r1kit ARGV` in its own process, watched line by line (`Command`); its process tree for signals."""

    def __init__(self, *argv: str):
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("MASTER_PORT", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "r1kit", *argv], cwd=REPO, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def signal_all(self, number: int = signal.SIGTERM) -> None:
        """The launch and every process it started (what Slurm signals at a preemption)."""
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, number)
            except OSError:
                pass

    def finish(self, seconds: float = 400) -> int:
        try:
            return super().finish(seconds)
        finally:
            self.signal_all(signal.SIGKILL)  # (nothing is left when it ended by itself)


def run_to_end(*argv: str) -> tuple[int, str]:
    launch = Launch(*argv)
    return launch.finish(), launch.log


def assert_interrupted(code: int, log: str, out: Path) -> int:
    """Exit 75 after one line naming the checkpoint; both ranks stopped at that step, nothing looks final."""
    assert code == EXIT_INTERRUPTED, log[-4000:]
    said = [line for line in log.splitlines() if "Interrupted by SIGTERM at step" in line]
    assert len(said) == 1, log[-4000:]
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "interrupted" and record["world_size"] == 2
    step = record["global_step"]
    assert f"checkpoint-{step}" in said[0]
    assert json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())["global_step"] == step
    assert (out / f"checkpoint-{step}" / "model.safetensors").is_file() and not (out / "model.safetensors").exists()
    return step


def two_rank_recipe(tmp_path: Path, model: Path, data: Path, max_steps: int = 6) -> tuple[Path, Path]:
    out = tmp_path / "out"
    return out, write_recipe(tmp_path, **tiny_recipe(model, data, out, max_steps=max_steps, save_steps=1000,
                                                     use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                                                     reward_funcs=SLOW))


def workers_of(launcher_pid: int) -> dict[int, int]:
    """{rank: pid} of the processes `launcher_pid` started, by the RANK in their environment."""
    ranks = {}
    for pid in [pid for pid, parent in process_parents().items() if parent == launcher_pid]:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((int(item[5:]) for item in environ if item.startswith(b"RANK=")), None)
        if rank is not None:
            ranks[rank] = pid
    return ranks


@pytest.mark.slow
def test_world_size_2_with_one_rank_signalled_stops_both_exits_75_is_not_resumed_on_one_process_and_resumes_on_two(
        tmp_path, tiny_model_dir, math_jsonl):
    """A signal that reaches one rank only (an OOM killer's SIGTERM, a user's kill of one pid) stops both ranks at
    the same step: the other rank learns of it at the step's end instead of waiting in the save's collectives.
    (Signals to every process, as Slurm sends them at a preemption: the accelerate launch below and
    tests/test_slurm.py; to the launcher alone: the torchrun launch below.)"""
    out, recipe = two_rank_recipe(tmp_path, tiny_model_dir, math_jsonl)
    command = ("grpo", "--world-size", "2", "--config", str(recipe))
    launch = Launch(*command)
    launch.wait_for("{'loss'", STARTUP_SECONDS)
    ranks = workers_of(launch.proc.pid)  # torchrun's workers, started by this launch's own process
    assert sorted(ranks) == [0, 1], ranks
    os.kill(ranks[1], signal.SIGTERM)  # rank 1 only: rank 0, which writes the record, got no signal itself
    step = assert_interrupted(launch.finish(), launch.log, out)
    assert json.loads((out / "r1kit_run.json").read_text())["signal"] == "SIGTERM"
    saved = (out / f"checkpoint-{step}" / "model.safetensors").read_bytes()

    # The 2-process checkpoint on one process: half the global batch and another RNG layout. Refused before anything
    # trains (a ConfigError: one `r1kit: error:` line and exit 2 from the command, as test_cli_errors checks). Run
    # here, in this one process: a process of its own would cost ~5 CPU-seconds of imports to prove the same.
    record = (out / "r1kit_run.json").read_bytes()
    with raises_naming("world_size 2 -> 1", "global_batch 8 -> 4", "--world-size 2"):
        run_here("grpo", recipe)
    assert (out / f"checkpoint-{step}" / "model.safetensors").read_bytes() == saved
    assert (out / "r1kit_run.json").read_bytes() == record

    code, log = run_to_end(*command)  # as it was launched
    assert code == EXIT_COMPLETED, log[-4000:]
    assert f"Resuming from {out / f'checkpoint-{step}'}" in log
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "completed" and record["global_step"] == 6
    assert [(s["from_step"], s["status"]) for s in record["segments"]] == [(0, "interrupted"), (step, "completed")]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "loss" in e] == list(range(1, 7))


@pytest.mark.slow
def test_r1kit_launch_torchrun_exits_75_when_it_alone_is_signalled(tmp_path, tiny_model_dir, math_jsonl):
    out, recipe = two_rank_recipe(tmp_path, tiny_model_dir, math_jsonl)
    launch = Launch("launch", "torchrun", "--standalone", "--nproc_per_node", "2", "-m", "r1kit", "grpo",
                    "--config", str(recipe))
    launch.wait_for("{'loss'", STARTUP_SECONDS)
    launch.proc.send_signal(signal.SIGTERM)  # a user's kill, or a container runtime: the launch alone
    assert_interrupted(launch.finish(), launch.log, out)
    assert "Traceback" not in launch.log  # (torchrun alone: exit 1 and its SignalException traceback)


@pytest.mark.slow
def test_r1kit_launch_accelerate_exits_75_on_repeated_signals_to_every_process(tmp_path, tiny_model_dir, math_jsonl):
    out, recipe = two_rank_recipe(tmp_path, tiny_model_dir, math_jsonl)
    launch = Launch("launch", "accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "r1kit", "grpo", "--config", str(recipe))
    launch.wait_for("{'loss'", STARTUP_SECONDS)
    launch.signal_all()
    launch.wait_for("SIGTERM received")
    for _ in range(3):  # Slurm's signal, the launcher passing it on, an impatient user
        time.sleep(0.2)
        launch.signal_all()
    assert_interrupted(launch.finish(), launch.log, out)
    assert "Traceback" not in launch.log  # (accelerate launch alone: exit 143)


def test_a_launcher_that_fails_before_its_workers_run_says_why_in_one_line(capsys):
    """A rendezvous port in use, say: the launcher raises before any worker starts, and a bare exit 1 would say
    nothing (found running the Slurm tests)."""
    from r1kit.launching.launch import caught

    def port_taken():
        raise ConnectionError("port 29500 is in use")

    assert caught(port_taken) == 1
    err = capsys.readouterr().err
    assert "before its workers ran" in err and "port 29500 is in use" in err and len(err.strip().splitlines()) == 1
