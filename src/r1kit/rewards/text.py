"""Helpers shared by the rewards: reading completion text whatever shape TRL hands it in, the `<answer>` block, and
warnings logged once."""

from __future__ import annotations

import logging
import re
from typing import Any


def completion_text(completion: Any) -> str:
    """The text of one completion: a plain string, or the content of the last message of a conversation."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        return completion_text(completion[-1]) if completion else ""
    return str(completion)


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


ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # the answer block of the think/answer format

_LOGGED: set[tuple[str, str]] = set()


def log_once(logger: logging.Logger, key: str, message: str, *args: Any) -> None:
    """Logs `message % args` as a warning the first time `logger` meets `key` in this process, and never again."""
    if (logger.name, key) not in _LOGGED:
        _LOGGED.add((logger.name, key))
        logger.warning(message, *args)
