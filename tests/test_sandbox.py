"""The local sandbox and the code rewards: 22 hand-written problems, and hostile programs that must stay contained."""

from __future__ import annotations

import pytest

from r1kit.config.schema import GRPOScriptArguments
from r1kit.errors import ConfigError
from r1kit.rewards import get_reward_funcs
from r1kit.rewards.code import make_binary_code_reward, make_code_reward
from r1kit.rewards.competitive import make_cf_code_reward, make_ioi_code_reward
from r1kit.sandbox import (
    SANDBOX_ERROR,
    Program,
    get_provider,
    outputs_match,
)
from r1kit.sandbox.jail import probe

ISOLATED = probe() is None
pytestmark = pytest.mark.skipif(not ISOLATED, reason=f"no jail here: {probe()}")

# (name, tests [(stdin, expected stdout)], {kind: python code}); kinds: correct, wrong, crash, slow, loop
PROBLEMS = [
    ("sum", [("1 2\n", "3\n"), ("-5 5\n", "0\n")], {
        "correct": "a, b = map(int, input().split())\nprint(a + b)",
        "wrong": "a, b = map(int, input().split())\nprint(a + b + 1)",
    }),
    ("reverse", [("abc\n", "cba\n"), ("x\n", "x\n")], {
        "correct": "print(input()[::-1])", "crash": "print(input()[::-1] + 1)",
    }),
    ("max", [("3\n1 9 4\n", "9\n")], {"correct": "input()\nprint(max(map(int, input().split())))", "wrong": "input()\nprint(min(map(int, input().split())))"}),
    ("vowels", [("banana\n", "3\n"), ("xyz\n", "0\n")], {"correct": "print(sum(c in 'aeiou' for c in input()))"}),
    ("factorial", [("5\n", "120\n"), ("10\n", "3628800\n")], {
        "correct": "import math\nprint(math.factorial(int(input())))",
        "slow": "import time\ntime.sleep(5)\nprint(1)",
    }),
    ("fib", [("10\n", "55\n"), ("1\n", "1\n")], {
        "correct": "n=int(input())\na,b=0,1\nfor _ in range(n): a,b=b,a+b\nprint(a)",
        "loop": "while True:\n    pass",
    }),
    ("prime", [("7\n", "YES\n"), ("8\n", "NO\n")], {
        "correct": "n=int(input())\nprint('YES' if n>1 and all(n%d for d in range(2,int(n**.5)+1)) else 'NO')",
        "wrong": "print('MAYBE')",
    }),
    ("sort", [("3 1 2\n", "1 2 3\n")], {"correct": "print(*sorted(map(int, input().split())))"}),
    ("gcd", [("12 18\n", "6\n")], {"correct": "import math\nprint(math.gcd(*map(int, input().split())))"}),
    ("palindrome", [("abba\n", "True\n"), ("ab\n", "False\n")], {"correct": "s=input()\nprint(s==s[::-1])"}),
    ("count_up", [("3\n", "1\n2\n3\n")], {
        "correct": "for i in range(1, int(input())+1): print(i)",
        "wrong": "input()\nprint(1)",  # truncated output: Open-R1's zip accepted it
    }),
    ("words", [("a bb  ccc\n", "3\n")], {"correct": "print(len(input().split()))"}),
    ("transpose", [("1 2\n3 4\n", "1 3\n2 4\n")], {
        "correct": "import sys\nrows=[l.split() for l in sys.stdin.read().splitlines()]\nfor c in zip(*rows): print(*c)",
    }),
    ("binary", [("5\n", "101\n")], {"correct": "print(bin(int(input()))[2:])"}),
    ("digits", [("1234\n", "10\n")], {"correct": "print(sum(map(int, input())))", "crash": "import sys\nsys.exit(3)"}),
    ("upper", [("hi there\n", "HI THERE\n")], {"correct": "print(input().upper())"}),
    ("second", [("4 1 3\n", "3\n")], {"correct": "print(sorted(map(int, input().split()))[-2])"}),
    ("distinct", [("1 1 2\n", "2\n")], {"correct": "print(len(set(input().split())))"}),
    ("running", [("1 2 3\n", "1 3 6\n")], {
        "correct": "import itertools\nprint(*itertools.accumulate(map(int, input().split())))",
    }),
    ("spaces", [("2\n", "a  b   \n\n\n")], {"correct": "input()\nprint('a b')"}),  # whitespace-normalised, trailing blank lines
    ("cpp_sum", [("1 2\n", "3\n")], {
        "correct": "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";}",
        "wrong": "#include <iostream>\nint main(){std::cout<<42<<\"\\n\";}",
    }),
    ("cpp_loop", [("1\n", "1\n")], {"loop": "int main(){volatile int x=0; while(true){x++;}}"}),
]
EXPECTED = {"correct": 1.0, "wrong": 0.0, "crash": 0.0, "slow": 0.0, "loop": 0.0}


