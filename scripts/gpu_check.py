"""GPU check: bf16 GRPO on one GPU, r1kit against a plain TRL script, with nothing downloaded.

    python scripts/gpu_check.py [--steps 8] [--out /tmp/r1kit-gpu-check]      # on the GPU machine (gpu_check.sh)
    python scripts/gpu_check.py --cpu-smoke                                    # the same code paths, tiny, on CPU

Two models that need no download: the demo model r1kit ships (0.6 M parameters) and a randomly initialised Llama of
about 100 M parameters built from a config (it rarely emits EOS, so its completions run to full length: fixed-size
work). Each (model, runner) pair trains in its own process, one after the other on the same GPU: `r1kit` is
`r1kit.grpo.pipeline` on a recipe, `trl` is a plain GRPOTrainer script with Open-R1-style rewards (math-verify in a
sequential loop, a regex format check), same batch, lengths and settings. Printed per pair: median step time,
generated tokens/s (completion tokens per step / step time) and peak GPU memory; then r1kit / TRL ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

GPU = {"completions": 64, "generations": 8, "max_completion_length": 128, "bf16": True}
CPU_SMOKE = {"completions": 8, "generations": 4, "max_completion_length": 8, "bf16": False}


def build_llama(folder: Path, smoke: bool) -> int:
    """A random Llama (about 100 M parameters; tiny for the CPU smoke run) with the demo model's tokenizer."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    from r1kit.modeling import DEMO_MODEL

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4) if smoke else dict(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16
    )
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=size["num_attention_heads"],
                         max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **size)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def settings(shape: dict, steps: int, out: Path) -> dict:
    """The GRPOConfig fields both runners use."""
    return {
        "output_dir": str(out), "max_steps": steps, "per_device_train_batch_size": shape["completions"],
        "num_generations": shape["generations"], "max_completion_length": shape["max_completion_length"],
        "bf16": shape["bf16"], "learning_rate": 1e-6, "beta": 0.0, "temperature": 1.0, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "gradient_checkpointing": False, "seed": 42,
        "use_cpu": not shape["bf16"],
    }


def run_r1kit(model: str, fields: dict) -> list[dict]:
    import yaml

    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline

    recipe = {"model_name_or_path": model, "dtype": "bfloat16" if fields["bf16"] else "float32",
              "dataset_name": "r1kit:addition", "dataset_prompt_column": "prompt", "reward_funcs": ["accuracy", "format"],
              **fields}
    path = Path(fields["output_dir"]) / "recipe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe))
    pipeline(*parse_args(["--config", str(path)]))
    return json.loads((Path(fields["output_dir"]) / "trainer_state.json").read_text())["log_history"]


def run_trl(model: str, fields: dict) -> list[dict]:
    """What a user writes with TRL alone."""
    import random
    import re

    from datasets import Dataset
    from math_verify import parse, verify
    from trl import GRPOConfig, GRPOTrainer

    rng = random.Random(0)
    pairs = [(rng.randint(10, 999), rng.randint(10, 999)) for _ in range(2000)]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "solution": str(a + b)}
                                 for a, b in pairs])

    def accuracy_reward(completions, solution, **kwargs):
        return [float(verify(parse(gold), parse(c[0]["content"]))) for c, gold in zip(completions, solution)]

    def format_reward(completions, **kwargs):
        pattern = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL)
        return [float(bool(pattern.match(c[0]["content"]))) for c in completions]

    config = GRPOConfig(model_init_kwargs={"dtype": "bfloat16" if fields["bf16"] else "float32"}, **fields)
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward, format_reward], args=config, train_dataset=dataset)
    trainer.train()
    return trainer.state.log_history


def one_run(runner: str, model: str, out: str, steps: int, smoke: bool) -> None:
    """In a process of its own: train, then print one JSON line of figures."""
    import resource

    import torch

    shape = CPU_SMOKE if smoke else GPU
    fields = settings(shape, steps, Path(out))
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    log = [e for e in (run_r1kit if runner == "r1kit" else run_trl)(model, fields) if "step_time" in e]
    timed = log[2:] if len(log) > 3 else log  # the first steps compile kernels and warm caches
    times = [e["step_time"] for e in timed]
    tokens = [e["completions/mean_length"] * shape["completions"] / e["step_time"] for e in timed]
    peak = (torch.cuda.max_memory_allocated() if torch.cuda.is_available()
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # CPU smoke: peak RSS
    print("RESULT " + json.dumps({"step_time": statistics.median(times), "tokens_per_s": statistics.median(tokens),
                                  "peak_gib": peak / 2**30, "steps_timed": len(times)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default="/tmp/r1kit-gpu-check")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: checks the script, not a GPU")
    parser.add_argument("--one", nargs=3, metavar=("RUNNER", "MODEL", "OUT"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one:
        one_run(*opts.one, opts.steps, opts.cpu_smoke)
        return 0

    import torch

    if not opts.cpu_smoke:
        if not torch.cuda.is_available():
            print("no CUDA GPU: run on the GPU machine, or pass --cpu-smoke", file=sys.stderr)
            return 2
        print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    from r1kit.modeling import DEMO_MODEL

    out = Path(opts.out)
    llama = out / "llama-100m"
    params = build_llama(llama, opts.cpu_smoke)
    models = {"demo (0.6 M)": str(DEMO_MODEL), f"random Llama ({params / 1e6:.0f} M)": str(llama)}
    results: dict[tuple[str, str], dict] = {}
    for label, model in models.items():
        for runner in ("r1kit", "trl"):
            run_out = out / f"{runner}-{Path(model).name}"
            command = [sys.executable, __file__, "--one", runner, model, str(run_out), "--steps", str(opts.steps)]
            start = time.monotonic()
            done = subprocess.run(command + (["--cpu-smoke"] if opts.cpu_smoke else []), capture_output=True, text=True)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if done.returncode != 0 or line is None:
                print(f"{label} / {runner}: FAILED (exit {done.returncode})\n{done.stderr[-3000:]}", file=sys.stderr)
                return 1
            results[label, runner] = json.loads(line[len("RESULT "):])
            print(f"{label:22s} {runner:5s}: {results[label, runner]['step_time']:.3f} s/step, "
                  f"{results[label, runner]['tokens_per_s']:,.0f} generated tokens/s, "
                  f"peak {'GPU memory' if not opts.cpu_smoke else 'RSS'} {results[label, runner]['peak_gib']:.2f} GiB "
                  f"({time.monotonic() - start:.0f} s wall)", flush=True)
    for label in models:
        ours, plain = results[label, "r1kit"], results[label, "trl"]
        print(f"{label}: r1kit / TRL step time {ours['step_time'] / plain['step_time']:.2f}x, "
              f"tokens/s {ours['tokens_per_s'] / plain['tokens_per_s']:.2f}x, "
              f"peak memory {ours['peak_gib'] / plain['peak_gib']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
