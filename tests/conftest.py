"""Shared fixtures: a tiny Llama model and tokenizer built offline, a small math dataset, recipe writing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Built-in models are built into a per-session cache, never the user's."""
    os.environ["R1KIT_CACHE"] = str(tmp_path_factory.mktemp("r1kit_cache"))


@pytest.fixture(autouse=True)
def _environment_left_as_found():
    """A command under test applies its recipe's env block to os.environ, as it must for the run it starts; the
    next test in the same worker must not inherit it (an LD_PRELOAD one test set once broke every subprocess after
    it). monkeypatch restores only what it saw change."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A ~100 k-parameter Llama with a character-level tokenizer and chat template, saved to a folder."""
    import torch

    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

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


@pytest.fixture(scope="session")
def demo_heldout(tmp_path_factory) -> dict:
    """The shipped demo model's greedy evaluation on the 200 held-out additions, through `r1kit evaluate`, computed
    once per test run (several tests read it). With transformers, as the cold start measured what the model card
    reports, also where vLLM is installed: there `r1kit evaluate` would start an engine (33 s of the low-end lane),
    and its vLLM path is proven in tests/test_vllm.py."""
    from r1kit.benchmarking import generation
    from r1kit.cli import main
    from r1kit.loading.modeling import DEMO_MODEL

    out = tmp_path_factory.mktemp("demo_heldout")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "vllm_available", lambda: False)
        assert main(["evaluate", "--model", str(DEMO_MODEL), "--benchmarks", "addition", "--output-dir", str(out),
                     "--max-new-tokens", "64"]) == 0
    return json.loads((out / "addition.json").read_text())
