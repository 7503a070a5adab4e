"""The exact training passes (`training_pass: bucketed | packed`, with `trim_padding` and `shared_prompt_pass`):
TRL's dense results on fewer tokens.

Each exactness test builds one micro-batch as TRL hands it to the loss (two prompt groups, left-padded prompts,
right-padded completions, a completion width set by a longer completion elsewhere in the generation batch),
computes the loss, the per-token log-probabilities and entropies and every gradient with TRL's dense pass and with
each pass and mode, and compares them in fp32. The packed pass runs here through its SDPA mask: the CPU path, and the
oracle for the FlexAttention path (which has no backward on CPU; tests/test_packing.py checks its forward).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os

import pytest
import torch

from r1kit.training.trainpass import distinct_rows, length_buckets

TOLERANCE = {"rtol": 1e-4, "atol": 2e-6}  # fp32, same weights: only the summation order differs
PROMPT_LENGTHS = [3, 3, 6, 6]  # two groups of two; padded to 8, so the first two columns are padding in every row
COMPLETION_LENGTHS = [2, 7, 5, 3]  # padded to 10: the last three columns are padding in every row
# (training_pass, trim_padding, shared_prompt_pass)
DENSE = ("dense", False, False)
MODES = [("bucketed", True, False), ("bucketed", False, True), ("bucketed", True, True), ("packed", True, False),
         ("packed", True, True)]


def tiny_model(kind: str, vocab: int, dropout: float = 0.0):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":  # absolute positions
        config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=dropout,
                            embd_pdrop=dropout, attn_pdrop=dropout)
        return GPT2LMHeadModel(config)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    if kind == "qwen2":  # rotary, with biases on q/k/v
        return Qwen2ForCausalLM(Qwen2Config(**common))
    return LlamaForCausalLM(LlamaConfig(**common))


def build_trainer(tmp_path, kind: str, dropout: float = 0.0, **config):
    from datasets import Dataset

    from r1kit.config.schema import GRPOConfig
    from r1kit.loading.modeling import build_char_tokenizer
    from r1kit.training.trainer import R1Trainer

    tokenizer = build_char_tokenizer()
    peft_config = config.pop("peft_config", None)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, report_to="none",
                      max_completion_length=10, **{"gradient_checkpointing": False, "max_steps": 1, **config})
    folder = tmp_path / kind  # by path: with beta > 0 TRL loads the reference model from it
    tiny_model(kind, len(tokenizer), dropout).save_pretrained(folder)
    trainer = R1Trainer(model=str(folder), args=args, processing_class=tokenizer, peft_config=peft_config,
                        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                        train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    return trainer


def micro_batch(vocab: int, old: bool = True, ref: bool = True) -> dict:
    """TRL's training micro-batch: 4 rows in two groups (rows 0-1 and 2-3 share a prompt), old and reference
    log-probabilities near zero-mean noise."""
    generator = torch.Generator().manual_seed(1)
    prompt_width, completion_width = 8, 10
    prompt_mask = torch.tensor([[0] * (prompt_width - n) + [1] * n for n in PROMPT_LENGTHS])
    completion_mask = torch.tensor([[1] * n + [0] * (completion_width - n) for n in COMPLETION_LENGTHS])
    prompts = torch.randint(3, vocab, (2, prompt_width), generator=generator).repeat_interleave(2, dim=0)
    batch = {
        "prompt_ids": prompts * prompt_mask,
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


def backbone_tokens(trainer) -> list[int]:
    """A counter of the tokens the transformer backbone runs on (prompt and completion columns, padding included)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    count = [0]

    def add(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        count[0] += ids.numel()

    return count, model.base_model.register_forward_pre_hook(add, with_kwargs=True)


def loss_pass(trainer, batch: dict, mode: tuple):
    """(loss, per-token log-probabilities and entropies as the loss saw them, every trainable parameter's gradient,
    tokens the backbone ran on)."""
    seen = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append((result[0].detach(), result[1].detach() if result[1] is not None else None))
        return result

    trainer.args.training_pass, trainer.args.trim_padding, trainer.args.shared_prompt_pass = mode
    trainer._get_per_token_logps_and_entropies = spy
    trainer.model.zero_grad()
    count, hook = backbone_tokens(trainer)
    try:
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
    finally:
        del trainer._get_per_token_logps_and_entropies
        hook.remove()
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    return loss.detach(), seen[0], grads, count[0]


def assert_exact(trainer, batch: dict, modes=MODES) -> dict:
    """Every mode against the dense pass; returns the backbone tokens per mode."""
    dense_loss, (dense_logps, dense_entropy), dense_grads, dense_tokens = loss_pass(trainer, batch, DENSE)
    assert all(g is not None for g in dense_grads.values())
    mask = batch["completion_mask"].bool()
    tokens = {DENSE: dense_tokens}
    for mode in modes:
        loss, (logps, entropy), grads, tokens[mode] = loss_pass(trainer, batch, mode)
        torch.testing.assert_close(logps[mask], dense_logps[mask], **TOLERANCE)
        assert torch.all(logps[~mask] == 0)  # as TRL's fused head leaves them
        torch.testing.assert_close(entropy[mask], dense_entropy[mask], **TOLERANCE)
        torch.testing.assert_close(loss, dense_loss, **TOLERANCE)
        assert grads.keys() == dense_grads.keys()
        for name, grad in grads.items():
            assert grad is not None, name
            torch.testing.assert_close(grad, dense_grads[name], **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")
    return tokens


CASES = [  # (loss type, the config beyond it)
    ("dapo", {"beta": 0.04, "num_iterations": 2, "gradient_accumulation_steps": 2}),
    ("grpo", {"beta": 0.04, "num_iterations": 2}),
    ("bnpo", {"top_entropy_quantile": 0.5, "gradient_accumulation_steps": 2}),
    ("dr_grpo", {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("loss_type, config", CASES, ids=[c[0] for c in CASES])
def test_each_mode_equals_the_dense_pass(tmp_path, kind, loss_type, config):
    trainer = build_trainer(tmp_path, kind, loss_type=loss_type, **config)
    batch = micro_batch(len(trainer.processing_class), ref=config.get("beta", 0) > 0,
                        old=config.get("num_iterations", 1) > 1)
    tokens = assert_exact(trainer, batch)
    # Dense: 4 rows x 18 columns. Trimmed: 2 leading columns go, rows in length buckets. Shared: 2 prompts of 7
    # columns once, then each row's last prompt token and its completion columns.
    assert tokens[DENSE] == 72
    assert tokens[MODES[0]] < tokens[DENSE]
    assert tokens[MODES[1]] == 2 * 7 + 4 * 11
    assert tokens[MODES[2]] < tokens[MODES[0]]
    # Packed: every real token once in one row. Alone, each row's prompt (3, 3, 6, 6) and completion (2, 7, 5, 3);
    # shared, each prompt once, plus its last token again at the head of each of its completions.
    assert tokens[MODES[3]] == 3 + 3 + 6 + 6 + 2 + 7 + 5 + 3
    assert tokens[MODES[4]] == 3 + 6 + 2 + 7 + 5 + 3 + 2


@pytest.mark.slow
def test_lora_gradients_equal_the_dense_pass(tmp_path):
    from peft import LoraConfig

    trainer = build_trainer(tmp_path, "llama", beta=0.04, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    for name, parameter in trainer.model.named_parameters():  # LoRA's B starts at zero: give it weight
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)
    assert_exact(trainer, micro_batch(len(trainer.processing_class)))


@pytest.mark.slow
def test_old_and_reference_passes_in_chunks_equal_the_dense_pass(tmp_path):
    """The no-gradient pass TRL runs at generation (old and reference log-probabilities), over a generation batch
    in chunks of the micro-batch size, with a row whose completion is masked out entirely (a dynamic-sampling
    filler)."""
    trainer = build_trainer(tmp_path, "llama")
    batch = micro_batch(len(trainer.processing_class))
    batch["completion_mask"][3] = 0
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1).repeat(2, 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1).repeat(2, 1)
    results = {}
    for mode in [DENSE, *MODES]:
        trainer.args.training_pass, trainer.args.trim_padding, trainer.args.shared_prompt_pass = mode
        with torch.no_grad():
            results[mode] = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 10, batch_size=3)[0]
    for mode in MODES:
        torch.testing.assert_close(results[mode], results[DENSE], **TOLERANCE)
        assert torch.all(results[mode][3] == 0)


@pytest.mark.slow
def test_gradient_checkpointing_keeps_the_buckets_and_says_why_the_prompt_is_not_shared(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "llama", gradient_checkpointing=True)
    trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # as train() does
    with caplog.at_level(logging.INFO, logger="r1kit"):
        tokens = assert_exact(trainer, micro_batch(len(trainer.processing_class)),
                              modes=[MODES[2], MODES[2], MODES[4]])
    assert tokens[MODES[2]] < tokens[DENSE]  # the buckets still cut padding
    assert tokens[MODES[4]] == 3 + 6 + 2 + 7 + 5 + 3 + 2  # the packed pass shares the prompt: no cache to drop
    notes = [r.getMessage() for r in caplog.records if "shared_prompt_pass: off" in r.getMessage()]
    assert len(notes) == 1 and "gradient checkpointing" in notes[0]


@pytest.mark.slow
def test_active_dropout_does_not_share_the_prompt_and_says_so(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "gpt2", dropout=0.1)
    with caplog.at_level(logging.INFO, logger="r1kit"):
        loss_pass(trainer, micro_batch(len(trainer.processing_class)), MODES[2])
        packed_tokens = loss_pass(trainer, micro_batch(len(trainer.processing_class)), MODES[4])[3]
    assert any("shared_prompt_pass: off" in r.getMessage() and "dropout" in r.getMessage() for r in caplog.records)
    assert any("own prompt" in r.getMessage() and "dropout" in r.getMessage() for r in caplog.records)
    assert packed_tokens == 3 + 3 + 6 + 6 + 2 + 7 + 5 + 3  # packed, but each row with its own prompt


@pytest.mark.slow
def test_unknown_model_type_keeps_leading_padding_and_its_prompts_and_says_so_once(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "llama")
    trainer.model.config.model_type = "some_new_model"  # not known to number positions by column
    batch = micro_batch(len(trainer.processing_class))
    with caplog.at_level(logging.INFO, logger="r1kit"):
        for _ in range(2):
            assert_exact(trainer, batch, modes=[MODES[2], MODES[4]])
    notes = [r.getMessage() for r in caplog.records if "some_new_model" in r.getMessage()]
    assert len(notes) == 3  # one per feature and pass, once each
    assert any("leading prompt padding stays" in n for n in notes) and any("shared_prompt_pass: off" in n for n in notes)


@pytest.mark.slow
def test_a_batch_with_token_types_takes_the_dense_pass_and_says_so_once(tmp_path, caplog):
    trainer = build_trainer(tmp_path, "llama")
    batch = micro_batch(len(trainer.processing_class))
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with caplog.at_level(logging.WARNING, logger="r1kit"), torch.no_grad():
        for _ in range(2):  # a multimodal batch's extra input
            trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 10, token_type_ids=torch.zeros_like(ids))
    notes = [r.getMessage() for r in caplog.records if "token_type_ids" in r.getMessage()]
    assert len(notes) == 1 and "dense" in notes[0]


# --- the pieces ------------------------------------------------------------------------------------------------------
def brute_force_cost(lengths: list[int], overhead: int, max_buckets: int) -> int:
    """The least padded-tokens-plus-overhead over every split of the sorted rows into at most max_buckets runs."""
    widths = sorted(max(1, n) for n in lengths)
    best = None
    for k in range(1, min(max_buckets, len(widths)) + 1):
        for cuts in itertools.combinations(range(1, len(widths)), k - 1):
            bounds = [0, *cuts, len(widths)]
            cost = sum((b - a) * widths[b - 1] + overhead for a, b in zip(bounds, bounds[1:]))
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_length_buckets_cover_every_row_once_at_the_least_cost(seed):
    generator = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 9, (1,), generator=generator))
    lengths = torch.randint(0, 300, (n,), generator=generator).tolist()
    overhead, max_buckets = [0, 32, 500][seed % 3], 1 + seed % 4
    buckets = length_buckets(lengths, overhead=overhead, max_buckets=max_buckets)
    assert sorted(i for b in buckets for i in b) == list(range(n)) and len(buckets) <= max_buckets
    widths = [max(max(1, lengths[i]) for i in b) for b in buckets]
    assert sum(len(b) * w + overhead for b, w in zip(buckets, widths)) == brute_force_cost(lengths, overhead, max_buckets)