def completion(code: str, language: str) -> str:
    return f"<think>easy</think><answer>\n```{language}\n{code}\n```\n</answer>"


def cases_for(kinds: set[str]):
    for name, tests, solutions in PROBLEMS:
        language = "cpp" if name.startswith("cpp") else "python"
        for kind, code in solutions.items():
            if kind in kinds:
                info = {"language": language, "time_limit": 1.5,
                        "test_cases": [{"input": i, "output": o, "type": "stdin_stdout"} for i, o in tests]}
                yield f"{name}-{kind}", completion(code, language), info, EXPECTED[kind]


FACTORIES = {"code": make_code_reward, "binary_code": make_binary_code_reward, "cf_code": make_cf_code_reward,
             "ioi_code": make_ioi_code_reward}


def reward(name: str, **params):
    return FACTORIES[name](num_parallel=2, **params)


def test_there_are_twenty_plus_problems():
    assert len(PROBLEMS) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("name", ["code", "binary_code"])
def test_problems_score_as_expected(name):
    cases = list(cases_for(set(EXPECTED)))
    rewards = reward(name)([c[1] for c in cases], verification_info=[c[2] for c in cases])
    assert {c[0]: r for c, r in zip(cases, rewards)} == {c[0]: c[3] for c in cases}


def test_code_reward_is_the_fraction_of_tests_passed():
    info = {"test_cases": [{"input": "1\n", "output": "1\n"}, {"input": "2\n", "output": "2\n"}, {"input": "3\n", "output": "9\n"}]}
    code = completion("print(input())", "python")
    assert reward("code")([code], verification_info=[info]) == [pytest.approx(2 / 3)]
    assert reward("binary_code")([code], verification_info=[info]) == [0.0]


def test_zero_tests_is_none_and_missing_code_is_zero():
    logged = {}
    out = reward("code")(
        [completion("print(1)", "python"), "no code here"],
        verification_info=[{"test_cases": []}, {"test_cases": [{"input": "", "output": "1"}]}],
        log_metric=logged.__setitem__,
    )
    assert out == [None, 0.0] and logged["rewards/code/sandbox_errors"] == 0.0


def test_sandbox_failure_is_none_not_zero(monkeypatch):
    from r1kit.sandbox import jail

    monkeypatch.setattr(jail, "find_bwrap", lambda: "/nonexistent/bwrap")  # the jail cannot start: infrastructure
    logged = {}
    out = reward("code")(
        [completion("print(1)", "python")], verification_info=[{"test_cases": [{"input": "", "output": "1"}]}],
        log_metric=logged.__setitem__,
    )
    assert out == [None] and logged["rewards/code/sandbox_errors"] == 1.0


def test_last_fenced_block_of_the_rows_language_is_run():
    text = "```python\nprint(1)\n```\nthen\n```cpp\nint main(){}\n```\n```python\nprint(2)\n```"
    info = {"language": "python", "test_cases": [{"input": "", "output": "2"}]}
    assert reward("code")([text], verification_info=[info]) == [1.0]


def test_output_comparison():
    assert outputs_match("1 2\n3\n", "1  2 \n3\n\n")
    assert not outputs_match("1\n", "1\n2\n")  # a missing line is wrong
    assert not outputs_match("1\n2\n", "1\n")  # an extra line is wrong


CHECKER = """import sys
inp, correct, got = (open(p).read().split() for p in sys.argv[1:4])
print(1 if sorted(got) == sorted(correct) else 0)
"""


