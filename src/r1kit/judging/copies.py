"""Answers copied from the question: what a policy can build from a prompt without solving it.

A reward that pays such an answer is learnt as a copy rule, which is trivially learnable and scores on every row. The
exploit probes (`r1kit.probes`) score these before training, the rewards refuse them where their scorer would pay
them (`restates_question` for the math rewards; the `reasoning_gym` reward sends them to its scorer process), and
the independent judges (`r1kit.integrity.independent`) re-verify answers against them. Built from the question text
alone, bounded: at most `MAX_PREMISES` statements of at most `MAX_PART` characters each.

    premise          each statement the question gives (numbered or bulleted lines, else its sentences but the last)
    premises         their conjunction (`∧` where the question writes logic, else `and`)
    first_quote      the first quoted statement
    numbers          the question's numbers, in order
    last_sentence    the question's last sentence, without its closing `=`, `?`, `:` or `.`
"""

from __future__ import annotations

import collections
import re
from typing import Any

from r1kit.judging.answers import normalise

COPY_PROBES = ("premise", "premises", "first_quote", "numbers", "last_sentence")
MAX_PREMISES = 8  # statements kept per question: enough for the generators' premise lists, bounded for the probes
MAX_PART = 300  # characters of one copied part
MAX_QUESTION = 20_000  # characters of the question read (the end: where the question is asked)
LOGIC = frozenset("∧∨→¬↔")

_NUMBERED = re.compile(r"^\s*\.?\s*(?:\d{1,3}[.)]|[-*•])\s+(.+?)\s*\.?\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_QUOTES = (re.compile(r"\"([^\"\n]{1,300})\""), re.compile(r"“([^”\n]{1,300})”"),
           re.compile(r"(?<![A-Za-z0-9])'([^'\n]{1,300})'(?![A-Za-z0-9])"))
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])", re.ASCII)
_CLOSING = " \t=?:.;,"


def premises(question: str) -> list[str]:
    """The statements the question gives: its numbered or bulleted lines when it has at least two, else its sentences
    but the last (which asks); each cut to `MAX_PART` characters, at most `MAX_PREMISES`."""
    text = str(question)[-MAX_QUESTION:]
    listed = [m[1] for line in text.splitlines() if (m := _NUMBERED.match(line))]
    if len(listed) < 2:
        flat = " ".join(text.split())
        listed = [s.strip() for s in _SENTENCE_END.split(flat) if s.strip()][:-1]
    parts = [p.strip().rstrip(".").strip()[:MAX_PART] for p in listed]
    return list(dict.fromkeys(p for p in parts if p))[:MAX_PREMISES]


def conjunction(parts: list[str]) -> str | None:
    """The statements joined as one: `(a) ∧ (b)` where they are written in logic notation, else `a and b`."""
    if len(parts) < 2:
        return None
    if any(ch in LOGIC for part in parts for ch in part):
        return " ∧ ".join(f"({p})" for p in parts)
    return " and ".join(parts)


def first_quote(question: str) -> str | None:
    """The first quoted statement (double quotes, curly quotes, then single quotes not inside a word)."""
    text = str(question)[-MAX_QUESTION:]
    found = [m for pattern in _QUOTES if (m := pattern.search(text))]
    return min(found, key=lambda m: m.start())[1].strip() if found else None


def numbers_in_order(question: str) -> str | None:
    """The question's numbers, space-separated, in the order they appear (None with fewer than one)."""
    found = _NUMBER.findall(str(question)[-MAX_QUESTION:])
    return " ".join(found[:64]) if found else None


def last_sentence(question: str) -> str | None:
    """The question's last sentence (of its last non-empty line), without the punctuation that closes it: `499+296=`
    gives `499+296`."""
    lines = [line.strip() for line in str(question)[-MAX_QUESTION:].splitlines() if line.strip()]
    if not lines:
        return None
    sentences = [s for s in _SENTENCE_END.split(lines[-1]) if s.strip(_CLOSING)]
    return sentences[-1].strip(_CLOSING)[:MAX_PART] if sentences else None


def copy_answers(question: str) -> dict[str, list[str]]:
    """Each copy probe's answers for a question (`premise` one per statement), empty ones left out."""
    statements = premises(question)
    found = {"premise": statements, "premises": [conjunction(statements)], "first_quote": [first_quote(question)],
             "numbers": [numbers_in_order(question)], "last_sentence": [last_sentence(question)]}
    return {name: [a for a in answers if a] for name, answers in found.items() if any(answers)}


def all_copies(question: str) -> list[str]:
    """Every copied answer of the question, once each."""
    return list(dict.fromkeys(a for answers in copy_answers(question).values() for a in answers))


def normalised(text: str) -> str:
    """`text` compared as an answer: `r1kit.judging.answers.normalise`, without any space (`499 + 296` is `499+296`)."""
    return "".join(normalise(text).split())


def is_copy(answer: str, question: str, gold: Any = None) -> bool:
    """Whether `answer` is one of the question's copied answers (`all_copies`, compared `normalised`) and not its gold
    (None: no gold): built from the question without solving it."""
    mine = normalised(answer)
    if not mine or (gold is not None and mine == normalised(str(gold))):
        return False
    return any(mine == normalised(copy) for copy in all_copies(question))


def question_text(prompt: Any) -> str:
    """The question of a prompt: the last user message of a conversation, or the text itself."""
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return "" if prompt is None else str(prompt)


_ANY_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def restates_question(answer: str, gold: str, question: str) -> bool:
    """Whether `answer` restates the question's numbers instead of giving its result: what it says after its last
    `=` holds more numbers than the gold and at least two of the question's (`499+296`, `499 296`, which math-verify
    reads as 795, `499+296+0`, `(499+296)\\cdot 1` for `499+296=`; `5 - 3 - 6` for `Calculate 5 - 3 - 6.`). A
    verifier that evaluates expressions pays such an answer on every row, so it is wrong. An equation ending in the
    result (`499+296=795`) and the gold's own form (`\\frac{3}{4}` for `\\frac{3}{4}`) never count as one."""
    answer, gold = str(answer)[: MAX_PART * 4].rsplit("=", 1)[-1], str(gold)[: MAX_PART * 4]
    used = _ANY_NUMBER.findall(answer)
    if len(used) < 2 or len(used) <= len(_ANY_NUMBER.findall(gold)):
        return False
    given = collections.Counter(_ANY_NUMBER.findall(str(question)[-MAX_QUESTION:]))
    return sum((collections.Counter(used) & given).values()) >= 2
