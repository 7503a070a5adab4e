"""A completion's final answer, read from its end and normalised: what the wires compare (two replies that differ
only in their reasoning give one answer) and what the independent judges read.

    final_answer(text, gold)   the last `\\boxed{}`, else the last `<answer>` block, else the last number when the
                               gold is a number, else the last non-empty line
    normalise(answer)          Unicode compatibility forms (fullwidth digits are digits), case, spaces, `$`, `\\text{}`,
                               thousands commas, a leading `x =`, closing punctuation and outer brackets dropped

The readers scan from the end and share no code with the rewards' readers (`r1kit.rewards.text` scans from the
start), so a reader's quirk is not the judges' too. Bounded: the last `MAX_ANSWER_CHARS` characters of a completion
are read, and an answer is kept to `MAX_KEPT` characters.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

from r1kit.judging import mathjudge

MAX_ANSWER_CHARS = 20_000  # the answer is at the end: the readers read the last 20 k characters
MAX_KEPT = 2_000  # characters of an answer kept (an ARC grid runs to 1,800)

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?", re.ASCII)
_PLAIN_NUMBER = re.compile(r"\s*[-+]?\d[\d,]*(?:\.\d+)?\s*", re.ASCII)
_TEXT_COMMAND = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ASSIGNED = re.compile(r"^[a-z]\s*=\s*(?=\S)")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None. Linear: one scan from the last opening."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def all_boxed(text: str, limit: int = 16) -> list[str]:
    """The contents of the last `limit` `\\boxed{...}` of `text`, last first (a verifier may read any of them)."""
    found, end = [], len(text)
    while len(found) < limit:
        start = text.rfind("\\boxed{", 0, end)
        if start < 0:
            break
        content = last_boxed(text[start:])
        if content is not None:
            found.append(content)
        end = start
    return found


def last_answer(text: str) -> str | None:
    """The content of the last `<answer>...</answer>` block, found from the end."""
    close = text.rfind("</answer>")
    if close < 0:
        return None
    opening = text.rfind("<answer>", 0, close)
    return text[opening + len("<answer>") : close] if opening >= 0 else None


def is_plain_number(text: str) -> bool:
    """Whether `text` is one number written plainly (`-4`, `1,000`, `2.5`)."""
    return _PLAIN_NUMBER.fullmatch(str(text)) is not None


def final_answer(text: str, gold: str | None = None) -> str:
    """The answer a completion gives, as written (empty when it gives none): the last `\\boxed{}`, else the last
    `<answer>` block; without either, the last number when the gold is a plain number (a small model writes "The
    answer is 8."), else the last non-empty line."""
    text = str(text)[-MAX_ANSWER_CHARS:]
    for found in (last_boxed(text), last_answer(text)):
        if found is not None:
            return found.strip()[-MAX_KEPT:]
    if gold is not None and is_plain_number(gold):
        numbers = _NUMBER.findall(text)
        return numbers[-1].rstrip(",") if numbers else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-MAX_KEPT:] if lines else ""


def normalise(answer: str) -> str:
    """`answer` as the wires compare it: `$\\text{ 1,024 }$.` and `１０２４` both give `1024`, `x = 7` gives `7`."""
    text = unicodedata.normalize("NFKC", str(answer)[:MAX_KEPT]).replace("\u2212", "-").lower()
    text = _TEXT_COMMAND.sub(r"\1", text).replace("$", "").replace("\\!", "").replace("\\,", "")
    text = " ".join(text.split()).strip(" .;:")
    text = _ASSIGNED.sub("", _THOUSANDS.sub("", text))
    while len(text) > 1 and text[0] + text[-1] in ("()", "[]", "{}") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return _canonical_number(text)


def _canonical_number(text: str) -> str:
    """A plain number in one spelling (`7.0`, `07`, `+7` and `7.` are `7`), so that a constant answer cannot hide
    behind its spellings; anything else unchanged."""
    if len(text) > 100 or not _PLAIN_NUMBER.fullmatch(text) or "," in text:
        return text
    try:
        value = Decimal(text.rstrip("."))
    except InvalidOperation:
        return text
    spelled = format(value.normalize(), "f")
    return "0" if spelled in ("-0", "0") else spelled


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def answer_of(text: str, gold: str | None = None) -> str:
    """`final_answer` normalised: the key under which the wires group replies. An answer the math judge reads as one
    number is keyed by its value, so that one constant spelled several ways (`7`, `6+1`, `\\frac{14}{2}`,
    `\\sqrt{49}`) is one answer."""
    answer = normalise(final_answer(text, gold))
    return _value_key(answer) or answer


def _value_key(answer: str) -> str | None:
    """`=` and the value of a number-valued answer without variables (`r1kit.judging.mathjudge`), else None."""
    if not answer or len(answer) > mathjudge.MAX_CHARS:
        return None
    try:
        tree = mathjudge.parse(answer)
        if tree[0] in ("set", "list", "seq") or mathjudge.variables(tree):
            return None
        value = mathjudge.evaluate(tree, {})
        return "=" + (str(value) if not isinstance(value, float) else format(value, ".9g"))
    except Exception:  # noqa: BLE001 - unreadable: the text is the key
        return None
