"""A recipe command's line and file, without TRL (so that a mistake in either answers before TRL is imported): r1kit's
own flags (`--config`, `--defaults`, `--dry-run`, `--world-size`, `-h`), the recipe file read within the bounds of
`yaml_limits`, its `env:` block, and the one-line error for a value outside its choices."""

from __future__ import annotations

import argparse
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1kit.config.compat import DEFAULTS_CHOICES
from r1kit.config.yaml_limits import MAX_DOCUMENT_CHARS, load_yaml
from r1kit.credentials import RECIPE_FORBIDDEN_ENV
from r1kit.errors import ConfigError, one_line

DEFAULT_RECIPE = Path(__file__).parent.parent / "recipes" / "demo_grpo.yaml"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str], also: str = "") -> None:
    """Raises a `ConfigError` naming the field, the valid values and the nearest one when `value` is not a choice."""
    if value in choices:
        return
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise ConfigError(
        f"{name}: {value!r} is not valid; use one of {', '.join(map(str, choices))}{' ' + also if also else ''}{hint}"
    )


def unknown_key_error(key: str, known: set[str] | frozenset[str], where: str) -> ConfigError:
    """The one-line error for a key no dataclass of the command has, naming the nearest one."""
    matches = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{matches[0]}'?" if matches else ""
    return ConfigError(f"unknown key '{key}' {where}{hint}")


# --------------------------------------------------------------------------------------------------------------------
# r1kit's own flags
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class CommandLine:
    """A recipe command's line, split: r1kit's own flags, and the rest (the recipe's `--key value` overrides).

    Args:
        config (`str` or `None`): `--config PATH`, else the command's default recipe (None: none).
        defaults (`str` or `None`): `--defaults trl | open-r1`.
        dry_run (`bool`): `--dry-run`: check the recipe, load no model.
        world_size (`int` or `None`): `--world-size N` (with `--dry-run`): check the recipe as launched on N processes.
        help (`bool`): `-h` / `--help`.
        overrides (`list[str]`): everything else, in order.
    """

    config: str | None = None
    defaults: str | None = None
    dry_run: bool = False
    world_size: int | None = None
    help: bool = False
    overrides: list[str] = field(default_factory=list)


class _OwnFlags(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(message)


def split_command_line(argv: list[str], default_config: str | os.PathLike | None = None) -> CommandLine:
    """Takes r1kit's own flags out of `argv`; the rest stay, in order, for the recipe parser."""
    parser = _OwnFlags(add_help=False, allow_abbrev=False)
    parser.add_argument("--config", default=None)
    parser.add_argument("--defaults", default=None)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--world-size", default=None)
    parser.add_argument("-h", "--help", action="store_true")
    own, rest = parser.parse_known_args(argv)
    if own.world_size is not None and (not own.dry_run or not own.world_size.isdigit() or int(own.world_size) < 1):
        raise ConfigError("--world-size N (a positive number) goes with --dry-run")
    if own.defaults is not None:
        check_choice("defaults", own.defaults, DEFAULTS_CHOICES)
    config = own.config if own.config is not None else (str(default_config) if default_config else None)
    return CommandLine(config, own.defaults, own.dry_run, int(own.world_size) if own.world_size else None, own.help,
                       rest)


# --------------------------------------------------------------------------------------------------------------------
# The recipe file
# --------------------------------------------------------------------------------------------------------------------
def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Reads a recipe YAML into a mapping (the `env:` block included), within the bounds of `yaml_limits` (read at
    most one character past them: `--config /dev/zero` is refused, not read for ever)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_DOCUMENT_CHARS + 1)
    except FileNotFoundError:
        raise ConfigError(f"--config: recipe not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"--config: cannot read the recipe {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"--config: recipe {path} is not UTF-8 text ({one_line(e)})") from None
    config = load_yaml(text, f"--config: recipe {path}") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"recipe {path} must contain a YAML mapping of keys to values")
    return config


def env_block(config: dict[str, Any]) -> dict[str, str]:
    """A recipe mapping's `env:` block, as strings (empty without one). Values are strings (a number is taken as its
    text); a list, a mapping, true/false or an empty value is refused: the environment holds text only."""
    env = config.get("env") or {}
    if not isinstance(env, dict):
        raise ConfigError("`env:` in a recipe must be a mapping of variable names to values")
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ConfigError(f"env: {name!r} is not a variable name (letters, digits and _, no digit first)")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"env: {name} takes a string, got {type(value).__name__}; quote it ({name}: '...')")
        if "\0" in str(value):
            raise ConfigError(f"env: {name} holds a NUL character, which no environment variable can")
        if name in RECIPE_FORBIDDEN_ENV:
            raise ConfigError(f"env: {name} is a secret, and a recipe is shared: export it in the shell instead, or "
                              f"name a file that holds it ({RECIPE_FORBIDDEN_ENV[name]})")
        out[name] = str(value)
    return out
