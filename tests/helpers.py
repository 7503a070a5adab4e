"""Helpers the tests share (fixtures live in conftest.py): recipe files and the tiny training recipe."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from r1kit.errors import ConfigError


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
        "probe_rewards": False,  # length_variety pays for length by design: the probes would stop it (test_probes.py)
    }
    recipe.update(overrides)
    return recipe


@contextmanager
def raises_naming(*words: str):
    """Expects a one-line `ConfigError` that names each of `words` (the fields, flags or values it is about), whatever
    the sentence around them: a test pins what the error is about, not its wording."""
    with pytest.raises(ConfigError) as error:
        yield error
    message = str(error.value)
    assert "\n" not in message, f"not one line: {message!r}"
    for word in words:
        assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", message), f"{word!r} not named in: {message}"


def process_parents() -> dict[int, int]:
    """{pid: parent pid} of every process this machine shows, read from /proc."""
    import os

    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def descendants(root: int | None = None) -> set[int]:
    """Processes started (directly or not) by `root` (default: this test process): what a jail or a reward left
    behind is among them."""
    import os

    parents = process_parents()
    me, found = root or os.getpid(), set()
    for pid in parents:
        p, hops = pid, 0
        while p in parents and p > 1 and hops < 64:
            p, hops = parents[p], hops + 1
            if p == me:
                found.add(pid)
                break
    return found