def test_length_buckets_split_spread_lengths_and_keep_even_ones_together():
    spread = [16 + 70 * i for i in range(8)]  # 16..506
    assert len(length_buckets(spread)) > 2
    assert length_buckets([100] * 8) == [list(range(8))]


def test_distinct_rows_finds_each_prompt_once():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, inverse = distinct_rows(ids, mask)
    assert len(first) == 2
    assert torch.equal(ids[first][inverse], ids) and torch.equal(mask[first][inverse], mask)


# --- two ranks -------------------------------------------------------------------------------------------------------
def ddp_worker(rank: int, folder: str, port: int, results: dict) -> None:
    import torch.distributed as dist
    from transformers import LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from r1kit.training.packing import score_packed
    from r1kit.training.trainpass import PassPlan, score_chunk

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = LlamaForCausalLM.from_pretrained(folder)
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        batch = micro_batch(model.config.vocab_size, old=False, ref=False)
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)[2 * rank : 2 * rank + 2]
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)[2 * rank : 2 * rank + 2]
        passes = {
            "dense": lambda: score_chunk(ddp, PassPlan(trim=False, share=False, by_column=True), ids, mask, 10, True,
                                         contextlib.nullcontext),
            "bucketed": lambda: score_chunk(ddp, PassPlan(trim=True, share=True, by_column=True), ids, mask, 10, True,
                                            contextlib.nullcontext),
            "packed": lambda: score_packed(ddp, model.config, ids, mask, 10, True, True, contextlib.nullcontext),
        }
        grads = {}
        for name, run in passes.items():
            ddp.zero_grad()
            logps, entropy = run()
            (logps.sum() + entropy.sum()).backward()  # DDP averages the gradients over the two ranks
            grads[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[rank] = {name: max((grads[name][n] - grads["dense"][n]).abs().max().item() for n in grads["dense"])
                         for name in ("bucketed", "packed")}
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_under_ddp_get_the_dense_gradients(tmp_path):
    """Two gloo ranks, each with one prompt group, under DistributedDataParallel: the shared, bucketed pass (several
    forward calls before one backward) and the packed pass reduce the same gradients as the dense one."""
    import socket

    import torch.multiprocessing as mp

    from r1kit.loading.modeling import build_char_tokenizer

    tiny_model("llama", len(build_char_tokenizer())).save_pretrained(tmp_path / "llama")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(ddp_worker, args=(str(tmp_path / "llama"), port, results), nprocs=2, join=True)
    assert sorted(results.keys()) == [0, 1]
    assert max(gap for rank in results.values() for gap in rank.values()) < 1e-5


@pytest.mark.slow
def test_the_start_up_line_says_what_the_pass_does_for_the_run(tmp_path):
    measured = build_trainer(tmp_path / "a", "llama").training_pass_summary()
    assert measured.startswith("the fastest of dense, bucketed, packed, measured on this cpu") and "exact" in measured
    checkpointed = build_trainer(tmp_path / "b", "llama", gradient_checkpointing=True).training_pass_summary()
    assert "packed" in checkpointed and "gradient checkpointing" in checkpointed
    dropout = build_trainer(tmp_path / "c", "gpt2", dropout=0.1).training_pass_summary()
    assert "own prompt" in dropout and "disable_dropout" in dropout
    fixed = build_trainer(tmp_path / "d", "llama", training_pass="packed").training_pass_summary()
    assert fixed.startswith("one packed row")
    dense = build_trainer(tmp_path / "e", "llama", training_pass="dense").training_pass_summary()
    assert dense.startswith("TRL's dense pass")


def test_attention_implementations_not_verified_exact_keep_the_buckets_but_not_the_shared_prompt():
    from types import SimpleNamespace

    from r1kit.training.trainpass import plan_for

    for attention, shared in [("sdpa", True), ("eager", True), ("flash_attention_2", False), ("flex_attention", False)]:
        model = SimpleNamespace(config=SimpleNamespace(model_type="qwen2", _attn_implementation=attention),
                                training=False, base_model=SimpleNamespace(forward=lambda input_ids, cache=None: None))
        plan, notes = plan_for(model, trim=True, share=True)
        assert plan.share is shared and plan.trim, attention
        assert bool(notes) is not shared and all(attention in note for note in notes)


# --- rotary embeddings whose frequencies depend on the forward's longest position ---------------------------------
ROPE_BY_LENGTH = {  # transformers recomputes these per forward from max(position_ids) + 1 (`dynamic_rope_update`)
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 16,
                 "long_factor": [4.0] * 4, "short_factor": [1.0] * 4},
}


