"""The rollout engine of `async_rollouts` without a trainer (r1kit.training.rollouts): what is read ahead, which weights a row
was generated with, what is dropped as stale, what a failure does, and the importance weights the loss takes."""

from __future__ import annotations

import math
import re
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from r1kit.errors import GenerationUnavailable
from r1kit.training import rollouts
from r1kit.training.rollouts import (
    Lookahead,
    RolloutEngine,
    fold_into_advantages,
    importance_weights,
    lookahead_batches,
    optimizer_steps_per_batch,
)


class FakeGenerator:
    """Completes a prompt with [its first token + the weights version, seed % 100]; records every call; can be made
    to fail, or to wait until released."""

    stages_weights = True

    def __init__(self):
        self.version = None
        self.calls: list[tuple[list, int]] = []
        self.failures = 0
        self.gate: threading.Event | None = None

    def load(self, weights):
        self.version = int(dict(weights)["w"].item())

    def generate(self, prompt_ids, num_generations, seed):
        if self.gate is not None:
            self.gate.wait(30)
        self.calls.append((prompt_ids, self.version))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the generator went away")
        return ([[p[0] + self.version, seed % 100] for p in prompt_ids],
                [[-0.5, -1.0] for _ in prompt_ids])

    def close(self):
        pass


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setattr(rollouts, "BACKOFF_SECONDS", (0.0,))
    generator = FakeGenerator()
    engine = RolloutEngine(generator, max_staleness=1, weight_sync_steps=1, seed=3)
    engine.start()
    yield engine
    engine.close()


def stage(engine: RolloutEngine, version: int) -> None:
    engine.stage_weights([("w", torch.tensor(float(version)))], version)


ROWS = [[10, 1], [10, 1], [20, 2], [20, 2]]  # two prompts, two generations each


def test_the_lookahead_keeps_every_row_within_the_staleness_bound():
    assert lookahead_batches(max_staleness=1, weight_sync_steps=1) == 1
    assert lookahead_batches(max_staleness=3, weight_sync_steps=1) == 3
    assert lookahead_batches(max_staleness=3, weight_sync_steps=2) == 2  # read 2 ahead + 1 step between syncs = 3
    assert lookahead_batches(max_staleness=1, weight_sync_steps=2) == 0
    # a generation batch over 4 optimizer steps (steps_per_generation 4): one read ahead is 4 steps old at its turn
    assert lookahead_batches(max_staleness=4, weight_sync_steps=1, steps_per_batch=4) == 1
    assert lookahead_batches(max_staleness=1, weight_sync_steps=1, steps_per_batch=4) == 0  # (refused at parse)
    assert optimizer_steps_per_batch(4, 1, 1) == 4 and optimizer_steps_per_batch(4, 1, 4) == 1
    assert optimizer_steps_per_batch(2, 3, 2) == 3


def test_rows_read_ahead_come_from_the_weights_staged_before_them(engine):
    stage(engine, 0)
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.expect(("b0",))
    completions, logprobs = engine.take(ROWS, 2, step=0)
    assert [c[0] for c in completions] == [10, 10, 20, 20]  # version 0
    assert logprobs == [[-0.5, -1.0]] * 4
    stage(engine, 1)
    engine.submit_ahead(("b1",), ROWS, 2)  # read ahead during step 1: generated with the weights of step 1
    engine.expect(("b1",))
    completions, _ = engine.take(ROWS, 2, step=2)  # trained at step 2: one step stale, within the bound
    assert [c[0] for c in completions] == [11, 11, 21, 21]
    metrics = engine.batch_metrics()
    assert metrics["staleness"] == 1 and metrics["stale_dropped"] == 0 and metrics["read_ahead_share"] == 1.0
    assert engine.totals["rows_on_demand"] == 0


def test_a_batch_older_than_max_staleness_is_dropped_counted_and_generated_again(engine):
    stage(engine, 0)
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.expect(("b0",))
    engine._wait(engine._current)
    stage(engine, 3)
    completions, _ = engine.take(ROWS, 2, step=3)  # 3 steps old: never trained on
    assert [c[0] for c in completions] == [13, 13, 23, 23]  # generated again with the weights of step 3
    assert engine.totals["stale_dropped"] == 1 and engine.totals["stale_dropped_rows"] == 4
    assert engine.batch_metrics()["stale_dropped"] == 1
    assert engine.take(ROWS[:2], 2, step=3)[0][0][0] == 13  # asked again in the same batch: not counted twice
    assert engine.totals["stale_dropped"] == 1


def test_rows_the_read_ahead_job_lacks_are_generated_on_demand_in_order(engine):
    stage(engine, 0)
    engine.submit_ahead(("b0",), ROWS[:2], 2)
    engine.expect(("b0",))
    asked = [[30, 3], [10, 1], [10, 1], [40, 4]]  # a curriculum replacement, the group, a refill
    completions, _ = engine.take(asked, 2, step=0)
    assert [c[0] for c in completions] == [30, 10, 10, 40]
    assert engine.totals["rows_on_demand"] == 2
    assert engine.batch_metrics()["read_ahead_share"] == 0.5


