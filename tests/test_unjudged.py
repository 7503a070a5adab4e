"""Unjudged rows stop a run only where TRL's multi-task rewards would not explain them: a reward that names its rows
(dataset columns) and judges none of them while the batch holds some, or rows some reward names that no reward
judged. A plain function returning None for rows of another kind trains on, as under TRL."""

from __future__ import annotations

import pytest

from r1kit.unjudged import UnjudgedWatch, own_rows, reward_kind
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
