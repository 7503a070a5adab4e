"""The folder a run leaves loads in every engine: plain transformers (`AutoModelForCausalLM.from_pretrained`), peft
(a LoRA run's adapter on its base) and vLLM (`LLM(output_dir)`, when vLLM is installed); it names its base model as
the recipe did and carries nothing of this machine (`local_files_only`, cache paths). Tiny GRPO runs (LoRA and
full) and a tiny SFT run, on CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from r1kit.config.recipe import parse_args
from r1kit.grpo import finish, setup
from r1kit.loading.modeling import resolve_model_path
from r1kit.run import pipeline as runs
from tests.helpers import tiny_recipe, write_recipe

pytestmark = pytest.mark.slow  # each module fixture trains

BASE = "r1kit:tiny-random"  # a built-in name: the weights load from this machine's cache, the files must name BASE
LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 32, "lora_target_modules": ["q_proj", "v_proj", "down_proj"]}
PROMPT = [{"role": "user", "content": "What is 12 + 41?"}]


def train_grpo(folder: Path, recipe: dict):
    """setup -> train -> finish, as `r1kit.grpo.pipeline` runs them, keeping the run (its trainer) for the tests."""
    run = setup(*parse_args(["--config", str(write_recipe(folder, **recipe))]))
    finish(run, runs.train(run))
    return run


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir, math_jsonl):
    folder = tmp_path_factory.mktemp("lora")
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, folder / "out", model_name_or_path=BASE, max_steps=2,
                         save_steps=2, **LORA)
    return train_grpo(folder, recipe)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_model_dir, math_jsonl):
    folder = tmp_path_factory.mktemp("full")
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, folder / "out", model_name_or_path=BASE, max_steps=2,
                         save_steps=2)
    return train_grpo(folder, recipe)


@pytest.fixture(scope="module")
def sft_out(tmp_path_factory):
    from r1kit.cli import main

    folder = tmp_path_factory.mktemp("sft")
    rows = [{"messages": [{"role": "user", "content": f"What is {a} + {a + 3}?"},
                          {"role": "assistant", "content": f"<think>add</think><answer>{2 * a + 3}</answer>"}]}
            for a in range(16)]
    data = folder / "messages.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {"model_name_or_path": BASE, "dataset_name": str(data), "max_length": 64, "per_device_train_batch_size": 8,
              "max_steps": 2, "save_steps": 10, "learning_rate": 1.0e-3, "report_to": "none", "bf16": False,
              "output_dir": str(folder / "out"), "seed": 3}
    assert main(["sft", "--config", str(write_recipe(folder, **recipe))]) == 0
    return folder / "out"


def out_dir(run) -> Path:
    return Path(run.trainer.args.output_dir)


def inputs():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(BASE))
    return tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)


def logits_and_greedy(model, batch) -> tuple:
    import torch

    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
        greedy = model.generate(**batch, max_new_tokens=12, do_sample=False)
    return logits, greedy[0, batch["input_ids"].shape[1]:].tolist()


def saved_text_files(folder: Path) -> list[Path]:
    """The files a folder hands to other machines: every JSON and card at its top and in `adapter/`."""
    return [p for d in (folder, folder / "adapter") for p in sorted(d.glob("*.json")) + sorted(d.glob("*.md"))]


# --------------------------------------------------------------------------------------------------------------------
# LoRA: a merged model at the top, the adapter beside it
# --------------------------------------------------------------------------------------------------------------------
def test_lora_run_leaves_a_plain_model_at_the_top_and_the_adapter_beside_it(lora_run):
    out = out_dir(lora_run)
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "README.md"):
        assert (out / name).is_file(), name
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        assert not (out / name).exists(), f"{name} at the top: engines would take the folder for an adapter"
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == 4
    config = json.loads((out / "config.json").read_text())
    assert config["use_cache"] is True and "quantization_config" not in config
    assert config["tie_word_embeddings"] is True  # as the base: the merge keeps tied embeddings tied
    eos = lora_run.trainer.processing_class.eos_token_id
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == eos
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()  # checkpoints stay adapters (resume)


def test_lora_merged_model_is_the_trained_model_and_base_plus_adapter(lora_run):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out, batch = out_dir(lora_run), inputs()
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not hasattr(merged, "peft_config")  # a plain model, not an adapter loaded on a base
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(BASE))
    base_logits, _ = logits_and_greedy(base, batch)
    through_peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(resolve_model_path(BASE)),
                                             out / "adapter")
    merged_logits, merged_greedy = logits_and_greedy(merged, batch)
    peft_logits, peft_greedy = logits_and_greedy(through_peft, batch)
    live_logits, live_greedy = logits_and_greedy(lora_run.trainer.model, batch)  # unmerged after the save

    assert (merged_logits - base_logits).abs().max() > 1e-3, "the adapter learned nothing: the test proves nothing"
    torch.testing.assert_close(merged_logits, peft_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merged_logits, live_logits, atol=1e-5, rtol=1e-5)
    assert merged_greedy == peft_greedy == live_greedy


def test_lora_files_name_the_recipes_base_model(lora_run):
    out = out_dir(lora_run)
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == BASE
    config = json.loads((out / "config.json").read_text())
    assert config.get("_name_or_path", BASE) == BASE
    card = (out / "adapter" / "README.md")
    assert not card.exists() or resolve_model_path(BASE) not in card.read_text()


def test_lora_push_uploads_the_folder_as_saved(lora_run, monkeypatch):
    """The Hub push skips the trainer's own re-save, which would put the adapter back at the top."""
    import transformers.trainer

    trainer, out = lora_run.trainer, out_dir(lora_run)
    uploads = []

    class FakeApi:
        def upload_folder(self, folder_path, **kwargs):
            uploads.append((folder_path, sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setattr(transformers.trainer, "hf_api", FakeApi)
    monkeypatch.setattr(trainer, "hub_model_id", "someone/tiny-lora", raising=False)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "README.md"}
    runs.push_as_saved(trainer, None)
    (folder, names), = uploads
    assert Path(folder) == out and "model.safetensors" in names and "adapter_config.json" not in names
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "README.md"} == before
    assert "save_model" not in vars(trainer)  # the trainer's own save_model is back for later calls


