"""Every key a recipe takes, without TRL: the catalogue `keys.json` beside this file, generated from the schema
(`r1kit.config.recipe.key_catalogue`; tests/test_keys.py fails when it is stale), read by

- `r1kit keys [grpo|sft] [WORD]`: every key with its type, default and one line;
- `r1kit grpo -h` / `r1kit sft -h`: the usage line, the ten keys people change most, and where the rest are;
- `precheck`: what a training command can check before it imports TRL (30-50 s on a loaded machine): its own flags,
  the recipe file (found, UTF-8, YAML, its `env:` block), unknown keys in the file and on the command line, values
  of number, true/false and closed-choice keys, a dataset or model path that does not exist, and reward names. The
  full parser checks all of it again, and more, once TRL is loaded.

TrainingArguments' and TRL's fields come from the installed transformers and TRL, so the catalogue records their
versions: with others installed, unknown keys are left to the full parser (a key the catalogue lacks may exist).
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
from importlib import metadata
from pathlib import Path

from r1kit.config.command import (
    DEFAULT_RECIPE,
    check_choice,
    env_block,
    load_recipe,
    split_command_line,
    unknown_key_error,
)
from r1kit.config.compat import KEY_MIGRATIONS
from r1kit.console import show
from r1kit.errors import ConfigError
from r1kit.hub import DATA_SUFFIXES, MODEL_SUFFIXES, looks_local, relative_to_cwd
from r1kit.launching import launch
from r1kit.rewards import check_reward_names
from r1kit.state import checkpoints

CATALOGUE_FILE = Path(__file__).with_name("keys.json")
RECIPE_ONLY_KEYS = ("env", "defaults")  # a recipe file's own keys, which no dataclass has
COMMON_KEYS = {  # the keys people change most, in the order a recipe is usually read
    "grpo": ("model_name_or_path", "dataset_name", "reward_funcs", "output_dir", "max_steps", "learning_rate",
             "num_generations", "per_device_train_batch_size", "max_completion_length", "use_peft"),
    "sft": ("model_name_or_path", "dataset_name", "output_dir", "num_train_epochs", "max_steps", "learning_rate",
            "per_device_train_batch_size", "gradient_accumulation_steps", "max_length", "use_peft"),
}
SUMMARY = {
    "grpo": "Train with GRPO from a YAML recipe (no --config: the embedded demo recipe, recipes/demo/grpo.yaml).",
    "sft": "Supervised fine-tuning (distillation, cold start) from a YAML recipe.",
}


@functools.cache
def catalogue() -> dict:
    """keys.json: {"versions": {package: version}, "commands": {command: [{name, type, default, help}, ...]}}."""
    return json.loads(CATALOGUE_FILE.read_text())


def keys(command: str) -> list[dict]:
    """The catalogue's keys of `command`, in the schema's order."""
    return catalogue()["commands"][command]


def installed_versions() -> dict[str, str]:
    """The versions of the packages whose fields the catalogue lists, as installed here."""
    out = {}
    for package in catalogue()["versions"]:
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def catalogue_applies() -> bool:
    """Whether the catalogue was generated against the transformers and TRL installed here."""
    return installed_versions() == catalogue()["versions"]


# --------------------------------------------------------------------------------------------------------------------
# The checks that need no TRL
# --------------------------------------------------------------------------------------------------------------------
def precheck(command: str, argv: list[str]) -> bool:
    """Checks what `r1kit COMMAND ARGV` can check without TRL (raises `ConfigError`, one line); returns True when it
    answered the command itself (`-h`: the usage printed)."""
    _, argv = launch.world_size(argv)  # --world-size N without --dry-run: the launch's, not the recipe's
    line = split_command_line(argv, DEFAULT_RECIPE if command == "grpo" else None)
    if line.help:
        show(usage(command))
        return True
    known = {k["name"] for k in keys(command)} if catalogue_applies() else None
    config = load_recipe(line.config) if line.config is not None else {}
    env_block(config)
    if known is not None:
        for key in config:
            if key not in known and key not in KEY_MIGRATIONS and key not in RECIPE_ONLY_KEYS:
                raise unknown_key_error(str(key), known, f"in {line.config}")
        for key in option_names(line.overrides):
            if key not in known and key not in KEY_MIGRATIONS:
                raise unknown_key_error(key, known, "on the command line")
    if known is not None:
        by_name = {k["name"]: k for k in keys(command)}
        for key, value in config.items():
            if key in by_name:
                check_value(key, value, by_name[key], f" in {line.config}")
        for key, value in option_values(line.overrides):
            if key in by_name:
                check_value(key, value, by_name[key], " on the command line")
    if command == "grpo":
        check_reward_names(reward_names(config.get("reward_funcs"), line.overrides))
    check_paths(config, line.overrides)
    return False


SCALARS = {"int": int, "float": float, "bool": bool}
TRUE_FALSE = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def check_value(key: str, value, entry: dict, where: str) -> None:
    """A value of a whole-number, number or true/false key, or of one with a closed set of values, checked as the full
    parser would (a type the catalogue does not spell simply is left to it). `value` is YAML's, or the command
    line's text."""
    members = [m.strip() for m in entry["type"].split("|")]
    if value is None or ("None" in members and value in ("null", "~")):
        return
    choices = entry.get("choices")
    if choices and not isinstance(value, (list, dict)):
        if isinstance(value, bool) and ("yes" if value else "no") in choices:
            return  # YAML's `no` (save_strategy: no), which the parser reads back as the choice
        check_choice(key, str(value), choices)
        return
    base = [m for m in members if m != "None"]
    if len(base) == 1 and base[0] in SCALARS:
        _check_scalar(key, value, SCALARS[base[0]], where)


