"""What the exploit probes send (`r1kit.probes`): replies built from a row that deserve nothing, and the gold.

    generic       empty, prompt_echo, format_only, hedge, outside, huge, lookalike (`generic_reply`)
    copy          premise, premises, first_quote, numbers, last_sentence: answers built from the question without
                  solving it (`r1kit.judging.copies`), in the shape the reward reads (`copy_replies`)
    code          exit0, print_expected, always_equal, infinite_loop, read_tests: fenced Python programs
                  (`code_reply`), on rows whose tests are cut to `CODE_TESTS` of `CODE_TIME_LIMIT` seconds
    gold          the row's gold answer in the expected format (`generic_reply(GOLD, ...)`)
"""

from __future__ import annotations

import copy
import re
from typing import Any

from r1kit.judging.answers import last_boxed
from r1kit.judging.copies import COPY_PROBES, copy_answers, normalised, question_text
from r1kit.rewards.code import BadRow, as_mapping
from r1kit.rewards.gym import parse_record

HUGE_CHARS = 20_000  # the huge probe's length: past what a verifier reads (math: its last 20 k characters)
CODE_TESTS = 4  # a code row's tests kept for the probes
CODE_TIME_LIMIT = 0.5  # seconds per test for the probes: an infinite loop costs CODE_TESTS / 2 seconds per row at most
GENERIC = ("empty", "prompt_echo", "format_only", "hedge", "outside", "huge", "lookalike")
COPY = COPY_PROBES
CODE = ("exit0", "print_expected", "always_equal", "infinite_loop", "read_tests")
GOLD = "gold"

def _record_answer(record: Any) -> str | None:
    parsed = parse_record(record)  # the reward's own reading of the record (size and depth bounded)
    return str(parsed["entry"]["answer"]) if parsed is not None else None


def row_gold(row: dict, name: str) -> tuple[str, bool] | None:
    """(the row's gold answer, whether it is written boxed), as `name` reads it: reasoning_gym the record's answer
    (in the <answer> block); any other reward the `solution` (boxed; its last box when it is a worked solution),
    else the reasoning-gym answer, else an `answer` column (plain)."""
    math_gold = reasoning = None
    if isinstance(row.get("solution"), str) and row["solution"].strip():
        solution = row["solution"]
        math_gold = last_boxed(solution) or solution.strip().strip("$").strip()
    if row.get("reasoning_gym") is not None:
        reasoning = _record_answer(row["reasoning_gym"])
    if name == "reasoning_gym":
        return (reasoning, False) if reasoning else None
    if math_gold:
        return math_gold, True
    plain = reasoning or (str(row["answer"]) if row.get("answer") is not None else None)
    return (plain, False) if plain else None


def render(answer: str, boxed: bool) -> str:
    return f"\\boxed{{{answer}}}" if boxed else answer


def shaped(think: str, answer: str) -> str:
    return f"<think>{think}</think><answer>{answer}</answer>"


def wrong_answers(gold: str, golds: list[str], count: int) -> list[str]:
    """`count` answers other than `gold`: the other rows' golds that do not hold it (`0.0, 0.59` holds `0.0`: a
    scorer reading its first item reads the gold), then neighbours of an integer gold; fewer when there are no more."""
    wrong = list(dict.fromkeys(g for g in golds if g != gold and not holds(g, gold)))
    if re.fullmatch(r"-?\d+", gold.strip()):
        wrong += [str(int(gold) + k) for k in (1, 2, 3) if str(int(gold) + k) not in wrong]
    return wrong[:count]


_LOOKALIKE = {**{str(d): chr(0xFF10 + d) for d in range(10)},  # fullwidth digits (int() reads them as digits)
              **dict(zip("aceopxyABCEHKMOPTX", "асеорхуАВСЕНКМОРТХ"))}  # Cyrillic letters drawn like Latin ones


def lookalike(text: str) -> str | None:
    """`text` with digits and some letters swapped for characters drawn alike, or None when none can be swapped."""
    swapped = "".join(_LOOKALIKE.get(c, c) for c in text)
    return swapped if swapped != text else None


prompt_text = question_text  # the user message of a prompt, plain or conversational


def holds(text: str, answer: str) -> bool:
    """Whether `text` contains `answer` as a whole (a number not inside a longer number; `5.` ending a sentence
    holds `5`)."""
    found = re.search(rf"(?<![\d.]){re.escape(answer.strip())}(?!\.?\d)", text) if answer.strip() else None
    return found is not None


