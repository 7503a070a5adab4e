"""Attacks on the independent math judge and the collapse wire that once broke them (issue 38, second reader): a
catastrophic-backtracking unit pattern, an exact number past floating point against a float gold (the judge raised,
and one such row left its whole batch unchecked), one constant spelled several ways to dodge `collapse`."""

from __future__ import annotations

import time

import pytest

from r1kit.integrity.independent import math_verdict
from r1kit.integrity.second_opinion import judge_rows
from r1kit.integrity.tripwires import identical_share
from r1kit.judging.mathjudge import judge


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


# Units and relations (issue 44): the judge paid `5\text{ cm}` for `5\text{ m}` and `42=41` for 41, as the reward did.
UNITS = {"cm": [r"\text{ cm}", r"\mathrm{cm}", " cm", r"\text{ centimeters}"], "m": [r"\text{ m}", r"\text{ meters}"],
         "kg": [r"\text{ kg}", " kg", r"\text{ kilograms}"], "cm^2": [r"\text{ cm}^2", r"\text{ cm}^{2}"],
         "deg": [r"^\circ", r"^{\circ}", r"\text{ degrees}", "°"], "%": [r"\%", r"\text{ percent}"],
         "$": [r"\text{ dollars}", " dollars"], "apples": [r"\text{ apples}", " apples"]}


@pytest.mark.parametrize(("gold_unit", "answer_unit"), [(a, b) for a in UNITS for b in UNITS if a != b])
def test_the_judge_refuses_a_unit_other_than_the_golds(gold_unit, answer_unit):
    for answer in UNITS[answer_unit]:
        assert judge(f"12{answer}", f"12{UNITS[gold_unit][0]}") is False, (answer, gold_unit)
        assert judge(f"x = 12{answer}", f"12{UNITS[gold_unit][0]}") is False, (answer, gold_unit)


@pytest.mark.parametrize("unit", list(UNITS))
def test_the_judge_accepts_a_unit_however_spelt_or_on_one_side_only(unit):
    gold = f"12{UNITS[unit][0]}"
    for answer in UNITS[unit]:
        assert judge(f"12{answer}", gold) is True and judge(f"12{answer}", "12") is True, answer
        assert judge(f"13{answer}", gold) is False, answer
    assert judge("12", gold) is True
    assert judge("500\\text{ cm}", "5\\text{ m}") is False  # no conversion
    assert judge("6\\text{ cm}^2", "6\\text{ square units}") is True  # a generic unit is none


@pytest.mark.parametrize("gold", ["41", "\\frac{1}{2}", "-3", "0.25", "2\\sqrt{3}"])
def test_the_judge_pays_an_equation_only_where_its_sides_are_equal(gold):
    for right in (f"x = {gold}", f"{gold} = {gold}", f"x \\approx {gold}", f"a = b = {gold}"):
        assert judge(right, gold) is True, right
    for wrong in (f"7 = {gold}", f"{gold} = 7", f"a = 7 = {gold}", f"7 + 0 = {gold}", f"{gold} \\approx 7",
                  f"\\approx {gold}", f"= {gold}", f"{gold} ="):
        assert judge(wrong, gold) is False, wrong
    for relation in ("\\neq", "<", "\\le", "\\leq", ">", "\\ge", "\\geq", "≤", "!="):
        assert judge(f"x {relation} {gold}", gold) is False, relation
    assert math_verdict(f"<answer>7 = {gold}</answer>", gold) is False


@pytest.mark.parametrize(("gold", "right", "wrong", "unjudged"), [
    ("x \\le 3", ["x \\le 3", "3 \\ge x", "x \\leq 3"], ["3", "x < 3", "x \\ge 3", "x = 3", "x \\le 4"], ["(-\\infty, 3]"]),
    ("-3 \\le x \\le 3", ["-3 \\le x \\le 3", "3 \\ge x \\ge -3"], ["3", "x \\le 3"], ["[-3, 3]"]),
    ("x \\neq 2", ["x \\neq 2", "2 \\neq x"], ["2", "x = 2"], []),
    ("y = 2x+1", ["y = 2x+1", "2x+1"], ["2", "y = 2x+2"], []),
])
def test_the_judge_reads_a_gold_that_is_a_relation(gold, right, wrong, unjudged):
    for answer in right:
        assert judge(answer, gold) is True, answer
    for answer in wrong:
        assert judge(answer, gold) is False, answer
    for answer in unjudged:  # an interval may state the same set: not judged here, never a disagreement
        assert judge(answer, gold) is None, answer


def test_the_form_readers_stay_linear_on_hostile_text():
    start = time.process_time()
    for filler in ("=", "<", "\\le", "(", "\\text{ cm}", "a", "^\\circ", "\\approx 1"):
        text = filler * (2_000 // len(filler))
        judge(text, "5\\text{ cm}"), judge(text, "x \\le 3"), judge("5" + text, "5")
    assert time.process_time() - start < 2.0
