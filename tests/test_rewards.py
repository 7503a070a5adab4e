"""Every reward, table-driven: inputs and the values a reader can check by hand.

Where r1kit deliberately differs from Open-R1 the row says so (`# Open-R1: ...`).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from types import SimpleNamespace

import pytest

from r1kit.errors import ConfigError
from r1kit.rewards import REWARD_FUNCS_REGISTRY, get_reward_funcs, required_columns
from r1kit.rewards import code as code_rewards
from r1kit.rewards.code import BadRow, RowWarnings, make_binary_code_reward, make_code_reward, score_rows
from r1kit.rewards.format import (
    check_repetition_params,
    make_code_format_reward,
    make_format_reward,
    make_reasoning_steps_reward,
    make_repetition_penalty_reward,
    make_soft_overlong_punishment,
    make_tag_count_reward,
)
from r1kit.rewards.math import check_cosine_bounds, make_accuracy_reward, make_cosine_reward, make_length_reward
from r1kit.sandbox import PASSED, SANDBOX_ERROR, WRONG_ANSWER, Program
from r1kit.sandbox import TestResult as Result  # (not collected as a test class)
from r1kit.sandbox.jail import probe

MATH = {"workers": 2}  # verifier processes for the math rewards


def recipe(**values) -> SimpleNamespace:
    """The recipe fields `get_reward_funcs` reads, and nothing else (a field that is missing keeps its default)."""
    return SimpleNamespace(**values)


def conversation(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


# --------------------------------------------------------------------------------------------------------------------
ACCURACY = [
    (r"\boxed{\frac{63}{400}}", r"\frac{63}{400}", 1.0),
    (r"\boxed{\frac{64}{400}}", r"\frac{63}{400}", 0.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    ("", "5", 0.0),
    (r"\boxed{3}", "6", 0.0),  # bare numeric gold parses
    ("The answer is 3", "3", 0.0),  # no LaTeX anchor, no answer block
    ("<think>2+1</think><answer>3</answer>", "3", 1.0),  # Open-R1: 0.0 (a bare number in the answer block)
    ("I guess 42. <answer>41</answer>", "42", 0.0),  # numbers outside the answer block do not count
    (r"so the result is $\boxed{42}$", r"Worked out: $\boxed{42}$", 1.0),
    (r"\boxed{1} or \boxed{2}", "2", 0.0),  # the first boxed answer is the answer
    (r"\boxed{5}", "abc", None),  # unparseable gold: skipped, not 0
    (r"\boxed{5}", "", None),
    (r"\boxed{5\text{ cm}}", r"5\text{ m}", 0.0),  # Open-R1: 1.0 (math-verify drops the unit)
    (r"\boxed{5\text{ m}}", r"5\text{ m}", 1.0),
    (r"\boxed{42=41}", "41", 0.0),  # Open-R1: 1.0 (math-verify reads an equation as its last side)
    (r"\boxed{x = 41}", "41", 1.0), (r"<answer>a = 42 = 41</answer>", "41", 0.0), (r"\boxed{x \neq 41}", "41", 0.0),
    (r"\boxed{3}", r"x \le 3", 0.0),  # Open-R1: 1.0 (a bare relation gold was read as its first number)
    (r"\boxed{3 \ge x}", r"x \le 3", 1.0),  # Open-R1: 0.0
]


@pytest.mark.parametrize(("completion", "gold", "expected"), ACCURACY)
def test_accuracy(completion, gold, expected):
    assert make_accuracy_reward(**MATH)([completion], solution=[gold]) == [expected]


def test_accuracy_reads_conversations_and_counts_unparseable_golds():
    logged = {}
    rewards = make_accuracy_reward(**MATH)(
        [conversation(r"\boxed{7}"), conversation(r"\boxed{7}"), conversation("x")],
        solution=["7", "not a number", None],
        log_metric=lambda name, value: logged.setdefault(name, value),
    )
    assert rewards == [1.0, None, None]
    assert logged["rewards/accuracy/unparseable_gold"] == 2.0


# --------------------------------------------------------------------------------------------------------------------
FORMAT = [
    ("<think>a</think><answer>b</answer>", False, 1.0),  # Open-R1: 0.0 (it requires a newline inside each tag)
    ("<think>\na\n</think>\n<answer>\nb\n</answer>\n", False, 1.0),
    ("\n\n<think>\na\n</think>\n<answer>\nb\n</answer>", False, 1.0),  # Open-R1: 0.0 (<think> must come first)
    ("<think>a</think>", False, 0.0),
    ("<answer>b</answer>", False, 0.0),
    ("<think>a</think><answer>b</answer> and more", False, 0.0),  # Open-R1: 1.0 (trailing text accepted)
    ("<think>a</think><answer>b</answer><think>c</think><answer>d</answer>", False, 0.0),  # Open-R1: 1.0
    ("<answer>b</answer><think>a</think>", False, 0.0),
    ("<think>a<think></think><answer>b</answer>", False, 0.0),
    ("a</think><answer>b</answer>", False, 0.0),  # starts inside the think block...
    ("a</think><answer>b</answer>", True, 1.0),  # ...accepted when the template pre-fills <think>
    ("<think>a</think><answer>b</answer>", True, 1.0),
]


@pytest.mark.parametrize(("completion", "prefilled", "expected"), FORMAT)
def test_format(completion, prefilled, expected):
    assert make_format_reward(think_prefilled=prefilled)([completion]) == [expected]


TAG_COUNT = [
    ("<think>a</think><answer>b</answer>", False, 1.0),  # Open-R1: 0.0 (it counts the tags with their newlines)
    ("<think>\na\n</think>\n<answer>\nb\n</answer>", False, 1.0),
    ("<think>a</think>", False, 0.5),
    ("<think><think>a</think><answer>b</answer>", False, 0.75),  # duplicated tag earns nothing
    ("", False, 0.0),
    ("a</think><answer>b</answer>", False, 0.75),
    ("a</think><answer>b</answer>", True, 1.0),
]


@pytest.mark.parametrize(("completion", "prefilled", "expected"), TAG_COUNT)
def test_tag_count(completion, prefilled, expected):
    assert make_tag_count_reward(think_prefilled=prefilled)([completion]) == [expected]


REASONING_STEPS = [
    ("Step 1: a Step 2: b Step 3: c", 1.0),
    ("First, a. Second, b. Finally, c.", 1.0),
    ("Step 1: only", 1 / 3),
    ("First, a. Finally, b.", 2 / 3),
    ("x\n1. a\n2. b", 2 / 3),  # Open-R1: 0.0 (numbered lines only counted at the very start)
    ("- a\n- b\n* c\n", 1.0),
    ("x\n-5 is negative\n*bold* text", 0.0),  # Open-R1: 2/3 (a "-" or "*" at a line start counts, space or not)
    ("plain text", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), REASONING_STEPS)
def test_reasoning_steps(completion, expected):
    assert make_reasoning_steps_reward()([completion]) == [pytest.approx(expected)]


REPETITION = [
    (2, -1.0, "this is a test sentence", 0.0),
    (2, -1.0, "this this this this this", -0.75),  # 4 bigrams, 1 unique
    (2, -1.0, "this is a this is a test", -1 / 3),  # 6 bigrams, 4 unique
    (3, -0.5, "test test test test", -0.25),  # 2 trigrams, 1 unique
    (3, -2.0, "this is a this is a test", -0.4),  # 5 trigrams, 4 unique
    (3, -1.0, "", 0.0),
    (3, -1.0, "two words", 0.0),  # fewer words than n
    (2, -1.0, "This IS this is", -1 / 3),  # case-insensitive
]


@pytest.mark.parametrize(("n", "max_penalty", "completion", "expected"), REPETITION)
def test_repetition_penalty(n, max_penalty, completion, expected):
    func = make_repetition_penalty_reward(n_grams=n, max_penalty=max_penalty)
    assert func([completion]) == [pytest.approx(expected)]


def test_repetition_penalty_must_not_be_positive_but_only_when_selected():
    with pytest.raises(ConfigError, match="repetition_max_penalty"):
        make_repetition_penalty_reward(max_penalty=1.5)
    with pytest.raises(ConfigError, match="repetition_max_penalty"):
        get_reward_funcs(recipe(reward_funcs=["repetition_penalty"], repetition_max_penalty=1.5))
    (func,) = get_reward_funcs(recipe(reward_funcs=["format"], repetition_max_penalty=1.5))
    assert func(["x"]) == [0.0]  # Open-R1 built every reward and failed here


# --------------------------------------------------------------------------------------------------------------------
COSINE = [  # bounds (-1, -0.5, 0.5, 1), cosine_max_len 100, lengths in tokens
    (r"\boxed{7}", 0, 1.0),
    (r"\boxed{7}", 50, 0.75),
    (r"\boxed{7}", 100, 0.5),
    (r"\boxed{7}", 200, 0.5),  # Open-R1: 1.0 (the cosine wraps around past max_len)
    (r"\boxed{8}", 0, -1.0),  # a short wrong answer is penalised most (Open-R1's config default gave 0.0)
    (r"\boxed{8}", 50, -0.75),
    (r"\boxed{8}", 100, -0.5),
    (r"\boxed{8}", 300, -0.5),
]


@pytest.mark.parametrize(("completion", "length", "expected"), COSINE)
def test_cosine(completion, length, expected):
    func = make_cosine_reward(max_len=100, **MATH)
    assert func([completion], solution=["7"], completion_ids=[[1] * length]) == [pytest.approx(expected)]


def test_cosine_counts_characters_without_ids_and_skips_unparseable_gold():
    func = make_cosine_reward(max_len=20, **MATH)
    text = r"\boxed{7}" + " " * 1  # 10 characters: half of max_len
    assert func([text], solution=["7"]) == [pytest.approx(0.75)]
    assert func([text], solution=["gibberish"]) == [None]  # Open-R1: 1.0


LENGTH_ONE_GROUP = (
    [r"\boxed{7}", r"\boxed{7}", r"\boxed{8}", r"\boxed{8}"],
    [10, 20, 10, 20],
    [0.5, -0.5, 0.0, -0.5],  # correct short, correct long, wrong short, wrong long
)


def test_length_within_one_group():
    completions, lengths, expected = LENGTH_ONE_GROUP
    func = make_length_reward(**MATH)
    ids = [[0] * n for n in lengths]
    assert func(completions, solution=["7"] * 4, completion_ids=ids, prompts=["p"] * 4) == expected


def test_length_is_computed_per_prompt_group_not_per_batch():
    func = make_length_reward(**MATH)
    rewards = func(
        [r"\boxed{7}"] * 4,
        solution=["7"] * 4,
        completion_ids=[[0] * 10, [0] * 20, [0] * 100, [0] * 100],
        prompts=["a", "a", "b", "b"],
    )
    assert rewards == [0.5, -0.5, 0.0, 0.0]  # over the whole batch the first two would be 0.5 and ~0.39


def test_length_equal_lengths_and_unparseable_gold():
    func = make_length_reward(**MATH)
    assert func([r"\boxed{7}", r"\boxed{7}"], solution=["7", "7"], prompts=["p", "p"]) == [0.0, 0.0]
    assert func([r"\boxed{7}", r"\boxed{7}"], solution=["junk", "junk"], prompts=["p", "p"]) == [None, None]


# --------------------------------------------------------------------------------------------------------------------
SOFT_OVERLONG = [(80, 0.0), (81, -0.05), (90, -0.5), (100, -1.0), (101, -1.0)]  # limit 100, ramp 20


@pytest.mark.parametrize(("length", "expected"), SOFT_OVERLONG)
def test_soft_overlong_punishment(length, expected):
    func = make_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    assert func(["x"], completion_ids=[[0] * length]) == [pytest.approx(expected)]


def test_soft_overlong_follows_the_trainer_by_default():
    names = ["soft_overlong_punishment"]
    (func,) = get_reward_funcs(recipe(reward_funcs=names, max_completion_len=None), SimpleNamespace(max_completion_length=64))
    assert func(["x"] * 3, completion_ids=[[0] * 48, [0] * 56, [0] * 64]) == [0.0, -0.5, -1.0]
    (func,) = get_reward_funcs(recipe(reward_funcs=names, max_completion_len=100), SimpleNamespace(max_completion_length=64))
    assert func(["x"], completion_ids=[[0] * 64]) == [0.0]  # the recipe's limit wins
    assert make_soft_overlong_punishment()(["x"], completion_ids=[[0] * 16384]) == [-1.0]  # no limit anywhere: 16384


CODE_FORMAT = [
    ("<think>a</think><answer>```python\nprint(1)\n```</answer>", None, 1.0),
    ("<think>a</think><answer>Here:\n```python\nprint(1)\n```\ndone</answer>", None, 1.0),
    ("<think>a</think><answer>```cpp\nint main(){}\n```</answer>", None, 0.0),
    ("<think>a</think><answer>```cpp\nint main(){}\n```</answer>", "cpp", 1.0),  # the row's language wins
    ("<think>a</think><answer>print(1)</answer>", None, 0.0),
    ("```python\nprint(1)\n```", None, 0.0),
]


@pytest.mark.parametrize(("completion", "language", "expected"), CODE_FORMAT)
def test_code_format(completion, language, expected):
    kwargs = {"language": [language]} if language else {}
    assert make_code_format_reward()([completion], **kwargs) == [expected]


# --------------------------------------------------------------------------------------------------------------------
NAMES = {
    "accuracy": "accuracy_reward",
    "format": "format_reward",
    "tag_count": "tag_count_reward",
    "reasoning_steps": "reasoning_steps_reward",
    "cosine": "cosine_scaled_reward",
    "repetition_penalty": "repetition_penalty_reward",
    "length": "len_reward",
    "soft_overlong_punishment": "soft_overlong_punishment_reward",
    "code_format": "code_format_reward",
}


@pytest.mark.parametrize(("name", "function_name"), NAMES.items())
def test_function_names_match_open_r1(name, function_name):
    assert REWARD_FUNCS_REGISTRY[name].factory_function()().__name__ == function_name


def test_registry_lists_open_r1_names_and_columns():
    assert set(NAMES) | {"code", "binary_code", "ioi_code", "cf_code", "reasoning_gym"} == set(REWARD_FUNCS_REGISTRY)
    assert required_columns(["accuracy", "format", "code"]) == {
        "accuracy": ("solution",),
        "format": (),
        "code": ("verification_info",),
    }


def test_unknown_reward_lists_valid_names():
    with pytest.raises(ValueError, match="unknown reward function.*valid names: accuracy"):
        get_reward_funcs(recipe(reward_funcs=["accuracyy"]))


def test_import_path_rewards():
    (func,) = get_reward_funcs(recipe(reward_funcs=["tests.rewards_for_tests:length_variety"]))
    assert func(["abcd"]) == [0.2]
    with pytest.raises(ValueError, match="cannot import reward function"):
        get_reward_funcs(recipe(reward_funcs=["tests.nope:f"]))


def test_repetition_penalty_zh_needs_jieba_or_works():
    try:
        import jieba  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'r1kit\[zh\]'"):
            make_repetition_penalty_reward(language="zh")
    else:
        func = make_repetition_penalty_reward(n_grams=1, language="zh")
        assert func(["你好你好"])[0] < 0


def test_format_prefill_is_detected_from_the_chat_template():
    from r1kit.grpo import generation_prompt_ends_in_think
    from r1kit.loading.modeling import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    assert not generation_prompt_ends_in_think(tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("'<|assistant|>' }}{% endif %}", "'<|assistant|><think>\n' }}{% endif %}")
    assert generation_prompt_ends_in_think(tokenizer)


# --------------------------------------------------------------------------------------------------------------------
# The registry: recipe fields -> factory parameters
# --------------------------------------------------------------------------------------------------------------------
def test_every_field_table_names_real_recipe_fields_and_factory_parameters():
    from r1kit.config.schema import GRPOConfig, GRPOScriptArguments

    script_fields = {f.name: f for f in fields(GRPOScriptArguments)}
    trainer_fields = {f.name for f in fields(GRPOConfig)}
    for spec in REWARD_FUNCS_REGISTRY.values():
        parameters = inspect.signature(spec.factory_function()).parameters
        assert set(spec.fields) == set(parameters), spec.name  # every parameter can be set from the recipe
        for param, names in spec.fields.items():
            for name in (names,) if isinstance(names, str) else names:
                assert (name in script_fields) != (name in trainer_fields), (spec.name, name)  # in exactly one
            if isinstance(names, str) and name in script_fields:  # one default: the recipe's is unset or the factory's
                recipe_default = script_fields[name].default
                assert recipe_default is MISSING or recipe_default is None or recipe_default == parameters[param].default, (
                    spec.name, param, recipe_default, parameters[param].default)


def test_overrides_replace_a_field_without_touching_the_recipe():
    args = recipe(reward_funcs=["format", "tag_count", "code_format"], format_think_prefilled=None)
    prefilled = "a</think><answer>```python\nx\n```</answer>"
    assert [f([prefilled]) for f in get_reward_funcs(args)] == [[0.0], [0.75], [0.0]]
    assert [f([prefilled]) for f in get_reward_funcs(args, format_think_prefilled=True)] == [[1.0], [1.0], [1.0]]
    assert args.format_think_prefilled is None
    with pytest.raises(TypeError, match="format_think_prefiled"):
        get_reward_funcs(args, format_think_prefiled=True)


def test_parameter_rules_name_the_recipe_field():
    with pytest.raises(ConfigError, match="repetition_n_grams"):
        check_repetition_params(0, -1.0)
    with pytest.raises(ConfigError, match="repetition_language"):
        check_repetition_params(3, -1.0, "fr")
    with pytest.raises(ConfigError, match="cosine bounds must be ordered cosine_min_value_wrong"):
        check_cosine_bounds(-1.0, -0.5, -2.0, 1.0, 1000)
    with pytest.raises(ConfigError, match="cosine_max_len"):
        make_cosine_reward(max_len=0)
    with pytest.raises(ConfigError, match="soft_punish_cache"):
        make_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=11)
    check_repetition_params(3, 0.0)
    check_cosine_bounds(-1.0, -0.5, 0.5, 1.0, 1)


# --------------------------------------------------------------------------------------------------------------------
# The code rewards' per-row failure policy, without a sandbox
# --------------------------------------------------------------------------------------------------------------------
def test_score_rows_failure_policy():
    """A row that cannot be judged and a sandbox failure are None (each counted); no code scores the fixed value and
    is not run; whatever the program did is scored."""
    ran, logged = [], {}

    def build(text, row):
        if row == "bad":
            raise BadRow("a broken row")
        return Program(text, inputs=["", ""]), row

    def run(jobs):
        ran.extend(program.code for program, _ in jobs)
        statuses = {"down": [SANDBOX_ERROR, SANDBOX_ERROR], "half": [PASSED, WRONG_ANSWER], "ok": [PASSED, PASSED]}
        return [[(Result(s), float(s == PASSED)) for s in statuses[row]] for _, row in jobs]

    def score(job, tests):
        return sum(s for _, s in tests) / len(tests)

    out = score_rows("demo", ["print(1)", "print(2)", "  ", "print(3)", "print(4)"], ["bad", "down", "ok", "half", "ok"],
                     RowWarnings("demo"), build, run, score, no_code=-1.0, log_metric=logged.__setitem__)
    assert out == [None, None, -1.0, 0.5, 1.0]
    assert ran == ["print(2)", "print(3)", "print(4)"]  # neither the bad row nor the answer without code ran
    assert logged == {"rewards/demo/sandbox_errors": 1.0, "rewards/demo/bad_rows": 1.0}


# binary_code is all or nothing: one failing test among many is 0.0, however many pass (a pass-rate threshold paid a
# program failing 1 of 150). ECHO passes every test but the one whose input is "7".
ECHO = "```python\nx = input()\nprint('wrong' if x == '7' else x)\n```"
MANY_TESTS = [{"input": str(i), "output": str(i)} for i in range(150)]


class OneWrongProvider:
    """Stands in for a sandbox: every test passes except the last of each program."""

    def execute(self, programs):
        return [[Result(PASSED)] * (len(p.inputs) - 1) + [Result(WRONG_ANSWER)] for p in programs]


def test_binary_code_pays_nothing_for_one_failing_test_among_many(monkeypatch):
    monkeypatch.setattr(code_rewards, "make_provider", lambda **_: OneWrongProvider())
    info = {"test_cases": MANY_TESTS}
    assert make_binary_code_reward()([ECHO], verification_info=[info]) == [0.0]
    assert make_code_reward()([ECHO], verification_info=[info]) == [pytest.approx(149 / 150)]


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no jail here: {probe()}")
def test_binary_code_in_the_local_sandbox_is_all_or_nothing():
    right = ECHO.replace("'wrong' if x == '7' else x", "x")
    infos = [{"test_cases": MANY_TESTS}] * 2
    assert make_binary_code_reward(num_parallel=2)([ECHO, right], verification_info=infos) == [0.0, 1.0]
