"""End-to-end GRPO runs of a tiny model through `r1kit.grpo.pipeline`, from a YAML recipe, on CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from r1kit.config.recipe import parse_args
from r1kit.errors import ConfigError
from r1kit.grpo import pipeline as main
from r1kit.state.checkpoints import find_resume_checkpoint
from tests.helpers import tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]


def run_recipe(tmp_path: Path, recipe: dict, *cli: str) -> dict:
    path = write_recipe(tmp_path, **recipe)
    return main(*parse_args(["--config", str(path), *cli]))


def log_by_step(output_dir: Path) -> dict[int, dict]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return {entry["step"]: entry for entry in state["log_history"] if "loss" in entry}


@pytest.mark.slow
def test_three_steps_train_every_parameter_and_write_outputs(tmp_path, tiny_model_dir, math_jsonl):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "out"
    metrics = run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out))

    assert metrics["train_samples"] == 32
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert (out / "checkpoint-3" / "model.safetensors").is_file()
    for name in ("trainer_state.json", "train_results.json", "model.safetensors", "config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    assert sorted(log_by_step(out)) == [1, 2, 3]
    assert "rewards/accuracy_reward/mean" in log_by_step(out)[1]
    assert log_by_step(out)[1]["rewards/accuracy/unparseable_gold"] == 0  # counted, through log_metric

    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    after = AutoModelForCausalLM.from_pretrained(out)
    unchanged = [
        name
        for (name, p0), (_, p1) in zip(before.named_parameters(), after.named_parameters())
        if p0.requires_grad and torch.equal(p0, p1)
    ]
    assert unchanged == []
    # The saved model stops at the tokenizer's EOS and ships the tokenizer.
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert after.generation_config.eos_token_id == tokenizer.eos_token_id
    assert json.loads((out / "r1kit_run.json").read_text())["world_size"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("order", ["async last", "async first"])
def test_completions_file_holds_every_reward_of_every_completion(tmp_path, tiny_model_dir, math_jsonl, order):
    rewards = ["accuracy", "tests.rewards_for_tests:length_variety"]
    asynchronous = "tests.rewards_for_tests:async_length_variety"  # TRL runs it concurrently, after the others
    rewards = [*rewards, asynchronous] if order == "async last" else [asynchronous, *rewards]
    out = tmp_path / "out"
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=10, reward_funcs=rewards))

    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 8 and [r["step"] for r in rows] == [1] * 8 + [2] * 8
    for row in rows:
        scores = row["rewards"]
        assert set(scores) == {"accuracy_reward", "length_variety", "async_length_variety"}
        assert scores["accuracy_reward"] in (0.0, 1.0)
        assert scores["length_variety"] == pytest.approx(len(row["completion"]) / 20)
        assert scores["async_length_variety"] == pytest.approx(-scores["length_variety"])
        assert row["prompt"].startswith("What is") and row["mode"] == "train"


@pytest.mark.slow
def test_resume_auto_reproduces_the_uninterrupted_run(tmp_path, tiny_model_dir, math_jsonl):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, full, max_steps=4))
    # A run that stopped after its step-2 checkpoint, then restarted with resume: auto.
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    state_file = resumed / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    for entry in state["log_history"]:
        entry["from_checkpoint"] = True  # marks the history a resumed run carries over
    state_file.write_text(json.dumps(state))
    # what the stopped run had recorded: steps 1-4 (it went past its checkpoint) and a line torn by the kill
    full_rows = (full / "completions.jsonl").read_text()
    (resumed / "completions.jsonl").write_text(full_rows + '{"step": 3, "mode": "tr')
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, resumed, max_steps=4, resume="auto"))
    # the re-done steps' rows replace the old ones, and the torn line is gone: the same rows as the uninterrupted run
    assert (resumed / "completions.jsonl").read_text() == full_rows

    a, b = log_by_step(full), log_by_step(resumed)
    assert sorted(b) == [1, 2, 3, 4]
    assert [step for step, e in b.items() if e.get("from_checkpoint")] == [1, 2]  # continued, did not start over
    for step in (3, 4):
        for key in ("loss", "reward", "grad_norm"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-7), (step, key)
    assert json.loads((resumed / "r1kit_run.json").read_text())["resumed_from"].endswith("checkpoint-2")


@pytest.mark.slow
def test_rerun_tells_the_user_it_resumes_and_how_to_start_fresh(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=2))  # the first run
    path = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=3, save_steps=2))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    rerun = subprocess.run([sys.executable, "-m", "r1kit", "grpo", "--config", str(path)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    lines = [line for line in (rerun.stdout + rerun.stderr).splitlines() if "Resuming from" in line]
    assert len(lines) == 1, lines  # at the default log level, once
    assert f"{out / 'checkpoint-2'} (step 2" in lines[0] and "resume: never" in lines[0]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3


@pytest.mark.slow
def test_a_dry_run_of_a_finished_run_says_what_the_run_would_say_not_that_it_resumes(tmp_path, tiny_model_dir,
                                                                                      math_jsonl, capsys, caplog):
    from r1kit.cli import main

    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=2)
    run_recipe(tmp_path, recipe)
    capsys.readouterr()
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out.split("recipe OK")[0])
    assert printed["resume_from"] is None and "complete" in printed["run_state"]
    assert "Resuming from" not in caplog.text
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **{**recipe, "max_steps": 3})), "--dry-run"]) == 0
    assert yaml.safe_load(capsys.readouterr().out.split("recipe OK")[0])["resume_from"] == str(out / "checkpoint-2")


@pytest.mark.slow
def test_resume_never_starts_fresh(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2))
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, resume="never"))
    assert sorted(log_by_step(out)) == [1, 2]
    assert json.loads((out / "r1kit_run.json").read_text())["resumed_from"] is None


def test_resume_auto_skips_half_written_checkpoints(tmp_path, caplog):
    from tests.test_checkpoints import write_checkpoint

    good = write_checkpoint(tmp_path / "checkpoint-4")
    torn = tmp_path / "checkpoint-6"  # killed mid-save: weights written, state not
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"x")
    truncated = tmp_path / "checkpoint-8"
    truncated.mkdir()
    (truncated / "trainer_state.json").write_text('{"global_step": 8, "log_hi')
    (truncated / "model.safetensors").write_bytes(b"x")
    (tmp_path / "checkpoint-10").write_text("a file, not a folder")

    assert find_resume_checkpoint(str(tmp_path), "auto") == str(good)
    assert "checkpoint-8" in caplog.text and "checkpoint-6" in caplog.text
    assert find_resume_checkpoint(str(tmp_path), "never") is None
    assert find_resume_checkpoint(str(tmp_path / "missing"), "auto") is None
    assert find_resume_checkpoint(str(tmp_path), str(good)) == str(good)


@pytest.mark.slow
def test_run_killed_right_after_a_save_resumes_and_completes(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    recipe = tiny_recipe(
        tiny_model_dir, math_jsonl, out, max_steps=6, save_steps=2,
        reward_funcs=["tests.rewards_for_tests:slow_length_variety"],
    )
    path = write_recipe(tmp_path, **recipe)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "r1kit.grpo", "--config", str(path)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not (out / "checkpoint-2" / "trainer_state.json").exists():
            assert proc.poll() is None, "the run ended before writing checkpoint-2"
            assert time.monotonic() < deadline, "no checkpoint-2 within 3 minutes"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not (out / "train_results.json").exists(), "the run finished before it could be killed"

    run_recipe(tmp_path, recipe)  # resumed in this process: only the kill needs a process of its own
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert json.loads((out / "r1kit_run.json").read_text())["resumed_from"] is not None
    assert (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_run_killed_after_its_passes_were_measured_resumes_bit_exact(tmp_path, tiny_model_dir, math_jsonl):
    """`training_pass: auto` (the default) measures its passes in the first steps; their decisions travel with each
    checkpoint, so the same command after a kill -9 computes every later step with the passes the uninterrupted run
    takes. (Measured again, they were chosen anew, by timings: grad norms differed from the uninterrupted run's at
    1e-7 relative.) A shape class needs one or two timed micro-batches per candidate: decided within the first 6
    steps here, saved at 8. The killed run is the uninterrupted run's folder as a kill -9 right after its save leaves it."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for folder in ("w", "k"):
        (tmp_path / folder).mkdir()
    run_recipe(tmp_path / "w", tiny_recipe(tiny_model_dir, math_jsonl, whole, max_steps=12, save_steps=8,
                                           training_pass="auto", save_total_limit=None))
    saved = json.loads((whole / "checkpoint-8" / "r1kit_training_pass.json").read_text())
    assert any(c["choice"] for chooser in saved["sets"].values() for c in chooser["classes"])  # decided by then
    shutil.copytree(whole / "checkpoint-8", killed / "checkpoint-8")
    run_recipe(tmp_path / "k", tiny_recipe(tiny_model_dir, math_jsonl, killed, max_steps=12, save_steps=8,
                                           training_pass="auto", save_total_limit=None))
    steps = [{e["step"]: (e["loss"], e["grad_norm"]) for e in json.loads((out / "trainer_state.json").read_text())
              ["log_history"] if "loss" in e} for out in (whole, killed)]
    assert sorted(steps[1]) == list(range(1, 13))
    assert steps[1] == steps[0]  # every step after the resume too, bit for bit


@pytest.mark.slow
def test_lora_run_saves_an_adapter(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    run_recipe(
        tmp_path,
        tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, use_peft=True, lora_r=4, lora_target_modules=["q_proj", "v_proj"]),
    )
    assert (out / "adapter" / "adapter_model.safetensors").is_file() and (out / "adapter" / "adapter_config.json").is_file()
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == 4


def test_missing_reward_column_fails_before_the_model_loads(tmp_path, math_jsonl):
    model = tmp_path / "config-only-model"  # passes the path check, but could not be loaded
    model.mkdir()
    (model / "config.json").write_text("{}")
    recipe = tiny_recipe(model, math_jsonl, tmp_path / "out", reward_funcs=["code"])
    with pytest.raises(ConfigError, match="reward 'code' needs column"):
        run_recipe(tmp_path, recipe)
