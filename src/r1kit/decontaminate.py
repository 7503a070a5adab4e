"""Decontamination: drop the training rows whose problem shares an n-gram with a benchmark, before SFT or GRPO.

    r1kit decontaminate --dataset TRAIN --benchmarks math_500,aime24,aime25,gpqa,lcb_v4 --output DIR
    python -m r1kit.decontaminate --dataset data/train.jsonl --benchmarks my_eval.jsonl --output DIR --ngram 8

The test is Open-R1's (`scripts/decontaminate.py`, after s1): lower-case the text, split it on whitespace, and call a
row contaminated when any run of `--ngram` consecutive words (default 8) also occurs in a benchmark question.
Punctuation stays part of its word, as in Open-R1: `triangle,` and `triangle` differ, so an n-gram holding a word
whose punctuation changed no longer matches (the other n-grams of a copied passage still do). A text shorter than
`--ngram` words has no n-gram and never matches.

What is compared on the benchmark side is the question as the benchmark states it: `problem` (MATH-500, AIME and
`problem`/`answer` files), `Question` (GPQA) and `question_content` (LiveCodeBench), the columns Open-R1 compares.
The prompt text `r1kit evaluate` wraps around a question (GPQA's options, the stdin and code-block instructions) is
not the benchmark's and would match unrelated training rows, so it is left out. `addition` and `humaneval` are
compared by the prompts `r1kit evaluate` asks.

Speed: the benchmarks' n-grams are built once into one dict (a tuple of words -> a bit per benchmark); each training
row's n-grams are then made by `zip` and checked with one `isdisjoint`, both in C. Only the few contaminated rows
take the slow path that finds which benchmarks, and which n-gram, they share. `benchmarks/decontaminate.py`
measures it against the plain loop.

Output, in `--output DIR`:
    dataset_dict.json, <split>/       the kept rows, a `save_to_disk` dataset (`datasets.load_from_disk(DIR)`, or
                                      `dataset_name: DIR` in a recipe)
    <split>.jsonl | .parquet | .csv   the same rows in the input's format family (a local .json/.jsonl gives
                                      jsonl, .csv csv, .parquet, a Hub id or a saved dataset parquet)
    report.json                       rows in, kept and removed; per benchmark the rows removed and one example
                                      (the training row, the benchmark question and the shared n-gram); the index
                                      of every removed row with the benchmarks it matched
A row that matches several benchmarks counts under each; `removed` counts it once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1kit.benchmarking.benchmarks import NAMES, OPEN_R1, REGISTRY, question_texts
from r1kit.console import run_module
from r1kit.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_NGRAM = 8
REPORT_FILE = "report.json"
BATCH_ROWS = 10_000


# --------------------------------------------------------------------------------------------------------------------
# N-grams
# --------------------------------------------------------------------------------------------------------------------
def words(text: str) -> list[str]:
    """Open-R1's normalisation: lower-cased, split on any run of whitespace; punctuation stays with its word."""
    return text.lower().split()


def ngrams(text: str, n: int):
    """The word n-grams of `text`, as tuples (an iterator; empty when the text has fewer than `n` words)."""
    w = words(text)
    return zip(*(w[k:] for k in range(n)))


def row_text(value: Any) -> str:
    """The text of a training cell: a string as is; a conversation (a list of `{"content": ...}` messages, as in
    `messages` or `prompt` columns) as its contents joined; None as empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in value)
    return str(value)


# --------------------------------------------------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class QuestionSet:
    """One benchmark's questions, under the name the user gave (a built-in name or a file path)."""

    name: str
    questions: list[str]


def load_benchmark_questions(name: str, field_name: str = "--benchmarks") -> QuestionSet:
    """The questions of a built-in benchmark or of a local .jsonl file of one of the schemas `r1kit evaluate` reads
    (`r1kit.benchmarking.benchmarks.question_texts`). Raises a `ConfigError` naming `field_name`."""
    if name in REGISTRY and REGISTRY[name].dataset:
        logger.info("Loading benchmark %s (%s)", name, REGISTRY[name].dataset)
    try:
        return QuestionSet(name, question_texts(name))
    except ConfigError as e:
        raise ConfigError(f"{field_name}: {e}") from None


