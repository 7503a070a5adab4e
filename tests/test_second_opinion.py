"""The second opinion: sampled completions judged again by an independent path (r1kit.integrity.second_opinion), unit by unit
and in a training run of the tiny model."""

from __future__ import annotations

import json
import math
import random
import time
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from r1kit.integrity.second_opinion import SecondOpinion, math_verdict, pick_rows
from tests.helpers import descendants, tiny_recipe, write_recipe
from tests.test_grpo import run_recipe


def fake_trainer(step: int = 0):
    return SimpleNamespace(model=SimpleNamespace(training=True), accelerator=SimpleNamespace(is_main_process=True,
                           process_index=0), state=SimpleNamespace(global_step=step),
                           _metrics={"train": defaultdict(list)})


def test_math_verdicts_read_the_last_boxed_then_the_last_answer_block():
    assert math_verdict("<think>7+8</think><answer>15</answer>", "15") is True
    assert math_verdict("<think>15</think><answer>16</answer>", "$15$") is False  # the gold in the reasoning: wrong
    assert math_verdict("so \\boxed{\\frac{1}{2}}", "0.5") is True
    assert math_verdict("no answer at all, 15", "15") is False
    assert math_verdict("<answer>15</answer>", "\\text{fifteen}") is None  # a gold outside the grammar: unchecked
    assert math_verdict("<answer>fifteen</answer>", "15") is None  # an answer it cannot read: unchecked
    assert math_verdict("<answer>3 + 12</answer>", "15") is True  # evaluated, when the question does not give them
    assert math_verdict("<answer>3 + 12</answer>", "15", "What is 3 + 12?") is False  # the question restated


def test_hostile_answers_are_judged_in_bounded_time():
    hostile = ["\\boxed{" * 50_000, "<answer>" + "9" * 1_000_000 + "</answer>", "\\boxed{" + "{" * 100_000 + "}",
               "<answer>" * 100_000 + "</answer>" * 100_000, "1" * 2_000_000, "\\frac{1}{" + "0" * 500 + "}"]
    start = time.process_time()  # the CPU the judge used, which other work on the machine does not inflate
    verdicts = [math_verdict(text, "15") for text in hostile]
    assert time.process_time() - start < 5.0
    assert all(v is not True for v in verdicts)


def test_the_sample_favours_high_rewards_and_never_takes_unscored_rows():
    scores = [0.0] * 30 + [1.0] * 10 + [float("nan")] * 10
    counts = defaultdict(int)
    rng = random.Random(0)
    for _ in range(300):
        picked = pick_rows(scores, 4, rng)
        assert len(set(picked)) == 4 and all(not math.isnan(scores[i]) for i in picked)
        for i in picked:
            counts[scores[i]] += 1
    assert counts[1.0] / 10 > 2 * counts[0.0] / 30  # a high-reward row is drawn at least twice as often


def rewards_tensor(*columns):
    return torch.tensor(list(zip(*columns)), dtype=torch.float32)


