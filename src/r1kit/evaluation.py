"""`r1kit evaluate`: a model scored on benchmarks, pass@1 and pass@k per benchmark, written to `<benchmark>.json`.

    r1kit evaluate --model PATH --benchmarks math_500,humaneval,my_eval.jsonl [--num-samples K] [--output-dir DIR]
    python -m r1kit.evaluation ...   (what the `evaluate_benchmarks` callback launches per checkpoint)

The benchmarks, their rows and judges are `r1kit.benchmarking.benchmarks`; sampling is `r1kit.benchmarking.generation`; the judges are
`r1kit.benchmarking.judges`. Held-out accuracy during training is `r1kit.benchmarking.heldout`.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

from r1kit import records
from r1kit.benchmarking.benchmarks import NAMES, check_names, get
from r1kit.benchmarking.generation import sample_n
from r1kit.benchmarking.heldout import chat_prompts
from r1kit.console import run_module
from r1kit.errors import ConfigError
from r1kit.loading.modeling import check_source as check_model_source

logger = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(model_path: str, benchmark: str, num_samples: int = 1, max_new_tokens: int = 512,
             temperature: float | None = None, top_p: float = 0.95, system_prompt: str | None = None,
             limit: int | None = None, step: int | None = None) -> dict:
    """Evaluates a model on one benchmark (a built-in name or a local .jsonl); returns {benchmark, model, step,
    metrics, samples}. Rows that cannot be asked or judged are skipped, counted in `unreadable_rows` and named in a
    warning.

    Args:
        num_samples (`int`, defaults to `1`): completions per problem (pass@1 is averaged over them); 1 when greedy.
        max_new_tokens (`int`, defaults to `512`): tokens per completion at most.
        temperature (`float` or `None`, defaults to `None`): the benchmark's own default when None (Open-R1's 0.6;
            greedy for `addition`, as in training).
        top_p (`float`, defaults to `0.95`): nucleus sampling.
        system_prompt (`str` or `None`, defaults to `None`): put before each chat-formatted problem.
        limit (`int` or `None`, defaults to `None`): the first `limit` problems only.
        step (`int` or `None`, defaults to `None`): the checkpoint's training step, recorded for the report.
    """
    from transformers import AutoTokenizer

    bench = get(benchmark)
    items, unreadable = bench.read(limit)  # a hostile row is skipped and counted, never the end of the evaluation
    if temperature is None:
        temperature = bench.temperature
    if temperature == 0.0:
        num_samples = 1
    if bench.continues_prompt:  # HumanEval: the model continues the function
        prompts = [item["problem"] for item in items]
    else:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        prompts = chat_prompts(tokenizer, [item["problem"] for item in items], system_prompt)
    completions = sample_n(model_path, prompts, num_samples, max_new_tokens, temperature, top_p)
    scores = bench.judge(items, completions)
    judged = [[s for s in ss if s is not None] for ss in scores]
    usable = [ss for ss in judged if ss]
    metrics = {
        "pass@1": sum(sum(ss) / len(ss) for ss in usable) / len(usable) if usable else 0.0,
        f"pass@{num_samples}": sum(pass_at_k(len(ss), int(sum(ss)), num_samples) for ss in usable) / len(usable) if usable else 0.0,
        "n": len(items),
        "unjudged": len(items) - len(usable),
        "unreadable_rows": unreadable,
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
        records.write_json(out / f"{name}.json", result, indent=1)
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
    parser.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(NAMES)}, or local .jsonl files")
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
    check_names(benchmarks, "--benchmarks", files_must_exist=True)
    records.check_output_dir(args.output_dir or f"{args.model}/eval", field="--output-dir")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
    results = evaluate_to_files(
        args.model, benchmarks, args.output_dir or f"{args.model}/eval",
        num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, system_prompt=args.system_prompt, limit=args.limit, step=args.step,
    )
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_module("evaluation", add_parser))
