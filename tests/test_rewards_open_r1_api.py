"""Open-R1's reward API from `r1kit.rewards`: names, signatures and values checked by hand."""

from __future__ import annotations

import math

import pytest

from r1kit import rewards
from r1kit.rewards.open_r1 import OPEN_R1_NAMES
from r1kit.sandbox.jail import probe


def msg(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def test_every_open_r1_name_imports_from_r1kit_rewards():
    for name in (*OPEN_R1_NAMES, "get_reward_funcs"):
        assert callable(getattr(rewards, name)), name
    with pytest.raises(AttributeError):
        rewards.not_a_reward  # noqa: B018


COSINE = rewards.get_cosine_scaled_reward()  # Open-R1's factory defaults (-1, -0.5, 0.5, 1, 1000)
SHORT_RIGHT, SHORT_WRONG = r"\boxed{4}", r"\boxed{5}"

CASES = [
    # (name, call, expected): expected values worked out by hand from the formulas in the docstrings
    ("accuracy right", lambda: rewards.accuracy_reward([msg(SHORT_RIGHT)], ["4"]), [1.0]),
    ("accuracy wrong", lambda: rewards.accuracy_reward([msg(SHORT_WRONG)], ["4"]), [0.0]),
    ("accuracy plain strings", lambda: rewards.accuracy_reward([r"so \boxed{\frac{1}{2}}"], ["0.5"]), [1.0]),
    ("accuracy gold unparseable: None (r1kit's one intended difference)",
     lambda: rewards.accuracy_reward([msg(SHORT_RIGHT)], ["not math at all"]), [None]),
    ("format", lambda: rewards.format_reward([msg("<think>\na\n</think>\n<answer>\nb\n</answer>")]), [1.0]),
    ("format two answers", lambda: rewards.format_reward(["<think>a</think><answer>b</answer><answer>c</answer>"]), [0.0]),
    ("tag_count all four", lambda: rewards.tag_count_reward(["<think>\nx\n</think>\n<answer>\ny\n</answer>"]), [1.0]),
    ("tag_count one", lambda: rewards.tag_count_reward(["<think>\nx"]), [0.25]),
    ("reasoning_steps three", lambda: rewards.reasoning_steps_reward(["Step 1: a\nStep 2: b\nStep 3: c"]), [1.0]),
    ("reasoning_steps one", lambda: rewards.reasoning_steps_reward(["First, we look."]), [pytest.approx(1 / 3)]),
    # lengths 9, 109, 9, 109 characters: lambda = 0.5 - (L - 9) / 100
    ("len_reward", lambda: rewards.len_reward([SHORT_RIGHT, SHORT_RIGHT + " " * 100, SHORT_WRONG, SHORT_WRONG + " " * 100],
                                              ["4"] * 4), [0.5, -0.5, 0.0, -0.5]),
    # cos(pi * 9 / 1000) ~ 0.9996: right -> 0.5 + 0.25 * 1.9996, wrong -> -0.5 - 0.25 * 1.9996
    ("cosine short right", lambda: COSINE([SHORT_RIGHT], ["4"]), [pytest.approx(0.5 + 0.25 * (1 + math.cos(math.pi * 0.009)))]),
    ("cosine short wrong", lambda: COSINE([SHORT_WRONG], ["4"]), [pytest.approx(-0.5 - 0.25 * (1 + math.cos(math.pi * 0.009)))]),
    ("cosine at max_len", lambda: rewards.get_cosine_scaled_reward(max_len=9)([SHORT_RIGHT, SHORT_WRONG], ["4", "4"]),
     [0.5, -0.5]),
    # "a b a b": bigrams ab, ba, ab -> 2 distinct of 3 -> (1 - 2/3) * -1
    ("repetition", lambda: rewards.get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)(["a b a b"]),
     [pytest.approx(-1 / 3)]),
    ("repetition short text", lambda: rewards.get_repetition_penalty_reward(3, -1.0)(["a b"]), [0.0]),
    # limit 100, cache 20: 0 up to 80 tokens, (80 - L) / 20 to 100, -1 beyond; ids passed positionally as Open-R1 does
    ("soft overlong", lambda: rewards.get_soft_overlong_punishment(100, 20)([[0] * 80, [0] * 90, [0] * 100, [0] * 101]),
     [0.0, -0.5, -1.0, -1.0]),
    ("code_format", lambda: rewards.get_code_format_reward("python")(
        ["<think>\nx\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>", "<think>\nx\n</think>\n<answer>\nno\n</answer>"]),
     [1.0, 0.0]),
    ("extract_code last block", lambda: rewards.extract_code("```python\na\n```\n```python\nb\n```"), "b\n"),
    ("extract_code other language", lambda: rewards.extract_code("```cpp\nint x;\n```", "cpp"), "int x;\n"),
    ("extract_code no language", lambda: rewards.extract_code("```python\na\n```", None), ""),
]


@pytest.mark.parametrize(("name", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_open_r1_api_values(name, call, expected):
    assert call() == expected


def test_factories_reject_what_open_r1_rejects():
    # Open-R1's own test's message (test_positive_max_penalty_raises_value_error), and the recipe field's name
    with pytest.raises(ValueError, match="max_penalty 1.5 should not be positive") as raised:
        rewards.get_repetition_penalty_reward(ngram_size=2, max_penalty=1.5)
    assert "repetition_max_penalty" in str(raised.value)


def test_functions_keep_open_r1_names_for_trl_metrics():
    assert rewards.get_cosine_scaled_reward().__name__ == "cosine_scaled_reward"
    assert rewards.get_soft_overlong_punishment(10, 2).__name__ == "soft_overlong_punishment_reward"
    assert rewards.accuracy_reward.__name__ == "accuracy_reward"


@pytest.mark.skipif(probe() is not None, reason="no jail here")
def test_code_rewards_run_locally_with_open_r1_arguments():
    info = {"language": "python", "test_cases": [{"input": "2\n", "output": "4\n"}]}
    texts = ["```python\nprint(int(input()) * 2)\n```", "```python\nprint(5)\n```"]
    assert rewards.code_reward(texts, provider_type="local", verification_info=[info, info]) == [1.0, 0.0]
    assert rewards.binary_code_reward(texts, num_parallel=1, provider_type="local", verification_info=[info, info]) == [1.0, 0.0]
    cpp = dict(info, language="cpp")
    with pytest.raises(ValueError, match="mixes languages"):
        rewards.code_reward(texts, provider_type="local", enforce_same_language=True, verification_info=[info, cpp])


def test_get_reward_funcs_takes_open_r1_script_args():
    from r1kit.config.schema import GRPOScriptArguments

    funcs = rewards.get_reward_funcs(GRPOScriptArguments(dataset_name="x", reward_funcs=["accuracy", "format", "tag_count"]))
    assert [f.__name__ for f in funcs] == ["accuracy_reward", "format_reward", "tag_count_reward"]
