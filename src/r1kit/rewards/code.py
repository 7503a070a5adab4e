"""Code-execution rewards on Open-R1's `verification_info` rows (code, binary_code), run in a sandbox
(`r1kit.sandbox`), and what every code reward shares: code extraction, row validation, the provider, and the per-row
failure policy (`score_rows`). IOI and Codeforces live in `r1kit.rewards.competitive`.

Failure policy: a row that cannot be judged, or a sandbox that failed (could not start, remote 5xx), make the sample
`None`, counted in `rewards/<name>/bad_rows` or `rewards/<name>/sandbox_errors`; anything the program does (crash,
time-out, a harness it broke) scores like any wrong answer.
"""

from __future__ import annotations

import json
import logging
import reprlib
from collections.abc import Callable
from typing import Any, Protocol

from r1kit.errors import ConfigError
from r1kit.rewards.format import fenced_blocks
from r1kit.rewards.text import per_sample, texts
from r1kit.sandbox import LANGUAGES, SANDBOX_ERROR, Program, Provider, ProviderName, TestResult, get_provider
from r1kit.sandbox.jail import JailUnavailable, require_jail

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


# What a row may ask for. A row is data, not code, but a malformed or absurd one must not raise, hang or balloon
# the reward: past these bounds the row scores None (counted, named once), never clamped in silence.
MAX_TIME_LIMIT = 30.0  # seconds per test (Codeforces' longest is 15 s): a looping answer costs at most this per test
MIN_MEMORY_MB, MAX_MEMORY_MB = 32, 8192  # memory_limit, in MB (IOI's largest is 2048)
MAX_TESTS = 4096  # tests one row may run per answer

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60


def short(value: Any) -> str:
    """A bounded repr of a row value for a message: never deep (no RecursionError), never long, never raising."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int past Python's digit limit: its type says enough
        return f"<{type(value).__name__}>"


def as_mapping(value: Any, column: str = "verification_info") -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # RecursionError: nested past what the parser follows
            raise BadRow(f"{column} is a string that is not JSON (or is nested too deeply)") from None
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
    try:
        return str(value)
    except ValueError:  # an int past Python's digit limit
        raise BadRow(f"{where}: its {key!r} is a number too long to print") from None


def bounded_number(value: Any, name: str, default: float, low: float, high: float, unit: str) -> float:
    """A row's number, positive and in [low, high] (`default` when absent); anything else (a string, NaN, 0, 1e9) is a
    BadRow."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and low <= value <= high):
        raise BadRow(f"{name} must be a positive number of {unit}, at most {high:g}"
                     f"{f' and at least {low:g}' if low > 0 else ''}, got {short(value)}")  # NaN fails the test too
    return float(value)


def time_limit(value: Any, default: float) -> float:
    """A row's `time_limit` in seconds per test, at most MAX_TIME_LIMIT (a larger one is likely milliseconds)."""
    return bounded_number(value, "time_limit", default, 0.0, MAX_TIME_LIMIT, "seconds per test (not milliseconds)")


def memory_limit(value: Any, default: int) -> int:
    """A row's `memory_limit` in MB, from MIN_MEMORY_MB to MAX_MEMORY_MB (0.5 is likely gigabytes)."""
    return int(bounded_number(value, "memory_limit", default, MIN_MEMORY_MB, MAX_MEMORY_MB, "MB"))


def bounded_tests(cases: list, where: str = "the row") -> list:
    if len(cases) > MAX_TESTS:
        raise BadRow(f"{where} has {len(cases)} tests, more than the {MAX_TESTS} one answer may run")
    return cases


