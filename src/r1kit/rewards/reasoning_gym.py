"""The `reasoning_gym` reward: each completion graded by its reasoning-gym generator's own `score_answer`.

The answer is read from the completion (`extract_answer`): the last `<answer>…</answer>` block when there is one;
otherwise, as the recipe's `reasoning_gym_answer` says, `last_number` (default): for a numeric gold the last number
in the text (a small model says "The answer is 8."), for any other gold the last non-empty line; or `reply`: the
whole reply, which reasoning-gym's scorers compare with the gold (many give partial credit to a reply that contains
it, so a reply of the bare answer earns most). The row's `reasoning_gym` column (written by the `reasoning-gym:<generator>`
source) holds the generator, its options and the entry the scorer compares against.

Every completion is hostile input: the answer is cut to `MAX_ANSWER_CHARS`, a scorer that raises scores 0.0 (logged
once per exception type), and on the main thread a scorer still busy after `reward_timeout` seconds is interrupted
and scores 0.0. A row that cannot be judged (no or unreadable `reasoning_gym` record, reasoning-gym missing) scores
None, which TRL leaves out of the group baseline.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from r1kit.reasoning_gym import is_number
from r1kit.rewards.text import per_sample, texts

logger = logging.getLogger(__name__)

ANSWER_MODES = ("last_number", "reply")
MAX_ANSWER_CHARS = 1000  # an answer longer than this is cut to its last 1000 characters before scoring
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_REPORTED: set[str] = set()


def extract_answer(completion: str, gold: str, mode: str = "last_number") -> str:
    """The answer a completion gives, as text (empty when it gives none).

    Args:
        completion (`str`): the model's output.
        gold (`str`): the gold answer; a numeric gold makes the last number the answer when no tag is used.
        mode (`str`, defaults to `"last_number"`): without an `<answer>` block, `last_number` reads the last number
            (numeric gold) or last non-empty line; `reply` takes the whole reply, stripped.

    Returns:
        `str`: the last `<answer>` block (stripped), else what `mode` reads.

    Example:
        >>> extract_answer("5 - 9 is -4.", "-4")
        '-4'
    """
    completion = str(completion)
    blocks = _ANSWER_BLOCK.findall(completion)
    if blocks:
        return blocks[-1].strip()[-MAX_ANSWER_CHARS:]
    if mode == "reply":
        return completion.strip()[-MAX_ANSWER_CHARS:]
    if is_number(gold):
        numbers = _NUMBER.findall(completion[-MAX_ANSWER_CHARS:])
        return numbers[-1].rstrip(",") if numbers else ""
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1][-MAX_ANSWER_CHARS:] if lines else ""


def _parse_record(record: Any) -> dict | None:
    """The row's `reasoning_gym` record as a dict with `generator`, `options` and `entry`, or None when unreadable."""
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except ValueError:
            return None
    if not isinstance(record, dict) or not isinstance(record.get("entry"), dict) or "answer" not in record["entry"]:
        return None
    if not isinstance(record.get("generator"), str) or not isinstance(record.get("options", {}), dict):
        return None
    return record


@functools.lru_cache(maxsize=64)
def _scorer(generator: str, options_json: str):
    """The generator's dataset object (whose `score_answer` grades), built once per generator and options."""
    import reasoning_gym

    return reasoning_gym.create_dataset(generator, size=1, seed=0, **json.loads(options_json))


class _ScoringTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float):
    """Interrupts the block after `seconds` with `_ScoringTimeout`, on the main thread (signals work only there);
    elsewhere the block runs without a limit."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def _expire(signum, frame):
        raise _ScoringTimeout

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _report_once(kind: str, message: str, *args) -> None:
    if kind not in _REPORTED:
        _REPORTED.add(kind)
        logger.warning(message, *args)


def score_completion(completion: str, record: Any, timeout: float = 5.0, mode: str = "last_number") -> float | None:
    """The generator's score (0.0 to 1.0) of one completion, or None when the row cannot be judged.

    Args:
        completion (`str`): the model's output.
        record (`str` or `dict`): the row's `reasoning_gym` column.
        timeout (`float`, defaults to 5.0): seconds the scorer may take (main thread only) before the answer scores 0.
        mode (`str`, defaults to `"last_number"`): how the answer is read without an `<answer>` block (`extract_answer`).

    Example:
        >>> record = {"generator": "chain_sum", "options": {}, "entry": {"question": "1 + 2 =", "answer": "3", "metadata": {}}}
        >>> score_completion("The answer is 3.", record)
        1.0
    """
    parsed = _parse_record(record)
    if parsed is None:
        return None
    try:
        scorer = _scorer(parsed["generator"], json.dumps(parsed.get("options", {}), sort_keys=True))
    except ImportError:
        _report_once("import", "reasoning-gym is not installed: reasoning_gym rewards are None (skipped).")
        return None
    except Exception as e:  # noqa: BLE001 - an unknown generator or options in the data: the row cannot be judged
        _report_once(f"scorer:{type(e).__name__}", "Cannot build the reasoning-gym scorer for %s (%s): rows skipped.",
                     parsed["generator"], e)
        return None
    answer = extract_answer(completion, str(parsed["entry"]["answer"]), mode)
    try:
        with _time_limit(timeout):
            score = float(scorer.score_answer(answer, parsed["entry"]))
    except _ScoringTimeout:
        _report_once("timeout", "A reasoning-gym scorer ran past %.1f s; the answer scores 0 (logged once).", timeout)
        return 0.0
    except Exception as e:  # noqa: BLE001 - hostile answers must not stop training; reported once per type
        _report_once(type(e).__name__, "A reasoning-gym scorer raised %s: %s; the answer scores 0 (logged once).",
                     type(e).__name__, str(e)[:200])
        return 0.0
    return min(1.0, max(0.0, score)) if score == score else 0.0  # NaN scores 0


def score_completions(
    completions: list[str], records: list[Any], timeout: float = 5.0, mode: str = "last_number"
) -> list[float | None]:
    """`score_completion` for each (completion, record) pair."""
    return [score_completion(c, r, timeout, mode) for c, r in zip(completions, records)]


def make_reasoning_gym_reward(script_args: Any, training_args: Any = None) -> Callable:
    timeout = getattr(script_args, "reward_timeout", 5.0)
    mode = getattr(script_args, "reasoning_gym_answer", "last_number")

    def reasoning_gym_reward(completions, reasoning_gym=None, log_metric=None, **kwargs) -> list[float | None]:
        """Each completion's score by its reasoning-gym generator's `score_answer` (see `extract_answer`).

        Args:
            completions (`list[str]` or `list[list[dict]]`): completions, plain or conversational.
            reasoning_gym (`list[str]`): the rows' `reasoning_gym` records (JSON: generator, options, entry).
            log_metric (`Callable`, *optional*): TRL's metric logger; receives the count of unjudgeable rows.

        Returns:
            `list[float | None]`: 0.0 to 1.0 per completion; None for a row that cannot be judged (skipped).

        Example:
            >>> record = '{"generator": "chain_sum", "options": {}, "entry": {"question": "4 - 1 =", "answer": "3"}}'
            >>> reasoning_gym_reward(["It is 3.", "It is 4."], reasoning_gym=[record, record])
            [1.0, 0.0]
        """
        records = per_sample(reasoning_gym, len(completions))
        scores = score_completions(texts(completions), records, timeout, mode)
        if log_metric is not None:
            log_metric("rewards/reasoning_gym/unjudgeable", float(sum(s is None for s in scores)))
        return scores

    return reasoning_gym_reward
