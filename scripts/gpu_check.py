"""GPU check: the 1xH200 table. bf16 GRPO on one GPU, r1kit against a plain TRL script, with nothing downloaded.

    python scripts/gpu_check.py [--seconds 330] [--out /tmp/r1kit-gpu-check]     # on the GPU machine (gpu_check.sh)
    python scripts/gpu_check.py --cpu-smoke                                       # the same code paths, tiny, on CPU

Rows, most important first; a row that cannot finish before `--seconds` is skipped and named:
- the demo model r1kit ships (0.6 M parameters) and a random ~100 M Llama: 64 completions of up to 128 tokens, G 8
  (the goals: r1kit / TRL step time <= 1.0);
- random models with Qwen2.5-0.5B's and Qwen2.5-1.5B's layer shapes (Qwen2 blocks; the demo tokenizer's small
  vocabulary, so the LM head is far cheaper than the real one's 151k rows), completions of exactly 256 and 1024 tokens
  (`min_new_tokens`: both trainers do the same work), G 8 and 16, one prompt per step behind Open-R1's system prompt
  (worth sharing), micro-batches of 2 (the goal: <= 0.8 for 0.5B with 1024 tokens).

Each (row, runner) trains in a process of its own (`benchmarks/step_profile.py`: the runners and the per-phase
profile), the first steps dropped (r1kit measures its training passes there). Printed per row: step time, generated
tokens/s, the shares of generation, the training pass and the rewards, steps per hour, peak GPU memory, r1kit / TRL,
and the training pass r1kit chose.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import step_profile  # noqa: E402  (benchmarks/ is not a package)

QWEN_SHAPES = {  # hidden, intermediate, layers, heads, key/value heads (the models' config.json)
    "Qwen2.5-0.5B": (896, 4864, 24, 14, 2),
    "Qwen2.5-1.5B": (1536, 8960, 28, 12, 2),
}


def build_qwen_shape(folder: Path, shape: tuple) -> int:
    hidden, intermediate, layers, heads, kv_heads = shape
    return step_profile.build_random_model(folder, "qwen2", hidden_size=hidden, intermediate_size=intermediate,
                                           num_hidden_layers=layers, num_attention_heads=heads,
                                           num_key_value_heads=kv_heads)


def rows(out: Path, smoke: bool) -> list[tuple[str, str, dict, int]]:
    """(label, model path, settings, warm-up steps), most important first; models built as needed."""
    from r1kit.loading.modeling import DEMO_MODEL

    if smoke:
        llama = out / "llama-smoke"
        step_profile.build_random_llama(llama, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=4)
        base = dict(completions=8, generations=4, length=8, bf16=False, micro_batch=4)
        return [("demo, smoke", str(DEMO_MODEL), base, 1), ("tiny Llama, smoke", str(llama), base, 1)]
    table = []
    llama = out / "llama-100m"
    params = step_profile.build_random_llama(llama, hidden=1024, intermediate=2816, layers=8, heads=16, kv_heads=16)
    short = dict(completions=64, generations=8, length=128, bf16=True, micro_batch=64)
    table.append(("demo (0.6 M), 64 x 128 tokens, G 8", str(DEMO_MODEL), short, 3))
    table.append((f"random Llama ({params / 1e6:.0f} M), 64 x 128 tokens, G 8", str(llama), short, 3))
    for name in QWEN_SHAPES:
        folder = out / name  # built when its first row runs
        for length, generations in ((256, 8), (1024, 8), (256, 16), (1024, 16)):
            settings = dict(completions=generations, generations=generations, length=length, bf16=True, micro_batch=2)
            table.append((f"{name} shape, G {generations}, {length} tokens", str(folder), settings, 3))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=330, help="stop starting rows after this long")
    parser.add_argument("--steps", type=int, default=5, help="steps per run; the warm-up ones are dropped")
    parser.add_argument("--out", default="/tmp/r1kit-gpu-check")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: checks the script, not a GPU")
    opts = parser.parse_args()

    import torch

    if not opts.cpu_smoke:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run on the GPU machine, or pass --cpu-smoke", file=sys.stderr)
            return 2
        import transformers
        import trl

        print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, transformers "
              f"{transformers.__version__}, trl {trl.__version__}, {time.strftime('%Y-%m-%d')}")
    start = time.monotonic()
    out = Path(opts.out)
    table = rows(out, opts.cpu_smoke)
    print(step_profile.TABLE_HEAD, flush=True)
    skipped, failed = [], []
    for index, (label, model, settings, warmup) in enumerate(table):
        if not Path(model).exists():
            build_qwen_shape(Path(model), QWEN_SHAPES[Path(model).name])
        left = opts.seconds - (time.monotonic() - start)
        if left < 30:
            skipped.append(label)
            continue
        results = {}
        for runner in step_profile.RUNNERS:
            fields = step_profile.settings(out / f"row{index}-{runner}", opts.steps, **settings)
            try:
                results[runner] = step_profile.in_subprocess(runner, model, fields, warmup,
                                                             timeout=max(30.0, opts.seconds - (time.monotonic() - start)))
            except Exception as e:  # noqa: BLE001 - a timeout: name the row, go on
                print(f"{label} / {runner}: {type(e).__name__}", file=sys.stderr)
                results[runner] = None
            if results[runner] is None:
                break
        if any(r is None for r in results.values()) or len(results) < 2:
            failed.append(label)
            continue
        step_profile.print_row(label, results["r1kit"], results["trl"])
        if results["r1kit"]["passes"]:
            print(f"|   r1kit's training pass: {'; '.join(f'{c}: {p}' for c, p in results['r1kit']['passes'])} |")
    if skipped:
        print(f"skipped (over {opts.seconds:.0f} s): {'; '.join(skipped)}")
    if failed:
        print(f"failed: {'; '.join(failed)}")
    print(f"table: {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
