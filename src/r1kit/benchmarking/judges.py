"""Judges: whether a completion answers a benchmark item, as 1.0 / 0.0, or None when it cannot be judged.

A benchmark's judge is `judge(items, completions) -> scores`, with `completions[i]` the completions of `items[i]`
and `scores` shaped the same: `score_math` (math-verify, as the `accuracy` reward), `score_choice` (the letter of a
multiple choice), `score_code` (HumanEval, run in the sandbox) and `score_lcb` (LiveCodeBench, every test run in the
sandbox). `score_answers` and `score_gym_answers` grade a flat list against golds, for held-out accuracy.

None is for what says nothing about the model: an unparseable gold, a sandbox failure, a problem without tests. It is
left out of every mean; a wrong answer, a crash, a hang or a hack is 0.0.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

from r1kit.errors import ConfigError
from r1kit.rewards import verify
from r1kit.rewards.code import extract_code
from r1kit.rewards.gym import score_completions
from r1kit.rewards.verify import CORRECT, DEFAULT_TIMEOUT, UNPARSEABLE_GOLD
from r1kit.sandbox import SANDBOX_ERROR, Program, get_provider
from r1kit.sandbox.jail import JailUnavailable

Scores = list[list[float | None]]

HUMANEVAL_PASSED = "r1kit: check() ran to its end"
HUMANEVAL_DRIVER = Path(__file__).parents[1] / "sandbox" / "scripts" / "humaneval_driver.py"
LCB_FUNCTIONAL_DRIVER = """
import json as _json, sys as _sys
_args = [_json.loads(line) for line in _sys.stdin.read().splitlines() if line.strip()]
_result = Solution().{func}(*_args)
print(_json.dumps(_result))
"""


def _regroup(flat: list, completions: list[list[str]]) -> list[list]:
    """`flat` (one entry per completion) cut back into one list per item, as `completions` is."""
    out, k = [], 0
    for cs in completions:
        out.append(flat[k : k + len(cs)])
        k += len(cs)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Answers: math, reasoning-gym, multiple choice
# --------------------------------------------------------------------------------------------------------------------
def score_answers(completions: list[str], golds: list[Any], timeout: float = DEFAULT_TIMEOUT) -> list[float | None]:
    """1.0 / 0.0 per completion (None for an unparseable gold), exactly as the `accuracy` reward scores, each answer
    within `timeout` seconds (the recipe's `reward_timeout`)."""
    # looked up on the module at each call, so that a swapped verify.judge_batch (a test of the timeout) is the one used
    return [None if o == UNPARSEABLE_GOLD else float(o == CORRECT) for o in verify.judge_batch(golds, completions, timeout)]


def score_gym_answers(completions: list[str], records: list[Any], timeout: float = DEFAULT_TIMEOUT,
                      mode: str = "last_number", allow_unsandboxed: bool = False) -> list[float | None]:
    """1.0 / 0.0 per completion (None for a row that cannot be judged) by the rows' reasoning-gym scorers, reading
    answers as the `reasoning_gym` reward does (`mode`: the recipe's `reasoning_gym_answer`); only a full score
    counts as correct (partial credit is a reward, not an accuracy). Scored in the jail, as the reward is
    (`allow_unsandboxed`: without it where none can run)."""
    scores = score_completions(completions, records, timeout, mode, allow_unsandboxed)
    return [None if s is None else float(s >= 1.0) for s in scores]


def score_math(items: list[dict], completions: list[list[str]], timeout: float = DEFAULT_TIMEOUT) -> Scores:
    """`score_answers` of each item's completions against its `answer`."""
    golds = [item["answer"] for item, cs in zip(items, completions) for _ in cs]
    return _regroup(score_answers([c for cs in completions for c in cs], golds, timeout), completions)


def score_choice(items: list[dict], completions: list[list[str]]) -> Scores:
    """1.0 when the last lone letter A-D after the reasoning (`</think>`) is the item's `answer`."""

    def letter(text: str) -> str | None:
        found = re.findall(r"\b([A-D])\b", text.split("</think>")[-1])
        return found[-1] if found else None

    return [[float(letter(c) == str(item["answer"]).strip()) for c in cs] for item, cs in zip(items, completions)]


# --------------------------------------------------------------------------------------------------------------------
# Code, run in the sandbox: HumanEval, LiveCodeBench
# --------------------------------------------------------------------------------------------------------------------
def _local_provider(benchmark: str):
    try:
        return get_provider("local")
    except JailUnavailable as e:
        raise ConfigError(f"benchmark {benchmark}: {e}") from None


def humaneval_program(item: dict, completion: str, passed: str = HUMANEVAL_PASSED) -> str:
    """The sandboxed program that judges a HumanEval completion.

    The candidate's code (a fenced block if the model wrote the whole function, else the prompt plus the completion)
    runs in a process of its own; the problem's tests run in the driver, which calls the candidate through a pipe, so
    the candidate's results arrive as plain data (ints, strings, lists, ...) rebuilt by the driver. An object whose
    `__eq__` always says yes cannot cross, an early `sys.exit(0)` only ends the candidate's process, and the driver
    prints `HUMANEVAL_PASSED` only after `check()` returned."""
    code = extract_code(completion, "python")
    candidate = code if code and f"def {item['entry_point']}" in code else item["problem"] + (code or completion)
    spec = {"candidate": candidate, "prompt": item["problem"], "test": item["test"], "entry_point": item["entry_point"],
            "passed": passed}
    return HUMANEVAL_DRIVER.read_text() + f"\nmain({json.dumps(spec)!r})\n"


def score_code(items: list[dict], completions: list[list[str]], provider=None) -> Scores:
    """1.0 when the problem's `check()` ran to its end against the candidate in the sandbox; None for a sandbox
    failure (infrastructure)."""
    provider = provider or _local_provider("humaneval")
    pairs = [(item, c) for item, cs in zip(items, completions) for c in cs]
    # a fresh secret per program: the candidate (which never sees the driver's text) cannot print the pass line
    markers = [f"{HUMANEVAL_PASSED} {secrets.token_hex(16)}" for _ in pairs]
    programs = [Program(humaneval_program(item, c, m), inputs=[""], time_limit=10.0) for (item, c), m in zip(pairs, markers)]
    flat = [r[0] for r in provider.execute(programs)]
    scores = [None if r.status == SANDBOX_ERROR else float(_check_completed(r, m)) for r, m in zip(flat, markers)]
    return _regroup(scores, completions)


def _check_completed(result, marker: str) -> bool:
    return result.status == "passed" and result.stdout.strip().splitlines()[-1:] == [marker]


def lcb_program(item: dict, completion: str) -> Program:
    """The sandboxed program for a LiveCodeBench completion: stdin tests run the code as is; functional tests call
    `Solution().<func_name>` with the test's JSON arguments and print its result as JSON (plain data, compared as
    text by the trainer)."""
    code = extract_code(completion, "python")
    functional = [t for t in item["tests"] if t.get("testtype") == "functional"]
    if functional and item.get("func_name"):
        code += LCB_FUNCTIONAL_DRIVER.format(func=item["func_name"])
        expected = [json.dumps(json.loads(t["output"])) for t in item["tests"]]
    else:
        expected = [str(t["output"]) for t in item["tests"]]
    return Program(code, inputs=[str(t["input"]) for t in item["tests"]], expected=expected, time_limit=6.0)


def score_lcb(items: list[dict], completions: list[list[str]], provider=None) -> Scores:
    """1.0 when a completion passes every test of its LiveCodeBench problem in the sandbox; None for a sandbox
    failure or a problem without tests."""
    provider = provider or _local_provider("lcb_v4")
    pairs = [(item, c) for item, cs in zip(items, completions) for c in cs]
    runnable = [(i, lcb_program(item, c)) for i, (item, c) in enumerate(pairs) if item["tests"]]
    results = dict(zip([i for i, _ in runnable], provider.execute([p for _, p in runnable])))
    flat: list[float | None] = []
    for i in range(len(pairs)):
        tests = results.get(i)
        if tests is None or any(t.status == SANDBOX_ERROR for t in tests):
            flat.append(None)
        else:
            flat.append(float(all(t.passed for t in tests)))
    return _regroup(flat, completions)
