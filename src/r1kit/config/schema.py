"""The recipe's schema: every dataclass a recipe fills, with the rules each can check on its own.

    GRPOScriptArguments, GRPOConfig, ModelConfig          r1kit grpo (and, with PassRateArguments, r1kit pass-rate)
    SFTScriptArguments, SFTConfig, ModelConfig            r1kit sft
    RunFields                                             the fields GRPOConfig and SFTConfig share, held once

A rule that one dataclass can check by itself (a range, a choice, an ordering, a field another field needs) lives in
its `__post_init__`, so it holds however the dataclass is built. Closed sets r1kit owns are `Literal` types (the
parser lists their choices); sets TRL owns are read from TRL (`trl_choices`). Rules that need another object, the
data, the machine or a stage's registry are the pre-flight's (`r1kit.preflight`). Reading YAML and the command line
into these classes is `r1kit.config.recipe`'s job; Open-R1's renamed keys and moved defaults are `r1kit.config.compat`'s.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
import typing
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import trl
import trl.trainer.model_config
from trl import ScriptArguments

from r1kit.config.yaml_limits import load_yaml
from r1kit.contract import ResumeFields
from r1kit.credentials import SealedFields
from r1kit.errors import ConfigError, ConfigWarning
from r1kit.machine import has_cuda, installed
from r1kit.rewards.competitive import IoiProviderName, ScoringMode
from r1kit.rewards.format import RepetitionLanguage, check_repetition_params
from r1kit.rewards.gym import AnswerMode
from r1kit.rewards.math import check_cosine_bounds
from r1kit.rewards.verify import DEFAULT_TIMEOUT
from r1kit.sandbox import ProviderName
from r1kit.second_opinion import KINDS
from r1kit.sharding import apply_launch_defaults
from r1kit.tripwires import parse_tripwires

TRAINING_PASSES = ("auto", "dense", "bucketed", "packed", "packed_flex")  # r1kit.passchoice

# --------------------------------------------------------------------------------------------------------------------
# Checks a dataclass runs on its own fields
# --------------------------------------------------------------------------------------------------------------------
def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str], also: str = "") -> None:
    """Raises a `ConfigError` naming the field, the valid values and the nearest one when `value` is not a choice."""
    if value in choices:
        return
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise ConfigError(
        f"{name}: {value!r} is not valid; use one of {', '.join(map(str, choices))}{' ' + also if also else ''}{hint}"
    )


def check_range(obj: Any, rules: list[tuple[str, str, Any]]) -> None:
    """Checks numeric fields: each rule is (field, comparison, bound), comparisons `>=`, `>` and `<=`; a `None` value
    (meaning "default") passes."""
    compare = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b}
    for name, op, bound in rules:
        value = getattr(obj, name)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        if not compare[op](value, bound):
            raise ConfigError(f"{name} must be {op} {bound}, got {value}")


def check_literal_fields(obj: Any) -> None:
    """Every `Literal`-typed field of `obj` holds one of its choices (the parser checks recipes and flags; this also
    covers a dataclass built in Python)."""
    for name, choices in literal_fields(type(obj)).items():
        if getattr(obj, name, None) is not None:
            check_choice(name, getattr(obj, name), choices)


@functools.cache
def literal_fields(kind: type) -> dict[str, tuple]:
    """The fields of `kind` whose type is a closed set of `Literal` values (None allowed), with their choices; read
    once per class (resolving the type hints of TRL's 200 fields is not free)."""
    fields_ = {}
    for name, hint in typing.get_type_hints(kind).items():
        members = [hint] if typing.get_origin(hint) is Literal else list(typing.get_args(hint))
        members = [m for m in members if m is not type(None)]
        # Only a closed set: a field that also takes free values (transformers' `str | None | Literal[False]`) is not.
        if members and all(typing.get_origin(m) is Literal for m in members):
            fields_[name] = tuple(c for m in members for c in typing.get_args(m))
    return fields_


@functools.cache
def trl_choices(name: str, config: type = trl.GRPOConfig) -> tuple[str, ...]:
    """The values TRL documents for its string field `name` (TRL checks several of them only at the first training
    step): the quoted values that open the bullets under the field in the class docstring, else the quoted values of
    its first sentence. Empty when TRL's docstring no longer says (then TRL's own check is the only one);
    tests/test_trl_internals.py pins what r1kit reads here."""
    doc = inspect.getdoc(config) or ""
    block = re.search(rf"^(\s*){name} \(.*?\):\n(.*?)(?=^\1\S|\Z)", doc, re.S | re.M)
    if block is None:
        return ()
    bullets = re.findall(r"^\s*- (.*?):", block[2], re.M)
    values = [v for bullet in bullets for v in re.findall(r'`"(\w+)"`', bullet)]
    if not values:
        first_sentence = re.split(r"\.\s", " ".join(block[2].split()), maxsplit=1)[0]
        values = re.findall(r'`"(\w+)"`', first_sentence)
    return tuple(dict.fromkeys(values))


def check_trl_choice(obj: Any, name: str, also: str = "") -> None:
    """`obj.<name>` is one of the values TRL's `GRPOConfig` documents for it (no check when TRL no longer says)."""
    choices = trl_choices(name)
    if choices:
        check_choice(name, getattr(obj, name), choices, also)


def check_chat_template(template: Any, field_name: str = "chat_template") -> None:
    """A chat template must be Jinja that compiles (transformers would fail at the first prompt, mid-start)."""
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    if not isinstance(template, str):
        raise ConfigError(f"{field_name} must be a Jinja template string, got {template!r}")
    try:
        jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols]).parse(template)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{field_name}: not a valid Jinja template (line {e.lineno}: {e.message})") from None