def test_a_lying_reward_disagrees_and_is_written_down_an_honest_one_does_not(tmp_path):
    opinion = SecondOpinion(["accuracy", "my:liar"], str(tmp_path), samples=8, kinds={"my:liar": "math"})
    completions = ["<answer>15</answer>", "<answer>16</answer>"] * 4
    inputs = [{"solution": "15"}] * 8
    honest = [1.0, 0.0] * 4
    lies = [1.0] * 8
    trainer = fake_trainer(step=4)
    opinion(trainer, ["7+8="] * 8, completions, rewards_tensor(honest, lies), inputs)
    metrics = trainer._metrics["train"]
    assert metrics["second_opinion/accuracy/disagreement"] == [0.0]
    assert metrics["second_opinion/my:liar/disagreement"] == [0.5]
    rows = [json.loads(line) for line in (tmp_path / "second_opinion.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["reward"] for r in rows} == {"my:liar"}
    assert rows[0] == {"step": 5, "reward": "my:liar", "prompt": "7+8=", "completion": "<answer>16</answer>",
                       "gold": "15", "main_score": 1.0, "main_correct": True, "second_correct": False}


def test_in_the_background_the_verdicts_arrive_by_the_step_end(tmp_path):
    """Training judges in a worker thread while the step trains: the metrics and the record are the same, logged by
    the step's end (before the trainer logs the step and the tripwires read it)."""
    opinion = SecondOpinion(["my:liar"], str(tmp_path), samples=8, kinds={"my:liar": "math"}, background=True)
    trainer = fake_trainer(step=4)
    opinion(trainer, ["7+8="] * 8, ["<answer>15</answer>", "<answer>16</answer>"] * 4, rewards_tensor([1.0] * 8),
            [{"solution": "15"}] * 8)
    opinion.on_step_end(None, None, None)
    assert trainer._metrics["train"]["second_opinion/my:liar/disagreement"] == [0.5]
    assert len((tmp_path / "second_opinion.jsonl").read_text().splitlines()) == 4
    opinion.on_train_end(None, None, None)


def test_rows_the_second_path_cannot_judge_are_unchecked_and_a_failure_never_raises(tmp_path):
    opinion = SecondOpinion(["accuracy"], str(tmp_path), samples=4)
    trainer = fake_trainer()
    opinion(trainer, ["q"] * 4, ["<answer>1</answer>"] * 4, rewards_tensor([1.0] * 4),
            [{"solution": "\\text{one}"}, {"solution": None}, {}, {"solution": ["not", "text"]}])
    assert trainer._metrics["train"]["second_opinion/accuracy/checked"] == [0.0]
    assert trainer._metrics["train"]["second_opinion/accuracy/unchecked"] == [1.0]
    assert "second_opinion/accuracy/disagreement" not in trainer._metrics["train"]
    opinion(trainer, ["q"], ["a"], "not a tensor", None)  # broken inputs: logged once, training goes on
    assert not (tmp_path / "second_opinion.jsonl").exists()


def test_format_and_user_rewards_get_no_second_opinion_unless_declared(tmp_path):
    assert not SecondOpinion(["format", "my:fn"], str(tmp_path), samples=4).active
    assert SecondOpinion(["format", "my:fn"], str(tmp_path), samples=4, kinds={"my:fn": "math"}).active
    assert not SecondOpinion(["accuracy"], str(tmp_path), samples=0).active


def test_a_recipe_naming_a_reward_it_does_not_train_with_is_refused_before_the_model_loads(tmp_path, tiny_model_dir,
                                                                                             math_jsonl, capsys):
    from r1kit.cli import main

    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", second_opinion_kinds={"my.mod:judge": "math"})
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run"]) == 2
    assert "second_opinion_kinds names my.mod:judge" in capsys.readouterr().err


@pytest.mark.slow
def test_training_logs_the_disagreement_of_a_lying_reward_and_none_for_accuracy(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    liar = "tests.rewards_for_tests:lying_accuracy"
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=10,
                                     reward_funcs=["accuracy", liar], second_opinion_kinds={liar: "math"}))
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [e for e in history if "loss" in e]
    assert [e["second_opinion/accuracy/disagreement"] for e in steps] == [0.0, 0.0]
    assert [e[f"second_opinion/{liar}/disagreement"] for e in steps] == [1.0, 1.0]  # the tiny model is never right
    rows = [json.loads(line) for line in (out / "second_opinion.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["reward"] for r in rows} == {liar} and {r["step"] for r in rows} == {1, 2}


# --- code and reasoning-gym: the independent paths run for real ----------------------------------------------------
ECHO_RIGHT = "```python\nprint(input())\n```"
ECHO_SEVEN_WRONG = "```python\nx = input()\nprint('wrong' if x == '7' else x)\n```"
EARLY_EXIT = "```python\nimport sys\nsys.exit(0)\n```"


@pytest.mark.slow
def test_code_is_judged_again_in_a_fresh_jail_with_the_tests_reversed():
    from r1kit.sandbox.jail import probe

    if probe() is not None:
        pytest.skip(f"no jail here: {probe()}")
    from r1kit.integrity.independent import code_verdicts

    info = {"test_cases": [{"input": str(i), "output": str(i)} for i in (1, 7, 3)]}
    texts = [ECHO_RIGHT, ECHO_SEVEN_WRONG, EARLY_EXIT, "no code at all", ECHO_RIGHT]
    rows = [info, info, info, info, {"test_cases": "not a list"}]  # the last row cannot be judged
    before = descendants()
    assert code_verdicts(texts, rows, "python", allow_unsandboxed=False) == [True, False, False, False, None]
    assert descendants() <= before  # no program or jail outlives its verdict


@pytest.mark.slow
def test_reasoning_gym_is_judged_again_by_isomorphic_re_verification():
    pytest.importorskip("reasoning_gym")
    from r1kit.integrity.independent import gym_verdicts
    from r1kit.sandbox.jail import probe

    record = {"generator": "chain_sum", "options": {}, "entry": {"question": "1 + 2 =", "answer": "3", "metadata": {}}}
    verdicts = gym_verdicts(["The answer is 3.", "The answer is 4.", "3", "1 + 2"], [record, record, "{not json", record],
                            timeout=5.0, allow_unsandboxed=probe() is not None)
    assert verdicts == [True, False, None, False]
