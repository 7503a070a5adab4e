"""Offline pass-rate filtering (Open-R1's `scripts/pass_rate_filtering/compute_pass_rate.py`): keep the prompts a model
solves sometimes, not always or never, before spending GRPO on them.

    r1kit pass-rate --config FILTER.yaml [--dry-run]

A filtering recipe is a GRPO recipe (model, dataset, prompt column, system prompt, `reward_funcs` and
`reward_weights`, `num_generations`, `temperature`, `top_p`, `max_completion_length`) plus `pass_rate_min`,
`pass_rate_max`, `dataset_split`, `dataset_start_index`, `dataset_end_index` and `output_dataset_name`; Open-R1's
filtering configs parse unchanged (their early `low_reward_threshold` / `high_reward_threshold` are mapped).

For every prompt it samples `num_generations` completions (vLLM when installed with a GPU, transformers otherwise),
scores them with the recipe's rewards (weighted sum; a reward's None is left out of the mean), and records the mean
as the prompt's `pass_rate`. Output in `output_dir`:

    generations.jsonl     one line per finished prompt (index, completions, rewards, pass_rate), appended as each
                          batch finishes: a crash loses no finished prompt, and a rerun continues from there
    scored/               the dataset with its `pass_rate` column (`save_to_disk`, plus scored.jsonl)
    filtered/             the rows with pass_rate_min < pass_rate < pass_rate_max (plus filtered.jsonl)

With `output_dataset_name`, the filtered rows are also pushed to the Hub.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import sys
from pathlib import Path

from datasets import Dataset
from tqdm.auto import tqdm

from r1kit import records
from r1kit.benchmarking.generation import Sampler, load_sampler
from r1kit.config.recipe import run_recipe_command
from r1kit.config.schema import GRPOConfig, GRPOScriptArguments, ModelConfig, PassRateArguments
from r1kit.console import add_pass_through_command
from r1kit.errors import ConfigError
from r1kit.loading import data
from r1kit.loading.modeling import get_model, get_tokenizer, resolve_model_path
from r1kit.rewards import get_reward_funcs
from r1kit.run import preflight

logger = logging.getLogger(__name__)
PASS_RATE_TYPES = (GRPOScriptArguments, GRPOConfig, ModelConfig, PassRateArguments)
GENERATIONS = "generations.jsonl"
BATCH_PROMPTS = 16  # prompts generated together (x num_generations completions)




# --------------------------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------------------------
def call_reward(func, completions: list, columns: dict[str, list], prompts: list) -> list[float | None]:
    """One reward over a batch, called the way TRL calls it (sync or `async def`)."""
    result = func(prompts=prompts, completions=completions, **columns)
    if inspect.isawaitable(result):
        result = asyncio.run(result)
    return list(result)


def pass_rates(reward_funcs: list, weights: list[float], completions: list[list[str]], rows: list[dict],
               prompts: list) -> list[tuple[float | None, list[float | None]]]:
    """(pass rate, per-completion rewards) per prompt: the weighted sum of the rewards of each completion, averaged
    over the prompt's completions (a completion every reward left None is left out; None when all are)."""
    flat = [[{"role": "assistant", "content": c}] for cs in completions for c in cs]
    counts = [len(cs) for cs in completions]
    columns = {k: [row[k] for row, n in zip(rows, counts) for _ in range(n)] for k in rows[0] if k != "prompt"}
    repeated_prompts = [p for p, n in zip(prompts, counts) for _ in range(n)]
    per_reward = [call_reward(f, flat, columns, repeated_prompts) for f in reward_funcs]
    totals: list[float | None] = []
    for i in range(len(flat)):
        scores = [(w, r[i]) for w, r in zip(weights, per_reward) if r[i] is not None and not math.isnan(r[i])]
        totals.append(sum(w * s for w, s in scores) if scores else None)
    out, k = [], 0
    for n in counts:
        mine = totals[k : k + n]
        judged = [t for t in mine if t is not None]
        out.append((sum(judged) / len(judged) if judged else None, mine))
        k += n
    return out


def finished_indices(path: Path) -> set[int]:
    """Rows already scored by an earlier (perhaps interrupted) run. A last line cut short by a crash is removed, so
    that what is appended next starts on a line of its own."""
    done = set()
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        for line in path.read_text().splitlines():
            try:
                done.add(int(json.loads(line)["index"]))
            except (ValueError, KeyError, TypeError):
                continue
    return done


# --------------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------------
def sampler(model_args, training_args, tokenizer) -> Sampler:
    """A function from chat-formatted prompts to `num_generations` sampled completions each, with the model loaded
    once: vLLM when it is installed with a GPU, batched transformers (the recipe's model loading) otherwise."""
    path = str(resolve_model_path(model_args.model_name_or_path, model_args.gguf_file))
    return load_sampler(path, training_args.num_generations, training_args.max_completion_length,
                        training_args.temperature, training_args.top_p,
                        load_model=lambda: (get_model(model_args, training_args), tokenizer))