def known_language(value: Any, default: str) -> str:
    """A row's language (`default` when absent). A name the sandbox does not run is an "unknown language" (the
    dataset check stops on it); a value that is not a name at all is a malformed row."""
    if value is not None and not isinstance(value, str):
        raise BadRow(f"language must be a name, got {type(value).__name__}")
    language = normalise_language(value, default)
    if language not in LANGUAGES:
        raise BadRow(f"unknown language {short(value)}; supported: {', '.join(LANGUAGES)}")
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
    bounded_tests(cases, "verification_info")
    for i, case in enumerate(cases):
        if isinstance(case, dict) and case.get("type", "stdin_stdout") != "stdin_stdout":
            raise BadRow(f"test case {i} has type {short(case.get('type'))}; only stdin_stdout runs")
    return Program(
        code=extract_code(text, language), language=language,
        inputs=[text_field(c, "input", f"test case {i}") for i, c in enumerate(cases)],
        expected=[text_field(c, "output", f"test case {i}") for i, c in enumerate(cases)],
        time_limit=time_limit(info.get("time_limit"), 5.0),
        memory_mb=memory_limit(info.get("memory_limit"), 512),
    )


def unreadable(error: Exception) -> str:
    """The problem of a row that raised something other than BadRow while it was read (a shape no check foresaw)."""
    return f"the row could not be read ({type(error).__name__}: {short(str(error))})"


class RowWarnings:
    """Counts rows a reward could not judge and names each distinct problem once in a warning."""

    def __init__(self, reward: str):
        self.reward = reward
        self.seen: set[str] = set()

    def bad(self, index: int, row: dict, problem: str) -> None:
        if problem not in self.seen:
            self.seen.add(problem)
            ident = next((f" ({k} {short(row[k])})" for k in ("id", "problem_id", "name") if isinstance(row, dict) and k in row), "")
            logger.warning("%s: row at batch position %d%s cannot be judged and scores None: %s. Fix the dataset row.",
                           self.reward, index, ident, problem)


TEST_CASE_REWARDS = frozenset({"code", "binary_code"})  # the rewards on `verification_info` rows
CODE_PROVIDER_REWARDS = TEST_CASE_REWARDS | {"cf_code"}  # the rewards that run on `code_provider` (ioi_code: ioi_provider)


def check_code_rows(reward_names: list[str], dataset, default_language: str = "python") -> None:
    """Before training: every language a dataset declares must be one the sandbox runs (an error naming the rows),
    and malformed rows are counted in one warning (they will score None)."""
    names = set(reward_names)
    columns = set(getattr(dataset, "column_names", None) or (dataset[0].keys() if len(dataset) else []))
    if "ioi_code" in names and not ({"test_cases"} <= columns or {"year", "id"} <= columns):
        raise ValueError("dataset: ioi_code needs inline test_cases, or year and id columns to find the tests in "
                         "ioi_test_cases (Open-R1's open-r1/ioi rows have year and id)")
    if not names & CODE_PROVIDER_REWARDS:
        return
    unknown, bad = {}, []
    for index, row in enumerate(dataset):
        try:
            if names & TEST_CASE_REWARDS and "verification_info" in row:
                test_cases_program(row["verification_info"], "", default_language)
            if "cf_code" in names and row.get("language") is not None:
                known_language(row["language"], default_language)
        except BadRow as e:
            if "unknown language" in str(e):
                unknown.setdefault(str(e), []).append(index)
            else:
                bad.append((index, str(e)))
        except Exception as e:  # noqa: BLE001 - no row shape may stop the run here: it scores None in training
            bad.append((index, unreadable(e)))
    if unknown:
        problem, rows = next(iter(unknown.items()))
        raise ValueError(f"dataset: {problem} (rows {rows[:5]}{' ...' if len(rows) > 5 else ''}); remove those rows or "
                         "convert them to a supported language")
    if bad:
        logger.warning("dataset: %d row(s) cannot be judged by the code rewards and will score None; first: row %d: %s",
                       len(bad), *bad[0])


class CodeExecutionFields(Protocol):
    """The recipe fields the code-execution checks read (GRPO's script arguments)."""

    reward_funcs: list[str]
    code_provider: str
    ioi_provider: str
    allow_unsandboxed_code_execution: bool


def uses_local_sandbox(script_args: CodeExecutionFields) -> bool:
    """Whether a selected code reward runs in the local sandbox."""
    names = set(script_args.reward_funcs)
    return bool(names & CODE_PROVIDER_REWARDS and script_args.code_provider == "local"
                or "ioi_code" in names and script_args.ioi_provider == "local")


