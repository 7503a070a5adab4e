"""Does a model learn to call the Python tool? A CPU demonstration, R1-style: a cold start, then GRPO with the tool.

    OMP_NUM_THREADS=1 python benchmarks/tools_demo.py [--steps 60] [--seed 42] [--out /tmp/r1kit-tools-demo]

The task is 3-digit by 3-digit multiplication ("What is 482 * 731?"): hard to do in the head for a small model, easy
with the tool. A character-level Llama (~0.9 M parameters, r1kit's char tokenizer with r1kit's compact tool template,
`chat_template: r1kit-tools`) is built here and cold-started with supervised fine-tuning on worked solutions: half call the
tool (`print(482*731)`) and answer with what it printed, half answer at once (with the right product, which the model
cannot compute, so it learns to guess). GRPO then trains it with `tools: [python]` (every call in r1kit's jail) and the
accuracy reward, through `r1kit grpo`. Printed: held-out accuracy (greedy, with the tool loop) and the share of held-out
replies that call the tool, before and after GRPO, and per training step the accuracy of the sampled rollouts and the
share that called the tool (from the run's logs).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def questions(rng: random.Random, count: int) -> list[tuple[str, str, int, int]]:
    rows = []
    for _ in range(count):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        rows.append((f"What is {a} * {b}?", str(a * b), a, b))
    return rows


def tool_schema_owner():
    """A bound `python` tool, rendered into prompts the way TRL renders the environment's tools."""
    from r1kit.training.tools import ToolLimits, python_environment

    class NoProvider:
        def execute(self, programs):
            raise RuntimeError("not for running")

    return python_environment(ToolLimits(), NoProvider())()


def render(tokenizer, messages: list, tools: list, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt)


def call_turn(a: int, b: int) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "python", "arguments": {"code": f"print({a}*{b})"}}}]}


def cold_start_pairs(tokenizer, tools, rows, rng: random.Random) -> list[dict]:
    """(prompt, completion) texts for supervised fine-tuning: a tool call and the answer after the tool's reply, or
    the answer at once; the tool's reply is in the prompt, never a target."""
    pairs = []
    for question, answer, a, b in rows:
        user = [{"role": "user", "content": question}]
        prompt = render(tokenizer, user, tools, True)
        if rng.random() < 0.5:
            call = call_turn(a, b)
            pairs.append({"prompt": prompt, "completion": render(tokenizer, user + [call], tools, False)[len(prompt):]})
            history = user + [call, {"role": "tool", "name": "python", "content": f"{answer}\n"}]
            before = render(tokenizer, history, tools, True)
            pairs.append({"prompt": before, "completion": f"<answer>{answer}</answer><|im_end|>"})  # after the tool
        else:
            pairs.append({"prompt": prompt, "completion": f"<answer>{answer}</answer><|im_end|>"})
    return pairs


def cold_start(folder: Path, rows, seed: int) -> None:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama, set_chat_template

    tokenizer = build_char_tokenizer()
    set_chat_template(tokenizer, "r1kit-tools")
    model = build_tiny_llama(tokenizer, hidden_size=128, layers=4, heads=4, seed=seed, max_positions=512)
    tools = [tool_schema_owner().python]
    data = Dataset.from_list(cold_start_pairs(tokenizer, tools, rows, random.Random(seed)))
    config = SFTConfig(output_dir=str(folder / "sft-run"), num_train_epochs=3, per_device_train_batch_size=32,
                       learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=0.05, logging_steps=50,
                       save_strategy="no", report_to="none", bf16=False, use_cpu=True, seed=seed, max_length=None,
                       completion_only_loss=True, dataset_kwargs={"add_special_tokens": False})
    SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer).train()
    model.save_pretrained(folder / "cold")
    tokenizer.save_pretrained(folder / "cold")


