"""Open-R1's benchmark names, and LiveCodeBench / GPQA rows read from local files of their Hub schemas."""

from __future__ import annotations

import json

import pytest

from r1kit.evaluation import BUILTIN_BENCHMARKS, OPEN_R1_BENCHMARKS, load_benchmark, score_choice, score_lcb
from r1kit.sandbox.jail import probe


def test_open_r1_benchmark_names_are_known():
    assert set(OPEN_R1_BENCHMARKS) <= set(BUILTIN_BENCHMARKS)


LCB_ROWS = [
    {"question_title": "double", "question_content": "Read n and print 2n.", "platform": "atcoder",
     "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
     "private_test_cases": json.dumps([{"input": "21\n", "output": "42\n", "testtype": "stdin"}]),
     "starter_code": "", "metadata": "{}"},
    {"question_title": "add", "question_content": "Return a + b.", "platform": "leetcode",
     "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"},
                                      {"input": "[1]\n[2]", "output": "[1, 2]", "testtype": "functional"}]),
     "private_test_cases": "", "starter_code": "class Solution:\n    def add(self, a, b):\n        ",
     "metadata": json.dumps({"func_name": "add"})},
]


@pytest.fixture
def lcb_file(tmp_path):
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in LCB_ROWS))
    return path


def test_livecodebench_rows_load_with_every_test(lcb_file):
    scorer, items = load_benchmark(str(lcb_file))
    assert scorer == "lcb" and [len(i["tests"]) for i in items] == [2, 2]
    assert items[1]["func_name"] == "add" and "class Solution" in items[1]["problem"]


@pytest.mark.skipif(probe() is not None, reason="no jail here")
def test_livecodebench_is_scored_in_the_sandbox(lcb_file):
    _, items = load_benchmark(str(lcb_file))
    completions = [
        ["```python\nprint(2 * int(input()))\n```", "```python\nprint(4)\n```"],  # right; right on public only
        ["```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```",
         "```python\nclass Solution:\n    def add(self, a, b):\n        class E:\n            def __eq__(s, o): return True\n"
         "        return E()\n```"],  # right; an always-equal object cannot be printed as JSON: wrong
    ]
    assert score_lcb(items, completions) == [[1.0, 0.0], [1.0, 0.0]]


def test_gpqa_rows_become_a_fixed_multiple_choice(tmp_path):
    row = {"Question": "Which is a noble gas?", "Correct Answer": "Neon", "Incorrect Answer 1": "Iron",
           "Incorrect Answer 2": "Carbon", "Incorrect Answer 3": "Sodium"}
    path = tmp_path / "gpqa.jsonl"
    path.write_text(json.dumps(row) + "\n")
    scorer, (item,) = load_benchmark(str(path))
    assert scorer == "choice"
    letter = item["answer"]
    assert f"{letter}) Neon" in item["problem"]
    assert load_benchmark(str(path))[1][0] == item  # same order every time
    wrong = next(x for x in "ABCD" if x != letter)
    assert score_choice([item], [[f"The answer is {letter}", f"I pick {wrong}"]]) == [[1.0, 0.0]]
