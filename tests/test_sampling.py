"""Dynamic sampling and the pass-rate curriculum (`r1kit.training.trainer`, `r1kit.training.curriculum`): what is dropped never reaches the loss, the
curriculum skips what it should, a resumed run repeats the uninterrupted one, and two ranks stay in step."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from r1kit.config.recipe import parse_args
from r1kit.grpo import setup
from r1kit.run.pipeline import train
from r1kit.training.curriculum import CurriculumRules, PromptPicker, join_pieces, prompt_key
from tests.helpers import raises_naming, tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]
FLAT_REWARD = "tests.rewards_for_tests:flat_or_length"


@pytest.fixture(scope="module")
def flat_jsonl(tmp_path_factory) -> Path:
    """Half the prompts are `flat` (every completion gets 1.0: no signal, and solved); prompt lengths vary, so groups
    from different generation rounds are padded differently."""
    rows = [{"problem": f"{'flat' if i % 2 else 'live'} {i}+{10 ** (i % 5)}=", "flat": bool(i % 2), "solution": "0"}
            for i in range(40)]
    path = tmp_path_factory.mktemp("flat") / "flat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    """A tiny GPT-2: absolute position embeddings, so a token's logits change with the left padding before it."""
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    from r1kit.loading.modeling import build_char_tokenizer

    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    ids = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # TRL scores in train mode
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=1, n_head=2,
                                       bos_token_id=None, **no_dropout, **ids))
    model.generation_config = GenerationConfig(**ids)
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def flat_recipe(model_dir, data, out, **overrides) -> dict:
    keys = dict(reward_funcs=[FLAT_REWARD], dynamic_sampling=True, dynamic_sampling_max_rounds=8, resume="never",
                max_steps=3, save_steps=2)
    keys.update(overrides)
    return tiny_recipe(model_dir, data, out, **keys)