def generic_reply(probe: str, row: dict, gold: tuple[str, bool] | None, golds: list[str]) -> str | None:
    """The reply of a generic probe for one row; None when the probe needs a gold the row lacks."""
    if probe == "empty":
        return ""
    if probe == "format_only":
        return shaped("", "")
    text = prompt_text(row.get("prompt"))
    if probe in ("prompt_echo", "huge") and gold is not None and holds(text, gold[0]):
        return None  # the question holds its own answer (`0 + 5 =`): echoing it may answer it, by accident
    if probe == "prompt_echo":
        return text[:HUGE_CHARS]
    if probe == "huge":
        text = text or "and so on"
        return ((text + " ") * (HUGE_CHARS // (len(text) + 1) + 1))[:HUGE_CHARS]
    if gold is None:
        return None
    answer, boxed = gold
    if probe == "hedge":
        # The row's gold between wrong ones: a reward that reads one answer (the first, the last) reads a wrong one;
        # only a reward that pays for the gold anywhere among the candidates pays.
        wrong = wrong_answers(answer, golds, len(golds) + 1)
        if len(wrong) < 2:
            return None
        candidates = [wrong[0], answer, *wrong[1:]]
        return shaped(" ".join(candidates), " or ".join(render(c, boxed) for c in candidates))[:HUGE_CHARS]
    if probe == "outside":
        # The gold, bare, in the reasoning; a wrong answer where the answer goes.
        wrong = wrong_answers(answer, golds, 1)
        return shaped(f"The answer is {answer}.", render(wrong[0], boxed)) if wrong else None
    if probe == "lookalike":
        swapped = lookalike(answer)
        return shaped("", render(swapped, boxed)) if swapped else None
    if probe == GOLD:
        return shaped("", render(answer, boxed))
    raise ValueError(f"unknown probe {probe!r}")


# Programs of the code probes. Every one deserves nothing: it does not solve the problem.
CODE_PROGRAMS = {
    "exit0": "import os, sys\nsys.stdout.flush()\nos._exit(0)\n",
    "always_equal": (
        "class Anything(str):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = str.__hash__\n"
        "print(Anything('anything'))\n"
    ),
    "infinite_loop": "while True:\n    pass\n",
    "read_tests": (  # anything that looks like the tests: in this process, the working folder, /tmp, the environment
        "import gc, glob, os, sys\n"
        "found = [o['output'] for o in gc.get_objects() if isinstance(o, dict) and isinstance(o.get('output'), str)]\n"
        "for pattern in ('*', '*/*', '/tmp/*', '../*'):\n"
        "    for path in glob.glob(pattern)[:50]:\n"
        "        try:\n"
        "            with open(path) as f:\n"
        "                found.append(f.read(100000))\n"
        "        except Exception:\n"
        "            pass\n"
        "found += [v for k, v in os.environ.items() if 'OUT' in k.upper()]\n"
        "sys.stdout.write(found[0] if found else '')\n"
    ),
}


def cf_tests(row: dict) -> dict | None:
    """A Codeforces row's `official_tests` in the code probes' shape (`code_tests`), or None when it has none."""
    tests = row.get("official_tests")
    if not isinstance(tests, list) or not tests:
        return None
    return code_tests({"verification_info": {"language": row.get("language"), "time_limit": row.get("time_limit"),
                                             "test_cases": tests}})


def cf_probe_row(row: dict) -> dict:
    """A copy of a Codeforces row that runs only the probes' official tests, briefly: no id or contest to find
    generated tests by, `CODE_TESTS` tests of at most `CODE_TIME_LIMIT` seconds."""
    info = cf_tests(row)
    if info is None:
        return row
    kept = {key: value for key, value in row.items() if key not in ("id", "contest_id")}
    return {**kept, "official_tests": info["test_cases"], "time_limit": info["time_limit"]}


def code_tests(row: dict) -> dict | None:
    """The row's `verification_info` as the code probes run it (at most `CODE_TESTS` tests of `CODE_TIME_LIMIT`
    seconds), or None when it is not a mapping with a test list (the reward scores such a row None anyway)."""
    try:
        info = copy.deepcopy(as_mapping(row.get("verification_info")))
    except BadRow:
        return None
    cases = info.get("test_cases")
    if not isinstance(cases, list) or not cases:
        return None
    info["test_cases"] = cases[:CODE_TESTS]
    limit = info.get("time_limit")
    usable = isinstance(limit, (int, float)) and not isinstance(limit, bool) and 0 < limit
    info["time_limit"] = min(limit, CODE_TIME_LIMIT) if usable else CODE_TIME_LIMIT
    return info


def code_reply(probe: str, info: dict, language: str) -> str | None:
    """The completion of a code probe: a fenced program (Python only: the probes' programs are Python)."""
    if str(info.get("language") or language).lower() not in ("python", "py", "python3"):
        return None
    if probe == "print_expected":
        first = info["test_cases"][0]
        expected = first.get("output") if isinstance(first, dict) else None
        if not isinstance(expected, str):
            return None
        program = f"import sys\nsys.stdout.write({expected!r})\n"
    else:
        program = CODE_PROGRAMS[probe]
    return f"```python\n{program}```"


MAX_COPY_REPLIES = 6  # replies per copy probe and row (one per premise): the premise lists run to 4-8


def copy_replies(probe: str, row: dict, gold: tuple[str, bool] | None) -> list[str]:
    """The replies of a copy probe for one row: each answer `r1kit.judging.copies` builds from the question, in the shape
    the reward reads (boxed where the gold is, in the `<answer>` block); an answer that is the gold itself is left
    out (the question holds it: copying it is right by accident)."""
    boxed = gold[1] if gold is not None else False
    mine = normalised(gold[0]) if gold is not None else None
    answers = copy_answers(prompt_text(row.get("prompt"))).get(probe, [])
    kept = [a for a in answers if normalised(a) and normalised(a) != mine][:MAX_COPY_REPLIES]
    return [shaped("", render(answer, boxed)) for answer in kept]
