"""Reading a recipe: YAML plus command-line overrides into the schema's dataclasses, strictly.

A recipe is a YAML file whose top-level keys are fields of the command's dataclasses (for `r1kit grpo`:
`GRPOScriptArguments`, `GRPOConfig`, `ModelConfig`), plus an optional `env:` mapping and `defaults: trl | open-r1`.
Command-line flags (`--key value`) override the file. Unlike TRL's parser:

- an unknown key is an error that names the nearest valid key, and a value of the wrong type or outside its choices
  is an error that names the field (argparse checks neither for values that come from a file);
- Open-R1's renamed or dropped keys are mapped with one warning each, and moved defaults are named once
  (`r1kit.config.compat`);
- nothing is written to `os.environ`: the `env:` block comes back in `ParsedRecipe.env` and the command applies it
  (`apply_env`) before the dataclasses are built, since transformers reads some variables while they are.

r1kit's own flags (`--config`, `--defaults`, `--dry-run`, `--world-size`, `-h`) are taken out first by a small
argparse pre-parser (`split_command_line`); the rest are the recipe's keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from trl import TrlParser

from r1kit.config.command import (  # noqa: F401 (CommandLine, env_block, load_recipe: read from here too)
    DEFAULT_RECIPE,
    CommandLine,
    check_choice,
    env_block,
    load_recipe,
    split_command_line,
    unknown_key_error,
)
from r1kit.config.compat import (
    DEFAULTS_CHOICES,
    OPEN_R1_DEFAULTS,
    apply_vllm_server_keys,
    migrate_key,
    needs_migration,
    warn_moved_defaults,
)
from r1kit.config.keys import CATALOGUE_FILE
from r1kit.config.schema import (
    GRPOConfig,
    GRPOScriptArguments,
    ModelConfig,
    SFTConfig,
    SFTScriptArguments,
    check_generation_batch,
    trl_choices,
)
from r1kit.config.yaml_limits import load_yaml
from r1kit.console import shape_warnings
from r1kit.credentials import redact, seal
from r1kit.errors import ConfigError, one_line
from r1kit.launching.sharding import requested, shortfall

GRPO_TYPES = (GRPOScriptArguments, GRPOConfig, ModelConfig)
SFT_TYPES = (SFTScriptArguments, SFTConfig, ModelConfig)
logger = logging.getLogger(__name__)

# Variables that decide which code a process loads: the dynamic linker's, the interpreters' and the shells' start-up
# hooks, and PATH (which executable a bare name runs: bwrap, g++, sbatch).
LOADER_VARIABLES = {"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR",
                    "PYTHONEXECUTABLE", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
                    "BASH_ENV", "ENV", "GCONV_PATH", "NODE_OPTIONS", "PERL5LIB", "PERL5OPT", "RUBYOPT"}
LOADER_PREFIXES = ("LD_", "DYLD_")
APPLIED_LOADER_VARIABLES: list[str] = []  # those the recipe of this process set (apply_env)


# --------------------------------------------------------------------------------------------------------------------
# The recipe file, parsed
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class ParsedRecipe:
    """A recipe turned into its dataclasses.

    Args:
        args (`tuple`): one instance per dataclass type, in the order given.
        env (`dict[str, str]`): the recipe's `env:` block, for the command to apply.
        explicit (`set[str]`): the keys the recipe or the command line set.
    """

    args: tuple
    env: dict[str, str]
    explicit: set[str]


# Variables a launcher sets for its workers: what they shape (processes, ranks, sharding, precision) is the launch's
LAUNCH_VARIABLE_PREFIXES = ("ACCELERATE_", "FSDP_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                            "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_")


def apply_env(env: dict[str, str]) -> None:
    """Exports a recipe's `env:` block (the command does this before it parses the dataclasses). Variables that change
    which code processes load (`LD_PRELOAD`, `PYTHONPATH`, ...) are applied too (a recipe is code: it names reward
    functions to import), but named: in a warning now and in the start-up block (`loader_variables_line`). A variable
    the launch set (`ACCELERATE_USE_FSDP`, `WORLD_SIZE`, ...) is the launch's: a recipe that would change it (FSDP
    silently turned into DDP) is refused in one line."""
    for name, value in env.items():
        launched = os.environ.get(name)
        if name.startswith(LAUNCH_VARIABLE_PREFIXES) and launched is not None and launched != value:
            raise ConfigError(f"env: {name} is set by the launch ({launched!r}) and the recipe would change it to "
                              f"{value!r}, so the run would not be the one launched; drop it from the recipe's env: "
                              "block and choose it at the launch (its accelerate config or flags)")
    os.environ.update(env)
    APPLIED_LOADER_VARIABLES[:] = loader_variables(env)
    if APPLIED_LOADER_VARIABLES:
        logger.warning("The recipe's env: block sets %s, which change(s) the code every process started from here "
                       "loads.", ", ".join(APPLIED_LOADER_VARIABLES))


def loader_variables(env: dict[str, str]) -> list[str]:
    """The names in `env` that change how a process finds or loads code (dynamic linker, interpreters, shells)."""
    return sorted(name for name in env if name in LOADER_VARIABLES or name.startswith(LOADER_PREFIXES))


def loader_variables_line() -> str | None:
    """The start-up block's line naming the loader variables this process's recipe set, or None."""
    if not APPLIED_LOADER_VARIABLES:
        return None
    return (f"  env      the recipe sets {', '.join(APPLIED_LOADER_VARIABLES)}: every process started from here loads "
            "code as they say")


# --------------------------------------------------------------------------------------------------------------------
# The strict parser
# --------------------------------------------------------------------------------------------------------------------
class _StrictParser(TrlParser):
    """TrlParser whose argparse errors (`--learning_rate abc`) become one-line `ConfigError`s naming the field,
    instead of a page of usage and an exit."""

    def error(self, message: str):
        match = re.match(r"argument --([\w-]+)(?:/--[\w-]+)*: (.*)", message, re.S)
        if match:
            message = f"{match[1].replace('-', '_')}: {match[2]}"
        raise ConfigError(message.replace("invalid string_to_bool value", "invalid true/false value"))


def _mapping_from_text(text: str) -> dict:
    """A `dict` field given on the command line, as JSON or YAML flow text: `--dataset_options '{max_digits: 6}'`."""
    try:
        value = load_yaml(text, "a mapping on the command line")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value is not None and not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a mapping such as '{{key: value}}', got {text!r}")
    return value


def _make_parser(dataclass_types: tuple) -> _StrictParser:
    parser = _StrictParser(dataclass_types)
    mappings = {f.name for kind in dataclass_types for f in dataclasses.fields(kind)
                if str(f.type).startswith("dict") and "| str" not in str(f.type)}  # `dict | str` fields parse as text
    for action in parser._actions:
        if action.dest in mappings:  # argparse would call dict("{...}") on the text and fail
            action.type = _mapping_from_text
    return parser


def _normalise_yaml(config: dict[str, Any], known: set[str], seen: set[str], path: str,
                    actions: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        while key is not None and needs_migration(key, known, value):  # a renamed key may itself be dropped
            old, key = key, migrate_key(key, known, seen)
            if old == "dataset_configs" and isinstance(value, list):
                if len(value) != 1:
                    raise ConfigError(f"dataset_configs in {path}: give one config (dataset_config), got {value!r}")
                value = value[0]
        if key is None:
            continue
        if key not in known:
            raise unknown_key_error(key, known, f"in {path}")
        out[key] = _check_yaml_value(key, value, actions[key], path) if key in actions else value
    return out


def _check_yaml_value(key: str, value: Any, action: Any, path: str) -> Any:
    """What argparse does not check in values that come from a recipe (it converts only string defaults, and never
    checks their choices): numbers where numbers go, single values where single values go, valid choices. Returns
    the value, with YAML's `no` (read as false) turned back into the choice "no" (`save_strategy: no`)."""
    if value is None:
        return value
    many = action.nargs in ("+", "*")
    if action.choices and isinstance(value, bool) and ("no" if value is False else "yes") in action.choices:
        return "no" if value is False else "yes"
    for item in value if many and isinstance(value, list) else [value]:
        if isinstance(item, (list, dict)):
            if action.type in (int, float) or action.choices or many:
                raise ConfigError(f"{key} in {path} takes {'single values' if many else 'one value'}, got {value!r}")
            continue  # str-typed fields such as report_to and generation_kwargs take lists and mappings
        if action.type in (int, float) and not isinstance(item, str):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ConfigError(f"{key} in {path} must be a number, got {item!r}")
            if action.type is int and item != int(item):
                raise ConfigError(f"{key} in {path} must be a whole number, got {item!r}")
        if action.choices:
            check_choice(key, item if isinstance(item, str) else str(item), list(action.choices))
    if action.type is int and isinstance(value, float):
        return int(value)
    return value


