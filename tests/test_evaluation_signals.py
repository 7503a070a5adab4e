"""A stop signal during a held-out evaluation: the evaluation ends at the next generated token and is not recorded;
before training the run stops there (exit 75, nothing trained or saved); during training the step's checkpoint is
saved and no final evaluation starts; a second Ctrl-C exits 130 with r1kit_run.json saying so. The signals land
inside the evaluation by a gate (tests/gated_heldout.py), not by timing."""

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

from r1kit.benchmarking.callbacks import EvaluationInterrupted, HeldOutAccuracyCallback
from r1kit.benchmarking.generation import GenerationStopped, generate

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 300  # a cold start on a busy 2-core machine


def test_generation_stops_at_the_token_it_is_asked_to(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(GenerationStopped):
        generate(model, tokenizer, ["1 + 1 =", "2 + 2 ="], max_new_tokens=50, batch_size=1, should_stop=should_stop)
    assert len(asked) == 3  # asked once per token, and generation ended at the third (the second batch never began)
    assert len(generate(model, tokenizer, ["1 + 1 ="], max_new_tokens=4, should_stop=lambda: False)) == 1


def test_the_callback_records_no_stopped_evaluation_and_skips_the_final_one_of_an_interrupted_run(tmp_path, monkeypatch):
    calls = []

    def fake_accuracy(*args, should_stop=None, **kwargs):
        calls.append(1)
        if should_stop():
            raise GenerationStopped()
        return 0.5, []

    monkeypatch.setattr("r1kit.benchmarking.callbacks.greedy_accuracy", fake_accuracy)
    tracker = HeldOutAccuracyCallback(None, ["q"], ["1"], str(tmp_path), every_steps=2)
    args, control = SimpleNamespace(world_size=1), SimpleNamespace(should_training_stop=False)
    tracker.stop_requested = lambda: True
    with pytest.raises(EvaluationInterrupted):
        tracker.on_train_begin(args, SimpleNamespace(global_step=0), control)
    assert tracker.history == [] and not tracker.path.exists()  # stopped: not recorded

    tracker.stop_requested, tracker.interrupted = (lambda: False), (lambda: True)
    tracker.on_train_end(args, SimpleNamespace(global_step=4), control)
    assert len(calls) == 1  # an interrupted run: no final evaluation started
    tracker.interrupted = lambda: False
    tracker.on_train_end(args, SimpleNamespace(global_step=4), control)
    assert len(calls) == 2 and [r["step"] for r in tracker.history] == [4]


# --------------------------------------------------------------------------------------------------------------------
# A real run, signalled inside an evaluation
# --------------------------------------------------------------------------------------------------------------------
class GatedRun:
    """The demo recipe, shortened, with held-out evaluation number `gate_at` waiting at a gate."""

    def __init__(self, tmp_path: Path, gate_at: int, max_steps: int = 4):
        self.out, self.gate = tmp_path / "out", tmp_path / "gate"
        self.gate.mkdir()
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "R1KIT_TEST_GATE": str(self.gate), "R1KIT_TEST_EVAL_GATE_AT": str(gate_at)}
        argv = ["grpo", "--output_dir", str(self.out), "--max_steps", str(max_steps), "--heldout_eval_steps", "2",
                "--heldout_size", "16", "--per_device_train_batch_size", "16", "--save_steps", "100"]
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.gated_heldout", *argv], cwd=REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    def wait_at_gate(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not (self.gate / "eval-waiting").exists():
            assert self.proc.poll() is None, self.log[-3000:]
            assert time.monotonic() < deadline, self.log[-3000:]
            time.sleep(0.02)

    def signal(self, number: int, said: str) -> None:
        """Sends `number` and waits until the run has said `said` (its handler ran)."""
        self.proc.send_signal(number)
        deadline = time.monotonic() + 60
        while not any(said in line for line in list(self.lines)):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log[-3000:]
            time.sleep(0.02)

    def finish(self) -> int:
        (self.gate / "go").touch()
        try:
            return self.proc.wait(timeout=600)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def record(self) -> dict:
        return json.loads((self.out / "r1kit_run.json").read_text())

    def evaluated_steps(self) -> list[int]:
        path = self.out / "heldout_accuracy.jsonl"
        return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_signal_during_the_first_evaluation_stops_before_training(tmp_path):
    """Before: it trained a step, saved it and ran the final evaluation before it exited."""
    run = GatedRun(tmp_path, gate_at=1)
    run.wait_at_gate()
    run.signal(signal.SIGTERM, "SIGTERM received")
    code = run.finish()
    assert code == 75, run.log[-3000:]
    said = [line for line in run.log.splitlines() if "during the held-out evaluation at step 0" in line]
    assert len(said) == 1 and "Traceback" not in run.log, run.log[-3000:]
    assert run.record()["status"] == "interrupted" and run.record()["global_step"] == 0
    assert run.evaluated_steps() == [] and not list(run.out.glob("checkpoint-*"))
    assert "'loss'" not in run.log  # not one step trained


@pytest.mark.slow
def test_a_signal_during_a_later_evaluation_saves_the_step_and_skips_the_final_evaluation(tmp_path):
    run = GatedRun(tmp_path, gate_at=2)  # the evaluation at step 2
    run.wait_at_gate()
    run.signal(signal.SIGTERM, "SIGTERM received")
    code = run.finish()
    assert code == 75, run.log[-3000:]
    assert run.record()["status"] == "interrupted" and run.record()["global_step"] == 2
    assert (run.out / "checkpoint-2" / "trainer_state.json").is_file()
    assert run.evaluated_steps() == [0]  # step 2's was stopped; no final evaluation was started


@pytest.mark.slow
def test_a_second_ctrl_c_exits_130_and_the_run_record_says_so(tmp_path):
    """Before: exit 130 with r1kit_run.json still saying `running`."""
    run = GatedRun(tmp_path, gate_at=1)
    run.wait_at_gate()
    run.signal(signal.SIGINT, "SIGINT received")
    run.signal(signal.SIGINT, "second SIGINT")
    code = run.finish()
    assert code == 130, run.log[-3000:]
    record = run.record()
    assert record["status"] == "interrupted" and record["unsaved"] is True and record["signal"] == "SIGINT"
