"""The policy's weights for vLLM, one module at a time (`r1kit.training.weightsync`): every weight once, under vLLM's names,
with a LoRA adapter merged per layer; on 2 ranks under FSDP2 and ZeRO-3 (tests/sharded_weights_worker.py, launched
as users launch) no more than one module gathered at a time, where TRL's walk gathers the whole model to merge."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from r1kit.training.weightsync import Unsupported, iter_layer_weights, lora_layers
from tests.sharded_weights_worker import tiny_lora_model

REPO = Path(__file__).resolve().parents[1]


def test_every_weight_once_under_vllms_names_with_the_adapter_merged():
    model = tiny_lora_model()
    merged = {name.removeprefix("base_model.model."): tensor
              for name, tensor in copy.deepcopy(model).merge_and_unload().state_dict().items()}
    walked = list(iter_layer_weights(model))
    names = [name for name, _ in walked]
    assert len(names) == len(set(names))  # once each; the tied head once, as its embedding
    assert set(names) == set(merged) - {"lm_head.weight"}
    for name, tensor in walked:
        torch.testing.assert_close(tensor, merged[name], rtol=0, atol=1e-6, msg=name)
        assert not tensor.requires_grad
    assert torch.is_grad_enabled()  # the walk leaves grad mode as it found it, between yields too


def test_what_the_walk_cannot_merge_is_said_and_left_to_trl():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4)
    dora = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"], use_dora=True))
    with pytest.raises(Unsupported, match="DoRA"):
        lora_layers(dora)
    embedding = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["embed_tokens"]))
    with pytest.raises(Unsupported, match="embed_tokens"):
        lora_layers(embedding)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["fsdp", "zero3"])
def test_under_sharding_one_module_is_gathered_at_a_time_and_the_values_are_the_merged_models(tmp_path, config):
    if config == "zero3":
        pytest.importorskip("deepspeed", reason="DeepSpeed not installed (r1kit[deepspeed])")
    accelerate = shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    out = tmp_path / "walk.json"
    done = subprocess.run(
        [accelerate, "launch", "--config_file", str(REPO / "recipes" / "accelerate_configs" / f"{config}.yaml"),
         "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", "0",
         str(REPO / "tests" / "sharded_weights_worker.py"), str(out)],
        cwd=REPO, env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    walk = json.loads(out.read_text())
    assert walk["engine"] == ("zero3" if config == "zero3" else "DistributedType.FSDP")
    assert walk["missing"] == [] and walk["max_difference"] < 1e-6
    assert 0 < walk["peak_gathered_bytes"] <= walk["largest_module_bytes"] < walk["whole_bytes"] / 10
    if config == "zero3":  # TRL merges the adapter in place, all of the model gathered at once (trl#5766)
        assert walk["trl_peak_gathered_bytes"] > 0.9 * walk["whole_bytes"]
