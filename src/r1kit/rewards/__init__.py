"""The reward registry: named reward functions, built only when selected.

Each entry names a factory (imported lazily, so listing rewards imports neither math-verify nor a sandbox), the
recipe fields that give the factory's parameters, and the dataset columns the reward reads, which the pipeline checks
before any model loads. Factories take named parameters (`make_cosine_reward(min_value_wrong=..., max_len=...)`) and
know nothing of the recipe; `get_reward_funcs` reads the fields. The callable a factory returns keeps Open-R1's
`__name__`, which TRL turns into the `rewards/<name>/mean` metric.

Failure policy, everywhere: a sample that cannot be judged (unparseable gold, sandbox down) scores `None`, which TRL
leaves out of the group baseline, never a silent 0.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from r1kit.errors import ConfigError

# A reward function's attribute naming the dataset columns it judges rows by (`r1kit.integrity.rewardtap`); a user's reward
# may set it too: `my_reward.r1kit_columns = ("verification_info",)`.
COLUMNS_ATTRIBUTE = "r1kit_columns"
Fields = Mapping[str, str | tuple[str, ...]]  # factory parameter -> recipe field (or fields, the first set one wins)


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward.

    Args:
        name (`str`): registry key used in recipes.
        factory (`str`): `module:function` building the reward callable from named parameters.
        columns (`tuple[str, ...]`): dataset columns the reward reads.
        summary (`str`): one line for `r1kit rewards`.
        fields (`Mapping[str, str | tuple[str, ...]]`): the factory's parameter -> the recipe field that gives it,
            read from the script arguments, else from the training arguments (trainer fields such as
            `max_completion_length`). A tuple lists fields in order of precedence. A parameter whose fields are all
            unset (missing or `None`) keeps the factory's default.
    """

    name: str
    factory: str
    columns: tuple[str, ...]
    summary: str
    fields: Fields = field(default_factory=dict)

    def factory_function(self) -> Callable:
        module, func = self.factory.split(":")
        return getattr(importlib.import_module(module), func)

    def arguments(self, script_args: Any, training_args: Any = None, **overrides: Any) -> dict[str, Any]:
        """The factory's keyword arguments read from the recipe; `overrides` (by field name) win over its values."""
        kwargs = {}
        for param, names in self.fields.items():
            for name in (names,) if isinstance(names, str) else names:
                value = _read_field(name, script_args, training_args, overrides)
                if value is not None:
                    kwargs[param] = value
                    break
        return kwargs

    def build(self, script_args: Any, training_args: Any = None, **overrides: Any) -> Callable:
        """The reward callable, built from the recipe's fields (see `arguments`), naming the columns it judges rows
        by (`COLUMNS_ATTRIBUTE`: a row without them is not its to judge, as in TRL's multi-task runs)."""
        func = self.factory_function()(**self.arguments(script_args, training_args, **overrides))
        try:
            setattr(func, COLUMNS_ATTRIBUTE, self.columns)
        except (AttributeError, TypeError):  # a callable that takes no attributes: it names no rows
            pass
        return func


def _read_field(name: str, script_args: Any, training_args: Any, overrides: dict[str, Any]) -> Any:
    if name in overrides:
        return overrides[name]
    for args in (script_args, training_args):
        if args is not None and hasattr(args, name):
            return getattr(args, name)
    return None


def _spec(name: str, factory: str, columns: tuple[str, ...], summary: str, **fields: str | tuple[str, ...]) -> RewardSpec:
    return RewardSpec(name, f"r1kit.rewards.{factory}", columns, summary, fields)


# Recipe fields shared by several rewards.
_MATH = {"timeout": "reward_timeout", "workers": "reward_workers"}
_PREFILL = {"think_prefilled": "format_think_prefilled"}
_PROVIDER = {"num_parallel": "parallel_code_exec_per_proc", "allow_unsandboxed": "allow_unsandboxed_code_execution"}
_CODE = {"provider": "code_provider", "language": "code_language", **_PROVIDER, "e2b_router_url": "e2b_router_url",
         "morph_router_url": "morph_router_url"}

