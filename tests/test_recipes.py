"""Every recipe in recipes/ parses (as launched on the number of processes its header names), loading no model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from r1kit.config.recipe import parse_args
from r1kit.run.preflight import check_rules

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p for p in (ROOT / "recipes").rglob("*.yaml") if "accelerate_configs" not in p.parts)
ACCELERATE_CONFIGS = sorted((ROOT / "recipes" / "accelerate_configs").glob("*.yaml"))


def launch_world_size(recipe: Path) -> int:
    match = re.search(r"--num_processes[ =](\d+)", recipe.read_text())
    return int(match[1]) if match else 1


def test_there_are_recipes():
    assert len(RECIPES) >= 5 and {p.name for p in ACCELERATE_CONFIGS} == {"ddp.yaml", "zero2.yaml", "zero3.yaml", "fsdp.yaml"}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_recipe_parses_and_passes_the_cross_field_checks(recipe, monkeypatch):
    header = recipe.read_text().splitlines()[0]
    assert header.startswith("#"), "a recipe starts with a comment giving its launch command"
    assert "r1kit" in recipe.read_text().split("\n\n")[0], "the header names the launch command"
    if recipe.name.startswith("sft"):  # an SFT recipe: the same strict parser, the SFT dataclasses
        from r1kit.sft import SFT_TYPES

        script_args, training_args, model_args = parse_args(["--config", str(recipe)], dataclass_types=SFT_TYPES,
                                                            world_size=launch_world_size(recipe))
        assert training_args.resume in ("auto", "never")
        return
    check_rules(*parse_args(["--config", str(recipe)], world_size=launch_world_size(recipe)))
    # async rollouts are one key away in every GRPO recipe (docs/async-rollouts.md)
    parsed = parse_args(["--config", str(recipe), "--async_rollouts", "true"], world_size=launch_world_size(recipe))
    check_rules(*parsed)
    assert parsed[1].async_rollouts and parsed[1].max_staleness >= parsed[1].weight_sync_steps


@pytest.mark.parametrize("config", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_configs_are_valid_for_the_installed_accelerate(config):
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    data = yaml.safe_load(config.read_text())
    cluster = ClusterConfig(**data)  # raises on keys this accelerate version does not know
    assert cluster.distributed_type in set(DistributedType)
    assert cluster.num_processes >= 1
