"""The packed pass's layout and mask (`r1kit.training.packing`): what each query sees is what it sees in TRL's dense pass,
every scored token is scored once, and the FlexAttention path gives the SDPA path's values (forward only on CPU:
compiled FlexAttention has no backward there; the GPU check runs its gradients)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from r1kit.training.packing import FLEX_BLOCK, build_layout, dense_mask, score_packed

BF16_TOLERANCE = {"rtol": 2e-2, "atol": 2e-2}  # bf16 autocast: both passes round to bf16, in another order


def random_chunk(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A chunk as TRL builds it, made harder: groups of rows sharing a left-padded prompt, right-padded completions,
    a row masked out entirely (a truncated completion), and holes inside some completions."""
    rng = np.random.default_rng(seed)
    groups, per_group = rng.integers(1, 4), rng.integers(1, 4)
    prompt_width, width = int(rng.integers(2, 7)), int(rng.integers(1, 9))
    ids, mask = [], []
    for _ in range(groups):
        length = int(rng.integers(1, prompt_width + 1))
        prompt = np.concatenate([np.zeros(prompt_width - length, int), rng.integers(3, 30, length)])
        prompt_mask = (np.arange(prompt_width) >= prompt_width - length).astype(int)
        for _ in range(per_group):
            real = int(rng.integers(0, width + 1))
            completion_mask = (np.arange(width) < real).astype(int)
            if real > 2 and rng.random() < 0.3:
                completion_mask[rng.integers(0, real - 1)] = 0  # a hole
            if rng.random() < 0.1:
                completion_mask[:] = 0
            completion = rng.integers(3, 30, width) * completion_mask
            ids.append(np.concatenate([prompt, completion]))
            mask.append(np.concatenate([prompt_mask, completion_mask]))
    order = rng.permutation(len(ids))  # TRL shuffles rows into micro-batches
    return torch.tensor(np.array(ids)[order]), torch.tensor(np.array(mask)[order]), width


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("share", [True, False])
def test_each_query_sees_what_it_sees_in_the_dense_pass_and_each_scored_token_is_scored_once(seed, share):
    ids, mask, width = random_chunk(seed)
    rows, columns = ids.shape
    prompt = columns - width
    layout = build_layout(ids, mask, width, share, flex=seed % 2 == 0)
    keep = dense_mask(layout)[0, 0]
    token = ids.reshape(-1)[layout.source]
    row_of = layout.source // columns
    for q in range(layout.real_tokens):
        r, c = int(row_of[q]), int(layout.column[q])
        assert int(layout.positions[q]) == c and int(token[q]) == int(ids[r, c])  # a dense token, its position
        seen = sorted((int(layout.column[k]), int(token[k])) for k in keep[q].nonzero().flatten().tolist())
        dense = sorted((cc, int(ids[r, cc])) for cc in range(c + 1) if mask[r, cc])
        if seen != dense:  # a query whose dense row has no real key keeps itself (it scores nothing)
            assert not dense and seen == [(c, int(ids[r, c]))] and int(layout.self_only[q]) == 1
    for q in range(layout.real_tokens, layout.length):  # padding to the flex block sees itself alone
        assert keep[q].nonzero().flatten().tolist() == [q] and int(layout.label_source[q]) == -1
    scored = {(int(d) // width, int(d) % width) for d in layout.destination}
    assert len(scored) == len(layout.destination)
    assert scored == {(r, c) for r in range(rows) for c in range(width) if mask[r, prompt + c]}
    for s, d in zip(layout.scored.tolist(), layout.destination.tolist()):  # each predicts its row's next token
        r, c = divmod(d, width)
        assert int(row_of[s]) == r and int(layout.column[s]) == prompt + c - 1
        assert int(ids.reshape(-1)[layout.label_source[s]]) == int(ids[r, prompt + c])


def test_a_shared_prompt_appears_once_and_the_flex_row_is_padded_to_the_block():
    ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0], [4, 4, 6, 1, 2]])
    mask = (ids != 0).long()
    shared = build_layout(ids, mask, 2, share=True)
    alone = build_layout(ids, mask, 2, share=False)
    # shared: prompt (5) once + [6, 7, 8] + [6, 9]; prompt (4, 4) + [6, 1, 2]; alone: each row its own prompt
    assert shared.real_tokens == 1 + 3 + 2 + 2 + 3 and alone.real_tokens == (1 + 3) + (1 + 2) + (2 + 3)
    flex = build_layout(ids, mask, 2, share=True, flex=True)
    assert flex.length == FLEX_BLOCK and flex.real_tokens == shared.real_tokens


def tiny_llama(vocab: int = 40):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return model


def dense_logps(model, ids, mask, width):
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-width] = -100
    return model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -width:]


@pytest.mark.parametrize("seed", range(4))
def test_the_flex_path_gives_the_sdpa_paths_values(seed):
    ids, mask, width = random_chunk(seed)
    model = tiny_llama()
    with torch.no_grad():
        sdpa = score_packed(model, model.config, ids, mask, width, True, True, contextlib.nullcontext)
        flex = score_packed(model, model.config, ids, mask, width, True, True, contextlib.nullcontext, flex=True)
        dense = dense_logps(model, ids, mask, width)
    assert model.config._attn_implementation != "r1kit_packed"  # switched for the call only
    scored = mask[:, -width:].bool()
    torch.testing.assert_close(flex[0], sdpa[0], rtol=1e-4, atol=2e-6)
    torch.testing.assert_close(flex[1], sdpa[1], rtol=1e-4, atol=2e-6)
    torch.testing.assert_close(sdpa[0][scored], dense[scored], rtol=1e-4, atol=2e-6)


def test_under_bf16_autocast_the_packed_pass_equals_the_dense_pass_to_bf16_rounding():
    ids, mask, width = random_chunk(3)
    model = tiny_llama()
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    with autocast():
        dense = dense_logps(model, ids, mask, width)
    dense[mask[:, -width:].bool()].sum().backward()
    dense_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    packed, _ = score_packed(model, model.config, ids, mask, width, True, False, autocast)
    scored = mask[:, -width:].bool()
    packed[scored].sum().backward()
    torch.testing.assert_close(packed[scored].float(), dense[scored].float().detach(), **BF16_TOLERANCE)
    for name, parameter in model.named_parameters():
        scale = dense_grads[name].abs().max().clamp(min=1e-3)
        assert (parameter.grad - dense_grads[name]).abs().max() <= 0.05 * scale, name


@pytest.mark.slow
def test_the_gpu_exactness_script_passes_on_cpu():
    """scripts/gpu_exactness.py is what checks the flex path's gradients on a GPU: it must run, and pass here."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_exactness.py"
    done = subprocess.run([sys.executable, str(script), "--cpu"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "exactness on cpu : PASS" in done.stdout and done.stdout.count("PASS") >= 16
