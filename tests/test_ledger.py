"""The run's ledger (r1kit.state.ledger): a tripwire's decision is written before it is acted on, and a resume reads it
first, so a crash at any moment resumes the way the decision said: on the rolled-back branch, with its learning-rate
cut and its seed, never from the abandoned stretch (moved aside, not deleted); a damaged rollback target is passed
over; a stopped run stays stopped until the user says otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.config.recipe import parse_args
from r1kit.console import EXIT_STOPPED
from r1kit.grpo import pipeline
from r1kit.run.lifecycle import RunAlreadyComplete, RunHalted
from r1kit.state import ledger
from tests.helpers import tiny_recipe, write_recipe
from tests.test_contract import same_weights, weights


def close_weights(a: dict, b: dict) -> bool:
    """The same weights up to float rounding (each run measures and may take another exact training pass)."""
    import torch

    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)

REPO = Path(__file__).resolve().parents[1]
REWARDS = ["accuracy", "tests.rewards_for_tests:length_variety_or_kill"]


def by_step(out: Path, key: str) -> dict[int, float]:
    state = json.loads((out / "trainer_state.json").read_text())
    return {e["step"]: e[key] for e in state["log_history"] if key in e and "loss" in e}


def rolled_back_run(root: Path, model: Path, data: Path) -> tuple[Path, list[str]]:
    """A run that trained steps 1-3 without tripwires (a checkpoint at each), and the command that continues it to
    step 5 with a rollback wire: at step 5 (its window of 2 full) it rolls back to checkpoint-3, abandoning
    checkpoint-4, and trains 4 and 5 again at half the learning rate, where it fires again and stops (one rollback
    allowed). Returns the output folder and the command."""
    out = root / "out"
    recipe = tiny_recipe(model, data, out, max_steps=5, save_steps=1, reward_funcs=REWARDS, tripwire_max_rollbacks=1,
                         tripwires={"length_blowup": {"threshold": 0.0, "window": 2, "action": "rollback"}})
    command = ["--config", str(write_recipe(root, **recipe))]
    pipeline(*parse_args([*command, "--max_steps", "3", "--tripwires_enabled", "false"]))
    return out, command


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir, math_jsonl):
    """The rolled-back run, uninterrupted: it stops at step 5 of its branch."""
    root = tmp_path_factory.mktemp("reference")
    out, command = rolled_back_run(root, tiny_model_dir, math_jsonl)
    with pytest.raises(RunHalted):
        pipeline(*parse_args(command))
    return out


def assert_on_the_branch(out: Path, reference: Path) -> None:
    """Steps 4 and 5 trained on the rolled-back branch as the uninterrupted run did: from checkpoint-3, at half the
    learning rate and with the branch's own seed (the same losses, the same weights at the new checkpoint-4), and
    the abandoned checkpoint-4 moved aside, not deleted."""
    assert by_step(out, "learning_rate") == {1: 1e-3, 2: 1e-3, 3: 1e-3, 4: 5e-4, 5: 5e-4}
    for key in ("loss", "reward", "grad_norm"):
        theirs, ours = by_step(reference, key), by_step(out, key)
        for step in (4, 5):
            assert ours[step] == pytest.approx(theirs[step], rel=1e-5, abs=1e-7), (key, step)
    abandoned = out / ledger.ABANDONED / "rollback-1" / "checkpoint-4"
    assert (abandoned / "model.safetensors").is_file()
    new = weights(out / "checkpoint-4")
    assert close_weights(new, weights(reference / "checkpoint-4"))
    assert not close_weights(new, weights(abandoned))
    decisions = ledger.read(out)
    assert [(r["step"], Path(r["checkpoint"]).name, r["applied"]) for r in decisions["rollbacks"]] == [
        (5, "checkpoint-3", True)]
    assert decisions["stop"]["step"] == 5


@pytest.mark.slow
def test_a_kill_9_on_the_rolled_back_branch_resumes_that_branch_not_the_abandoned_stretch(
        tmp_path, tiny_model_dir, math_jsonl, reference):
    out, command = rolled_back_run(tmp_path, tiny_model_dir, math_jsonl)
    # The fault: kill -9 while the rolled-back branch trains step 4 again (the reward's 3rd call of this process:
    # steps 4 and 5, the rollback, step 4), before it saved anything. The abandoned checkpoint-4 is the newest by
    # step number; it used to be resumed, at the full learning rate.
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "R1KIT_TEST_KILL_AT": "3"}
    killed = subprocess.run([sys.executable, "-m", "r1kit.grpo", *command], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -9, (killed.stdout + killed.stderr)[-3000:]
    assert ledger.read(out)["rollbacks"][0]["applied"] and not (out / "checkpoint-4").exists()

    with pytest.raises(RunHalted):  # the same command
        pipeline(*parse_args(command))
    assert_on_the_branch(out, reference)


@pytest.mark.slow
def test_a_crash_between_the_rollback_decision_and_its_act_resumes_with_the_cut_and_the_seed(
        tmp_path, tiny_model_dir, math_jsonl, reference, monkeypatch, caplog, capsys):
    out, command = rolled_back_run(tmp_path, tiny_model_dir, math_jsonl)

    class Crash(BaseException):
        pass

    settle = ledger.settle

    def crash_before_acting(output_dir):
        if any(not r.get("applied") for r in ledger.read(output_dir)["rollbacks"]):
            raise Crash()  # the decision is written; nothing after it ran (a kill -9 here)
        return settle(output_dir)

    monkeypatch.setattr(ledger, "settle", crash_before_acting)
    with pytest.raises(Crash):
        pipeline(*parse_args(command))
    monkeypatch.undo()
    assert (out / "checkpoint-4").is_dir() and not ledger.read(out)["rollbacks"][0]["applied"]

    caplog.clear()
    capsys.readouterr()
    with pytest.raises(RunHalted):  # the same command: the decision is acted on first, then the branch resumes
        pipeline(*parse_args(command))
    assert "The tripwire rollback decided at step 5 (back to checkpoint-3) is acted on now" in caplog.text
    assert f"Resuming from {out / 'checkpoint-3'}" in caplog.text
    assert "branch   tripwire rollback 1: the learning rate x0.5" in capsys.readouterr().out  # the start-up block
    assert_on_the_branch(out, reference)


class Damage:
    """A callback that truncates the named checkpoints' weights at the end of `step` (a disk fault during training)."""

    def __init__(self, out: Path, step: int, names: list[str]):
        self.out, self.step, self.names, self.done = out, step, names, False

    def __call__(self, *args, **kwargs):
        from transformers import TrainerCallback

        damage = self

        class Truncate(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == damage.step and not damage.done:
                    damage.done = True
                    for name in damage.names:
                        path = damage.out / name / "model.safetensors"
                        path.write_bytes(path.read_bytes()[:1000])

        return [*self.get_callbacks(*args, **kwargs), Truncate()]


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [["checkpoint-3"], ["checkpoint-1", "checkpoint-2", "checkpoint-3"]],
                         ids=["the-target", "every-candidate"])
