"""Competitive-programming rewards as Open-R1 runs them: `ioi_code` (rows of `open-r1/ioi`, tests from
`open-r1/ioi-test-cases` or a local copy) and `cf_code` (rows of `open-r1/codeforces`, official plus generated tests,
checker programs, file I/O, optional code patching), scored in r1kit's sandbox.

Failure policy as for every code reward: a row that cannot be judged, or a sandbox failure, is `None` (counted);
whatever the program does is judged like any wrong answer.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

from r1kit.errors import ConfigError
from r1kit.rewards.code import (
    BadRow,
    Job,
    RowWarnings,
    Tests,
    bounded_tests,
    extract_code,
    known_language,
    make_provider,
    memory_limit,
    sample_rows,
    score_rows,
    short,
    text_field,
    time_limit,
)
from r1kit.sandbox import COMPILE_ERROR, PASSED, SANDBOX_ERROR, WRONG_ANSWER, Program, ProviderName, TestResult

logger = logging.getLogger(__name__)
CHECKER_ARGS = ["input.txt", "correct_output.txt", "solution_output.txt"]


# --------------------------------------------------------------------------------------------------------------------
# Running tests in batches, with a checker
# --------------------------------------------------------------------------------------------------------------------
def batches(items: list, size: int) -> list[list]:
    """Chunks of `size`; `size <= 0` means everything at once (Open-R1's IOI generator yielded nothing then)."""
    if size <= 0:
        return [items] if items else []
    return [items[i : i + size] for i in range(0, len(items), size)]


def batch_program(base: Program, batch: list[tuple[str, str]], checked: bool) -> Program:
    """`base` with one batch of tests: stdin, or `input.txt` for a file-I/O program; the outputs are left to the
    checker when there is one."""
    file_io = base.output_file is not None
    return Program(
        code=base.code, language=base.language, inputs=["" if file_io else c[0] for c in batch],
        expected=[None if checked else c[1] for c in batch], time_limit=base.time_limit,
        memory_mb=base.memory_mb, files=base.files, output_file=base.output_file,
        test_files=[{"input.txt": c[0]} for c in batch] if file_io else [],
    )


CaseRun = tuple[Program, list[tuple[str, str]], "Program | None"]  # an answer, its (input, output) cases, a checker


def run_all_cases(provider, runs: list[CaseRun], batch_size: int, stop_on_failure: bool) -> list[Tests]:
    """(result, score in [0, 1]) per case run, for every answer, in batches. Each round runs the next batch of every
    answer still going in one `provider.execute` call, and their checkers in one more, so that the provider runs the
    answers side by side within its own `num_parallel`, as it does for `code`. An answer stops after a batch with a
    compile or sandbox error, or with a failure when `stop_on_failure`. Without a checker a test scores 1.0 when its
    output matches; with one, the checker's verdict decides (see `check_outputs`)."""
    pending = [iter(batches(cases, batch_size)) for _, cases, _ in runs]
    scored: list[Tests] = [[] for _ in runs]
    going = list(range(len(runs)))
    while going:
        current = [(i, batch) for i in going if (batch := next(pending[i], None)) is not None]
        if not current:
            break
        results = provider.execute([batch_program(runs[i][0], batch, runs[i][2] is not None) for i, batch in current])
        scores = check_outputs(provider, [(runs[i][2], batch, r) for (i, batch), r in zip(current, results)])
        going = []
        for (i, _), batch_results, batch_scores in zip(current, results, scores):
            for result in batch_results:  # judged: the trainer keeps one round's outputs at a time, not every test's
                result.stdout = ""
            scored[i] += list(zip(batch_results, batch_scores))
            if any(r.status in (SANDBOX_ERROR, COMPILE_ERROR) for r in batch_results):
                continue
            if stop_on_failure and min(batch_scores, default=1.0) <= 0.0:
                continue
            going.append(i)
    return scored


Checked = tuple["Program | None", list[tuple[str, str]], list[TestResult]]  # a checker, a batch, its results


def check_outputs(provider, batches_run: list[Checked]) -> list[list[float]]:
    """Each test's score, for batches run side by side: without a checker, 1.0 for a test that passed; with one, the
    problem's checker (`checker input.txt correct_output.txt solution_output.txt`), run over every test that ran
    cleanly, all in one `provider.execute` call. Its stdout is the test's score: "1" accepts (Codeforces), a number in
    [0, 1] is a partial score (CMS/IOI). A checker that fails makes the test wrong; a sandbox failure marks it
    `sandbox_error`."""
    scores = [[float(r.passed) if checker is None else 0.0 for r in results] for checker, _, results in batches_run]
    runs: list[tuple[int, list[int], Program]] = []  # (batch, its tests in this checker run, the checker run)
    for b, (checker, cases, results) in enumerate(batches_run):
        if checker is None:
            continue
        ran = [i for i, r in enumerate(results) if r.passed]
        for chunk in checker_chunks(ran, [len(results[i].stdout) for i in ran]):
            runs.append((b, chunk, Program(
                code=checker.code, language=checker.language, inputs=[""] * len(chunk), time_limit=checker.time_limit,
                memory_mb=checker.memory_mb, argv=CHECKER_ARGS, files=checker.files,
                test_files=[{"input.txt": cases[i][0], "correct_output.txt": cases[i][1],
                             "solution_output.txt": results[i].stdout} for i in chunk],
            )))
    for (b, chunk, _), verdicts in zip(runs, provider.execute([program for _, _, program in runs]) if runs else []):
        results = batches_run[b][2]
        for i, verdict in zip(chunk, verdicts):
            if verdict.status == SANDBOX_ERROR:
                results[i].status = SANDBOX_ERROR
                continue
            score = _checker_score(verdict) if verdict.status == PASSED else 0.0
            scores[b][i] = score
            if score <= 0.0:
                results[i].status = WRONG_ANSWER
    return scores


CHECKER_CHUNK_BYTES = 8 << 20  # the program's outputs one checker run carries: its request must fit the checker's jail


def checker_chunks(indices: list[int], sizes: list[int]) -> list[list[int]]:
    """Groups tests for checker runs so that no run carries more than CHECKER_CHUNK_BYTES of the program's output
    (one test per run at worst): a program cannot make its checker's jail fail to start by printing a lot, which
    would score it None instead of wrong."""
    chunks, current, total = [], [], 0
    for i, size in zip(indices, sizes):
        if current and total + size > CHECKER_CHUNK_BYTES:
            chunks.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        chunks.append(current)
    return chunks


def _checker_score(verdict: TestResult) -> float:
    words = verdict.stdout.split()
    try:
        value = float(words[0]) if words else 0.0
    except ValueError:
        return 0.0
    return min(1.0, max(0.0, value)) if value == value else 0.0


# --------------------------------------------------------------------------------------------------------------------
# ioi_code
# --------------------------------------------------------------------------------------------------------------------
def add_includes(code: str, problem_id: str, files: dict[str, str] | None = None) -> str:
    """What Open-R1 prepends to an IOI submission: `bits/stdc++.h`, the problem's header `<id>.h` (unless the code
    includes it, or, when `files` is given, the row ships no such header), and `using namespace std;` (unless the
    code has it or writes `std::`). Empty code stays empty."""
    if not code.strip():
        return code
    header = f'#include "{problem_id}.h"'
    lines = ["#include <bits/stdc++.h>"]
    if header not in code and (files is None or f"{problem_id}.h" in files):
        lines.append(header)
    if "using namespace std;" not in code and "std::" not in code:
        lines.append("using namespace std;")
    return "\n".join(lines) + "\n" + code


def _read_table(path: Path) -> list[dict]:
    """Rows of a local json/jsonl/csv/parquet file or `save_to_disk` folder (datasets reads them all)."""
    import datasets

    if path.is_dir() and (path / "dataset_info.json").exists():
        return list(datasets.load_from_disk(str(path)))
    kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
    if kind is None:
        return []
    return list(datasets.load_dataset(kind, data_files=str(path), split="train"))


@functools.lru_cache(maxsize=32)
def ioi_tests(source: str, year: str) -> dict[str, dict[str, tuple[str, str]]]:
    """{problem_id: {test_name: (input, output)}} for `year`: from a local file, a local folder (a file named by the
    year, else every data file in it), or the Hub dataset `source` (config = year), as Open-R1 loads them."""
    path = Path(os.path.expanduser(source))
    if path.exists():
        if path.is_dir() and not (path / "dataset_info.json").exists():
            named = [p for p in path.iterdir() if p.stem == str(year)]
            files = named or sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".csv", ".parquet"))
            rows = [row for f in files for row in _read_table(f)]
        else:
            rows = _read_table(path)
    else:
        import datasets

        rows = list(datasets.load_dataset(source, name=str(year), split="train"))
    tests: dict[str, dict[str, tuple[str, str]]] = {}
    for row in rows:
        if "year" in row and str(row["year"]) != str(year):
            continue
        tests.setdefault(str(row["problem_id"]), {})[str(row["test_name"])] = (str(row["test_input"]), str(row["test_output"]))
    return tests


