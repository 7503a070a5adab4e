"""Property tests: whatever text a model emits, every reward returns one finite float or None per sample and never
raises."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from r1kit.rewards.format import (
    make_code_format_reward,
    make_format_reward,
    make_reasoning_steps_reward,
    make_repetition_penalty_reward,
    make_soft_overlong_punishment,
    make_tag_count_reward,
)
from r1kit.rewards.math import make_accuracy_reward, make_cosine_reward, make_length_reward

TEXT_FACTORIES = [make_format_reward, make_tag_count_reward, make_reasoning_steps_reward, make_repetition_penalty_reward,
                  make_soft_overlong_punishment, make_code_format_reward]  # with their default parameters
MATH_FACTORIES = [make_accuracy_reward, make_cosine_reward, make_length_reward]


def nested_latex(depth: int) -> str:
    return "\\boxed{" + "\\frac{1}{" * depth + "2" + "}" * depth + "}"


hostile_text = st.one_of(
    st.text(max_size=300),
    st.just(""),
    st.sampled_from(["None", "null", "nan", "inf", "-inf", "\\boxed{}", "$$", "<answer></answer>", "\x00", "}}}{{{"]),
    st.integers(1, 200).map(nested_latex),
    st.integers(1, 60).map(lambda d: "\\boxed{" + "9^{" * d + "9" + "}" * d + "}"),
    st.just("\\boxed{" + "1+" * 25_000 + "1}"),  # a 50 kB expression
    st.text(alphabet="<>/thinkanswer{}\\$0123456789 \n", max_size=200),
)
gold = st.one_of(st.none(), st.just(""), st.text(max_size=40), st.integers(-1000, 1000).map(str), st.just("\\frac{1}{2}"))


TEXT_FUNCS = [factory() for factory in TEXT_FACTORIES]


def assert_well_formed(rewards, n):
    assert isinstance(rewards, list) and len(rewards) == n
    assert all(r is None or (isinstance(r, float) and math.isfinite(r)) for r in rewards), rewards


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_text, min_size=1, max_size=6), st.booleans())
def test_text_rewards_are_total(texts, conversational):
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    ids = [list(range(len(t) % 50)) for t in texts]
    for func in TEXT_FUNCS:
        assert_well_formed(func(completions, completion_ids=ids, language=[None] * len(texts)), len(texts))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(hostile_text, gold), min_size=1, max_size=4))
def test_math_rewards_are_total(pairs):
    texts = [t for t, _ in pairs]
    golds = [g for _, g in pairs]
    for func in [factory(timeout=2.0, workers=2) for factory in MATH_FACTORIES]:
        rewards = func(texts, solution=golds, completion_ids=[[0] * len(t) for t in texts], prompts=["p"] * len(texts))
        assert_well_formed(rewards, len(texts))


# Answers built from the pieces the unit and relation readers look for (issue 44).
form_soup = st.lists(st.sampled_from(["\\boxed{", "}", "{", "=", "<", ">", "\\le", "\\approx", "\\neq", "\\text{", " cm",
                                      "\\mathrm{m}", "5", "41", "x", "^", "^\\circ", "\\%", "\\$", "$", ",", "(", "]",
                                      "answer", "<answer>", "</answer>", "\\frac{1}{2}", " ", "\n", " or ", "/", "2"]),
                     max_size=40).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.one_of(form_soup, st.text(max_size=200)), st.sampled_from(["41", "5\\text{ m}", "x \\le 3", "30^\\circ", "y=2x+1"]))
def test_the_answer_form_readers_and_both_judges_are_total(text, gold):
    from r1kit.judging import mathjudge
    from r1kit.rewards import forms
    from r1kit.rewards.verify import CORRECT, UNPARSEABLE_GOLD, WRONG, judge

    for content, after in forms.boxed(text):
        unit = forms.unit_after(after)
        assert isinstance(forms.units(content), set) and (unit is None or isinstance(unit, str))
    assert all(len(sides) == len(ops) + 1 for sides, ops in forms.relations(text))
    assert isinstance(forms.anchored(text), list) and isinstance(forms.gold_texts(text), list)
    assert judge(gold, text, 5) in (CORRECT, WRONG, UNPARSEABLE_GOLD)
    assert mathjudge.judge(text, gold) in (True, False, None)
