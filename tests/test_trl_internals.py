"""The private parts of TRL that r1kit relies on, pinned in one place: a TRL upgrade that moves one fails here, by
name, instead of deep inside a training run. `r1kit.training.trainer` and `r1kit.training.generators` (async rollouts' hooks and the
vLLM weight walk) are the only modules that use them (and
`r1kit.config.schema.trl_choices` reads TRL's documented choices; `r1kit.vllm_front` wraps the vLLM client's public
health check)."""

from __future__ import annotations

import inspect

import pytest
from trl import GRPOTrainer

from r1kit.config.schema import trl_choices

# method -> the parameters r1kit's overrides receive and pass on (r1kit.training.trainer.R1Trainer)
OVERRIDDEN = {
    "_calculate_rewards": ["inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["inputs"],
    "_save_checkpoint": ["model", "trial"],
    "_load_optimizer_and_scheduler": ["checkpoint"],
    "_get_grad_norm": ["model", "grad_norm"],  # transformers' Trainer: the non-finite gradient check
    "_compute_loss": ["model", "inputs"],  # trim_padding (the tests' loss spies wrap it too); async rollouts
    # async rollouts (r1kit.training.generators.AsyncRolloutHooks)
    "_generate_single_turn": ["prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
    "_prepare_inputs": ["generation_batch"],
    "get_batch_samples": ["epoch_iterator", "num_batches", "device"],  # transformers' Trainer
}
CALLED = {
    "_get_output_dir": ["trial"],
    "_get_per_token_logps_and_entropies": ["model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"],
    "_tokenize_prompts": ["prompts"],  # async rollouts: a batch read ahead, tokenized as TRL will
}
# attributes the trainer reads after TRL's __init__ set them
ATTRIBUTES = ("_metrics", "_step", "_tokenizer", "num_generations", "num_iterations", "reward_weights",
              "pad_to_multiple_of", "ref_model", "reward_func_names", "reward_funcs",
              # async rollouts
              "_buffered_inputs", "_dist", "eos_token_ids", "generation_config", "environment_factories", "loss_type")  # with vLLM also vllm_generation and
# _last_loaded_step (tests/test_vllm.py)


@pytest.mark.parametrize("method, parameters", [*OVERRIDDEN.items(), *CALLED.items()])
def test_trl_private_methods_r1kit_uses_keep_their_parameters(method, parameters):
    assert hasattr(GRPOTrainer, method), f"TRL's GRPOTrainer no longer has {method}"
    names = list(inspect.signature(getattr(GRPOTrainer, method)).parameters)[1:]
    assert names[: len(parameters)] == parameters


def test_trl_attributes_r1kit_reads_exist_after_construction(tiny_model_dir, tmp_path):
    from datasets import Dataset

    from r1kit.config.schema import GRPOConfig
    from r1kit.training.trainer import R1Trainer

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=1,
                      report_to="none", max_completion_length=4)
    trainer = R1Trainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                        args=args, train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4))
    missing = [name for name in ATTRIBUTES if not hasattr(trainer, name)]
    assert missing == []
    assert "train" in trainer._metrics and isinstance(trainer._step, int)


def test_trl_documents_the_choices_r1kit_checks_early():
    assert set(trl_choices("loss_type")) >= {"grpo", "dapo", "dr_grpo", "bnpo"}
    assert set(trl_choices("scale_rewards")) == {"group", "batch", "none"}
    assert set(trl_choices("vllm_mode")) == {"server", "colocate"}
    assert set(trl_choices("importance_sampling_level")) == {"token", "sequence"}
    assert set(trl_choices("multi_objective_aggregation")) == {"sum_then_normalize", "normalize_then_sum"}


def test_trls_vllm_client_opens_its_session_before_its_health_check_and_first_request():
    """`r1kit.vllm_front.authenticated_client` puts the shared secret on the client's session as `check_server`
    starts: the session must exist by then, and every later request go through it."""
    from trl.generation.vllm_client import VLLMClient

    init = inspect.getsource(VLLMClient.__init__)
    session, check, models = (init.index(s) for s in ("self.session = requests.Session()", "self.check_server(",
                                                      "/v1/models"))
    assert session < check < models
    for method in ("_get", "_post", "reset_prefix_cache"):
        assert "self.session." in inspect.getsource(getattr(VLLMClient, method)), method
