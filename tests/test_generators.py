"""Where rollouts come from under `async_rollouts` (r1kit.training.generators), and async rollouts end to end: the
transformers generator's samples and log-probabilities against the policy's own, then whole runs: the same batches as a
synchronous run within the staleness bound, dynamic sampling and the curriculum on top, a kill -9 during a weight sync,
a generator that keeps failing (exit 75), and the combinations refused before the model loads."""

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
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline
from r1kit.training.generators import TransformersGenerator
from tests.helpers import raises_naming, tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def generator_for(model, tokenizer, **sampling) -> TransformersGenerator:
    config = GenerationConfig(max_new_tokens=10, do_sample=True, eos_token_id=[tokenizer.eos_token_id],
                              pad_token_id=tokenizer.pad_token_id, **sampling)
    generator = TransformersGenerator.of_policy(model, generation_config=config, eos_token_ids=[tokenizer.eos_token_id],
                                                pad_token_id=tokenizer.pad_token_id)
    generator.load(model.named_parameters())
    return generator


def prompt_rows(tokenizer) -> list[list[int]]:
    texts = ["What is 3 + 4?", "What is 3 + 4?", "Say 12.", "Say 12."]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"]
            for t in texts]


def test_the_samplers_log_probabilities_are_the_policys_under_the_same_temperature(policy):
    """The importance weight of a fresh sample is 1: the generator records exactly what the trainer's pass computes,
    log_softmax(logits / temperature) of the sampled token, teacher-forced on the same weights."""
    model, tokenizer = policy
    rows = prompt_rows(tokenizer)
    completions, logprobs = generator_for(model, tokenizer, temperature=0.7).generate(rows, 2, seed=11)
    for prompt, completion, logps in zip(rows, completions, logprobs):
        assert len(completion) == len(logps) > 0
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(logps), expected, atol=1e-4)


def test_sampling_is_seeded_and_leaves_torchs_global_generator_alone(policy):
    """The producer draws from its own seeded generator: the trainer's thread, which shuffles and samples with
    torch's global one, is not disturbed, and the same job draws the same tokens again (a resume is exact)."""
    model, tokenizer = policy
    generator, rows = generator_for(model, tokenizer, top_k=5, top_p=0.9), prompt_rows(tokenizer)
    state = torch.get_rng_state()
    first = generator.generate(rows, 2, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert generator.generate(rows, 2, seed=5) == first
    assert any(generator.generate(rows, 2, seed=s)[0] != first[0] for s in (6, 7, 8))
    for completion in first[0]:  # cut after the first end of sequence, as TRL cuts
        assert tokenizer.eos_token_id not in completion[:-1]


def test_the_generator_is_its_own_model_not_a_view_of_the_policy(policy):
    """TRL patches the policy's instance (its fused LM head wraps `forward`), r1kit's packed pass switches its
    attention: the generator is built from the class and configuration, so neither reaches it, and it generates from
    the weights it was loaded with, whatever the policy does meanwhile."""
    model, tokenizer = policy
    generator, rows = generator_for(model, tokenizer), prompt_rows(tokenizer)
    expected = generator.generate(rows, 2, seed=1)
    model.forward = lambda *a, **k: (_ for _ in ()).throw(AssertionError("the policy was called"))
    model.config._attn_implementation = "r1kit_packed"
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        assert generator.generate(rows, 2, seed=1) == expected
    finally:
        del model.forward
        model.config._attn_implementation = "sdpa"
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(1.0)


def test_a_first_load_that_misses_weights_is_refused(policy):
    model, tokenizer = policy
    generator = generator_for(model, tokenizer)
    fresh = TransformersGenerator.of_policy(model, generation_config=generator.config, eos_token_ids=generator.eos,
                                            pad_token_id=generator.pad)
    with pytest.raises(KeyError, match="miss"):
        fresh.load(list(model.named_parameters())[1:])


# --- whole runs -------------------------------------------------------------------------------------------------------
def run(tmp_path: Path, recipe: dict) -> dict:
    return pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


def trained_prompts(output_dir: Path) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (output_dir / "completions.jsonl").read_text().splitlines()]
    return [(row["step"], row["prompt"] if isinstance(row["prompt"], str) else json.dumps(row["prompt"]))
            for row in rows]


