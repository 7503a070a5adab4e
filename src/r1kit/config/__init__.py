"""Recipes: the schema (`schema`: every dataclass a recipe fills, with its own rules), the strict parser (`recipe`:
YAML plus command-line overrides into those dataclasses) and Open-R1 compatibility (`compat`: renamed keys, moved
defaults)."""

from r1kit.config.recipe import DEFAULT_RECIPE, GRPO_TYPES, CommandLine, ParsedRecipe, parse_args, parse_recipe
from r1kit.config.schema import (
    DatasetConfig,
    DatasetMixtureConfig,
    GRPOConfig,
    GRPOScriptArguments,
    ModelConfig,
    PassRateArguments,
    SFTConfig,
    SFTScriptArguments,
)

__all__ = [
    "DEFAULT_RECIPE", "GRPO_TYPES", "CommandLine", "DatasetConfig", "DatasetMixtureConfig", "GRPOConfig",
    "GRPOScriptArguments", "ModelConfig", "ParsedRecipe", "PassRateArguments", "SFTConfig", "SFTScriptArguments",
    "parse_args", "parse_recipe",
]