def _check_scalar(key: str, value, kind: type, where: str) -> None:
    if kind is bool:
        if not isinstance(value, bool) and str(value).lower() not in TRUE_FALSE:
            raise ConfigError(f"{key}{where}: invalid true/false value {value!r}")
        return
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise ConfigError(f"{key}{where} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}{where} must be a number, got {value!r}") from None
    if kind is int and number != int(number):
        raise ConfigError(f"{key}{where} must be a whole number, got {value!r}")


def option_values(overrides: list[str]) -> list[tuple[str, str]]:
    """(key, value) of the `--key value` / `--key=value` overrides that give one value."""
    out = []
    for i, token in enumerate(overrides):
        if not token.startswith("--"):
            continue
        name, eq, value = token[2:].partition("=")
        values = [value] if eq else _values_after(overrides, i)
        if len(values) == 1:
            out.append((name.replace("-", "_"), values[0]))
    return out


def check_paths(config: dict, overrides: list[str]) -> None:
    """Every dataset, mixture member, model and checkpoint the recipe names as a path (./, ../, /, ~, more than one
    slash, a data or model file's extension) that does not exist: said now, in a second, before the imports the
    pre-flight needs (which said the same after half a minute)."""
    given = {**config, **dict(option_values(overrides))}
    named = [(key, given.get(key), suffixes) for key, suffixes in PATH_KEYS.items()]
    mixture = given.get("dataset_mixture")
    members = mixture.get("datasets") if isinstance(mixture, dict) else None
    for i, member in enumerate(members if isinstance(members, list) else []):
        if isinstance(member, dict):
            named.append((f"dataset_mixture.datasets[{i}].id", member.get("id"), DATA_SUFFIXES))
    if isinstance(given.get("resume"), str):
        checkpoints.check_resume(given["resume"])  # auto, never or a checkpoint folder that exists
    for key, name, suffixes in named:
        if isinstance(name, str) and name and looks_local(name, suffixes):
            path = Path(os.path.expanduser(name))
            if not path.exists():
                raise ConfigError(f"{key}: {name} does not exist{relative_to_cwd(path)}; fix the path")


PATH_KEYS = {"dataset_name": DATA_SUFFIXES, "model_name_or_path": MODEL_SUFFIXES}


def option_names(overrides: list[str]) -> list[str]:
    """The keys of `--key value` / `--key=value` overrides, as the recipe parser reads them (dashes as underscores)."""
    return [token[2:].partition("=")[0].replace("-", "_") for token in overrides if token.startswith("--")]


