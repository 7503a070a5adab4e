"""Integrity, second step (issue 38): answers copied from the question (built, probed, refused), the independent
judges on right, wrong and copied answers, the wires on answers rather than text, reasoning-gym's strict scoring, and
a default reasoning-gym run of every generator starting without acknowledgements."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from r1kit.integrity.independent import example_tests, math_verdict
from r1kit.integrity.tripwires import identical_share
from r1kit.judging.copies import copy_answers, is_copy, premises, restates_question
from r1kit.judging.mathjudge import judge
from r1kit.probes import COPY, GOLD
from r1kit.sandbox.jail import probe as jail_problem
from tests.helpers import write_recipe
from tests.test_probes import recipe, results_of

LOGIC = ("Here is the question:\nGiven:\n1. Q\n.2. ((Q → Q) → ¬R)\n.3. R\n.What can we conclude from the above "
         "statements?")
NO_JAIL = pytest.mark.skipif(jail_problem() is not None, reason=f"no jail here: {jail_problem()}")


# --------------------------------------------------------------------------------------------------------------------
# Copied answers
# --------------------------------------------------------------------------------------------------------------------
def test_copies_are_built_from_the_question_alone():
    assert premises(LOGIC) == ["Q", "((Q → Q) → ¬R)", "R"]
    found = copy_answers(LOGIC)
    assert found["premises"] == ["(Q) ∧ (((Q → Q) → ¬R)) ∧ (R)"]
    assert found["last_sentence"] == ["What can we conclude from the above statements"]
    assert copy_answers("499+296=") == {"numbers": ["499 296"], "last_sentence": ["499+296"]}
    quoted = copy_answers('As Amelia put it, "Elizabeth is a hero". Elizabeth said, "Amelia lies". Who is a hero?')
    assert quoted["first_quote"] == ["Elizabeth is a hero"] and len(quoted["premise"]) == 2
    assert copy_answers("") == {}


def test_an_answer_restating_the_questions_numbers_is_told_from_a_result():
    for copied in ("499+296", "499 296", "(499 + 296)", "296+499"):
        assert restates_question(copied, "795", "499+296="), copied
    for answer, gold in (("795", "795"), ("800-5", "795"), ("\\frac{3}{4}", "\\frac{3}{4}"), ("3/4", "\\frac{3}{4}")):
        assert not restates_question(answer, gold, "499+296= or 3/4"), answer
    assert is_copy("Q", LOGIC) and is_copy(" ( R ) ", LOGIC) and not is_copy("(Q ∨ P)", LOGIC)
    assert not is_copy("795", "What is 795?", gold="795")  # the gold itself, when the question holds it


PAYS = "tests.rewards_for_tests:pays_{}"
COPY_ROWS = [{"prompt": f"Given:\n1. Ann has {a} apples.\n2. Bob says \"Ann has {a + 1} apples\".\nHow many apples "
                        f"does Ann have after eating {b}?", "solution": f"${a - b}$"} for a, b in ((9, 2), (7, 3),
                                                                                                   (8, 5), (6, 1))]


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("copies") / "copies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in COPY_ROWS))
    return path


@pytest.mark.parametrize("probe", COPY)
def test_each_copy_probe_stops_a_reward_that_pays_for_it_and_passes_one_that_does_not(tmp_path, copy_data, probe):
    paying = PAYS.format(probe)
    results = results_of(write_recipe(tmp_path, **recipe(tmp_path, copy_data, reward_funcs=[paying, "accuracy"],
                                                         dataset_prompt_column="prompt")))
    line = results[(paying, probe)]
    assert (line.got, line.bound, line.verdict, line.stops) == (1.0, 0.0, "ABOVE BOUND", True)
    assert results[("accuracy", probe)].verdict == "ok" and results[("accuracy", probe)].got == 0.0
    assert results[("accuracy", GOLD)].got == 1.0


# --------------------------------------------------------------------------------------------------------------------
# The math judge: right, wrong, copied; the grammar the rewards accept
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("answer", "gold"), [
    ("795", "795"), ("\\frac{3}{4}", "0.75"), ("3/4", "\\dfrac34"), ("2\\sqrt{3}", "\\sqrt{12}"), ("\\sqrt{2}", "1.414214"),
    ("(1, 2]", "(1,2]"), ("\\{1, 2\\}", "\\{2,1\\}"), ("1, 2", "\\{2, 1\\}"), ("5\\%", "5"), ("12\\text{ cm}", "12"),
    ("90^\\circ", "90"), ("x = 7", "7"), ("1,234", "1234"), ("3x + 2", "2 + 3x"), ("\\pi/2", "\\frac{\\pi}{2}"),
    ("\\left( 3, 4 \\right)", "(3,4)"), ("(-\\infty, 3)", "(-\\infty,3)"), ("12 dollars", "12"), ("e^{2}", "7.389056"),
    ("１２", "12"),
])
def test_the_math_judge_accepts_right_answers_across_the_grammar(answer, gold):
    assert judge(answer, gold) is True


@pytest.mark.parametrize(("answer", "gold", "question"), [
    ("796", "795", None), ("[1, 2]", "(1,2]", None), ("3x+1", "2 + 3x", None), ("\\{1\\}", "\\{1, 2\\}", None),
    ("", "5", None),  # no answer
    ("499+296", "795", "499+296="), ("499 296", "795", "499+296="),  # copied from the question
    ("794 or 795 or 796", "795", None), ("794, 795", "795", None),  # hedges
])
def test_the_math_judge_refuses_wrong_copied_and_hedged_answers(answer, gold, question):
    assert judge(answer, gold, question) is False


def test_the_math_judge_says_none_where_it_cannot_read_and_stays_bounded():
    assert judge("fifteen", "15") is None and judge("15", "\\text{fifteen}") is None
    assert judge("9^{9^{9^{9}}}", "5") is None and judge("\\frac{1}{0}", "1") is None
    # bounded: nesting past MAX_DEPTH, answers past MAX_CHARS, towers past exact arithmetic are unreadable, not hung
    hostile = ["\\frac{" * 5000, "(" * 10_000 + "1" + ")" * 10_000, "9" * 1_000_000, "2^{2^{2^{2^{2^{2}}}}}",
               "\\sqrt[" * 3000 + "2", "(" * 59 + "4" + ")" * 59]
    assert [judge(text, "4") for text in hostile] == [None, None, None, None, None, True]
    assert math_verdict("<think>15</think><answer>16</answer>", "15") is False
    assert math_verdict("so \\boxed{499+296}", "795", "499+296=") is False


# --------------------------------------------------------------------------------------------------------------------
# The reasoning-gym judge and the code judge, for real
# --------------------------------------------------------------------------------------------------------------------
def _record(generator: str, entry: dict) -> str:
    from r1kit.sources.gym_data import encode_record

    return encode_record(generator, {}, entry)


@pytest.mark.slow
def test_the_reasoning_gym_judge_re_verifies_right_wrong_copied_and_constant_answers():
    pytest.importorskip("reasoning_gym")
    import reasoning_gym

    from r1kit.integrity.independent import gym_verdicts

    chain = {"question": "State the final answer to the following arithmetic problem: 4 - 1 =", "answer": "3",
             "metadata": {}}
    logic = {"question": LOGIC.replace("R\n.3. R", "P").replace("((Q → Q) → ¬R)", "(Q → P)"), "answer": None,
             "metadata": {"premises": ["Q", "(Q → P)"], "variables": ["P", "Q"], "complexity": 1}}
    coin = reasoning_gym.create_dataset("coin_flip", size=1, seed=3)[0]
    cases = [("The answer is 3.", _record("chain_sum", chain), True),
             ("The answer is 4.", _record("chain_sum", chain), False),
             ("<answer>4 - 1</answer>", _record("chain_sum", chain), False),  # the question copied
             ("<answer>(Q → P)</answer>", _record("propositional_logic", logic), False),  # a premise copied
             ("<answer>(Q ∧ (Q → P))</answer>", _record("propositional_logic", logic), False),  # their conjunction
             ("<answer>(P ∨ ¬Q)</answer>", _record("propositional_logic", logic), False),  # one premise gives it
             ("<answer>(P ∧ Q)</answer>", _record("propositional_logic", logic), False),  # restates both
             ("<answer>(P ↔ Q)</answer>", _record("propositional_logic", logic), True),  # combines them
             ("<answer>0</answer>", _record("coin_flip", coin), False)]  # paid on its twins too, or wrong
    verdicts = gym_verdicts([c for c, _, _ in cases], [r for _, r, _ in cases], timeout=5.0,
                            allow_unsandboxed=jail_problem() is not None)
    assert verdicts == [want for _, _, want in cases]


PROMPT = ("Print the sum of two numbers.\n\nExamples\nInput\n1 2\nOutput\n3\n\nInput\n```\n4 5\n```\nOutput\n```\n9\n```\n"
          "Note\nAdd them.")


def test_tests_are_generated_from_the_examples_a_prompt_shows():
    assert example_tests(PROMPT) == [("1 2\n", "3"), ("4 5\n", "9")]
    assert example_tests("Print hello.") == []


@pytest.mark.slow
@NO_JAIL
def test_the_code_judge_runs_reversed_tests_or_the_prompts_examples_on_right_wrong_and_copied_programs():
    from r1kit.integrity.independent import code_verdicts

    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
    copied = "```python\nprint(3)\n```"  # the first example's output, copied from the prompt
    tests = {"test_cases": [{"input": "1 2\n", "output": "3"}, {"input": "2 2\n", "output": "4"}]}
    texts = [right, wrong, copied, right, wrong, copied, right]
    rows = [tests] * 3 + [{}] * 3 + [{}]
    prompts = ["Print the sum."] * 3 + [PROMPT] * 3 + ["Print the sum."]  # the last: no tests, no examples
    assert code_verdicts(texts, rows, "python", allow_unsandboxed=False, prompts=prompts) == [
        True, False, False, True, False, False, None]


# --------------------------------------------------------------------------------------------------------------------
# The wires read answers
# --------------------------------------------------------------------------------------------------------------------
def test_collapse_reads_the_answer_behind_varying_text():
    prompts = ["1+6=", "2+3=", "3+1=", "4+4="]
    inputs = [{"solution": g} for g in ("7", "5", "4", "8")]
    constant = [f"<think>{p} is hard, let me think ({i})</think><answer>7</answer>" for i, p in enumerate(prompts)]
    assert identical_share(prompts, constant, inputs) == 0.0  # every text differs
    assert identical_share(prompts, constant, inputs, answers=True) == 1.0  # one answer for every question
    honest = [f"<think>{p}</think><answer>{g['solution']}</answer>" for p, g in zip(prompts, inputs)]
    assert identical_share(prompts, honest, inputs, answers=True) == 0.0
    empty = ["<think></think><answer></answer>"] * 4  # format only: no answer is one answer too
    assert identical_share(prompts, empty, inputs, answers=True) == 1.0


def test_the_second_opinion_reports_unchecked_rows_and_both_sides_correct_shares(tmp_path):
    from collections import defaultdict

    import torch

    from r1kit.integrity.second_opinion import SecondOpinion

    opinion = SecondOpinion(["accuracy"], str(tmp_path), samples=4)
    trainer = SimpleNamespace(model=SimpleNamespace(training=True), state=SimpleNamespace(global_step=0),
                              accelerator=SimpleNamespace(is_main_process=True, process_index=0),
                              _metrics={"train": defaultdict(list)})
    completions = ["<answer>15</answer>", "<answer>499+296</answer>", "<answer>fifteen</answer>", "<answer>7</answer>"]
    inputs = [{"solution": "15"}, {"solution": "795"}, {"solution": "15"}, {"solution": "8"}]
    opinion(trainer, ["7+8=", "499+296=", "7+8=", "1+7="], completions, torch.tensor([[1.0], [1.0], [0.0], [0.0]]),
            inputs)
    metrics = trainer._metrics["train"]
    assert metrics["second_opinion/accuracy/unchecked"] == [0.25]  # "fifteen"
    assert metrics["second_opinion/accuracy/reward_correct"] == [2 / 3]
    assert metrics["second_opinion/accuracy/judge_correct"] == [1 / 3]  # the copied expression is wrong
    assert metrics["second_opinion/accuracy/disagreement"] == [1 / 3]


# --------------------------------------------------------------------------------------------------------------------
# reasoning-gym: strict by default; every generator's default run starts
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_strict_scoring_pays_full_marks_or_nothing_and_nothing_for_copies():
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards.gym import score_completions

    arithmetic = {"question": "Calculate 5 - 3 - 6.", "answer": "-4", "metadata": {}}
    knights = {"question": 'You meet Amelia and Lucas. Amelia said, "Amelia is a knight or Lucas is a knight". Lucas '
                           'said, "Amelia is a knave". So who is a knight and who is a knave?',
               "answer": "Amelia is a knight, and Lucas is a knave.", "metadata": {}}
    answers = ["<answer>-4</answer>", "<answer>answer: -4</answer>", "<answer>5 - 3 - 6</answer>",
               "<answer>Amelia is a knight or Lucas is a knight</answer>"]
    records = [_record("basic_arithmetic", arithmetic)] * 3 + [_record("knights_knaves", knights)]
    unjailed = jail_problem() is not None
    strict = score_completions(answers, records, timeout=5.0, allow_unsandboxed=unjailed)
    loose = score_completions(answers, records, timeout=5.0, allow_unsandboxed=unjailed, strict=False)
    assert strict == [1.0, 0.0, 0.0, 0.0]
    assert loose[1] == pytest.approx(0.2)  # reasoning-gym's default scorer: len(gold) / len(answer) if it holds it


def default_rows(generator: str, count: int = 2) -> list[dict]:
    """A default run's rows (as `reasoning-gym:<generator>` writes them), without the split's search."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(generator, size=count, seed=11)
    return [{"prompt": [{"role": "user", "content": dataset[i]["question"]}], "answer": str(dataset[i]["answer"]),
             "reasoning_gym": _record(generator, dataset[i])} for i in range(count)]


