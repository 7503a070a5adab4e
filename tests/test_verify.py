"""The math verifier pool: hard per-sample limits from any thread, and a fallback when workers cannot start."""

from __future__ import annotations

import threading
import time

import pytest

from r1kit.rewards.verify import CORRECT, TIMEOUT, UNPARSEABLE_GOLD, WRONG, PoolUnavailable, VerifierPool, judge_batch

PATHOLOGICAL = r"\boxed{\binom{10^{9}}{10^{5}}}"  # sympy computes it exactly: minutes


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(workers=2, timeout=1.5)
    p.warm_up()
    yield p
    p.close()


def test_outcomes_in_order(pool):
    pairs = [("7", r"\boxed{7}"), ("7", r"\boxed{8}"), ("junk", r"\boxed{7}"), ("1/2", r"\boxed{0.5}")] * 5
    assert pool.map(pairs) == [CORRECT, WRONG, UNPARSEABLE_GOLD, CORRECT] * 5


def test_pathological_answer_times_out_within_the_limit_and_others_still_score(pool):
    pairs = [("5", PATHOLOGICAL), ("7", r"\boxed{7}"), ("5", "\\boxed{" + "1+" * 25_000 + "1}"), ("3", r"\boxed{3}")]
    start = time.monotonic()
    outcomes = pool.map(pairs)
    elapsed = time.monotonic() - start
    assert outcomes[1] == CORRECT and outcomes[3] == CORRECT
    assert outcomes[0] == TIMEOUT and outcomes[2] in (TIMEOUT, WRONG)
    assert elapsed < 2 * 1.5 + 2.0  # two limits at most (two workers), plus slack
    assert pool.map([("2", r"\boxed{2}")]) == [CORRECT]  # the killed worker was replaced


def test_time_limit_holds_off_the_main_thread(pool):
    pool.map([("1", r"\boxed{1}")] * 4)  # replacement workers have finished their imports
    result = {}

    def run():
        start = time.monotonic()
        result["outcome"] = pool.map([("5", PATHOLOGICAL)])
        result["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "verification hung in a worker thread"
    assert result["outcome"] == [TIMEOUT] and result["elapsed"] < 1.5 + 2.0


def test_power_towers_are_wrong_at_once_unless_the_gold_is_one(pool):
    start = time.monotonic()
    assert pool.map([("5", r"\boxed{9^{9^{9^{9^{9}}}}}"), ("16", r"\boxed{2^{2^{2}}}")]) == [WRONG, CORRECT]
    assert time.monotonic() - start < 1.0


def test_missing_gold_is_unjudgeable_without_a_worker_round_trip():
    assert judge_batch([None, ""], ["x", "y"]) == [UNPARSEABLE_GOLD, UNPARSEABLE_GOLD]


def test_pool_that_cannot_start_falls_back_in_process(monkeypatch, caplog):
    import r1kit.rewards.verify as verify

    monkeypatch.setattr(verify, "_WARNED_IN_PROCESS", False)
    broken = VerifierPool(workers=1, timeout=1.0)
    broken.unavailable = "workers cannot start here"
    with pytest.raises(PoolUnavailable):
        broken.map([("1", "1")])
    monkeypatch.setattr(verify, "_POOL", broken)
    assert judge_batch(["7", "7"], [r"\boxed{7}", r"\boxed{6}"]) == [CORRECT, WRONG]
    assert "in-process" in caplog.text
