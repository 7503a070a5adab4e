"""`r1kit sft`: Open-R1's SFT recipes dry-run clean with their keys; a tiny run on conversational data trains, saves
the same outputs as `r1kit grpo`, and resumes."""

from __future__ import annotations

import json
import shutil

import pytest

from r1kit.cli import main
from tests.helpers import write_recipe

MESSAGES = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": f"<think>{i} and {i}</think><answer>{2 * i}</answer>"}]}
            for i in range(48)]


@pytest.fixture
def messages_jsonl(tmp_path):
    path = tmp_path / "distill.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MESSAGES))
    return path


COMMON = {"model_revision": "main", "torch_dtype": "bfloat16", "attn_implementation": "flash_attention_2",
          "bf16": True, "do_eval": False, "eval_strategy": "no", "gradient_checkpointing": True,
          "gradient_checkpointing_kwargs": {"use_reentrant": False}, "hub_strategy": "every_save", "log_level": "info",
          "logging_steps": 1, "logging_strategy": "steps", "lr_scheduler_type": "cosine_with_min_lr",
          "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "max_steps": -1, "overwrite_output_dir": True,
          "per_device_eval_batch_size": 1, "push_to_hub": True, "report_to": ["wandb"], "save_total_limit": 1, "seed": 42}
OPEN_R1_SFT = {  # Open-R1's SFT recipes, their keys as in their repository (Hub data and models replaced locally)
    "OpenR1-Distill-7B/sft/config_distill.yaml": {
        "dataset_name": "open-r1/Mixture-of-Thoughts", "dataset_config": "all", "dataset_num_proc": 12,
        "eos_token": "<|im_end|>", "gradient_accumulation_steps": 8, "hub_model_id": "OpenR1-Distill-7B",
        "learning_rate": 4.0e-05, "packing": False, "max_grad_norm": 0.2, "max_length": 32768, "num_train_epochs": 5,
        "output_dir": "data/OpenR1-Distill-7B", "per_device_train_batch_size": 2, "save_strategy": "epoch",
        "use_liger_kernel": True, "warmup_ratio": 0.03},
    "OlympicCoder-7B/sft/config_v00.00.yaml": {
        "dataset_name": "open-r1/codeforces-cots", "dataset_config": "solutions_decontaminated", "dataset_num_proc": 48,
        "gradient_accumulation_steps": 8, "hub_model_id": "open-r1/OlympicCoder-7B", "learning_rate": 1.0e-05,
        "packing": False, "max_grad_norm": 0.2, "max_length": 32768, "num_train_epochs": 10,
        "output_dir": "data/OlympicCoder-7B", "per_device_train_batch_size": 2, "save_strategy": "steps",
        "save_steps": 0.2, "use_liger": True, "warmup_ratio": 0.03},
    "OlympicCoder-32B/sft/config_v00.00.yaml": {
        "dataset_name": "open-r1/codeforces-cots", "dataset_config": "solutions_decontaminated", "dataset_num_proc": 12,
        "gradient_accumulation_steps": 1, "hub_model_id": "open-r1/OlympicCoder-32B", "learning_rate": 4.0e-05,
        "packing": False, "max_grad_norm": 0.2, "max_length": 22528, "num_train_epochs": 10, "optim": "paged_adamw_8bit",
        "output_dir": "data/OlympicCoder-32B", "per_device_train_batch_size": 1, "save_strategy": "epoch",
        "use_liger": True, "warmup_ratio": 0.03},
    "Qwen2.5-1.5B-Instruct/sft/config_demo.yaml": {
        "chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}",
        "dataset_name": "open-r1/s1K-1.1", "dataset_configs": ["all"], "dataset_num_proc": 48,
        "gradient_accumulation_steps": 1, "hub_model_id": "Qwen2.5-1.5B-Open-R1-Distill", "learning_rate": 1.0e-05,
        "packing": True, "max_seq_length": 32768, "num_train_epochs": 15, "output_dir": "data/Qwen2.5-1.5B-Open-R1-Distill",
        "per_device_train_batch_size": 2, "save_strategy": "epoch", "use_liger": True, "warmup_ratio": 0.05},
}


