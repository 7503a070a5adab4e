"""r1kit's per-step overhead over a plain TRL script: the same tiny-model GRPO run both ways, interleaved.

    OMP_NUM_THREADS=1 python benchmarks/overhead.py [--repeats 3] [--steps 15]

Both sides train the same model on the same data with the same reward functions (TRL's own `accuracy_reward` and
`think_format_reward`, so the comparison is the pipeline, not the rewards). Runs alternate r1kit / plain to spread
machine noise evenly. Prints the median `step_time` of each side (first two steps of each run dropped) and the ratio.
Goal: ratio <= 1.02.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REWARDS = ["trl.rewards:accuracy_reward", "trl.rewards:think_format_reward"]

PLAIN_TRL = r'''
import sys, yaml
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import accuracy_reward, think_format_reward

recipe = yaml.safe_load(open(sys.argv[1]))
data = load_dataset("json", data_files=recipe["dataset_name"], split="train")
data = data.map(lambda r: {"prompt": [{"role": "user", "content": r["problem"]}]})
tokenizer = AutoTokenizer.from_pretrained(recipe["model_name_or_path"])
model = AutoModelForCausalLM.from_pretrained(recipe["model_name_or_path"], dtype="float32")
keys = ("num_generations", "per_device_train_batch_size", "max_completion_length", "learning_rate", "max_steps",
        "logging_steps", "gradient_checkpointing", "report_to", "output_dir", "seed", "bf16", "lr_scheduler_type",
        "save_strategy")
args = GRPOConfig(**{k: recipe[k] for k in keys})
trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward, think_format_reward], args=args,
                      train_dataset=data, processing_class=tokenizer)
trainer.train()
trainer.save_state()
'''


def step_times(output_dir: Path, skip: int = 2) -> list[float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    times = [e["step_time"] for e in state["log_history"] if "step_time" in e]
    return times[skip:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    opts = parser.parse_args()

    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizer = build_char_tokenizer()
        build_tiny_llama(tokenizer, hidden_size=128, layers=4).save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        data = tmp / "data.jsonl"
        data.write_text("".join(json.dumps({"problem": f"{a}+{b}=", "solution": f"${a + b}$"}) + "\n" for a, b in zip(range(10, 74), range(200, 264))))
        recipe = {
            "model_name_or_path": str(tmp / "model"), "dataset_name": str(data), "dataset_prompt_column": "problem",
            "reward_funcs": REWARDS, "num_generations": 4, "per_device_train_batch_size": 16,
            "max_completion_length": 48, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
            "max_steps": opts.steps, "logging_steps": 1, "gradient_checkpointing": False, "report_to": "none",
            "seed": 0, "bf16": False, "save_strategy": "no",
        }
        (tmp / "plain.py").write_text(PLAIN_TRL)
        sides: dict[str, list[float]] = {"r1kit": [], "plain TRL": []}
        for i in range(opts.repeats):
            for side in sides:
                out = tmp / f"{side.replace(' ', '_')}-{i}"
                path = tmp / f"{out.name}.yaml"
                path.write_text(yaml.safe_dump({**recipe, "output_dir": str(out)}))
                cmd = (
                    [sys.executable, "-m", "r1kit.grpo", "--config", str(path)]
                    if side == "r1kit"
                    else [sys.executable, str(tmp / "plain.py"), str(path)]
                )
                subprocess.run(cmd, env=env, check=True, capture_output=True)
                times = step_times(out)
                sides[side].extend(times)
                print(f"run {i + 1} {side:9s}: median step {statistics.median(times) * 1000:.1f} ms ({len(times)} steps)")
        medians = {side: statistics.median(t) for side, t in sides.items()}
        for side, m in medians.items():
            print(f"{side:9s}: median step time {m * 1000:.1f} ms over {len(sides[side])} steps")
        print(f"ratio r1kit / plain TRL = {medians['r1kit'] / medians['plain TRL']:.3f} (goal <= 1.02)")


if __name__ == "__main__":
    main()
