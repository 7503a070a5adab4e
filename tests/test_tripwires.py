"""Tripwires (r1kit.integrity.tripwires): each wire fires on a metric history built to trip it and stays quiet on a calm one;
the recipe's `tripwires` are strict; `rollback` trains again from an earlier checkpoint with the learning rate cut."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from types import SimpleNamespace

import pytest

from r1kit.config.schema import GRPOConfig
from r1kit.integrity.tripwires import (
    DEFAULT_WIRES,
    Tripwires,
    Wire,
    firings,
    identical_share,
    measure,
    parse_tripwires,
)
from tests.helpers import raises_naming, tiny_recipe
from tests.test_grpo import run_recipe


def history(steps: int, **curves) -> list[dict]:
    """A per-step history: each curve is a function of the step (1-based), plus a little seeded noise."""
    rng = random.Random(0)
    return [{"step": s, **{k: f(s) + rng.uniform(-0.01, 0.01) for k, f in curves.items()}} for s in range(1, steps + 1)]


CALM = dict(reward=lambda s: 0.4 + 0.003 * s, format=lambda s: 0.9, accuracy=lambda s: 0.4 + 0.003 * s,
            length=lambda s: 30.0, identical=lambda s: 0.06, disagreement=lambda s: 0.0, gap=lambda s: 0.02,
            unchecked=lambda s: 0.1)
CALM_HELDOUT = [(0, 0.40), (20, 0.52), (40, 0.60), (60, 0.59)]  # a 1-point dip is noise, not a fall

TRIPPED = {
    "reward_vs_heldout": (dict(CALM, reward=lambda s: 0.3 + 0.01 * s), [(0, 0.40), (20, 0.45), (40, 0.30), (60, 0.15)]),
    "format_vs_accuracy": (dict(CALM, format=lambda s: 0.03 * s, accuracy=lambda s: 0.4), CALM_HELDOUT),
    "length_blowup": (dict(CALM, length=lambda s: 20.0 if s <= 55 else 90.0), CALM_HELDOUT),
    "length_collapse": (dict(CALM, length=lambda s: 90.0 if s <= 55 else 20.0), CALM_HELDOUT),
    "collapse": (dict(CALM, identical=lambda s: 0.9), CALM_HELDOUT),
    "disagreement": (dict(CALM, disagreement=lambda s: 0.5), CALM_HELDOUT),
    # the reward calls correct what the judge does not, more and more: the gap between them opens
    "drift": (dict(CALM, gap=lambda s: 0.0 if s <= 56 else 0.6), CALM_HELDOUT),
    "unchecked": (dict(CALM, unchecked=lambda s: 0.8), CALM_HELDOUT),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_WIRES))
def test_each_wire_fires_on_its_pattern_and_not_on_a_calm_run(name):
    wire = DEFAULT_WIRES[name]
    calm = history(60, **CALM)
    calm_values = [measure(name, calm[:n], CALM_HELDOUT, wire.window) for n in range(1, 61)]
    assert all(v is None or v < wire.threshold for v in calm_values), (name, max(v for v in calm_values if v is not None))
    curves, heldout = TRIPPED[name]
    tripped = history(60, **curves)
    assert measure(name, tripped, heldout, wire.window) >= wire.threshold


def test_a_wire_waits_for_a_full_window_and_skips_a_run_without_its_measure():
    short = history(DEFAULT_WIRES["length_blowup"].window - 1, length=lambda s: 10.0 * 2 ** s)
    assert measure("length_blowup", short, [], DEFAULT_WIRES["length_blowup"].window) is None
    assert measure("reward_vs_heldout", history(40, reward=lambda s: s), [], 20) is None  # no held-out accuracy
    assert measure("format_vs_accuracy", history(40, reward=lambda s: s), [], 20) is None  # no format reward


def test_identical_completions_across_prompts():
    assert identical_share(["a", "b", "c", "d"], ["x", "x", "x", "y"]) == 2 / 3  # 3 of 4 prompts answer "x"
    assert identical_share(["a", "a", "b", "b"], ["1", "2", "3", "4"]) == 0.0  # nothing shared across prompts
    assert identical_share(["a", "b", "c"], ["x", "x", "x"]) == 1.0
    assert identical_share(["a", "a"], ["x", "x"]) is None  # one prompt: no collapse to measure
    # A reply one of a prompt's rows shares with another prompt's majority is no take-over; a majority reply is.
    assert identical_share(["a"] * 4 + ["b"] * 4, ["x", "y", "z", "w", "x", "x", "x", "v"]) == 0.0
    assert identical_share(["a"] * 4 + ["b"] * 4, ["x", "x", "z", "w", "x", "x", "x", "v"]) == 1.0
    # Two questions with the same gold may rightly get the same short reply; different golds may not.
    same_gold = [{"answer": "7"}, {"answer": "7"}, {"answer": "3"}, {"answer": "5"}]
    assert identical_share(["a", "b", "c", "d"], ["is 7", "is 7", "is 3", "is 5"], same_gold) == 0.0
    assert identical_share(["a", "b", "c", "d"], ["is 7"] * 4, same_gold) == 1.0


def test_recipe_tripwires_are_strict():
    assert parse_tripwires({"length_blowup": {"window": 5, "action": "rollback"}})["length_blowup"] == Wire(3.0, 5, "rollback")
    with raises_naming("length_blowp", "length_blowup"):
        parse_tripwires({"length_blowp": {"threshold": 2}})
    with raises_naming("tripwires.collapse", "treshold", "threshold"):
        parse_tripwires({"collapse": {"treshold": 2}})
    with raises_naming("tripwires.collapse.action", "rollback"):
        parse_tripwires({"collapse": {"action": "rolback"}})
    with raises_naming("tripwires.collapse.window"):
        parse_tripwires({"collapse": {"window": 0}})
    with raises_naming("tripwires.collapse.threshold"):
        parse_tripwires({"collapse": {"threshold": float("nan")}})
    with raises_naming("tripwire_lr_factor"):
        GRPOConfig(output_dir="/tmp/x", tripwire_lr_factor=0.0)
    with raises_naming("second_opinion_kinds.my:fn", "math"):
        GRPOConfig(output_dir="/tmp/x", second_opinion_kinds={"my:fn": "mathh"})


def test_the_callback_logs_each_wire_and_warns_once_per_firing(tmp_path, caplog):
    wires = Tripwires({"collapse": Wire(0.6, 2)}, str(tmp_path), 0.5, 2)
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list)}, reward_func_names=[])
    wires.attach(trainer, [])
    for step, share in enumerate([0.1, 0.9, 0.9, 0.9, 0.1, 0.1], start=1):
        trainer._metrics["train"]["completions/identical_answers"].append(share)
        assert wires.check(step) is None  # warn: never stops
    metrics = trainer._metrics["train"]
    assert metrics["tripwire/collapse/fired"] == [0.0, 1.0, 1.0, 0.0, 0.0]
    assert len([r for r in caplog.records if "Tripwire collapse fired" in r.getMessage()]) == 1
    assert [(r["step"], r["wire"]) for r in firings(tmp_path)] == [(3, "collapse")]


@pytest.mark.slow
def test_rollback_trains_again_from_the_earlier_checkpoint_with_the_learning_rate_cut(tmp_path, tiny_model_dir,
                                                                                      math_jsonl):
    out = tmp_path / "out"
    # threshold 0: the length wire fires as soon as it has a window of 3 steps, at step 3; the newest checkpoint
    # before it is step 2's. After the rollback the window refills: steps 3 and 4 train at half the learning rate.
    run_recipe(tmp_path, tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=2, save_total_limit=1,
                                     tripwires={"length_blowup": {"threshold": 0.0, "window": 3, "action": "rollback"}}))
    ledger = json.loads((out / "tripwire_rollbacks.json").read_text())
    assert [(r["applied"], r["step"], r["lr_scale"]) for r in ledger["rollbacks"]] == [(True, 3, 0.5)]
    assert ledger["rollbacks"][0]["checkpoint"].endswith("checkpoint-2")
    state = json.loads((out / "trainer_state.json").read_text())
    lr = {e["step"]: e["learning_rate"] for e in state["log_history"] if "learning_rate" in e}
    assert state["global_step"] == 4 and sorted(lr) == [1, 2, 3, 4]
    assert lr[1] == lr[2] == pytest.approx(1e-3) and lr[3] == lr[4] == pytest.approx(5e-4)
    assert [(r["step"], r["action"]) for r in firings(out)] == [(3, "rollback")]


def test_the_report_draws_a_tripwire_panel_with_the_firing_points_marked(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from r1kit.report import draw_tripwires, report, tripwire_keys

    log = [{"step": s, "reward": 0.1 * s, "loss": 0.0, "tripwire/collapse": 0.2 if s < 4 else 0.8,
            "tripwire/collapse/fired": float(s >= 4), "tripwire/length_blowup": 1.0,
            "tripwire/length_blowup/fired": 0.0} for s in range(1, 7)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    (tmp_path / "tripwires.jsonl").write_text(json.dumps({"step": 4, "wire": "collapse", "value": 0.8,
                                                          "threshold": 0.5, "window": 3, "action": "warn"}) + "\n")
    (tmp_path / "tripwire_rollbacks.json").write_text(json.dumps({"pending": None, "done": [
        {"checkpoint": "checkpoint-2", "step": 5, "wire": "collapse", "value": 0.8, "lr_factor": 0.5}]}))
    path, _ = report(tmp_path)
    assert path.is_file() and path.stat().st_size > 10_000
    fig, (left, right) = plt.subplots(1, 2)
    draw_tripwires(left, right, log, tripwire_keys(log), firings(tmp_path))
    crosses = [c for c in right.collections if c.get_offsets().shape[0] == 3]  # steps 4, 5, 6 fired
    assert crosses and [tuple(p) for p in crosses[0].get_offsets()] == [(4, 0.8), (5, 0.8), (6, 0.8)]
    assert {x for line in right.lines for x in line.get_xdata() if line.get_color() == "red"} == {4, 5}
    assert any(c.get_offsets().shape[0] == 1 and c.get_offsets()[0][0] == 5 for c in right.collections)  # rollback
    assert not left.collections  # the length ratio never fired
    plt.close(fig)
