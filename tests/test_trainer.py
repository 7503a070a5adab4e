"""r1kit's trainer refuses values that would train silently wrong: a reward's output is checked on every call (a
finite number or None per completion), and a non-finite gradient norm stops the run before the update."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline
from r1kit.integrity.rewardtap import check_reward_values, checked_reward
from tests.helpers import raises_naming, tiny_recipe, write_recipe


@pytest.mark.parametrize("values, expected", [
    ([1, 0.5, None, True], [1.0, 0.5, None, 1.0]),
    ((0.0, -2.5), [0.0, -2.5]),
    (np.array([0.25, 1.0]), [0.25, 1.0]),
    (torch.tensor([0.5, 0.0]), [0.5, 0.0]),
    ([np.float32(0.5), np.int64(1)], [0.5, 1.0]),
])
def test_numbers_and_none_pass_as_floats(values, expected):
    assert check_reward_values("r", values) == expected


@pytest.mark.parametrize("values, named", [
    ([1.0, float("nan")], ("'r'", "nan", "row 1")),
    ([float("inf"), 0.0], ("'r'", "inf", "row 0")),
    ([0.0, 0.0, -math.inf], ("'r'", "-inf", "row 2")),
    (np.array([0.0, np.nan]), ("'r'", "nan", "row 1")),
    ([1.0, "1.0"], ("'r'", "str", "row 1")),
    ([1.0, [1.0]], ("'r'", "list", "row 1")),
    (0.5, ("'r'", "float", "one score")),
    ("1.0", ("'r'", "str")),
    (None, ("'r'", "NoneType")),
])
def test_non_finite_and_non_numeric_outputs_name_the_reward_and_the_row(values, named):
    with pytest.raises(ValueError) as caught:
        check_reward_values("r", values)
    assert all(word in str(caught.value) for word in named), str(caught.value)


def test_the_check_keeps_a_reward_async_and_its_name():
    async def judged(completions, **kwargs):
        return [float("inf")] * len(completions)

    def plain(completions, **kwargs):
        return [1.0] * len(completions)

    wrapped = checked_reward(judged, "judged")
    assert inspect.iscoroutinefunction(wrapped) and wrapped.__name__ == "judged"
    with pytest.raises(ValueError, match="'judged' returned inf for row 0"):
        asyncio.run(wrapped(completions=["a"]))
    assert checked_reward(plain, "plain")(completions=["a", "b"]) == [1.0, 1.0]


def run(tmp_path: Path, recipe: dict) -> dict:
    return pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


@pytest.mark.slow
def test_a_nan_reward_stops_the_run_naming_the_reward_and_row(tmp_path, tiny_model_dir, math_jsonl):
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out",
                         reward_funcs=["accuracy", "tests.rewards_for_tests:nan_on_row_two"], max_steps=1)
    with pytest.raises(ValueError, match="reward 'nan_on_row_two' returned nan for row 2"):
        run(tmp_path, recipe)


@pytest.mark.slow
def test_a_diverging_run_stops_before_the_update_and_saves_no_non_finite_weights(tmp_path, tiny_model_dir, math_jsonl):
    from safetensors.torch import load_file

    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, learning_rate=1.0e30, max_grad_norm=0.0, max_steps=8,
                         save_steps=1, reward_funcs=["tests.rewards_for_tests:length_variety"])
    with raises_naming("gradient norm", "learning_rate", "step"):
        run(tmp_path, recipe)
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert len(checkpoints) < 8, "the run never diverged: the test proves nothing"
    for checkpoint in checkpoints:
        weights = load_file(str(checkpoint / "model.safetensors"))
        assert all(torch.isfinite(t).all() for t in weights.values()), checkpoint
    assert not (out / "model.safetensors").exists()  # no final model from a diverged run


@pytest.mark.slow
def test_a_reward_that_judges_nothing_stops_the_run_with_its_name_and_warning(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=10,
                         reward_funcs=["tests.rewards_for_tests:length_variety", "tests.rewards_for_tests:judges_nothing"])
    with raises_naming("judges_nothing", "100%", "unjudged_share_limit", "test cases out of reach"):
        run(tmp_path, recipe)
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {1, 2}  # stopped in the second generation batch


@pytest.mark.slow
def test_a_share_of_unjudged_rows_stops_only_below_the_limit_the_recipe_sets(tmp_path, tiny_model_dir, math_jsonl):
    rewards = ["tests.rewards_for_tests:length_variety", "tests.rewards_for_tests:none_on_even_rows"]
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "a", max_steps=2, save_steps=10, reward_funcs=rewards)
    run(tmp_path, recipe)  # half the rows unjudged: the default limit (1.0) lets it train
    strict = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "b", max_steps=2, save_steps=10, reward_funcs=rewards,
                         unjudged_share_limit=0.5)
    with raises_naming("none_on_even_rows", "50%"):
        run(tmp_path, strict)
    never = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "c", max_steps=2, save_steps=10,
                        reward_funcs=["tests.rewards_for_tests:length_variety", "tests.rewards_for_tests:judges_nothing"],
                        unjudged_share_limit=None)
    run(tmp_path, never)  # the recipe allows it explicitly


def test_a_checkpoint_loads_onto_an_indexed_cpu_device():
    """transformers 5.17 resumes a multi-process CPU run's optimizer with map_location cpu:<index>; torch alone
    refuses it ("don't know how to restore data location"), r1kit's trainer module teaches it."""
    import io

    import r1kit.training.trainer  # noqa: F401 - registers the location handler

    buffer = io.BytesIO()
    torch.save({"exp_avg": torch.arange(4.0)}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=torch.device("cpu", 0), weights_only=True)
    assert torch.equal(loaded["exp_avg"], torch.arange(4.0))