def logged(output_dir: Path, key: str) -> list[float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [entry[key] for entry in state["log_history"] if key in entry]


@pytest.mark.slow
def test_async_trains_the_same_batches_as_sync_within_the_staleness_bound(tmp_path, tiny_model_dir, math_jsonl):
    """Same seed, same steps: async trains on exactly the prompts the synchronous run trains on, step by step, each
    batch generated ahead with weights at most max_staleness steps old, every parameter changed, and the checkpoint
    records the weights version."""
    results = {}
    for mode in ("sync", "async"):
        out = tmp_path / mode
        recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=2,
                             async_rollouts=(mode == "async"))
        (tmp_path / f"recipe-{mode}").mkdir()
        run(tmp_path / f"recipe-{mode}", recipe)
        results[mode] = trained_prompts(out)
    assert results["async"] == results["sync"] and {step for step, _ in results["async"]} == {1, 2, 3, 4}

    out = tmp_path / "async"
    staleness = logged(out, "rollouts/staleness")
    assert len(staleness) == 4 and max(staleness) <= 1 and staleness[1:] == [1.0] * 3  # read ahead from step 2 on
    assert logged(out, "rollouts/stale_dropped") == [0.0] * 4
    assert logged(out, "rollouts/read_ahead_share") == [1.0] * 4
    assert all(0 <= r for r in logged(out, "rollouts/is_ratio_mean"))
    totals = json.loads((out / "rollouts.json").read_text())["totals"]
    assert totals["batches_read_ahead"] == 4 and totals.get("rows_on_demand", 0) == 0
    checkpoint = json.loads((out / "checkpoint-2" / "r1kit_rollouts.json").read_text())
    assert checkpoint["weights_version"] == 2 and checkpoint["queued_batches"] == 1

    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert all(not torch.equal(before[name], after[name]) for name in before)


@pytest.mark.slow
def test_async_with_dynamic_sampling_and_the_curriculum_generates_refills_on_demand(tmp_path, tiny_model_dir):
    """Refill rounds and curriculum replacements are prompts nobody read ahead: generated urgently, with the newest
    weights, and trained; the batch read ahead supplies the rest."""
    data = tmp_path / "flat.jsonl"
    data.write_text("".join(json.dumps({"problem": f"What is {i} + 1?", "solution": f"${i + 1}$", "flat": i % 2 == 0})
                            + "\n" for i in range(24)))
    out = tmp_path / "out"
    run(tmp_path, tiny_recipe(tiny_model_dir, data, out, max_steps=3, reward_funcs=["tests.rewards_for_tests:flat_or_length"],
                              dynamic_sampling=True, curriculum_skip_solved=1, curriculum_explore=0.0,
                              curriculum_reward="tests.rewards_for_tests:flat_or_length",
                              async_rollouts=True, max_staleness=2))
    totals = json.loads((out / "rollouts.json").read_text())["totals"]
    assert totals["rows_on_demand"] > 0 and totals["batches_read_ahead"] >= 3
    assert max(logged(out, "rollouts/staleness")) <= 2
    assert logged(out, "sampling/zero_std_groups_dropped") and len(logged(out, "loss")) == 3


