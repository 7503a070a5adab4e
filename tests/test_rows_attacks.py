"""Hostile dataset rows against the code rewards, and how the competitive rewards share the sandbox.

A row is data the trainer reads, not code, but a malformed or absurd one must never raise out of a reward, hang it or
balloon it: it scores None, is counted in `rewards/<name>/bad_rows` and is named once in a warning, and nothing runs.
Most cases use a provider that records what it is asked and runs nothing; the ones marked slow use the real jail.
"""

from __future__ import annotations

import threading
import time

import pytest

from r1kit.rewards.code import MAX_TESTS, check_code_rows, make_binary_code_reward, make_code_reward
from r1kit.rewards.competitive import make_cf_code_reward, make_ioi_code_reward
from r1kit.sandbox import PASSED, TIME_LIMIT
from r1kit.sandbox import TestResult as Outcome
from r1kit.sandbox.jail import probe
from tests.helpers import descendants

TC = [{"input": "1\n", "output": "1\n"}]
PYTHON = "```python\nprint(input())\n```"
LOOPING = "```python\nwhile True: pass\n```"


class Recorder:
    """A provider that runs nothing: a looping program times out, anything else prints what is expected. It records
    every call, and how many calls were ever in flight at once."""

    def __init__(self):
        self.calls: list[list[int]] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def execute(self, programs):
        with self.lock:
            self.calls.append([len(p.inputs) for p in programs])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.01)
        with self.lock:
            self.in_flight -= 1
        return [[Outcome(TIME_LIMIT) if "while True" in p.code or "for(;;)" in p.code
                 else Outcome(PASSED, stdout=e if e is not None else "1") for e in p.expected] for p in programs]


@pytest.fixture
def recorder(monkeypatch):
    fake = Recorder()
    monkeypatch.setattr("r1kit.rewards.code.get_provider", lambda name, **options: fake)
    return fake


def deep(levels: int = 100_000) -> list:
    """A list nested `levels` deep: its repr, str or JSON round trip passes Python's recursion limit."""
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


HOSTILE_VERIFICATION_INFO = {
    "memory_limit 0.5 (gigabytes?)": {"test_cases": TC, "memory_limit": 0.5},
    "memory_limit 0": {"test_cases": TC, "memory_limit": 0},
    "memory_limit 1e12": {"test_cases": TC, "memory_limit": 1e12},
    "memory_limit NaN": {"test_cases": TC, "memory_limit": float("nan")},
    "time_limit 1e9": {"test_cases": TC, "time_limit": 1e9},
    "time_limit 2000 (milliseconds?)": {"test_cases": TC, "time_limit": 2000},
    "time_limit inf": {"test_cases": TC, "time_limit": float("inf")},
    "time_limit 10**400": {"test_cases": TC, "time_limit": 10**400},
    "time_limit as text": {"test_cases": TC, "time_limit": "2"},
    "time_limit True": {"test_cases": TC, "time_limit": True},
    "JSON text nested too deeply": "[" * 100_000 + "]" * 100_000,
    "JSON object nested too deeply": '{"test_cases": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "test_cases nested too deeply": {"test_cases": deep()},
    "language nested too deeply": {"test_cases": TC, "language": deep()},
    "type nested too deeply": {"test_cases": [{"input": "", "output": "", "type": deep()}]},
    "id nested too deeply": {"test_cases": "x", "id": deep()},
    "input past the digit limit": {"test_cases": [{"input": 10**5000, "output": "1"}]},
    "more tests than an answer may run": {"test_cases": TC * (MAX_TESTS + 1)},
    "not a mapping": [TC],
    "a number": 7,
}


@pytest.mark.parametrize("name", ["code", "binary_code"])
def test_hostile_verification_info_scores_none_counted_and_runs_nothing(recorder, name, caplog):
    reward = (make_code_reward if name == "code" else make_binary_code_reward)(provider="piston")
    rows = list(HOSTILE_VERIFICATION_INFO.values())
    logged = {}
    with caplog.at_level("WARNING"):
        out = reward([LOOPING] * len(rows), verification_info=rows, log_metric=logged.__setitem__)
    assert out == [None] * len(rows) and recorder.calls == []
    assert logged[f"rewards/{name}/bad_rows"] == len(rows) and logged[f"rewards/{name}/sandbox_errors"] == 0
    assert all(len(r.getMessage()) < 600 for r in caplog.records)  # a deep or huge value is named briefly


def test_rows_at_the_bounds_still_run(recorder):
    rows = [{"test_cases": TC, "time_limit": 30, "memory_limit": 8192}, {"test_cases": TC, "memory_limit": 32},
            {"test_cases": TC * MAX_TESTS, "time_limit": 0.5}]
    assert make_code_reward(provider="piston")([PYTHON] * 3, verification_info=rows) == [1.0, 1.0, 1.0]


def test_the_dataset_check_counts_hostile_rows_instead_of_stopping(caplog):
    rows = [{"verification_info": info} for info in HOSTILE_VERIFICATION_INFO.values()]
    with caplog.at_level("WARNING"):
        check_code_rows(["code"], rows)
    assert f"{len(rows)} row(s) cannot be judged" in caplog.text


def cf_row(**changes) -> dict:
    return {"id": "7/A", "contest_id": 7, "language": "python", "official_tests": TC, "time_limit": 2,
            "memory_limit": 256, "input_mode": "stdin", **changes}