def cf_row(checker=None, **kw):
    tests = [{"input": "3\n", "output": "1 2 3\n"}, {"input": "2\n", "output": "1 2\n"}, {"input": "1\n", "output": "1\n"}]
    return {"official_tests": tests, "generated_checker": checker, "language": "python", "time_limit": 1.5, **kw}


@pytest.mark.parametrize(
    ("code", "mode", "checker", "expected"),
    [
        ("print(*range(1, int(input())+1))", "weighted_sum", None, 1.1),
        ("print(*range(int(input()), 0, -1))", "weighted_sum", None, pytest.approx(0.1 * 1 / 3)),  # only n=1 matches
        ("print(*range(int(input()), 0, -1))", "weighted_sum", CHECKER, 1.1),  # any order accepted by the checker
        ("print(*range(int(input()), 0, -1))", "partial", None, pytest.approx(1 / 3)),
        ("print(*range(int(input()), 0, -1))", "pass_fail", None, 0.0),
        ("while True: pass", "partial", None, 0.0),
        ("print(1/0)", "weighted_sum", CHECKER, 0.0),
    ],
)
@pytest.mark.slow
def test_cf_code_scoring_and_checkers(code, mode, checker, expected):
    func = reward("cf_code", scoring_mode=mode, test_batch_size=-1)
    assert func([completion(code, "python")], **{k: [v] for k, v in cf_row(checker).items()}) == [expected]


def test_cf_code_no_code_compile_error_and_no_tests():
    func = reward("cf_code")
    rows = [cf_row(), cf_row(language="cpp"), cf_row(official_tests=[])]
    texts = ["no code", completion("int main( {", "cpp"), completion("print(1)", "python")]
    assert func(texts, **{k: [r[k] for r in rows] for k in rows[0]}) == [-1.0, -0.1, None]


@pytest.mark.slow
def test_ioi_subtask_is_the_minimum_over_its_tests():
    func = reward("ioi_code", test_batch_size=1)
    ok = "#include <iostream>\nint main(){long a;std::cin>>a;std::cout<<a*2<<std::endl;}"
    half = "#include <iostream>\nint main(){long a;std::cin>>a;std::cout<<(a<3?a*2:0)<<std::endl;}"
    row = {"test_cases": {"t1": {"input": "1", "output": "2"}, "t2": {"input": "5", "output": "10"}},
           "test_names": ["t1", "t2"], "id": "double", "subtask": 1, "time_limit": 1, "memory_limit": 256}
    out = func([completion(ok, "cpp"), completion(half, "cpp"), "none"], **{k: [v] * 3 for k, v in row.items()})
    assert out == [1.0, 0.0, 0.0]


def test_provider_names():
    with pytest.raises(ValueError, match="unknown code provider"):
        get_provider("nope")
    assert SANDBOX_ERROR == "sandbox_error"


# --------------------------------------------------------------------------------------------------------------------
# Rows are validated: a malformed row scores None (counted, named once), never "expect empty output"
# --------------------------------------------------------------------------------------------------------------------
BAD_ROWS = {
    "not a mapping": 5,
    "a string that is not JSON": "test_cases: many",
    "test_cases not a list": {"test_cases": "1 -> 1"},
    "no test cases": {"test_cases": []},
    "missing output": {"test_cases": [{"input": "1\n"}]},
    "output None": {"test_cases": [{"input": "1\n", "output": None}]},
    "missing input": {"test_cases": [{"output": "None\n"}]},
    "case not a mapping": {"test_cases": ["1"]},
    "unknown language": {"language": "brainfuck", "test_cases": [{"input": "", "output": ""}]},
    "language not a string": {"language": 3, "test_cases": [{"input": "", "output": ""}]},
    "time_limit 0": {"time_limit": 0, "test_cases": [{"input": "", "output": ""}]},
    "time_limit negative": {"time_limit": -1, "test_cases": [{"input": "", "output": ""}]},
    "time_limit text": {"time_limit": "fast", "test_cases": [{"input": "", "output": ""}]},
    "memory_limit 0": {"memory_limit": 0, "test_cases": [{"input": "", "output": ""}]},
}