def test_a_job_read_ahead_for_a_batch_that_never_came_is_passed_over(engine):
    stage(engine, 0)
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.submit_ahead(("b1",), ROWS[2:], 2)
    engine._wait(engine._ahead[0])  # b0 was generated (one not started yet is simply never generated)
    engine.expect(("b1",))
    assert engine.take(ROWS[2:], 2, step=0)[0] == [[20, engine._current.seed % 100]] * 2
    assert engine.totals["unused_rows"] == 4


def test_a_failing_generator_is_retried_then_stops_the_run(engine):
    stage(engine, 0)
    engine.generator.failures = 2  # the job read ahead and one retry fail; the second retry succeeds
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.expect(("b0",))
    assert len(engine.take(ROWS, 2, step=0)[0]) == 4
    assert engine.totals["failed_jobs"] == 1 and engine.totals["retries"] == 1
    engine.generator.failures = 99
    with pytest.raises(GenerationUnavailable, match="failed 3 times in a row"):
        engine.now(ROWS, 2, step=0)


def test_a_slow_generator_makes_the_trainer_wait_and_nothing_else(engine):
    stage(engine, 0)
    engine.generator.gate = threading.Event()
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.expect(("b0",))
    result = []
    taker = threading.Thread(target=lambda: result.append(engine.take(ROWS, 2, step=0)))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive() and not result  # waiting, not failing
    engine.generator.gate.set()
    taker.join(30)
    assert len(result[0][0]) == 4 and engine.totals["failed_jobs"] == 0


def test_a_generator_that_never_answers_stops_the_run_after_rollout_timeout_without_retries(engine, monkeypatch):
    """A hung generator (a local generate that never returns) held the trainer forever: the wait is bounded by
    `rollout_timeout`, and the stuck call is not retried behind itself."""
    monkeypatch.setattr(rollouts, "POLL_SECONDS", 0.01)
    stage(engine, 0)
    engine.wait_limit = 0.2
    engine.generator.gate = threading.Event()  # never set while the trainer waits
    try:
        with pytest.raises(GenerationUnavailable, match=r"no answer within rollout_timeout \(0.2 s\)"):
            engine.now(ROWS, 2, step=0)
        assert engine.totals["retries"] == 0
    finally:
        engine.generator.gate.set()


def test_sampling_is_seeded_by_the_batch_so_a_rerun_draws_the_same(engine):
    stage(engine, 0)
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.expect(("b0",))
    first = engine.take(ROWS, 2, step=0)
    other = RolloutEngine(FakeGenerator(), seed=3)
    other.start()
    try:
        stage(other, 0)
        other.submit_ahead(("b0",), ROWS, 2)
        other.expect(("b0",))
        assert other.take(ROWS, 2, step=0) == first
    finally:
        other.close()


def test_start_again_drops_the_queue_and_asks_for_the_weights_again(engine):
    stage(engine, 5)
    assert not engine.due(5) and engine.due(6)
    engine.submit_ahead(("b0",), ROWS, 2)
    engine.start()  # a rollback or a resume: the trainer's weights may have gone back
    assert engine.queued == 0 and engine.due(2)


def test_the_checkpoint_state_counts_what_a_resume_regenerates(engine):
    stage(engine, 4)
    engine.submit_ahead(("b5",), ROWS, 2)
    state = engine.state_dict(step=4)
    assert state["weights_version"] == 4 and state["queued_batches"] == 1
    resumed = RolloutEngine(FakeGenerator())
    resumed.load_state_dict(state)
    assert resumed.totals["dropped_on_resume"] == 1 and resumed.totals["batches_read_ahead"] == 1


def test_the_lookahead_reads_ahead_without_changing_what_the_trainer_gets():
    items = [["a"], ["a"], ["b"], ["b"], ["c"], ["c"], ["d"], ["d"]]  # each batch repeated for 2 steps
    submitted = []
    ahead = Lookahead(iter(items), tuple, lambda rows: submitted.append(tuple(rows)))
    got = [next(ahead), next(ahead)]
    assert submitted == [("a",)]
    ahead.fill(2)
    assert submitted == [("a",), ("b",), ("c",)]
    got += list(ahead)
    assert got == items and submitted == [("a",), ("b",), ("c",), ("d",)]


# --- importance weights -------------------------------------------------------------------------------------------
def test_importance_weights_follow_trls_modes():
    old = torch.tensor([[0.0, -1.0, -2.0]])
    sampled = torch.tensor([[-1.0, -1.0, float("nan")]])  # one token without a sampler log-probability
    mask = torch.tensor([[1, 1, 1]])
    weights, stats = importance_weights(old, sampled, mask, "token_truncate", None, 2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 1.0, 1.0]]))  # e^1 clipped to 2; NaN counts as ratio 1
    assert stats["clipped_share"] == pytest.approx(1 / 3)
    weights, _ = importance_weights(old, sampled, mask, "token_mask", None, 2.0)
    assert torch.allclose(weights, torch.tensor([[0.0, 1.0, 1.0]]))
    weights, stats = importance_weights(old, sampled, mask, "sequence_mask", None, 3.0)
    assert weights.shape == (1, 1) and weights.item() == pytest.approx(math.e)
    assert stats["ratio_mean"] == pytest.approx(math.e) and stats["clipped_share"] == 0
    weights, _ = importance_weights(old, sampled, mask, "sequence_truncate", 0.5, 2.0)
    assert weights.item() == 2.0