def check_code_execution(script_args: CodeExecutionFields) -> None:
    """Before anything loads: a run whose code rewards use the local sandbox needs a jail here (or the explicit
    `allow_unsandboxed_code_execution` opt-in). Raises ConfigError saying what to install or which provider to use."""
    if not uses_local_sandbox(script_args) or script_args.allow_unsandboxed_code_execution:
        return
    try:
        require_jail()
    except JailUnavailable as e:
        raise ConfigError(str(e)) from None


def make_provider(provider: ProviderName = "local", num_parallel: int | None = None, allow_unsandboxed: bool = False,
                  e2b_router_url: str | None = None, morph_router_url: str | None = None) -> Provider:
    """The sandbox a code reward runs in.

    Args:
        provider (`str`, defaults to `"local"`): `local` (a jail here), `piston`, `e2b` or `morph`.
        num_parallel (`int` or `None`, defaults to `None`): programs run at once per process; `None` is the
            provider's default (the number of cores, for `local`).
        allow_unsandboxed (`bool`, defaults to `False`): `local` only: where no jail can run, run programs with only
            resource limits instead of refusing.
        e2b_router_url (`str` or `None`), morph_router_url (`str` or `None`): the router of `e2b` / `morph`
            (`host:port`); `None` uses their SDKs.
    """
    if provider == "local":
        return get_provider("local", num_parallel=num_parallel, isolate=not allow_unsandboxed)
    options: dict[str, Any] = {"num_parallel": num_parallel}
    router_url = {"e2b": e2b_router_url, "morph": morph_router_url}.get(provider)
    if router_url:
        options["router_url"] = router_url
    return get_provider(provider, **options)


def count_errors(log_metric, name: str, count: int, bad_rows: int = 0) -> None:
    """Logs `rewards/<name>/sandbox_errors` (infrastructure failures) and `rewards/<name>/bad_rows` (rows that cannot
    be judged); both score None."""
    if log_metric is not None:
        log_metric(f"rewards/{name}/sandbox_errors", float(count))
        log_metric(f"rewards/{name}/bad_rows", float(bad_rows))
    if count:
        logger.warning("%s: %d sample(s) could not be judged (sandbox failure); scored None.", name, count)


# --------------------------------------------------------------------------------------------------------------------
# The per-row skeleton of every code reward
# --------------------------------------------------------------------------------------------------------------------
Job = tuple[Program, Any]  # a sample ready to run: the answer's program, and what its reward needs to run and score it
Tests = list[tuple[TestResult, float]]  # per test run: its result and its score in [0, 1]


def score_rows(name: str, completions: list, rows: list, warnings: RowWarnings,
               build: Callable[[str, Any], Job], run: Callable[[list[Job]], list[Tests]],
               score: Callable[[Job, Tests], float], no_code: float, log_metric=None) -> list[float | None]:
    """Scores each completion against its row, with the failure policy of every code reward written once.

    1. `build(text, row)` gives the sample's job; a row that cannot be judged raises `BadRow` (any other exception is
       taken as one too): None, counted in `rewards/<name>/bad_rows` and named once per problem in a warning.
    2. An answer without code scores `no_code` and is not run.
    3. `run(jobs)` runs the rest, all at once (so that a provider can run them side by side), and gives each job's
       tests.
    4. A job with a `sandbox_error` (the back end failed, not the program): None, counted in
       `rewards/<name>/sandbox_errors`.
    5. Otherwise `score(job, tests)`.

    Returns:
        `list[float | None]`: one score per completion.
    """
    rewards: list[float | None] = [None] * len(completions)
    todo: list[tuple[int, Job]] = []
    bad = errors = 0
    for index, (text, row) in enumerate(zip(texts(completions), rows)):
        try:
            job = build(text, row)
        except Exception as e:  # noqa: BLE001 - BadRow names the problem; no other row shape may raise either
            warnings.bad(index, row, str(e) if isinstance(e, BadRow) else unreadable(e))
            bad += 1
            continue
        if job[0].code.strip():
            todo.append((index, job))
        else:
            rewards[index] = no_code  # no code in the answer: fails every test
    for (index, job), tests in zip(todo, run([job for _, job in todo]) if todo else []):
        if any(result.status == SANDBOX_ERROR for result, _ in tests):
            errors += 1
        else:
            rewards[index] = score(job, tests)
    count_errors(log_metric, name, errors, bad)
    return rewards


