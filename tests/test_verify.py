"""The math verifier pool: hard per-sample limits from any thread and any script, and a fallback when workers cannot
start that gives the same verdicts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from r1kit.rewards.verify import CORRECT, TIMEOUT, UNPARSEABLE_GOLD, WRONG, PoolUnavailable, VerifierPool, judge_batch

PATHOLOGICAL = r"\boxed{\binom{10^{9}}{10^{5}}}"  # sympy computes it exactly: minutes


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(workers=2, timeout=1.5)
    p.warm_up()
    yield p
    p.close()


@pytest.mark.slow
def test_outcomes_in_order(pool):
    pairs = [("7", r"\boxed{7}"), ("7", r"\boxed{8}"), ("junk", r"\boxed{7}"), ("1/2", r"\boxed{0.5}")] * 5
    assert pool.map(pairs) == [CORRECT, WRONG, UNPARSEABLE_GOLD, CORRECT] * 5


@pytest.mark.slow
def test_pathological_answer_times_out_within_the_limit_and_others_still_score(pool):
    pairs = [("5", PATHOLOGICAL), ("7", r"\boxed{7}"), ("5", "\\boxed{" + "1+" * 25_000 + "1}"), ("3", r"\boxed{3}")]
    outcomes = pool.map(pairs)
    assert outcomes[1] == CORRECT and outcomes[3] == CORRECT
    # TIMEOUT: killed at its limit (left alone, the pathological answer takes minutes); the outcome says so, not a
    # stopwatch, which a loaded machine would fool
    assert outcomes[0] == TIMEOUT and outcomes[2] in (TIMEOUT, WRONG)
    assert pool.map([("2", r"\boxed{2}")]) == [CORRECT]  # the killed worker was replaced


@pytest.mark.slow
def test_time_limit_holds_off_the_main_thread(pool):
    pool.map([("1", r"\boxed{1}")] * 4)  # replacement workers have finished their imports
    result = {}

    def run():
        result["outcome"] = pool.map([("5", PATHOLOGICAL)])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=600)  # a hang guard only: the outcome below is the check
    assert not thread.is_alive(), "verification hung in a worker thread"
    assert result["outcome"] == [TIMEOUT]  # killed at its limit from a worker thread (signals need the main one)


@pytest.mark.slow
def test_time_limit_is_per_call(pool):
    """Callers sharing the pool (rewards, held-out evaluation) each get their own limit; none changes another's."""
    assert pool.map([("5", PATHOLOGICAL)], timeout=0.5) == [TIMEOUT]
    assert pool.timeout == 1.5
    assert pool.map([("7", r"\boxed{7}")] * 4, timeout=60) == [CORRECT] * 4


@pytest.mark.slow
def test_power_towers_are_wrong_at_once_unless_the_gold_is_one():
    patient = VerifierPool(workers=1, timeout=120.0)  # a tower reaching sympy would show as a timeout or a hang
    try:
        assert patient.map([("5", r"\boxed{9^{9^{9^{9^{9}}}}}"), ("16", r"\boxed{2^{2^{2}}}")]) == [WRONG, CORRECT]
        assert patient.timeouts == 0
    finally:
        patient.close()


def test_missing_gold_is_unjudgeable_without_a_worker_round_trip():
    assert judge_batch([None, ""], ["x", "y"]) == [UNPARSEABLE_GOLD, UNPARSEABLE_GOLD]


def test_pool_that_cannot_start_falls_back_in_process(monkeypatch, caplog):
    import r1kit.rewards.text as text
    import r1kit.rewards.verify as verify

    monkeypatch.setattr(text, "_LOGGED", set())  # warnings logged once: not yet
    broken = VerifierPool(workers=1, timeout=1.0)
    broken.unavailable = "workers cannot start here"
    with pytest.raises(PoolUnavailable):
        broken.map([("1", "1")])
    monkeypatch.setattr(verify, "_POOL", broken)
    assert judge_batch(["7", "7"], [r"\boxed{7}", r"\boxed{6}"]) == [CORRECT, WRONG]
    assert "in-process" in caplog.text


def test_exceptions_turned_into_wrong_are_logged_once_with_their_type(monkeypatch, caplog):
    import r1kit.rewards.text as text
    import r1kit.rewards.verify as verify

    broken = VerifierPool(workers=1)
    broken.unavailable = "workers cannot start here"
    monkeypatch.setattr(verify, "_POOL", broken)
    monkeypatch.setattr(text, "_LOGGED", set())
    real_judge = verify.judge

    def buggy(gold, answer, limit=None):
        if "bug" in answer:
            raise TypeError("a bug of ours")
        return real_judge(gold, answer, limit)

    monkeypatch.setattr(verify, "judge", buggy)
    assert judge_batch(["1", "1", "1"], ["bug", r"\boxed{1}", "bug again"]) == [WRONG, CORRECT, WRONG]
    reports = [r.getMessage() for r in caplog.records if "counts as wrong" in r.getMessage()]
    assert len(reports) == 1 and "TypeError: a bug of ours" in reports[0]