def test_a_damaged_rollback_target_is_passed_over_or_the_run_stops_in_one_line(
        tmp_path, tiny_model_dir, math_jsonl, monkeypatch, caplog, damaged):
    import r1kit.grpo

    out, command = rolled_back_run(tmp_path, tiny_model_dir, math_jsonl)
    final = weights(out)  # the 3-step run's, which completed before this command continued it
    damage = Damage(out, 4, damaged)  # after the resume loaded checkpoint-3, before the wire fires at step 5
    damage.get_callbacks = r1kit.grpo.get_callbacks
    monkeypatch.setattr(r1kit.grpo, "get_callbacks", damage)
    with pytest.raises(RunHalted) as halted:  # (it used to crash loading the truncated file, with a traceback)
        pipeline(*parse_args(command))
    said = [r.getMessage() for r in caplog.records if "cannot train again from" in r.getMessage()]
    assert len(said) == len(damaged) and all("truncated" in line for line in said)
    decisions = ledger.read(out)
    if len(damaged) == 1:  # back to checkpoint-2, the one before; checkpoints 3 and 4 moved aside
        assert [Path(r["checkpoint"]).name for r in decisions["rollbacks"]] == ["checkpoint-2"]
        assert sorted(p.name for p in (out / ledger.ABANDONED / "rollback-1").iterdir()) == ["checkpoint-3",
                                                                                              "checkpoint-4"]
        assert by_step(out, "learning_rate")[3] == pytest.approx(5e-4)  # step 3 again, on the branch
        assert (out / "checkpoint-3" / "model.safetensors").stat().st_size > 1000  # saved again, whole
    else:  # nothing to go back to: the run stops, saying why in one line
        assert decisions["rollbacks"] == [] and "no checkpoint saved before it" in decisions["stop"]["reason"]
        assert "\n" not in str(halted.value) and "no checkpoint saved before it" in str(halted.value)
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "stopped"
    assert same_weights(weights(out), final)  # no final model written over the earlier one


