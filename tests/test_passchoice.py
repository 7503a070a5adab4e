"""Which training pass a run takes (`r1kit.training.passchoice`): chosen by what it measures on the device it runs on, here
with an injected clock, so that the policy is tested, not this machine's speed."""

from __future__ import annotations

import json
import math
import threading

import pytest

from r1kit.training.passchoice import BUCKETED, DENSE, PACKED, PACKED_FLEX, PassChooser, describe, shape_class


def measure(chooser: PassChooser, key, cost: dict[str, float], runs: int) -> list[tuple[str, bool]]:
    """Runs `runs` chunks of class `key` through the chooser, each candidate taking `cost` seconds."""
    picks = []
    for _ in range(runs):
        choice, timed = chooser.pick(key)
        picks.append((choice, timed))
        if timed:
            chooser.record(key, choice, cost[choice])
    return picks


KEY = shape_class(True, 8, 100, 512)


def test_each_candidate_is_timed_twice_interleaved_and_the_fastest_is_kept():
    chooser = PassChooser([DENSE, BUCKETED, PACKED], timed_runs=2)
    picks = measure(chooser, KEY, {DENSE: 1.1, BUCKETED: 1.0, PACKED: 1.5}, 9)
    # the fewest tokens computed first (packed, then buckets, then dense); none clearly slower: each runs twice
    assert picks[:6] == [(PACKED, True), (BUCKETED, True), (DENSE, True)] * 2
    assert picks[6:] == [(BUCKETED, False)] * 3  # decided: no more timing, no more device syncs
    [decision] = chooser.decisions()
    assert decision["pass"] == BUCKETED and decision["seconds"] == {DENSE: 1.1, BUCKETED: 1.0, PACKED: 1.5}
    assert decision["runs"] == {DENSE: 2, BUCKETED: 2, PACKED: 2}


def test_a_candidate_clearly_slower_after_one_run_each_is_not_run_again():
    """Measuring is paid in real work: a slow candidate's second run would cost the step its whole difference."""
    chooser = PassChooser([DENSE, BUCKETED, PACKED], timed_runs=2)
    picks = measure(chooser, KEY, {DENSE: 6.0, BUCKETED: 0.8, PACKED: 0.9}, 8)
    assert picks[:5] == [(PACKED, True), (BUCKETED, True), (DENSE, True), (PACKED, True), (BUCKETED, True)]
    assert picks[5:] == [(BUCKETED, False)] * 3  # dense (7x) ran once; the close two twice
    assert chooser.decisions()[0]["runs"] == {PACKED: 2, BUCKETED: 2, DENSE: 1}
    fast_first = PassChooser([DENSE, BUCKETED, PACKED])
    picks = measure(fast_first, KEY, {DENSE: 6.0, BUCKETED: 3.0, PACKED: 1.0}, 5)
    assert picks == [(PACKED, True), (BUCKETED, True), (DENSE, True), (PACKED, True), (PACKED, False)]


def test_a_run_that_carried_one_time_costs_is_never_judged_alone():
    # The chooser's first timed run (gradient buffers, a library's start) and FlexAttention's first run in each
    # class (it compiles) may be many times the pass's own cost: they run again before any verdict
    chooser = PassChooser([DENSE, PACKED])
    timings = iter([5.0, 2.0, 1.0, 2.0])  # packed's first run of the whole run was slow
    for _ in range(5):
        choice, timed = chooser.pick(KEY)
        if timed:
            chooser.record(KEY, choice, next(timings))
    assert chooser.decisions()[0]["pass"] == PACKED and chooser.decisions()[0]["runs"] == {PACKED: 2, DENSE: 2}
    flex = PassChooser([DENSE, PACKED, PACKED_FLEX])
    measure(flex, shape_class(True, 4, 64, 64), {DENSE: 1.0, PACKED: 1.0, PACKED_FLEX: 1.0}, 6)  # (warm)
    other = shape_class(True, 4, 512, 512)
    timings = iter([1.0, 9.0, 1.2, 1.0, 0.5, 1.2])  # flex's first run in this class compiled
    picks = []
    for _ in range(7):
        choice, timed = flex.pick(other)
        picks.append(choice)
        if timed:
            flex.record(other, choice, next(timings))
    assert picks == [PACKED, PACKED_FLEX, DENSE] * 2 + [PACKED_FLEX]  # 9x slower once, then the fastest


