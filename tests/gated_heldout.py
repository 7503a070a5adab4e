"""`python -m tests.gated_heldout ARGS` runs `r1kit ARGS` with one held-out evaluation held at a gate: its generation
number $R1KIT_TEST_EVAL_GATE_AT (1: the evaluation before training) writes $R1KIT_TEST_GATE/eval-waiting and waits
(10 minutes at most) for $R1KIT_TEST_GATE/go. A test signals the run there, inside the evaluation, by an event
rather than a guess at how long the evaluation takes on a busy machine."""

import os
import sys
import time
from pathlib import Path

import r1kit.benchmarking.heldout as heldout
from r1kit.cli import main

_real_generate = heldout.generate
_calls = 0


def _gated_generate(*args, **kwargs):
    global _calls
    _calls += 1
    if str(_calls) == os.environ.get("R1KIT_TEST_EVAL_GATE_AT", "1"):
        gate = Path(os.environ["R1KIT_TEST_GATE"])
        (gate / "eval-waiting").touch()
        deadline = time.monotonic() + 600
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return _real_generate(*args, **kwargs)


if __name__ == "__main__":
    heldout.generate = _gated_generate
    sys.exit(main(sys.argv[1:]))