@pytest.mark.slow
@pytest.mark.parametrize("rope", sorted(ROPE_BY_LENGTH))
def test_length_dependent_rope_equals_the_dense_pass_or_stands_down(rope):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from r1kit.training.trainpass import plan_for, score_chunk

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=16 if rope == "dynamic" else 64, rope_parameters=ROPE_BY_LENGTH[rope])
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    # Prompts of 6 columns, completions padded to 40 by one long completion: the dense pass runs 46 positions (past
    # the original 16), the shared prompt's forward 5 and the short completions' bucket fewer than 16.
    generator = torch.Generator().manual_seed(1)
    width, lengths = 40, [2, 40, 3, 2, 1, 2, 3, 2]
    prompt_mask = torch.tensor([[0] + [1] * 5 if i < 2 else [1] * 6 for i in range(8)])
    completion_mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    prompts = torch.randint(3, 40, (8, 6), generator=generator)
    prompts[1], prompts[3] = prompts[0], prompts[2]
    ids = torch.cat([prompts * prompt_mask, torch.randint(3, 40, (8, width), generator=generator) * completion_mask], 1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-width] = -100
    keep = completion_mask.bool()
    dense = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -width:]
    dense[keep].sum().backward()
    dense_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    plan, notes = plan_for(model, trim=True, share=True)
    assert not (plan.trim or plan.share) and rope in notes[0]  # it stands down, and says why
    logps, _ = score_chunk(model, plan, ids, mask, width, False, contextlib.nullcontext)
    logps[keep].sum().backward()
    torch.testing.assert_close(logps[keep], dense[keep].detach(), **TOLERANCE)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, dense_grads[name], **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


