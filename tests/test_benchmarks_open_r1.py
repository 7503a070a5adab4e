"""The benchmark registry: one list of names for every command, Open-R1's names, and LiveCodeBench / GPQA rows read
from local files of their Hub schemas."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from r1kit import decontaminate, evaluation
from r1kit.benchmarks import NAMES, OPEN_R1, check_names, load
from r1kit.errors import ConfigError
from r1kit.judges import score_choice, score_lcb
from r1kit.sandbox.jail import probe


def test_open_r1_benchmark_names_are_known():
    assert set(OPEN_R1) <= set(NAMES)


def listed_names(add_parser) -> set[str]:
    """The built-in names a command's `--benchmarks` help lists."""
    parser = argparse.ArgumentParser()
    command = add_parser(parser.add_subparsers())
    (action,) = [a for a in command._actions if "--benchmarks" in a.option_strings]
    listed = re.match(r"comma-separated: (.*), or local \.jsonl files", action.help)
    return set(listed.group(1).split(", "))


def test_one_registry_names_the_benchmarks_of_every_command(monkeypatch):
    """`r1kit evaluate --help` lists, `r1kit decontaminate` accepts and the name check accepts the same names."""
    import datasets

    import r1kit.benchmarks

    assert listed_names(evaluation.add_parser) == listed_names(decontaminate.add_parser) == set(NAMES)
    monkeypatch.setattr(r1kit.benchmarks, "hub_problem", lambda repo_id, kind: None)  # offline here: Hub ids are fine
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_dict(
        {c: ["What is 2 + 2?"] for c in ("problem", "answer", "Question", "question_content")}))

    def unknown(check, name: str) -> bool:
        try:
            check(name)
        except ConfigError as e:
            return "unknown benchmark" in str(e)
        return False

    def accepted_by_decontaminate(name):
        return decontaminate.load_benchmark_questions(name)

    def accepted_by_check(name):
        check_names([name], files_must_exist=True)

    for check in (accepted_by_decontaminate, accepted_by_check):
        assert [name for name in NAMES if unknown(check, name)] == []
        assert unknown(check, "mmlu_pro") and unknown(check, "math500")


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
    bench, items = load(str(lcb_file))
    assert bench.judge is score_lcb and [len(i["tests"]) for i in items] == [2, 2]
    assert items[1]["func_name"] == "add" and "class Solution" in items[1]["problem"]


@pytest.mark.skipif(probe() is not None, reason="no jail here")
def test_livecodebench_is_scored_in_the_sandbox(lcb_file):
    _, items = load(str(lcb_file))
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
    bench, (item,) = load(str(path))
    assert bench.judge is score_choice
    letter = item["answer"]
    assert f"{letter}) Neon" in item["problem"]
    assert load(str(path))[1][0] == item  # same order every time
    wrong = next(x for x in "ABCD" if x != letter)
    assert score_choice([item], [[f"The answer is {letter}", f"I pick {wrong}"]]) == [[1.0, 0.0]]