@settings(max_examples=60, deadline=None)
@given(ratio=st.floats(0.05, 5), advantage=st.floats(-3, 3), weight=st.floats(0, 4), epsilon=st.floats(0.05, 0.5))
def test_folding_the_weight_into_the_advantage_weighs_the_clipped_surrogate(ratio, advantage, weight, epsilon):
    def surrogate(a):
        return -min(ratio * a, min(max(ratio, 1 - epsilon), 1 + epsilon) * a)

    folded = fold_into_advantages(torch.tensor([advantage]), torch.tensor([[weight]])).item()
    assert surrogate(folded) == pytest.approx(weight * surrogate(advantage), rel=1e-5, abs=1e-6)


def test_per_token_weights_make_per_token_advantages():
    advantages = torch.tensor([1.0, -2.0])
    weights = torch.tensor([[1.0, 0.5], [0.0, 2.0]])
    assert torch.equal(fold_into_advantages(advantages, weights), torch.tensor([[1.0, 0.5], [0.0, -4.0]]))


# --- a generation server's replies are hostile input -----------------------------------------------------------------
class ServerStandIn:
    """A vLLM client whose server answers `reply` (TRL's `generate` output) to every request."""

    def __init__(self, reply):
        self.reply, self.calls = reply, 0
        self.session = type("Session", (), {"request": lambda *a, **k: None, "close": lambda self: None})()

    def generate(self, prompts, n, **sampling):
        self.calls += 1
        return self.reply


GOOD = {"completion_ids": [[5, 6], [7]], "logprobs": [[[-0.1], [-2.0]], [[-0.5]]]}


@pytest.mark.parametrize(("name", "reply", "says"), [
    ("a NaN log-probability", {**GOOD, "logprobs": [[[float("nan")], [-2.0]], [[-0.5]]]}, "log-probability nan"),
    ("an infinite one", {**GOOD, "logprobs": [[[float("-inf")], [-2.0]], [[-0.5]]]}, "log-probability -inf"),
    ("a positive one", {**GOOD, "logprobs": [[[3.0], [-2.0]], [[-0.5]]]}, "log-probability 3.0"),
    ("one missing", {**GOOD, "logprobs": [[[-0.1], []], [[-0.5]]]}, "log-probability None"),
    ("too few", {**GOOD, "logprobs": [[[-0.1]], [[-0.5]]]}, "1 log-probabilities for 2 tokens"),
    ("a token past the vocabulary", {**GOOD, "completion_ids": [[5, 100], [7]]}, "token id 100 outside"),
    ("a negative token", {**GOOD, "completion_ids": [[5, -1], [7]]}, "token id -1 outside"),
    ("a token that is text", {**GOOD, "completion_ids": [[5, "6"], [7]]}, "token id '6' outside"),
    ("longer than max_tokens", {**GOOD, "completion_ids": [list(range(9)), [7]],
                                "logprobs": [[[-0.1]] * 9, [[-0.5]]]}, "at most 8 token ids"),
    ("too few rows", {"completion_ids": [[5, 6]], "logprobs": [[[-0.1], [-2.0]]]}, "1 completions for 2 rows"),
    ("not a reply", ["garbage"], "0 completions for 2 rows"),
])
def test_a_server_reply_that_cannot_be_trained_on_is_refused_counted_and_never_trained_on(
        monkeypatch, name, reply, says):
    from r1kit.errors import RefusedReply
    from r1kit.training.generators import ServerGenerator

    monkeypatch.setattr(rollouts, "BACKOFF_SECONDS", (0.0,))
    sampling = {"max_tokens": 8, "logprobs": 0}
    assert ServerGenerator(ServerStandIn(GOOD), sampling, 5.0, vocab_size=100).generate([[1], [1]], 2, 0)[0] == \
        [[5, 6], [7]]
    server = ServerStandIn(reply)
    generator = ServerGenerator(server, sampling, 5.0, vocab_size=100)
    with pytest.raises(RefusedReply, match=re.escape(says)):
        generator.generate([[1], [1]], 2, 0)
    engine = RolloutEngine(generator, max_staleness=1, weight_sync_steps=1, seed=3)
    engine.start()
    try:  # generated again (retried), then the run stops (exit 75 from the trainer), never trained on
        with pytest.raises(GenerationUnavailable, match="refused the vLLM server's reply|completions for"):
            engine.now([[1], [1]], 2, step=0)
        assert engine.totals["refused_replies"] == rollouts.RETRIES + 1 and server.calls == rollouts.RETRIES + 2
    finally:
        engine.close()
