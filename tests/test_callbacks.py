"""Checkpoint callbacks: revisions published per checkpoint (file:// and a fake Hub), the overwrite guard, and
benchmark evaluation per checkpoint that cannot harm training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r1kit.benchmarking.callbacks import PushToHubRevisionCallback, check_hub_revision
from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline as main
from r1kit.hub import HfHub, LocalHub
from tests.helpers import raises_naming, tiny_recipe, write_recipe


@pytest.fixture()
def bench(tmp_path) -> Path:
    path = tmp_path / "mini_bench.jsonl"
    path.write_text("".join(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) + "\n" for i in range(3)))
    return path


def run(tmp_path, recipe):
    return main(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))


@pytest.mark.slow
def test_training_with_both_callbacks_publishes_revisions_and_evaluates_every_checkpoint(tmp_path, tiny_model_dir, math_jsonl, bench):
    out, hub = tmp_path / "out", tmp_path / "hub"
    recipe = tiny_recipe(
        tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=2,
        callbacks=["push_to_hub_revision", "evaluate_benchmarks"], hub_model_id=f"file://{hub}",
        hub_model_revision="v00.00", push_to_hub_revision=True, benchmarks=[str(bench)], benchmark_max_new_tokens=8,
    )
    run(tmp_path, recipe)

    assert sorted(p.name for p in hub.iterdir()) == ["v00.00-step-000000002", "v00.00-step-000000004"]
    for revision in hub.iterdir():
        files = {p.name for p in revision.iterdir()}
        assert {"model.safetensors", "config.json", "tokenizer.json", "trainer_state.json"} <= files
        assert not {"optimizer.pt", "scheduler.pt", "rng_state.pth"} & files
        assert not [name for name in files if name.startswith("r1kit_")]  # the recipe's local paths stay here
        assert (out / revision.name.replace("v00.00-step-00000000", "checkpoint-") / "r1kit_checkpoint.json").is_file()
    for label in ("checkpoint-2", "checkpoint-4", "final"):
        result = json.loads((out / "eval" / label / "mini_bench.json").read_text())
        assert result["metrics"]["n"] == 3 and len(result["samples"]) == 3
    logged = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "eval/mini_bench/pass@1" in e]
    assert logged, "evaluation metrics reach the trainer's loggers"

    from r1kit.report import load_benchmarks, report

    assert [step for step, _ in load_benchmarks(out)["mini_bench"]] == [2, 4, 4]  # checkpoints 2 and 4, and final
    png, _ = report(out)
    assert png.is_file()


def test_an_existing_revision_stops_the_run_unless_overwrite(tmp_path, tiny_model_dir, math_jsonl):
    hub = tmp_path / "hub"
    (hub / "v00.00-step-000000002").mkdir(parents=True)
    (hub / "v00.00-step-000000002" / "model.safetensors").write_text("old")
    recipe = tiny_recipe(
        tmp_path / "no-model-needed", math_jsonl, tmp_path / "out", callbacks=["push_to_hub_revision"],
        hub_model_id=f"file://{hub}", hub_model_revision="v00.00", push_to_hub_revision=True,
    )
    with raises_naming("overwrite_hub_revision"):
        run(tmp_path, recipe)  # fails before any model loads (the model path does not even exist)
    args = parse_args(["--config", str(write_recipe(tmp_path, **recipe)), "--overwrite_hub_revision", "true"])
    check_hub_revision(args[1])  # allowed now


class FakeHfApi:
    def __init__(self, fail_uploads: int = 0):
        self.calls = []
        self.fail_uploads = fail_uploads

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))

    def create_branch(self, **kw):
        self.calls.append(("create_branch", kw))

    def upload_folder(self, **kw):
        if self.fail_uploads:
            self.fail_uploads -= 1
            raise ConnectionError("hub unreachable")
        self.calls.append(("upload_folder", kw))


def saved_checkpoint(tmp_path, step):
    folder = tmp_path / f"checkpoint-{step}"
    folder.mkdir()
    (folder / "model.safetensors").write_text("w")
    return folder


class State:
    def __init__(self, step):
        self.global_step = step


def test_fake_hub_receives_create_repo_branch_and_upload(tmp_path):
    api = FakeHfApi()
    saved_checkpoint(tmp_path, 2), saved_checkpoint(tmp_path, 4)
    callback = PushToHubRevisionCallback("me/model", "v01.00", str(tmp_path), client=HfHub("me/model", api=api))
    callback.on_save(None, State(2), None)
    callback.on_save(None, State(4), None)
    callback.on_train_end(None, State(4), None)
    names = [name for name, _ in api.calls]
    assert names == ["create_repo", "create_branch", "upload_folder", "create_branch", "upload_folder"]
    assert api.calls[0][1] == {"repo_id": "me/model", "private": True, "exist_ok": True}
    assert api.calls[1][1]["branch"] == "v01.00-step-000000002"
    upload = api.calls[2][1]
    assert upload["revision"] == "v01.00-step-000000002" and upload["folder_path"].endswith("checkpoint-2")
    assert "optimizer.pt" in upload["ignore_patterns"] and "*.pth" in upload["ignore_patterns"]


def test_upload_failures_are_retried_and_never_raise(tmp_path, monkeypatch):
    monkeypatch.setattr("r1kit.benchmarking.callbacks.time.sleep", lambda s: None)
    api = FakeHfApi(fail_uploads=2)
    saved_checkpoint(tmp_path, 2)
    callback = PushToHubRevisionCallback("me/model", "main", str(tmp_path), client=HfHub("me/model", api=api))
    callback.on_save(None, State(2), None)
    callback.on_train_end(None, State(2), None)
    assert callback.published == ["main-step-000000002"]

    broken = FakeHfApi(fail_uploads=99)
    saved_checkpoint(tmp_path, 3)
    callback = PushToHubRevisionCallback("me/model", "main", str(tmp_path), client=HfHub("me/model", api=broken))
    callback.on_save(None, State(3), None)
    callback.on_train_end(None, State(3), None)  # gives up, logs, does not raise
    assert callback.published == []


def test_local_hub_lists_only_revisions_with_content(tmp_path):
    hub = LocalHub(tmp_path)
    (tmp_path / "v1-step-000000001").mkdir()
    assert hub.revisions_with_content("v1-step-") == []
    hub.publish(saved_checkpoint(tmp_path, 9), "v1-step-000000009", "msg")
    assert hub.revisions_with_content("v1-step-") == ["v1-step-000000009"]


@pytest.mark.slow
def test_a_failing_evaluation_leaves_training_unharmed(tmp_path, tiny_model_dir, math_jsonl):
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=2, callbacks=["evaluate_benchmarks"],
                         benchmarks=[str(tmp_path / "missing.jsonl")])
    metrics = run(tmp_path, recipe)
    assert metrics["train_samples"] == 32 and (out / "model.safetensors").is_file()
    assert "unknown benchmark" in (out / "eval" / "checkpoint-2" / "evaluate.log").read_text()


def test_unknown_callback_lists_valid_names(tmp_path, math_jsonl):
    recipe = tiny_recipe(tmp_path, math_jsonl, tmp_path / "out", callbacks=["push_to_hub"])
    with raises_naming("callbacks", "heldout_accuracy", "push_to_hub_revision"):
        run(tmp_path, recipe)


def test_heldout_accuracy_verifies_with_the_recipes_reward_timeout(tmp_path, tiny_model_dir, math_jsonl, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import r1kit.rewards.verify as verify
    from r1kit.benchmarking.callbacks import get_callbacks
    from r1kit.loading.data import get_dataset

    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", callbacks=["heldout_accuracy"], heldout_size=4,
                         reward_timeout=12.5)
    script_args, training_args, _ = parse_args(["--config", str(write_recipe(tmp_path, **recipe))])
    dataset = get_dataset(script_args)
    dataset["test"] = dataset["train"]
    (tracker,) = get_callbacks(script_args, training_args, dataset, AutoTokenizer.from_pretrained(tiny_model_dir))
    limits = []
    real = verify.judge_batch
    monkeypatch.setattr(verify, "judge_batch", lambda *a, **kw: limits.append(a[2] if len(a) > 2 else kw["timeout"]) or real(*a, **kw))
    tracker.evaluate(AutoModelForCausalLM.from_pretrained(tiny_model_dir), step=0)
    assert limits == [12.5]