def reward_names(from_file, overrides: list[str]) -> list[str]:
    """The reward names a command line and recipe ask for (the command line wins), as the schema reads them: the
    words after `--reward_funcs`; in a file, a list or one comma-separated string."""
    given = from_file.split(",") if isinstance(from_file, str) else from_file
    for i, token in enumerate(overrides):
        name, eq, value = token[2:].partition("=") if token.startswith("--") else ("", "", "")
        if name.replace("-", "_") == "reward_funcs":
            given = [value] if eq else _values_after(overrides, i)
    items = given if isinstance(given, list) else []
    return [item.strip() for item in items if isinstance(item, str) and item.strip()]


def _values_after(tokens: list[str], i: int) -> list[str]:
    values = []
    for token in tokens[i + 1:]:
        if token.startswith("--"):
            break
        values.append(token)
    return values


# --------------------------------------------------------------------------------------------------------------------
# What a person reads: -h and r1kit keys
# --------------------------------------------------------------------------------------------------------------------
def usage(command: str) -> str:
    """`r1kit COMMAND -h`: the usage line, the keys people change most (type, default, one line) and pointers."""
    by_name = {k["name"]: k for k in keys(command)}
    common = "\n".join(key_line(by_name[name]) for name in COMMON_KEYS[command] if name in by_name)
    config = "[--config RECIPE.yaml]" if command == "grpo" else "--config RECIPE.yaml"
    return f"""usage: r1kit {command} {config} [--dry-run] [--world-size N] [--defaults trl|open-r1] [--KEY VALUE ...]

{SUMMARY[command]}
Every recipe key is also a --KEY VALUE flag that overrides the file (--KEY null sets it to None).

The keys people change most:
{common}

More:
  r1kit keys {command}                  all {len(by_name)} keys, with type, default and one line (r1kit keys {command} WORD: those
                                   whose name or line holds WORD)
  r1kit {command} --config R --dry-run  check recipe R (keys, values, paths, local data columns) and print it resolved,
                                   loading no model; with --world-size N, as launched on N processes
  r1kit {command} --world-size N ...    train on N processes of this machine (r1kit launch, for other launchers)
{"  r1kit rewards                    the reward functions reward_funcs can name, and the columns each reads" + chr(10)
 if command == "grpo" else ""}  recipes/                         example recipes; the launch command is in each one's header
Exit codes: 0 done, 75 interrupted (the same command resumes), 3 stopped by a tripwire, 2 a recipe error, 1 a bug."""


def key_line(key: dict, width: int = 30) -> str:
    """One key: name, type, default and its line, on one line (the line cut to fit 120 columns)."""
    head = f"  {key['name'].ljust(width)} {key['type'][:22].ljust(22)} {shown(key['default'])[:16].ljust(16)} "
    room = max(20, 120 - len(head))
    return head + textwrap.shorten(key["help"] or "-", room, placeholder="...")


def shown(default) -> str:
    """A default as a recipe would write it: a list comma-separated, a mapping in YAML's flow style."""
    if isinstance(default, list):
        return ",".join(map(str, default)) or "[]"
    if isinstance(default, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in default.items()) + "}"
    return "null" if default is None else str(default)


def keys_table(command: str, word: str | None = None) -> str:
    """`r1kit keys`: every key of `command` (or those whose name or line holds `word`), a line each."""
    chosen = [k for k in keys(command) if not word or word.lower() in (k["name"] + " " + k["help"]).lower()]
    if not chosen:
        raise ConfigError(f"no key of r1kit {command} has {word!r} in its name or line (r1kit keys {command} lists all)")
    header = f"  {'key'.ljust(30)} {'type'.ljust(22)} {'default'.ljust(16)} line"
    note = ""
    if not catalogue_applies():
        versions = ", ".join(f"{p} {v}" for p, v in catalogue()["versions"].items())
        note = (f"\n(listed for {versions}; this machine has other versions, so TRL's and transformers' keys may "
                f"differ: r1kit {command} --dry-run has the last word)")
    return "\n".join([f"r1kit {command}: {len(chosen)} key(s)", header, *map(key_line, chosen)]) + note


def add_parser(subparsers):
    """Adds `keys` to the `r1kit` command."""
    parser = subparsers.add_parser("keys", help="every recipe key with its type, default and one line")
    parser.add_argument("command", nargs="?", default="grpo", choices=tuple(COMMON_KEYS))
    parser.add_argument("word", nargs="?", default=None, help="only the keys whose name or line holds this")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    show(keys_table(args.command, args.word))
    return 0
