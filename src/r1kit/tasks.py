"""Built-in tasks that r1kit generates itself, so that a run needs no dataset hub.

`dataset_name: r1kit:addition` in a recipe selects multi-digit addition: a `prompt` column asking for the sum in
`<think>…</think><answer>…</answer>` form and a `solution` column holding the sum, which the `accuracy` reward checks
with math-verify. Train and test problems never overlap: every pair (a, b) is assigned to one split by a hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

BUILTIN_PREFIX = "r1kit:"  # names of what r1kit builds itself: r1kit:addition, r1kit:demo, ...
ADDITION_PROMPT = "{a}+{b}="
TASKS = ("addition",)


def _split_of(a: int, b: int, test_fraction: float) -> str:
    digest = hashlib.sha256(f"{a}+{b}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") / 2**32 < test_fraction else "train"


def addition_problems(
    split: str, size: int, seed: int = 0, low: int = 10, high: int = 999, test_fraction: float = 0.1
) -> list[dict]:
    """`size` distinct addition problems of `split` ("train" or "test"), reproducible from `seed`."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{seed}-{split}")
    seen: set[tuple[int, int]] = set()
    rows = []
    limit = 200 * size + 1000
    while len(rows) < size and limit:
        limit -= 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        if (a, b) in seen or _split_of(a, b, test_fraction) != split:
            continue
        seen.add((a, b))
        rows.append({"prompt": ADDITION_PROMPT.format(a=a, b=b), "solution": str(a + b), "a": a, "b": b})
    return rows


def worked_solution(a: int, b: int) -> str:
    """The R1-style completion for a+b: digit-by-digit addition from the right, with carries, then the answer.

    >>> worked_solution(347, 178)
    '<think>7+8+0=15,4+7+1=12,3+1+1=5</think><answer>525</answer>'
    """
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, carry = [], 0
    for i in range(max(len(xs), len(ys))):
        x, y = int(xs[i]) if i < len(xs) else 0, int(ys[i]) if i < len(ys) else 0
        total = x + y + carry
        steps.append(f"{x}+{y}+{carry}={total}")
        carry = total // 10
    return f"<think>{','.join(steps)}</think><answer>{a + b}</answer>"


def sft_rows(split: str, size: int, seed: int = 0) -> list[dict]:
    """Prompt-completion conversations with worked solutions, for the cold-start SFT stage."""
    return [
        {
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "completion": [{"role": "assistant", "content": worked_solution(row["a"], row["b"])}],
        }
        for row in addition_problems(split, size, seed)
    ]


def load_task(name: str, train_size: int = 2000, test_size: int = 200, seed: int = 0):
    """The built-in task `name` as a `DatasetDict` with `train` and `test` splits."""
    from datasets import Dataset, DatasetDict

    if name != "addition":
        raise ValueError(f"unknown built-in task 'r1kit:{name}'; available: {', '.join('r1kit:' + t for t in TASKS)}")
    return DatasetDict(
        {
            "train": Dataset.from_list(addition_problems("train", train_size, seed)),
            "test": Dataset.from_list(addition_problems("test", test_size, seed)),
        }
    )


def export_addition(path: str, split: str, size: int, seed: int = 0) -> int:
    """Writes `size` problems of `split` to a .jsonl: `problem`, `solution`, and `messages` (the worked solution as
    the assistant's turn), the columns `r1kit decontaminate` and `r1kit sft` read. Returns the number of rows."""

    rows = addition_problems(split, size, seed)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            messages = [{"role": "user", "content": row["prompt"]},
                        {"role": "assistant", "content": worked_solution(row["a"], row["b"])}]
            f.write(json.dumps({"problem": row["prompt"], "solution": row["solution"], "messages": messages}) + "\n")
    return len(rows)


if __name__ == "__main__":  # python -m r1kit.tasks addition --split train --size 20000 --output data/addition.jsonl

    parser = argparse.ArgumentParser(prog="python -m r1kit.tasks", description="Export a built-in task to .jsonl.")
    parser.add_argument("task", choices=TASKS)
    parser.add_argument("--split", choices=("train", "test"), default="train")
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True)
    options = parser.parse_args()
    count = export_addition(options.output, options.split, options.size, options.seed)
    print(f"wrote {count} {options.split} problems to {options.output}")