def _normalise_cli(args: list[str], known: set[str], options: set[str], seen: set[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            out.append(token)
            i += 1
            continue
        name, eq, value = token[2:].partition("=")
        key = name.replace("-", "_")
        if needs_migration(key, known):
            new = migrate_key(key, known, seen)
            if new is None:  # drop the flag and its value
                has_value = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
                i += 2 if has_value else 1
                continue
            token = f"--{new}{eq}{value}"
        elif token.split("=")[0] not in options:
            raise unknown_key_error(name, known, "on the command line")
        out.append(token)
        i += 1
    return out


def _null_overrides(args: list[str], dataclass_types: tuple) -> tuple[list[str], dict[str, None]]:
    """`args` without the `--key null` / `--key=null` pairs, and those keys mapped to None. A key whose field cannot
    be None is refused in one line."""
    fields_ = {f.name: f for kind in dataclass_types for f in dataclasses.fields(kind)}
    out, nulls, i = [], {}, 0
    while i < len(args):
        name, eq, value = args[i][2:].partition("=") if args[i].startswith("--") else ("", "", "")
        if not eq and name and i + 1 < len(args):
            value = args[i + 1]
        key = name.replace("-", "_")
        if key in fields_ and value in ("null", "~"):
            f = fields_[key]
            if f.default is not None and "None" not in str(f.type):
                raise ConfigError(f"--{name} null: {key} cannot be None (it takes {_type_name(f.type)})")
            nulls[key] = None
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    return out, nulls


def _stray_words(args: list[str]) -> list[str]:
    """Tokens that are neither a `--key` nor the value right after one."""
    values = {value for option, value in zip(args, args[1:]) if option.startswith("--") and "=" not in option}
    return [a for a in args if not a.startswith("--") and a not in values]


def _build(dataclass_types: tuple, namespace: argparse.Namespace) -> list:
    """One instance per dataclass from the parsed namespace, as HfArgumentParser builds them. A dataclass's own
    check (r1kit's are `ConfigError`s; TRL's and transformers' are `ValueError`s) becomes a one-line error."""
    values = vars(namespace)
    built = []
    for kind in dataclass_types:
        names = {f.name for f in dataclasses.fields(kind) if f.init}
        try:
            built.append(kind(**{k: v for k, v in values.items() if k in names}))
        except ConfigError:
            raise
        except (ValueError, TypeError) as e:
            raise ConfigError(one_line(e, 10_000)) from e
    return built


def parse_recipe(command: CommandLine, dataclass_types: tuple = GRPO_TYPES, world_size: int | None = None,
                 on_env: Callable[[dict[str, str]], None] | None = None) -> ParsedRecipe:
    """Parses the recipe `command.config` plus `command.overrides` into `dataclass_types`, strictly.

    Raises `ConfigError` for unknown keys, values of the wrong type or outside their range or choices, invalid
    mixtures and batch sizes that cannot hold whole prompt groups. `world_size` is the number of processes the recipe
    is checked for: `--world-size N` of a dry run, else this launch's (`WORLD_SIZE`, 1 without a launcher).
    `on_env(env)` is called with the recipe's `env:` block before any dataclass is built (the command applies it
    there: transformers reads some variables while the training arguments are built); parsing itself writes nothing.
    """
    parser = _make_parser(dataclass_types)
    known = {action.dest for action in parser._actions if action.dest != "help"}
    options = {opt for action in parser._actions for opt in action.option_strings}
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    seen: set[str] = set()
    explicit: set[str] = set()
    env: dict[str, str] = {}
    defaults = command.defaults
    if command.config is not None:
        config = load_recipe(command.config)
        env = env_block(config)
        config.pop("env", None)
        defaults = defaults or config.get("defaults")
        config.pop("defaults", None)
        recipe = _normalise_yaml(config, known, seen, str(command.config), actions)
        explicit |= set(recipe)
        parser.set_defaults_with_config(**recipe)
    args, nulls = _null_overrides(_normalise_cli(command.overrides, known, options, seen), dataclass_types)
    parser.set_defaults(**nulls)  # `--key null`: None, as `key: null` in the file (argparse would pass "null" on)
    explicit |= {token[2:].partition("=")[0].replace("-", "_") for token in args if token.startswith("--")} | set(nulls)
    if defaults is not None:
        check_choice("defaults", defaults, DEFAULTS_CHOICES)
    if defaults == "open-r1":  # the values Open-R1 trained with, for every field the recipe leaves unset
        parser.set_defaults(**{k: v for k, v in OPEN_R1_DEFAULTS.items() if k not in explicit and k in known})
    if on_env is not None:
        on_env(env)
    namespace, rest = parser.parse_known_args(args=args)
    if rest:
        stray = _stray_words(rest) or rest
        recipe_file = next((a for a in stray if a.endswith((".yaml", ".yml"))), None)
        hint = f"; to read a recipe, write --config {recipe_file}" if recipe_file else "; options are --key value"
        raise ConfigError(f"unexpected argument(s) {stray}{hint}")
    launched = int(os.environ.get("WORLD_SIZE") or 1)
    if launched > 1:  # building the arguments joins the process group: a launch that started fewer would wait there
        short = shortfall(requested(namespace))
        if short:
            raise ConfigError(short)
    if GRPOConfig in dataclass_types:
        check_generation_batch(vars(namespace), world_size or launched)
    checked_elsewhere = (GRPOConfig in dataclass_types and world_size not in (None, launched)
                         and namespace.generation_batch_size is None)
    if checked_elsewhere:
        # Checking a recipe for N ranks from one process: TRL's own check computes the generation batch from the
        # processes it sees, so it is given the N-rank batch; the per-process step count is put back afterwards.
        steps = namespace.steps_per_generation or namespace.gradient_accumulation_steps
        namespace.generation_batch_size = namespace.per_device_train_batch_size * world_size * steps
        namespace.steps_per_generation = None
    built = _build(dataclass_types, namespace)
    seal(*built)  # no secret of the recipe, the command line or the environment reaches a file from here on
    training_args = next((a for a in built if isinstance(a, GRPOConfig)), None)
    if training_args is not None:
        if checked_elsewhere:
            training_args.steps_per_generation = steps
            training_args.check_sampling()  # per process: with the real steps, not the N-rank stand-in
        apply_vllm_server_keys(explicit, training_args)
        training_args.settle_async_rollouts(explicit)
        training_args.check_async_span()  # with the per-process steps_per_generation (put back above)
        if defaults is None:
            warn_moved_defaults(explicit, training_args)
    return ParsedRecipe(tuple(built), env, explicit)


def parse_args(argv: list[str], default_config: str | os.PathLike | None = DEFAULT_RECIPE,
               dataclass_types: tuple = GRPO_TYPES, world_size: int | None = None) -> tuple:
    """`parse_recipe` from a plain argument list (`--config`, `--defaults` and overrides): the dataclasses only
    (the `env:` block is not applied; see `apply_env`). For tests, benchmarks and scripts."""
    command = split_command_line(list(argv), default_config)
    return parse_recipe(command, dataclass_types, world_size).args


def run_recipe_command(argv: list[str], help_text: str, dataclass_types: tuple, dry_run: Callable[..., str],
                       run: Callable[..., int], default_config: str | os.PathLike | None = None,
                       needs_config: str | None = None) -> int:
    """The shape every recipe command shares (`r1kit grpo`, `sft`, `pass-rate`): r1kit's own flags out, `--help`,
    the recipe's `env:` applied, the recipe parsed strictly; then `dry_run(*args)` is printed (`--dry-run`) or
    `run(*args)` returns the exit code. `needs_config`: the command's name, when it cannot run without `--config`."""
    command = split_command_line(argv, default_config)
    if command.help:
        print(help_text)
        return 0
    if needs_config and command.config is None:
        raise ConfigError(f"--config: {needs_config} needs a recipe (see {needs_config} --help)")
    shape_warnings()
    parsed = parse_recipe(command, dataclass_types, command.world_size, on_env=apply_env)
    if command.dry_run:
        print(redact(dry_run(*parsed.args)))
        return 0
    return run(*parsed.args)


# --------------------------------------------------------------------------------------------------------------------
# The key catalogue (r1kit.config.keys reads it without TRL)
# --------------------------------------------------------------------------------------------------------------------
def key_catalogue() -> dict:
    """Every key of `r1kit grpo` and `r1kit sft` with its type, default and first sentence of help, read from the
    schema's dataclasses (TRL's and transformers' fields included), and the versions they came from."""
    return {"versions": {p: metadata.version(p) for p in ("transformers", "trl")},
            "commands": {"grpo": _key_entries(GRPO_TYPES), "sft": _key_entries(SFT_TYPES)}}


def write_key_catalogue() -> Path:
    """Writes `key_catalogue()` to r1kit/config/keys.json (after a schema change; tests/test_keys.py says when)."""
    CATALOGUE_FILE.write_text(json.dumps(key_catalogue(), indent=1) + "\n")
    return CATALOGUE_FILE


TRL_CHOICE_KEYS = ("loss_type", "importance_sampling_level", "vllm_mode", "multi_objective_aggregation")  # schema


def _key_entries(dataclass_types: tuple) -> list[dict]:
    entries, seen = [], set()
    choices = _choices(dataclass_types)
    for kind in dataclass_types:
        for f in dataclasses.fields(kind):
            if f.init and f.name not in seen:
                seen.add(f.name)
                entry = {"name": f.name, "type": _type_name(_annotation(kind, f)), "default": _plain_default(f),
                         "help": _first_sentence(f.metadata.get("help", ""))}
                entries.append({**entry, "choices": choices[f.name]} if f.name in choices else entry)
    return entries


def _choices(dataclass_types: tuple) -> dict[str, list[str]]:
    """The closed sets of values the parser and the schema hold keys to: argparse's choices (r1kit's `Literal`s,
    transformers' enums) and TRL's documented values that `GRPOConfig` checks (`trl_choices`)."""
    found = {action.dest: [str(c) for c in action.choices] for action in _make_parser(dataclass_types)._actions
             if action.choices and action.option_strings}
    if GRPOConfig in dataclass_types:
        found.update({name: list(trl_choices(name)) for name in TRL_CHOICE_KEYS if trl_choices(name)})
    return found


def _annotation(kind: type, f: dataclasses.Field) -> Any:
    """A field's type as its class wrote it: HfArgumentParser rewrites `Field.type` in place (`Optional[str]` becomes
    `str`) once any parser has been built, so the catalogue reads the class's own annotation."""
    for klass in kind.__mro__:
        annotations = klass.__dict__.get("__annotations__", {})
        if f.name in annotations:
            return annotations[f.name]
    return f.type


def _type_name(hint: Any) -> str:
    text = hint if isinstance(hint, str) else hint.__name__ if isinstance(hint, type) else str(hint)
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text).replace("NoneType", "None")
    text = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", text)  # transformers.trainer_utils.SaveStrategy: SaveStrategy
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    return f"{optional[1]} | None" if optional else text


def _plain_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    value = getattr(value, "value", value)  # an enum member: its value
    return value if isinstance(value, (str, int, float, bool, type(None), list, dict)) and _json_safe(value) \
        else str(value)


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _first_sentence(text: str) -> str:
    """The help's first sentence: up to the first `.`, `!` or `?` before a space or the end, an abbreviation's dot
    (`e.g.`, `i.e.`, `etc.`, `vs.`) not counted."""
    text = " ".join(str(text).split())
    match = re.match(r"(.+?(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?])(\s|$)", text)
    return match[1] if match else text
