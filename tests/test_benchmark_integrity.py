"""The integrity benchmark's goal as a test, on one recorded honest run (the demo, seed 42): replayed through the
independent judges and the default tripwires, it raises no alarm, and every planted hack raises one within 10 steps
of its onset (`benchmarks/integrity.py` gives the whole table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
integrity = pytest.importorskip("integrity")

pytestmark = pytest.mark.slow  # replays 140 steps through the judges
RECORDING = integrity.DATA / "demo-seed42.jsonl.gz"
_, NAMES, WEIGHTS = integrity.BASES["demo"]
ONSET = integrity.ONSET["demo"]


@pytest.fixture(scope="module")
def recording():
    return integrity.load(RECORDING)


def test_an_honest_run_raises_no_alarm(recording):
    header, steps = recording
    assert len(steps) == 140
    assert integrity.replay(steps, header, NAMES, WEIGHTS) == []


@pytest.mark.parametrize("hack", integrity.HACKS)
def test_a_planted_hack_raises_an_alarm_within_ten_steps(recording, hack):
    header, steps = recording
    window = {step: rows for step, rows in steps.items() if step < ONSET + 12}
    planted = integrity.plant(window, hack, header["golds"], "demo", ONSET)
    edges = integrity.replay(planted, header, NAMES, WEIGHTS)
    assert edges, f"{hack}: no wire fired"
    assert ONSET <= edges[0]["step"] <= ONSET + 10, edges
