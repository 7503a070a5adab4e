"""Recipes: the schema (`schema`: every dataclass a recipe fills, with its own rules), the strict parser (`recipe`:
YAML plus command-line overrides into those dataclasses) and Open-R1 compatibility (`compat`: renamed keys, moved
defaults).

The names below are imported on first use: `r1kit.config.command` and `r1kit.config.keys` need no TRL, and importing
them must not import TRL through this package (a recipe's mistakes answer before TRL loads)."""

from __future__ import annotations

import importlib

_WHERE = {
    "DEFAULT_RECIPE": "recipe", "GRPO_TYPES": "recipe", "CommandLine": "recipe", "ParsedRecipe": "recipe",
    "parse_args": "recipe", "parse_recipe": "recipe",
    "DatasetConfig": "schema", "DatasetMixtureConfig": "schema", "GRPOConfig": "schema", "GRPOScriptArguments": "schema",
    "ModelConfig": "schema", "PassRateArguments": "schema", "SFTConfig": "schema", "SFTScriptArguments": "schema",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'r1kit.config' has no attribute {name!r}")
    return getattr(importlib.import_module(f"r1kit.config.{_WHERE[name]}"), name)