def test_under_autocast_frozen_weights_make_each_extra_call_cost_memory_and_the_split_pays_for_it():
    """LoRA on a float32 base under bf16 autocast: each forward keeps a bf16 copy of the frozen weights for its
    backward, so a bucket or the shared prompt must save that many tokens' activations to be taken."""
    from r1kit.loading.modeling import build_char_tokenizer
    from r1kit.training.trainpass import call_copy_tokens

    model = tiny_model("llama", len(build_char_tokenizer()))
    assert call_copy_tokens(model, None) == 0 and call_copy_tokens(model, torch.bfloat16) == 0  # all trainable
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("q_proj" in name)  # as LoRA leaves the base
    cost = call_copy_tokens(model, torch.bfloat16)
    frozen = sum(p.numel() for p in model.parameters() if p.dim() == 2 and not p.requires_grad) * 2  # bf16 bytes
    per_token = 2 * (8 * 32 + 3 * 64) * 2  # 2 layers of (8 x hidden + 3 x intermediate) bf16 values
    assert cost == -(-frozen // per_token) and call_copy_tokens(model, None) == 0
    lengths = [8, 8, 8, 40]  # one long row: a separate bucket saves 96 padded tokens, worth it only when calls are cheap
    assert len(length_buckets(lengths, overhead=32)) == 2 and len(length_buckets(lengths, overhead=100)) == 1