# A user's quick script: no `if __name__ == "__main__":` guard, the reward called on the main thread and from a thread.
UNGUARDED_SCRIPT = """
import logging, threading
logging.basicConfig(level=logging.WARNING)
print("top level ran")
import r1kit.rewards.verify
{setup}
from r1kit.rewards.math import make_accuracy_reward

accuracy = make_accuracy_reward()
completions, golds = [r"\\boxed{{7}}", r"\\boxed{{8}}", "<answer>12</answer>"], ["7", "7", "12"]
print("main thread:", accuracy(completions, solution=golds))
out = {{}}
thread = threading.Thread(target=lambda: out.update(scores=accuracy(completions, solution=golds)))
thread.start()
thread.join()
print("other thread:", out.get("scores"))
"""


def run_unguarded_script(tmp_path, setup: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "quick.py"
    script.write_text(textwrap.dedent(UNGUARDED_SCRIPT.format(setup=setup)))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_unguarded_script_verifies_in_workers_from_any_thread(tmp_path):
    result = run_unguarded_script(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("top level ran") == 1  # workers never re-run the script
    assert "main thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "other thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "freeze_support" not in result.stderr and "in-process" not in result.stderr


@pytest.mark.slow
def test_in_process_fallback_gives_the_same_verdicts_off_the_main_thread(tmp_path):
    # No worker can start (as with an embedded interpreter): verification falls back to this process.
    result = run_unguarded_script(tmp_path, setup="r1kit.rewards.verify.sys.executable = '/nonexistent/python'")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("top level ran") == 1
    assert "main thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "other thread: [1.0, 0.0, 1.0]" in result.stdout
    assert result.stderr.count("verifying math answers in-process") == 1
    assert result.stderr.count("no hard time limit applies") == 1


@pytest.mark.parametrize("number", ["5", "12", "5.5", "0.5", "150"])
@pytest.mark.parametrize("written", [r"\boxed{{{n}\%}}", r"\boxed{{{n} \%}}", r"\boxed{{{n}\text{{ percent}}}}",
                                     r"The answer is $\boxed{{{n}\%}}$."])
def test_a_percentage_has_one_reading_its_number(number, written):
    """`5\\%` once matched both 5 and 0.05: one completion must match at most one of two different golds."""
    from decimal import Decimal

    from r1kit.rewards.verify import judge

    answer = written.format(n=number)
    hundredth = str(Decimal(number) / 100)
    assert judge(number, answer) == CORRECT and judge(number + r"\%", answer) == CORRECT
    assert judge(hundredth, answer) == WRONG
    assert judge(number + r"\%", rf"\boxed{{{hundredth}}}") == WRONG  # the same rule reads the gold


@pytest.mark.parametrize("separator", [r"\,", r"\;", r"\:", r"\!", "\\ ", "~", "\u2009", "\u202f", r"\thinspace "])
def test_thousands_groups_are_one_number_in_the_gold_and_the_answer(separator):
    """`1\\,000` was read as 1 x 000 = 0, so gold `1\\,000` marked 1000 wrong and 0 right."""
    from r1kit.rewards.verify import judge

    grouped = f"1{separator}000"
    assert judge(f"${grouped}$", r"\boxed{1000}") == CORRECT
    assert judge(f"${grouped}$", r"\boxed{0}") == WRONG
    assert judge("1000", rf"\boxed{{{grouped}}}") == CORRECT
    assert judge("0", rf"\boxed{{{grouped}}}") == WRONG
    assert judge("1000000", rf"\boxed{{1{separator}000{separator}000}}") == CORRECT


@pytest.mark.parametrize("written", [r"\boxed{3\,5}", r"\boxed{12\,34}", r"\boxed{1\;0000}", "<answer>3~5</answer>"])
def test_digits_kept_apart_by_a_thin_space_have_no_safe_reading_and_are_wrong(written):
    from r1kit.rewards.verify import judge

    digits = "".join(ch for ch in written.split("{")[-1].split("<")[0] if ch.isdigit()) or "35"
    for gold in (digits, "8", "15", "3"):
        assert judge(gold, written) == WRONG, (gold, written)
    assert judge("1000", r"The sum 3\,5 is not it. \boxed{1000}") == CORRECT  # only the answer itself is read