def test_a_device_where_dense_is_faster_gets_dense_and_a_tie_keeps_dense():
    faster = PassChooser([DENSE, BUCKETED, PACKED])
    assert measure(faster, KEY, {DENSE: 1.0, BUCKETED: 1.5, PACKED: 4.0}, 12)[-1] == (DENSE, False)
    tie = PassChooser([DENSE, PACKED])
    assert measure(tie, KEY, {DENSE: 1.0, PACKED: 0.99}, 10)[-1] == (DENSE, False)  # within the margin


def test_the_least_of_the_timed_runs_counts_so_one_disturbed_run_does_not_decide():
    chooser = PassChooser([DENSE, PACKED], timed_runs=2)
    timings = iter([1.0, 1.5, 2.0, 1.0])  # dense's second run was fast, packed's was disturbed
    for _ in range(4):
        choice, timed = chooser.pick(KEY)
        if timed:
            chooser.record(KEY, choice, next(timings))
    assert chooser.decisions()[0]["pass"] == DENSE  # dense 1.0 against packed 1.0: dense stays


def test_each_shape_class_is_measured_on_its_own_and_measured_again_after_many_uses():
    chooser = PassChooser([DENSE, PACKED], recheck_after=5)
    short, long = shape_class(True, 8, 100, 16), shape_class(True, 8, 100, 1024)
    assert shape_class(True, 8, 100, 1000) == long and shape_class(False, 8, 100, 1024) != long
    measure(chooser, short, {DENSE: 1.0, PACKED: 2.0}, 4)
    measure(chooser, long, {DENSE: 2.0, PACKED: 1.0}, 4)
    assert {d["pass"] for d in chooser.decisions()} == {DENSE, PACKED}
    picks = measure(chooser, long, {DENSE: 1.0, PACKED: 2.0}, 5 + 4)  # lengths drifted: packed is slower now
    assert picks[:5] == [(PACKED, False)] * 5 and picks[5:] == [(PACKED, True), (DENSE, True)] * 2
    assert next(d for d in chooser.decisions() if d["key"] == list(long))["pass"] == DENSE


def test_a_candidate_that_cannot_take_a_chunk_loses_and_an_excluded_one_is_measured_no_more():
    chooser = PassChooser([DENSE, BUCKETED, PACKED])
    measure(chooser, KEY, {DENSE: 2.0, BUCKETED: 1.5, PACKED: math.inf}, 6)
    assert chooser.decisions()[0]["pass"] == BUCKETED and chooser.decisions()[0]["seconds"][PACKED] is None  # unusable
    chooser.exclude(BUCKETED, "a self-check failed")
    assert chooser.decisions() == [] and BUCKETED not in chooser.candidates and chooser.notes
    assert chooser.pick(KEY) == (DENSE, False)  # decided again from what was measured, without new runs