@pytest.mark.slow
def test_a_tripwire_stop_stays_stopped_until_resume_after_stop(tmp_path, tiny_model_dir, math_jsonl):
    """The stopped run is a command of its own (its exit code 3 and its line are what a user sees); the runs after it
    run here, in this process (the same pipeline without ~5 CPU-seconds of imports: `RunHalted` is the command's
    exit 3, `RunAlreadyComplete` its exit 0)."""
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=1,
                         tripwires={"length_blowup": {"threshold": 0.0, "window": 2, "action": "stop"}})
    path = str(write_recipe(tmp_path, **recipe))
    command = [sys.executable, "-m", "r1kit.grpo", "--config", path]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}

    # the fault: the wire fires at step 2 (it used to exit 0, "completed", with a final model)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    code, log = done.returncode, done.stdout + done.stderr
    assert code == 3 and "Traceback" not in log, log[-3000:]
    assert len([line for line in log.splitlines() if "Stopped by a tripwire at step 2 of 4" in line]) == 1
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "stopped" and record["global_step"] == 2
    assert not (out / "model.safetensors").exists() and not (out / "train_results.json").exists()
    at_stop = weights(out / "checkpoint-2")

    # the same command: still stopped, nothing trained (it used to train on past the stop)
    with pytest.raises(RunHalted, match="a tripwire stopped at step 2") as said:
        pipeline(*parse_args(["--config", path], None))
    assert "resume_after_stop" in str(said.value) and f"exit code {EXIT_STOPPED}" in str(said.value)
    assert not (out / "checkpoint-3").exists() and same_weights(weights(out / "checkpoint-2"), at_stop)

    # the user says otherwise
    pipeline(*parse_args(["--config", path, "--resume_after_stop", "true", "--tripwires_enabled", "false"], None))
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "completed"
    assert (out / "model.safetensors").is_file() and not same_weights(weights(out), at_stop)
    with pytest.raises(RunAlreadyComplete, match="holds a completed run"):  # finished now: left alone
        pipeline(*parse_args(["--config", path], None))


def test_a_checkpoint_owes_its_branch_the_cut_and_the_seed_it_could_not_hold(tmp_path):
    for step in (1, 2, 3, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
    first = ledger.decide_rollback(str(tmp_path), str(tmp_path / "checkpoint-2"), 4, "collapse", 0.9, 0.5)
    assert (first["number"], first["lr_scale"], first["abandons"]) == (1, 0.5, ["checkpoint-3", "checkpoint-4"])
    decisions = ledger.read(tmp_path)
    assert ledger.excluded(decisions, 3) and not ledger.excluded(decisions, 2)  # decided, not yet acted on
    assert ledger.settle(str(tmp_path))["number"] == 1
    assert sorted(p.name for p in (tmp_path / "abandoned" / "rollback-1").iterdir()) == ["checkpoint-3",
                                                                                          "checkpoint-4"]
    assert ledger.settle(str(tmp_path)) is None  # done once
    (tmp_path / "checkpoint-3").mkdir()  # the branch saves its own checkpoint-3
    second = ledger.decide_rollback(str(tmp_path), str(tmp_path / "checkpoint-3"), 5, "collapse", 0.9, 0.5)
    assert second["lr_scale"] == 0.25  # checkpoint-3 was saved on branch 1 (x0.5), cut again
    ledger.settle(str(tmp_path))
    decisions = ledger.read(tmp_path)
    assert ledger.resume_shift(decisions, 3) == (0.5, 2)  # the target, saved on branch 1 (x0.5): cut to 0.25
    assert ledger.resume_shift(decisions, 2) == (0.25, 2)  # from before every rollback: both cuts, the new seed
    assert ledger.resume_shift(decisions, 4) is None  # a checkpoint of the newest branch holds its own state
    shutil.rmtree(tmp_path / "abandoned")
    assert ledger.archive(str(tmp_path)).parent.name == "abandoned" and ledger.read(tmp_path) == ledger.empty()
