"""IOI and Codeforces as Open-R1 runs them, on small local problems: tests from a separate test-case dataset,
graders and headers, subtasks, checker scores, generated tests, file I/O and code patching."""

from __future__ import annotations

import json

import pytest

from r1kit.rewards.competitive import add_includes, make_cf_code_reward, make_ioi_code_reward, patch_code
from r1kit.sandbox.jail import probe

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no jail here: {probe()}")

HEADER = "long long sum_two(long long a, long long b);\n"
GRADER = ('#include <cstdio>\n#include "sumtwo.h"\n'
          'int main(){long long a,b; if(scanf("%lld %lld",&a,&b)!=2) return 1; printf("%lld\\n", sum_two(a,b)); return 0;}\n')
GRADERS = [["graders/grader.cpp", GRADER], ["graders/sumtwo.h", HEADER]]
CORRECT = "long long sum_two(long long a, long long b) { return a + b; }"
INT_ONLY = "long long sum_two(long long a, long long b) { return (int)a + (int)b; }"  # overflows on subtask 2
TESTS = {"1-01": ("1 2\n", "3\n"), "1-02": ("5 7\n", "12\n"),
         "2-01": ("3000000000 3000000000\n", "6000000000\n"), "2-02": ("1 4000000000\n", "4000000001\n")}
SUBTASKS = [{"id": "sumtwo", "year": 2024, "subtask": 1, "score": 30, "score_precision": 2,
             "test_names": ["1-01", "1-02"], "grader_files": GRADERS, "time_limit": 2, "memory_limit": 256},
            {"id": "sumtwo", "year": 2024, "subtask": 2, "score": 70, "score_precision": 2,
             "test_names": ["2-01", "2-02"], "grader_files": GRADERS, "time_limit": 2, "memory_limit": 256}]


def ioi_reward(test_cases: str, **kw):
    return make_ioi_code_reward(test_cases=test_cases, num_parallel=1, **kw)


def fence(code: str, language: str = "cpp") -> str:
    return f"Here it is.\n```{language}\n{code}\n```"


@pytest.fixture
def ioi_tests_file(tmp_path):
    path = tmp_path / "ioi-test-cases" / "2024.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"problem_id": "sumtwo", "test_name": n, "test_input": i, "test_output": o}) + "\n"
                            for n, (i, o) in TESTS.items()))
    return path


def score(reward, code: str, rows: list[dict], **columns) -> list:
    keys = sorted({k for r in rows for k in r})
    return reward([fence(code)] * len(rows), **{k: [r.get(k) for r in rows] for k in keys}, **columns)


@pytest.mark.slow
def test_ioi_subtasks_with_tests_from_a_local_folder_and_file(ioi_tests_file):
    logged = {}
    for source in (ioi_tests_file.parent, ioi_tests_file):  # a folder of per-year files, or one file
        reward = ioi_reward(str(source))
        assert score(reward, CORRECT, SUBTASKS) == [1.0, 1.0]
        assert score(reward, INT_ONLY, SUBTASKS, log_metric=logged.__setitem__) == [1.0, 0.0]
        assert logged["rewards/ioi_code/points"] == 15.0  # (30 x 1 + 70 x 0) / 2
        assert score(reward, "int main( {", SUBTASKS) == [0.0, 0.0]


def test_ioi_includes_are_open_r1s():
    code = add_includes("long long sum_two(long long a, long long b) { return a + b; }", "sumtwo")
    assert code.splitlines()[:3] == ["#include <bits/stdc++.h>", '#include "sumtwo.h"', "using namespace std;"]
    assert "using namespace" not in add_includes("int f(){ return std::max(1, 2); }", "p").split("\n")[1]
    assert add_includes("", "p") == ""


CHECKER = r"""#include <cstdio>
int main(int argc, char** argv){
    long long want, got;
    FILE* c = fopen(argv[2], "r"); FILE* s = fopen(argv[3], "r");
    if (!c || !s || fscanf(c, "%lld", &want) != 1 || fscanf(s, "%lld", &got) != 1) { printf("0\n"); return 0; }
    long long d = want > got ? want - got : got - want;
    printf(d == 0 ? "1\n" : d <= 1 ? "0.333333\n" : "0\n");
}
"""


