"""The reward registry: named reward functions, built only when selected.

Each entry names a factory (imported lazily, so listing rewards imports neither math-verify nor a sandbox) and the
dataset columns the reward reads, which the pipeline checks before any model loads. The callable a factory returns
keeps Open-R1's `__name__`, which TRL turns into the `rewards/<name>/mean` metric.

Failure policy, everywhere: a sample that cannot be judged (unparseable gold, sandbox down) scores `None`, which TRL
leaves out of the group baseline, never a silent 0.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward.

    Args:
        name (`str`): registry key used in recipes.
        factory (`str`): `module:function` building the reward callable from `(script_args, training_args)`.
        columns (`tuple[str, ...]`): dataset columns the reward reads.
        summary (`str`): one line for `r1kit rewards`.
    """

    name: str
    factory: str
    columns: tuple[str, ...]
    summary: str

    def build(self, script_args: Any, training_args: Any = None) -> Callable:
        module, func = self.factory.split(":")
        return getattr(importlib.import_module(module), func)(script_args, training_args)


def _spec(name: str, factory: str, columns: tuple[str, ...], summary: str) -> RewardSpec:
    return RewardSpec(name, f"r1kit.rewards.{factory}", columns, summary)


REWARD_FUNCS_REGISTRY: dict[str, RewardSpec] = {
    spec.name: spec
    for spec in [
        _spec("accuracy", "math:make_accuracy_reward", ("solution",), "1.0 if the boxed answer equals the gold (math-verify)"),
        _spec("format", "format:make_format_reward", (), "1.0 for exactly <think>…</think><answer>…</answer>"),
        _spec("tag_count", "format:make_tag_count_reward", (), "0.25 per think/answer tag present exactly once"),
        _spec("reasoning_steps", "format:make_reasoning_steps_reward", (), "min(1, steps/3): Step N:, lists, First/Next"),
        _spec("cosine", "math:make_cosine_reward", ("solution",), "correctness scaled by length on a cosine schedule"),
        _spec("repetition_penalty", "format:make_repetition_penalty_reward", (), "n-gram repetition penalty (<= 0)"),
        _spec("length", "math:make_length_reward", ("solution",), "Kimi 1.5 length reward within each prompt group"),
        _spec(
            "soft_overlong_punishment",
            "format:make_soft_overlong_punishment",
            (),
            "DAPO ramp from 0 to -1 near max_completion_length",
        ),
        _spec("code_format", "format:make_code_format_reward", (), "format with a fenced code block in the answer"),
        _spec("code", "code:make_code_reward", ("verification_info",), "fraction of test cases passed (sandbox)"),
        _spec("binary_code", "code:make_binary_code_reward", ("verification_info",), "1.0 iff all test cases pass"),
        _spec("ioi_code", "competitive:make_ioi_code_reward", ("id", "subtask", "test_names"), "IOI subtask score"),
        _spec("cf_code", "competitive:make_cf_code_reward", ("official_tests",), "Codeforces score with checkers"),
        _spec(
            "reasoning_gym",
            "reasoning_gym:make_reasoning_gym_reward",
            ("reasoning_gym",),
            "reasoning-gym's own score_answer (needs r1kit[reasoning-gym])",
        ),
    ]
}


def _is_import_path(name: str) -> bool:
    return ":" in name


def resolve_import_path(path: str) -> Callable:
    """Imports `package.module:function`."""
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import reward function '{path}': {e}") from e


def check_reward_names(names: list[str]) -> None:
    """Raises `ValueError` listing the valid names when a reward name is not registered."""
    unknown = [n for n in names if not _is_import_path(n) and n not in REWARD_FUNCS_REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown reward function(s) {unknown}; valid names: {', '.join(REWARD_FUNCS_REGISTRY)} "
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


def get_reward_funcs(script_args: Any, training_args: Any = None) -> list[Callable]:
    """Builds the rewards named in `script_args.reward_funcs`, and only those."""
    check_reward_names(script_args.reward_funcs)
    return [
        resolve_import_path(name) if _is_import_path(name) else REWARD_FUNCS_REGISTRY[name].build(script_args, training_args)
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