@pytest.mark.parametrize("name", sorted(OPEN_R1_SFT))
def test_open_r1_sft_recipes_dry_run_clean(name, tmp_path, tiny_model_dir, messages_jsonl, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = {**COMMON, **OPEN_R1_SFT[name], "model_name_or_path": str(tiny_model_dir), "dataset_name": str(messages_jsonl)}
    recipe.pop("dataset_config", None)  # a Hub config name has no meaning for the local stand-in
    recipe.pop("dataset_configs", None)
    path = write_recipe(tmp_path, **recipe)
    # no wandb and no Hub here: a recipe asking for them is an error on this machine, as it should be
    code = main(["sft", "--config", str(path), "--dry-run", "--world-size", "8", "--report_to", "none",
                 "--push_to_hub", "false"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "recipe OK" in out.out and "Traceback" not in out.err


def test_open_r1_sft_key_migrations(tmp_path, tiny_model_dir, messages_jsonl, capsys, recwarn):
    recipe = {"model_name_or_path": str(tiny_model_dir), "dataset_name": str(messages_jsonl), "max_seq_length": 64,
              "use_liger": True, "output_dir": str(tmp_path / "out"), "report_to": "none"}
    assert main(["sft", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "max_length: 64" in out.out
    said = " ".join(str(w.message) for w in recwarn)
    assert "'max_seq_length': renamed" in said and "'use_liger'" in said


def test_sft_needs_conversations(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    recipe = {"model_name_or_path": str(tiny_model_dir), "dataset_name": str(data), "output_dir": str(tmp_path / "o")}
    assert main(["sft", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run"]) == 2
    assert "needs a `messages` column" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_sft_trains_saves_and_resumes(tmp_path, tiny_model_dir, messages_jsonl, capsys, caplog):
    out = tmp_path / "out"
    recipe = {"model_name_or_path": str(tiny_model_dir), "dataset_name": str(messages_jsonl), "max_length": 64,
              "per_device_train_batch_size": 8, "max_steps": 4, "save_steps": 2, "logging_steps": 1,
              "learning_rate": 1.0e-3, "lr_scheduler_type": "constant", "report_to": "none", "bf16": False,
              "output_dir": str(out), "seed": 3}
    path = write_recipe(tmp_path, **recipe)
    assert main(["sft", "--config", str(path)]) == 0
    for name in ("model.safetensors", "config.json", "tokenizer.json", "r1kit_run.json", "train_results.json",
                 "trainer_state.json", "checkpoint-2", "checkpoint-4", "sft_summary.json"):
        assert (out / name).exists(), name
    full = json.loads((out / "trainer_state.json").read_text())
    losses = {e["step"]: e["loss"] for e in full["log_history"] if "loss" in e}
    assert len(losses) == 4 and losses[4] < losses[1]  # it learns

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-2", resumed / "checkpoint-2")
    capsys.readouterr()
    assert main(["sft", "--config", str(path), "--output_dir", str(resumed)]) == 0
    assert "Resuming from" in caplog.text
    again = json.loads((resumed / "trainer_state.json").read_text())
    assert again["global_step"] == 4 and json.loads((resumed / "r1kit_run.json").read_text())["resumed_from"]
    redone = {e["step"]: e["loss"] for e in again["log_history"] if "loss" in e}
    assert redone[3] == pytest.approx(losses[3], rel=1e-4) and redone[4] == pytest.approx(losses[4], rel=1e-4)


@pytest.mark.slow
def test_sft_with_use_peft_trains_an_adapter_and_leaves_a_merged_model(tmp_path, tiny_model_dir, messages_jsonl):
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    recipe = {"model_name_or_path": str(tiny_model_dir), "dataset_name": str(messages_jsonl), "max_length": 64,
              "per_device_train_batch_size": 8, "max_steps": 2, "learning_rate": 1.0e-2, "report_to": "none",
              "bf16": False, "output_dir": str(out), "save_strategy": "no", "use_peft": True, "lora_r": 4,
              "lora_target_modules": ["q_proj", "v_proj"]}
    assert main(["sft", "--config", str(write_recipe(tmp_path, **recipe))]) == 0
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == 4  # an adapter was trained
    merged, base = AutoModelForCausalLM.from_pretrained(out), AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[q], base.state_dict()[q])  # the adapter is merged in
    mlp = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(merged.state_dict()[mlp], base.state_dict()[mlp])  # and only the adapted layers moved


@pytest.mark.slow
def test_a_diverging_sft_run_stops_before_the_update_naming_the_step(tmp_path, tiny_model_dir, messages_jsonl, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "out"
    recipe = {"model_name_or_path": str(tiny_model_dir), "dataset_name": str(messages_jsonl), "max_length": 64,
              "per_device_train_batch_size": 8, "max_steps": 8, "save_steps": 1, "logging_steps": 1,
              "learning_rate": 1.0e30, "max_grad_norm": 0.0, "lr_scheduler_type": "constant", "report_to": "none",
              "bf16": False, "output_dir": str(out), "seed": 3}
    assert main(["sft", "--config", str(write_recipe(tmp_path, **recipe))]) == 2
    err = capsys.readouterr().err
    assert "gradient norm" in err and "learning_rate" in err and "Traceback" not in err
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert len(checkpoints) < 8, "the run never diverged: the test proves nothing"
    for checkpoint in checkpoints:
        assert all(t.isfinite().all() for t in load_file(str(checkpoint / "model.safetensors")).values()), checkpoint
    assert not (out / "model.safetensors").exists()
