"""The exact training passes on a GPU: values and gradients of the bucketed, packed (SDPA mask) and packed
FlexAttention passes against TRL's dense pass, in fp32 and under bf16 autocast, for Llama, Qwen2 and GPT-2.

    python scripts/gpu_exactness.py            # on the GPU machine (gpu_check.sh runs it)
    python scripts/gpu_exactness.py --cpu      # the same, without the flex path's gradients (no CPU backward)

The CI runs the same comparisons on CPU through the SDPA oracle (tests/test_trainpass.py, tests/test_packing.py);
compiled FlexAttention's backward exists only on the GPU, so this is where it is checked. Exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}  # max |difference| / max(1, |dense|), values and gradients


def tiny(kind: str, vocab: int = 50):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))  # no dropout: exact
    else:
        common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        model = Qwen2ForCausalLM(Qwen2Config(**common)) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(**common))
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return model


def chunk(device, vocab: int = 50):
    """Two prompt groups of three completions each; left-padded prompts, completions of spread lengths."""
    generator = torch.Generator().manual_seed(1)
    prompt_lengths, lengths, width, prompt_width = [7, 7, 7, 20, 20, 20], [3, 60, 17, 1, 40, 9], 64, 20
    prompt_mask = torch.tensor([[0] * (prompt_width - n) + [1] * n for n in prompt_lengths])
    completion_mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    prompts = torch.randint(3, vocab, (2, prompt_width), generator=generator).repeat_interleave(3, dim=0)
    completions = torch.randint(3, vocab, (6, width), generator=generator)
    ids = torch.cat([prompts * prompt_mask, completions * completion_mask], dim=1).to(device)
    return ids, torch.cat([prompt_mask, completion_mask], dim=1).to(device), width


def passes(model, ids, mask, width, dtype):
    from r1kit.training.packing import score_packed
    from r1kit.training.passchoice import FLEX_MODEL_TYPES
    from r1kit.training.trainpass import PassPlan, score_chunk

    autocast = (lambda: torch.autocast(ids.device.type, dtype=dtype)) if dtype != torch.float32 else contextlib.nullcontext
    by_column = True
    yield "dense", lambda: score_chunk(model, PassPlan(False, False, by_column), ids, mask, width, True, autocast)
    yield "bucketed", lambda: score_chunk(model, PassPlan(True, True, by_column), ids, mask, width, True, autocast)
    yield "packed", lambda: score_packed(model, model.config, ids, mask, width, True, True, autocast)
    if model.config.model_type in FLEX_MODEL_TYPES:  # r1kit offers the flex path for these only
        yield "packed_flex", lambda: score_packed(model, model.config, ids, mask, width, True, True, autocast,
                                                  flex=True)


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1)).item()


def check(kind: str, device, dtype, flex_grads: bool) -> bool:
    model = tiny(kind).to(device)
    ids, mask, width = chunk(device)
    scored = mask[:, -width:].bool()
    results = {}
    for name, run in passes(model, ids, mask, width, dtype):
        model.zero_grad()
        if name == "packed_flex" and not flex_grads:
            with torch.no_grad():
                logps, entropy = run()
            results[name] = (logps, entropy, None)
            continue
        logps, entropy = run()
        (logps[scored].sum() + 0.1 * entropy[scored].sum()).backward()
        results[name] = (logps.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    dense = results.pop("dense")
    ok = True
    for name, (logps, entropy, grads) in results.items():
        worst = max(gap(logps[scored], dense[0][scored]), gap(entropy[scored], dense[1][scored]))
        if grads is not None:
            worst = max([worst] + [gap(grads[n], dense[2][n]) for n in grads])
        passed = worst <= TOLERANCE[dtype]
        ok &= passed
        print(f"  {kind:6s} {str(dtype):15s} {name:12s} max relative gap {worst:.2e} "
              f"{'(values only)' if grads is None else ''} {'PASS' if passed else 'FAIL'}", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true")
    opts = parser.parse_args()
    device = torch.device("cpu" if opts.cpu else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU (pass --cpu)", file=sys.stderr)
        return 2
    ok = True
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("llama", "qwen2", "gpt2"):
            try:
                ok &= check(kind, device, dtype, flex_grads=device.type == "cuda")
            except Exception as e:  # noqa: BLE001 - report every model, then fail
                print(f"  {kind} {dtype}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                ok = False
    print("exactness on", device, ":", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
