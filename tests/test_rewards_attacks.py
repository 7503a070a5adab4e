"""Hostile completions against the text rewards: every per-completion computation is linear in the completion, so a
batch of degenerate completions (unclosed or repeated tags, runs of `<`, nested openers, long digit runs) costs about
what a clean batch of the same size costs. The bound is relative to a clean batch measured in the same test, in the
CPU time the work itself used (what other processes take of the machine does not enter it), never a wall-clock
constant."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r1kit.rewards import forms
from r1kit.rewards.format import (
    fenced_blocks,
    make_code_format_reward,
    make_format_reward,
    make_reasoning_steps_reward,
    make_repetition_penalty_reward,
    make_tag_count_reward,
    think_answer_parts,
)
from r1kit.rewards.gym import extract_answer
from r1kit.rewards.text import answer_blocks
from r1kit.rewards.verify import MAX_ANSWER_CHARS, _has_huge_power

SIZE = 64_000  # characters per completion, as in the attack
BATCH = 8


def fill(unit: str, head: str = "", tail: str = "") -> str:
    return head + unit * ((SIZE - len(head) - len(tail)) // len(unit)) + tail


CLEAN = fill("Step 1: we add 3 and 4 to get 7, then check it. ", "<think>",
             "</think><answer>```python\nprint(7)\n```</answer>")
DEGENERATE = {
    "unclosed answer tags": fill("<answer>"),
    "repeated think closers and answer openers": fill("</think><answer>"),
    "closed think, then answer openers": fill("<answer>", "<think>a</think>"),
    "run of <": fill("<"),
    "nested think openers": fill("<think>"),
    "nested brackets in an answer": fill("(", "<answer>"),
    "unclosed fences in the answer": fill("```python\n", "<think>a</think><answer>", "</answer>"),
    "fence openers with trailing spaces": fill("```python   "),
    "run of backticks": fill("`"),
    "digit run": fill("1"),
    "power chain": fill("9^"),
    "blank lines": fill("\n \n"),
    "nested boxes": fill("\\boxed{", "", "1=2"),
    "boxed equations": fill("\\boxed{1=2}"),
    "relation run": fill("<", "\\boxed{", "}"),
    "anchors": fill("answer $", "", "$"),
    "unit words": fill(" cm", "\\boxed{5", "}"),
    "unit texts": fill("\\text{ cm}^2/", "\\boxed{5", "}"),
}

FORMAT, CODE_FORMAT, TAG_COUNT = make_format_reward(), make_code_format_reward(), make_tag_count_reward()
STEPS, REPETITION = make_reasoning_steps_reward(), make_repetition_penalty_reward()


def every_text_computation(batch: list[str]) -> None:
    """What the trainer's thread computes per completion for the text rewards and the answer readers."""
    FORMAT(batch)
    CODE_FORMAT(batch)
    TAG_COUNT(batch)
    STEPS(batch)
    REPETITION(batch)
    for text in batch:
        extract_answer(text, "7")
        extract_answer(text, "seven")
        extract_answer(text, "7", mode="reply")
        _has_huge_power(text[-MAX_ANSWER_CHARS:])  # math's check, on what math-verify is given
        answer_form(text[-MAX_ANSWER_CHARS:])


def answer_form(text: str) -> None:
    """What the math verifier reads of an answer's form once math-verify has found its value equal (units,
    relations): every box, the anchored text, each read as a whole and as the gold would be."""
    for content, after in forms.boxed(text):
        forms.relations(content), forms.units(content), forms.unit_after(after)
    for read in forms.anchored(text) + [text]:
        forms.relations(read), forms.units(read)
    forms.gold_texts(text), forms.is_math(text)


def cost(batch: list[str]) -> float:
    """The least of three measures of the CPU time the computation used (noise only ever adds to it)."""
    timings = []
    for _ in range(3):
        start = time.process_time()
        every_text_computation(batch)
        timings.append(time.process_time() - start)
    return min(timings)


@pytest.mark.parametrize("kind", list(DEGENERATE))
def test_a_degenerate_batch_costs_about_what_a_clean_batch_costs(kind):
    clean = cost([CLEAN] * BATCH)
    degenerate = cost([DEGENERATE[kind]] * BATCH)
    # Linear code lands near 1x; the quadratic regexes this replaced cost 100-1000x (1.1 s per completion).
    assert degenerate <= 10 * clean, f"{kind}: {degenerate:.4f} s against {clean:.4f} s for a clean batch"


# The regexes the linear readers replaced: on short texts they define the behaviour to keep.
OLD_SHAPE = re.compile(r"\A\s*(?P<open><think>)?(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*\Z", re.DOTALL)
OLD_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def old_think_answer_parts(text: str, think_prefilled: bool) -> tuple[str, str] | None:
    match = OLD_SHAPE.match(text)
    if match is None or (match["open"] is None and not think_prefilled):
        return None
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    if any(tag in match["think"] or tag in match["answer"] for tag in tags):
        return None
    return match["think"], match["answer"]


def old_fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(r"```" + re.escape(language) + r"[ \t]*\n(.*?)```", text, re.DOTALL | re.IGNORECASE)


tag_soup = st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "```", "python", "Python", " ",
                                     "\t", "\n", "x", "`", "<", "/", ">", "\u2003"]), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(tag_soup, st.booleans())
def test_linear_readers_agree_with_the_regexes_they_replaced(text, prefilled):
    assert think_answer_parts(text, prefilled) == old_think_answer_parts(text, prefilled)
    assert answer_blocks(text) == OLD_ANSWER_BLOCK.findall(text)
    assert fenced_blocks(text, "python") == old_fenced_blocks(text, "python")
