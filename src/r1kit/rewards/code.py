"""Code-execution rewards on Open-R1's `verification_info` rows (code, binary_code), run in a sandbox
(`r1kit.sandbox`), and what every code reward shares: code extraction, row validation, the provider, the counters.
IOI and Codeforces live in `r1kit.rewards.competitive`.

Failure policy: a row that cannot be judged, or a sandbox that failed (could not start, remote 5xx), make the sample
`None`, counted in `rewards/<name>/bad_rows` or `rewards/<name>/sandbox_errors`; anything the program does (crash,
time-out, a harness it broke) scores like any wrong answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from r1kit.errors import ConfigError
from r1kit.rewards.format import fenced_blocks
from r1kit.rewards.text import per_sample, texts
from r1kit.sandbox import LANGUAGES, SANDBOX_ERROR, Program, get_provider

logger = logging.getLogger(__name__)

FENCE_NAMES = {"python": ("python", "py", "python3"), "cpp": ("cpp", "c++", "cc")}


def normalise_language(language: str | None, default: str = "python") -> str:
    lang = (language or default).lower()
    return {"py": "python", "python3": "python", "c++": "cpp", "c++17": "cpp", "cc": "cpp"}.get(lang, lang)


def extract_code(text: str, language: str) -> str:
    """The last fenced block of `language` in `text`, or "" when there is none."""
    blocks = [b for name in FENCE_NAMES.get(language, (language,)) for b in _indexed_blocks(text, name)]
    return max(blocks)[1] if blocks else ""


def _indexed_blocks(text: str, name: str) -> list[tuple[int, str]]:
    found, start = [], 0
    for block in fenced_blocks(text, name):
        start = text.find(block, start)
        found.append((start, block))
    return found


class BadRow(ValueError):
    """A dataset row the reward cannot judge; the message names the problem."""


def as_mapping(value: Any, column: str = "verification_info") -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadRow(f"{column} is a string that is not JSON") from None
    if not isinstance(value, dict):
        raise BadRow(f"{column} must be a mapping (or a JSON object), got {type(value).__name__}")
    return value


def text_field(case: Any, key: str, where: str) -> str:
    """A test's input or output: a string (numbers are taken as their text); missing or None is a bad row, never
    "empty"."""
    if not isinstance(case, dict):
        raise BadRow(f"{where} must be a mapping with 'input' and 'output', got {type(case).__name__}")
    value = case.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRow(f"{where} has no usable {key!r} (got {type(value).__name__})")
    return str(value)


def positive_number(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise BadRow(f"{name} must be a positive number, got {value!r}")
    return float(value)


def known_language(value: Any, default: str) -> str:
    language = normalise_language(value if isinstance(value, str) else None, default)
    if value is not None and not isinstance(value, str) or language not in LANGUAGES:
        raise BadRow(f"unknown language {value!r}; supported: {', '.join(LANGUAGES)}")
    return language


def test_cases_program(info: Any, text: str, default_language: str) -> Program:
    """The program a `verification_info` row asks for (Open-R1's schema: language, test_cases [{input, output,
    type}], optional time_limit and memory_limit), with the completion's code. Raises BadRow for a row that cannot
    be judged."""
    info = as_mapping(info)
    language = known_language(info.get("language"), default_language)
    cases = info.get("test_cases")
    if not isinstance(cases, list) or not cases:
        raise BadRow("verification_info has no test_cases list")
    for i, case in enumerate(cases):
        if isinstance(case, dict) and case.get("type", "stdin_stdout") != "stdin_stdout":
            raise BadRow(f"test case {i} has type {case.get('type')!r}; only stdin_stdout runs")
    return Program(
        code=extract_code(text, language), language=language,
        inputs=[text_field(c, "input", f"test case {i}") for i, c in enumerate(cases)],
        expected=[text_field(c, "output", f"test case {i}") for i, c in enumerate(cases)],
        time_limit=positive_number(info.get("time_limit"), "time_limit", 5.0),
        memory_mb=int(positive_number(info.get("memory_limit"), "memory_limit", 512)),
    )


class RowWarnings:
    """Counts rows a reward could not judge and names each distinct problem once in a warning."""

    def __init__(self, reward: str):
        self.reward = reward
        self.seen: set[str] = set()

    def bad(self, index: int, row: dict, problem: str) -> None:
        if problem not in self.seen:
            self.seen.add(problem)
            ident = next((f" ({k} {row[k]!r})" for k in ("id", "problem_id", "name") if isinstance(row, dict) and k in row), "")
            logger.warning("%s: row at batch position %d%s cannot be judged and scores None: %s. Fix the dataset row.",
                           self.reward, index, ident, problem)


def check_code_rows(reward_names: list[str], dataset, default_language: str = "python") -> None:
    """Before training: every language a dataset declares must be one the sandbox runs (an error naming the rows),
    and malformed rows are counted in one warning (they will score None)."""
    names = set(reward_names)
    columns = set(getattr(dataset, "column_names", None) or (dataset[0].keys() if len(dataset) else []))
    if "ioi_code" in names and not ({"test_cases"} <= columns or {"year", "id"} <= columns):
        raise ValueError("dataset: ioi_code needs inline test_cases, or year and id columns to find the tests in "
                         "ioi_test_cases (Open-R1's open-r1/ioi rows have year and id)")
    if not names & {"code", "binary_code", "cf_code"}:
        return
    unknown, bad = {}, []
    for index, row in enumerate(dataset):
        try:
            if names & {"code", "binary_code"} and "verification_info" in row:
                test_cases_program(row["verification_info"], "", default_language)
            if "cf_code" in names and row.get("language") is not None:
                known_language(row["language"], default_language)
        except BadRow as e:
            if "unknown language" in str(e):
                unknown.setdefault(str(e), []).append(index)
            else:
                bad.append((index, str(e)))
    if unknown:
        problem, rows = next(iter(unknown.items()))
        raise ValueError(f"dataset: {problem} (rows {rows[:5]}{' ...' if len(rows) > 5 else ''}); remove those rows or "
                         "convert them to a supported language")
    if bad:
        logger.warning("dataset: %d row(s) cannot be judged by the code rewards and will score None; first: row %d: %s",
                       len(bad), *bad[0])


CODE_REWARDS = ("code", "binary_code", "cf_code", "ioi_code")


def uses_local_sandbox(script_args: Any) -> bool:
    names = set(script_args.reward_funcs)
    return bool(names & {"code", "binary_code", "cf_code"} and script_args.code_provider == "local"
                or "ioi_code" in names and script_args.ioi_provider == "local")


def check_code_execution(script_args: Any) -> None:
    """Before anything loads: a run whose code rewards use the local sandbox needs a jail here (or the explicit
    `allow_unsandboxed_code_execution` opt-in). Raises ConfigError saying what to install or which provider to use."""
    if not uses_local_sandbox(script_args) or script_args.allow_unsandboxed_code_execution:
        return
    from r1kit.sandbox.jail import JailUnavailable, require_jail

    try:
        require_jail()
    except JailUnavailable as e:
        raise ConfigError(str(e)) from None


def local_provider(script_args: Any):
    """The local sandbox as the recipe configures it (concurrency, and the explicit no-jail opt-in)."""
    return get_provider("local", num_parallel=script_args.parallel_code_exec_per_proc,
                        isolate=not script_args.allow_unsandboxed_code_execution)


def make_provider(script_args: Any):
    """The provider `code_provider` names, with its router URL when one is configured."""
    if script_args.code_provider == "local":
        return local_provider(script_args)
    options: dict[str, Any] = {"num_parallel": script_args.parallel_code_exec_per_proc}
    if script_args.code_provider == "e2b" and script_args.e2b_router_url:
        options["router_url"] = script_args.e2b_router_url
    if script_args.code_provider == "morph" and script_args.morph_router_url:
        options["router_url"] = script_args.morph_router_url
    return get_provider(script_args.code_provider, **options)


def count_errors(log_metric, name: str, count: int, bad_rows: int = 0) -> None:
    """Logs `rewards/<name>/sandbox_errors` (infrastructure failures) and `rewards/<name>/bad_rows` (rows that cannot
    be judged); both score None."""
    if log_metric is not None:
        log_metric(f"rewards/{name}/sandbox_errors", float(count))
        log_metric(f"rewards/{name}/bad_rows", float(bad_rows))
    if count:
        logger.warning("%s: %d sample(s) could not be judged (sandbox failure); scored None.", name, count)


# --------------------------------------------------------------------------------------------------------------------
# code / binary_code
# --------------------------------------------------------------------------------------------------------------------
def _test_programs(completions, verification_info, default_language: str, rows: RowWarnings) -> list[Program | None]:
    """One program per sample, or None when its row cannot be judged (warned once per problem)."""
    programs: list[Program | None] = []
    for index, (text, info) in enumerate(zip(texts(completions), per_sample(verification_info, len(completions)))):
        try:
            programs.append(test_cases_program(info, text, default_language))
        except BadRow as e:
            rows.bad(index, info, str(e))
            programs.append(None)
    return programs


def _pass_fractions(provider, programs: list[Program | None]) -> tuple[list[float | None], int]:
    """Fraction of tests passed per program; None for a row that cannot be judged or a sandbox failure (the count
    of those is returned); 0.0 for an answer without code."""
    runnable = [p for p in programs if p is not None and p.code.strip()]
    results = iter(provider.execute(runnable))
    fractions: list[float | None] = []
    errors = 0
    for program in programs:
        if program is None:
            fractions.append(None)
        elif not program.code.strip():
            fractions.append(0.0)  # no code in the answer: fails every test
        else:
            tests = next(results)
            if any(t.status == SANDBOX_ERROR for t in tests):
                errors += 1
                fractions.append(None)
            else:
                fractions.append(sum(t.passed for t in tests) / len(tests))
    return fractions, errors


def _make_test_case_reward(name: str, script_args: Any, binary: bool) -> Callable:
    provider = make_provider(script_args)
    rows = RowWarnings(name)

    def reward(completions, verification_info=None, log_metric=None, **kwargs) -> list[float | None]:
        """Runs each completion's last fenced block on its row's test cases in the sandbox.

        Args:
            completions (`list`): completions, plain or conversational.
            verification_info (`list[dict | str]`): Open-R1's rows: `{language, test_cases: [{input, output}],
                time_limit?, memory_limit?}`, as mappings or JSON text.

        Returns:
            `list[float | None]`: the fraction of tests passed (code) or 1.0 / 0.0 (binary_code); 0.0 for no code;
            None for a row that cannot be judged or a sandbox failure.

        Example:
            >>> reward(["```python\nprint(2)\n```"], verification_info=[{"test_cases": [{"input": "", "output": "2"}]}])
            [1.0]
        """
        programs = _test_programs(completions, verification_info, script_args.code_language, rows)
        fractions, errors = _pass_fractions(provider, programs)
        count_errors(log_metric, name, errors, sum(p is None for p in programs))
        if binary:
            return [None if f is None else float(f > 0.99) for f in fractions]
        return fractions

    reward.__name__ = f"{name}_reward"
    return reward


def make_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    """`code`: the fraction of a row's test cases (`verification_info`) the answer's last fenced block passes,
    run in the sandbox and compared whole (a missing line is wrong). None for a row that cannot be judged or a sandbox
    failure, both counted in `rewards/code/sandbox_errors`."""
    return _make_test_case_reward("code", script_args, binary=False)


def make_binary_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    """`binary_code`: 1.0 when every test case passes, else 0.0; None as for `code`."""
    return _make_test_case_reward("binary_code", script_args, binary=True)


def sample_rows(columns: dict, n: int) -> list[dict]:
    """Per-sample dicts of the dataset columns TRL passed as lists (trainer helpers left out)."""
    skip = {"prompts", "completion_ids", "trainer_state", "log_extra", "environments"}
    lists = {k: per_sample(v, n) for k, v in columns.items() if k not in skip}
    return [{k: v[i] for k, v in lists.items()} for i in range(n)]