# --------------------------------------------------------------------------------------------------------------------
# A full run: saved as the trainer saves it
# --------------------------------------------------------------------------------------------------------------------
def test_full_run_saves_the_trained_model(full_run):
    import torch
    from transformers import AutoModelForCausalLM

    out, batch = out_dir(full_run), inputs()
    assert (out / "model.safetensors").is_file() and not (out / "adapter").exists()
    assert json.loads((out / "config.json").read_text())["use_cache"] is True
    saved_logits, saved_greedy = logits_and_greedy(AutoModelForCausalLM.from_pretrained(out), batch)
    live_logits, live_greedy = logits_and_greedy(full_run.trainer.model, batch)
    step_logits, _ = logits_and_greedy(AutoModelForCausalLM.from_pretrained(out / "checkpoint-2"), batch)
    torch.testing.assert_close(saved_logits, live_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(saved_logits, step_logits, atol=1e-5, rtol=1e-5)
    assert saved_greedy == live_greedy


# --------------------------------------------------------------------------------------------------------------------
# Nothing of this machine, every kind of run
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["lora", "full", "sft"])
def test_saved_files_carry_nothing_of_this_machine(kind, request):
    out = request.getfixturevalue("sft_out") if kind == "sft" else out_dir(request.getfixturevalue(f"{kind}_run"))
    machine = [os.environ["R1KIT_CACHE"], resolve_model_path(BASE)]
    files = saved_text_files(out)
    assert {"config.json", "tokenizer_config.json"} <= {p.name for p in files}
    for path in files:
        text = path.read_text()
        for word in ('"local_files_only"', '"is_local"', *machine):  # the keys, and the cache's paths
            assert word not in text, f"{path.relative_to(out)} holds {word!r}"


def test_sft_output_loads_with_transformers(sft_out):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(sft_out)
    tokenizer = AutoTokenizer.from_pretrained(sft_out)
    batch = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert len(logits_and_greedy(model, batch)[1]) >= 1


# (Loading a trained folder, LoRA-merged and full, in a real vLLM: tests/test_vllm.py.)