REWARD_FUNCS_REGISTRY: dict[str, RewardSpec] = {
    spec.name: spec
    for spec in [
        _spec("accuracy", "math:make_accuracy_reward", ("solution",), "1.0 if the boxed answer equals the gold (math-verify)",
              **_MATH),
        _spec("format", "format:make_format_reward", (), "1.0 for exactly <think>…</think><answer>…</answer>", **_PREFILL),
        _spec("tag_count", "format:make_tag_count_reward", (), "0.25 per think/answer tag present exactly once",
              **_PREFILL),
        _spec("reasoning_steps", "format:make_reasoning_steps_reward", (), "min(1, steps/3): Step N:, lists, First/Next"),
        _spec("cosine", "math:make_cosine_reward", ("solution",), "correctness scaled by length on a cosine schedule",
              min_value_wrong="cosine_min_value_wrong", max_value_wrong="cosine_max_value_wrong",
              min_value_correct="cosine_min_value_correct", max_value_correct="cosine_max_value_correct",
              max_len="cosine_max_len", **_MATH),
        _spec("repetition_penalty", "format:make_repetition_penalty_reward", (), "n-gram repetition penalty (<= 0)",
              n_grams="repetition_n_grams", max_penalty="repetition_max_penalty", language="repetition_language"),
        _spec("length", "math:make_length_reward", ("solution",), "Kimi 1.5 length reward within each prompt group",
              **_MATH),
        _spec("soft_overlong_punishment", "format:make_soft_overlong_punishment", (),
              "DAPO ramp from 0 to -1 near max_completion_length",
              max_completion_len=("max_completion_len", "max_completion_length"), soft_punish_cache="soft_punish_cache"),
        _spec("code_format", "format:make_code_format_reward", (), "format with a fenced code block in the answer",
              language="code_language", **_PREFILL),
        _spec("code", "code:make_code_reward", ("verification_info",), "fraction of test cases passed (sandbox)",
              **_CODE),
        _spec("binary_code", "code:make_binary_code_reward", ("verification_info",), "1.0 iff all test cases pass",
              **_CODE),
        _spec("ioi_code", "competitive:make_ioi_code_reward", ("id", "subtask", "test_names"), "IOI subtask score",
              provider="ioi_provider", test_cases="ioi_test_cases", test_batch_size="code_eval_test_batch_size",
              **_PROVIDER),
        _spec("cf_code", "competitive:make_cf_code_reward", ("official_tests",), "Codeforces score with checkers",
              scoring_mode="code_eval_scoring_mode", test_batch_size="code_eval_test_batch_size",
              tests_folder="cf_tests_folder", patch="cf_patch_code", **_CODE),
        _spec("reasoning_gym", "gym:make_reasoning_gym_reward", ("reasoning_gym",),
              "reasoning-gym's own score_answer (needs r1kit[reasoning-gym])",
              timeout="reward_timeout", answer_mode="reasoning_gym_answer",
              allow_unsandboxed="allow_unsandboxed_code_execution", strict="reasoning_gym_strict"),
    ]
}
RECIPE_FIELDS = frozenset(
    name for spec in REWARD_FUNCS_REGISTRY.values() for names in spec.fields.values()
    for name in ((names,) if isinstance(names, str) else names)
)  # every recipe field a reward reads: what `get_reward_funcs` accepts as an override


def _is_import_path(name: str) -> bool:
    return ":" in name


def resolve_import_path(path: str) -> Callable:
    """Imports `package.module:function`; one line (`ConfigError`) when it cannot, naming the path and why."""
    module, _, attr = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise ConfigError(f"reward_funcs: cannot import reward function '{path}': {type(e).__name__}: {e} "
                          "(is the module on PYTHONPATH, and does it import?)") from e
    except AttributeError:
        raise ConfigError(f"reward_funcs: module '{module}' has no function '{attr}' (from '{path}')") from None
    if not callable(found):
        raise ConfigError(f"reward_funcs: '{path}' is a {type(found).__name__}, not a function")
    return found


def check_reward_names(names: list[str]) -> None:
    """Raises a `ConfigError` naming the nearest registered name and listing the valid ones when a reward name is not
    registered (an import path `package.module:function` is checked when it is imported)."""
    unknown = [n for n in names if not _is_import_path(n) and n not in REWARD_FUNCS_REGISTRY]
    if unknown:
        named = []
        for name in unknown:
            near = difflib.get_close_matches(name, list(REWARD_FUNCS_REGISTRY), n=1, cutoff=0.6)
            named.append(f"'{name}'" + (f" (did you mean '{near[0]}'?)" if near else ""))
        raise ConfigError(
            f"unknown reward function {', '.join(named)}; valid names: {', '.join(REWARD_FUNCS_REGISTRY)} "
            "(or an import path package.module:function)"
        )


def required_columns(names: list[str]) -> dict[str, tuple[str, ...]]:
    """Dataset columns each selected reward reads, keyed by reward name."""
    return {n: REWARD_FUNCS_REGISTRY[n].columns for n in names if n in REWARD_FUNCS_REGISTRY}


def __getattr__(name: str) -> Any:
    """Open-R1's reward API (`accuracy_reward`, `get_cosine_scaled_reward`, ...), imported on first use."""
    # import_module, not `from r1kit.rewards import open_r1`: that form asks this very hook for `open_r1` first and
    # would recurse without end while the submodule is not yet imported.
    open_r1 = importlib.import_module("r1kit.rewards.open_r1")
    if name in open_r1.OPEN_R1_NAMES:
        return getattr(open_r1, name)
    raise AttributeError(f"module 'r1kit.rewards' has no attribute {name!r}")


def get_reward_funcs(script_args: Any, training_args: Any = None, **overrides: Any) -> list[Callable]:
    """Builds the rewards named in `script_args.reward_funcs`, and only those, from the recipe fields of each one's
    table (`RewardSpec.fields`).

    Args:
        script_args: the recipe's script arguments (`reward_funcs` and the reward fields).
        training_args (*optional*): the training arguments, for trainer fields (`max_completion_length`).
        **overrides: recipe field -> value used instead of the recipe's, which is left unchanged (e.g.
            `format_think_prefilled=True` once the chat template is known).

    Returns:
        `list[Callable]`: one reward function per name, in order.
    """
    unknown = sorted(set(overrides) - RECIPE_FIELDS)
    if unknown:
        raise TypeError(f"get_reward_funcs: no reward reads the field(s) {unknown}; fields: {', '.join(sorted(RECIPE_FIELDS))}")
    check_reward_names(script_args.reward_funcs)
    return [
        resolve_import_path(name) if _is_import_path(name)
        else REWARD_FUNCS_REGISTRY[name].build(script_args, training_args, **overrides)
        for name in script_args.reward_funcs
    ]


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit rewards
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `rewards` (one line per registered reward, with the columns it reads) to the `r1kit` command."""
    parser = subparsers.add_parser("rewards", help="list the registered reward functions and the columns each reads")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    width = max(map(len, REWARD_FUNCS_REGISTRY))
    print(f"{'name'.ljust(width)}  {'columns'.ljust(28)}  description")
    for spec in REWARD_FUNCS_REGISTRY.values():
        print(f"{spec.name.ljust(width)}  {(', '.join(spec.columns) or '-').ljust(28)}  {spec.summary}")
    return 0