def train_with_loss_spy(tmp_path: Path, recipe: dict) -> tuple[list[tuple[str, int]], object]:
    """Trains `recipe`; returns, for every row that reached the loss, its prompt text and unmasked completion
    tokens, and the trainer."""
    script_args, training_args, model_args = parse_args(["--config", str(write_recipe(tmp_path, **recipe))])
    run = setup(script_args, training_args, model_args)
    trainer = run.trainer
    seen = []
    compute = trainer._compute_loss

    def spy(model, inputs):
        tokenizer = trainer.processing_class
        for ids, mask, completion_mask in zip(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_mask"]):
            seen.append((tokenizer.decode(ids[mask.bool()]), int(completion_mask.sum())))
        return compute(model, inputs)

    trainer._compute_loss = spy
    train(run)
    return seen, trainer


def logs(output_dir: Path) -> list[dict]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [entry for entry in state["log_history"] if "loss" in entry]


# --- the picker ---------------------------------------------------------------------------------------------------
def test_walk_visits_every_prompt_once_per_epoch_and_depends_only_on_the_seed():
    picker = PromptPicker(10, seed=3, rules=CurriculumRules())
    first = [picker.next_index() for _ in range(10)]
    second = [picker.next_index() for _ in range(10)]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new order each epoch
    again = PromptPicker(10, seed=3, rules=CurriculumRules())
    assert [again.next_index() for _ in range(10)] == first
    other = PromptPicker(10, seed=4, rules=CurriculumRules())
    assert [other.next_index() for _ in range(10)] != first


def test_restored_state_makes_the_same_choices():
    rules = CurriculumRules(skip_solved=1, window=(0.1, 0.9), explore=0.3)
    keys = [f"k{i}" for i in range(20)]
    picker = PromptPicker(20, seed=0, rules=rules)
    picker.record(keys, [i / 19 for i in range(20)])
    picker.draw(7, lambda i: keys[i])
    restored = PromptPicker(20, seed=0, rules=rules)
    restored.load_state_dict(json.loads(json.dumps(picker.state_dict())))  # through JSON, as in a checkpoint
    assert restored.draw(15, lambda i: keys[i]) == picker.draw(15, lambda i: keys[i])
    assert restored.replacements(keys, lambda i: keys[i]) == picker.replacements(keys, lambda i: keys[i])


def test_curriculum_rules_skip_solved_and_out_of_window_prompts_but_never_unseen_ones():
    rules = CurriculumRules(skip_solved=2, window=(0.2, 0.8), history=4)
    assert not rules.would_skip([])  # never seen
    assert rules.would_skip([0.5, 1.0, 1.0])  # solved in its last 2 appearances
    assert not rules.would_skip([1.0, 0.5])  # (window: mean 0.75 is inside)
    assert rules.would_skip([0.0, 0.1])  # estimated 0.05: too hard
    assert not rules.would_skip([0.0, 0.5])
    assert not CurriculumRules().active and not CurriculumRules().would_skip([1.0] * 8)


def test_explore_takes_skipped_prompts_at_its_rate_and_a_solved_set_cannot_stall():
    keys = [f"k{i}" for i in range(50)]
    never = PromptPicker(50, seed=0, rules=CurriculumRules(skip_solved=1, explore=0.0))
    never.record(keys[:25], [1.0] * 25)  # the first half is solved
    drawn = never.draw(50, lambda i: keys[i])
    assert all(i >= 25 for i in drawn[:20])
    some = PromptPicker(50, seed=0, rules=CurriculumRules(skip_solved=1, explore=0.5))
    some.record(keys, [1.0] * 50)
    taken = sum(some.accepts(k) for k in keys * 10)
    assert 150 < taken < 350  # about half of 500
    stuck = PromptPicker(50, seed=0, rules=CurriculumRules(skip_solved=1, explore=0.0))
    stuck.record(keys, [1.0] * 50)
    assert len(stuck.draw(5, lambda i: keys[i])) == 5  # gives up refusing, returns


def test_joined_rounds_pad_prompts_left_and_completions_right():
    a = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
         "completion_ids": torch.tensor([[7]]), "completion_mask": torch.tensor([[1]]), "advantages": torch.tensor([1.0])}
    b = {"prompt_ids": torch.tensor([[4]]), "prompt_mask": torch.tensor([[1]]),
         "completion_ids": torch.tensor([[8, 9, 3]]), "completion_mask": torch.tensor([[1, 1, 1]]),
         "advantages": torch.tensor([-1.0])}
    joined = join_pieces([a, b], pad_token_id=0)
    assert joined["prompt_ids"].tolist() == [[5, 6], [0, 4]] and joined["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert joined["completion_ids"].tolist() == [[7, 0, 0], [8, 9, 3]]
    assert joined["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]
    with pytest.raises(ValueError, match="text prompts only"):
        join_pieces([{**a, "pixel_values": torch.zeros(1, 2)}, {**b, "pixel_values": torch.zeros(1, 2)}], 0)


def test_prompt_key_follows_the_prompt_only():
    assert prompt_key({"prompt": "1+1=", "x": 1}) == prompt_key({"prompt": "1+1=", "x": 2})
    assert prompt_key({"prompt": "1+1="}) != prompt_key({"prompt": "1+2="})


# --- training -----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_dropped_groups_never_reach_the_loss(tmp_path, tiny_model_dir, flat_jsonl):
    out = tmp_path / "out"
    seen, _ = train_with_loss_spy(tmp_path, flat_recipe(tiny_model_dir, flat_jsonl, out))
    assert len(seen) == 3 * 8  # the batch keeps its shape: 3 steps x 8 completions
    assert not [prompt for prompt, tokens in seen if "flat" in prompt and tokens]
    entries = logs(out)
    assert sum(e["sampling/zero_std_groups_dropped"] for e in entries) >= 3  # half the prompts are flat
    assert all(e["sampling/generation_rounds"] >= 1 and "sampling/surplus_groups_dropped" in e for e in entries)
    assert all(e["frac_reward_zero_std"] == 0 for e in entries)  # what was trained on, not what was generated
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {row["round"] for row in rows} >= {1, 2}  # every scored completion, dropped ones too, with its round
    from r1kit.report import dropped_share, report

    png, text = report(out)  # r1kit report draws the dropped share and tabulates the sampling figures
    assert png.stat().st_size > 0 and "zero_std_groups_dropped" in text and "generation_rounds" in text
    steps, shares = dropped_share(logs(out))
    assert steps == [1, 2, 3] and all(0 <= share <= 1 for share in shares) and max(shares) > 0


@pytest.mark.slow
def test_when_the_budget_runs_out_the_empty_places_are_masked_and_the_log_says_so(tmp_path, tiny_model_dir,
                                                                                   flat_jsonl, caplog):
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="r1kit"):
        seen, _ = train_with_loss_spy(tmp_path, flat_recipe(tiny_model_dir, flat_jsonl, out, dynamic_sampling_max_rounds=1,
                                                            max_steps=4))
    assert len(seen) == 4 * 8
    assert not [prompt for prompt, tokens in seen if "flat" in prompt and tokens]  # in the batch, out of the loss
    assert any("masked out of the loss" in r.getMessage() for r in caplog.records)
    entries = logs(out)
    assert all(e["sampling/generation_rounds"] == 1 for e in entries)
    assert max(e["frac_reward_zero_std"] for e in entries) > 0


@pytest.mark.slow
def test_joined_batch_log_probabilities_match_the_policy_with_the_new_padding(tmp_path, tiny_gpt2_dir, flat_jsonl):
    # num_iterations 2: TRL keeps the generation-time log-probabilities; on the first pass they equal the policy's.
    out = tmp_path / "out"
    script_args, training_args, model_args = parse_args(
        ["--config", str(write_recipe(tmp_path, **flat_recipe(tiny_gpt2_dir, flat_jsonl, out, num_iterations=2,
                                                                  max_steps=3)))])
    run = setup(script_args, training_args, model_args)
    trainer = run.trainer
    gaps = []
    compute = trainer._compute_loss

    def spy(model, inputs):
        if trainer._step % 2 == 0:  # the first pass over a generation batch: no update since it was generated
            with torch.no_grad():
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                now = trainer._get_per_token_logps_and_entropies(model, ids, mask, inputs["completion_ids"].size(1))[0]
            live = inputs["completion_mask"].bool()
            gaps.append((now - inputs["old_per_token_logps"])[live].abs().max().item())
        return compute(model, inputs)

    trainer._compute_loss = spy
    train(run)
    assert gaps and max(gaps) < 1e-4


@pytest.mark.slow
def test_curriculum_skips_prompts_solved_last_time(tmp_path, tiny_model_dir, flat_jsonl):
    out = tmp_path / "out"
    recipe = flat_recipe(tiny_model_dir, flat_jsonl, out, dynamic_sampling=False, curriculum_reward=FLAT_REWARD,
                         curriculum_skip_solved=1, curriculum_explore=0.0, max_steps=30, save_steps=100)
    train_with_loss_spy(tmp_path, recipe)
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    flat_prompts = [(row["step"], row["prompt"]) for row in rows if row["prompt"].startswith("flat")]
    appearances: dict[str, set[int]] = {}
    for step, prompt in flat_prompts:
        appearances.setdefault(prompt, set()).add(step)
    assert appearances and all(len(steps) == 1 for steps in appearances.values())  # solved once, never again
    # 30 steps x 2 prompts = 60 prompts from 20 flat + 20 live: the second epoch proposes flat prompts again.
    assert any(e.get("sampling/curriculum_replaced", 0) > 0 for e in logs(out))


@pytest.mark.slow
def test_resumed_run_with_the_curriculum_repeats_the_uninterrupted_one(tmp_path, tiny_model_dir, flat_jsonl):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    keys = dict(curriculum_reward=FLAT_REWARD, curriculum_skip_solved=1, curriculum_explore=0.25,
                curriculum_pass_rate_window=[0.0, 0.95], max_steps=6, save_steps=3)
    train_with_loss_spy(tmp_path, flat_recipe(tiny_model_dir, flat_jsonl, full, **keys))
    assert (full / "checkpoint-3" / "r1kit_sampling.json").is_file()
    shutil.copytree(full / "checkpoint-3", resumed / "checkpoint-3")
    train_with_loss_spy(tmp_path, flat_recipe(tiny_model_dir, flat_jsonl, resumed, **{**keys, "resume": "auto"}))

    def sampled(out: Path) -> list[tuple[int, str]]:
        rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
        return [(row["step"], row["prompt"]) for row in rows if row["step"] > 3]

    assert sampled(resumed) == sampled(full) and sampled(full)
    a = {e["step"]: e for e in logs(full)}
    b = {e["step"]: e for e in logs(resumed)}
    for step in (4, 5, 6):
        for key in ("loss", "reward", "sampling/generation_rounds", "sampling/curriculum_replaced"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-7), (step, key)


# --- checks -------------------------------------------------------------------------------------------------------
def test_curriculum_reward_must_be_one_of_the_rewards(tmp_path, tiny_model_dir, flat_jsonl):
    from r1kit.grpo import dry_run

    recipe = flat_recipe(tiny_model_dir, flat_jsonl, tmp_path / "out", curriculum_skip_solved=1)  # reward: accuracy
    with raises_naming("curriculum_reward", "accuracy", "reward_funcs"):
        dry_run(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


@pytest.mark.parametrize("key,value", [("scale_rewards", "batch"), ("multi_objective_aggregation", "normalize_then_sum")])
def test_batch_level_advantages_are_refused_with_dynamic_sampling(tmp_path, tiny_model_dir, flat_jsonl, key, value):
    from r1kit.grpo import dry_run

    recipe = flat_recipe(tiny_model_dir, flat_jsonl, tmp_path / "out", **{key: value})
    with raises_naming("dynamic_sampling", key):
        dry_run(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


@pytest.mark.slow
def test_a_checkpoint_inside_a_generation_block_keeps_the_state_from_before_it(tmp_path, tiny_model_dir, flat_jsonl):
    # num_iterations 2: step 1 generates for steps 1 and 2, and a run resumed at step 1 generates that block again.
    out = tmp_path / "out"
    train_with_loss_spy(tmp_path, flat_recipe(tiny_model_dir, flat_jsonl, out, num_iterations=2, max_steps=2,
                                              save_steps=1, curriculum_reward=FLAT_REWARD, curriculum_skip_solved=1))
    inside = json.loads((out / "checkpoint-1" / "r1kit_sampling.json").read_text())
    boundary = json.loads((out / "checkpoint-2" / "r1kit_sampling.json").read_text())
    assert inside["rates"] == {} and inside["position"] == 0  # as before the first generation
    assert boundary["rates"]  # after it


def test_groups_split_across_processes_are_refused_before_loading(tmp_path, tiny_model_dir, flat_jsonl):
    from r1kit.grpo import dry_run

    recipe = flat_recipe(tiny_model_dir, flat_jsonl, tmp_path / "out", per_device_train_batch_size=2,
                         num_generations=4)
    with raises_naming("per_device_train_batch_size", "num_generations"):
        dry_run(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))], world_size=2))


