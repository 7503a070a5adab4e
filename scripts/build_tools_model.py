"""Builds `r1kit:demo-tools`, the tiny tool-calling model r1kit ships (src/r1kit/assets/tools_model), so that
`recipes/demo/grpo_tools.yaml` shows the tool loop offline on CPU: its rollouts call the jailed Python interpreter.

    OMP_NUM_THREADS=2 python scripts/build_tools_model.py [--out src/r1kit/assets/tools_model]    # ~7 min on 2 cores

A character-level Llama (r1kit's char tokenizer, 128 wide, 3 layers, 0.46 M parameters) with r1kit's compact tool
template (`chat_template: r1kit-tools`) is fitted (TRL's SFTTrainer, loss on the completions only) to two turns per
`r1kit:addition` problem: to the question `a+b=` it calls the tool,
`<tool_call>{"name": "python", "arguments": {"code": "print(a+b)"}}</tool_call>`, and once the tool has answered it
answers `<answer>...</answer>` with what the tool printed. It never learns to add: it copies the operands into the
call and the tool's output into the answer. The held-out problems are then run greedily through the same loop, each
call in r1kit's jail, and the share of replies that call the tool and the accuracy go to `build_summary.json` with
the settings.

`--task products --tool-share 0.3` builds `r1kit:tool-learner` instead (src/r1kit/assets/tool_learner), the cold start
of the tool-learning demo (recipes/demo/grpo_tool_learning.yaml): to a product `482*7311=` it calls the tool in a share
of its fitted replies and answers at once in the rest (with the true product, which it cannot compute: it learns to
guess). So it can call the tool and copy, but seldom chooses to; GRPO with the tool has to teach it that calling pays.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
           "chat_template.jinja")


OPERATORS = {"addition": "+", "products": "*"}


def call_turn(a: int, b: int, operator: str = "+") -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "python", "arguments": {"code": f"print({a}{operator}{b})"}}}]}


def pairs(tokenizer, tools: list, problems: list[dict], operator: str = "+", tool_share: float = 1.0,
          seed: int = 0) -> list[dict]:
    """Prompt and completion texts (the tool's reply is in a prompt, never a target). Per problem:

    - the first turn: with probability `tool_share` the call, else the answer at once (what the model chooses);
    - with `tool_share` below 1, the call again from just after its opening `print(` (copying the operands, with no
      say in whether to call);
    - the answer after the tool's reply (copying what it printed).

    So the skills a call needs are fitted on every problem, and the choice to call on a share of them."""
    import random

    rng, rows = random.Random(seed), []
    for p in problems:
        user = [{"role": "user", "content": p["prompt"]}]
        prompt = tokenizer.apply_chat_template(user, tools=tools, tokenize=False, add_generation_prompt=True)
        called = user + [call_turn(p["a"], p["b"], operator)]
        call = tokenizer.apply_chat_template(called, tools=tools, tokenize=False)[len(prompt):]
        answer = f"<answer>{p['solution']}</answer><|im_end|>"
        if rng.random() < tool_share:
            rows.append({"prompt": prompt, "completion": call})
        else:
            rows.append({"prompt": prompt, "completion": answer})
        if tool_share < 1:
            opened = call.index("print(") + len("print(")
            rows.append({"prompt": prompt + call[:opened], "completion": call[opened:]})
        answered = tokenizer.apply_chat_template(called + [{"role": "tool", "name": "python", "content": f"{p['solution']}\n"}],
                                                 tools=tools, tokenize=False, add_generation_prompt=True)
        rows.append({"prompt": answered, "completion": answer})
    return rows


def fit(folder: Path, opts) -> tuple:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama, set_chat_template
    from r1kit.training.tools import ToolLimits, python_environment

    tokenizer = build_char_tokenizer()
    set_chat_template(tokenizer, "r1kit-tools")
    model = build_tiny_llama(tokenizer, hidden_size=opts.hidden, layers=opts.layers, heads=4, seed=opts.seed,
                             max_positions=512)
    tools = [python_environment(ToolLimits())().python]  # rendered by name only: nothing runs while fitting
    # (products: problems of another seed than r1kit:products' default train split, which GRPO then trains on)
    seed = opts.seed if opts.task == "addition" else 1000 + opts.seed
    data = Dataset.from_list(pairs(tokenizer, tools, problems(opts.task, "train", opts.problems, seed),
                                   OPERATORS[opts.task], opts.tool_share, opts.seed))
    config = SFTConfig(output_dir=str(folder / "run"), max_steps=opts.steps, per_device_train_batch_size=32,
                       learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=0.05, logging_steps=100,
                       save_strategy="no", report_to="none", bf16=False, use_cpu=True, seed=opts.seed, max_length=None,
                       completion_only_loss=True, dataset_kwargs={"add_special_tokens": False}, disable_tqdm=True)
    started = time.monotonic()
    SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer).train()
    return model, tokenizer, time.monotonic() - started


def through_the_loop(model, tokenizer, problems: list[dict]) -> dict:
    """Greedy replies with the tool loop (r1kit's held-out loop: a call runs in the jail, its output goes back, the
    model answers): the share that called the tool, and the accuracy."""
    from r1kit.benchmarking.heldout import ToolLoop, greedy_accuracy
    from r1kit.training.tools import ToolLimits, prefetch, python_environment

    model.eval()
    environment = python_environment(ToolLimits())
    accuracy, details = greedy_accuracy(model, tokenizer, [p["prompt"] for p in problems],
                                        [p["solution"] for p in problems], max_new_tokens=96,
                                        tool_loop=ToolLoop([], environment, 1, prepare=lambda replies, environments:
                                                           prefetch(environment, replies, environments)))
    return {"tool_use": sum(d["tool_calls"] > 0 for d in details) / len(details), "accuracy": accuracy}


def problems(task: str, split: str, size: int, seed: int) -> list[dict]:
    from r1kit.sources.tasks import addition_problems, product_problems

    return (addition_problems if task == "addition" else product_problems)(split, size, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=tuple(OPERATORS), default="addition")
    parser.add_argument("--tool-share", type=float, default=1.0, help="share of fitted replies that call the tool")
    parser.add_argument("--out", type=Path, default=None, help="default: src/r1kit/assets/tools_model (addition), "
                        "src/r1kit/assets/tool_learner (products)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--problems", type=int, default=6000)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    opts.out = opts.out or ROOT / "src" / "r1kit" / "assets" / ("tools_model" if opts.task == "addition" else "tool_learner")

    with tempfile.TemporaryDirectory(prefix="r1kit-tools-model-") as tmp:
        folder = Path(tmp)
        model, tokenizer, seconds = fit(folder, opts)
        measured = through_the_loop(model, tokenizer, problems(opts.task, "test", opts.heldout, opts.seed))
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        opts.out.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED:
            if (folder / "model" / name).exists():
                shutil.copyfile(folder / "model" / name, opts.out / name)
    summary = {"built_by": "scripts/build_tools_model.py", "task": opts.task, "tool_share": opts.tool_share, "hidden": opts.hidden, "layers": opts.layers,
               "problems": opts.problems, "steps": opts.steps, "seed": opts.seed, "train_seconds": round(seconds, 1),
               "parameters": sum(p.numel() for p in model.parameters()),
               f"heldout_{opts.heldout}_greedy": measured}
    (opts.out / "build_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
