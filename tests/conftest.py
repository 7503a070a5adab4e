"""Shared fixtures: a tiny Llama model and tokenizer built offline, a small math dataset, recipe writing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Built-in models are built into a per-session cache, never the user's."""
    os.environ["R1KIT_CACHE"] = str(tmp_path_factory.mktemp("r1kit_cache"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A ~100 k-parameter Llama with a character-level tokenizer and chat template, saved to a folder."""
    import torch

    from r1kit.modeling import build_char_tokenizer, build_tiny_llama

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


MATH_ROWS = [{"problem": f"What is {a} + {b}?", "solution": f"${a + b}$"} for a, b in zip(range(1, 33), range(40, 72))]


@pytest.fixture(scope="session")
def math_jsonl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MATH_ROWS))
    return path


def write_recipe(folder: Path, **keys) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(keys, sort_keys=False))
    return path


def tiny_recipe(model_dir: Path, data: Path, output_dir: Path, **overrides) -> dict:
    """A recipe that trains the tiny model for a few fast steps on CPU."""
    recipe = {
        "model_name_or_path": str(model_dir),
        "dataset_name": str(data),
        "dataset_prompt_column": "problem",
        "reward_funcs": ["accuracy", "tests.rewards_for_tests:length_variety"],
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 12,
        "learning_rate": 1.0e-3,
        "lr_scheduler_type": "constant",
        "max_steps": 3,
        "save_steps": 2,
        "logging_steps": 1,
        "gradient_checkpointing": False,
        "report_to": "none",
        "output_dir": str(output_dir),
        "seed": 7,
        "bf16": False,
        "reward_workers": 1,
    }
    recipe.update(overrides)
    return recipe
