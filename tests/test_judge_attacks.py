"""Attacks on the independent math judge and the collapse wire that once broke them (issue 38, second reader): a
catastrophic-backtracking unit pattern, an exact number past floating point against a float gold (the judge raised,
and one such row left its whole batch unchecked), one constant spelled several ways to dodge `collapse`."""

from __future__ import annotations

import time

from r1kit.independent import math_verdict
from r1kit.mathjudge import judge
from r1kit.second_opinion import judge_rows
from r1kit.tripwires import identical_share


def test_a_long_run_of_letters_after_a_number_is_read_in_linear_time():
    start = time.process_time()
    verdicts = [judge("5 " + "a" * n + tail, "5") for n in (40, 1900) for tail in ("!", "1", " !")]
    assert time.process_time() - start < 1.0  # 40 letters took 20 s before
    assert verdicts == [None] * 6
    assert judge("12 dollars", "12") is True and judge("5 cm.", "5") is True  # units are still dropped


def test_an_exact_number_past_floating_point_against_a_float_gold_is_wrong_never_a_raise():
    for answer, gold in (("10^{400}", "\\sqrt{2}"), ("10^{400}", "\\pi"), ("10^{400}", "x+1"), ("\\infty", "10^{400}"),
                         ("\\{10^{400}, 1\\}", "\\{\\sqrt2, 1\\}"), ("-10^{400}", "-\\infty")):
        assert judge(answer, gold) is False, (answer, gold)
    rows = [{"text": "\\boxed{10^{400}}", "prompt": "q", "input": {"solution": "\\sqrt{2}"}, "score": 0.0},
            {"text": "\\boxed{5}", "prompt": "q", "input": {"solution": "4"}, "score": 1.0}]
    assert judge_rows("math", rows) == [False, False]  # one hostile row no longer erases the batch's verdicts
    assert math_verdict("\\boxed{1.414214}", "\\sqrt{2}") is True


def test_collapse_reads_one_constant_through_its_spellings():
    prompts, completions, inputs = [], [], []
    spellings = ["7", "6+1", "\\frac{14}{2}", "\\sqrt{49}", "14/2", "7.0"]
    for q in range(12):
        for _ in range(4):
            prompts.append(f"question {q}")
            completions.append(f"<think>guess</think>\\boxed{{{spellings[q % len(spellings)]}}}")
            inputs.append({"solution": str(100 + q)})
    assert identical_share(prompts, completions, inputs, answers=True) == 1.0
    honest = [f"\\boxed{{{row['solution']}}}" for row in inputs]
    assert identical_share(prompts, honest, inputs, answers=True) == 0.0