def evaluate(folder: Path, rows) -> dict:
    """Greedy replies with the tool loop (a call runs in the jail, its reply goes back, the model answers)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import parse_response

    from r1kit.loading.modeling import set_chat_template
    from r1kit.training.tools import ToolLimits, python_environment

    tokenizer = AutoTokenizer.from_pretrained(folder)
    set_chat_template(tokenizer, "r1kit-tools")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    interpreter = python_environment(ToolLimits())()
    tools = [interpreter.python]
    right = used = 0
    for question, answer, _, _ in rows:
        history = [{"role": "user", "content": question}]
        reply = {}
        for _ in range(2):  # a call, then the answer
            prompt = tokenizer(render(tokenizer, history, tools, True), add_special_tokens=False, return_tensors="pt")
            with torch.no_grad():
                out = model.generate(**prompt, max_new_tokens=96, do_sample=False,
                                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
            ids = out[0, prompt["input_ids"].shape[1]:].tolist()
            reply = parse_response(tokenizer, ids, prefix=prompt["input_ids"][0].tolist(), tools=tools)
            if not reply.get("tool_calls"):
                break
            used += 1
            history.append(reply)
            for call in reply["tool_calls"]:
                interpreter.reset()
                history.append({"role": "tool", "name": "python",
                                "content": interpreter.python(call["function"]["arguments"].get("code", ""))})
        right += f"<answer>{answer}</answer>" in (reply.get("content") or "")
    return {"accuracy": right / len(rows), "tool_use": used / len(rows)}


def grpo(folder: Path, train: Path, steps: int, seed: int) -> Path:
    out = folder / "grpo"
    recipe = {"model_name_or_path": str(folder / "cold"), "dataset_name": str(train), "dataset_prompt_column": "problem",
              "reward_funcs": ["accuracy"], "tools": ["python"], "chat_template": "r1kit-tools",
              "max_tool_calling_iterations": 1,
              "num_generations": 8, "per_device_train_batch_size": 16, "max_completion_length": 160,
              "temperature": 1.0, "learning_rate": 5e-4, "lr_scheduler_type": "constant", "max_steps": steps,
              "logging_steps": 1, "save_strategy": "no", "report_to": "none", "bf16": False, "seed": seed,
              "output_dir": str(out), "probe_rewards": False, "beta": 0.0, "gradient_checkpointing": False,
              "torch_num_threads": 1, "second_opinion_samples": 0}
    path = folder / "grpo.yaml"
    path.write_text(yaml.safe_dump(recipe))
    done = subprocess.run([sys.executable, "-m", "r1kit.grpo", "--config", str(path)], cwd=ROOT, text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"r1kit grpo failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cold-rows", type=int, default=3000)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("/tmp/r1kit-tools-demo"))
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    rows, heldout, train_rows = questions(rng, opts.cold_rows), questions(rng, opts.heldout), questions(rng, 2000)
    opts.out.mkdir(parents=True, exist_ok=True)
    train = opts.out / "train.jsonl"
    train.write_text("".join(json.dumps({"problem": q, "solution": a}) + "\n" for q, a, _, _ in train_rows))
    cold_start(opts.out, rows, opts.seed)
    before = evaluate(opts.out / "cold", heldout)
    print(f"cold start: held-out accuracy {before['accuracy']:.0%}, tool use {before['tool_use']:.0%}", flush=True)
    out = grpo(opts.out, train, opts.steps, opts.seed)
    after = evaluate(out, heldout)
    print(f"after {opts.steps} GRPO steps: held-out accuracy {after['accuracy']:.0%}, tool use {after['tool_use']:.0%}")
    log = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    for lo in range(0, len(log), 10):
        window = log[lo : lo + 10]
        reward = sum(e["reward"] for e in window) / len(window)
        using = sum(e.get("tools/rollouts_using", 0.0) for e in window) / len(window)
        print(f"  steps {window[0]['step']}-{window[-1]['step']}: sampled accuracy {reward:.2f}, rollouts calling the "
              f"tool {using:.2f}")


if __name__ == "__main__":
    main()
