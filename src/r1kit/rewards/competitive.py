"""Competitive-programming rewards as Open-R1 runs them: `ioi_code` (rows of `open-r1/ioi`, tests from
`open-r1/ioi-test-cases` or a local copy) and `cf_code` (rows of `open-r1/codeforces`, official plus generated tests,
checker programs, file I/O, optional code patching), scored in r1kit's sandbox.

Failure policy as for every code reward: a row that cannot be judged, or a sandbox failure, is `None` (counted);
whatever the program does is judged like any wrong answer.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r1kit.rewards.code import (
    BadRow,
    RowWarnings,
    count_errors,
    extract_code,
    get_provider,
    known_language,
    local_provider,
    make_provider,
    positive_number,
    sample_rows,
    text_field,
)
from r1kit.rewards.text import texts
from r1kit.sandbox import COMPILE_ERROR, PASSED, SANDBOX_ERROR, WRONG_ANSWER, Program, TestResult

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


def run_cases(provider, base: Program, cases: list[tuple[str, str]], batch_size: int, stop_on_failure: bool,
              checker: Program | None = None) -> list[tuple[TestResult, float]]:
    """(result, score in [0, 1]) per case run, in batches, stopping after a batch with a failure when asked. Without
    a checker a test scores 1.0 when its output matches; with one, the checker's verdict decides (see
    `check_outputs`). `base.output_file` makes the program read `input.txt` and write that file (file I/O)."""
    scored: list[tuple[TestResult, float]] = []
    for batch in batches(cases, batch_size):
        file_io = base.output_file is not None
        program = Program(
            code=base.code, language=base.language, inputs=["" if file_io else c[0] for c in batch],
            expected=[None if checker else c[1] for c in batch], time_limit=base.time_limit,
            memory_mb=base.memory_mb, files=base.files, output_file=base.output_file,
            test_files=[{"input.txt": c[0]} for c in batch] if file_io else [],
        )
        (results,) = provider.execute([program])
        scores = check_outputs(provider, checker, batch, results) if checker else [float(r.passed) for r in results]
        scored += list(zip(results, scores))
        if any(r.status in (SANDBOX_ERROR, COMPILE_ERROR) for r in results):
            break
        if stop_on_failure and min(scores, default=1.0) <= 0.0:
            break
    return scored


def check_outputs(provider, checker: Program, cases, results: list[TestResult]) -> list[float]:
    """Runs the problem's checker (`checker input.txt correct_output.txt solution_output.txt`) once over every test
    that ran cleanly; its stdout is the test's score: "1" accepts (Codeforces), a number in [0, 1] is a partial
    score (CMS/IOI). A checker that fails makes the test wrong; a sandbox failure marks it `sandbox_error`."""
    scores = [0.0] * len(results)
    ran = [i for i, r in enumerate(results) if r.passed]
    for chunk in checker_chunks(ran, [len(results[i].stdout) for i in ran]):
        program = Program(
            code=checker.code, language=checker.language, inputs=[""] * len(chunk), time_limit=checker.time_limit,
            memory_mb=checker.memory_mb, argv=CHECKER_ARGS, files=checker.files,
            test_files=[{"input.txt": cases[i][0], "correct_output.txt": cases[i][1],
                         "solution_output.txt": results[i].stdout} for i in chunk],
        )
        (verdicts,) = provider.execute([program])
        for i, verdict in zip(chunk, verdicts):
            if verdict.status == SANDBOX_ERROR:
                results[i].status = SANDBOX_ERROR
                continue
            score = _checker_score(verdict) if verdict.status == PASSED else 0.0
            scores[i] = score
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
    if not isinstance(names, list):
        raise BadRow("test_names must be a list")
    cases = row.get("test_cases")
    if cases is None:
        if row.get("year") is None or row.get("id") is None:
            raise BadRow("ioi row has neither test_cases nor year and id to find its tests")
        try:
            cases = ioi_tests(source, str(row["year"])).get(str(row["id"]), {})
        except (OSError, ValueError, KeyError) as e:
            raise BadRow(f"tests for {row['id']} ({row['year']}) could not be loaded from {source}: {e}") from None
    if isinstance(cases, dict):
        missing = [n for n in names if n not in cases]
        if missing:
            raise BadRow(f"test_names {missing[:3]} have no test case")
        ordered = [cases[n] for n in names] if names else list(cases.values())
    elif isinstance(cases, list):
        ordered = cases
    else:
        raise BadRow("test_cases must be a mapping or a list")
    out = []
    for i, case in enumerate(ordered):
        if isinstance(case, (list, tuple)) and len(case) == 2:
            case = {"input": case[0], "output": case[1]}
        out.append((text_field(case, "input", f"test {i}"), text_field(case, "output", f"test {i}")))
    if not out:
        raise BadRow("ioi row has no test cases")
    return out


def grader_files(row: dict) -> tuple[dict[str, str], str | None]:
    """(files compiled with the solution, checker source or None) from `grader_files` [(name, content), ...]:
    graders and headers sit next to the solution (by base name); `checker/checker.cpp` is the checker."""
    files, checker = {}, None
    try:
        for name, content in row.get("grader_files") or []:
            if not content:
                continue
            name = str(name)
            if Path(name).stem == "checker" and name.endswith(".cpp"):
                checker = str(content)
            else:
                files[Path(name).name] = str(content)
    except (TypeError, ValueError):
        raise BadRow("grader_files must be a list of (name, content) pairs") from None
    return files, checker


def _precision(row: dict) -> int:
    value = row.get("score_precision")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10 else 2


def make_ioi_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    """`ioi_code`: the score of an IOI subtask, as Open-R1's reward returns it: the minimum test score over the
    subtask's tests (1.0 for a test whose output matches; a checker's partial score in (0, 1) when the problem has
    `checker/checker.cpp`), rounded to `score_precision`. The solution is compiled with the problem's grader files,
    after Open-R1's includes (`add_includes`). `rewards/ioi_code/points` logs the mean of points x score (the
    subtask's `score` column). None for a row that cannot be judged or a sandbox failure.

    Example row (`open-r1/ioi`): {"id": "nile", "year": 2024, "subtask": 1, "score": 6, "test_names": ["0-01", ...],
    "grader_files": [["graders/grader.cpp", ...], ["graders/nile.h", ...]], "time_limit": 2, "memory_limit": 2048}
    """
    if script_args.ioi_provider == "local":
        provider = local_provider(script_args)
    else:
        provider = get_provider(script_args.ioi_provider)
    warnings = RowWarnings("ioi_code")

    def ioi_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        rows = sample_rows(columns, len(completions))
        rewards: list[float | None] = []
        points: list[float] = []
        errors = bad = 0
        for index, (text, row) in enumerate(zip(texts(completions), rows)):
            try:
                cases = ioi_cases(row, script_args.ioi_test_cases)
                files, checker_source = grader_files(row)
                base = Program(code="", language="cpp", files=files,
                               time_limit=positive_number(row.get("time_limit"), "time_limit", 2.0),
                               memory_mb=int(positive_number(row.get("memory_limit"), "memory_limit", 512)))
            except BadRow as e:
                warnings.bad(index, row, str(e))
                bad += 1
                rewards.append(None)
                continue
            code = extract_code(text, "cpp")
            if not code.strip():
                rewards.append(0.0)
                continue
            base.code = add_includes(code, str(row.get("id", "")), files)
            checker = Program(checker_source, language="cpp", time_limit=10.0) if checker_source else None
            scored = run_cases(provider, base, cases, script_args.code_eval_test_batch_size, stop_on_failure=True,
                               checker=checker)
            if any(r.status == SANDBOX_ERROR for r, _ in scored):
                errors += 1
                rewards.append(None)
                continue
            score = min(s for _, s in scored) if len(scored) == len(cases) else 0.0
            score = round(score, _precision(row))
            rewards.append(score)
            if isinstance(row.get("score"), (int, float)):
                points.append(round(score * row["score"], _precision(row)))
        count_errors(log_metric, "ioi_code", errors, bad)
        if log_metric is not None and points:
            log_metric("rewards/ioi_code/points", sum(points) / len(points))
        return rewards

    return ioi_code_reward


# --------------------------------------------------------------------------------------------------------------------
# cf_code
# --------------------------------------------------------------------------------------------------------------------
def cf_score(passed: int, total: int, mode: str) -> float:
    """Open-R1's Codeforces scores: pass_fail (1 iff all pass), partial (fraction), weighted_sum (pass_fail + 0.1 x
    fraction)."""
    all_passed = float(passed == total)
    if mode == "pass_fail":
        return all_passed
    if mode == "partial":
        return passed / total
    if mode == "weighted_sum":
        return all_passed + 0.1 * passed / total
    raise ValueError(f"code_eval_scoring_mode must be pass_fail, partial or weighted_sum, got {mode!r}")


NO_COMPILE_REWARD, NO_SUBMISSION_REWARD = -0.1, -1.0


def contest_of(row: dict) -> int | None:
    """The contest number of a Codeforces row: `contest_id`, else the part of `id` before the slash ("2053/A")."""
    value = row.get("contest_id")
    if value is None and isinstance(row.get("id"), str):
        value = row["id"].split("/")[0]
    try:
        return int(value)
    except (TypeError, ValueError):
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


def make_cf_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    """`cf_code`: Codeforces score (`code_eval_scoring_mode`: pass_fail, partial or weighted_sum) over the row's
    `official_tests` plus its generated tests (`cf_tests_folder`, default `$CF_TESTS_FOLDER`), with the row's
    `generated_checker` when it has one, reading `input.txt` / writing `output.txt` when `input_mode` is "file", and
    Open-R1's code patches when `cf_patch_code` is set. -0.1 for a compile error, -1.0 for no code; None for a row
    that cannot be judged (or has no tests) or a sandbox failure.

    Example: 3 of 4 tests passed gives pass_fail 0.0, partial 0.75, weighted_sum 0.075; all passed, weighted_sum 1.1.
    """
    provider = make_provider(script_args)
    mode = script_args.code_eval_scoring_mode
    cf_score(1, 1, mode)  # fail at start-up on a bad mode
    folder = script_args.cf_tests_folder or os.environ.get("CF_TESTS_FOLDER") or None
    warnings = RowWarnings("cf_code")

    def cf_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        rows = sample_rows(columns, len(completions))
        rewards: list[float | None] = []
        errors = bad = 0
        for index, (text, row) in enumerate(zip(texts(completions), rows)):
            try:
                cases = cf_cases(row) + generated_tests(row, folder)
                if not cases:
                    raise BadRow("the problem has no tests (official or generated)")
                language = known_language(row.get("language"), script_args.code_language)
                input_mode = row.get("input_mode") or "stdin"
                if input_mode not in ("stdin", "file"):
                    raise BadRow(f"input_mode must be 'stdin' or 'file', got {input_mode!r}")
                base = Program(code="", language=language, output_file="output.txt" if input_mode == "file" else None,
                               time_limit=positive_number(row.get("time_limit"), "time_limit", 2.0),
                               memory_mb=int(positive_number(row.get("memory_limit"), "memory_limit", 256)))
                checker = row.get("generated_checker") or None
                if checker is not None and not isinstance(checker, str):
                    raise BadRow("generated_checker must be Python source text")
            except BadRow as e:
                warnings.bad(index, row, str(e))
                bad += 1
                rewards.append(None)
                continue
            code = extract_code(text, language)
            if not code.strip():
                rewards.append(NO_SUBMISSION_REWARD)
                continue
            base.code = patch_code(code, language) if script_args.cf_patch_code else code
            check = Program(checker, language="python", time_limit=10.0) if checker else None
            scored = run_cases(provider, base, cases, script_args.code_eval_test_batch_size,
                               stop_on_failure=mode == "pass_fail", checker=check)
            if any(r.status == SANDBOX_ERROR for r, _ in scored):
                errors += 1
                rewards.append(None)
            elif any(r.status == COMPILE_ERROR for r, _ in scored):
                rewards.append(NO_COMPILE_REWARD)
            else:
                rewards.append(cf_score(sum(s >= 1.0 for _, s in scored), len(cases), mode))
        count_errors(log_metric, "cf_code", errors, bad)
        return rewards

    return cf_code_reward