def ioi_cases(row: dict, source: str) -> list[tuple[str, str]]:
    """(input, output) pairs of an IOI subtask: its inline `test_cases` (a dict by test name, or a list of dicts or
    pairs), else the tests of its `year` from `source`, ordered by `test_names`. Raises BadRow."""
    names = row.get("test_names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRow("test_names must be a list of names")
    cases = row.get("test_cases")
    if cases is None:
        if row.get("year") is None or row.get("id") is None:
            raise BadRow("ioi row has neither test_cases nor year and id to find its tests")
        year, problem = name_field(row, "year"), name_field(row, "id")
        try:
            cases = ioi_tests(source, year).get(problem, {})
        except (OSError, ValueError, KeyError) as e:
            raise BadRow(f"tests for {problem} ({year}) could not be loaded from {source}: {short(str(e))}") from None
    if isinstance(cases, dict):
        missing = [n for n in names if n not in cases]
        if missing:
            raise BadRow(f"test_names {missing[:3]} have no test case")
        ordered = [cases[n] for n in names] if names else list(cases.values())
    elif isinstance(cases, list):
        ordered = cases
    else:
        raise BadRow("test_cases must be a mapping or a list")
    bounded_tests(ordered, "the ioi subtask")
    out = []
    for i, case in enumerate(ordered):
        if isinstance(case, (list, tuple)) and len(case) == 2:
            case = {"input": case[0], "output": case[1]}
        out.append((text_field(case, "input", f"test {i}"), text_field(case, "output", f"test {i}")))
    if not out:
        raise BadRow("ioi row has no test cases")
    return bounded_tests(out, "the ioi subtask")


def name_field(row: dict, key: str) -> str:
    """A row's identifier (`id`, `year`): text or a whole number, as text."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or len(text := str(value)) > 200:
        raise BadRow(f"{key} must be a short name or number, got {short(value)}")
    return text


FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")  # a grader's file: one plain name, no path


def grader_files(row: dict) -> tuple[dict[str, str], str | None]:
    """(files compiled with the solution, checker source or None) from `grader_files` [(name, content), ...]:
    graders and headers sit next to the solution (by base name); `checker/checker.cpp` is the checker."""
    files, checker = {}, None
    pairs = row.get("grader_files") or []
    if not isinstance(pairs, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise BadRow("grader_files must be a list of (name, content) pairs")
    for name, content in pairs:
        if not content:
            continue
        if not isinstance(name, str) or not isinstance(content, str) or not FILE_NAME.fullmatch(Path(name).name):
            raise BadRow(f"grader_files has an entry that is not (file name, text): {short(name)}")
        if Path(name).stem == "checker" and name.endswith(".cpp"):
            checker = content
        else:
            files[Path(name).name] = content
    return files, checker


def _precision(row: dict) -> int:
    value = row.get("score_precision")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10 else 2


def _points(row: dict) -> float | None:
    """The subtask's points (`score`), when it is a finite number."""
    value = row.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


IoiProviderName = Literal["local", "piston"]  # the back ends ioi_code runs on


def make_ioi_code_reward(provider: IoiProviderName = "local", test_cases: str = "open-r1/ioi-test-cases",
                         test_batch_size: int = 1, num_parallel: int | None = None,
                         allow_unsandboxed: bool = False) -> Callable:
    """Builds `ioi_code`: the score of an IOI subtask, as Open-R1's reward returns it: the minimum test score over the
    subtask's tests (1.0 for a test whose output matches; a checker's partial score in (0, 1) when the problem has
    `checker/checker.cpp`), rounded to `score_precision`. The solution is compiled with the problem's grader files,
    after Open-R1's includes (`add_includes`). `rewards/ioi_code/points` logs the mean of points x score (the
    subtask's `score` column). 0.0 for no code; None for a row that cannot be judged or a sandbox failure.

    Args:
        provider (`str`, defaults to `"local"`): `local` or `piston` (recipe: `ioi_provider`; Open-R1: piston).
        test_cases (`str`, defaults to `"open-r1/ioi-test-cases"`): where rows without inline `test_cases` find their
            tests: a Hub dataset (one config per year), or a local file or folder (recipe: `ioi_test_cases`).
        test_batch_size (`int`, defaults to `1`): tests run at once; the subtask stops after a batch with a failure;
            0 or less runs them all at once (recipe: `code_eval_test_batch_size`).
        num_parallel (`int` or `None`), allow_unsandboxed (`bool`): as for `make_provider`.

    Returns:
        `Callable`: `ioi_code_reward(completions, log_metric=None, **columns)`.

    Example row (`open-r1/ioi`): {"id": "nile", "year": 2024, "subtask": 1, "score": 6, "test_names": ["0-01", ...],
    "grader_files": [["graders/grader.cpp", ...], ["graders/nile.h", ...]], "time_limit": 2, "memory_limit": 2048}
    """
    if provider not in get_args(IoiProviderName):
        raise ConfigError(f"ioi_provider must be one of {', '.join(get_args(IoiProviderName))}, got {provider!r}")
    sandbox = make_provider(provider, num_parallel, allow_unsandboxed)
    warnings = RowWarnings("ioi_code")

    def build(text: str, row: dict) -> Job:
        cases = ioi_cases(row, test_cases)
        files, checker_source = grader_files(row)
        problem = name_field(row, "id") if row.get("id") is not None else ""
        program = Program(code=add_includes(extract_code(text, "cpp"), problem, files),
                          language="cpp", files=files, time_limit=time_limit(row.get("time_limit"), 2.0),
                          memory_mb=memory_limit(row.get("memory_limit"), 512))
        checker = Program(checker_source, language="cpp", time_limit=10.0) if checker_source else None
        return program, (cases, checker, _precision(row), _points(row))

    def run(jobs: list[Job]) -> list[Tests]:
        return run_all_cases(sandbox, [(program, cases, checker) for program, (cases, checker, _, _) in jobs],
                             test_batch_size, stop_on_failure=True)

    def ioi_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        points: list[float] = []

        def score(job: Job, tests: Tests) -> float:
            cases, _, precision, subtask_points = job[1]
            value = round(min(s for _, s in tests) if len(tests) == len(cases) else 0.0, precision)
            if subtask_points is not None:
                points.append(round(value * subtask_points, precision))
            return value

        rows = sample_rows(columns, len(completions))
        rewards = score_rows("ioi_code", completions, rows, warnings, build, run, score, 0.0, log_metric)
        if log_metric is not None and points:
            log_metric("rewards/ioi_code/points", sum(points) / len(points))
        return rewards

    return ioi_code_reward


# --------------------------------------------------------------------------------------------------------------------
# cf_code
# --------------------------------------------------------------------------------------------------------------------
ScoringMode = Literal["pass_fail", "partial", "weighted_sum"]  # how cf_code scores the tests passed (`cf_score`)


def cf_score(passed: int, total: int, mode: ScoringMode) -> float:
    """Open-R1's Codeforces scores: pass_fail (1 iff all pass), partial (fraction), weighted_sum (pass_fail + 0.1 x
    fraction)."""
    all_passed = float(passed == total)
    if mode == "pass_fail":
        return all_passed
    if mode == "partial":
        return passed / total
    if mode == "weighted_sum":
        return all_passed + 0.1 * passed / total
    raise ValueError(f"code_eval_scoring_mode must be one of {', '.join(get_args(ScoringMode))}, got {mode!r}")


NO_COMPILE_REWARD, NO_SUBMISSION_REWARD = -0.1, -1.0


def contest_of(row: dict) -> int | None:
    """The contest number of a Codeforces row: `contest_id`, else the part of `id` before the slash ("2053/A")."""
    value = row.get("contest_id")
    if value is None and isinstance(row.get("id"), str):
        value = row["id"].split("/")[0]
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


@functools.lru_cache(maxsize=32)
def _contest_tests(folder: str, contest: int) -> dict[str, list[tuple[str, str]]]:
    path = Path(folder) / f"test_cases_{contest:04d}.parquet"
    if not path.exists():
        return {}
    tests: dict[str, list[tuple[str, str]]] = {}
    for row in _read_table(path):
        tests.setdefault(str(row["problem_id"]), []).append((str(row["input"]), str(row["output"])))
    return tests


def generated_tests(row: dict, folder: str | None) -> list[tuple[str, str]]:
    """The problem's generated tests from `folder/test_cases_<contest:04d>.parquet` (Open-R1's CF_TESTS_FOLDER);
    none when there is no folder or no file for the contest."""
    contest = contest_of(row)
    if not folder or contest is None or not isinstance(row.get("id"), str):
        return []
    return _contest_tests(folder, contest).get(row["id"], [])


def cf_cases(row: dict) -> list[tuple[str, str]]:
    tests = row.get("official_tests")
    if not isinstance(tests, list):
        raise BadRow("official_tests must be a list")
    bounded_tests(tests, "official_tests")
    return [(text_field(t, "input", f"official test {i}"), text_field(t, "output", f"official test {i}"))
            for i, t in enumerate(tests)]


PYTHON_FIXES = [  # (pattern, replacement): slips of Python 2 or removed APIs that Open-R1's patcher also fixes
    (re.compile(r"\bfrom collections import (?=.*\b(?:Mapping|MutableMapping|Sequence|Iterable|Callable|Hashable)\b)"),
     "from collections.abc import "),
    (re.compile(r"\bcollections\.(Mapping|MutableMapping|Sequence|MutableSequence|Iterable|Callable|Hashable)\b"),
     r"collections.abc.\1"),
    (re.compile(r"^(\s*)import imp\b", re.MULTILINE), r"\1import importlib as imp"),
    (re.compile(r"\bfractions\.gcd\b"), "math.gcd"),
    (re.compile(r"\bfrom fractions import gcd\b"), "from math import gcd"),
    (re.compile(r"\basyncio\.async\b"), "asyncio.ensure_future"),
    (re.compile(r"\binspect\.getargspec\b"), "inspect.getfullargspec"),
    (re.compile(r"\bos\.getlogin\(\)"), "False"),
]


def patch_code(code: str, language: str) -> str:
    """Fixes common slips before running, as Open-R1's `patch_code` option does: Python imports that moved
    (collections ABCs, fractions.gcd, imp, getargspec), plus no limit on int-to-str digits; C++ gets
    `bits/stdc++.h` and `using namespace std;` when missing."""
    if not code.strip():
        return code
    if language == "python":
        for pattern, replacement in PYTHON_FIXES:
            code = pattern.sub(replacement, code)
        prelude = "import sys, math\nif hasattr(sys, 'set_int_max_str_digits'):\n    sys.set_int_max_str_digits(0)\n"
        return prelude + code
    if language == "cpp":
        lines = [] if "bits/stdc++.h" in code else ["#include <bits/stdc++.h>"]
        if "using namespace std" not in code:
            lines.append("using namespace std;")
        return "\n".join(lines + [code])
    return code


def make_cf_code_reward(provider: ProviderName = "local", language: str = "python",
                        scoring_mode: ScoringMode = "weighted_sum", test_batch_size: int = 1,
                        tests_folder: str | None = None, patch: bool = False, num_parallel: int | None = None,
                        allow_unsandboxed: bool = False, e2b_router_url: str | None = None,
                        morph_router_url: str | None = None) -> Callable:
    """Builds `cf_code`: the Codeforces score over the row's `official_tests` plus its generated tests, with the
    row's `generated_checker` when it has one, reading `input.txt` / writing `output.txt` when `input_mode` is
    "file". -0.1 for a compile error, -1.0 for no code; None for a row that cannot be judged (or has no tests) or a
    sandbox failure.

    Args:
        provider (`str`, defaults to `"local"`): the sandbox (`make_provider`; recipe: `code_provider`).
        language (`str`, defaults to `"python"`): language of rows that name none (recipe: `code_language`).
        scoring_mode (`str`, defaults to `"weighted_sum"`): `pass_fail`, `partial` or `weighted_sum` (`cf_score`;
            recipe: `code_eval_scoring_mode`).
        test_batch_size (`int`, defaults to `1`): tests run at once; `pass_fail` stops after a batch with a failure;
            0 or less runs them all at once (recipe: `code_eval_test_batch_size`).
        tests_folder (`str` or `None`, defaults to `$CF_TESTS_FOLDER`): generated tests,
            `test_cases_<contest:04d>.parquet` (recipe: `cf_tests_folder`).
        patch (`bool`, defaults to `False`): apply Open-R1's code patches before running (`patch_code`; recipe:
            `cf_patch_code`).
        num_parallel, allow_unsandboxed, e2b_router_url, morph_router_url: as for `make_provider`.

    Returns:
        `Callable`: `cf_code_reward(completions, log_metric=None, **columns)`.

    Example: 3 of 4 tests passed gives pass_fail 0.0, partial 0.75, weighted_sum 0.075; all passed, weighted_sum 1.1.
    """
    cf_score(1, 1, scoring_mode)  # fail at start-up on a bad mode
    sandbox = make_provider(provider, num_parallel, allow_unsandboxed, e2b_router_url, morph_router_url)
    folder = tests_folder or os.environ.get("CF_TESTS_FOLDER") or None
    warnings = RowWarnings("cf_code")

    def build(text: str, row: dict) -> Job:
        cases = bounded_tests(cf_cases(row) + generated_tests(row, folder), "the problem (official plus generated)")
        if not cases:
            raise BadRow("the problem has no tests (official or generated)")
        row_language = known_language(row.get("language"), language)
        input_mode = row.get("input_mode") or "stdin"
        if input_mode not in ("stdin", "file"):
            raise BadRow(f"input_mode must be 'stdin' or 'file', got {short(input_mode)}")
        code = extract_code(text, row_language)
        program = Program(code=patch_code(code, row_language) if patch else code, language=row_language,
                          output_file="output.txt" if input_mode == "file" else None,
                          time_limit=time_limit(row.get("time_limit"), 2.0),
                          memory_mb=memory_limit(row.get("memory_limit"), 256))
        checker = row.get("generated_checker") or None
        if checker is not None and not isinstance(checker, str):
            raise BadRow("generated_checker must be Python source text")
        return program, (cases, Program(checker, language="python", time_limit=10.0) if checker else None)

    def run(jobs: list[Job]) -> list[Tests]:
        return run_all_cases(sandbox, [(program, cases, checker) for program, (cases, checker) in jobs],
                             test_batch_size, stop_on_failure=scoring_mode == "pass_fail")

    def score(job: Job, tests: Tests) -> float:
        if any(result.status == COMPILE_ERROR for result, _ in tests):
            return NO_COMPILE_REWARD
        return cf_score(sum(s >= 1.0 for _, s in tests), len(job[1][0]), scoring_mode)

    def cf_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        rows = sample_rows(columns, len(completions))
        return score_rows("cf_code", completions, rows, warnings, build, run, score, NO_SUBMISSION_REWARD, log_metric)

    return cf_code_reward
