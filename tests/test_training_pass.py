"""`trim_padding`: the loss pass of a micro-batch on its columns that some row uses gives TRL's dense results.

Each test builds one micro-batch as TRL hands it to the loss (left-padded prompts, right-padded completions, a
completion width set by a longer completion elsewhere in the generation batch), computes the loss and every gradient
with trimming off (TRL's dense pass) and on, and compares them in fp32.
"""

from __future__ import annotations

import logging

import pytest
import torch

TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}  # fp32, same weights: only the summation order of the kept columns differs
PROMPT_LENGTHS = [3, 5, 6, 4]  # padded to 8: the first two columns are padding in every row
COMPLETION_LENGTHS = [2, 7, 5, 3]  # padded to 10: the last three columns are padding in every row


def tiny_model(kind: str, vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":  # absolute positions; dropout off so that both passes see the same network
        config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(config)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def build_trainer(tmp_path, kind: str, **config):
    from datasets import Dataset

    from r1kit.config.schema import GRPOConfig
    from r1kit.modeling import build_char_tokenizer
    from r1kit.trainer import R1Trainer

    tokenizer = build_char_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=1,
                      report_to="none", max_completion_length=10, gradient_checkpointing=False, **config)
    folder = tmp_path / kind  # by path: with beta > 0 TRL loads the reference model from it
    tiny_model(kind, len(tokenizer)).save_pretrained(folder)
    trainer = R1Trainer(model=str(folder), args=args, processing_class=tokenizer,
                        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                        train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    return trainer


def micro_batch(vocab: int, old: bool = True, ref: bool = True) -> dict:
    """TRL's training micro-batch: 4 rows, old and reference log-probabilities near zero-mean noise."""
    generator = torch.Generator().manual_seed(1)
    prompt_width, completion_width = 8, 10
    prompt_mask = torch.tensor([[0] * (prompt_width - n) + [1] * n for n in PROMPT_LENGTHS])
    completion_mask = torch.tensor([[1] * n + [0] * (completion_width - n) for n in COMPLETION_LENGTHS])
    batch = {
        "prompt_ids": torch.randint(3, vocab, (4, prompt_width), generator=generator) * prompt_mask,
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(3, vocab, (4, completion_width), generator=generator) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 0.7, -1.2]),
        "num_items_in_batch": completion_mask.sum(),
    }
    if old:  # num_iterations > 1: log-probabilities from before the last update
        batch["old_per_token_logps"] = -4.0 + 0.3 * torch.randn(4, completion_width, generator=generator)
    if ref:  # beta > 0
        batch["ref_per_token_logps"] = -4.0 + 0.3 * torch.randn(4, completion_width, generator=generator)
    return batch


def loss_pass(trainer, batch: dict, trim: bool):
    """(loss, per-token log-probabilities as the loss saw them, every parameter's gradient)."""
    seen = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append(result[0].detach())
        return result

    trainer.args.trim_padding = trim
    trainer._get_per_token_logps_and_entropies = spy
    trainer.model.zero_grad()
    try:
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
    finally:
        del trainer._get_per_token_logps_and_entropies
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), seen[0], grads


def assert_same_pass(trainer, batch: dict, trimmed_width: int) -> None:
    dense_loss, dense_logps, dense_grads = loss_pass(trainer, batch, trim=False)
    loss, logps, grads = loss_pass(trainer, batch, trim=True)
    assert logps.size(1) == trimmed_width  # the pass really ran on fewer columns
    mask = batch["completion_mask"][:, :trimmed_width].bool()
    torch.testing.assert_close(logps[mask], dense_logps[:, :trimmed_width][mask], **TOLERANCE)
    torch.testing.assert_close(loss, dense_loss, **TOLERANCE)
    assert grads.keys() == dense_grads.keys() and len(grads) == len(list(trainer.model.parameters()))
    for name, grad in grads.items():
        torch.testing.assert_close(grad, dense_grads[name], **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


CASES = [  # (loss type, the config beyond it)
    ("dapo", {"beta": 0.04, "num_iterations": 2, "gradient_accumulation_steps": 2}),
    ("grpo", {"beta": 0.04, "num_iterations": 2}),
    ("bnpo", {"top_entropy_quantile": 0.5, "gradient_accumulation_steps": 2}),
    ("dr_grpo", {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("loss_type, config", CASES, ids=[c[0] for c in CASES])
def test_trimmed_pass_equals_the_dense_pass(tmp_path, kind, loss_type, config):
    trainer = build_trainer(tmp_path, kind, loss_type=loss_type, **config)
    batch = micro_batch(len(trainer.processing_class), ref=config.get("beta", 0) > 0,
                        old=config.get("num_iterations", 1) > 1)
    assert_same_pass(trainer, batch, trimmed_width=max(COMPLETION_LENGTHS))


@pytest.mark.slow
def test_absolute_positions_need_the_dropped_columns_counted(tmp_path):
    """GPT-2 given no position ids numbers the trimmed columns from 0: without `positions_from` the log-probabilities
    move, which is what the position hook is there for."""
    from r1kit.trainer import padding_columns, trim_columns

    trainer = build_trainer(tmp_path, "gpt2")
    batch = micro_batch(len(trainer.processing_class))
    start, keep = padding_columns(batch, trim_left=True)
    assert (start, keep) == (2, 7)
    trimmed = trim_columns(batch, start, keep)
    ids = torch.cat([trimmed["prompt_ids"], trimmed["completion_ids"]], dim=1)
    mask = torch.cat([trimmed["prompt_mask"], trimmed["completion_mask"]], dim=1)
    dense_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    dense_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        dense = trainer._get_per_token_logps_and_entropies(trainer.model, dense_ids, dense_mask, 10)[0][:, :keep]
        unshifted = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)[0]
    real = trimmed["completion_mask"].bool()
    assert not torch.allclose(unshifted[real], dense[real], **TOLERANCE)


@pytest.mark.slow
def test_unknown_model_type_keeps_leading_padding_and_says_so_once(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "llama")
    trainer.model.config.model_type = "some_new_model"  # not known to number positions by column
    batch = micro_batch(len(trainer.processing_class))
    with caplog.at_level(logging.WARNING, logger="r1kit.trainer"):
        for _ in range(2):
            assert_same_pass(trainer, batch, trimmed_width=max(COMPLETION_LENGTHS))
    notes = [r.getMessage() for r in caplog.records if "some_new_model" in r.getMessage()]
    assert len(notes) == 1 and "leading prompt padding stays" in notes[0]


@pytest.mark.slow
def test_a_micro_batch_with_keys_it_does_not_know_stays_dense_and_says_so_once(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "llama")
    batch = micro_batch(len(trainer.processing_class))
    batch["token_type_ids"] = torch.zeros(4, 18, dtype=torch.long)  # a multimodal batch's extra input
    with caplog.at_level(logging.WARNING, logger="r1kit.trainer"):
        for _ in range(2):
            _, logps, _ = loss_pass(trainer, batch, trim=True)
            assert logps.size(1) == 10  # dense: every completion column
    notes = [r.getMessage() for r in caplog.records if "token_type_ids" in r.getMessage()]
    assert len(notes) == 1 and "dense" in notes[0]


def test_a_micro_batch_without_padding_columns_is_left_whole():
    from r1kit.trainer import padding_columns

    batch = {"prompt_mask": torch.ones(2, 3, dtype=torch.long),
             "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}
    assert padding_columns(batch, trim_left=True) == (0, 3)
    batch["completion_mask"] = torch.zeros(2, 3, dtype=torch.long)  # every row masked out (dynamic sampling fillers)
    assert padding_columns(batch, trim_left=True) == (0, 1)