@pytest.mark.slow
def test_ioi_checker_scores_are_partial_and_rounded(ioi_tests_file):
    rows = [dict(SUBTASKS[0], grader_files=[*GRADERS, ["checker/checker.cpp", CHECKER]])]
    off_by_one = "long long sum_two(long long a, long long b) { return a + b + 1; }"
    reward = ioi_reward(str(ioi_tests_file.parent))
    assert score(reward, off_by_one, rows) == [0.33]  # score_precision 2
    assert score(reward, CORRECT, rows) == [1.0]


def test_ioi_rows_without_tests_anywhere_score_none(ioi_tests_file):
    row = dict(SUBTASKS[0], id="unknown-problem")
    assert score(ioi_reward(str(ioi_tests_file)), CORRECT, [row]) == [None]


# --------------------------------------------------------------------------------------------------------------------
# Codeforces
# --------------------------------------------------------------------------------------------------------------------
def cf_reward(**kw):
    return make_cf_code_reward(num_parallel=1, test_batch_size=-1, **kw)


def cf_row(**kw):
    return {"id": "7/A", "contest_id": 7, "language": "python", "official_tests": [{"input": "2\n", "output": "4\n"}],
            "generated_checker": None, "time_limit": 2, "memory_limit": 256, "input_mode": "stdin", **kw}


def cf_score(reward, code: str, row: dict, language: str = "python"):
    return reward([fence(code, language)], **{k: [v] for k, v in row.items()})[0]


@pytest.fixture
def cf_folder(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [("7/A", "3\n", "6\n"), ("7/A", "10\n", "20\n"), ("7/B", "1\n", "1\n")]
    table = pa.table({"problem_id": [r[0] for r in rows], "input": [r[1] for r in rows], "output": [r[2] for r in rows]})
    pq.write_table(table, tmp_path / "test_cases_0007.parquet")
    return tmp_path


def test_cf_generated_tests_are_added_to_the_official_ones(cf_folder, monkeypatch):
    doubles_small = "n = int(input())\nprint(n * 2 if n < 10 else 0)"  # passes 2 of the 3 tests
    assert cf_score(cf_reward(scoring_mode="partial"), doubles_small, cf_row()) == 1.0  # official only
    partial = cf_reward(scoring_mode="partial", tests_folder=str(cf_folder))
    assert cf_score(partial, doubles_small, cf_row()) == pytest.approx(2 / 3)
    monkeypatch.setenv("CF_TESTS_FOLDER", str(cf_folder))  # Open-R1's variable works too
    assert cf_score(cf_reward(scoring_mode="partial"), doubles_small, cf_row()) == pytest.approx(2 / 3)


@pytest.mark.slow
def test_cf_file_input_mode(cf_folder):
    reads_file = "n = int(open('input.txt').read())\nopen('output.txt', 'w').write(str(2 * n) + '\\n')"
    reward = cf_reward(scoring_mode="weighted_sum", tests_folder=str(cf_folder))
    assert cf_score(reward, reads_file, cf_row(input_mode="file")) == pytest.approx(1.1)
    assert cf_score(reward, "print(2 * int(input()))", cf_row(input_mode="file")) == pytest.approx(0.0)  # stdin is empty
    cpp = ('#include <cstdio>\nint main(){long n; FILE* f=fopen("input.txt","r"); fscanf(f,"%ld",&n);'
           ' FILE* o=fopen("output.txt","w"); fprintf(o,"%ld\\n",2*n);}')
    assert cf_score(reward, cpp, cf_row(input_mode="file", language="cpp"), "cpp") == pytest.approx(1.1)


@pytest.mark.slow
def test_cf_patch_code_fixes_moved_imports():
    old_python = "from fractions import gcd\nn = int(input())\nprint(gcd(n, 6) * 2)"
    assert cf_score(cf_reward(), old_python, cf_row()) == 0.0
    assert cf_score(cf_reward(patch=True), old_python, cf_row()) == pytest.approx(1.1)
    no_includes = "int main(){ long n; cin >> n; cout << 2 * n << endl; }"
    assert cf_score(cf_reward(), no_includes, cf_row(language="cpp"), "cpp") == -0.1  # compile error
    assert cf_score(cf_reward(patch=True), no_includes, cf_row(language="cpp"), "cpp") == pytest.approx(1.1)


def test_patch_code_leaves_modern_code_working():
    code = "from collections.abc import Mapping\nimport math\nprint(math.gcd(4, 6))"
    patched = patch_code(code, "python")
    assert "from collections.abc import Mapping" in patched and patched.endswith(code.splitlines()[-1])
    assert patch_code("", "python") == ""
