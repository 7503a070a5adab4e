"""Data loading from local files, folders, built-in tasks and mixtures; prompts; the reward column check."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, DatasetDict

from r1kit.config.schema import GRPOScriptArguments
from r1kit.errors import ConfigError
from r1kit.loading.data import check_reward_columns, get_dataset, load_source, make_conversation, to_conversations
from r1kit.sources.tasks import addition_problems
from tests.helpers import raises_naming

ROWS = [{"problem": f"p{i}", "solution": str(i), "extra": i % 3} for i in range(40)]


@pytest.fixture()
def files(tmp_path):
    ds = Dataset.from_list(ROWS)
    paths = {
        "jsonl": tmp_path / "d.jsonl",
        "json": tmp_path / "d.json",
        "csv": tmp_path / "d.csv",
        "parquet": tmp_path / "d.parquet",
    }
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    paths["json"].write_text(json.dumps(ROWS))
    ds.to_csv(str(paths["csv"]))
    ds.to_parquet(str(paths["parquet"]))
    saved = tmp_path / "saved"
    DatasetDict({"train": ds.select(range(30)), "test": ds.select(range(30, 40))}).save_to_disk(str(saved))
    paths["saved"] = saved
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:25]))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[25:]))
    paths["folder"] = folder
    return paths


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet"])
def test_local_files_load_as_a_train_split(files, kind):
    ds = get_dataset(GRPOScriptArguments(dataset_name=str(files[kind])))
    assert list(ds) == ["train"] and len(ds["train"]) == 40
    assert set(ds["train"].column_names) == {"problem", "solution", "extra"}


def test_local_folders_keep_their_splits(files):
    saved = get_dataset(GRPOScriptArguments(dataset_name=str(files["saved"])))
    assert {k: len(v) for k, v in saved.items()} == {"train": 30, "test": 10}
    folder = get_dataset(GRPOScriptArguments(dataset_name=str(files["folder"])))
    assert {k: len(v) for k, v in folder.items()} == {"train": 25, "test": 15}


def mixture(*members, **kw):
    return GRPOScriptArguments(dataset_mixture={"datasets": list(members), **kw})


def test_unweighted_mixture_concatenates(files):
    ds = get_dataset(mixture({"id": str(files["jsonl"])}, {"id": str(files["csv"]), "weight": None}))
    assert len(ds["train"]) == 80


def test_weighted_mixture_keeps_the_given_fractions(files):
    ds = get_dataset(
        mixture({"id": str(files["jsonl"]), "weight": 0.25}, {"id": str(files["saved"]), "split": "test", "weight": 0.5})
    )
    assert len(ds["train"]) == 40 // 4 + 10 // 2


def test_mixture_split_slicing_and_test_split(files):
    ds = get_dataset(mixture({"id": str(files["saved"]), "split": "train[:10]"}, test_split_size=0.2))
    assert (len(ds["train"]), len(ds["test"])) == (8, 2)


def test_mixture_is_seeded(files):
    a = get_dataset(mixture({"id": str(files["jsonl"]), "weight": 0.5}, seed=3))["train"]["problem"]
    b = get_dataset(mixture({"id": str(files["jsonl"]), "weight": 0.5}, seed=3))["train"]["problem"]
    c = get_dataset(mixture({"id": str(files["jsonl"]), "weight": 0.5}, seed=4))["train"]["problem"]
    assert a == b and a != c


def test_mixture_column_selection(files):
    ds = get_dataset(mixture({"id": str(files["jsonl"]), "columns": ["problem", "solution"]}))
    assert ds["train"].column_names == ["problem", "solution"]


def test_mixture_column_selection_names_missing_columns(files):
    with pytest.raises(ConfigError, match=r"columns \['answer'\] not found"):
        get_dataset(mixture({"id": str(files["jsonl"]), "columns": ["problem", "answer"]}))


def test_mixture_of_different_schemas_is_a_clear_error(files, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    with pytest.raises(ConfigError, match="do not share one schema"):
        get_dataset(mixture({"id": str(files["jsonl"])}, {"id": str(other)}))


def test_builtin_task_splits_never_overlap():
    train = {(r["a"], r["b"]) for r in addition_problems("train", 3000)}
    test = {(r["a"], r["b"]) for r in addition_problems("test", 300)}
    assert len(train) == 3000 and len(test) == 300 and not train & test
    assert addition_problems("test", 5) == addition_problems("test", 5)
    row = addition_problems("train", 1)[0]
    assert row["solution"] == str(row["a"] + row["b"])


def test_builtin_task_loads_by_name():
    ds = load_source("r1kit:addition")
    assert set(ds) == {"train", "test"} and "solution" in ds["train"].column_names
    with pytest.raises(ValueError, match="unknown built-in task"):
        load_source("r1kit:nope")


def test_make_conversation_prepends_the_system_prompt():
    row = {"problem": "1+1?", "solution": "2"}
    assert make_conversation(row, "problem", "Think.") == {
        "prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": "1+1?"}]
    }
    assert make_conversation(row, "problem") == {"prompt": [{"role": "user", "content": "1+1?"}]}


def test_to_conversations_keeps_other_columns_and_drops_messages():
    ds = DatasetDict({"train": Dataset.from_list([{"problem": "q", "solution": "1", "messages": [{"role": "user", "content": "x"}]}])})
    out = to_conversations(ds, "problem", None)["train"]
    assert set(out.column_names) == {"problem", "solution", "prompt"}
    with raises_naming("dataset_prompt_column", "question", "problem"):
        to_conversations(ds, "question", None)


def test_reward_column_check_names_reward_column_and_columns_present():
    check_reward_columns(["accuracy", "format"], ["problem", "solution"])
    with pytest.raises(ConfigError) as err:
        check_reward_columns(["format", "accuracy"], ["problem", "answer"])
    message = str(err.value)
    assert "reward 'accuracy'" in message and "['solution']" in message and "['answer', 'problem']" in message
    with raises_naming("code", "verification_info"):
        check_reward_columns(["code"], ["problem"])