@dataclass
class NgramIndex:
    """The n-grams of a set of benchmarks: each n-gram (a tuple of words) -> a bit mask of the benchmarks it is in."""

    n: int
    benchmarks: list[QuestionSet]
    masks: dict[tuple[str, ...], int] = field(default_factory=dict)
    short_questions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, benchmarks: list[QuestionSet], n: int = DEFAULT_NGRAM) -> NgramIndex:
        index = cls(n, benchmarks)
        for bit, benchmark in enumerate(benchmarks):
            short = 0
            for question in benchmark.questions:
                grams = list(ngrams(question, n))
                short += not grams
                for gram in grams:
                    index.masks[gram] = index.masks.get(gram, 0) | (1 << bit)
            index.short_questions[benchmark.name] = short
        return index

    def contaminated(self, text: str) -> bool:
        """Whether `text` shares an n-gram with any benchmark: the fast path, all in C."""
        return not self.masks.keys().isdisjoint(ngrams(text, self.n))

    def matches(self, text: str) -> dict[str, tuple[str, ...]]:
        """Benchmark name -> the first n-gram of `text` it shares (the slow path, for contaminated rows only)."""
        found: dict[str, tuple[str, ...]] = {}
        for gram in ngrams(text, self.n):
            mask = self.masks.get(gram, 0)
            for bit, benchmark in enumerate(self.benchmarks):
                if mask >> bit & 1 and benchmark.name not in found:
                    found[benchmark.name] = gram
        return found

    def question_with(self, name: str, gram: tuple[str, ...]) -> str:
        """The first question of benchmark `name` that holds `gram` (for the report's example)."""
        benchmark = next(b for b in self.benchmarks if b.name == name)
        return next(q for q in benchmark.questions if gram in set(ngrams(q, self.n)))


# --------------------------------------------------------------------------------------------------------------------
# Decontamination
# --------------------------------------------------------------------------------------------------------------------
def find_contaminated(texts, index: NgramIndex, total: int | None = None) -> dict[int, dict[str, tuple[str, ...]]]:
    """Row number -> {benchmark: shared n-gram} for every contaminated text of `texts` (an iterable of strings),
    with a progress bar when there are many."""
    from tqdm.auto import tqdm

    from r1kit.loading.data import SMALL_ROWS  # deferred: trl

    found = {}
    bar = tqdm(texts, total=total, desc="Decontaminating", unit=" rows", disable=(total or 0) < SMALL_ROWS)
    for i, text in enumerate(bar):
        if index.contaminated(text):
            found[i] = index.matches(text)
    return found


def decontaminate(dataset, column: str, index: NgramIndex) -> tuple[Any, dict]:
    """(kept rows, report) of a `datasets.Dataset` whose `column` holds the problem text."""

    def texts():
        for batch in dataset.select_columns([column]).iter(batch_size=BATCH_ROWS):
            yield from (row_text(v) for v in batch[column])

    found = find_contaminated(texts(), index, total=len(dataset))
    kept = dataset.select([i for i in range(len(dataset)) if i not in found]) if found else dataset
    return kept, build_report(dataset, column, index, found)


def build_report(dataset, column: str, index: NgramIndex, found: dict[int, dict[str, tuple[str, ...]]]) -> dict:
    per_benchmark = {}
    for benchmark in index.benchmarks:
        rows = [i for i, matched in found.items() if benchmark.name in matched]
        entry = {"questions": len(benchmark.questions), "removed": len(rows)}
        if index.short_questions.get(benchmark.name):
            entry["questions_shorter_than_ngram"] = index.short_questions[benchmark.name]
        if rows:
            gram = found[rows[0]][benchmark.name]
            entry["example"] = {
                "row": rows[0],
                "text": row_text(dataset[rows[0]][column]),
                "benchmark_question": index.question_with(benchmark.name, gram),
                "ngram": " ".join(gram),
            }
        per_benchmark[benchmark.name] = entry
    return {
        "ngram": index.n,
        "column": column,
        "rows": len(dataset),
        "kept": len(dataset) - len(found),
        "removed": len(found),
        "benchmarks": per_benchmark,
        "removed_rows": [{"row": i, "benchmarks": list(matched)} for i, matched in sorted(found.items())],
    }


def format_table(report: dict) -> str:
    """The short table `r1kit decontaminate` prints: removed rows per benchmark, with an example n-gram."""
    names = [Path(n).name if n.endswith(".jsonl") else n for n in report["benchmarks"]]
    width = max([len("benchmark"), *map(len, names)])
    lines = [f"{'benchmark'.ljust(width)}  {'questions':>9}  {'removed':>7}  example shared n-gram"]
    for name, entry in zip(names, report["benchmarks"].values()):
        example = entry["example"]["ngram"] if "example" in entry else "-"
        if len(example) > 60:
            example = example[:57] + "..."
        lines.append(f"{name.ljust(width)}  {entry['questions']:>9,}  {entry['removed']:>7,}  {example}")
    lines.append(f"{report['rows']:,} rows in, {report['removed']:,} removed, {report['kept']:,} kept "
                 f"({report['ngram']}-grams of '{report['column']}')")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------------
