"""Configuration: the three argument dataclasses a recipe fills, and the strict parser that reads them.

A recipe is a YAML file whose top-level keys are fields of `GRPOScriptArguments`, `GRPOConfig` (a `trl.GRPOConfig`
subclass) or TRL's `ModelConfig`, plus an optional `env:` mapping exported to the environment. Command-line flags
override the file. Unlike TRL's parser, an unknown key is an error that names the nearest valid key, and keys that
Open-R1 recipes use but current TRL renamed or dropped are mapped (or ignored) with one warning each. Fields whose
TRL default moved since the TRL Open-R1 pins (`OPEN_R1_DEFAULTS`) are named in one warning when a recipe leaves them
unset; `defaults: open-r1` applies Open-R1's values to all of them, `defaults: trl` accepts today's.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trl
import trl.trainer.model_config
import yaml
from trl import ScriptArguments, TrlParser

from r1kit.errors import ConfigError, ConfigWarning, one_line
from r1kit.machine import has_cuda, installed
from r1kit.rewards.verify import DEFAULT_TIMEOUT

logger = logging.getLogger(__name__)

DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "demo_grpo.yaml"


# The world size a recipe is being checked for (`--dry-run --world-size N`), set by `parse_args(world_size=N)` for the
# time of one parse: the dataclasses' own checks (and TRL's) read it, no process-wide state is left behind.
_CHECK_WORLD_SIZE: contextvars.ContextVar[int | None] = contextvars.ContextVar("r1kit_check_world_size", default=None)

# Valid values of the recipe fields that are plain strings in TRL / r1kit (argparse checks only the Enum-typed ones).
CODE_PROVIDERS = ("local", "piston", "e2b", "morph")
IOI_PROVIDERS = ("local", "piston")
REPETITION_LANGUAGES = ("en", "zh")
BENCHMARK_LAUNCHERS = ("local", "slurm")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")  # TRL 1.16's, checked at step 1
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
SCALE_REWARDS = ("group", "batch", "none")
VLLM_MODES = ("server", "colocate")


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


# --------------------------------------------------------------------------------------------------------------------
# The three dataclasses of a recipe
# --------------------------------------------------------------------------------------------------------------------
def check_data_fields(args: Any) -> None:
    """`dataset_name` or `dataset_mixture` (Open-R1's rule), the mixture given as a mapping or as JSON text on the
    command line, turned into a `DatasetMixtureConfig`. Shared by the GRPO, SFT and pass-rate arguments."""
    if args.dataset_name is None and args.dataset_mixture is None:
        raise ConfigError("Either `dataset_name` or `dataset_mixture` must be provided")
    if isinstance(args.dataset_mixture, str):  # given as JSON on the command line
        args.dataset_mixture = yaml.safe_load(args.dataset_mixture)
    if args.dataset_mixture is not None and not isinstance(args.dataset_mixture, DatasetMixtureConfig):
        args.dataset_mixture = parse_dataset_mixture(args.dataset_mixture)


@dataclass
class GRPOScriptArguments(ScriptArguments):
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
    code_provider: str = field(default="local", metadata={"help": "Sandbox: local, e2b, morph, piston."})
    code_eval_test_batch_size: int = field(default=1, metadata={"help": "Tests per batch for ioi_code/cf_code."})
    code_eval_scoring_mode: Literal["pass_fail", "partial", "weighted_sum"] = field(
        default="weighted_sum", metadata={"help": "cf_code scoring mode."}
    )
    parallel_code_exec_per_proc: int | None = field(
        default=None, metadata={"help": "Sandbox concurrency per process (default: number of cores)."}
    )
    e2b_router_url: str | None = field(default=None, metadata={"help": "E2B router host:port."})
    morph_router_url: str | None = field(default=None, metadata={"help": "Morph router host:port."})
    ioi_provider: str = field(default="local", metadata={"help": "ioi_code back end: local or piston."})
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
    repetition_language: str = field(default="en", metadata={"help": "Repetition penalty tokenisation: en or zh."})
    format_think_prefilled: bool | None = field(
        default=None,
        metadata={"help": "Accept completions that start inside <think> (default: when the template pre-fills it)."},
    )
    reward_timeout: float = field(default=DEFAULT_TIMEOUT, metadata={"help": "Seconds allowed to verify one math answer."})
    reward_workers: int | None = field(
        default=None, metadata={"help": "Processes verifying math answers (default: number of cores, at most 8)."}
    )
    reasoning_gym_answer: str = field(
        default="last_number",
        metadata={"help": "reasoning_gym reward, outside <answer>: last_number or reply (the whole reply)."},
    )

    def __post_init__(self):
        check_data_fields(self)
        if isinstance(self.dataset_options, str):  # given as JSON/YAML on the command line
            self.dataset_options = yaml.safe_load(self.dataset_options)
        if self.dataset_options is not None and not isinstance(self.dataset_options, dict):
            raise ConfigError(f"dataset_options must be a mapping of option: value, got {self.dataset_options!r}")
        if isinstance(self.reward_funcs, str):
            self.reward_funcs = [name.strip() for name in self.reward_funcs.split(",") if name.strip()]
        for name in ("dataset_name", "dataset_prompt_column", "code_language"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
        check_choice("code_provider", self.code_provider, CODE_PROVIDERS)
        check_choice("ioi_provider", self.ioi_provider, IOI_PROVIDERS)
        check_choice("repetition_language", self.repetition_language, REPETITION_LANGUAGES)
        check_choice("reasoning_gym_answer", self.reasoning_gym_answer, ("last_number", "reply"))
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


def apply_machine_defaults(args: Any) -> None:
    """r1kit's corrections to TRL's training defaults, made before transformers reads them (GRPO and SFT alike).

    - `bf16`/`fp16` without a GPU become fp32 (with a warning when the recipe asked for them): TRL's default, bf16
      on, cannot even construct on a CPU-only machine.
    - `gradient_checkpointing`, which TRL sets to True by default and Open-R1 recipes use, is deprecated in
      transformers 5 in favour of `activation_checkpointing`: its value moves there, so that every start does not
      print a FutureWarning; `activation_checkpointing`, when set, wins, as in transformers.
    - no pinned memory without a GPU: torch can only warn that it has nothing to pin to.
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
    for old, new in (
        ("gradient_checkpointing", "activation_checkpointing"),
        ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
    ):
        if getattr(args, new) is None:
            setattr(args, new, getattr(args, old))
        setattr(args, old, None)  # transformers mirrors the new name back into the old one
    if not has_gpu:
        args.dataloader_pin_memory = False
    _check_deepspeed_field(args.deepspeed)
    _check_report_to(args.report_to)


# Integrations `report_to` names, and the module each needs (transformers fails only when the trainer is built).
REPORT_TO_MODULES = {
    "wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow", "comet_ml": "comet_ml", "trackio": "trackio",
    "clearml": "clearml", "neptune": "neptune", "codecarbon": "codecarbon", "swanlab": "swanlab", "dvclive": "dvclive",
    "dagshub": "dagshub", "azure_ml": "azureml", "flyte": "flytekit", "kubeflow": "kubeflow",
}


def _check_report_to(report_to: Any) -> None:
    """Names only: whether each is installed is checked before the run loads anything (`preflight.check_inputs`)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for name in names:
        check_choice("report_to", name, ("none", "all", *REPORT_TO_MODULES))


def _check_deepspeed_field(deepspeed: Any) -> None:
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


def check_grpo_fields(args: Any) -> None:
    """Enums and ranges of the GRPO training fields that TRL checks late (at the first step) or not at all."""
    if not isinstance(args.resume, str) or not (args.resume in ("auto", "never") or _looks_like_path(args.resume)):
        check_choice("resume", args.resume, ("auto", "never"), "or the path of a checkpoint folder")
    check_choice("benchmark_launcher", args.benchmark_launcher, BENCHMARK_LAUNCHERS)
    check_choice("loss_type", args.loss_type, LOSS_TYPES)
    check_choice("importance_sampling_level", args.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    if isinstance(args.scale_rewards, str) and args.scale_rewards.lower() in ("true", "false"):
        args.scale_rewards = args.scale_rewards.lower() == "true"  # TRL maps True/False to group/none
    if not isinstance(args.scale_rewards, bool):
        check_choice("scale_rewards", args.scale_rewards, SCALE_REWARDS, "or true / false")
    check_choice("vllm_mode", args.vllm_mode, VLLM_MODES)
    if args.chat_template is not None:
        check_chat_template(args.chat_template)
    check_range(
        args,
        [
            ("learning_rate", ">=", 0),
            ("per_device_train_batch_size", ">=", 1),
            ("gradient_accumulation_steps", ">=", 1),
            ("max_completion_length", ">=", 1),
            ("num_iterations", ">=", 1),
            ("temperature", ">", 0),
            ("top_p", ">", 0),
            ("top_p", "<=", 1),
            ("top_k", ">=", 0),
            ("beta", ">=", 0),
            ("epsilon", ">=", 0),
            ("warmup_steps", ">=", 0),
            ("logging_steps", ">", 0),
            ("save_steps", ">", 0),
            ("heldout_size", ">=", 1),
            ("heldout_eval_steps", ">=", 0),
            ("benchmark_num_samples", ">=", 1),
            ("benchmark_max_new_tokens", ">=", 1),
            ("torch_num_threads", ">=", 1),
            ("num_completions_to_print", ">=", 0),
            ("dynamic_sampling_max_rounds", ">=", 1),
            ("curriculum_skip_solved", ">=", 0),
            ("curriculum_explore", ">=", 0),
            ("curriculum_explore", "<=", 1),
            ("curriculum_history", ">=", 1),
        ],
    )
    check_curriculum_window(args)
    if args.max_steps == 0 or args.max_steps < -1:
        raise ConfigError(f"max_steps must be a positive number of steps (or -1 to train num_train_epochs), got {args.max_steps}")
    if args.max_steps == -1 and not args.num_train_epochs > 0:
        raise ConfigError(f"num_train_epochs must be > 0 when max_steps is -1, got {args.num_train_epochs}")


def check_curriculum_window(args: Any) -> None:
    """`curriculum_pass_rate_window` is `[low, high]` with 0 <= low <= high <= 1 (also given as "low,high")."""
    window = args.curriculum_pass_rate_window
    if window is None:
        return
    if isinstance(window, str):
        window = [part for part in window.replace("[", "").replace("]", "").split(",") if part.strip()]
    try:
        low, high = (float(x) for x in window)
    except (TypeError, ValueError):
        raise ConfigError(f"curriculum_pass_rate_window must be [low, high], got {args.curriculum_pass_rate_window!r}") from None
    if not 0 <= low <= high <= 1:
        raise ConfigError(f"curriculum_pass_rate_window must satisfy 0 <= low <= high <= 1, got [{low}, {high}]")
    args.curriculum_pass_rate_window = [low, high]


def check_chat_template(template: Any, field: str = "chat_template") -> None:
    """A chat template must be Jinja that compiles (transformers would fail at the first prompt, mid-start)."""
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    if not isinstance(template, str):
        raise ConfigError(f"{field} must be a Jinja template string, got {template!r}")
    try:
        jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols]).parse(template)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{field}: not a valid Jinja template (line {e.lineno}: {e.message})") from None


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.startswith(("~", ".")) or "checkpoint" in value


def _world_size() -> int:
    """The world size being checked for, else the launcher's (`WORLD_SIZE`), else 1."""
    return _CHECK_WORLD_SIZE.get() or int(os.environ.get("WORLD_SIZE") or 1)


def check_generation_batch(
    num_generations: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    generation_batch_size: int | None,
    steps_per_generation: int | None,
    world_size: int,
) -> None:
    """Raises a `ConfigError` that lists the valid `num_generations` when the global generation batch is not made of
    whole prompt groups."""
    if generation_batch_size is not None and steps_per_generation is not None:
        raise ConfigError("'generation_batch_size' and 'steps_per_generation' cannot both be set; keep one of them")
    if generation_batch_size is not None:
        batch, how = generation_batch_size, f"generation_batch_size {generation_batch_size}"
    else:
        steps = steps_per_generation or gradient_accumulation_steps
        batch = per_device_train_batch_size * world_size * steps
        how = (
            f"per_device_train_batch_size {per_device_train_batch_size} x world size {world_size} x "
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


@dataclass
class GRPOConfig(trl.GRPOConfig):
    """TRL's `GRPOConfig` plus Open-R1's additions and r1kit's resume policy.

    Args:
        benchmarks (`list[str]`, defaults to `[]`): benchmarks evaluated on each checkpoint by `evaluate_benchmarks`.
        callbacks (`list[str]`, defaults to `[]`): callback names (see `r1kit.callbacks`).
        chat_template (`str` or `None`, defaults to `None`): Jinja template replacing the tokenizer's.
        system_prompt (`str` or `None`, defaults to `None`): system message prepended to every prompt.
        hub_model_revision (`str`, defaults to `"main"`): base branch of checkpoint pushes.
        push_to_hub_revision (`bool`, defaults to `False`): refuse to start if the revision already has content.
        overwrite_hub_revision (`bool`, defaults to `False`): allow overwriting an existing revision.
        num_completions_to_print (`int`, defaults to `0`): completions printed per logging step.
        wandb_entity / wandb_project / wandb_run_group (`str` or `None`): exported as `WANDB_*` variables.
        resume (`str`, defaults to `"auto"`): `auto` resumes from the newest complete checkpoint in `output_dir`,
            `never` starts fresh, a path resumes from that checkpoint.
        heldout_eval_steps (`int`, defaults to `0`): with the `heldout_accuracy` callback, evaluate every N steps
            (0: only before and after training).
        heldout_size (`int`, defaults to `200`): test problems the `heldout_accuracy` callback evaluates.
        compact_progress (`bool`, defaults to `False`): the progress bar shows the latest reward, accuracy and length
            instead of a printed dict per logging step (metrics still reach trainer_state.json and `report_to`).
        torch_num_threads (`int` or `None`, defaults to `None`): CPU threads for torch; tiny models run fastest and
            steadiest on 1 (on small VMs, 2 threads can stall).
        benchmark_num_samples (`int`, defaults to `1`): `evaluate_benchmarks` samples per problem (pass@1 averages).
        benchmark_max_new_tokens (`int` or `None`): `evaluate_benchmarks` generation length (default:
            `max_completion_length`).
        benchmark_launcher (`str`, defaults to `"local"`): `local` runs evaluations as subprocesses, `slurm` submits
            `slurm/evaluate.slurm` with sbatch.
        log_completions_file (`bool`, defaults to `True`): write every scored completion with its rewards to
            `OUTPUT_DIR/completions.jsonl`.
        bf16 (`bool` or `None`, defaults to `None`): `None` means bf16 where a GPU supports it, fp32 otherwise;
            `true` on a machine without a GPU becomes fp32 with a warning.
        dynamic_sampling (`bool`, defaults to `False`): drop prompt groups whose rewards are all equal (no
            advantage, no gradient) and generate for more prompts until the step's batch holds only groups with
            signal (DAPO's dynamic sampling); see `r1kit.sampling`.
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
    """

    benchmarks: list[str] = field(default_factory=list, metadata={"help": "Benchmarks evaluated on each checkpoint."})
    callbacks: list[str] = field(default_factory=list, metadata={"help": "Callbacks to run during training."})
    chat_template: str | None = field(default=None, metadata={"help": "Chat template overriding the tokenizer's."})
    system_prompt: str | None = field(default=None, metadata={"help": "System prompt prepended to every prompt."})
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
    hub_model_revision: str | None = field(default="main", metadata={"help": "Base branch of checkpoint pushes."})
    push_to_hub_revision: bool = field(default=False, metadata={"help": "Push each checkpoint to its own branch."})
    overwrite_hub_revision: bool = field(default=False, metadata={"help": "Allow overwriting an existing revision."})
    num_completions_to_print: int | None = field(default=0, metadata={"help": "Completions printed per log step."})
    wandb_entity: str | None = field(default=None, metadata={"help": "W&B entity."})
    wandb_project: str | None = field(default=None, metadata={"help": "W&B project."})
    wandb_run_group: str | None = field(default=None, metadata={"help": "W&B run group."})
    resume: str = field(default="auto", metadata={"help": "auto | never | path to a checkpoint."})
    heldout_eval_steps: int = field(default=0, metadata={"help": "heldout_accuracy: evaluate every N steps (0: start/end)."})
    heldout_size: int = field(default=200, metadata={"help": "heldout_accuracy: test problems evaluated."})
    log_completions_file: bool = field(default=True, metadata={"help": "Write OUTPUT_DIR/completions.jsonl."})
    compact_progress: bool = field(
        default=False, metadata={"help": "Show the latest reward on the progress bar instead of printing every log."}
    )
    torch_num_threads: int | None = field(
        default=None, metadata={"help": "CPU threads torch uses (default: torch's choice); 1 suits tiny models."}
    )
    benchmark_num_samples: int = field(default=1, metadata={"help": "evaluate_benchmarks: samples per problem."})
    benchmark_max_new_tokens: int | None = field(
        default=None, metadata={"help": "evaluate_benchmarks: new tokens (default: max_completion_length)."}
    )
    benchmark_launcher: str = field(default="local", metadata={"help": "evaluate_benchmarks: local or slurm."})

    def __post_init__(self):
        apply_machine_defaults(self)
        check_grpo_fields(self)
        world_size = _world_size()
        check_generation_batch(
            self.num_generations,
            self.per_device_train_batch_size,
            self.gradient_accumulation_steps,
            self.generation_batch_size,
            self.steps_per_generation,
            world_size,
        )
        if _CHECK_WORLD_SIZE.get() and self.generation_batch_size is None:
            # Checking a recipe for N ranks from one process: TRL's own check computes the generation batch from the
            # processes it sees (one), so it is given the N-rank batch, then the field is restored.
            steps = self.steps_per_generation
            self.generation_batch_size = self.per_device_train_batch_size * world_size * (
                steps or self.gradient_accumulation_steps
            )
            self.steps_per_generation = None
            super().__post_init__()
            self.steps_per_generation = steps or self.gradient_accumulation_steps
            return
        super().__post_init__()


@dataclass
class ModelConfig(trl.trainer.model_config.ModelConfig):
    """TRL's `ModelConfig` plus a GGUF source.

    Args:
        gguf_file (`str` or `None`, defaults to `None`): a GGUF file inside the `model_name_or_path` folder; the
            model is turned into a trainable float32 copy (cached). A `model_name_or_path` ending in `.gguf` works too.
    """

    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file in the model_name_or_path folder."})


@dataclass
class SFTConfig(trl.SFTConfig):
    """TRL's `SFTConfig` plus Open-R1's SFT additions and r1kit's resume, with r1kit's machine defaults (fp32 without
    a GPU, `gradient_checkpointing` read as `activation_checkpointing`, no pinned memory on CPU).

    Args:
        benchmarks (`list[str]`, defaults to `[]`): benchmarks the `evaluate_benchmarks` callback (or
            `push_to_hub_revision` with benchmarks) runs on each checkpoint.
        callbacks (`list[str]`, defaults to `[]`): `push_to_hub_revision`, `evaluate_benchmarks`.
        chat_template (`str` or `None`, defaults to `None`): Jinja template replacing the tokenizer's (ChatML when the
            tokenizer has none, as Open-R1's sft.py does).
        system_prompt (`str` or `None`, defaults to `None`): the system prompt the benchmarks use (Open-R1: "for
            benchmarking"); training data keeps its own messages.
        hub_model_revision / push_to_hub_revision / overwrite_hub_revision: as in `GRPOConfig`.
        wandb_entity / wandb_project / wandb_run_group (`str` or `None`): exported as `WANDB_*` variables.
        resume (`str`, defaults to `"auto"`): `auto`, `never` or a checkpoint path, as in `GRPOConfig`.
        benchmark_num_samples (`int`, defaults to `1`), benchmark_max_new_tokens (`int`, defaults to `512`),
            benchmark_launcher (`str`, defaults to `"local"`): how the benchmarks run.
        torch_num_threads (`int` or `None`, defaults to `None`): CPU threads for torch.
    """

    benchmarks: list[str] = field(default_factory=list, metadata={"help": "Benchmarks evaluated on each checkpoint."})
    callbacks: list[str] = field(default_factory=list, metadata={"help": "Callbacks to run during training."})
    chat_template: str | None = field(default=None, metadata={"help": "Chat template overriding the tokenizer's."})
    system_prompt: str | None = field(default=None, metadata={"help": "System prompt the benchmarks use."})
    hub_model_revision: str | None = field(default="main", metadata={"help": "Base branch of checkpoint pushes."})
    push_to_hub_revision: bool = field(default=False, metadata={"help": "Push each checkpoint to its own branch."})
    overwrite_hub_revision: bool = field(default=False, metadata={"help": "Allow overwriting an existing revision."})
    wandb_entity: str | None = field(default=None, metadata={"help": "W&B entity."})
    wandb_project: str | None = field(default=None, metadata={"help": "W&B project."})
    wandb_run_group: str | None = field(default=None, metadata={"help": "W&B run group."})
    resume: str = field(default="auto", metadata={"help": "auto | never | path to a checkpoint."})
    benchmark_num_samples: int = field(default=1, metadata={"help": "evaluate_benchmarks: samples per problem."})
    benchmark_max_new_tokens: int = field(default=512, metadata={"help": "evaluate_benchmarks: new tokens."})
    benchmark_launcher: str = field(default="local", metadata={"help": "evaluate_benchmarks: local or slurm."})
    torch_num_threads: int | None = field(default=None, metadata={"help": "CPU threads torch uses."})

    def __post_init__(self):
        apply_machine_defaults(self)
        check_choice("benchmark_launcher", self.benchmark_launcher, BENCHMARK_LAUNCHERS)
        super().__post_init__()


# --------------------------------------------------------------------------------------------------------------------
# Keys that Open-R1 recipes use but current TRL / transformers renamed or dropped
# --------------------------------------------------------------------------------------------------------------------
# old key -> (new key or None to drop, why). Applied only when the old key is not a valid key of the installed stack.
KEY_MIGRATIONS: dict[str, tuple[str | None, str]] = {
    "torch_dtype": ("dtype", "renamed to `dtype` in TRL's ModelConfig"),
    "vllm_guided_decoding_regex": ("vllm_structured_outputs_regex", "renamed in TRL 1.x"),
    "wandb_log_unique_prompts": ("log_unique_prompts", "renamed in TRL 1.x"),
    "vllm_device": (None, "obsolete since TRL 0.17: vLLM placement follows `vllm_mode` (server or colocate)"),
    "max_prompt_length": (None, "removed in TRL 1.x: the trainer no longer truncates prompts"),
    "overwrite_output_dir": (None, "removed in transformers 5; r1kit's `resume` (auto | never | path) decides instead"),
    "use_liger_loss": (None, "removed in TRL 1.x"),
    "warmup_ratio": ("warmup_steps", "merged into `warmup_steps` in transformers 5 (a float in [0, 1) is a ratio)"),
    "provider_type": ("code_provider", "Open-R1's README name for `code_provider`"),
    "max_seq_length": ("max_length", "renamed to `max_length` in TRL's SFTConfig"),
    "use_liger": ("use_liger_kernel", "renamed to `use_liger_kernel` in TRL"),
    "dataset_configs": ("dataset_config", "Open-R1's early list form of `dataset_config`"),
    "low_reward_threshold": ("pass_rate_min", "Open-R1's early name in its filtering configs"),
    "high_reward_threshold": ("pass_rate_max", "Open-R1's early name in its filtering configs"),
}


def _liger_installed() -> bool:
    return installed("liger_kernel")


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
    import argparse

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if value is not None and not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a mapping such as '{{key: value}}', got {text!r}")
    return value


def _make_parser(dataclass_types: tuple | None = None) -> TrlParser:
    dataclass_types = dataclass_types or (GRPOScriptArguments, GRPOConfig, ModelConfig)
    parser = _StrictParser(dataclass_types)
    mappings = {f.name for kind in dataclass_types for f in dataclasses.fields(kind)
                if str(f.type).startswith("dict") and "| str" not in str(f.type)}  # `dict | str` fields parse as text
    for action in parser._actions:
        if action.dest in mappings:  # argparse would call dict("{...}") on the text and fail
            action.type = _mapping_from_text
    return parser


def _known_keys(parser: TrlParser) -> set[str]:
    return {action.dest for action in parser._actions if action.dest != "help"}


def _option_names(parser: TrlParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def _unknown_key_error(key: str, known: set[str], where: str) -> ConfigError:
    matches = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{matches[0]}'?" if matches else ""
    return ConfigError(f"unknown key '{key}' {where}{hint}")


def _migrate_key(key: str, known: set[str], seen: set[str]) -> str | None:
    """The key to use instead of `key` (or None to drop it), warning once per key."""
    if key == "use_liger_kernel" and key in known and not _liger_installed():
        new, why = None, "liger-kernel is not installed (and TRL 1.16 deprecates this flag)"
    else:
        new, why = KEY_MIGRATIONS[key]
    if key not in seen:
        seen.add(key)
        action = f"using `{new}`" if new else "ignoring it"
        warnings.warn(f"recipe key '{key}': {why}; {action}.", ConfigWarning, 3)
    return new


def _needs_migration(key: str, known: set[str], value: Any = True) -> bool:
    if key == "use_liger_kernel":
        return bool(value) and value != "false" and not _liger_installed()
    return key in KEY_MIGRATIONS and key not in known


def _normalise_yaml(
    config: dict[str, Any], known: set[str], seen: set[str], path: str, actions: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        while key is not None and _needs_migration(key, known, value):  # a renamed key may itself be dropped
            old, key = key, _migrate_key(key, known, seen)
            if old == "dataset_configs" and isinstance(value, list):
                if len(value) != 1:
                    raise ConfigError(f"dataset_configs in {path}: give one config (dataset_config), got {value!r}")
                value = value[0]
        if key is None:
            continue
        if key not in known:
            raise _unknown_key_error(key, known, f"in {path}")
        if actions is not None and key in actions:
            value = _check_yaml_value(key, value, actions[key], path)
        out[key] = value
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
        if _needs_migration(key, known):
            new = _migrate_key(key, known, seen)
            if new is None:  # drop the flag and its value
                has_value = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
                i += 2 if has_value else 1
                continue
            token = f"--{new}{eq}{value}"
        elif token.split("=")[0] not in options:
            raise _unknown_key_error(name, known, "on the command line")
        out.append(token)
        i += 1
    return out


def _values_of_options(args: list[str]) -> set[str]:
    """The tokens that follow a `--key` (its value), so that the rest are stray words."""
    return {value for option, value in zip(args, args[1:]) if option.startswith("--") and "=" not in option}


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Reads a recipe YAML into a mapping (the `env:` block included)."""
    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"--config: recipe not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"--config: cannot read the recipe {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config: recipe {path} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"recipe {path} must contain a YAML mapping of keys to values")
    return config


# Defaults that moved under Open-R1's recipes: Open-R1 pins TRL 0.18, whose GRPOConfig defaults differ from today's
# where the training changes (found by comparing trl 0.18.0's GRPOConfig fields with TRL 1.16's; equivalent moves are
# left out: scale_rewards True == "group", top_k None == 0; removed keys are migrations, see KEY_MIGRATIONS).
OPEN_R1_DEFAULTS: dict[str, Any] = {
    "beta": 0.04,
    "loss_type": "bnpo",
    "max_completion_length": 256,
    "vllm_mode": "server",
    "gradient_checkpointing": False,
    "bf16": False,
    "log_unique_prompts": True,  # Open-R1's own wandb_log_unique_prompts defaulted to True
}
DEFAULTS_CHOICES = ("trl", "open-r1")
VLLM_SERVER_KEYS = ("vllm_server_host", "vllm_server_port", "vllm_server_base_url")


def _defaults_that_matter(key: str, training_args: Any) -> bool:
    if key == "vllm_mode":
        return bool(training_args.use_vllm)
    if key == "log_unique_prompts":
        return "wandb" in (training_args.report_to or [])
    return True


def moved_defaults(explicit: set[str], training_args: Any) -> list[tuple[str, Any, Any]]:
    """(field, Open-R1's value, the value used now) for each field a recipe left unset whose default moved."""
    return [
        (key, old, getattr(training_args, key))
        for key, old in OPEN_R1_DEFAULTS.items()
        if key not in explicit and _defaults_that_matter(key, training_args) and getattr(training_args, key) != old
    ]


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") in ("", "0") and os.environ.get("LOCAL_RANK", "0") in ("", "0")


def _apply_vllm_server_keys(explicit: set[str], training_args: Any) -> None:
    """Open-R1's Slurm launcher appends --vllm_server_host to recipes that never set vllm_mode: a server address
    means server mode; with vllm_mode: colocate set explicitly, the two contradict each other."""
    given = [k for k in VLLM_SERVER_KEYS if k in explicit]
    if not given:
        return
    if "vllm_mode" in explicit and training_args.vllm_mode == "colocate":
        raise ConfigError(f"vllm_mode: colocate contradicts {', '.join(given)} (a separate vLLM server): set "
                          "vllm_mode: server, or remove the server keys")
    if training_args.vllm_mode != "server":
        training_args.vllm_mode = "server"
        if _is_main_process():
            logger.info("%s given and vllm_mode unset: using vllm_mode server", ", ".join(given))


def _explicit_cli_keys(args: list[str]) -> set[str]:
    return {token[2:].partition("=")[0].replace("-", "_") for token in args if token.startswith("--")}


def parse_args(
    argv: list[str] | None = None,
    default_config: str | os.PathLike | None = DEFAULT_RECIPE,
    dataclass_types: tuple | None = None,
    world_size: int | None = None,
) -> tuple[GRPOScriptArguments, GRPOConfig, ModelConfig]:
    """Parses `--config recipe.yaml` plus command-line overrides into the three dataclasses, strictly.

    Without `--config`, `default_config` is read (the embedded demo recipe). Raises `ConfigError` for unknown keys,
    values of the wrong type or outside their range or choices, invalid mixtures and batch sizes that cannot hold
    whole prompt groups. `dataclass_types` replaces the GRPO triple (`r1kit sft` passes its own). `world_size` checks
    the batch arithmetic as launched on that many processes (default: this launch's).
    """
    token = _CHECK_WORLD_SIZE.set(world_size)
    try:
        return _parse_args(argv, default_config, dataclass_types)
    finally:
        _CHECK_WORLD_SIZE.reset(token)


def _parse_args(argv, default_config, dataclass_types):

    args = list(sys.argv[1:] if argv is None else argv)
    parser = _make_parser(dataclass_types)
    known, options = _known_keys(parser), _option_names(parser)
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    seen: set[str] = set()

    defaults = None
    if "--defaults" in args:
        i = args.index("--defaults")
        if i + 1 >= len(args):
            raise ConfigError(f"--defaults needs one of {', '.join(DEFAULTS_CHOICES)}")
        defaults = args[i + 1]
        del args[i : i + 2]
    explicit: set[str] = set()
    config_path = default_config
    if "--config" in args:
        i = args.index("--config")
        if i + 1 >= len(args):
            raise ConfigError("--config needs a path to a recipe YAML")
        config_path = args[i + 1]
        del args[i : i + 2]
    if config_path is not None:
        config = load_recipe(config_path)
        env = config.pop("env", None) or {}
        if not isinstance(env, dict):
            raise ConfigError("`env:` in a recipe must be a mapping of variable names to values")
        for name, value in env.items():
            os.environ[str(name)] = str(value)
        defaults = defaults or config.pop("defaults", None)
        config.pop("defaults", None)
        recipe = _normalise_yaml(config, known, seen, str(config_path), actions)
        explicit |= set(recipe)
        parser.set_defaults_with_config(**recipe)

    args = _normalise_cli(args, known, options, seen)
    explicit |= _explicit_cli_keys(args)
    if defaults is not None:
        check_choice("defaults", defaults, DEFAULTS_CHOICES)
    if defaults == "open-r1":  # the values Open-R1 trained with, for every field the recipe leaves unset
        parser.set_defaults(**{k: v for k, v in OPEN_R1_DEFAULTS.items() if k not in explicit})
    try:
        parsed = parser.parse_args_into_dataclasses(args=args)  # one instance per dataclass given
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # raised by a dataclass's own checks (TRL, transformers)
        if "not used by the HfArgumentParser" in str(e):  # words without a --key before them
            extra = [a for a in args if not a.startswith("--") and a not in _values_of_options(args)]
            recipe = next((a for a in extra if a.endswith((".yaml", ".yml"))), None)
            hint = f"; to read a recipe, write --config {recipe}" if recipe else "; options are --key value"
            raise ConfigError(f"unexpected argument(s) {extra or str(e)}{hint}") from None
        raise ConfigError(one_line(e, 10_000)) from e
    training_args = parsed[1]
    if isinstance(training_args, GRPOConfig):
        _apply_vllm_server_keys(explicit, training_args)
        moved = moved_defaults(explicit, training_args) if defaults is None else []
        if moved and _is_main_process():
            lines = "\n".join(f"  {key}: Open-R1 trained with {old!r}, now {new!r}" for key, old, new in moved)
            warnings.warn(
                f"the recipe leaves {len(moved)} field(s) at today's TRL defaults, which Open-R1 trained with "
                f"differently (set each to choose, or `defaults: open-r1` for all of Open-R1's, `defaults: trl` to "
                f"accept today's):\n{lines}", ConfigWarning, 2)
    return tuple(parsed)