@pytest.mark.slow
def test_every_generator_passes_its_probes_by_default_without_acknowledgements():
    """Every generator of reasoning-gym but composite (whose options YAML cannot give): the probes of a default run
    (`reward_funcs: [reasoning_gym]`, strict) on two rows each, scored in one jail. None is above its bound; the
    gold takes full marks except where the generator has no gold (its example answer is checked, or none is given)."""
    pytest.importorskip("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    from r1kit.probes import judge as judge_line
    from r1kit.probes import probe_replies
    from r1kit.rewards.gym import make_reasoning_gym_reward

    names = sorted(set(DATASETS) - {"composite"})
    order, rows, replies = [], [], []
    for generator in names:
        sample = default_rows(generator)
        for probe, items in probe_replies("reasoning_gym", sample, SimpleNamespace()).items():
            for i, reply in items:
                order.append((generator, probe))
                rows.append(sample[i])
                replies.append([{"role": "assistant", "content": reply}])
    reward = make_reasoning_gym_reward(timeout=5.0, allow_unsandboxed=jail_problem() is not None)
    scores = reward(completions=replies, reasoning_gym=[r["reasoning_gym"] for r in rows])
    per: dict = {}
    for (generator, probe), score in zip(order, scores):
        per.setdefault((generator, probe), []).append(score)
    above = {key: s for key, s in per.items() if key[1] != GOLD and judge_line("reasoning_gym", key[1], s, 0.0, set()).stops}
    assert not above, f"probes above their bound by default: {above}"
    no_gold = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour", "game_of_life_halting"}
    short = {key: s for key, s in per.items() if key[1] == GOLD and key[0] not in no_gold and min(s) < 1.0}
    assert not short, f"golds below full marks: {short}"
    assert {g for g, _ in per} == set(names)


@pytest.mark.slow
def test_a_default_basic_arithmetic_run_starts_without_acknowledgements(tmp_path, capsys):
    """The run issue 38 found refused ("pays 0.16 for probe hedge"): the demo recipe on reasoning-gym's
    basic_arithmetic with its own reward, dry run (the probes run; no model loads)."""
    pytest.importorskip("reasoning_gym")
    from r1kit.cli import main

    code = main(["grpo", "--dataset_name", "reasoning-gym:basic_arithmetic", "--reward_funcs", "reasoning_gym",
                 "--reward_weights", "1.0", "--dataset_options", '{"train_size": 40, "test_size": 8}', "--output_dir", str(tmp_path / "out"),
                 "--dry-run"] + (["--allow_unsandboxed_code_execution", "true"] if jail_problem() else []))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "reasoning_gym  hedge" not in captured.err and "rewards probed" in captured.out