# --- two processes ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_ranks_stay_in_step(tmp_path, tiny_model_dir, flat_jsonl):
    out, calls = tmp_path / "out", tmp_path / "calls"
    calls.mkdir()
    recipe = flat_recipe(tiny_model_dir, flat_jsonl, out, reward_funcs=["tests.rewards_for_tests:flat_or_length_logged"],
                         curriculum_reward="tests.rewards_for_tests:flat_or_length_logged", curriculum_skip_solved=1,
                         curriculum_explore=0.0, use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                         max_steps=3, save_steps=3)
    path = write_recipe(tmp_path, **recipe)
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "R1KIT_TEST_LOG": str(calls)}
    env.pop("MASTER_PORT", None)
    result = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "r1kit.grpo", "--config", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    rank0 = [json.loads(line) for line in (calls / "rank0.jsonl").read_text().splitlines()]
    rank1 = [json.loads(line) for line in (calls / "rank1.jsonl").read_text().splitlines()]
    assert len(rank0) == len(rank1) >= 3  # the same number of generation rounds on both ranks
    for a, b in zip(rank0, rank1):
        assert len(a) == len(b) == 4 and len(set(a)) == len(set(b)) == 1  # one whole group per rank per round
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    record = json.loads((out / "checkpoint-3" / "r1kit_sampling.json").read_text())["rates"]
    assert {prompt_key({"prompt": [{"role": "user", "content": p[0]}]}) for p in rank0 + rank1} <= set(record)
    entries = logs(out)
    assert all(e["frac_reward_zero_std"] == 0 for e in entries)
