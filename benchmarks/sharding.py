"""What each rank holds and how long a step takes under DDP, FSDP2, ZeRO-3 and ZeRO-2, on 2 CPU ranks, for a random
Llama of about 53 M parameters (10 layers, 768 wide; the char tokenizer's small vocabulary), launched as users launch
(`accelerate launch --config_file recipes/accelerate_configs/<config>.yaml --num_processes 2`), one after the other.

    OMP_NUM_THREADS=1 python benchmarks/sharding.py [--steps 4] [--configs ddp fsdp zero3 zero2]

Printed per configuration: parameter and optimizer-state bytes per rank (OUTPUT_DIR/sharding.json, after the first
optimizer step) and the median step time of the steps after the first (TRL's `step_time`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def build(folder: Path) -> int:
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=768, layers=10, heads=12)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def run(config: str, model: Path, data: Path, out: Path, steps: int) -> dict:
    recipe = {"model_name_or_path": str(model), "dataset_name": str(data), "dataset_prompt_column": "problem",
              "reward_funcs": ["accuracy"], "num_generations": 4, "per_device_train_batch_size": 4,
              "max_completion_length": 16, "learning_rate": 1e-5, "max_steps": steps, "logging_steps": 1,
              "save_strategy": "no", "report_to": "none", "output_dir": str(out), "bf16": False, "seed": 0,
              "probe_rewards": False, "gradient_checkpointing": False}
    path = out.parent / f"{config}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    accelerate = shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    done = subprocess.run([accelerate, "launch", "--config_file", str(ROOT / "recipes" / "accelerate_configs" /
                                                                       f"{config}.yaml"),
                           "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", "0",
                           "-m", "r1kit.grpo", "--config", str(path)],
                          cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{config}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}")
    log = json.loads((out / "trainer_state.json").read_text())["log_history"]
    times = [e["step_time"] for e in log if "step_time" in e][1:]
    return {"sharding": json.loads((out / "sharding.json").read_text()), "step_time": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--configs", nargs="+", default=["ddp", "fsdp", "zero3", "zero2"])
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        params = build(folder / "model")
        data = folder / "math.jsonl"
        data.write_text("".join(json.dumps({"problem": f"{a} + {b} =", "solution": str(a + b)}) + "\n"
                                for a in range(20) for b in range(20)))
        print(f"random Llama, {params / 1e6:.1f} M parameters, 2 CPU ranks")
        print("| launch | parameters per rank | optimizer state per rank | step time |\n|---|---:|---:|---:|")
        for config in opts.configs:
            result = run(config, folder / "model", data, folder / f"out-{config}", opts.steps)
            ranks = result["sharding"]["ranks"]
            mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
            print(f"| {result['sharding']['strategy']} | {' / '.join(mib(r['parameter_bytes']) for r in ranks)} | "
                  f"{' / '.join(mib(r['optimizer_state_bytes']) for r in ranks)} | {result['step_time']:.2f} s |",
                  flush=True)


if __name__ == "__main__":
    main()