def select_rows(script_args: GRPOScriptArguments, filter_args: PassRateArguments):
    dataset = data.get_dataset(script_args)
    if filter_args.dataset_split not in dataset:
        raise ConfigError(f"dataset_split '{filter_args.dataset_split}' not found; splits: {', '.join(dataset)}")
    split = dataset[filter_args.dataset_split]
    start = filter_args.dataset_start_index or 0
    end = len(split) if filter_args.dataset_end_index is None else min(filter_args.dataset_end_index, len(split))
    if start >= end:
        raise ConfigError(f"dataset_start_index {start} / dataset_end_index {end}: no rows selected of {len(split)}")
    if script_args.dataset_prompt_column not in split.column_names:
        raise ConfigError(f"dataset_prompt_column '{script_args.dataset_prompt_column}' not found; columns: "
                          f"{split.column_names}")
    return split.select(range(start, end)), start


def pipeline(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig,
             filter_args: PassRateArguments) -> dict:
    """Scores every selected prompt (continuing an interrupted run), writes the scored and the filtered datasets;
    returns the counts."""
    preflight.check_pass_rate_recipe(script_args, training_args, model_args, filter_args)
    rows, start = select_rows(script_args, filter_args)
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / GENERATIONS
    done = finished_indices(log_path)
    todo = [i for i in range(len(rows)) if start + i not in done]
    if done:
        logger.warning("Continuing: %d of %d prompts were scored by an earlier run (%s).", len(rows) - len(todo),
                       len(rows), log_path)
    reward_funcs = get_reward_funcs(script_args, training_args)
    weights = training_args.reward_weights or [1.0] * len(reward_funcs)
    tokenizer = get_tokenizer(model_args, training_args)
    sample = sampler(model_args, training_args, tokenizer) if todo else None
    with log_path.open("a") as log, tqdm(total=len(rows), initial=len(rows) - len(todo), desc="pass rate",
                                         unit="prompt") as bar:
        for b in range(0, len(todo), BATCH_PROMPTS):
            batch = [rows[i] for i in todo[b : b + BATCH_PROMPTS]]
            conversations = [data.make_conversation(r, script_args.dataset_prompt_column, training_args.system_prompt)["prompt"]
                             for r in batch]
            texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
            completions = sample(texts)
            scored = pass_rates(reward_funcs, weights, completions, batch, conversations)
            for i, row_completions, (rate, rewards) in zip(todo[b : b + BATCH_PROMPTS], completions, scored):
                log.write(json.dumps({"index": start + i, "pass_rate": rate, "completions": row_completions,
                                      "rewards": rewards}) + "\n")
            log.flush()
            bar.update(len(batch))
    rates = {}
    for line in log_path.read_text().splitlines():
        try:
            item = json.loads(line)
            rates[int(item["index"])] = item["pass_rate"]
        except (ValueError, KeyError, TypeError):
            continue
    scored = Dataset.from_list([{**rows[i], "pass_rate": rates.get(start + i)} for i in range(len(rows))])
    low, high = filter_args.pass_rate_min, filter_args.pass_rate_max
    kept = scored.filter(lambda r: r["pass_rate"] is not None and low < r["pass_rate"] < high)
    for name, rows_out in (("scored", scored), ("filtered", kept)):
        rows_out.save_to_disk(str(out / name))
        rows_out.to_json(str(out / f"{name}.jsonl"), lines=True, force_ascii=False)
    if filter_args.output_dataset_name:
        kept.push_to_hub(filter_args.output_dataset_name)
    summary = {"rows": len(rows), "kept": len(kept), "pass_rate_min": low, "pass_rate_max": high,
               "unjudged": sum(rates.get(start + i) is None for i in range(len(rows)))}
    records.write_json(out / "pass_rate_summary.json", summary)
    return summary


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit pass-rate --config FILTER.yaml [--dry-run] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `pass-rate` to the `r1kit` command."""
    return add_pass_through_command(subparsers, "pass-rate", "score prompts' pass rates and keep the informative ones",
                                    run)


def run(args) -> int:
    """`r1kit pass-rate`: parse the filtering recipe strictly, then score (or only check, with --dry-run)."""
    return run_recipe_command(args.argv, __doc__.strip(), PASS_RATE_TYPES, dry_run, score_and_report,
                              needs_config="r1kit pass-rate")


def dry_run(script_args, training_args, model_args, filter_args) -> str:
    preflight.check_pass_rate_recipe(script_args, training_args, model_args, filter_args, dry_run=True)
    return "recipe OK: keys, values, paths and the filtering window checked; no model loaded."


def score_and_report(script_args, training_args, model_args, filter_args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
    summary = pipeline(script_args, training_args, model_args, filter_args)
    print(f"pass rates of {summary['rows']} prompts: {summary['kept']} kept with "
          f"{summary['pass_rate_min']} < pass rate < {summary['pass_rate_max']} -> {training_args.output_dir}/filtered")
    return 0


if __name__ == "__main__":
    from r1kit.console import run_module

    sys.exit(run_module("pass_rate", add_parser))
