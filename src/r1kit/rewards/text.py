"""Helpers shared by the rewards: reading completion text whatever shape TRL hands it in, the `<answer>` block, and
warnings logged once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MODEL_ROLES = ("assistant", None)  # the turns the policy wrote (a message without a role is the model's)


def completion_text(completion: Any) -> str:
    """The text the model wrote as its answer: a plain string; a message's content; for a conversation (a tool
    rollout) the content of its last message when the model wrote it, else "": a rollout that ends on a tool's turn
    (cut off at the call, the tool's reply filling the length) has no answer, and what the tool printed is never the
    model's (a tool's `<answer>42</answer>` was paid 1.0)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        last = completion[-1]
        if isinstance(last, dict) and last.get("role") not in MODEL_ROLES:
            return ""
        return completion_text(last)
    return str(completion)


def message_text(messages: Any) -> str:
    """The text of a conversation's last message whoever wrote it (a prompt's question), or of a plain string."""
    if isinstance(messages, (list, tuple)):
        return completion_text(messages[-1]) if messages else ""
    return completion_text(messages)


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content parts: keep the text ones
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def texts(completions: list[Any]) -> list[str]:
    return [completion_text(c) for c in completions]


def per_sample(value: Any, n: int) -> list[Any]:
    """A dataset column as a per-sample list (TRL passes lists; a missing column becomes Nones)."""
    if value is None:
        return [None] * n
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value] * n


ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"  # the answer block of the think/answer format


def answer_blocks(text: str) -> list[str]:
    """The contents of the `<answer>...</answer>` blocks of `text`, in order: each block runs from an opening tag to
    the first closing tag after it, and the next block starts after that closing tag.

    One pass with `str.find` (linear in the text): a regex with a lazy `.*?` restarts at every opening tag and scans
    to the end of the text each time, quadratic on a completion of unclosed tags. Once an opening tag has no closing
    tag after it, no later one has either, so the scan stops.
    """
    blocks, start = [], 0
    while (opening := text.find(ANSWER_OPEN, start)) >= 0:
        closing = text.find(ANSWER_CLOSE, opening + len(ANSWER_OPEN))
        if closing < 0:
            break
        blocks.append(text[opening + len(ANSWER_OPEN) : closing])
        start = closing + len(ANSWER_CLOSE)
    return blocks


def last_answer_block(text: str) -> str | None:
    """The contents of the last `<answer>` block (`answer_blocks`), or None when there is none."""
    blocks = answer_blocks(text)
    return blocks[-1] if blocks else None

_LOGGED: set[tuple[str, str]] = set()
_PROBING = False


@contextmanager
def probing() -> Iterator[None]:
    """While the exploit probes score replies made to deserve nothing (`r1kit.probes`): what a reward warns of once
    per run is logged at debug level as the probe's and not counted as said. At the start of a run such a line read
    like a training problem, and it used up the one warning the first such reply in training should get."""
    global _PROBING
    before, _PROBING = _PROBING, True
    try:
        yield
    finally:
        _PROBING = before


def log_once(logger: logging.Logger, key: str, message: str, *args: Any) -> None:
    """Logs `message % args` as a warning the first time `logger` meets `key` in this process, and never again
    (while `probing`: at debug level, not counted)."""
    if _PROBING:
        logger.debug("(a reward probe's reply) " + message, *args)
        return
    if (logger.name, key) not in _LOGGED:
        _LOGGED.add((logger.name, key))
        logger.warning(message, *args)