def check_generation_batch(args: Any, world_size: int) -> None:
    """Raises a `ConfigError` that lists the valid `num_generations` when the global generation batch of `args` (a
    GRPO config, or the mapping of its fields) launched on `world_size` processes is not made of whole prompt
    groups. TRL checks the same for the processes it sees; this says it in r1kit's words, and for any world size."""
    get = args.get if isinstance(args, dict) else functools.partial(getattr, args)
    per_device, accumulation = get("per_device_train_batch_size"), get("gradient_accumulation_steps")
    num_generations = get("num_generations")
    generation_batch_size, steps_per_generation = get("generation_batch_size"), get("steps_per_generation")
    for name, value in (("num_generations", num_generations), ("per_device_train_batch_size", per_device),
                        ("gradient_accumulation_steps", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int):  # (checked before the dataclass's own ranges)
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if generation_batch_size is not None and steps_per_generation is not None:
        raise ConfigError("'generation_batch_size' and 'steps_per_generation' cannot both be set; keep one of them")
    if generation_batch_size is not None:
        batch, how = generation_batch_size, f"generation_batch_size {generation_batch_size}"
    else:
        steps = steps_per_generation or accumulation
        batch = per_device * world_size * steps
        how = (
            f"per_device_train_batch_size {per_device} x world size {world_size} x "
            f"{'steps_per_generation' if steps_per_generation else 'gradient_accumulation_steps'} {steps}"
        )
    if num_generations < 2:
        raise ConfigError(f"num_generations must be at least 2 (GRPO compares completions of one prompt), got {num_generations}")
    if batch % num_generations:
        valid = [g for g in range(2, batch + 1) if batch % g == 0]
        raise ConfigError(
            f"num_generations ({num_generations}) must divide the global generation batch ({how} = {batch}). "
            f"Valid num_generations for this world size: {', '.join(map(str, valid)) or 'none (batch < 2)'}; "
            "or change per_device_train_batch_size / gradient_accumulation_steps."
        )


# --------------------------------------------------------------------------------------------------------------------
# Dataset mixtures (Open-R1 semantics)
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class DatasetConfig:
    """One member of a dataset mixture.

    Args:
        id (`str`): Hub dataset id, local file (json/jsonl/csv/parquet) or local folder.
        config (`str` or `None`, defaults to `None`): dataset configuration (subset) name.
        split (`str`, defaults to `"train"`): split to load; slicing such as `train[:10]` works.
        columns (`list[str]` or `None`, defaults to `None`): columns to keep.
        weight (`float` or `None`, defaults to `None`): fraction of rows kept after a seeded shuffle.
    """

    id: str
    config: str | None = None
    split: str = "train"
    columns: list[str] | None = None
    weight: float | None = None


@dataclass
class DatasetMixtureConfig:
    """A weighted mixture of datasets.

    Args:
        datasets (`list[DatasetConfig]`): the members.
        seed (`int`, defaults to `0`): seed of the per-member shuffles, the final shuffle and the train/test split.
        test_split_size (`float` or `None`, defaults to `None`): if set, the mixture is split into `train` and `test`.
    """

    datasets: list[DatasetConfig]
    seed: int = 0
    test_split_size: float | None = None


def parse_dataset_mixture(mixture: Any) -> DatasetMixtureConfig:
    """Turns the raw `dataset_mixture` mapping of a recipe into a `DatasetMixtureConfig` (Open-R1's rules)."""
    if not isinstance(mixture, dict) or "datasets" not in mixture:
        raise ConfigError(
            "dataset_mixture must be a dictionary with a 'datasets' key. Expected format: {'datasets': [...], 'seed': int}"
        )
    if not isinstance(mixture["datasets"], list):
        raise ConfigError("'datasets' must be a list of dataset configurations")
    members = []
    for i, entry in enumerate(mixture["datasets"]):
        if not isinstance(entry, dict) or not entry.get("id"):
            raise ConfigError(f"dataset_mixture.datasets[{i}] needs an 'id' (a Hub dataset id or a local path)")
        unknown = set(entry) - {"id", "config", "split", "columns", "weight"}
        if unknown:
            raise ConfigError(
                f"dataset_mixture.datasets[{i}] has unknown keys {sorted(unknown)}; "
                "valid keys: id, config, split, columns, weight"
            )
        weight = entry.get("weight", 1.0)
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))):
            raise ConfigError(f"dataset_mixture.datasets[{i}].weight must be a number in [0, 1], got {weight!r}")
        for key, kind in (("id", str), ("config", str), ("split", str), ("columns", list)):
            if entry.get(key) is not None and not isinstance(entry[key], kind):
                raise ConfigError(
                    f"dataset_mixture.datasets[{i}].{key} must be a {'list of column names' if kind is list else 'string'}, "
                    f"got {entry[key]!r}"
                )
        if weight is not None and not (0.0 <= float(weight) <= 1.0):
            raise ConfigError(f"dataset_mixture.datasets[{i}].weight must be in [0, 1] (fraction of rows kept), got {weight}")
        members.append(
            DatasetConfig(
                id=entry["id"],
                config=entry.get("config"),
                split=entry.get("split", "train"),
                columns=entry.get("columns"),
                weight=weight,
            )
        )
    column_sets = [set(m.columns) for m in members if m.columns is not None]
    if column_sets and any(s != column_sets[0] for s in column_sets):
        raise ConfigError(
            "Column names must be consistent across all dataset configurations in a mixture. "
            f"Found different column sets: {[sorted(s) for s in column_sets]}"
        )
    test_split_size = mixture.get("test_split_size")
    for key, value in (("seed", mixture.get("seed", 0)), ("test_split_size", test_split_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"dataset_mixture.{key} must be a number, got {value!r}")
    if test_split_size is not None and not (0.0 < float(test_split_size) < 1.0):
        raise ConfigError(f"dataset_mixture.test_split_size must be in (0, 1), got {test_split_size}")
    return DatasetMixtureConfig(datasets=members, seed=mixture.get("seed", 0), test_split_size=test_split_size)



@dataclass
class DataFields:
    """`dataset_name` or `dataset_mixture` (Open-R1's rule), shared by the GRPO, SFT and pass-rate recipes: the
    mixture given as a mapping, or as JSON/YAML text on the command line, becomes a `DatasetMixtureConfig`;
    `dataset_options` (a generated dataset's options) are a mapping too, and go with `dataset_name` only."""

    def check_data_fields(self) -> None:
        if self.dataset_name is None and self.dataset_mixture is None:
            raise ConfigError("Either `dataset_name` or `dataset_mixture` must be provided")
        if isinstance(self.dataset_mixture, str):  # given as JSON on the command line
            self.dataset_mixture = load_yaml(self.dataset_mixture, "dataset_mixture")
        if self.dataset_mixture is not None and not isinstance(self.dataset_mixture, DatasetMixtureConfig):
            self.dataset_mixture = parse_dataset_mixture(self.dataset_mixture)
        if isinstance(self.dataset_options, str):  # given as JSON/YAML on the command line
            self.dataset_options = load_yaml(self.dataset_options, "dataset_options")
        if self.dataset_options is not None and not isinstance(self.dataset_options, dict):
            raise ConfigError(f"dataset_options must be a mapping of option: value, got {self.dataset_options!r}")
        if self.dataset_options and self.dataset_mixture is not None:
            raise ConfigError("dataset_options configure dataset_name's generated task, not a dataset_mixture")


# --------------------------------------------------------------------------------------------------------------------
# GRPO: data and rewards
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class GRPOScriptArguments(DataFields, ScriptArguments):
    """Data and reward arguments of a GRPO run (every field Open-R1 has, with its bugs fixed).

    Args:
        dataset_name (`str` or `None`, defaults to `None`): Hub id, local file or folder, or a built-in task
            (`r1kit:addition`). Either this or `dataset_mixture` is required.
        dataset_mixture (`dict` or `None`, defaults to `None`): `{datasets: [{id, config, split, columns, weight}],
            seed, test_split_size}`; turned into a `DatasetMixtureConfig`.
        dataset_prompt_column (`str`, defaults to `"prompt"`): column holding the user message.
        dataset_options (`dict` or `None`, defaults to `None`): options of a generated dataset (`dataset_name` of
            the form `r1kit:<task>`); for `r1kit:addition`: `min_digits`, `max_digits` (each problem's operands have
            a digit count drawn between them; unset: 10 to 999), `train_size`, `test_size`, `seed`.
        reward_funcs (`list[str]`, defaults to `["accuracy", "format", "tag_count"]`): registry names (see
            `r1kit rewards`) or import paths `package.module:function`.
        cosine_min_value_wrong (`float`, defaults to `-1.0`): cosine reward of a wrong answer at length 0 (the most
            penalised case; Open-R1's config default 0.0 inverted this).
        cosine_max_value_wrong (`float`, defaults to `-0.5`): cosine reward of a wrong answer at `cosine_max_len`.
        cosine_min_value_correct (`float`, defaults to `0.5`): cosine reward of a correct answer at `cosine_max_len`.
        cosine_max_value_correct (`float`, defaults to `1.0`): cosine reward of a correct answer at length 0.
        cosine_max_len (`int`, defaults to `1000`): length scale of the cosine reward (tokens when ids are given).
        repetition_n_grams (`int`, defaults to `3`): n of the repetition penalty.
        repetition_max_penalty (`float`, defaults to `-1.0`): most negative repetition penalty; must be <= 0.
        max_completion_len (`int` or `None`, defaults to `None`): soft-overlong limit in tokens; `None` follows the
            trainer's `max_completion_length`.
        soft_punish_cache (`int` or `None`, defaults to `None`): width of the soft-overlong ramp in tokens; `None`
            is a quarter of the limit.
        code_language (`str`, defaults to `"python"`): fence language of `code_format` and the code rewards.
        code_provider (`str`, defaults to `"local"`): sandbox for `code` / `binary_code`.
        code_eval_test_batch_size (`int`, defaults to `1`): tests run at once per sample by `ioi_code` / `cf_code`;
            0 or less runs them all at once (as Open-R1's Codeforces scoring does).
        code_eval_scoring_mode (`str`, defaults to `"weighted_sum"`): `cf_code` scoring.
        parallel_code_exec_per_proc (`int` or `None`, defaults to `None`): sandbox concurrency per process; `None`
            is the number of cores.
        e2b_router_url (`str` or `None`), morph_router_url (`str` or `None`): routers for the remote sandboxes.
        ioi_provider (`str`, defaults to `"local"`): back end of `ioi_code` (`local` or `piston`; Open-R1: piston).
        ioi_test_cases (`str`, defaults to `"open-r1/ioi-test-cases"`): tests of IOI rows without inline `test_cases`:
            a Hub dataset with one config per year, or a local file or folder with the same columns (`problem_id`,
            `test_name`, `test_input`, `test_output`; a folder may hold one file per year, named by the year).
        cf_tests_folder (`str` or `None`, defaults to `$CF_TESTS_FOLDER`): Codeforces generated tests,
            `test_cases_<contest:04d>.parquet` with `problem_id`, `input`, `output`, added to `official_tests`.
        cf_patch_code (`bool`, defaults to `False`): `cf_code` fixes common slips before running (Python imports
            moved in Python 3, missing C++ includes), as Open-R1's `patch_code` option does.
        allow_unsandboxed_code_execution (`bool`, defaults to `False`): where no jail can run, let the `local`
            provider run model-written programs with only resource limits (your user's files, network and processes
            exposed), and reasoning-gym's scorers score answers without the jail (some evaluate answers as code).
            Off, a run with a local code reward or reasoning-gym scoring stops before training and says what to install.
        repetition_language (`str`, defaults to `"en"`): `en` (whitespace words) or `zh` (jieba).
        format_think_prefilled (`bool` or `None`, defaults to `None`): accept completions that start inside the think
            block; `None` turns it on when the chat template's generation prompt ends in `<think>`.
        reward_timeout (`float`, defaults to `5.0`): seconds allowed to verify one math answer.
        reward_workers (`int` or `None`, defaults to `None`): math-verify worker processes (cores, at most 8).
        reasoning_gym_answer (`str`, defaults to `"last_number"`): where the `reasoning_gym` reward (and held-out
            accuracy on reasoning-gym data) reads the answer when a completion has no `<answer>` block:
            `last_number` (the last number for a numeric gold, else the last line) or `reply` (the whole reply, as
            reasoning-gym's scorers expect: a reply that only contains the answer earns their partial credit).
        probe_rewards (`bool`, defaults to `True`): before the model loads (and in `--dry-run` with local data), score
            replies that deserve nothing (empty, the prompt echoed, the format alone, every candidate hedged, the gold
            outside the answer, a huge reply, look-alike digits; for code rewards exit(0), printed outputs, an always-
            equal object, an infinite loop, reading the tests) with every reward, and the gold answer, on a few of the
            dataset's rows (`r1kit.probes`); a probe above its bound stops the run. `false` skips them.
        probe_acknowledged (`list[str]`, defaults to `[]`): `reward:probe` pairs the recipe accepts
            (`tests.my_rewards:contains_gold:hedge`, `accuracy:lookalike`): those probes are reported, not stopped on.
    """

    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub id, local file/folder or built-in task (r1kit:addition)."}
    )
    dataset_mixture: dict[str, Any] | None = field(
        default=None, metadata={"help": "Mixture {datasets: [{id, config, split, columns, weight}], seed, test_split_size}."}
    )
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "Column holding the user message."})
    dataset_options: dict[str, Any] | None = field(
        default=None, metadata={"help": "Options of a generated dataset (r1kit:<task>), e.g. {max_digits: 6}."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy", "format", "tag_count"],
        metadata={"help": "Reward names from `r1kit rewards`, or import paths package.module:function."},
    )
    cosine_min_value_wrong: float = field(default=-1.0, metadata={"help": "Cosine reward, wrong answer, length 0."})
    cosine_max_value_wrong: float = field(default=-0.5, metadata={"help": "Cosine reward, wrong answer, max length."})
    cosine_min_value_correct: float = field(default=0.5, metadata={"help": "Cosine reward, correct answer, max length."})
    cosine_max_value_correct: float = field(default=1.0, metadata={"help": "Cosine reward, correct answer, length 0."})
    cosine_max_len: int = field(default=1000, metadata={"help": "Cosine reward length scale."})
    repetition_n_grams: int = field(default=3, metadata={"help": "n-gram size of the repetition penalty."})
    repetition_max_penalty: float = field(default=-1.0, metadata={"help": "Most negative repetition penalty (<= 0)."})
    max_completion_len: int | None = field(
        default=None, metadata={"help": "Soft-overlong limit in tokens (default: the trainer's max_completion_length)."}
    )
    soft_punish_cache: int | None = field(
        default=None, metadata={"help": "Soft-overlong ramp width in tokens (default: a quarter of the limit)."}
    )
    code_language: str = field(default="python", metadata={"help": "Fence language for code rewards (python, cpp)."})
    code_provider: ProviderName = field(default="local", metadata={"help": "Sandbox: local, e2b, morph, piston."})
    code_eval_test_batch_size: int = field(default=1, metadata={"help": "Tests per batch for ioi_code/cf_code."})
    code_eval_scoring_mode: ScoringMode = field(
        default="weighted_sum", metadata={"help": "cf_code scoring mode."}
    )
    parallel_code_exec_per_proc: int | None = field(
        default=None, metadata={"help": "Sandbox concurrency per process (default: number of cores)."}
    )
    e2b_router_url: str | None = field(default=None, metadata={"help": "E2B router host:port."})
    morph_router_url: str | None = field(default=None, metadata={"help": "Morph router host:port."})
    ioi_provider: IoiProviderName = field(default="local", metadata={"help": "ioi_code back end: local or piston."})
    ioi_test_cases: str = field(
        default="open-r1/ioi-test-cases",
        metadata={"help": "Where ioi_code finds tests: a Hub dataset (one config per year) or a local file/folder."},
    )
    cf_tests_folder: str | None = field(
        default=None,
        metadata={"help": "Folder of Codeforces generated tests (test_cases_<contest>.parquet); default $CF_TESTS_FOLDER."},
    )
    cf_patch_code: bool = field(default=False, metadata={"help": "cf_code: fix common Python-import / C++-include slips."})
    allow_unsandboxed_code_execution: bool = field(
        default=False,
        metadata={"help": "DANGER: where no jail is available, run model-written code (local code rewards, reasoning-gym scorers) without one."},
    )
    repetition_language: RepetitionLanguage = field(default="en", metadata={"help": "Repetition penalty tokenisation: en or zh."})
    format_think_prefilled: bool | None = field(
        default=None,
        metadata={"help": "Accept completions that start inside <think> (default: when the template pre-fills it)."},
    )
    reward_timeout: float = field(default=DEFAULT_TIMEOUT, metadata={"help": "Seconds allowed to verify one math answer."})
    reward_workers: int | None = field(
        default=None, metadata={"help": "Processes verifying math answers (default: number of cores, at most 8)."}
    )
    reasoning_gym_answer: AnswerMode = field(
        default="last_number",
        metadata={"help": "reasoning_gym reward, outside <answer>: last_number or reply (the whole reply)."},
    )
    probe_rewards: bool = field(
        default=True, metadata={"help": "Probe every reward for exploits before training (r1kit probe-rewards)."}
    )
    probe_acknowledged: list[str] = field(
        default_factory=list, metadata={"help": "reward:probe pairs whose probe may score above its bound."}
    )


    def __post_init__(self):
        self.check_data_fields()
        if isinstance(self.reward_funcs, str):
            self.reward_funcs = [name.strip() for name in self.reward_funcs.split(",") if name.strip()]
        if not self.reward_funcs:
            raise ConfigError("reward_funcs is empty: name at least one reward (see `r1kit rewards`)")
        for name in ("dataset_name", "dataset_prompt_column", "code_language"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
        check_literal_fields(self)
        check_range(
            self,
            [
                ("reward_timeout", ">", 0),
                ("reward_workers", ">=", 1),
                ("parallel_code_exec_per_proc", ">=", 1),
                ("max_completion_len", ">=", 1),
                ("soft_punish_cache", ">=", 0),
            ],
        )
        self.check_reward_parameters()

    def check_reward_parameters(self) -> None:
        """The selected rewards' rules on their parameters (each reward module owns its rule)."""
        if "cosine" in self.reward_funcs:
            check_cosine_bounds(self.cosine_min_value_wrong, self.cosine_max_value_wrong,
                                self.cosine_min_value_correct, self.cosine_max_value_correct, self.cosine_max_len)
        if "repetition_penalty" in self.reward_funcs:
            check_repetition_params(self.repetition_n_grams, self.repetition_max_penalty, self.repetition_language)


# --------------------------------------------------------------------------------------------------------------------
# What every training run shares: machine defaults, run fields
# --------------------------------------------------------------------------------------------------------------------
def apply_machine_defaults(args: Any) -> None:
    """r1kit's corrections to TRL's training defaults, made before transformers reads them (GRPO and SFT alike).

    - `bf16`/`fp16` without a GPU become fp32 (with a warning when the recipe asked for them): TRL's default, bf16
      on, cannot even construct on a CPU-only machine.
    - `gradient_checkpointing`, which TRL sets to True by default and Open-R1 recipes use, is deprecated in
      transformers 5 in favour of `activation_checkpointing`: its value moves there, so that every start does not
      print a FutureWarning; `activation_checkpointing`, when set, wins, as in transformers. A transformers without
      `activation_checkpointing` keeps `gradient_checkpointing` as it is.
    - no pinned memory without a GPU: torch can only warn that it has nothing to pin to.
    - on several ranks without a GPU, `use_cpu` / `ddp_backend` such that accelerate forms the group and shards as
      launched (`r1kit.sharding.apply_launch_defaults`; what changed is kept in `r1kit_launch_changes`).
    """
    has_gpu = has_cuda()
    if args.bf16 is None:
        args.bf16 = bool(has_gpu and not args.fp16)
    elif args.bf16 and not has_gpu and not args.use_cpu:
        warnings.warn("bf16: true needs a GPU and none was found; training in fp32 instead.", ConfigWarning, 3)
        args.bf16 = False
    if args.fp16 and not has_gpu and not args.use_cpu:
        warnings.warn("fp16: true needs a GPU and none was found; training in fp32 instead.", ConfigWarning, 3)
        args.fp16 = False
    if hasattr(args, "activation_checkpointing"):
        for old, new in (
            ("gradient_checkpointing", "activation_checkpointing"),
            ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
        ):
            if getattr(args, new) is None:
                setattr(args, new, getattr(args, old))
            setattr(args, old, None)  # transformers mirrors the new name back into the old one
    if not has_gpu:
        args.dataloader_pin_memory = False
    args.r1kit_launch_changes = apply_launch_defaults(args)  # ranks without a GPU: what accelerate needs to shard
    check_deepspeed_field(args.deepspeed)
    check_report_to(args.report_to)


# The package each `report_to` integration needs, where its name is not the integration's (transformers fails only
# when the trainer is built). The integration names themselves are transformers'.
REPORT_TO_PACKAGES = {"azure_ml": "azureml", "flyte": "flytekit", "tensorboard": "tensorboard"}


def report_to_integrations() -> tuple[str, ...]:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return tuple(INTEGRATION_TO_CALLBACK)


def check_report_to(report_to: Any) -> None:
    """Names only: whether each is installed is the pre-flight's question (`preflight.check_report_to_installed`)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for name in names:
        check_choice("report_to", name, ("none", "all", *report_to_integrations()))


def check_deepspeed_field(deepspeed: Any) -> None:
    """transformers reads the `deepspeed` config (and imports DeepSpeed) while the arguments are built: check first."""
    if not deepspeed:
        return
    if isinstance(deepspeed, str) and not deepspeed.lstrip().startswith("{") and not Path(deepspeed).is_file():
        raise ConfigError(f"deepspeed: {deepspeed} does not exist; give the path of a DeepSpeed JSON config")
    if not installed("deepspeed"):
        raise ConfigError(
            "deepspeed: DeepSpeed is not installed: pip install 'r1kit[deepspeed]', or remove `deepspeed` and launch "
            "with recipes/accelerate_configs/ddp.yaml or fsdp.yaml"
        )


@dataclass
class RunFields(ResumeFields, SealedFields):  # (to_dict never writes a sealed secret: r1kit.credentials)
    """The fields r1kit adds to both trainers' configs (`GRPOConfig`, `SFTConfig`), held once.

    Args:
        benchmarks (`list[str]`, defaults to `[]`): benchmarks evaluated on each checkpoint by `evaluate_benchmarks`.
        callbacks (`list[str]`, defaults to `[]`): callback names (see `r1kit.callbacks`).
        chat_template (`str` or `None`, defaults to `None`): Jinja template replacing the tokenizer's (SFT: ChatML
            when the tokenizer has none, as Open-R1's sft.py does).
        system_prompt (`str` or `None`, defaults to `None`): system message prepended to every GRPO prompt and to
            the benchmarks' prompts (SFT training data keeps its own messages).
        hub_model_revision (`str`, defaults to `"main"`): base branch of checkpoint pushes.
        push_to_hub_revision (`bool`, defaults to `False`): refuse to start if the revision already has content.
        overwrite_hub_revision (`bool`, defaults to `False`): allow overwriting an existing revision.
        wandb_entity / wandb_project / wandb_run_group (`str` or `None`): exported as `WANDB_*` variables.
        resume, resume_without_optimizer, resume_changes, resume_after_stop: see `r1kit.contract.ResumeFields`.
        benchmark_num_samples (`int`, defaults to `1`): `evaluate_benchmarks` samples per problem (pass@1 averages).
        benchmark_max_new_tokens (`int` or `None`, defaults to `None`): `evaluate_benchmarks` generation length
            (default: `max_completion_length` for GRPO, 512 for SFT).
        benchmark_launcher (`str`, defaults to `"local"`): `local` runs evaluations as subprocesses, `slurm` submits
            `slurm/evaluate.slurm` with sbatch.
        torch_num_threads (`int` or `None`, defaults to `None`): CPU threads for torch; tiny models run fastest and
            steadiest on 1 (on small VMs, 2 threads can stall).
    """

    benchmarks: list[str] = field(default_factory=list, metadata={"help": "Benchmarks evaluated on each checkpoint."})
    callbacks: list[str] = field(default_factory=list, metadata={"help": "Callbacks to run during training."})
    chat_template: str | None = field(default=None, metadata={"help": "Chat template overriding the tokenizer's."})
    system_prompt: str | None = field(default=None, metadata={"help": "System prompt prepended to every prompt."})
    hub_model_revision: str | None = field(default="main", metadata={"help": "Base branch of checkpoint pushes."})
    push_to_hub_revision: bool = field(default=False, metadata={"help": "Push each checkpoint to its own branch."})
    overwrite_hub_revision: bool = field(default=False, metadata={"help": "Allow overwriting an existing revision."})
    wandb_entity: str | None = field(default=None, metadata={"help": "W&B entity."})
    wandb_project: str | None = field(default=None, metadata={"help": "W&B project."})
    wandb_run_group: str | None = field(default=None, metadata={"help": "W&B run group."})
    benchmark_num_samples: int = field(default=1, metadata={"help": "evaluate_benchmarks: samples per problem."})
    benchmark_max_new_tokens: int | None = field(
        default=None, metadata={"help": "evaluate_benchmarks: new tokens (default: max_completion_length; SFT 512)."}
    )
    benchmark_launcher: Literal["local", "slurm"] = field(
        default="local", metadata={"help": "evaluate_benchmarks: local or slurm."}
    )
    torch_num_threads: int | None = field(
        default=None, metadata={"help": "CPU threads torch uses (default: torch's choice); 1 suits tiny models."}
    )

    def check_run_fields(self) -> None:
        """The shared fields' own rules, and the trainer fields that transformers checks late or never."""
        check_literal_fields(self)
        if self.chat_template is not None:
            check_chat_template(self.chat_template)
        self.check_resume_fields()
        check_range(self, [("benchmark_num_samples", ">=", 1), ("benchmark_max_new_tokens", ">=", 1),
                           ("torch_num_threads", ">=", 1), ("learning_rate", ">=", 0),
                           ("per_device_train_batch_size", ">=", 1), ("gradient_accumulation_steps", ">=", 1),
                           ("warmup_steps", ">=", 0), ("logging_steps", ">", 0), ("save_steps", ">", 0)])
        if self.max_steps == 0 or self.max_steps < -1:
            raise ConfigError(f"max_steps must be a positive number of steps (or -1 to train num_train_epochs), got {self.max_steps}")
        if self.max_steps == -1 and not self.num_train_epochs > 0:
            raise ConfigError(f"num_train_epochs must be > 0 when max_steps is -1, got {self.num_train_epochs}")
        names = list(self.callbacks)
        if "push_to_hub_revision" in names and not self.hub_model_id:
            raise ConfigError("callback push_to_hub_revision needs hub_model_id (a Hub repo id or file:///some/dir)")
        if "evaluate_benchmarks" in names and not self.benchmarks:
            raise ConfigError("callback evaluate_benchmarks needs `benchmarks` (e.g. [addition, humaneval, math_500])")

    def benchmark_generation_length(self) -> int:
        """Tokens `evaluate_benchmarks` generates: `benchmark_max_new_tokens`, else 512 (GRPO: its completion length)."""
        return self.benchmark_max_new_tokens or 512


# --------------------------------------------------------------------------------------------------------------------
# GRPO: the trainer
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class GRPOConfig(RunFields, trl.GRPOConfig):
    """TRL's `GRPOConfig` plus the shared run fields (`RunFields`) and these.

    Args:
        num_completions_to_print (`int`, defaults to `0`): completions printed per logging step.
        heldout_eval_steps (`int`, defaults to `0`): with the `heldout_accuracy` callback, evaluate every N steps
            (0: only before and after training).
        heldout_size (`int`, defaults to `200`): test problems the `heldout_accuracy` callback evaluates.
        compact_progress (`bool`, defaults to `False`): the progress bar shows the latest reward, accuracy and length
            instead of a printed dict per logging step (metrics still reach trainer_state.json and `report_to`).
        log_completions_file (`bool`, defaults to `True`): write every scored completion with its rewards to
            `OUTPUT_DIR/completions.jsonl`.
        bf16 (`bool` or `None`, defaults to `None`): `None` means bf16 where a GPU supports it, fp32 otherwise;
            `true` on a machine without a GPU becomes fp32 with a warning.
        dynamic_sampling (`bool`, defaults to `False`): drop prompt groups whose rewards are all equal (no
            advantage, no gradient) and generate for more prompts until the step's batch holds only groups with
            signal (DAPO's dynamic sampling); see `r1kit.trainer`.
        dynamic_sampling_max_rounds (`int`, defaults to `4`): generation rounds per generation batch, the first
            included; when they run out the batch trains on the groups with signal it has, the empty places masked
            out of the loss.
        curriculum_reward (`str`, defaults to `"accuracy"`): reward whose group mean is a prompt's pass rate, for the
            curriculum (a name in `reward_funcs`).
        curriculum_skip_solved (`int`, defaults to `0`): skip a prompt whose every completion was right in each of
            its last k appearances (0: never skip).
        curriculum_pass_rate_window (`list[float]` or `None`, defaults to `None`): `[low, high]`: prefer prompts
            whose estimated pass rate lies in it; a prompt never seen is always taken.
        curriculum_explore (`float`, defaults to `0.1`): probability that a prompt the curriculum would skip is
            taken anyway, so that its estimate stays current.
        curriculum_history (`int`, defaults to `4`): appearances per prompt the pass-rate estimate averages.
        unjudged_share_limit (`float` or `None`, defaults to `1.0`): a reward that leaves at least this share of a
            generation batch unjudged (None: test cases unreachable, no sandbox, unparseable golds), two batches
            running, stops the run with its name and its latest warnings. 1.0 stops only a reward that judges
            nothing; lower it to be stricter; `None` never stops (the rows still count in the logs).
        trim_padding (`bool`, defaults to `True`): no compute on padding in the loss pass (and in the old and
            reference log-probabilities): each micro-batch drops the columns that are padding in every one of its
            rows and splits its rows into buckets of similar completion length, each padded only to its own
            longest; same log-probabilities, entropies, loss and gradients as TRL's dense pass. Leading padding goes
            only for models that number positions by column (Llama, Mistral, Qwen2/3, GPT-2); a micro-batch with
            images or token types stays dense (said once). See `r1kit.trainpass`.
        shared_prompt_pass (`bool`, defaults to `True`): in the same passes, each distinct prompt of a micro-batch
            is computed once and its completions attend to its keys and values (the prompt's activations get the
            sum of its completions' gradients, as in the dense pass). Needs a model that numbers positions by column
            and takes a key/value cache; it stands down, said once, under gradient checkpointing, with dropout
            active, for MoE auxiliary losses and for multimodal batches.
        training_pass (`str`, defaults to `"auto"`): which exact pass scores the micro-batches. `auto` measures the
            candidates on the device the run is on, per batch shape, in the first steps, and keeps the fastest
            (`r1kit.passchoice`; OUTPUT_DIR/training_pass.json): `dense` (TRL's), `bucketed` (length buckets and the
            shared prompt's key/value cache, `r1kit.trainpass`), `packed` (one row per micro-batch, no padding, each
            prompt once, through an SDPA mask, `r1kit.packing`) and, on CUDA, `packed_flex` (the same through a
            FlexAttention block mask). Naming one takes it where it can run (TRL's dense pass otherwise, said so).
        second_opinion_samples (`int`, defaults to `4`): completions per reward and per training batch judged again
            by an independent path (math: a small number grammar and exact fractions; code: a fresh jail, tests in
            reverse order; reasoning_gym: the scorer in a process of its own), drawn on the main process, weighted
            toward high rewards; logs `second_opinion/<reward>/disagreement` and writes disagreeing rows to
            `OUTPUT_DIR/second_opinion.jsonl`. 0 turns it off. See `r1kit.second_opinion`.
        second_opinion_kinds (`dict[str, str]` or `None`, defaults to `None`): rewards of `reward_funcs` without a
            second opinion of their own (a `module:function`) checked as a kind: `math` (reads `solution`), `code`
            (`verification_info`) or `reasoning_gym` (`reasoning_gym`).
        tripwires (`dict` or `None`, defaults to `None`): per wire (`reward_vs_heldout`, `format_vs_accuracy`,
            `length_blowup`, `length_collapse`, `collapse`, `disagreement`) any of `threshold` (`float`), `window`
            (`int`, steps) and `action` (`warn`, `stop` or `rollback`), over the defaults of
            `r1kit.tripwires.DEFAULT_WIRES` (every wire `warn`). `{}` or `None`: the defaults.
        tripwires_enabled (`bool`, defaults to `True`): measure and log the tripwires at all.
        tripwire_lr_factor (`float`, defaults to `0.5`): each `rollback` continues from its checkpoint with the
            learning rate multiplied by this, in (0, 1].
        tripwire_max_rollbacks (`int`, defaults to `2`): rollbacks allowed in a run; past them `rollback` stops.
    """

    dynamic_sampling: bool = field(
        default=False, metadata={"help": "Drop groups whose rewards are all equal and generate more to fill the batch."}
    )
    dynamic_sampling_max_rounds: int = field(
        default=4, metadata={"help": "Generation rounds per generation batch with dynamic_sampling (first included)."}
    )
    curriculum_reward: str = field(default="accuracy", metadata={"help": "Reward whose group mean is the pass rate."})
    curriculum_skip_solved: int = field(
        default=0, metadata={"help": "Skip prompts solved by every completion in their last k appearances (0: off)."}
    )
    curriculum_pass_rate_window: list[float] | None = field(
        default=None, metadata={"help": "[low, high]: prefer prompts whose estimated pass rate lies in it."}
    )
    curriculum_explore: float = field(
        default=0.1, metadata={"help": "Probability of taking a prompt the curriculum would skip."}
    )
    curriculum_history: int = field(default=4, metadata={"help": "Appearances the pass-rate estimate averages."})
    num_completions_to_print: int | None = field(default=0, metadata={"help": "Completions printed per log step."})
    unjudged_share_limit: float | None = field(
        default=1.0, metadata={"help": "Stop when a reward leaves this share of two generation batches running "
                                       "unjudged (None); null: never stop."}
    )
    trim_padding: bool = field(
        default=True, metadata={"help": "No compute on padding in the loss pass: trim and bucket by length (exact)."}
    )
    shared_prompt_pass: bool = field(
        default=True, metadata={"help": "Compute each distinct prompt of a micro-batch once in the loss pass (exact)."}
    )
    training_pass: str = field(
        default="auto", metadata={"help": "auto (the fastest, measured here) | dense | bucketed | packed | packed_flex."}
    )
    second_opinion_samples: int = field(
        default=4, metadata={"help": "Completions per reward and batch judged again by an independent path (0: off)."}
    )
    second_opinion_kinds: dict[str, str] | None = field(
        default=None, metadata={"help": "Rewards checked as a kind: {'my.mod:fn': math | code | reasoning_gym}."}
    )
    tripwires: dict[str, Any] | None = field(
        default=None, metadata={"help": "Per wire {threshold, window, action: warn | stop | rollback}, over the defaults."}
    )
    tripwires_enabled: bool = field(default=True, metadata={"help": "Measure, log and act on the tripwires."})
    tripwire_lr_factor: float = field(
        default=0.5, metadata={"help": "Learning rate multiplier after each tripwire rollback, in (0, 1]."}
    )
    tripwire_max_rollbacks: int = field(default=2, metadata={"help": "Tripwire rollbacks allowed in a run."})
    heldout_eval_steps: int = field(default=0, metadata={"help": "heldout_accuracy: evaluate every N steps (0: start/end)."})
    heldout_size: int = field(default=200, metadata={"help": "heldout_accuracy: test problems evaluated."})
    log_completions_file: bool = field(default=True, metadata={"help": "Write OUTPUT_DIR/completions.jsonl."})
    compact_progress: bool = field(
        default=False, metadata={"help": "Show the latest reward on the progress bar instead of printing every log."}
    )

    def __post_init__(self):
        apply_machine_defaults(self)
        self.check_run_fields()
        self.check_grpo_fields()
        super().__post_init__()
        self.check_sampling()  # after TRL's: it derives steps_per_generation from generation_batch_size

    def benchmark_generation_length(self) -> int:
        return self.benchmark_max_new_tokens or self.max_completion_length

    @property
    def curriculum_active(self) -> bool:
        """Whether the curriculum replaces any prompt (a skip rule or a pass-rate window is set)."""
        return bool(self.curriculum_skip_solved or self.curriculum_pass_rate_window is not None)

    def check_grpo_fields(self) -> None:
        """TRL's string choices (read from TRL) and the ranges TRL checks late (at the first step) or not at all."""
        for name in ("loss_type", "importance_sampling_level", "vllm_mode", "multi_objective_aggregation"):
            check_trl_choice(self, name)
        if isinstance(self.scale_rewards, str) and self.scale_rewards.lower() in ("true", "false"):
            self.scale_rewards = self.scale_rewards.lower() == "true"  # TRL maps True/False to group/none
        if not isinstance(self.scale_rewards, bool):
            check_trl_choice(self, "scale_rewards", "or true / false")
        check_range(self, [
            ("max_completion_length", ">=", 1), ("num_iterations", ">=", 1), ("temperature", ">", 0),
            ("top_p", ">", 0), ("top_p", "<=", 1), ("top_k", ">=", 0), ("beta", ">=", 0), ("epsilon", ">=", 0),
            ("heldout_size", ">=", 1), ("heldout_eval_steps", ">=", 0), ("num_completions_to_print", ">=", 0),
            ("dynamic_sampling_max_rounds", ">=", 1), ("curriculum_skip_solved", ">=", 0),
            ("curriculum_explore", ">=", 0), ("curriculum_explore", "<=", 1), ("curriculum_history", ">=", 1),
        ])
        self.check_curriculum_window()
        check_choice("training_pass", self.training_pass, TRAINING_PASSES)
        limit = self.unjudged_share_limit
        if limit is not None and not (isinstance(limit, (int, float)) and 0.0 < limit <= 1.0):
            raise ConfigError(f"unjudged_share_limit must be in (0, 1] or null (never stop), got {limit!r}")
        self.check_reward_watch()

    def check_reward_watch(self) -> None:
        """The second opinion's and the tripwires' fields (given as JSON/YAML text on the command line, too)."""
        check_range(self, [("second_opinion_samples", ">=", 0), ("tripwire_max_rollbacks", ">=", 0),
                           ("tripwire_lr_factor", ">", 0), ("tripwire_lr_factor", "<=", 1)])
        for name in ("second_opinion_kinds", "tripwires"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, load_yaml(getattr(self, name), name))
        kinds = self.second_opinion_kinds or {}
        if not isinstance(kinds, dict):
            raise ConfigError(f"second_opinion_kinds must be a mapping of reward: kind, got {kinds!r}")
        for reward, kind in kinds.items():
            check_choice(f"second_opinion_kinds.{reward}", kind, KINDS)
        parse_tripwires(self.tripwires)

    def check_curriculum_window(self) -> None:
        """`curriculum_pass_rate_window` is `[low, high]` with 0 <= low <= high <= 1 (also given as "low,high")."""
        window = self.curriculum_pass_rate_window
        if window is None:
            return
        if isinstance(window, str):
            window = [part for part in window.replace("[", "").replace("]", "").split(",") if part.strip()]
        try:
            low, high = (float(x) for x in window)
        except (TypeError, ValueError):
            raise ConfigError(f"curriculum_pass_rate_window must be [low, high], got {self.curriculum_pass_rate_window!r}") from None
        if not 0 <= low <= high <= 1:
            raise ConfigError(f"curriculum_pass_rate_window must satisfy 0 <= low <= high <= 1, got [{low}, {high}]")
        self.curriculum_pass_rate_window = [low, high]

    def check_sampling(self) -> None:
        """Dynamic sampling and the curriculum work on whole prompt groups per process, and dynamic sampling needs
        advantages that depend on the group alone (they are computed per generation round)."""
        if not (self.dynamic_sampling or self.curriculum_active):
            return
        if self.dynamic_sampling:
            if self.scale_rewards == "batch":
                raise ConfigError("dynamic_sampling needs per-group advantages: scale_rewards 'batch' would scale each "
                                  "generation round by its own batch; use scale_rewards 'group' (default) or 'none'")
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ConfigError("dynamic_sampling needs per-group advantages: multi_objective_aggregation "
                                  "'normalize_then_sum' normalises over each round's batch; use 'sum_then_normalize'")
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        local = self.per_device_train_batch_size * steps
        if local % self.num_generations:
            what = "dynamic_sampling" if self.dynamic_sampling else "the curriculum"
            raise ConfigError(
                f"{what} needs whole prompt groups on each process: per_device_train_batch_size "
                f"{self.per_device_train_batch_size} x steps_per_generation {steps} = {local} is not a multiple "
                f"of num_generations {self.num_generations}"
            )


@dataclass
class ModelConfig(trl.trainer.model_config.ModelConfig):
    """TRL's `ModelConfig` plus a GGUF source.

    Args:
        gguf_file (`str` or `None`, defaults to `None`): a GGUF file inside the `model_name_or_path` folder; the
            model is turned into a trainable float32 copy (cached). A `model_name_or_path` ending in `.gguf` works too.
    """

    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file in the model_name_or_path folder."})

    def __post_init__(self):
        super().__post_init__()
        if self.model_name_or_path is None:
            raise ConfigError("model_name_or_path is required: a Hub id, a local folder or r1kit:tiny-random")


# --------------------------------------------------------------------------------------------------------------------
# SFT
# --------------------------------------------------------------------------------------------------------------------
SFT_BUILTIN_TASK = "r1kit:addition"


@dataclass
class SFTScriptArguments(DataFields, ScriptArguments):
    """Data and model-construction arguments of an SFT run.

    Args:
        dataset_name (`str` or `None`, defaults to `"r1kit:addition"`): Hub id, local file or folder, or the built-in
            task `r1kit:addition` (worked solutions of multi-digit additions). Either this or `dataset_mixture`.
        dataset_mixture (`dict` or `None`, defaults to `None`): Open-R1's `{datasets: [{id, config, split, columns,
            weight}], seed, test_split_size}`.
        dataset_options (`dict` or `None`, defaults to `None`): options of a generated dataset (the built-in
            `r1kit:addition` takes `train_size` instead).
        train_size (`int`, defaults to `20000`): training problems generated for `r1kit:addition`.
        heldout_size (`int`, defaults to `200`): test problems for the accuracy checks (`r1kit:addition`).
        eval_every_steps (`int`, defaults to `25`): steps between accuracy checks (`r1kit:addition`).
        stop_at_accuracy (`float` or `None`, defaults to `None`): stop once held-out accuracy reaches this.
        hidden_size / num_layers / num_heads (`int`): model size when building from scratch (`r1kit:scratch`).
        characters (`str` or `None`, defaults to `None`): vocabulary of a tokenizer built from scratch.
        publish_to (`str` or `None`, defaults to `None`): copy the final model and tokenizer here.
    """

    dataset_name: str | None = field(default=SFT_BUILTIN_TASK, metadata={"help": "Dataset: Hub id, local path or built-in."})
    dataset_mixture: dict[str, Any] | None = field(default=None, metadata={"help": "Open-R1's dataset mixture."})
    dataset_options: dict[str, Any] | None = field(
        default=None, metadata={"help": "Options of a generated dataset (reasoning-gym:<generator>)."}
    )
    train_size: int = field(default=20000, metadata={"help": "Training problems generated (r1kit:addition)."})
    heldout_size: int = field(default=200, metadata={"help": "Held-out problems for accuracy checks (r1kit:addition)."})
    eval_every_steps: int = field(default=25, metadata={"help": "Steps between accuracy checks (r1kit:addition)."})
    stop_at_accuracy: float | None = field(default=None, metadata={"help": "Stop once held-out accuracy reaches this."})
    hidden_size: int = field(default=128, metadata={"help": "Hidden size of a model built from scratch."})
    num_layers: int = field(default=4, metadata={"help": "Layers of a model built from scratch."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads of a model built from scratch."})
    characters: str | None = field(default=None, metadata={"help": "Characters of a tokenizer built from scratch."})
    publish_to: str | None = field(default=None, metadata={"help": "Copy the final model and tokenizer here."})

    def __post_init__(self):
        self.check_data_fields()
        if self.uses_builtin_task and self.dataset_options:
            raise ConfigError("dataset_options: the SFT worked solutions of r1kit:addition take train_size and "
                              "heldout_size instead; remove dataset_options")
        check_range(self, [("train_size", ">=", 1), ("heldout_size", ">=", 1), ("eval_every_steps", ">=", 1),
                           ("stop_at_accuracy", ">=", 0), ("stop_at_accuracy", "<=", 1), ("hidden_size", ">=", 1),
                           ("num_layers", ">=", 1), ("num_heads", ">=", 1)])

    @property
    def uses_builtin_task(self) -> bool:
        return self.dataset_mixture is None and self.dataset_name == SFT_BUILTIN_TASK


@dataclass
class SFTConfig(RunFields, trl.SFTConfig):
    """TRL's `SFTConfig` plus the shared run fields (`RunFields`), with r1kit's machine defaults (fp32 without a GPU,
    `gradient_checkpointing` read as `activation_checkpointing`, no pinned memory on CPU)."""

    def __post_init__(self):
        apply_machine_defaults(self)
        self.check_run_fields()
        super().__post_init__()


# --------------------------------------------------------------------------------------------------------------------
# Pass-rate filtering (a GRPO recipe plus these keys)
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class PassRateArguments:
    """The filtering keys of a pass-rate recipe.

    Args:
        pass_rate_min (`float`, defaults to `0.1`) / pass_rate_max (`float`, defaults to `0.9`): rows whose pass rate
            lies strictly between them are kept.
        dataset_split (`str`, defaults to `"train"`): the split scored.
        dataset_start_index / dataset_end_index (`int` or `None`): score only rows [start, end) of the split.
        output_dataset_name (`str` or `None`, defaults to `None`): Hub dataset the filtered rows are pushed to.
    """

    pass_rate_min: float = field(default=0.1, metadata={"help": "Keep rows with a pass rate above this."})
    pass_rate_max: float = field(default=0.9, metadata={"help": "Keep rows with a pass rate below this."})
    dataset_split: str = field(default="train", metadata={"help": "Split to score."})
    dataset_start_index: int | None = field(default=None, metadata={"help": "First row scored."})
    dataset_end_index: int | None = field(default=None, metadata={"help": "Row after the last one scored."})
    output_dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset for the filtered rows."})

    def __post_init__(self):
        if not 0.0 <= self.pass_rate_min <= self.pass_rate_max <= 1.0:
            raise ConfigError(f"pass_rate_min ({self.pass_rate_min}) and pass_rate_max ({self.pass_rate_max}) must "
                              "satisfy 0 <= pass_rate_min <= pass_rate_max <= 1")
        check_range(self, [("dataset_start_index", ">=", 0), ("dataset_end_index", ">=", 0)])


def field_names(*dataclass_types: type) -> set[str]:
    """Every field name of the given dataclasses (what a recipe may set)."""
    return {f.name for kind in dataclass_types for f in fields(kind)}
