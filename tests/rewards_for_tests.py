"""Reward functions loaded by import path in the pipeline tests."""

import os
import signal
import time


def length_variety(completions, **kwargs):
    """Rewards longer completions: gives a random model reward variance, so every step has a gradient."""
    return [len(c[-1]["content"] if isinstance(c, list) else c) / 20 for c in completions]


def slow_length_variety(completions, **kwargs):
    """The same, slowed down so a test can kill the run between two steps."""
    time.sleep(0.4)
    return length_variety(completions)


async def async_length_variety(completions, **kwargs):
    """`length_variety` as an `async def` reward, which TRL runs concurrently after the plain ones."""
    return [-r for r in length_variety(completions)]


def flat_or_length(completions, flat, **kwargs):
    """`length_variety`, except that rows marked `flat` all get 1.0: their groups carry no signal (dynamic sampling
    must drop them) and count as solved (the curriculum must skip them)."""
    return [1.0 if is_flat else min(score, 0.99) for is_flat, score in zip(flat, length_variety(completions))]


def flat_or_length_logged(prompts, completions, flat, **kwargs):
    """`flat_or_length`, appending each call's prompts to $R1KIT_TEST_LOG/rank<RANK>.jsonl (one line per call), so
    that a multi-process test can compare what each rank generated for."""
    import json
    import os
    from pathlib import Path

    path = Path(os.environ["R1KIT_TEST_LOG"]) / f"rank{os.environ.get('RANK', '0')}.jsonl"
    with path.open("a") as f:
        f.write(json.dumps([p[-1]["content"] if isinstance(p, list) else p for p in prompts]) + "\n")
    return flat_or_length(completions, flat)


def nan_on_row_two(completions, **kwargs):
    """1.0 for every completion but the third, which gets NaN: a reward with a bug."""
    return [float("nan") if i == 2 else 1.0 for i in range(len(completions))]


def none_on_even_rows(completions, **kwargs):
    """None (cannot judge) for every other completion, 1.0 for the rest."""
    return [None if i % 2 == 0 else 1.0 for i in range(len(completions))]


none_on_even_rows.r1kit_columns = ("solution",)  # the rows it judges (r1kit.integrity.rewardtap): every row here


def judges_nothing(completions, **kwargs):
    """None for every completion, with the warning a reward logs when its tests are out of reach (it names the rows
    it should judge: every row with a solution, so it can never judge)."""
    import logging

    logging.getLogger("r1kit.rewards.tests").warning("test cases out of reach: nothing to run")
    return [None] * len(completions)


judges_nothing.r1kit_columns = ("solution",)


def not_applicable(completions, **kwargs):
    """None for every completion and no rows named as its own: TRL's multi-task reward for rows of another kind."""
    return [None] * len(completions)


def gold_anywhere(completions, solution, **kwargs):
    """A gameable reward, planted for the probe tests: 1.0 when the gold number appears anywhere in the reply (a
    hedge of every candidate, or the gold in the reasoning, earns full marks)."""
    import re

    rewards = []
    for completion, gold in zip(completions, solution):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        number = re.sub(r"\D", "", str(gold))
        rewards.append(1.0 if number and number in text else 0.0)
    return rewards


def raises_on_empty(completions, **kwargs):
    """A reward with a bug: it raises on an empty reply (training would stop at the first one)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    if any(not t for t in texts):
        raise IndexError("string index out of range")
    return [0.0 for _ in texts]


def lying_accuracy(completions, solution, **kwargs):
    """A lying correctness reward, planted for the second-opinion tests: full marks for every reply, right or not."""
    return [1.0 for _ in completions]


_calls = 0


def length_variety_or_kill(completions, **kwargs):
    """`length_variety`; with R1KIT_TEST_KILL_AT=N in the environment the process kills itself at the reward's Nth
    call (SIGKILL: nothing runs after it, as with kill -9)."""
    global _calls
    _calls += 1
    if os.environ.get("R1KIT_TEST_KILL_AT") == str(_calls):
        os.kill(os.getpid(), signal.SIGKILL)
    return length_variety(completions)


_gated_calls = 0


def gated_length_variety(completions, **kwargs):
    """`length_variety`; with R1KIT_TEST_GATE=DIR in the environment, its call number R1KIT_TEST_GATE_AT writes
    DIR/waiting-<RANK> and waits (10 minutes at most) for DIR/go: a test can signal the run at the step it chooses,
    then let the step finish once the signal has landed."""
    global _gated_calls
    _gated_calls += 1
    gate = os.environ.get("R1KIT_TEST_GATE")
    if gate and os.environ.get("R1KIT_TEST_GATE_AT") == str(_gated_calls):
        from pathlib import Path

        (Path(gate) / f"waiting-{os.environ.get('RANK', '0')}").touch()
        deadline = time.monotonic() + 600
        while not (Path(gate) / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return length_variety(completions)


def copy_paying(probe: str):
    """A gameable reward, planted for the copy-probe tests: 1.0 when the reply's answer is one of the answers that
    copy probe `probe` builds from the question (`r1kit.judging.copies`), 0.0 otherwise."""
    from r1kit.judging.answers import final_answer, last_boxed
    from r1kit.judging.copies import copy_answers, normalised, question_text

    def reward(prompts, completions, **kwargs):
        rewards = []
        for prompt, completion in zip(prompts, completions):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            answer = final_answer(text)
            answer = last_boxed(answer) or answer
            copies = copy_answers(question_text(prompt)).get(probe, [])
            rewards.append(1.0 if any(normalised(answer) == normalised(c) for c in copies) else 0.0)
        return rewards

    return reward


pays_premise, pays_premises, pays_first_quote, pays_numbers, pays_last_sentence = (
    copy_paying(p) for p in ("premise", "premises", "first_quote", "numbers", "last_sentence"))


_hanging_calls = 0


def hangs_on_rank_1_from_its_second_batch(completions, **kwargs):
    """`length_variety`, except that on rank 1 its second call never returns (a reward server that stopped
    answering): rank 0 then waits in the rewards' gather for a rank that never comes."""
    global _hanging_calls
    _hanging_calls += 1
    if os.environ.get("RANK") == "1" and _hanging_calls >= 2:
        import threading

        threading.Event().wait()
    return length_variety(completions)