def test_a_class_next_to_a_clearly_decided_one_takes_its_decision_without_measuring():
    chooser = PassChooser([DENSE, BUCKETED, PACKED])
    measured = shape_class(True, 4, 256, 16)
    measure(chooser, measured, {DENSE: 6.0, BUCKETED: 0.8, PACKED: 1.2}, 6)  # bucketed led by 1.5x
    near = shape_class(True, 4, 256, 22)  # completions one step (a factor sqrt(2)) wider
    assert chooser.pick(near) == (BUCKETED, False)
    assert next(d for d in chooser.decisions() if d["key"] == list(near))["as_for"] == describe(measured)
    assert chooser.pick(shape_class(True, 4, 256, 32))[1]  # next to the adopted one only: measured (no chain)
    assert chooser.pick(shape_class(True, 4, 256, 64))[1]  # further away: measured
    assert chooser.pick(shape_class(True, 8, 256, 16))[1]  # other rows: measured
    assert chooser.pick(shape_class(False, 4, 256, 16))[1]  # without gradients: measured (or its twin's, in a run)
    close = PassChooser([DENSE, PACKED])
    measure(close, measured, {DENSE: 1.1, PACKED: 1.0}, 4)  # a close call decides no neighbour
    assert close.pick(near) == (PACKED, True)
    state = json.loads(json.dumps(chooser.state_dict()))
    restored = PassChooser([DENSE, BUCKETED, PACKED])
    assert restored.load_state_dict(state) == 2 and restored.pick(near) == (BUCKETED, False)


def test_one_pass_asked_for_is_taken_without_measuring():
    chooser = PassChooser([PACKED])
    assert measure(chooser, KEY, {PACKED: 1.0}, 3) == [(PACKED, False)] * 3


# --- in a real run ----------------------------------------------------------------------------------------------------
def injected_clock(trainer, cost: dict[str, float]) -> list[str]:
    """Replaces the trainer's pass clock by one in which each pass costs `cost` seconds; returns the passes run."""
    ran: list[str] = []
    now = [0.0]
    original = trainer.passes.run

    def run(model, passes, dense, choice, *args, **kwargs):
        ran.append(choice)
        now[0] += cost[choice]
        return original(model, passes, dense, choice, *args, **kwargs)

    trainer.passes.run = run
    trainer.passes.timer.clock = lambda: now[0]
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("fastest", [DENSE, PACKED])
def test_a_run_takes_the_pass_its_device_measures_fastest(tmp_path, fastest):
    from tests.test_trainpass import build_trainer

    trainer = build_trainer(tmp_path, "llama", max_steps=12, logging_steps=1, save_strategy="no")
    cost = {DENSE: 1.0, BUCKETED: 2.0, PACKED: 3.0} if fastest == DENSE else {DENSE: 3.0, BUCKETED: 2.0, PACKED: 1.0}
    ran = injected_clock(trainer, cost)
    trainer.train()
    assert ran[:3] == [PACKED, BUCKETED, DENSE] and ran[-3:] == [fastest] * 3
    record = json.loads((tmp_path / "training_pass.json").read_text())
    assert record["candidates"] == sorted([DENSE, BUCKETED, PACKED])
    [decision] = record["decisions"]
    assert decision["pass"] == fastest and decision["seconds"][fastest] == min(cost.values())
    assert "loss pass" in decision["class"]
    from r1kit.report import pass_lines  # r1kit report says it under its table

    lines = pass_lines(tmp_path)
    assert "measured on this run's cpu" in lines[0] and f": {fastest} (measured: {fastest} " in lines[1]


def test_a_class_whose_chunks_drift_from_what_it_was_measured_on_is_measured_again():
    chooser = PassChooser([DENSE, PACKED])
    for _ in range(4):
        choice, timed = chooser.pick(KEY)
        if choice == PACKED:
            chooser.observe(KEY, 0.5)  # half the chunk is padding
        if timed:
            chooser.record(KEY, choice, {DENSE: 2.0, PACKED: 1.0}[choice])
    assert chooser.pick(KEY) == (PACKED, False)
    assert not any(chooser.observe(KEY, share) for share in [0.2, 0.9] * 20)  # micro-batches vary, the trend holds
    drifted = [chooser.observe(KEY, 1.0) for _ in range(20)]  # no padding any more: packing has nothing to save
    assert drifted.count(True) == 1 and drifted.index(True) <= 10
    assert chooser.decisions() == [] and chooser.pick(KEY) == (PACKED, True)  # measured again


