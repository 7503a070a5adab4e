"""The benchmark registry: one list of names for every command, Open-R1's names, and LiveCodeBench / GPQA rows read
from local files of their Hub schemas."""

from __future__ import annotations

import argparse
import base64
import json
import pickle
import re
import zlib

import pytest

from r1kit import decontaminate, evaluation
from r1kit.benchmarking.benchmarks import NAMES, OPEN_R1, check_names, load
from r1kit.benchmarking.judges import score_choice, score_lcb
from r1kit.errors import ConfigError
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

    import r1kit.benchmarking.benchmarks

    assert listed_names(evaluation.add_parser) == listed_names(decontaminate.add_parser) == set(NAMES)
    monkeypatch.setattr(r1kit.benchmarking.benchmarks, "hub_problem", lambda repo_id, kind: None)  # offline here: Hub ids are fine
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


# --------------------------------------------------------------------------------------------------------------------
# Hostile benchmark rows: each is skipped and counted (never an exception, never inflated past its cap), and the
# good rows around it are still asked.
# --------------------------------------------------------------------------------------------------------------------
def packed(value) -> str:
    """LiveCodeBench's private-test encoding: base64(zlib(pickle(value)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


def test_livecodebench_private_tests_in_their_hub_encoding_load(tmp_path):
    tests = [{"input": "3\n", "output": "6\n", "testtype": "stdin"}, {"input": "4\n", "output": "8\n", "testtype": "stdin"}]
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(dict(LCB_ROWS[0], private_test_cases=packed(json.dumps(tests)))) + "\n")
    _, (item,) = load(str(path))
    assert [t["input"] for t in item["tests"]] == ["2\n", "3\n", "4\n"]


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def zlib_bomb(size: int) -> str:
    inflater = zlib.compressobj(9)
    return base64.b64encode(b"".join(inflater.compress(b"\0" * (1 << 20)) for _ in range(size >> 20))
                            + inflater.flush()).decode()


HOSTILE_LCB = {
    "zlib bomb": {"private_test_cases": zlib_bomb(64 << 20)},
    "pickled list": {"private_test_cases": packed([{"input": "1", "output": "1"}])},
    "pickled callable": {"private_test_cases": packed(Evil())},
    "pickled two strings": {"private_test_cases": packed(("[]", "[]"))},
    "not base64": {"private_test_cases": "%%% not base64 %%%"},
    "not zlib": {"private_test_cases": base64.b64encode(b"plain bytes").decode()},
    "non-mapping tests": {"public_test_cases": json.dumps([1, "x", [2]])},
    "number as input": {"public_test_cases": json.dumps([{"input": 2, "output": "4"}])},
    "nested input": {"public_test_cases": json.dumps([{"input": {"a": "b"}, "output": "4"}])},
    "unknown testtype": {"public_test_cases": json.dumps([{"input": "", "output": "", "testtype": "shell"}])},
    "functional output not JSON": {"public_test_cases": json.dumps([{"input": "1", "output": "[", "testtype": "functional"}])},
    "deep JSON": {"public_test_cases": "[" * 100_000 + "]" * 100_000},
    "JSON that balloons": {"public_test_cases": "[" + ",".join(["[]"] * 200_000) + "]"},
    "too many keys": {"public_test_cases": json.dumps([{f"k{i}": "" for i in range(100)} | {"input": "", "output": ""}])},
    "too many tests": {"public_test_cases": json.dumps([{"input": "", "output": ""}] * 5000)},
    "huge number": {"public_test_cases": '[{"input": "", "output": "", "n": ' + "9" * 5000 + "}]"},
    "tests not text": {"public_test_cases": 7},
    "metadata not JSON": {"metadata": "{"},
    "metadata a list": {"metadata": "[1]"},
    "func_name not text": {"metadata": json.dumps({"func_name": ["add"]})},
    "question not text": {"question_content": ["deep" * 3]},
}


def test_hostile_livecodebench_rows_are_skipped_counted_and_bounded(tmp_path, caplog, monkeypatch):
    import tracemalloc

    from r1kit.benchmarking.benchmarks import get

    cap = 8 << 20
    monkeypatch.setattr("r1kit.benchmarking.benchmarks.LCB_MAX_TEST_BYTES", cap)  # the 64 MiB bomb inflates 8x past it
    path = tmp_path / "lcb.jsonl"
    rows = [LCB_ROWS[0]] + [dict(LCB_ROWS[0], **change) for change in HOSTILE_LCB.values()] + [LCB_ROWS[1]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tracemalloc.start()
    try:
        with caplog.at_level("WARNING"):
            items, skipped = get(str(path)).read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [i["func_name"] for i in items] == [None, "add"] and skipped == len(HOSTILE_LCB)
    assert f"{len(HOSTILE_LCB)} row(s) cannot be asked or judged" in caplog.text
    assert peak < 3 * cap + (16 << 20)  # before: the bomb inflated whole (+1.5 GB for a 1.5 GB bomb)


def test_hostile_math_and_gpqa_rows_are_skipped(tmp_path):
    from r1kit.benchmarking.benchmarks import get

    math_rows = [{"problem": "1+1", "answer": "2"}, {"problem": ["x"], "answer": "2"}, {"problem": "2+2", "answer": {"a": 1}},
                 {"problem": "3+3", "answer": 6}]
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in math_rows))
    items, skipped = get(str(path)).read()
    assert [i["problem"] for i in items] == ["1+1", "3+3"] and skipped == 2
    gpqa = {"Question": "Which?", "Correct Answer": "Neon", "Incorrect Answer 1": "Iron", "Incorrect Answer 2": "C",
            "Incorrect Answer 3": "Na"}
    path = tmp_path / "gpqa.jsonl"
    path.write_text(json.dumps(gpqa) + "\n" + json.dumps(dict(gpqa, **{"Incorrect Answer 2": [[["deep"]]]})) + "\n")
    assert get(str(path)).read()[1] == 1


def test_a_benchmark_line_nested_too_deeply_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"problem": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        load(str(path))
