"""Resume checks before it trusts: each candidate checkpoint's weights open and its optimizer and scheduler states
load (with `weights_only=True`); a broken one is skipped for the one before, with a line naming the file; a
checkpoint without optimizer or scheduler state resumes only when the recipe says so; a missing RNG state warns."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from r1kit.state.checkpoints import find_resume_checkpoint, sharding_refusal
from tests.helpers import raises_naming


def write_checkpoint(folder: Path, step: int = 4, parts=("optimizer", "scheduler", "rng")) -> Path:
    """A checkpoint folder shaped as transformers writes one, with small real files."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"w": torch.ones(4, 4), "b": torch.zeros(4)}, str(folder / "model.safetensors"))
    if "optimizer" in parts:
        torch.save({"state": {0: {"exp_avg": torch.zeros(4)}}, "param_groups": [{"lr": 1e-3}]}, folder / "optimizer.pt")
    if "scheduler" in parts:
        torch.save({"last_epoch": step, "_last_lr": [1e-3]}, folder / "scheduler.pt")
    if "rng" in parts:
        torch.save({"cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    return folder


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.mark.parametrize("damage", [
    ("model.safetensors", truncate),
    ("model.safetensors", lambda f: f.write_bytes(b"\x00" * 64)),
    ("optimizer.pt", truncate),
    ("optimizer.pt", lambda f: f.write_bytes(b"garbage, not a torch file")),
    ("scheduler.pt", lambda f: f.write_bytes(b"")),
])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before_and_names_the_file(tmp_path, caplog, damage):
    name, how = damage
    older = write_checkpoint(tmp_path / "checkpoint-2", step=2)
    newest = write_checkpoint(tmp_path / "checkpoint-4", step=4)
    how(newest / name)
    with caplog.at_level(logging.WARNING):
        assert find_resume_checkpoint(str(tmp_path), "auto") == str(older)
    skipped = [r.getMessage() for r in caplog.records if "Skipping checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and "checkpoint-4" in skipped[0] and name in skipped[0]
    assert "weights_only=False" not in caplog.text  # torch's own message suggests the unsafe load
    with raises_naming(name):  # a checkpoint named explicitly is not replaced by another
        find_resume_checkpoint(str(tmp_path), str(newest))


def test_sharded_weights_are_checked_shard_by_shard(tmp_path):
    older = write_checkpoint(tmp_path / "checkpoint-2", step=2)
    newest = write_checkpoint(tmp_path / "checkpoint-4", step=4)
    (newest / "model.safetensors").rename(newest / "model-00001-of-00002.safetensors")
    (newest / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert find_resume_checkpoint(str(tmp_path), "auto") == str(older)  # the second shard is missing


def write_deepspeed_checkpoint(folder: Path, step: int = 4, ranks: int = 2) -> Path:
    """A checkpoint as DeepSpeed's ZeRO writes one through transformers: `latest`, and per rank a model and an
    optimizer state (torch zip files) in `global_stepN/`."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "latest").write_text(f"global_step{step}")
    states = folder / f"global_step{step}"
    states.mkdir()
    for rank in range(ranks):
        torch.save({"module": {"w": torch.ones(64)}}, states / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        torch.save({"optimizer_state_dict": {"exp_avg": torch.zeros(256)}},
                   states / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    return folder


@pytest.mark.parametrize("damage", [
    lambda states: truncate(states / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    lambda states: (states / "zero_pp_rank_0_mp_rank_00_model_states.pt").write_bytes(b"garbage"),
    lambda states: (states / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink(),
    lambda states: states.rename(states.with_name("elsewhere")),  # `latest` names a tag that is gone
], ids=["truncated", "garbage", "a rank missing", "latest dangling"])
def test_a_damaged_deepspeed_checkpoint_falls_back_to_the_one_before(tmp_path, caplog, damage):
    """Every requeue of a run whose newest ZeRO-3 shard was truncated crashed on both ranks: DeepSpeed's files were
    not checked, as FSDP's shards are."""
    older = write_deepspeed_checkpoint(tmp_path / "checkpoint-2", step=2)
    newest = write_deepspeed_checkpoint(tmp_path / "checkpoint-4", step=4)
    damage(newest / "global_step4")
    with caplog.at_level(logging.WARNING):
        assert find_resume_checkpoint(str(tmp_path), "auto") == str(older)
    assert "Skipping checkpoint" in caplog.text and "checkpoint-4" in caplog.text


def test_a_sharded_checkpoint_resumes_only_on_the_engine_and_ranks_it_was_saved_by(tmp_path):
    zero = write_deepspeed_checkpoint(tmp_path / "zero" / "checkpoint-4")
    fsdp = write_checkpoint(tmp_path / "fsdp" / "checkpoint-4")
    (fsdp / "pytorch_model_fsdp_0").mkdir()
    for rank in range(2):
        torch.save({"cpu": torch.get_rng_state()}, fsdp / f"rng_state_{rank}.pth")
    whole = write_checkpoint(tmp_path / "whole" / "checkpoint-4")
    assert sharding_refusal(zero, "deepspeed", 2) is None and sharding_refusal(fsdp, "fsdp", 2) is None
    for path, engine, world in ((zero, None, 1), (zero, "deepspeed", 4), (fsdp, None, 1), (fsdp, "fsdp", 4),
                                (fsdp, "deepspeed", 2)):
        said = sharding_refusal(path, engine, world)
        assert said and "2 rank(s)" in said and "resume: never" in said, (path, engine, world)
    assert sharding_refusal(whole, "fsdp", 4) is None  # whole weights: any launch loads them


def test_a_checkpoint_without_optimizer_or_scheduler_needs_an_explicit_choice(tmp_path, caplog):
    only_model = write_checkpoint(tmp_path / "checkpoint-4", parts=("rng",))  # save_only_model: true
    with raises_naming("resume_without_optimizer", "optimizer.pt", "scheduler.pt"):
        find_resume_checkpoint(str(tmp_path), "auto")
    with caplog.at_level(logging.WARNING):
        assert find_resume_checkpoint(str(tmp_path), "auto", without_optimizer=True) == str(only_model)
    assert "will not match" in caplog.text


def test_a_checkpoint_without_rng_state_resumes_with_a_warning(tmp_path, caplog):
    folder = write_checkpoint(tmp_path / "checkpoint-4", parts=("optimizer", "scheduler"))
    with caplog.at_level(logging.WARNING):
        assert find_resume_checkpoint(str(tmp_path), "auto") == str(folder)
    assert "RNG" in caplog.text


def test_only_broken_checkpoints_start_fresh(tmp_path):
    truncate(write_checkpoint(tmp_path / "checkpoint-2", step=2) / "model.safetensors")
    assert find_resume_checkpoint(str(tmp_path), "auto") is None


@pytest.mark.slow
def test_a_real_run_resumes_past_a_truncated_checkpoint_from_the_one_before(tmp_path, tiny_model_dir, math_jsonl,
                                                                            caplog):
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline
    from tests.helpers import tiny_recipe, write_recipe

    out = tmp_path / "out"
    pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out,
                                                                                   max_steps=4, save_steps=2)))]))
    truncate(out / "checkpoint-4" / "optimizer.pt")  # a kill or a full disk in the middle of the last save
    with caplog.at_level(logging.WARNING):
        pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **tiny_recipe(
            tiny_model_dir, math_jsonl, out, max_steps=6, save_steps=2)))]))
    assert "Skipping checkpoint" in caplog.text and "optimizer.pt" in caplog.text
    assert f"Resuming from {out / 'checkpoint-2'}" in caplog.text
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 6