def test_a_faster_pass_that_keeps_more_memory_than_dense_is_not_taken():
    chooser = PassChooser([DENSE, BUCKETED, PACKED])
    saved = {DENSE: 100, BUCKETED: 150, PACKED: 90}  # bytes kept for backward
    for _ in range(6):
        choice, timed = chooser.pick(KEY)
        chooser.record(KEY, choice, {DENSE: 3.0, BUCKETED: 1.0, PACKED: 2.0}[choice], saved[choice])
    [decision] = chooser.decisions()
    assert decision["pass"] == PACKED and decision["saved_for_backward_bytes"] == saved  # bucketed: faster, heavier


@pytest.mark.slow
def test_without_gradients_a_chunk_takes_the_pass_its_loss_pass_twin_took(tmp_path):
    """The old log-probabilities of num_iterations > 1 must come from the pass the loss uses (under bf16 two passes
    round differently, and the first update's importance ratio must be 1)."""
    import torch

    from tests.test_trainpass import build_trainer, micro_batch

    trainer = build_trainer(tmp_path, "llama")
    batch = micro_batch(len(trainer.processing_class))
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    ran = injected_clock(trainer, {DENSE: 3.0, BUCKETED: 2.0, PACKED: 1.0})
    for _ in range(6):  # the loss pass's class is measured: packed
        loss = trainer.compute_loss(trainer.model, dict(batch))
        loss.backward()
        trainer.passes.step_done()
    del ran[:]
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 10)
    assert ran == [PACKED] and not trainer.passes.timer.running


@pytest.mark.slow
def test_a_candidate_clearly_slower_by_its_forward_alone_is_cut_before_its_backward(tmp_path):
    """Its forward took more than twice the fastest whole run: the fastest pass does the chunk's work instead (the
    same values: every pass is exact), and its backward is never paid."""
    from tests.test_trainpass import build_trainer, micro_batch

    trainer = build_trainer(tmp_path, "llama")
    batch = micro_batch(len(trainer.processing_class))
    ran = injected_clock(trainer, {DENSE: 10.0, BUCKETED: 2.0, PACKED: 1.0})  # charged by the forward call
    losses = []
    for _ in range(3):
        loss = trainer.compute_loss(trainer.model, dict(batch))
        loss.backward()
        trainer.passes.step_done()
        losses.append(loss.item())
    assert ran == [PACKED, BUCKETED, DENSE, PACKED]  # dense's forward, dropped; packed's run in its place
    assert losses[2] == pytest.approx(losses[0], rel=1e-5)  # (no optimizer step between: the same loss)
    [chooser] = [s.chooser for s in trainer.passes.sets.values() if s is not None]
    [calibration] = chooser.classes.values()
    assert calibration.seconds[DENSE] == [10.0] and DENSE in calibration.dropped
    for _ in range(3):
        trainer.compute_loss(trainer.model, dict(batch)).backward()
        trainer.passes.step_done()
    assert ran[4:] == [PACKED, BUCKETED, PACKED] and chooser.decisions()[0]["runs"][DENSE] == 1