@pytest.mark.slow
def test_a_resumed_async_run_trains_what_the_uninterrupted_one_trains(tmp_path, tiny_model_dir, math_jsonl):
    """The first step after a resume trained a batch generated again with the checkpoint's weights, where the
    uninterrupted run trained the one read ahead with the weights before them (|dloss| up to 2e-3). Each rank's batches
    generated ahead travel with the checkpoint, each with its weights version. The killed run is the uninterrupted
    run's folder as a kill -9 right after its save leaves it."""

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for folder in ("w", "k"):
        (tmp_path / folder).mkdir()
    # One training pass: a shape first seen after the save is measured by timings in each run, and two exact passes
    # differ at fp32 rounding (the chooser's own resume contract: test_grpo.py)
    recipe = {"max_steps": 5, "save_steps": 2, "async_rollouts": True, "save_total_limit": None,
              "training_pass": "dense"}
    run(tmp_path / "w", tiny_recipe(tiny_model_dir, math_jsonl, whole, **recipe))
    kept = torch.load(whole / "checkpoint-2" / "r1kit_read_ahead_0.pt", weights_only=True)["jobs"]
    assert kept and all(job["version"] is not None for job in kept)
    shutil.copytree(whole / "checkpoint-2", killed / "checkpoint-2")
    run(tmp_path / "k", tiny_recipe(tiny_model_dir, math_jsonl, killed, **recipe))
    assert logged(killed, "loss") == logged(whole, "loss") and len(logged(whole, "loss")) == 5  # bit for bit
    assert json.loads((killed / "rollouts.json").read_text())["totals"]["batches_kept_on_resume"] >= 1


HOOK = """
import os, signal, sys, time
from pathlib import Path
from r1kit.training import generators
from r1kit.training import rollouts
marker, when = Path(os.environ["R1KIT_TEST_MARKER"]), os.environ["R1KIT_TEST_FAULT"]
if when.startswith("sync:"):  # stop dead inside the weight sync that hands over these weights
    version = int(when[5:])
    write = rollouts.WeightStage.write
    def stalled(self, weights, v):
        if v == version:
            marker.write_text("in sync")
            time.sleep(600)
        return write(self, weights, v)
    rollouts.WeightStage.write = stalled
elif when.startswith("fail:"):  # the generator fails from its n-th job on
    calls, first = [0], int(when[5:])
    generate = generators.TransformersGenerator.generate
    def failing(self, *args):
        calls[0] += 1
        if calls[0] >= first:
            raise ConnectionError("the generator is gone")
        return generate(self, *args)
    generators.TransformersGenerator.generate = failing
    rollouts.BACKOFF_SECONDS = (0.0,)
from r1kit.cli import main
sys.exit(main(["grpo", *sys.argv[1:]]))
"""


def launch(tmp_path: Path, recipe: Path, fault: str | None = None, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "R1KIT_TEST_MARKER": str(tmp_path / "marker"),
           "R1KIT_TEST_FAULT": fault or "none"}
    return subprocess.Popen([sys.executable, "-c", HOOK, "--config", str(recipe)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


@pytest.mark.slow
def test_killed_during_a_weight_sync_the_run_resumes_exactly(tmp_path, tiny_model_dir, math_jsonl):
    """kill -9 while the weights of step 3 are being handed to the generator: the resume starts from checkpoint-2,
    regenerates what was queued, trains steps 3-5 once each, and is exact: a second resume from a copy of the same
    checkpoint trains the same losses."""
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=5, save_steps=2,
                                                  async_rollouts=True, training_pass="dense"))  # (as above)
    proc = launch(tmp_path, recipe, fault="sync:3")
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "marker").exists():
            assert proc.poll() is None, f"the run ended before the sync: {proc.stdout.read()[-2000:]}"
            assert time.monotonic() < deadline, "no weight sync of step 3 within 4 minutes"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert (out / "checkpoint-2" / "r1kit_rollouts.json").is_file() and not (out / "checkpoint-4").exists()
    twin = tmp_path / "twin"
    shutil.copytree(out, twin, ignore=shutil.ignore_patterns("_r1kit.lock"))
    losses = []
    for folder in (out, twin):  # resumed in this process: only the kill needs a process of its own
        pipeline(*parse_args(["--config", str(write_recipe(tmp_path / folder.name, **tiny_recipe(
            tiny_model_dir, math_jsonl, folder, max_steps=5, save_steps=2, async_rollouts=True,
            training_pass="dense")))]))
        losses.append(logged(folder, "loss"))
        steps = [step for step, _ in trained_prompts(folder)]
        assert sorted(set(steps)) == [1, 2, 3, 4, 5] and steps == sorted(steps)  # each step once, in order
        totals = json.loads((folder / "rollouts.json").read_text())["totals"]
        # the batch read ahead at the save travels with the checkpoint: kept, not generated again
        assert totals["batches_kept_on_resume"] == 1 and totals["dropped_on_resume"] == 0
    assert losses[0] == losses[1] and len(losses[0]) == 5


