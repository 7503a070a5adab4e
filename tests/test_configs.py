"""Recipe parsing: strict keys with suggestions, Open-R1 key migrations, CPU fallbacks and cross-field checks."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from r1kit.cli import main as cli_main
from r1kit.config.recipe import parse_args, parse_recipe, split_command_line
from r1kit.config.schema import GRPOScriptArguments
from r1kit.errors import ConfigError, ConfigWarning
from r1kit.run.preflight import check_rules
from tests.helpers import raises_naming, write_recipe

HERE = Path(__file__).parent
BASE = {
    "model_name_or_path": "some/model",
    "dataset_name": "some/dataset",
    "num_generations": 4,
    "per_device_train_batch_size": 8,
    "output_dir": "unused",
    "bf16": False,
}


def parse(tmp_path, *cli, **keys):
    return parse_args(["--config", str(write_recipe(tmp_path, **{**BASE, **keys})), *cli])


def check(tmp_path, *cli, **keys):
    args = parse(tmp_path, *cli, **keys)
    check_rules(*args)
    return args


def test_yaml_and_cli_values_reach_the_three_dataclasses(tmp_path):
    script, training, model = parse(tmp_path, "--learning_rate", "3e-4", lora_r=4, reward_funcs=["accuracy"])
    assert (script.dataset_name, script.reward_funcs) == ("some/dataset", ["accuracy"])
    assert training.learning_rate == 3e-4 and training.resume == "auto"
    assert model.lora_r == 4


def test_cli_overrides_yaml(tmp_path):
    _, training, model = parse(tmp_path, "--lora_r", "6", "--num_generations=2", lora_r=4)
    assert model.lora_r == 6 and training.num_generations == 2


def test_env_block_comes_back_from_the_parse_unapplied(tmp_path, monkeypatch):
    monkeypatch.delenv("R1KIT_TEST_VAR", raising=False)
    path = write_recipe(tmp_path, **BASE, env={"R1KIT_TEST_VAR": 12})
    parsed = parse_recipe(split_command_line(["--config", str(path)]))
    assert parsed.env == {"R1KIT_TEST_VAR": "12"}
    assert "R1KIT_TEST_VAR" not in os.environ  # the command applies it (test_cli), parsing writes nothing


def test_a_recipes_env_block_cannot_change_what_the_launch_set(monkeypatch):
    """accelerate launches FSDP through ACCELERATE_USE_FSDP: a recipe's env: block that turned it off would make the
    run DDP without a word. The launch's variables are the launch's; the same value, or one the launch left unset,
    is applied."""
    from r1kit.config.recipe import apply_env

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "unset")  # (so that monkeypatch puts it back as it was)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    with raises_naming("ACCELERATE_USE_FSDP", "'true'", "'false'"):
        apply_env({"ACCELERATE_USE_FSDP": "false"})
    assert os.environ["ACCELERATE_USE_FSDP"] == "true"
    monkeypatch.setenv("WORLD_SIZE", "2")
    with raises_naming("WORLD_SIZE"):
        apply_env({"WORLD_SIZE": "1"})
    apply_env({"ACCELERATE_USE_FSDP": "true", "ACCELERATE_MIXED_PRECISION": "no"})
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "no"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("num_generation", "num_generations"), ("learnig_rate", "learning_rate"), ("reward_func", "reward_funcs")],
)
def test_unknown_yaml_key_names_the_nearest_valid_key(tmp_path, key, suggestion):
    with raises_naming(key, suggestion):
        parse(tmp_path, **{key: 1})


def test_unknown_cli_flag_names_the_nearest_valid_key(tmp_path):
    with raises_naming("num_generation", "num_generations"):
        parse(tmp_path, "--num_generation", "4")


def test_unknown_key_without_a_near_match_has_no_suggestion(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'zzzzqqqq' in .*recipe.yaml$"):
        parse(tmp_path, zzzzqqqq=1)


def test_cli_exits_non_zero_and_names_the_key(tmp_path, capsys):
    recipe = write_recipe(tmp_path, **{**BASE, "num_generation": 4})
    assert cli_main(["grpo", "--config", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "num_generation" in err and "did you mean 'num_generations'" in err


def test_open_r1_recipe_parses_unchanged_with_one_warning_per_migrated_key(monkeypatch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        script, training, model = parse_args(["--config", str(HERE / "data" / "open_r1_config_demo.yaml")], world_size=8)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    for key in ("torch_dtype", "vllm_device", "max_prompt_length", "overwrite_output_dir", "wandb_log_unique_prompts", "warmup_ratio"):
        assert sum(f"'{key}'" in m for m in messages) == 1, (key, messages)
    assert model.dtype == "bfloat16"
    assert training.log_unique_prompts is True
    assert training.warmup_steps == 0.1
    assert script.reward_funcs == ["accuracy", "format", "tag_count"]


def test_renamed_key_on_the_command_line_is_mapped(tmp_path):
    with pytest.warns(ConfigWarning, match="torch_dtype"):
        _, _, model = parse(tmp_path, "--torch_dtype", "bfloat16")
    assert model.dtype == "bfloat16"
    with pytest.warns(ConfigWarning, match="vllm_device"):
        parse(tmp_path, "--vllm_device", "auto", "--seed", "3")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU fallback")
def test_bf16_without_gpu_becomes_fp32_with_a_warning(tmp_path):
    with pytest.warns(ConfigWarning, match="bf16"):
        _, training, _ = parse(tmp_path, bf16=True)
    assert training.bf16 is False
    _, training, _ = parse(tmp_path, bf16=None)  # TRL's default (bf16 on) would crash here
    assert training.bf16 is False


def test_num_generations_must_divide_the_generation_batch_and_the_error_lists_valid_values(tmp_path):
    with pytest.raises(ConfigError) as err:
        parse(tmp_path, num_generations=3, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    message = str(err.value)
    assert "num_generations (3)" in message and "= 16" in message
    assert "Valid num_generations for this world size: 2, 4, 8, 16" in message


def test_world_size_counts_in_the_generation_batch(tmp_path, monkeypatch):
    keys = {"num_generations": 14, "per_device_train_batch_size": 16, "gradient_accumulation_steps": 4}
    _, training, _ = parse_args(["--config", str(write_recipe(tmp_path, **{**BASE, **keys}))], world_size=7)
    assert training.generation_batch_size == 448
    with raises_naming("num_generations", "8"):
        parse_args(["--config", str(write_recipe(tmp_path, **{**BASE, **keys}))], world_size=8)


def test_reward_weights_need_one_weight_per_reward(tmp_path):
    with raises_naming("reward_weights", "reward_funcs"):
        check(tmp_path, reward_funcs=["accuracy", "format", "tag_count"], reward_weights=[1.0, 0.5])
    check(tmp_path, reward_funcs=["accuracy", "format"], reward_weights=[1.0, 0.5])


def test_unknown_reward_lists_the_valid_names(tmp_path):
    with raises_naming("acuracy", "accuracy", "format"):
        check(tmp_path, reward_funcs=["acuracy"])


def test_cosine_bounds_must_be_ordered_when_cosine_is_selected(tmp_path):
    with raises_naming("cosine_min_value_wrong", "cosine_max_value_correct"):
        check(tmp_path, reward_funcs=["cosine"], cosine_min_value_correct=-2.0)
    check(tmp_path, reward_funcs=["accuracy"], cosine_min_value_correct=-2.0)  # not selected: not checked


def test_positive_repetition_penalty_only_fails_when_selected(tmp_path):
    with raises_naming("repetition_max_penalty"):
        check(tmp_path, reward_funcs=["repetition_penalty"], repetition_max_penalty=0.5)
    check(tmp_path, reward_funcs=["accuracy"], repetition_max_penalty=0.5)


def test_dataset_name_or_mixture_is_required(tmp_path):
    keys = {k: v for k, v in BASE.items() if k != "dataset_name"}
    with raises_naming("dataset_name", "dataset_mixture"):
        parse_args(["--config", str(write_recipe(tmp_path, **keys))])


@pytest.mark.parametrize(
    ("mixture", "message"),
    [
        ([{"id": "a"}], "must be a dictionary with a 'datasets' key"),
        ({"datasets": {"id": "a"}}, "'datasets' must be a list"),
        ({"datasets": [{"id": "a", "columns": ["x"]}, {"id": "b", "columns": ["y"]}]}, "Column names must be consistent"),
        ({"datasets": [{"id": "a", "weight": 1.5}]}, "weight must be in \\[0, 1\\]"),
        ({"datasets": [{"id": "a", "wieght": 0.5}]}, "unknown keys \\['wieght'\\]"),
        ({"datasets": [{"split": "train"}]}, "needs an 'id'"),
        ({"datasets": [{"id": "a"}], "test_split_size": 2}, "test_split_size must be in"),
    ],
)
def test_mixture_validation_messages(mixture, message):
    with pytest.raises(ConfigError, match=message):
        GRPOScriptArguments(dataset_mixture=mixture)


def test_missing_recipe_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="recipe not found"):
        parse_args(["--config", str(tmp_path / "nope.yaml")])


def test_resume_path_must_exist(tmp_path):
    with raises_naming("resume", "/nonexistent"):
        check(tmp_path, resume="/nonexistent")


def test_wandb_settings_are_exported_only_when_reporting_to_wandb(tmp_path, monkeypatch):
    from r1kit.run.pipeline import export_wandb_env

    for name in ("WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_GROUP"):
        monkeypatch.setenv(name, "")  # restored (removed) after the test
    _, training, _ = parse(tmp_path, report_to="none", wandb_project="p")
    export_wandb_env(training)
    assert os.environ["WANDB_PROJECT"] == ""
    _, training, _ = parse(tmp_path, report_to=["wandb"], wandb_entity="team", wandb_project="p", wandb_run_group="g")
    export_wandb_env(training)
    assert (os.environ["WANDB_ENTITY"], os.environ["WANDB_PROJECT"], os.environ["WANDB_RUN_GROUP"]) == ("team", "p", "g")


def test_mapping_fields_parse_from_the_command_line_and_generated_tasks_take_their_options(tmp_path):
    from r1kit.loading.data import get_dataset

    script_args, _, _ = parse(tmp_path, "--dataset_name", "r1kit:addition", "--dataset_options",
                              "{min_digits: 1, max_digits: 2, train_size: 50}")
    assert script_args.dataset_options == {"min_digits": 1, "max_digits": 2, "train_size": 50}
    train = get_dataset(script_args)["train"]
    assert len(train) == 50 and max(max(row["a"], row["b"]) for row in train) <= 99
    assert {len(str(row["a"])) for row in train} == {1, 2}
    with raises_naming("dataset_options"):
        parse(tmp_path, "--dataset_options", "max_digits")
    bad, _, _ = parse(tmp_path, dataset_name="r1kit:addition", dataset_options={"max_digit": 3})
    with raises_naming("max_digit", "max_digits"):
        get_dataset(bad)
    local = tmp_path / "rows.jsonl"
    local.write_text('{"prompt": "1+1=", "solution": "2"}\n')
    other, _, _ = parse(tmp_path, dataset_name=str(local), dataset_options={"max_digits": 3})
    with raises_naming("dataset_options"):
        get_dataset(other)
