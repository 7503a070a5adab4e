"""Code-execution rewards: code, binary_code (Open-R1's `verification_info` rows), ioi_code (IOI subtasks) and
cf_code (Codeforces, with checker programs), scored in a sandbox (`r1kit.sandbox`).

Failure policy: zero test cases, or a sandbox that failed (could not start, remote 5xx), make the sample `None` and
are counted in `rewards/<name>/sandbox_errors`; a program that fails its tests scores like any wrong answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from r1kit.rewards._text import per_sample, texts
from r1kit.rewards.format import fenced_blocks
from r1kit.sandbox import COMPILE_ERROR, SANDBOX_ERROR, Program, TestResult, get_provider

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


def _as_dict(value: Any) -> dict:
    if isinstance(value, str):
        return json.loads(value)
    return dict(value or {})


def make_provider(script_args: Any):
    options: dict[str, Any] = {"num_parallel": script_args.parallel_code_exec_per_proc}
    if script_args.code_provider == "e2b" and script_args.e2b_router_url:
        options["router_url"] = script_args.e2b_router_url
    if script_args.code_provider == "morph" and script_args.morph_router_url:
        options["router_url"] = script_args.morph_router_url
    return get_provider(script_args.code_provider, **options)


def _count_errors(log_metric, name: str, count: int) -> None:
    if log_metric is not None:
        log_metric(f"rewards/{name}/sandbox_errors", float(count))
    if count:
        logger.warning("%s: %d sample(s) could not be judged (sandbox error); scored None.", name, count)


# --------------------------------------------------------------------------------------------------------------------
# code / binary_code
# --------------------------------------------------------------------------------------------------------------------
def _test_programs(completions, verification_info, default_language: str) -> list[Program | None]:
    """One program per sample, or None when the sample has no test case."""
    programs: list[Program | None] = []
    for text, info in zip(texts(completions), per_sample(verification_info, len(completions))):
        info = _as_dict(info)
        language = normalise_language(info.get("language"), default_language)
        cases = [c for c in info.get("test_cases") or [] if c.get("type", "stdin_stdout") == "stdin_stdout"]
        if not cases:
            programs.append(None)
            continue
        programs.append(
            Program(
                code=extract_code(text, language),
                language=language,
                inputs=[str(c.get("input", "")) for c in cases],
                expected=[str(c.get("output", "")) for c in cases],
                time_limit=float(info.get("time_limit", 5.0)),
                memory_mb=int(info.get("memory_limit", 512)),
            )
        )
    return programs


def _pass_fractions(provider, programs: list[Program | None]) -> tuple[list[float | None], int]:
    runnable = [p for p in programs if p is not None and p.code.strip()]
    results = iter(provider.execute(runnable))
    fractions: list[float | None] = []
    errors = 0
    for program in programs:
        if program is None:
            fractions.append(None)  # no test case: nothing to judge
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


def make_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    provider = make_provider(script_args)

    def code_reward(completions, verification_info=None, log_metric=None, **kwargs) -> list[float | None]:
        fractions, errors = _pass_fractions(provider, _test_programs(completions, verification_info, script_args.code_language))
        _count_errors(log_metric, "code", errors)
        return fractions

    return code_reward


def make_binary_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    provider = make_provider(script_args)

    def binary_code_reward(completions, verification_info=None, log_metric=None, **kwargs) -> list[float | None]:
        fractions, errors = _pass_fractions(provider, _test_programs(completions, verification_info, script_args.code_language))
        _count_errors(log_metric, "binary_code", errors)
        return [None if f is None else float(f > 0.99) for f in fractions]

    return binary_code_reward


# --------------------------------------------------------------------------------------------------------------------
# Test batches with early stopping (IOI, Codeforces)
# --------------------------------------------------------------------------------------------------------------------
def _batches(items: list, size: int) -> list[list]:
    """Chunks of `size`; `size <= 0` means everything at once (Open-R1's generator yielded nothing then)."""
    if size <= 0:
        return [items] if items else []
    return [items[i : i + size] for i in range(0, len(items), size)]


def run_in_batches(provider, base: Program, cases: list[tuple[str, str]], batch_size: int, stop_on_failure: bool,
                   checker: str | None = None) -> list[TestResult]:
    """Runs `cases` (input, expected) in batches, stopping after a batch with a failure when asked."""
    results: list[TestResult] = []
    for batch in _batches(cases, batch_size):
        program = Program(
            code=base.code, language=base.language, inputs=[c[0] for c in batch],
            expected=[None if checker else c[1] for c in batch], time_limit=base.time_limit,
            memory_mb=base.memory_mb, files=base.files,
        )
        (batch_results,) = provider.execute([program])
        if checker:
            batch_results = _apply_checker(provider, checker, batch, batch_results)
        results.extend(batch_results)
        if any(r.status in (SANDBOX_ERROR, COMPILE_ERROR) for r in batch_results):
            break
        if stop_on_failure and not all(r.passed for r in batch_results):
            break
    return results


def _apply_checker(provider, checker: str, cases, results: list[TestResult]) -> list[TestResult]:
    """Runs the problem's checker (`checker.py input.txt correct_output.txt solution_output.txt`, printing 1 to
    accept) on every test that ran cleanly."""
    from r1kit.sandbox import WRONG_ANSWER

    to_check = [i for i, r in enumerate(results) if r.passed]
    programs = [
        Program(
            code=checker, language="python", inputs=[""], time_limit=10.0,
            argv=["input.txt", "correct_output.txt", "solution_output.txt"],
            files={"input.txt": cases[i][0], "correct_output.txt": cases[i][1], "solution_output.txt": results[i].stdout},
        )
        for i in to_check
    ]
    for i, (verdict,) in zip(to_check, provider.execute(programs)):
        if verdict.status == SANDBOX_ERROR:
            results[i].status = SANDBOX_ERROR
        elif verdict.status != "passed" or verdict.stdout.strip() != "1":
            results[i].status = WRONG_ANSWER
    return results


def _rows(columns: dict, n: int) -> list[dict]:
    """Per-sample dicts of the dataset columns TRL passed as lists (trainer helpers left out)."""
    skip = {"prompts", "completion_ids", "trainer_state", "log_extra", "environments"}
    lists = {k: per_sample(v, n) for k, v in columns.items() if k not in skip}
    return [{k: v[i] for k, v in lists.items()} for i in range(n)]


# --------------------------------------------------------------------------------------------------------------------
# ioi_code
# --------------------------------------------------------------------------------------------------------------------
def _ioi_cases(row: dict) -> list[tuple[str, str]]:
    cases = row.get("test_cases") or {}
    names = row.get("test_names") or []
    if isinstance(cases, dict):
        ordered = [cases[n] for n in names] if names else list(cases.values())
    else:
        ordered = list(cases)
    out = []
    for case in ordered:
        if isinstance(case, dict):
            out.append((str(case.get("input", "")), str(case.get("output", ""))))
        else:
            out.append((str(case[0]), str(case[1])))
    return out


def make_ioi_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    """IOI subtask score (Open-R1's rule): the minimum over the subtask's tests, 1.0 for a passed test, else 0.0."""
    if script_args.ioi_provider == "local":
        provider = get_provider("local", num_parallel=script_args.parallel_code_exec_per_proc)
    else:
        provider = get_provider(script_args.ioi_provider)

    def ioi_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        rows = _rows(columns, len(completions))
        rewards: list[float | None] = []
        errors = 0
        for text, row in zip(texts(completions), rows):
            try:
                cases = _ioi_cases(row)
            except (KeyError, IndexError, TypeError, ValueError):  # malformed test cases: cannot judge
                cases = []
            if not cases:
                rewards.append(None)
                continue
            code = extract_code(text, "cpp")
            if not code.strip():
                rewards.append(0.0)
                continue
            grader_files = {name: content for name, content in (row.get("grader_files") or []) if content}
            base = Program(code=code, language="cpp", time_limit=float(row.get("time_limit") or 2.0),
                           memory_mb=int(row.get("memory_limit") or 512), files=grader_files)
            results = run_in_batches(provider, base, cases, script_args.code_eval_test_batch_size, stop_on_failure=True)
            if any(r.status == SANDBOX_ERROR for r in results):
                errors += 1
                rewards.append(None)
            else:
                rewards.append(float(len(results) == len(cases) and all(r.passed for r in results)))
        _count_errors(log_metric, "ioi_code", errors)
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


def make_cf_code_reward(script_args: Any, training_args: Any = None) -> Callable:
    provider = make_provider(script_args)
    mode = script_args.code_eval_scoring_mode
    cf_score(1, 1, mode)  # fail at start-up on a bad mode

    def cf_code_reward(completions, log_metric=None, **columns) -> list[float | None]:
        rows = _rows(columns, len(completions))
        rewards: list[float | None] = []
        errors = 0
        for text, row in zip(texts(completions), rows):
            tests = row.get("official_tests") or []
            cases = [(str(t.get("input", "")), str(t.get("output", ""))) for t in tests]
            if not cases:
                rewards.append(None)
                continue
            language = normalise_language(row.get("language"), script_args.code_language)
            code = extract_code(text, language)
            if not code.strip():
                rewards.append(NO_SUBMISSION_REWARD)
                continue
            base = Program(code=code, language=language, time_limit=float(row.get("time_limit") or 2.0),
                           memory_mb=int(row.get("memory_limit") or 256))
            results = run_in_batches(
                provider, base, cases, script_args.code_eval_test_batch_size,
                stop_on_failure=mode == "pass_fail", checker=row.get("generated_checker") or None,
            )
            if any(r.status == SANDBOX_ERROR for r in results):
                errors += 1
                rewards.append(None)
            elif any(r.status == COMPILE_ERROR for r in results):
                rewards.append(NO_COMPILE_REWARD)
            else:
                rewards.append(cf_score(sum(r.passed for r in results), len(cases), mode))
        _count_errors(log_metric, "cf_code", errors)
        return rewards

    return cf_code_reward