@pytest.mark.slow
def test_a_generator_that_keeps_failing_stops_the_run_with_exit_75_and_it_resumes(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=2,
                                                  async_rollouts=True))
    failed = launch(tmp_path, recipe, fault="fail:4")  # jobs 1-3 are steps 1-3 (read ahead); from step 4 on, failures
    output, _ = failed.communicate(timeout=300)
    assert failed.returncode == 75, output[-3000:]
    assert "Generation failed at step 3 of 4: the generator failed 3 times in a row" in output
    assert "resumes from" in output and "checkpoint-2" in output
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "interrupted" and record["reason"] == "generation failed"
    assert (out / "checkpoint-2" / "model.safetensors").is_file() and not (out / "checkpoint-4").exists()
    pipeline(*parse_args(["--config", str(recipe)]))  # the same recipe, resumed in this process
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    assert [s["from_step"] for s in json.loads((out / "r1kit_run.json").read_text())["segments"]] == [0, 2]


@pytest.mark.parametrize("keys, named", [
    ({"weight_sync_steps": 2, "max_staleness": 1}, ["weight_sync_steps", "max_staleness"]),
    ({"vllm_importance_sampling_correction": False}, ["vllm_importance_sampling_correction"]),
    ({"use_transformers_continuous_batching": True}, ["use_transformers_continuous_batching"]),
    ({"loss_type": "vespo", "vllm_importance_sampling_mode": "sequence_mask"}, ["vespo", "sequence_mask"]),
    ({"max_staleness": -1}, ["max_staleness"]),
    # a generation batch over 4 optimizer steps: each batch read ahead would be 4 steps old, every one dropped
    ({"steps_per_generation": 4, "max_staleness": 1}, ["4 optimizer steps", "max_staleness: 4"]),
    ({"num_iterations": 2, "max_staleness": 1, "per_device_train_batch_size": 8}, ["2 optimizer steps",
                                                                                   "max_staleness: 2"]),
])
def test_combinations_async_cannot_run_are_refused_in_one_line(tmp_path, math_jsonl, keys, named):
    model = tmp_path / "not-loaded"
    model.mkdir()
    (model / "config.json").write_text("{}")
    recipe = tiny_recipe(model, math_jsonl, tmp_path / "out", async_rollouts=True, **keys)
    with raises_naming("async_rollouts" if keys.get("max_staleness", 0) >= 0 else "max_staleness", *named):
        parse_args(["--config", str(write_recipe(tmp_path, **recipe))])


def test_async_weighs_per_token_unless_the_recipe_chooses(tmp_path, math_jsonl):
    model = tmp_path / "not-loaded"
    model.mkdir()
    (model / "config.json").write_text("{}")
    recipe = write_recipe(tmp_path, **tiny_recipe(model, math_jsonl, tmp_path / "out", async_rollouts=True))
    assert parse_args(["--config", str(recipe)])[1].vllm_importance_sampling_mode == "token_truncate"
    chosen = parse_args(["--config", str(recipe), "--vllm_importance_sampling_mode", "sequence_mask"])[1]
    assert chosen.vllm_importance_sampling_mode == "sequence_mask"
    synchronous = parse_args(["--config", str(recipe), "--async_rollouts", "false"])[1]
    assert synchronous.vllm_importance_sampling_mode == "sequence_mask"  # TRL's default, untouched
