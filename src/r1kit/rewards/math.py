"""Rewards that check a math answer against the `solution` column: accuracy, cosine, length.

All three judge correctness the same way (`r1kit.rewards.verify`), so a gold that parses for one parses for all, and
all three score an unparseable gold `None` and count it in `rewards/<name>/unparseable_gold`.

An answer that restates the question's computation instead of its result (`<answer>499+296</answer>` for `499+296=`:
`r1kit.judging.copies.restates_question`) is wrong, though math-verify evaluates it to the gold: copying the question into
the answer is a rule that pays on every row. Counted in `rewards/<name>/copied`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import groupby

from r1kit.errors import ConfigError
from r1kit.judging.answers import all_boxed, last_answer
from r1kit.judging.copies import question_text, restates_question
from r1kit.rewards.text import per_sample, texts
from r1kit.rewards.verify import CORRECT, DEFAULT_TIMEOUT, TIMEOUT, UNPARSEABLE_GOLD, WRONG, get_pool, judge_batch

COPIED = "copied"  # an outcome: the answer restates the question (wrong)


def copied(completion: str, gold, prompt) -> bool:
    """Whether an answer the verifier may read (any `\\boxed{}`, the last `<answer>` block) restates the question's
    computation (`restates_question`)."""
    question = question_text(prompt)
    if gold is None or not question:
        return False
    answers = all_boxed(completion[-20_000:]) + [last_answer(completion[-20_000:]) or ""]
    return any(restates_question(answer, str(gold), question) for answer in answers if answer)


def _judge(name: str, completions, solution, log_metric, timeout: float, workers: int | None,
           prompts=None) -> list[str]:
    golds = per_sample(solution, len(completions))
    answers = texts(completions)
    outcomes = judge_batch(golds, answers, timeout=timeout, workers=workers)
    questions = per_sample(prompts, len(completions))
    outcomes = [COPIED if o == CORRECT and copied(a, g, q) else o
                for o, a, g, q in zip(outcomes, answers, golds, questions)]
    if log_metric is not None:
        log_metric(f"rewards/{name}/unparseable_gold", float(sum(o == UNPARSEABLE_GOLD for o in outcomes)))
        log_metric(f"rewards/{name}/timeouts", float(sum(o == TIMEOUT for o in outcomes)))
        log_metric(f"rewards/{name}/copied", float(sum(o == COPIED for o in outcomes)))
    return [WRONG if o == COPIED else o for o in outcomes]


def make_accuracy_reward(timeout: float = DEFAULT_TIMEOUT, workers: int | None = None) -> Callable:
    """Builds the `accuracy` reward, and starts the verifier workers (so that they import while the model loads).

    Args:
        timeout (`float`, defaults to `DEFAULT_TIMEOUT`, 5 s): seconds allowed to verify one answer; past it the
            sample is wrong and counted in `rewards/<name>/timeouts` (recipe: `reward_timeout`).
        workers (`int` or `None`, defaults to `None`): math-verify worker processes; `None` is the number of cores,
            at most 8 (recipe: `reward_workers`).

    Returns:
        `Callable`: `accuracy_reward(completions, solution, log_metric=None, **kwargs)`.
    """
    get_pool(workers).warm_up()

    def accuracy_reward(completions, solution=None, log_metric=None, **kwargs) -> list[float | None]:
        """Whether each completion's final answer equals the gold answer, by math-verify.

        Args:
            completions (`list[str]` or `list[list[dict]]`): completions, plain or conversational.
            solution (`list[str]`): gold answers (LaTeX, `$...$`, or plain numbers).
            log_metric (`Callable`, *optional*): TRL's metric logger; receives the unparseable-gold and time-out counts.

        Returns:
            `list[float | None]`: 1.0 or 0.0 per completion; None when the gold cannot be parsed (skipped).

        Example:
            >>> accuracy_reward([r"so \\boxed{4}", r"\\boxed{5}"], solution=["4", "4"])
            [1.0, 0.0]
        """
        outcomes = _judge("accuracy", completions, solution, log_metric, timeout, workers, kwargs.get("prompts"))
        return [None if o == UNPARSEABLE_GOLD else float(o == CORRECT) for o in outcomes]

    return accuracy_reward


def _lengths(completions, completion_ids) -> list[int]:
    """Token counts when the ids are given, else characters."""
    if completion_ids is not None:
        return [len(ids) for ids in completion_ids]
    return [len(t) for t in texts(completions)]


def cosine_scaled(correct: bool, length: int, max_len: int, bounds: tuple[float, float, float, float]) -> float:
    """Open-R1's cosine length scaling with the ratio clamped at 1 (no wrap-around past `max_len`).

    `bounds` = (min_value_wrong, max_value_wrong, min_value_correct, max_value_correct); length 0 gets the
    `max_value_correct` / `min_value_wrong` end, `max_len` and beyond the other.
    """
    min_wrong, max_wrong, min_correct, max_correct = bounds
    lo, hi = (min_correct, max_correct) if correct else (max_wrong, min_wrong)
    progress = min(1.0, length / max_len)
    return lo + 0.5 * (hi - lo) * (1.0 + math.cos(progress * math.pi))


def check_cosine_bounds(min_value_wrong: float, max_value_wrong: float, min_value_correct: float,
                        max_value_correct: float, max_len: int) -> None:
    """The cosine reward's parameter rules, checked where the reward is built and where the recipe is read.

    Raises:
        `ConfigError` (a `ValueError`) naming the recipe fields: the bounds must be ordered `cosine_min_value_wrong`
        <= `cosine_max_value_wrong` <= `cosine_min_value_correct` <= `cosine_max_value_correct` (a right answer never
        earns less than a wrong one), and `cosine_max_len` must be positive.
    """
    bounds = {
        "cosine_min_value_wrong": min_value_wrong,
        "cosine_max_value_wrong": max_value_wrong,
        "cosine_min_value_correct": min_value_correct,
        "cosine_max_value_correct": max_value_correct,
    }
    values = list(bounds.values())
    if any(a > b for a, b in zip(values, values[1:])):
        raise ConfigError(f"cosine bounds must be ordered {' <= '.join(bounds)}, got {bounds}")
    if max_len <= 0:
        raise ConfigError(f"cosine_max_len must be positive, got {max_len}")


def make_cosine_reward(min_value_wrong: float = -1.0, max_value_wrong: float = -0.5, min_value_correct: float = 0.5,
                       max_value_correct: float = 1.0, max_len: int = 1000, timeout: float = DEFAULT_TIMEOUT,
                       workers: int | None = None) -> Callable:
    """Builds the `cosine` reward (and starts the verifier workers).

    Args:
        min_value_wrong (`float`, defaults to `-1.0`): a wrong answer of length 0 (recipe: `cosine_min_value_wrong`).
        max_value_wrong (`float`, defaults to `-0.5`): a wrong answer of `max_len` or more (`cosine_max_value_wrong`).
        min_value_correct (`float`, defaults to `0.5`): a right answer of `max_len` or more
            (`cosine_min_value_correct`).
        max_value_correct (`float`, defaults to `1.0`): a right answer of length 0 (`cosine_max_value_correct`).
        max_len (`int`, defaults to `1000`): the length scale, in tokens when ids are given (`cosine_max_len`).
        timeout (`float`), workers (`int` or `None`): as for `make_accuracy_reward`.

    Returns:
        `Callable`: `cosine_scaled_reward(completions, solution, completion_ids=None, log_metric=None, **kwargs)`.

    Raises:
        `ConfigError` for parameters that break `check_cosine_bounds`.
    """
    check_cosine_bounds(min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len)
    bounds = (min_value_wrong, max_value_wrong, min_value_correct, max_value_correct)
    get_pool(workers).warm_up()

    def cosine_scaled_reward(
        completions, solution=None, completion_ids=None, log_metric=None, **kwargs
    ) -> list[float | None]:
        """Correctness scaled by length on a cosine: short right answers earn most, short wrong ones lose most.

        Args:
            completions (`list`): completions, plain or conversational.
            solution (`list[str]`): gold answers.
            completion_ids (`list[list[int]]`, *optional*): token ids; lengths are tokens when given, else characters.

        Returns:
            `list[float | None]`: between the configured bounds; None for an unparseable gold.

        Example (defaults 0/-0.5/0.5/1, max_len 1000):
            >>> cosine_scaled_reward([r"\\boxed{4}"], solution=["4"], completion_ids=[[0] * 1000])
            [0.5]
        """
        outcomes = _judge("cosine", completions, solution, log_metric, timeout, workers, kwargs.get("prompts"))
        return [
            None if o == UNPARSEABLE_GOLD else cosine_scaled(o == CORRECT, n, max_len, bounds)
            for o, n in zip(outcomes, _lengths(completions, completion_ids))
        ]

    return cosine_scaled_reward


def _group_slices(prompts, n: int) -> list[range]:
    """Runs of consecutive samples sharing a prompt (TRL lays a prompt's completions side by side)."""
    if prompts is None:
        return [range(n)]
    slices, start = [], 0
    for _, run in groupby(repr(p) for p in prompts):
        size = sum(1 for _ in run)
        slices.append(range(start, start + size))
        start += size
    return slices


def kimi_length_rewards(correct: list[bool | None], lengths: list[int]) -> list[float | None]:
    """Kimi 1.5 length reward over one group: lambda = 0.5 - (L - min) / (max - min); a wrong answer gets min(0, lambda).
    `None` in `correct` (unjudgeable) stays None and does not set the group's min/max."""
    judged = [n for c, n in zip(correct, lengths) if c is not None]
    if not judged:
        return [None] * len(correct)
    lo, hi = min(judged), max(judged)
    out: list[float | None] = []
    for c, n in zip(correct, lengths):
        if c is None:
            out.append(None)
        elif hi == lo:
            out.append(0.0)
        else:
            lam = 0.5 - (n - lo) / (hi - lo)
            out.append(lam if c else min(0.0, lam))
    return out


def make_length_reward(timeout: float = DEFAULT_TIMEOUT, workers: int | None = None) -> Callable:
    """Builds the `length` reward (and starts the verifier workers).

    Args:
        timeout (`float`), workers (`int` or `None`): as for `make_accuracy_reward`.

    Returns:
        `Callable`: `len_reward(completions, solution, completion_ids=None, prompts=None, log_metric=None, **kwargs)`.
    """
    get_pool(workers).warm_up()

    def len_reward(
        completions, solution=None, completion_ids=None, prompts=None, log_metric=None, **kwargs
    ) -> list[float | None]:
        """Kimi 1.5 length reward within each prompt group: lambda = 0.5 - (L - min) / (max - min); a wrong answer
        gets min(0, lambda).

        Args:
            completions (`list`): completions; solution (`list[str]`): gold answers; prompts (`list`, *optional*):
                groups are runs of equal prompts (the whole call without them).

        Returns:
            `list[float | None]`: in [-0.5, 0.5]; None for an unparseable gold.

        Example:
            >>> len_reward([r"\\boxed{4}", r"\\boxed{4}" + " " * 100], solution=["4", "4"])
            [0.5, -0.5]
        """
        outcomes = _judge("length", completions, solution, log_metric, timeout, workers, prompts)
        correct = [None if o == UNPARSEABLE_GOLD else o == CORRECT for o in outcomes]
        lengths = _lengths(completions, completion_ids)
        rewards: list[float | None] = [None] * len(completions)
        for group in _group_slices(prompts, len(completions)):
            for i, r in zip(group, kimi_length_rewards([correct[i] for i in group], [lengths[i] for i in group])):
                rewards[i] = r
        return rewards

    return len_reward
