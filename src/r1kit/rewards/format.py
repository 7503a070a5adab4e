"""Rewards on the shape of a completion: format, tag_count, reasoning_steps, repetition, length limits, code fences."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, get_args

from r1kit.errors import ConfigError
from r1kit.rewards.text import per_sample, texts

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE = TAGS


def think_answer_parts(text: str, think_prefilled: bool = False) -> tuple[str, str] | None:
    """(think, answer) when `text` is exactly one think block then one answer block and nothing else (whitespace
    around the blocks aside).

    With `think_prefilled`, the opening `<think>` may be missing (it sits in the prompt, as with R1-Distill templates).

    Read with `str.find` in one pass, linear in the text: neither block may contain a tag, so the think block ends at
    the first `</think>` and the answer block at the first `</answer>` after it (a lazy regex tried every later
    closing tag instead, quadratic on a completion of repeated tags).
    """
    body = text.strip()
    if body.startswith(THINK_OPEN):
        body = body[len(THINK_OPEN) :]
    elif not think_prefilled:
        return None
    think_end = body.find(THINK_CLOSE)
    if think_end < 0:
        return None
    rest = body[think_end + len(THINK_CLOSE) :].lstrip()
    if not rest.startswith(ANSWER_OPEN) or not rest.endswith(ANSWER_CLOSE):
        return None
    think, answer = body[:think_end], rest[len(ANSWER_OPEN) : -len(ANSWER_CLOSE)]
    if len(rest) < len(ANSWER_OPEN) + len(ANSWER_CLOSE) or any(tag in think or tag in answer for tag in TAGS):
        return None
    return think, answer


def make_format_reward(think_prefilled: bool = False) -> Callable:
    """Builds the `format` reward.

    Args:
        think_prefilled (`bool`, defaults to `False`): accept completions that start inside the think block (the
            chat template's generation prompt ends in `<think>`; recipe: `format_think_prefilled`).

    Returns:
        `Callable`: `format_reward(completions, **kwargs)`.
    """
    prefilled = bool(think_prefilled)

    def format_reward(completions, **kwargs) -> list[float]:
        """1.0 for exactly one `<think>...</think>` block then one `<answer>...</answer>` block and nothing else.

        Args:
            completions (`list`): completions, plain or conversational.

        Returns:
            `list[float]`: 1.0 or 0.0 per completion.

        Example:
            >>> format_reward(["<think>a</think><answer>b</answer>", "<answer>b</answer>"])
            [1.0, 0.0]
        """
        return [1.0 if think_answer_parts(t, prefilled) is not None else 0.0 for t in texts(completions)]

    return format_reward


def make_tag_count_reward(think_prefilled: bool = False) -> Callable:
    """Builds the `tag_count` reward.

    Args:
        think_prefilled (`bool`, defaults to `False`): count a missing `<think>` as present (it sits in the prompt;
            recipe: `format_think_prefilled`).

    Returns:
        `Callable`: `tag_count_reward(completions, **kwargs)`.
    """
    prefilled = bool(think_prefilled)

    def tag_count_reward(completions, **kwargs) -> list[float]:
        """0.25 for each of `<think>`, `</think>`, `<answer>`, `</answer>` present exactly once.

        Returns:
            `list[float]`: 0, 0.25, 0.5, 0.75 or 1.0 per completion.

        Example:
            >>> tag_count_reward(["<think>a</think>"])
            [0.5]
        """
        rewards = []
        for text in texts(completions):
            counts = {tag: text.count(tag) for tag in TAGS}
            if prefilled and counts["<think>"] == 0:
                counts["<think>"] = 1
            rewards.append(0.25 * sum(c == 1 for c in counts.values()))
        return rewards

    return tag_count_reward


_STEP = re.compile(r"Step \d+:|^[ \t]*\d+\.\s|^[ \t]*[-*•][ \t]|\b(?:First|Second|Next|Finally),", re.MULTILINE)


def make_reasoning_steps_reward() -> Callable:
    """Builds the `reasoning_steps` reward (it has no parameters)."""

    def reasoning_steps_reward(completions, **kwargs) -> list[float]:
        """min(1, steps / 3), counting "Step N:", numbered lines, "- " / "* " bullets and First/Second/Next/Finally.

        Example:
            >>> reasoning_steps_reward(["Step 1: a Step 2: b"])
            [0.6666666666666666]
        """
        return [min(1.0, len(_STEP.findall(t)) / 3) for t in texts(completions)]

    return reasoning_steps_reward


RepetitionLanguage = Literal["en", "zh"]  # whitespace words, or jieba's tokens


def check_repetition_params(n_grams: int, max_penalty: float, language: str = "en") -> None:
    """The repetition penalty's parameter rules, checked where the reward is built and where the recipe is read.

    Raises:
        `ConfigError` (a `ValueError`) naming the recipe field: `repetition_max_penalty` above 0,
        `repetition_n_grams` below 1, `repetition_language` not one of `en`, `zh`.
    """
    if max_penalty > 0:
        # Both names: the recipe field's, and Open-R1's own message (its test matches "max_penalty 1.5 should not be
        # positive"), since the function is also called as Open-R1's get_repetition_penalty_reward.
        raise ConfigError(f"repetition_max_penalty must be <= 0: max_penalty {max_penalty} should not be positive")
    if n_grams < 1:
        raise ConfigError(f"repetition_n_grams must be >= 1, got {n_grams}")
    if language not in get_args(RepetitionLanguage):
        raise ConfigError(f"repetition_language must be one of {', '.join(get_args(RepetitionLanguage))}, "
                          f"got {language!r}")


def _words(text: str, language: RepetitionLanguage) -> list[str]:
    if language == "en":
        return text.lower().split()
    if language == "zh":
        try:
            import jieba
        except ImportError:
            raise ImportError("repetition_penalty with language 'zh' needs jieba: pip install 'r1kit[zh]'") from None
        return list(jieba.cut(text))
    raise ValueError(f"repetition_penalty language must be 'en' or 'zh', got {language!r}")


def repetition_penalty(text: str, n: int, max_penalty: float, language: RepetitionLanguage = "en") -> float:
    """(1 - unique n-grams / n-grams) * max_penalty; 0.0 for texts shorter than n words."""
    words = _words(text, language)
    if len(words) < n:
        return 0.0
    ngrams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return (1 - len(set(ngrams)) / len(ngrams)) * max_penalty


def make_repetition_penalty_reward(n_grams: int = 3, max_penalty: float = -1.0,
                                   language: RepetitionLanguage = "en") -> Callable:
    """Builds the `repetition_penalty` reward.

    Args:
        n_grams (`int`, defaults to `3`): n of the n-grams (recipe: `repetition_n_grams`).
        max_penalty (`float`, defaults to `-1.0`): the penalty of a text that is one n-gram repeated; must be <= 0
            (recipe: `repetition_max_penalty`).
        language (`str`, defaults to `"en"`): `en` (whitespace words) or `zh` (jieba; recipe: `repetition_language`).

    Returns:
        `Callable`: `repetition_penalty_reward(completions, **kwargs)`.

    Raises:
        `ConfigError` for a parameter that breaks `check_repetition_params`; `ImportError` for `zh` without jieba.
    """
    check_repetition_params(n_grams, max_penalty, language)
    _words("", language)  # fail now, not mid-training, when jieba is missing

    def repetition_penalty_reward(completions, **kwargs) -> list[float]:
        """(1 - distinct n-grams / n-grams) x `repetition_max_penalty` (<= 0), over words (en) or jieba tokens (zh).

        Example (n 2, max penalty -1):
            >>> repetition_penalty_reward(["a b a b"])
            [-0.3333333333333333]
        """
        return [repetition_penalty(t, n_grams, max_penalty, language) for t in texts(completions)]

    return repetition_penalty_reward


DEFAULT_OVERLONG_LIMIT = 16384  # tokens, when neither the recipe nor the trainer gives a limit


def soft_overlong_limits(max_completion_len: int | None = None, soft_punish_cache: int | None = None) -> tuple[int, int]:
    """(limit, ramp width) in tokens: the given values; the limit defaults to `DEFAULT_OVERLONG_LIMIT` and the ramp
    to a quarter of the limit.

    Raises:
        `ConfigError` (a `ValueError`) when the ramp is not in (0, limit].
    """
    limit = max_completion_len or DEFAULT_OVERLONG_LIMIT
    cache = soft_punish_cache if soft_punish_cache is not None else max(1, limit // 4)
    if not 0 < cache <= limit:
        raise ConfigError(f"soft_punish_cache ({cache}) must be in (0, max_completion_len ({limit})]")
    return limit, cache


def make_soft_overlong_punishment(max_completion_len: int | None = None, soft_punish_cache: int | None = None) -> Callable:
    """Builds the `soft_overlong_punishment` reward (DAPO).

    Args:
        max_completion_len (`int` or `None`, defaults to `None`): the limit in tokens; `None` is
            `DEFAULT_OVERLONG_LIMIT`. The registry passes the recipe's `max_completion_len`, else the trainer's
            `max_completion_length`, so that the punishment fires within what the trainer can generate.
        soft_punish_cache (`int` or `None`, defaults to `None`): width of the ramp in tokens; `None` is a quarter of
            the limit (recipe: `soft_punish_cache`).

    Returns:
        `Callable`: `soft_overlong_punishment_reward(completions=None, completion_ids=None, **kwargs)`.
    """
    limit, cache = soft_overlong_limits(max_completion_len, soft_punish_cache)

    def soft_overlong_punishment_reward(completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        """DAPO's soft overlong punishment on token counts: 0 up to limit - cache, then down to -1 at the limit.

        Args:
            completion_ids (`list[list[int]]`): token ids of the completions (TRL passes them).

        Returns:
            `list[float | None]`: in [-1, 0]; None when the token ids are not given.

        Example (limit 100, cache 20):
            >>> soft_overlong_punishment_reward(completion_ids=[[0] * 80, [0] * 90, [0] * 120])
            [0.0, -0.5, -1.0]
        """
        if completion_ids is None:  # lengths unknown: cannot judge
            return [None] * len(completions or [])
        rewards = []
        for ids in completion_ids:
            length = len(ids)
            if length <= limit - cache:
                rewards.append(0.0)
            elif length <= limit:
                rewards.append((limit - cache - length) / cache)
            else:
                rewards.append(-1.0)
        return rewards

    return soft_overlong_punishment_reward


FENCE = "```"


def fenced_blocks(text: str, language: str) -> list[str]:
    """Contents of the fenced code blocks of `language` in `text`, in order: a fence, the language (any case), spaces
    or tabs, a newline, then everything up to the next fence.

    One pass with `str.find`, linear in the text (a lazy regex rescanned the rest of the text from every opening
    fence): every opening fence contains a fence, so once an opening has no fence after it no later one has either.
    """
    blocks, start, tag = [], 0, language.lower()
    while (fence := text.find(FENCE, start)) >= 0:
        head = fence + len(FENCE)
        if text[head : head + len(tag)].lower() != tag:
            start = head - 2  # a run of backticks: the next fence may start one character later
            continue
        newline = head + len(tag)
        while newline < len(text) and text[newline] in " \t":
            newline += 1
        if newline >= len(text) or text[newline] != "\n":
            start = head - 2
            continue
        closing = text.find(FENCE, newline + 1)
        if closing < 0:
            break
        blocks.append(text[newline + 1 : closing])
        start = closing + len(FENCE)
    return blocks


def make_code_format_reward(language: str = "python", think_prefilled: bool = False) -> Callable:
    """Builds the `code_format` reward.

    Args:
        language (`str`, defaults to `"python"`): fence language expected when a row has no `language` column
            (recipe: `code_language`).
        think_prefilled (`bool`, defaults to `False`): as for `make_format_reward` (recipe: `format_think_prefilled`).

    Returns:
        `Callable`: `code_format_reward(completions, language=None, **kwargs)`.
    """
    default_language = language
    prefilled = bool(think_prefilled)

    def code_format_reward(completions, language=None, **kwargs) -> list[float]:
        """1.0 for the think/answer format with a fenced block of the row's `language` (else `code_language`) in the
        answer.

        Example:
            >>> code_format_reward(["<think>x</think><answer>```python\nprint(1)\n```</answer>"])
            [1.0]
        """
        languages = per_sample(language, len(completions))
        rewards = []
        for text, lang in zip(texts(completions), languages):
            parts = think_answer_parts(text, prefilled)
            ok = parts is not None and bool(fenced_blocks(parts[1], lang or default_language))
            rewards.append(1.0 if ok else 0.0)
        return rewards

    return code_format_reward
