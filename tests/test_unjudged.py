"""Unjudged rows stop a run only where TRL's multi-task rewards would not explain them: a reward that names its rows
(dataset columns) and judges none of them while the batch holds some, or rows some reward names that no reward
judged. A plain function returning None for rows of another kind trains on, as under TRL."""

from __future__ import annotations

import pytest

from r1kit.integrity.rewardtap import UnjudgedWatch, own_rows, reward_kind
from tests.helpers import raises_naming, tiny_recipe, write_recipe

MATH, CODE = {"solution": "4", "verification_info": None}, {"solution": None, "verification_info": {"test_cases": [1]}}


def batches(watch: UnjudgedWatch, rows: list[dict], unjudged: list[list[bool]], times: int = 2) -> list:
    own = own_rows(rows, watch.kinds)
    return [watch.check(unjudged, own) for _ in range(times)]


def test_math_and_code_rewards_judging_their_own_rows_never_stop():
    watch = UnjudgedWatch(["accuracy", "code"], [("solution",), ("verification_info",)], 1.0)
    rows = [MATH, MATH, CODE, CODE]
    assert batches(watch, rows, [[False, True], [False, True], [True, False], [True, False]], 5) == [None] * 5
    assert batches(watch, [MATH] * 4, [[False, True]] * 4, 5) == [None] * 5  # no code row at all: nothing to judge


def test_a_reward_that_never_judges_its_own_rows_stops_on_the_second_batch():
    watch = UnjudgedWatch(["accuracy", "code"], [("solution",), ("verification_info",)], 1.0)
    rows = [MATH, CODE]
    first, second = batches(watch, rows, [[False, True], [True, True]])
    assert first is None and "reward 'code' left 100% of its rows unjudged" in second
    watch = UnjudgedWatch(["accuracy", "code"], [("solution",), ("verification_info",)], 1.0)
    assert batches(watch, rows, [[False, True], [True, True]], 1) == [None]
    assert batches(watch, [MATH], [[False, True]], 1) == [None]  # a batch without its rows: counts neither way
    assert "code" in batches(watch, rows, [[False, True], [True, True]], 1)[0]


def test_rows_no_reward_judged_stop_when_a_reward_names_them():
    watch = UnjudgedWatch(["format", "mine"], [(), None], 1.0)  # format judges every row... when it answers
    assert batches(watch, [MATH], [[True, True]])[1] is not None


def test_rewards_that_name_no_rows_are_left_to_trl():
    watch = UnjudgedWatch(["applicable", "not_applicable"], [None, None], 1.0)
    assert not watch.active and batches(watch, [MATH], [[True, True]], 3) == [None] * 3


def test_the_registrys_rewards_name_their_rows(tmp_path):
    from r1kit.config.recipe import parse_args
    from r1kit.rewards import get_reward_funcs

    script, training, _ = parse_args(["--output_dir", str(tmp_path), "--reward_funcs", "accuracy", "format"])
    assert [reward_kind(f) for f in get_reward_funcs(script, training)] == [("solution",), ()]
    assert own_rows([MATH, CODE, {"solution": ""}], [("solution",), ()]) == [[True, True], [False, True],
                                                                            [False, True]]


@pytest.mark.slow
def test_trls_multi_task_rewards_train_to_the_end(tmp_path, tiny_model_dir, math_jsonl):
    """TRL's test_training_multiple_reward_funcs_with_None_output, on r1kit's pipeline: a reward that returns None
    for every row of a batch (rows of another kind) trains on. Before: stopped at the second batch."""
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline

    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=3, save_steps=10,
                         reward_funcs=["tests.rewards_for_tests:length_variety", "tests.rewards_for_tests:not_applicable"])
    pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))
    assert (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_declared_reward_that_never_judges_still_stops(tmp_path, tiny_model_dir, math_jsonl):
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline

    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", max_steps=4, save_steps=10,
                         reward_funcs=["tests.rewards_for_tests:length_variety", "tests.rewards_for_tests:judges_nothing"])
    with raises_naming("judges_nothing", "100%", "unjudged_share_limit"):
        pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


ZEN = ["Beautiful is better than", "Explicit is", "Simple is better", "Complex", "Flat is better than",
       "Sparse is better", "Readability", "Special cases aren't special"]


def applicable_reward_func(completions, **kwargs):
    return [float(len(completion)) for completion in completions]


def non_applicable_reward_func(completions, **kwargs):
    return [None] * len(completions)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["multiple_reward_funcs_with_None_output", "warning_raised_all_rewards_none"])
@pytest.mark.parametrize("trainer_kind", ["trl", "r1kit"])
def test_trls_none_reward_tests_have_trls_outcome_with_r1trainer(tmp_path, tiny_model_dir, caplog, case,
                                                                 trainer_kind):
    """TRL's own tests test_training_multiple_reward_funcs_with_None_output and test_warning_raised_all_rewards_none
    (tests/test_grpo_trainer.py, TRL 1.16), on the tiny local model instead of the Hub's and the same arguments, run
    with TRL's GRPOTrainer and with r1kit's R1Trainer: both train to the end (before: R1Trainer stopped both at the
    second generation batch)."""
    import torch
    import trl
    from datasets import Dataset

    from r1kit.config.schema import GRPOConfig
    from r1kit.training.trainer import R1Trainer

    trainer_class, config_class = (trl.GRPOTrainer, trl.GRPOConfig) if trainer_kind == "trl" else (R1Trainer, GRPOConfig)
    funcs = ([applicable_reward_func, non_applicable_reward_func] if case.startswith("multiple")
             else [non_applicable_reward_func])
    args = config_class(output_dir=str(tmp_path), learning_rate=0.1, per_device_train_batch_size=3, num_generations=3,
                        max_completion_length=8, report_to="none", bf16=False, max_steps=4, save_strategy="no")
    trainer = trainer_class(model=str(tiny_model_dir), reward_funcs=funcs, args=args,
                            train_dataset=Dataset.from_dict({"prompt": ZEN}))
    before = {n: p.clone() for n, p in trainer.model.named_parameters()}
    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None and trainer.state.global_step == 4
    if case.startswith("multiple"):  # TRL's check: every parameter moved
        assert all(not torch.equal(p, trainer.model.get_parameter(n)) for n, p in before.items())
    else:
        assert "All reward functions returned None for the following kwargs:" in caplog.text
