"""The `r1kit` command: fast help, reward listing, dry runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from r1kit.cli import main
from r1kit.rewards import REWARD_FUNCS_REGISTRY
from tests.helpers import tiny_recipe, write_recipe


def test_import_r1kit_and_help_import_neither_torch_nor_trl():
    code = (
        "import sys, r1kit, r1kit.cli, r1kit.rewards\n"
        "r1kit.cli.main(['--help']); r1kit.cli.main(['rewards'])\n"
        "heavy = [m for m in ('torch', 'trl', 'transformers', 'math_verify', 'vllm', 'deepspeed') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_rewards_lists_every_reward_with_its_columns(capsys):
    assert main(["rewards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, spec in REWARD_FUNCS_REGISTRY.items():
        line = next(line for line in lines if line.startswith(name + " "))
        for column in spec.columns:
            assert column in line


def test_unknown_command_exits_2(capsys):
    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def config_only_model(folder):
    """A model folder that passes the pre-load path check but could not be loaded: proof that a dry run loads none."""
    model = folder / "config-only-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return model


def test_dry_run_checks_local_columns_without_loading_a_model(tmp_path, math_jsonl, capsys):
    recipe = tiny_recipe(config_only_model(tmp_path), math_jsonl, tmp_path / "out")
    path = write_recipe(tmp_path, **recipe)
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "recipe OK" in out and "dataset_prompt_column: problem" in out

    path = write_recipe(tmp_path, **{**recipe, "reward_funcs": ["code"]})
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 2
    assert "reward 'code' needs column(s) ['verification_info']" in capsys.readouterr().err


def test_dry_run_world_size_option(tmp_path, math_jsonl, capsys, monkeypatch):
    recipe = tiny_recipe(config_only_model(tmp_path), math_jsonl, tmp_path / "out", num_generations=14,
                         per_device_train_batch_size=16)
    path = write_recipe(tmp_path, **recipe)
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 2
    assert "Valid num_generations for this world size: 2, 4, 8, 16" in capsys.readouterr().err
    assert main(["grpo", "--config", str(path), "--dry-run", "--world-size", "7"]) == 0
    assert "WORLD_SIZE" not in os.environ  # the checked world size is an argument, not state left behind


@pytest.mark.slow
def test_module_entry_points_show_help():
    for module in ("r1kit", "r1kit.grpo"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True)
        assert "r1kit" in result.stdout


def test_the_command_applies_the_recipes_env_block(tmp_path, math_jsonl, monkeypatch):
    monkeypatch.delenv("R1KIT_TEST_VAR", raising=False)
    recipe = tiny_recipe(config_only_model(tmp_path), math_jsonl, tmp_path / "out")
    path = write_recipe(tmp_path, **recipe, env={"R1KIT_TEST_VAR": 12})
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 0
    assert os.environ["R1KIT_TEST_VAR"] == "12"  # (parsing alone writes nothing: test_configs)
