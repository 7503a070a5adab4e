"""`r1kit decontaminate`: the rows that share an n-gram with a benchmark go, and only those; the report, the
benchmark schemas, the errors and the output folder."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.benchmarking.benchmarks import load
from r1kit.decontaminate import (
    NgramIndex,
    QuestionSet,
    add_parser,
    decontaminate,
    load_benchmark_questions,
    run,
)
from r1kit.errors import ConfigError

QUESTION = ("Let ABC be a triangle with AB = 13, BC = 14 and CA = 15. The incircle of the triangle touches side BC "
            "at D. Find the length of the segment AD.")
OTHER = ("A bag contains five red marbles and seven blue marbles. Two marbles are drawn at random without "
         "replacement. What is the probability that both marbles are red?")
SAFE = "Compute the number of positive divisors of 2024 that are perfect squares, and explain why."


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def dataset_of(texts: list[str], column: str = "problem"):
    from datasets import Dataset

    return Dataset.from_dict({column: texts, "id": list(range(len(texts)))})


def args_for(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    required = ["decontaminate", "--dataset", overrides.pop("dataset"), "--benchmarks", overrides.pop("benchmarks"),
                "--output", overrides.pop("output")]
    extra = [x for key, value in overrides.items() for x in (f"--{key}", str(value))]
    return parser.parse_args(required + extra)


# --------------------------------------------------------------------------------------------------------------------
# What is removed
# --------------------------------------------------------------------------------------------------------------------
def test_removes_exactly_the_planted_overlaps():
    index = NgramIndex.build([QuestionSet("bench", [QUESTION])], n=8)
    rows = {
        "eight shared words": "Warm-up: the incircle of the triangle touches side BC at a point; go on.",
        "whole question": QUESTION,
        "case and whitespace differ": "Hint:  THE Incircle\tof the\n\nTRIANGLE   touches side bc at some point.",
        "seven shared words": "Warm-up: the incircle of the triangle touches side AB instead.",
        "punctuation differs": "Warm-up: the incircle of the triangle, touches side BC at.",
        "unrelated": SAFE,
        "empty": "",
    }
    kept, report = decontaminate(dataset_of(list(rows.values())), "problem", index)

    names = list(rows)
    removed = [names[r["row"]] for r in report["removed_rows"]]
    assert removed == ["eight shared words", "whole question", "case and whitespace differ"]
    assert [names[i] for i in kept["id"]] == ["seven shared words", "punctuation differs", "unrelated", "empty"]
    assert (report["rows"], report["removed"], report["kept"]) == (7, 3, 4)


def test_ngram_size_is_an_option():
    index = NgramIndex.build([QuestionSet("bench", [QUESTION])], n=7)
    kept, report = decontaminate(dataset_of(["Warm-up: the incircle of the triangle touches side AB instead."]),
                                 "problem", index)
    assert report["removed"] == 1 and len(kept) == 0


def test_conversation_columns_are_compared_by_their_contents():
    from datasets import Dataset

    index = NgramIndex.build([QuestionSet("bench", [QUESTION])], n=8)
    messages = [[{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "AD = 12"}],
                [{"role": "user", "content": SAFE}, {"role": "assistant", "content": "2"}]]
    kept, report = decontaminate(Dataset.from_dict({"messages": messages}), "messages", index)
    assert [r["row"] for r in report["removed_rows"]] == [0] and len(kept) == 1


# --------------------------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------------------------
def test_report_counts_each_benchmark_with_one_example():
    index = NgramIndex.build([QuestionSet("geometry", [SAFE + " " + QUESTION]), QuestionSet("probability", [OTHER]),
                              QuestionSet("clean", ["nothing in this benchmark question is found in the training rows"])])
    texts = [
        "Exercise 1. " + QUESTION,
        "Two marbles are drawn at random without replacement. What is the chance?",
        "Harder: The incircle of the triangle touches side BC at D. Also, two marbles are drawn at random without "
        "replacement.",
        SAFE.replace("2024", "2025"),
    ]
    _, report = decontaminate(dataset_of(texts), "problem", index)

    assert report["removed"] == 3  # the row matching both benchmarks is removed once...
    bench = report["benchmarks"]
    assert {name: entry["removed"] for name, entry in bench.items()} == {"geometry": 2, "probability": 2, "clean": 0}
    assert "example" not in bench["clean"]
    example = bench["probability"]["example"]
    assert example["row"] == 1 and example["text"] == texts[1]
    assert example["benchmark_question"] == OTHER
    assert example["ngram"] == "two marbles are drawn at random without replacement."
    assert bench["geometry"]["example"]["ngram"] in " ".join(QUESTION.lower().split())
    assert report["removed_rows"][2] == {"row": 2, "benchmarks": ["geometry", "probability"]}  # ...counted under each


# --------------------------------------------------------------------------------------------------------------------
# Benchmark files of every schema r1kit evaluate reads
# --------------------------------------------------------------------------------------------------------------------
LCB_ROW = {"question_title": "abc", "question_content": "You are given N integers. Print the largest sum of two of them.",
           "platform": "atcoder", "public_test_cases": json.dumps([{"input": "2\n1 2\n", "output": "3\n",
                                                                    "testtype": "stdin"}]),
           "private_test_cases": "", "starter_code": "", "metadata": "{}"}
GPQA_ROW = {"Question": "Which particle mediates the electromagnetic force between two charged leptons at rest?",
            "Correct Answer": "the photon exchanged between the two charged leptons at rest in vacuum",
            "Incorrect Answer 1": "gluon", "Incorrect Answer 2": "W boson", "Incorrect Answer 3": "Higgs boson"}


@pytest.mark.parametrize("row, column", [(LCB_ROW, "question_content"), (GPQA_ROW, "Question"),
                                         ({"problem": QUESTION, "answer": "12"}, "problem")],
                         ids=["livecodebench", "gpqa", "problem-answer"])
def test_benchmark_files_of_each_schema_give_their_question(tmp_path, row, column):
    path = write_jsonl(tmp_path / "bench.jsonl", [row, row])
    benchmark = load_benchmark_questions(str(path))
    assert benchmark.questions == [row[column]] * 2
    # the same question r1kit evaluate asks, without the prompt it wraps around it
    _, items = load(str(path))
    assert items[0]["problem"].startswith(row[column].strip())


def test_the_prompt_r1kit_wraps_around_a_question_is_not_compared(tmp_path):
    """GPQA's answer options and LiveCodeBench's stdin instructions are r1kit's prompt, not the benchmark's text."""
    files = [write_jsonl(tmp_path / "lcb.jsonl", [LCB_ROW]), write_jsonl(tmp_path / "gpqa.jsonl", [GPQA_ROW])]
    index = NgramIndex.build([load_benchmark_questions(str(f)) for f in files])
    texts = ["Read the input from stdin and write the answer to stdout. Write your solution in Python in a "
             "```python``` block.",
             "Hint: the photon exchanged between the two charged leptons at rest in vacuum.",
             "Which particle mediates the electromagnetic force between two charged leptons at rest, in your view?"]
    _, report = decontaminate(dataset_of(texts), "problem", index)
    assert [r["row"] for r in report["removed_rows"]] == [2]


def test_a_missing_file_or_unknown_name_names_benchmarks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^--benchmarks: nope\.jsonl does not exist"):
        load_benchmark_questions("nope.jsonl")
    with pytest.raises(ConfigError, match=r"^--benchmarks: unknown benchmark 'math500' \(did you mean 'math_500'\?\)"):
        load_benchmark_questions("math500")
    write_jsonl(tmp_path / "bad.jsonl", [{"question": "no problem column here"}])
    with pytest.raises(ConfigError, match=r"^--benchmarks: bad\.jsonl row 1 has no 'problem' column"):
        load_benchmark_questions("bad.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match=r"^--benchmarks: empty\.jsonl has no rows"):
        load_benchmark_questions("empty.jsonl")


def test_an_unreachable_hub_benchmark_names_benchmarks(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError, match=r"^--benchmarks: benchmark math_500 needs the Hub dataset HuggingFaceH4/MATH-500"):
        load_benchmark_questions("math_500")


# --------------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------------
@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    bench = write_jsonl(tmp_path / "bench.jsonl", [{"problem": QUESTION, "answer": "12"}, {"problem": OTHER, "answer": "5/33"}])
    train = write_jsonl(tmp_path / "train.jsonl", [{"problem": t, "solution": str(i)} for i, t in enumerate(
        [SAFE, "Exercise: " + QUESTION, OTHER.upper(), "Count the primes below 100 and add them up carefully."])])
    return {"bench": bench, "train": train, "out": tmp_path / "clean"}


@pytest.mark.slow
def test_python_m_writes_the_output_folder(files):
    result = subprocess.run(
        [sys.executable, "-m", "r1kit.decontaminate", "--dataset", str(files["train"]), "--benchmarks",
         str(files["bench"]), "--output", str(files["out"])], capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "2 removed, 2 kept" in result.stdout

    from datasets import load_from_disk

    out = files["out"]
    assert load_from_disk(str(out))["train"]["solution"] == ["0", "3"]
    assert [json.loads(line)["solution"] for line in (out / "train.jsonl").read_text().splitlines()] == ["0", "3"]
    report = json.loads((out / "report.json").read_text())
    assert report["removed"] == 2 and report["benchmarks"][str(files["bench"])]["removed"] == 2


def test_python_m_reports_a_bad_benchmark_in_one_line(files, capsys):
    from r1kit.console import run_module

    code = run_module("decontaminate", add_parser,
                      ["--dataset", str(files["train"]), "--benchmarks", "bench.jsonl,nope.jsonl", "--output", str(files["out"])])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("r1kit: error: --benchmarks: ")


def test_parquet_in_parquet_out_and_saved_datasets_read(files, tmp_path):
    import datasets

    rows = datasets.load_dataset("json", data_files=str(files["train"]), split="train")
    rows.to_parquet(str(tmp_path / "train.parquet"))
    assert run(args_for(dataset=str(tmp_path / "train.parquet"), benchmarks=str(files["bench"]),
                        output=str(tmp_path / "from_parquet"))) == 0
    assert (tmp_path / "from_parquet" / "train.parquet").exists()

    datasets.DatasetDict({"test": rows}).save_to_disk(str(tmp_path / "saved"))
    assert run(args_for(dataset=str(tmp_path / "saved"), benchmarks=str(files["bench"]), output=str(tmp_path / "again"),
                        split="test")) == 0
    assert datasets.load_from_disk(str(tmp_path / "again"))["test"]["solution"] == ["0", "3"]


@pytest.mark.parametrize("overrides, message", [
    ({"column": "question"}, r"^--column: 'question' not found in .*train\.jsonl; columns present: \['problem', 'solution'\]"),
    ({"ngram": 0}, r"^--ngram must be >= 1, got 0"),
    ({"benchmarks": ","}, r"^--benchmarks: name at least one benchmark"),
    ({"split": "test"}, r"^--split: 'test' not found in .*; splits: train"),
    ({"dataset": "missing.jsonl"}, r"^--dataset: missing\.jsonl does not exist"),
])
def test_bad_options_are_one_line_errors_naming_the_option(files, overrides, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = {"dataset": str(files["train"]), "benchmarks": str(files["bench"]), "output": str(files["out"]), **overrides}
    with pytest.raises(ConfigError, match=message):
        run(args_for(**options))


def test_output_never_overwrites_other_files(files, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"^--output: .*busy is a folder with other files in it"):
        run(args_for(dataset=str(files["train"]), benchmarks=str(files["bench"]), output=str(tmp_path / "busy")))
    # a previous output folder is replaced
    for _ in range(2):
        assert run(args_for(dataset=str(files["train"]), benchmarks=str(files["bench"]), output=str(files["out"]))) == 0