# Loading and writing
# --------------------------------------------------------------------------------------------------------------------
def load_training_split(name: str, split: str, config: str | None = None):
    """The `split` of a Hub id, a local data file or folder, or a `save_to_disk` dataset, as one `Dataset`."""
    from datasets import DatasetDict

    from r1kit.loading.data import load_source  # deferred: trl

    if not Path(os.path.expanduser(name)).exists():  # a Hub id: fetch only the split asked for
        return load_source(name, config, split, field="--dataset")
    loaded = load_source(name, config, field="--dataset")
    if not isinstance(loaded, DatasetDict):  # a saved single Dataset: it has no splits
        return loaded
    if split not in loaded:
        raise ConfigError(f"--split: '{split}' not found in {name}; splits: {', '.join(loaded)}")
    return loaded[split]


def output_format(name: str) -> str:
    """The file format the cleaned rows are also written in: the input's family, parquet for the Hub."""
    suffix = Path(name).suffix.lower()
    return {".json": "jsonl", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(suffix, "parquet")


def check_output(output: str, dataset: str) -> Path:
    out = Path(os.path.expanduser(output))
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output: {output} is a file; name a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_FILE).exists():
        raise ConfigError(f"--output: {output} is a folder with other files in it; name a new or empty folder")
    source = Path(os.path.expanduser(dataset))
    if source.exists() and out.resolve() in (source.resolve(), *source.resolve().parents):
        raise ConfigError(f"--output: {output} would overwrite the input --dataset {dataset}; name another folder")
    return out


def write_output(kept, report: dict, out: Path, split: str, fmt: str) -> None:
    from datasets import DatasetDict

    from r1kit.loading.data import SMALL_ROWS, progress_bars  # deferred: trl

    out.mkdir(parents=True, exist_ok=True)
    with progress_bars(len(kept) >= SMALL_ROWS):
        DatasetDict({split: kept}).save_to_disk(str(out))
        if fmt == "jsonl":
            kept.to_json(str(out / f"{split}.jsonl"), lines=True, force_ascii=False)
        elif fmt == "csv":
            kept.to_csv(str(out / f"{split}.csv"), index=False)
        else:
            kept.to_parquet(str(out / f"{split}.parquet"))
    (out / REPORT_FILE).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------------------------
# Command
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `decontaminate` to an argparse subparsers object; returns its parser (defaults: `command=run`)."""
    parser = subparsers.add_parser(
        "decontaminate",
        help="remove training rows that share an n-gram with a benchmark",
        description="Remove training rows whose problem shares a word n-gram with a benchmark question (Open-R1's "
        "8-gram test), and write the kept rows and a report to --output.",
    )
    parser.add_argument("--dataset", required=True, help="training data: a Hub id, a local file or folder, or a "
                        "save_to_disk dataset")
    parser.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(NAMES)}, or local .jsonl "
                        f"files (Open-R1 decontaminates against {','.join(OPEN_R1)})")
    parser.add_argument("--output", required=True, help="folder for the kept rows and report.json")
    parser.add_argument("--ngram", type=int, default=DEFAULT_NGRAM, help="words per n-gram (default 8)")
    parser.add_argument("--column", default="problem", help="training column holding the problem (default problem)")
    parser.add_argument("--split", default="train", help="training split (default train)")
    parser.add_argument("--dataset-config", default=None, help="config of a Hub --dataset")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Runs `r1kit decontaminate`: checks every option, then loads, filters and writes; prints the table."""
    if args.ngram < 1:
        raise ConfigError(f"--ngram must be >= 1, got {args.ngram}")
    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if not names:
        raise ConfigError("--benchmarks: name at least one benchmark, e.g. " + ",".join(OPEN_R1))
    out = check_output(args.output, args.dataset)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")

    benchmarks = [load_benchmark_questions(name) for name in dict.fromkeys(names)]
    index = NgramIndex.build(benchmarks, args.ngram)
    logger.info("%d benchmark %d-grams from %d questions", len(index.masks), args.ngram,
                sum(len(b.questions) for b in benchmarks))
    for name, short in index.short_questions.items():
        if short:
            logger.warning("%d of the questions of %s have fewer than %d words: they can match no row (lower --ngram "
                           "to compare them)", short, name, args.ngram)
    dataset = load_training_split(args.dataset, args.split, args.dataset_config)
    if args.column not in dataset.column_names:
        raise ConfigError(f"--column: '{args.column}' not found in {args.dataset}; columns present: {dataset.column_names}")
    kept, report = decontaminate(dataset, args.column, index)
    report = {"dataset": args.dataset, "split": args.split, **report}
    write_output(kept, report, out, args.split, output_format(args.dataset))
    print(format_table(report))
    print(f"Kept rows: {out} (load_from_disk, and {args.split}.{output_format(args.dataset)}); report: {out / REPORT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(run_module("decontaminate", add_parser))
