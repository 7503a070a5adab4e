"""Built-in tasks that r1kit generates itself, so that a run needs no dataset hub.

`dataset_name: r1kit:addition` in a recipe selects multi-digit addition: a `prompt` column asking for the sum in
`<think>…</think><answer>…</answer>` form and a `solution` column holding the sum, which the `accuracy` reward checks
with math-verify. `r1kit:products` asks for the product of a 3-digit and a 3- or 4-digit number (`482*7311=`): too
hard for a small model in its head, one line for the Python tool (the tool-learning demo). Train and test problems
never overlap: every pair (a, b) is assigned to one split by a hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

from r1kit.errors import ConfigError

BUILTIN_PREFIX = "r1kit:"  # names of what r1kit builds itself: r1kit:addition, r1kit:demo, ...
ADDITION_PROMPT = "{a}+{b}="
PRODUCT_PROMPT = "{a}*{b}="
TASKS = ("addition", "products")


def hash_split(key: str, test_fraction: float) -> str:
    """"train" or "test" for a problem, from a hash of its text: the same problem always lands in the same split,
    whatever the seed or the sizes asked for (so train and test never share a problem)."""
    digest = hashlib.sha256(key.encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") / 2**32 < test_fraction else "train"


def addition_problems(
    split: str, size: int, seed: int = 0, low: int = 10, high: int = 999, test_fraction: float = 0.1,
    min_digits: int | None = None, max_digits: int | None = None,
) -> list[dict]:
    """`size` distinct addition problems of `split` ("train" or "test"), reproducible from `seed`.

    Operands are drawn from `low`..`high`, or, when `min_digits`/`max_digits` are given, each problem draws a digit
    count d between them and two d-digit operands (so 1-digit and 6-digit sums are equally common)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{seed}-{split}")
    seen: set[tuple[int, int]] = set()
    rows = []
    limit = 200 * size + 1000
    by_digits = min_digits is not None or max_digits is not None
    while len(rows) < size and limit:
        limit -= 1
        if by_digits:
            digits = rng.randint(min_digits or 1, max_digits or min_digits)
            low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        if (a, b) in seen or hash_split(f"{a}+{b}", test_fraction) != split:
            continue
        seen.add((a, b))
        rows.append({"prompt": ADDITION_PROMPT.format(a=a, b=b), "solution": str(a + b), "a": a, "b": b})
    return rows


def product_problems(split: str, size: int, seed: int = 0, test_fraction: float = 0.1) -> list[dict]:
    """`size` distinct products of `split`: a 3-digit `a` times a 3- or 4-digit `b` (half each), from `seed`."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"products-{seed}-{split}")
    seen: set[tuple[int, int]] = set()
    rows = []
    for _ in range(200 * size + 1000):
        if len(rows) == size:
            break
        a, b = rng.randint(100, 999), rng.randint(100, 999) if rng.random() < 0.5 else rng.randint(1000, 9999)
        if (a, b) in seen or hash_split(f"{a}*{b}", test_fraction) != split:
            continue
        seen.add((a, b))
        rows.append({"prompt": PRODUCT_PROMPT.format(a=a, b=b), "solution": str(a * b), "a": a, "b": b})
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


ADDITION_OPTIONS = ("train_size", "test_size", "seed", "min_digits", "max_digits")


def check_addition_options(options: dict) -> dict:
    """`dataset_options` of `r1kit:addition`, checked: known names, positive integers, min_digits <= max_digits."""
    unknown = sorted(set(options) - set(ADDITION_OPTIONS))
    if unknown:
        raise ConfigError(f"dataset_options: r1kit:addition has no option {', '.join(unknown)}; options: "
                          f"{', '.join(ADDITION_OPTIONS)}")
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int) or (value < 0 if key == "seed" else value < 1):
            raise ConfigError(f"dataset_options.{key} must be a {'non-negative' if key == 'seed' else 'positive'} "
                              f"integer, got {value!r}")
    if options.get("max_digits", 0) > 9 or options.get("min_digits", 0) > 9:
        raise ConfigError("dataset_options: r1kit:addition goes up to 9 digits")
    if options.get("min_digits", 1) > options.get("max_digits", 9):
        raise ConfigError(f"dataset_options: min_digits {options['min_digits']} > max_digits {options['max_digits']}")
    return options


def load_task(name: str, train_size: int = 2000, test_size: int = 200, seed: int = 0, **options):
    """The built-in task `name` as a `DatasetDict` with `train` and `test` splits; `options` are its
    `dataset_options` (for addition: `min_digits`, `max_digits`)."""
    from datasets import Dataset, DatasetDict

    if name not in TASKS:
        raise ValueError(f"unknown built-in task 'r1kit:{name}'; available: {', '.join('r1kit:' + t for t in TASKS)}")
    if name == "products":
        if options:
            raise ConfigError(f"dataset_options: r1kit:products has no option {', '.join(sorted(options))}; options: "
                              "train_size, test_size, seed")
        check_addition_options({"train_size": train_size, "test_size": test_size, "seed": seed})
        return DatasetDict({"train": Dataset.from_list(product_problems("train", train_size, seed)),
                            "test": Dataset.from_list(product_problems("test", test_size, seed))})
    check_addition_options({"train_size": train_size, "test_size": test_size, "seed": seed, **options})
    return DatasetDict(
        {
            "train": Dataset.from_list(addition_problems("train", train_size, seed, **options)),
            "test": Dataset.from_list(addition_problems("test", test_size, seed, **options)),
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


if __name__ == "__main__":  # python -m r1kit.sources.tasks addition --split train --size 20000 --output data/addition.jsonl

    parser = argparse.ArgumentParser(prog="python -m r1kit.sources.tasks", description="Export a built-in task to .jsonl.")
    parser.add_argument("task", choices=("addition",))
    parser.add_argument("--split", choices=("train", "test"), default="train")
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True)
    options = parser.parse_args()
    count = export_addition(options.output, options.split, options.size, options.seed)
    print(f"wrote {count} {options.split} problems to {options.output}")