# --------------------------------------------------------------------------------------------------------------------
# code / binary_code
# --------------------------------------------------------------------------------------------------------------------
def _make_test_case_reward(name: str, binary: bool, language: str, **sandbox) -> Callable:
    provider = make_provider(**sandbox)
    warnings = RowWarnings(name)

    def build(text: str, info: Any) -> Job:
        return test_cases_program(info, text, language), None

    def run(jobs: list[Job]) -> list[Tests]:
        return [[(t, float(t.passed)) for t in tests] for tests in provider.execute([program for program, _ in jobs])]

    def score(job: Job, tests: Tests) -> float:
        if binary:  # all or nothing: one failing test in any number is 0.0 (a threshold paid 149 of 150)
            return float(all(s == 1.0 for _, s in tests))
        return sum(s for _, s in tests) / len(tests)

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
        rows = per_sample(verification_info, len(completions))
        return score_rows(name, completions, rows, warnings, build, run, score, 0.0, log_metric)

    reward.__name__ = f"{name}_reward"
    return reward


def make_code_reward(provider: ProviderName = "local", language: str = "python", num_parallel: int | None = None,
                     allow_unsandboxed: bool = False, e2b_router_url: str | None = None,
                     morph_router_url: str | None = None) -> Callable:
    """Builds `code`: the fraction of a row's test cases (`verification_info`) the answer's last fenced block passes,
    run in the sandbox and compared whole (a missing line is wrong). None for a row that cannot be judged or a sandbox
    failure, counted in `rewards/code/bad_rows` and `rewards/code/sandbox_errors`.

    Args:
        provider (`str`, defaults to `"local"`): the sandbox (`make_provider`; recipe: `code_provider`).
        language (`str`, defaults to `"python"`): language of rows that name none (recipe: `code_language`).
        num_parallel (`int` or `None`, defaults to `None`): programs run at once (recipe: `parallel_code_exec_per_proc`).
        allow_unsandboxed (`bool`, defaults to `False`): `local` without a jail (recipe:
            `allow_unsandboxed_code_execution`).
        e2b_router_url (`str` or `None`), morph_router_url (`str` or `None`): routers of the remote sandboxes.

    Returns:
        `Callable`: `code_reward(completions, verification_info, log_metric=None, **kwargs)`.
    """
    return _make_test_case_reward("code", False, language, provider=provider, num_parallel=num_parallel,
                                  allow_unsandboxed=allow_unsandboxed, e2b_router_url=e2b_router_url,
                                  morph_router_url=morph_router_url)


def make_binary_code_reward(provider: ProviderName = "local", language: str = "python", num_parallel: int | None = None,
                            allow_unsandboxed: bool = False, e2b_router_url: str | None = None,
                            morph_router_url: str | None = None) -> Callable:
    """Builds `binary_code`: 1.0 when every test case passes, else 0.0; None as for `code`. Args as for
    `make_code_reward`."""
    return _make_test_case_reward("binary_code", True, language, provider=provider, num_parallel=num_parallel,
                                  allow_unsandboxed=allow_unsandboxed, e2b_router_url=e2b_router_url,
                                  morph_router_url=morph_router_url)


def sample_rows(columns: dict, n: int) -> list[dict]:
    """Per-sample dicts of the dataset columns TRL passed as lists (trainer helpers left out)."""
    skip = {"prompts", "completion_ids", "trainer_state", "log_extra", "environments"}
    lists = {k: per_sample(v, n) for k, v in columns.items() if k not in skip}
    return [{k: v[i] for k, v in lists.items()} for i in range(n)]
