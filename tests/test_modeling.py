"""Model and tokenizer loading: built-in models, chat-template override, CPU fallbacks."""

from __future__ import annotations

import pytest
import torch

from r1kit.loading.modeling import get_model, get_tokenizer, model_init_kwargs, resolve_model_path

needs_cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU fallbacks")


def model_args(**kw):
    from r1kit.config.schema import ModelConfig

    return ModelConfig(**{"model_name_or_path": "r1kit:tiny-random", "dtype": "float32", **kw})


def training_args(**kw):
    from r1kit.config.schema import GRPOConfig

    return GRPOConfig(**{"output_dir": "unused", "bf16": False, "report_to": "none", "gradient_checkpointing": False,
                         "num_generations": 2, "per_device_train_batch_size": 2, **kw})


def test_builtin_tiny_model_is_built_once_and_loads():
    path = resolve_model_path("r1kit:tiny-random")
    assert resolve_model_path("r1kit:tiny-random") == path
    tokenizer = get_tokenizer(model_args(), training_args())
    model = get_model(model_args(), training_args())
    ids = tokenizer("<think>12+3</think><answer>15</answer>")["input_ids"]
    assert tokenizer.decode(ids) == "<think>12+3</think><answer>15</answer>"
    assert len(tokenizer("<think>")["input_ids"]) == 1  # tags are single tokens
    assert model.config.vocab_size == len(tokenizer)
    with pytest.raises(ValueError, match="unknown built-in model"):
        resolve_model_path("r1kit:huge")


def test_a_rank_other_than_0_builds_the_whole_builtin_model(tmp_path, monkeypatch):
    """Every rank of a launch resolves `r1kit:tiny-random` at once; transformers' save_pretrained writes nothing on
    a rank other than 0, so the rank that published first used to leave a folder without config.json or weights."""
    from transformers import AutoModelForCausalLM

    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    monkeypatch.setenv("R1KIT_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a, **k: 1)
    path = resolve_model_path("r1kit:tiny-random")
    monkeypatch.undo()
    loaded = AutoModelForCausalLM.from_pretrained(path)
    built = build_tiny_llama(build_char_tokenizer())
    assert loaded.state_dict().keys() == built.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in built.state_dict().items())
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # still tied


def test_chat_template_override_and_pad_token(tiny_model_dir):
    template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    tokenizer = get_tokenizer(model_args(model_name_or_path=str(tiny_model_dir)), training_args(chat_template=template))
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "[hi]"
    assert tokenizer.pad_token is not None


@needs_cpu_only
def test_gpu_only_settings_fall_back_on_cpu(caplog):
    kwargs = model_init_kwargs(model_args(dtype="bfloat16", attn_implementation="flash_attention_2"), training_args())
    assert kwargs["dtype"] == torch.float32 and kwargs["attn_implementation"] == "sdpa"
    assert "bfloat16" in caplog.text and "flash_attention_2" in caplog.text


@needs_cpu_only
def test_quantisation_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="need a CUDA GPU"):
        model_init_kwargs(model_args(load_in_4bit=True), training_args())


def test_use_cache_is_off_under_gradient_checkpointing():
    assert model_init_kwargs(model_args(), training_args(gradient_checkpointing=True))["use_cache"] is False
    assert model_init_kwargs(model_args(), training_args())["use_cache"] is True


@pytest.mark.parametrize("written, matched", [(["q_proj"], {"q_proj"}), (["q_proj", "v_proj"], {"q_proj", "v_proj"}),
                                              ("all-linear", "all-linear"), (r".*\.q_proj", r".*\.q_proj")])
def test_one_lora_target_module_stays_a_module_name(written, matched):
    """TRL turns a one-item list into its string, which peft reads as a whole-name pattern: [q_proj] matched nothing."""
    from r1kit.config.schema import ModelConfig
    from r1kit.loading.modeling import get_peft_config

    config = get_peft_config(ModelConfig(model_name_or_path="m", use_peft=True, lora_target_modules=written))
    assert config.target_modules == matched


@pytest.mark.slow
def test_a_lora_run_on_one_target_module_trains_it(tmp_path, tiny_model_dir, math_jsonl):
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline
    from tests.helpers import tiny_recipe, write_recipe

    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", max_steps=1, use_peft=True, lora_r=4,
                         lora_target_modules=["q_proj"])
    pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))
    adapter = (tmp_path / "out" / "adapter" / "adapter_config.json")
    assert adapter.is_file() and "q_proj" in adapter.read_text()