# --- several ranks, one decision; a resume takes the checkpoint's --------------------------------------------------
def two_ranks_measuring(costs: list[dict[str, float]], chunks: int) -> list[list[tuple[str, bool]]]:
    """Two choosers, one per simulated rank, each timing its own (different) costs; their `agree` is a max over both,
    through a barrier, as the all_reduce is. Returns each rank's picks."""
    barrier = threading.Barrier(2)
    shared: list[list[float] | None] = [None, None]

    def agree_for(rank: int):
        def agree(values: list[float]) -> list[float]:
            shared[rank] = values
            barrier.wait(timeout=10)
            agreed = [max(a, b) for a, b in zip(shared[0], shared[1])]
            barrier.wait(timeout=10)
            return agreed
        return agree

    picks: list[list[tuple[str, bool]]] = [[], []]

    def rank(number: int) -> None:
        chooser = PassChooser([DENSE, BUCKETED, PACKED], agree=agree_for(number))
        picks[number] = measure(chooser, shape_class(True, 8, None, None), costs[number], chunks)

    threads = [threading.Thread(target=rank, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return picks


def test_ranks_that_time_their_passes_differently_take_one_decision_the_slowest_ranks():
    # rank 0 finds packed fastest, rank 1 bucketed; by the slower rank's times bucketed wins (2.0 against 3.0)
    costs = [{DENSE: 4.0, BUCKETED: 2.0, PACKED: 1.0}, {DENSE: 4.0, BUCKETED: 1.0, PACKED: 3.0}]
    picks = two_ranks_measuring(costs, 10)
    assert picks[0] == picks[1]  # the same pass at every chunk, measured or decided
    assert picks[0][:6] == [(PACKED, True), (BUCKETED, True), (DENSE, True)] * 2  # dense 4.0: not 2x bucketed's 2.0
    assert picks[0][6:] == [(BUCKETED, False)] * 4


def test_ranks_drop_a_clearly_slower_candidate_only_when_it_is_clearly_slower_on_the_slowest_rank():
    # rank 0 finds dense 4x packed, rank 1 only 1.3x: by the slowest rank's times dense is not clearly slower
    costs = [{DENSE: 4.0, BUCKETED: 3.0, PACKED: 1.0}, {DENSE: 4.0, BUCKETED: 3.0, PACKED: 3.0}]
    picks = two_ranks_measuring(costs, 8)
    assert picks[0] == picks[1] and [c for c, timed in picks[0] if timed].count(DENSE) == 2
    costs = [{DENSE: 9.0, BUCKETED: 3.0, PACKED: 1.0}, {DENSE: 8.0, BUCKETED: 3.0, PACKED: 3.0}]
    picks = two_ranks_measuring(costs, 8)
    assert picks[0] == picks[1] and [c for c, timed in picks[0] if timed].count(DENSE) == 1


def test_with_several_ranks_a_class_is_decided_at_a_pick_and_never_on_one_ranks_padding():
    agreed = []
    chooser = PassChooser([DENSE, PACKED], agree=lambda values: agreed.append(values) or values)
    key = shape_class(True, 8, None, None)
    assert describe(key) == "8 rows, every width (agreed by all ranks), loss pass"
    for _ in range(4):
        choice, timed = chooser.pick(key)
        assert not chooser.record(key, choice, {DENSE: 2.0, PACKED: 1.0}[choice], 10)  # (a rank may record early)
    assert agreed == [[2.0, 1.0]] and chooser.decisions() == []  # (one rank's "clearly slower" is no verdict)
    assert chooser.pick(key) == (PACKED, False) and agreed[-1] == [2.0, 1.0, 10.0, 10.0]
    assert not any(chooser.observe(key, 1.0) for _ in range(50))  # a rank's own real-token share: no re-measuring


def test_a_restored_chooser_takes_the_checkpoints_decisions_without_measuring_again():
    chooser = PassChooser([DENSE, BUCKETED, PACKED])
    measure(chooser, KEY, {DENSE: 3.0, BUCKETED: 2.0, PACKED: math.inf}, 9)
    state = json.loads(json.dumps(chooser.state_dict()))  # through JSON, as a checkpoint keeps it
    restored = PassChooser([DENSE, BUCKETED, PACKED])
    assert restored.load_state_dict(state) == 1
    assert restored.pick(KEY) == (BUCKETED, False)
    assert restored.classes[KEY].uses == chooser.classes[KEY].uses + 1  # counted on from where it was
    assert restored.decisions()[0]["seconds"] == {DENSE: 3.0, BUCKETED: 2.0, PACKED: None}
    # A launch that cannot take the saved pass (bucketed stands down under sharding): that class is measured again
    sharded = PassChooser([DENSE, PACKED])
    assert sharded.load_state_dict(state) == 0 and sharded.pick(KEY) == (PACKED, True)