HOSTILE_CF = [cf_row(time_limit=1e9), cf_row(memory_limit=0.5), cf_row(language=deep()), cf_row(input_mode=deep()),
              cf_row(official_tests=TC * (MAX_TESTS + 1)), cf_row(official_tests=[{"input": 10**5000, "output": "1"}]),
              cf_row(id=deep(), official_tests="x")]
HOSTILE_IOI = [
    {"id": "p", "test_cases": [["1", "1"]], "time_limit": 1e9},
    {"id": "p", "test_cases": [["1", "1"]], "memory_limit": 0.5},
    {"id": deep(), "test_cases": [["1", "1"]]},
    {"id": "p", "year": deep(), "test_cases": None},
    {"id": "p", "test_cases": [["1", "1"]], "test_names": [deep()]},
    {"id": "p", "test_cases": [["1", "1"]], "grader_files": [["graders/..", "int x;"]]},
    {"id": "p", "test_cases": [["1", "1"]], "grader_files": [["nul\0.h", "int x;"]]},
    {"id": "p", "test_cases": [["1", "1"]], "grader_files": [["grader.cpp", deep()]]},
    {"id": "p", "test_cases": [["1", "1"]], "grader_files": {"grader.cpp": "x"}},
    {"id": "p", "test_cases": [["1", "1"]] * (MAX_TESTS + 1)},
]


def columns(rows: list[dict]) -> dict[str, list]:
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}


def test_hostile_cf_and_ioi_rows_score_none_and_run_nothing(recorder):
    logged = {}
    cf = make_cf_code_reward(provider="piston")
    assert cf([LOOPING] * len(HOSTILE_CF), log_metric=logged.__setitem__, **columns(HOSTILE_CF)) == [None] * len(HOSTILE_CF)
    ioi = make_ioi_code_reward(provider="piston")
    cpp = "```cpp\nint main(){for(;;);}\n```"
    out = ioi([cpp] * len(HOSTILE_IOI), log_metric=logged.__setitem__, **columns(HOSTILE_IOI))
    assert out == [None] * len(HOSTILE_IOI) and recorder.calls == []
    assert logged["rewards/cf_code/bad_rows"] == len(HOSTILE_CF) and logged["rewards/ioi_code/bad_rows"] == len(HOSTILE_IOI)


def test_ioi_points_of_an_absurd_size_are_ignored_not_raised(recorder):
    logged = {}
    row = {"id": "p", "test_cases": [["1", "1"]], "score": 10**400}
    assert make_ioi_code_reward(provider="piston")(["```cpp\nint main(){}\n```"], log_metric=logged.__setitem__,
                                                   **columns([row])) == [1.0]
    assert "rewards/ioi_code/points" not in logged


# --------------------------------------------------------------------------------------------------------------------
# cf_code and ioi_code score answers side by side, as code does
# --------------------------------------------------------------------------------------------------------------------
def test_cf_code_runs_every_answers_batch_in_one_call_per_round(recorder):
    """8 answers x 3 tests in batches of 1: 3 rounds of one provider call with the 8 programs each, never two calls
    at once, so the provider's own `num_parallel` is the one bound (before: 24 calls of one program, one after the
    other: 17.5 s against 8.2 s for `code` on looping tests)."""
    row = cf_row(official_tests=TC * 3)
    reward = make_cf_code_reward(provider="piston", test_batch_size=1, scoring_mode="partial")
    assert reward([PYTHON] * 8, **columns([row] * 8)) == [1.0] * 8
    assert recorder.calls == [[1] * 8] * 3 and recorder.most_in_flight == 1


def test_pass_fail_stops_only_the_answer_that_failed(recorder):
    row = cf_row(official_tests=TC * 3)
    reward = make_cf_code_reward(provider="piston", test_batch_size=1, scoring_mode="pass_fail")
    assert reward([LOOPING, PYTHON, LOOPING], **columns([row] * 3)) == [0.0, 1.0, 0.0]
    assert recorder.calls == [[1, 1, 1], [1], [1]]  # the looping answers stop after their first batch


def test_ioi_checkers_of_a_round_run_in_one_call(recorder):
    rows = [{"id": "p", "test_cases": [["1", "1"], ["2", "2"]],
             "grader_files": [["checker/checker.cpp", "int main(){}"]]}] * 4
    reward = make_ioi_code_reward(provider="piston", test_batch_size=0)
    out = reward(["```cpp\nint main(){}\n```"] * 4, **columns(rows))
    assert out == [1.0] * 4  # the recorder's checker prints "1"
    assert recorder.calls == [[2] * 4, [2] * 4]  # the programs in one call, then their checkers in one more


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no jail here: {probe()}")
def test_an_absurd_time_limit_cannot_hold_the_reward_with_a_looping_answer():
    """Before: `time_limit: 1e9` and `while True: pass` held the reward call for good (still running after 40 s)."""
    before = descendants()
    reward = make_code_reward(num_parallel=2)
    out = reward([LOOPING, LOOPING], verification_info=[{"test_cases": TC, "time_limit": 1e9},
                                                        {"test_cases": TC, "time_limit": 1}])
    assert out == [None, 0.0]  # the absurd limit refused (None), the sane one timed out (0.0): the call returned
    deadline = time.monotonic() + 5
    while descendants() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert descendants() - before == set()