@pytest.mark.parametrize("name", ["code", "binary_code"])
def test_malformed_rows_score_none_and_are_counted(name, caplog):
    func, logged = reward(name), {}
    texts = [completion("pass", "python"), completion("print(None)", "python")] * len(BAD_ROWS)
    rows = [row for row in BAD_ROWS.values() for _ in range(2)]
    with caplog.at_level("WARNING"):
        out = func(texts, verification_info=rows, log_metric=logged.__setitem__)
    assert out == [None] * len(rows)
    assert logged[f"rewards/{name}/bad_rows"] == len(rows) and logged[f"rewards/{name}/sandbox_errors"] == 0
    warnings = [r.message for r in caplog.records if "cannot be judged" in r.message]
    assert len(warnings) == len(set(warnings)) >= len(BAD_ROWS) - 2  # each problem named once, not once per sample


def test_malformed_cf_and_ioi_rows_score_none():
    cf = reward("cf_code")
    rows = [cf_row(official_tests="x"), cf_row(official_tests=[{"input": "1"}]), cf_row(language="ruby"),
            cf_row(time_limit=-2), cf_row(generated_checker=7)]
    assert cf([completion("print(1)", "python")] * len(rows), **{k: [r[k] for r in rows] for k in rows[0]}) == [None] * 5
    ioi = reward("ioi_code")
    ioi_rows = [{"test_cases": "x", "test_names": [], "id": "p", "subtask": 1},
                {"test_cases": {"a": {"input": "1"}}, "test_names": ["a"], "id": "p", "subtask": 1},
                {"test_cases": {"a": {"input": "1", "output": "2"}}, "test_names": ["b"], "id": "p", "subtask": 1},
                {"test_cases": [["1", "2"]], "test_names": [], "id": "p", "subtask": 1, "grader_files": 3}]
    texts = [completion("int main(){}", "cpp")] * len(ioi_rows)
    assert ioi(texts, **{k: [r.get(k) for r in ioi_rows] for k in ioi_rows[-1]}) == [None] * 4


def test_unknown_languages_stop_before_training():
    from r1kit.rewards.code import check_code_rows

    rows = [{"verification_info": {"language": "python", "test_cases": [{"input": "", "output": ""}]}},
            {"verification_info": {"language": "haskell", "test_cases": [{"input": "", "output": ""}]}}]
    with pytest.raises(ValueError, match=r"unknown language 'haskell'.*rows \[1\]"):
        check_code_rows(["code"], rows)
    check_code_rows(["code"], rows[:1])


def test_without_a_jail_local_code_rewards_stop_before_training(monkeypatch):
    from r1kit.rewards.code import check_code_execution
    from r1kit.sandbox import jail, local

    args = GRPOScriptArguments(dataset_name="x", reward_funcs=["code"])
    monkeypatch.setattr(jail, "find_bwrap", lambda: None)
    jail.probe.cache_clear()
    try:
        with pytest.raises(ConfigError, match="bubblewrap.*allow_unsandboxed_code_execution"):
            check_code_execution(args)
        check_code_execution(GRPOScriptArguments(dataset_name="x", reward_funcs=["code"], code_provider="piston"))
        opted_in = GRPOScriptArguments(dataset_name="x", reward_funcs=["code"], allow_unsandboxed_code_execution=True)
        check_code_execution(opted_in)
        assert isinstance(get_reward_funcs(opted_in)[0], object)
        unsandboxed = local.LocalProvider(isolate=False)
        (result,), = unsandboxed.execute([Program("print(input())", inputs=["hi\n"], expected=["hi\n"])])
        assert result.passed
    finally:
        monkeypatch.undo()
        jail.probe.cache_clear()


def test_a_sandbox_without_a_compiler_cannot_judge_cpp(monkeypatch):
    """No g++ is the machine's fault, not the program's: None (skipped and counted), never a compile error."""
    from r1kit.sandbox import local

    source = local.harness_source().replace('COMPILER = "/usr/bin/g++"', 'COMPILER = "/usr/bin/no-such-g++"')
    monkeypatch.setattr(local, "harness_source", lambda: source)
    cpp = {"language": "cpp", "test_cases": [{"input": "", "output": "1"}]}
    logged = {}
    out = reward("code")([completion("int main(){return 0;}", "cpp")], verification_info=[cpp],
                         log_metric=logged.__setitem__)
    assert out == [None] and logged["rewards/code/sandbox_errors"] == 1.0
