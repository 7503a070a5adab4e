"""TRL's defaults that moved under Open-R1's recipes are named when a recipe leaves them unset; `defaults: open-r1`
applies Open-R1's; a vLLM server address means server mode."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from r1kit.config.compat import OPEN_R1_DEFAULTS
from r1kit.config.recipe import parse_args
from r1kit.errors import ConfigError, ConfigWarning
from tests.helpers import raises_naming, write_recipe

ROOT = Path(__file__).resolve().parents[1]
BASE = {"model_name_or_path": "r1kit:tiny-random", "dataset_name": "r1kit:addition", "reward_funcs": ["accuracy"],
        "num_generations": 4, "per_device_train_batch_size": 8}


def parse(tmp_path, argv=(), **keys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, training_args, _ = parse_args(["--config", str(write_recipe(tmp_path, **BASE, **keys)), *argv])
    notes = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "Open-R1 trained" in str(w.message)]
    return training_args, notes


def test_unset_moved_defaults_are_named_once_with_both_values(tmp_path):
    args, notes = parse(tmp_path, beta=0.0)
    assert len(notes) == 1
    assert "loss_type: Open-R1 trained with 'bnpo', now 'dapo'" in notes[0]
    assert "max_completion_length: Open-R1 trained with 256, now 512" in notes[0]
    assert "beta" not in notes[0]  # set by the recipe: its choice
    assert "vllm_mode" not in notes[0] and "log_unique_prompts" not in notes[0]  # no vLLM, no W&B: they do not matter
    assert args.beta == 0.0 and args.loss_type == "dapo"


def test_defaults_open_r1_applies_open_r1s_values_to_unset_fields(tmp_path):
    args, notes = parse(tmp_path, defaults="open-r1", max_completion_length=64)
    assert notes == []
    assert (args.beta, args.loss_type, args.max_completion_length) == (0.04, "bnpo", 64)
    assert args.vllm_mode == OPEN_R1_DEFAULTS["vllm_mode"] and args.log_unique_prompts is True
    args, notes = parse(tmp_path, ["--defaults", "trl"])
    assert notes == [] and (args.beta, args.loss_type) == (0.0, "dapo")
    with pytest.raises(ConfigError, match="defaults"):
        parse(tmp_path, defaults="open-r2")


def test_a_vllm_server_address_means_server_mode(tmp_path):
    args, _ = parse(tmp_path, ["--vllm_server_host", "10.1.2.3"])
    assert args.vllm_mode == "server"
    args, _ = parse(tmp_path, vllm_server_base_url="http://node7:8000")
    assert args.vllm_mode == "server"
    with raises_naming("vllm_mode", "colocate", "vllm_server_host"):
        parse(tmp_path, ["--vllm_server_host", "10.1.2.3"], vllm_mode="colocate")


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*/grpo*.yaml")), ids=lambda p: p.parent.name + "/" + p.name)
def test_r1kits_own_recipes_set_every_moved_default(recipe, monkeypatch):
    from tests.test_recipes import launch_world_size

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_args(["--config", str(recipe)], world_size=launch_world_size(recipe))
    assert not [w for w in caught if "Open-R1 trained" in str(w.message)]
