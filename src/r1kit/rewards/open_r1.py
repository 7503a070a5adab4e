"""Open-R1's reward API (`open_r1.rewards`), on r1kit's implementations: porting is a change of import.

    from r1kit.rewards import accuracy_reward, get_cosine_scaled_reward, get_reward_funcs   # was: open_r1.rewards

Same names, same signatures, same argument order as Open-R1 (the soft-overlong reward takes `completion_ids` first,
the factories take their positional parameters). Every function here calls the registry's factory with the given
parameters, so there is one implementation and one failure policy; the differences from Open-R1 are r1kit's
documented ones (README, "Differences from Open-R1"), chiefly `None` for an unparseable gold.

Defaults are Open-R1's, including the code rewards' providers (`code_reward`: e2b, `ioi_code_reward`: piston): pass
`provider_type="local"` to run in r1kit's local sandbox.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from r1kit.rewards.code import as_mapping, make_binary_code_reward, make_code_reward, normalise_language
from r1kit.rewards.code import extract_code as last_block
from r1kit.rewards.competitive import make_cf_code_reward, make_ioi_code_reward
from r1kit.rewards.format import (
    make_code_format_reward,
    make_format_reward,
    make_reasoning_steps_reward,
    make_repetition_penalty_reward,
    make_soft_overlong_punishment,
    make_tag_count_reward,
)
from r1kit.rewards.math import make_accuracy_reward, make_cosine_reward, make_length_reward


@functools.lru_cache(maxsize=64)
def _cached(factory: Callable, options: tuple[tuple[str, Any], ...]) -> Callable:
    return factory(**dict(options))


def _build(factory: Callable, **options: Any) -> Callable:
    """`factory(**options)`, built once per set of options (a math reward starts its workers, a code reward its
    sandbox)."""
    return _cached(factory, tuple(sorted(options.items())))


# --------------------------------------------------------------------------------------------------------------------
# Plain rewards
# --------------------------------------------------------------------------------------------------------------------
def accuracy_reward(completions: list, solution: list[str], **kwargs) -> list[float | None]:
    """1.0 when the completion's final answer equals the gold `solution` (math-verify), else 0.0; None when the
    gold cannot be parsed.

    Example:
        >>> accuracy_reward([[{"role": "assistant", "content": r"\\boxed{4}"}]], ["4"])
        [1.0]
    """
    return _build(make_accuracy_reward)(completions, solution=solution, **kwargs)


def format_reward(completions: list, **kwargs) -> list[float]:
    """1.0 for exactly one `<think>...</think>` block followed by one `<answer>...</answer>` block, else 0.0."""
    return _build(make_format_reward)(completions, **kwargs)


def tag_count_reward(completions: list, **kwargs) -> list[float]:
    """0.25 for each of `<think>`, `</think>`, `<answer>`, `</answer>` present exactly once."""
    return _build(make_tag_count_reward)(completions, **kwargs)


def reasoning_steps_reward(completions: list, **kwargs) -> list[float]:
    """min(1, steps / 3), counting "Step N:", numbered lines, bullets and First/Second/Next/Finally."""
    return _build(make_reasoning_steps_reward)(completions, **kwargs)


def len_reward(completions: list, solution: list[str], **kwargs) -> list[float | None]:
    """Kimi 1.5 length reward: 0.5 - (L - min) / (max - min) for a correct answer, min(0, that) for a wrong one,
    within each prompt group (all completions of the call when `prompts` is not given)."""
    return _build(make_length_reward)(completions, solution=solution, **kwargs)


def _check_same_language(verification_info: Any) -> None:
    languages = {str(as_mapping(info).get("language", "python")) for info in verification_info or []}
    if len(languages) > 1:
        raise ValueError(f"enforce_same_language is set but the batch mixes languages {sorted(languages)}")


def _test_case_reward(factory: Callable, completions: list, num_parallel: int, provider_type: str,
                      enforce_same_language: bool, kwargs: dict) -> list[float | None]:
    if enforce_same_language:
        _check_same_language(kwargs.get("verification_info"))
    routers = {key: kwargs[key] for key in ("e2b_router_url", "morph_router_url") if kwargs.get(key)}
    reward = _build(factory, provider=provider_type, num_parallel=num_parallel, **routers)
    return reward(completions, **{k: v for k, v in kwargs.items() if not k.endswith("_router_url")})


def code_reward(completions: list, num_parallel: int = 2, provider_type: str = "e2b",
                enforce_same_language: bool = False, **kwargs) -> list[float | None]:
    """The fraction of the row's test cases (`verification_info`) the completion's last fenced block passes."""
    return _test_case_reward(make_code_reward, completions, num_parallel, provider_type, enforce_same_language, kwargs)


def binary_code_reward(completions: list, num_parallel: int = 2, provider_type: str = "e2b",
                       enforce_same_language: bool = False, **kwargs) -> list[float | None]:
    """1.0 when every test case passes, else 0.0."""
    return _test_case_reward(make_binary_code_reward, completions, num_parallel, provider_type, enforce_same_language,
                             kwargs)


def ioi_code_reward(completions: list, test_batch_size: int = 1, provider_type: str = "piston",
                    **kwargs) -> list[float | None]:
    """IOI subtask score (rows of `open-r1/ioi`): the minimum test score of the subtask."""
    return _build(make_ioi_code_reward, provider=provider_type, test_batch_size=test_batch_size)(completions, **kwargs)


def cf_code_reward(completions: list, test_batch_size: int = 1, patch_code: bool = False,
                   scoring_mode: str = "weighted_sum", **kwargs) -> list[float | None]:
    """Codeforces score (rows of `open-r1/codeforces`), `scoring_mode` pass_fail, partial or weighted_sum."""
    reward = _build(make_cf_code_reward, scoring_mode=scoring_mode, test_batch_size=test_batch_size, patch=patch_code)
    return reward(completions, **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------------------------------------
def get_cosine_scaled_reward(min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                             min_value_correct: float = 0.5, max_value_correct: float = 1.0,
                             max_len: int = 1000) -> Callable:
    """Correctness scaled by length on a cosine: a short correct answer earns `max_value_correct`, one of `max_len`
    or more `min_value_correct`; a short wrong one `min_value_wrong`, a long wrong one `max_value_wrong`."""
    return _build(make_cosine_reward, min_value_wrong=min_value_wrong, max_value_wrong=max_value_wrong,
                  min_value_correct=min_value_correct, max_value_correct=max_value_correct, max_len=max_len)


def get_repetition_penalty_reward(ngram_size: int, max_penalty: float, language: str = "en") -> Callable:
    """(1 - distinct n-grams / n-grams) x `max_penalty` (<= 0); `language` en (words) or zh (jieba)."""
    return _build(make_repetition_penalty_reward, n_grams=ngram_size, max_penalty=max_penalty, language=language)


def get_soft_overlong_punishment(max_completion_len: int, soft_punish_cache: int) -> Callable:
    """DAPO's soft overlong punishment on token counts: 0 up to `max_completion_len - soft_punish_cache`, then a
    ramp down to -1 at `max_completion_len`, -1 beyond. The returned function takes `completion_ids` first, as
    Open-R1's does."""
    reward = _build(make_soft_overlong_punishment, max_completion_len=max_completion_len,
                    soft_punish_cache=soft_punish_cache)

    def soft_overlong_punishment_reward(completion_ids: list[list[int]], **kwargs) -> list[float | None]:
        return reward(completion_ids=completion_ids, **kwargs)

    return soft_overlong_punishment_reward


def get_code_format_reward(language: str = "python") -> Callable:
    """1.0 for the think/answer format with a fenced `language` block in the answer (a row's `language` column wins)."""
    return _build(make_code_format_reward, language=language)


def extract_code(completion: str, language: str | None = "python") -> str:
    """The last fenced block of `language` in `completion`, or "" (also for `language=None`)."""
    if language is None:
        return ""
    return last_block(completion, normalise_language(language))


OPEN_R1_NAMES = (
    "accuracy_reward", "format_reward", "tag_count_reward", "reasoning_steps_reward", "len_reward", "code_reward",
    "binary_code_reward", "ioi_code_reward", "cf_code_reward", "get_cosine_scaled_reward",
    "get_repetition_penalty_reward", "get_soft_overlong_punishment", "get_code_format_reward", "extract_code",
)  # and get_reward_funcs(script_args), which `r1kit.rewards` defines itself
