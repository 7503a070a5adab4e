"""The run's contract (r1kit.state.contract): what a run records of itself, and what a resume does when the recipe or the
launch changed since the checkpoint: safe fields taken and said, fields that change the optimisation refused with
one line naming both values unless `resume_changes` says how to go on, another model always refused. GRPO and SFT
share the policy. (Another world size: tests/test_launch.py, with a real 2-process checkpoint.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from r1kit.config.recipe import parse_args
from r1kit.grpo import pipeline
from r1kit.state import contract
from r1kit.state.contract import IDENTITY, OPTIMISATION, SAFE, classify, compare, decide
from tests.helpers import raises_naming, tiny_recipe, write_recipe

CANARY = "hf_" + "Cz7RkW2qP9sLm4XvB8nT1yJd6Ga3Ue5Hf0"  # a Hub token in the recipe: recorded nowhere


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def same_weights(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def logged(out: Path, key: str = "learning_rate") -> dict[int, float]:
    state = json.loads((out / "trainer_state.json").read_text())
    return {e["step"]: e[key] for e in state["log_history"] if key in e and "loss" in e}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, math_jsonl):
    """A GRPO run of 2 steps (a checkpoint at each), completed: (its recipe, its output folder)."""
    root = tmp_path_factory.mktemp("trained")
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, root / "out", max_steps=2, save_steps=1, hub_token=CANARY)
    pipeline(*parse_args(["--config", str(write_recipe(root, **recipe))]))
    return recipe, root / "out"


def continued(trained, tmp_path: Path, **changes) -> tuple[Path, list[str]]:
    """A copy of the trained run, and the command that continues it with `changes` to its recipe."""
    recipe, out = trained
    mine = tmp_path / "out"
    shutil.copytree(out, mine)
    return mine, ["--config", str(write_recipe(tmp_path, **{**recipe, "output_dir": str(mine), **changes}))]


# --------------------------------------------------------------------------------------------------------------------
# The policy, field by field
# --------------------------------------------------------------------------------------------------------------------
def test_the_table_classes_each_kind_of_field():
    for name in ("logging_steps", "save_steps", "eval_strategy", "report_to", "output_dir", "tripwires",
                 "vllm_server_port", "torch_num_threads", "training_pass", "heldout_eval_steps"):
        assert classify(name, 1, 2) == SAFE, name
    assert classify("max_steps", 10, 20) == SAFE and classify("max_steps", 20, 10) == OPTIMISATION
    assert classify("num_train_epochs", 1.0, 2.0) == SAFE
    for name in ("learning_rate", "lr_scheduler_type", "warmup_steps", "beta", "num_generations", "reward_funcs",
                 "reward_weights", "temperature", "seed", "world_size", "global_batch", "dataset_name",
                 "vllm_importance_sampling_correction", "some_future_field"):
        assert classify(name, 1, 2) == OPTIMISATION, name
    for name in ("model_name_or_path", "model_revision", "model_files", "tokenizer_files", "chat_template", "use_peft",
                 "lora_r"):
        assert classify(name, 1, 2) == IDENTITY, name


def test_decisions_name_each_field_with_both_values():
    saved = {"recipe": {"learning_rate": 1e-3, "beta": 0.0, "logging_steps": 1}, "world_size": 2, "global_batch": 16}
    now = {"recipe": {"learning_rate": 5e-4, "beta": 0.0, "logging_steps": 5}, "world_size": 2, "global_batch": 16}
    changes = compare(saved, now)
    refused = decide(changes, "refuse", "out/checkpoint-4")
    assert "learning_rate 0.001 -> 0.0005" in refused.error and "logging_steps" not in refused.error
    taken = decide(changes, "recipe", "out/checkpoint-4")
    assert taken.error is None and taken.lr_factor == pytest.approx(0.5)
    assert any("logging_steps 1 -> 5" in note for note in taken.notes)
    kept = decide(changes, "checkpoint", "out/checkpoint-4")
    assert kept.error is None and kept.keep == {"learning_rate": 1e-3}
    moved = compare(saved, {**now, "world_size": 1, "global_batch": 8})
    assert "world_size" in decide(moved, "checkpoint", "out/checkpoint-4").error  # a launch cannot be kept
    other = compare({"recipe": {"model_name_or_path": "a"}}, {"recipe": {"model_name_or_path": "b"}})
    for how in contract.RESUME_CHANGES:
        assert "a -> b" in decide(other, how, "out/checkpoint-4").error


# --------------------------------------------------------------------------------------------------------------------
# End to end: the fault, the same command, what the user sees and what the weights are
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_run_record_and_every_checkpoint_record_the_resolved_recipe_and_the_model(trained, tiny_model_dir):
    _, out = trained
    record = json.loads((out / "r1kit_run.json").read_text())
    saved = json.loads((out / "checkpoint-1" / "r1kit_checkpoint.json").read_text())
    for contract_of in (record, saved):
        recipe = contract_of["recipe"]
        assert recipe["learning_rate"] == 1e-3 and recipe["num_generations"] == 4  # the recipe's values...
        assert recipe["beta"] == 0.0 and recipe["loss_type"] == "dapo" and recipe["epsilon"] == 0.2  # ...and defaults
        assert recipe["reward_funcs"] == ["accuracy", "tests.rewards_for_tests:length_variety"]
        assert recipe["hub_token"] != CANARY  # a secret is recorded as it pickles: never its value
        assert contract_of["model"]["name"] == str(tiny_model_dir)
        assert contract_of["model"]["fingerprint"] == contract.fingerprint(tiny_model_dir, contract.MODEL_FILES)
        assert contract_of["tokenizer"] == contract.fingerprint(tiny_model_dir, contract.TOKENIZER_FILES)
        assert (contract_of["world_size"], contract_of["global_batch"]) == (1, 8)
    assert (saved["step"], saved["branch"]) == (1, 0)
    for path in [out / "r1kit_run.json", *out.glob("checkpoint-*/r1kit_checkpoint.json")]:
        assert CANARY not in path.read_text()


@pytest.mark.slow
def test_a_new_learning_rate_is_refused_then_taken_with_the_schedule_re_anchored_or_kept(trained, tmp_path, capsys):
    out, command = continued(trained, tmp_path / "a", max_steps=3, learning_rate=5e-4)
    at_checkpoint = weights(out / "checkpoint-2")
    with raises_naming("learning_rate", "0.001", "0.0005", "resume_changes"):
        pipeline(*parse_args(command))
    assert not (out / "checkpoint-3").exists() and same_weights(weights(out / "checkpoint-2"), at_checkpoint)

    capsys.readouterr()
    pipeline(*parse_args([*command, "--resume_changes", "recipe"]))  # take the recipe's
    assert "taken    learning_rate 0.001 -> 0.0005" in capsys.readouterr().out
    assert logged(out) == {1: 1e-3, 2: 1e-3, 3: 5e-4}  # (before: 1e-3 at step 3, the checkpoint's schedule)
    taken = {k: v - at_checkpoint[k] for k, v in weights(out / "checkpoint-3").items()}

    kept_out, kept_command = continued(trained, tmp_path / "b", max_steps=3, learning_rate=5e-4)
    pipeline(*parse_args([*kept_command, "--resume_changes", "checkpoint"]))  # keep the checkpoint's
    assert logged(kept_out)[3] == pytest.approx(1e-3)
    assert json.loads((kept_out / "r1kit_run.json").read_text())["recipe"]["learning_rate"] == 1e-3
    kept = {k: v - at_checkpoint[k] for k, v in weights(kept_out / "checkpoint-3").items()}
    # The same step from the same state: Adam's update is proportional to the learning rate, so the new one moved
    # every weight half as far.
    moved = [k for k in kept if kept[k].abs().max() > 0]
    assert moved and all(taken[k].sub(kept[k] * 0.5).abs().max() <= 1e-6 + 1e-4 * kept[k].abs().max() for k in moved)


CHANGES = {  # field: its new value (the trained run has num_generations 4, two rewards, beta 0)
    "num_generations": (2, ["num_generations", "4", "2"]),
    "reward_funcs": (["accuracy"], ["reward_funcs"]),
    "reward_weights": ([1.0, 2.0], ["reward_weights"]),
    "beta": (0.04, ["beta", "0.0", "0.04"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_changed_group_size_reward_list_weights_or_beta_is_refused_naming_both_values(trained, tmp_path, field):
    value, named = CHANGES[field]
    out, command = continued(trained, tmp_path, max_steps=3, **{field: value})
    before = weights(out / "checkpoint-2")
    with raises_naming(*named, "resume_changes"):
        pipeline(*parse_args(command))
    assert not (out / "checkpoint-3").exists() and not list(out.glob("checkpoint-*/optimizer.pt.tmp*"))
    assert same_weights(weights(out / "checkpoint-2"), before)
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "completed"  # untouched


@pytest.mark.slow
def test_another_model_or_new_weights_under_the_same_name_are_always_refused(trained, tmp_path):
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    recipe, _ = trained
    other = tmp_path / "other-model"
    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer, seed=1).save_pretrained(other)
    tokenizer.save_pretrained(other)
    out, command = continued(trained, tmp_path / "a", max_steps=3, model_name_or_path=str(other))
    before = weights(out / "checkpoint-2")
    for how in ("refuse", "recipe"):  # no key lets a run continue as another model
        with raises_naming("model_name_or_path", recipe["model_name_or_path"], str(other)):
            pipeline(*parse_args([*command, "--resume_changes", how]))
    assert not (out / "checkpoint-3").exists() and same_weights(weights(out / "checkpoint-2"), before)

    # The same folder name, other weights in it (a model re-downloaded or overwritten): its content differs.
    moved = tmp_path / "model"
    shutil.copytree(recipe["model_name_or_path"], moved)
    first, command = continued(trained, tmp_path / "b", max_steps=3, model_name_or_path=str(moved))
    pipeline(*parse_args([*command, "--resume_changes", "recipe"]))  # a copy of the same files: the same model
    shutil.copy(other / "model.safetensors", moved / "model.safetensors")
    with raises_naming("model_files"):
        pipeline(*parse_args([*command, "--max_steps", "4", "--resume_changes", "recipe"]))
    assert not (first / "checkpoint-4").exists()


@pytest.mark.slow
def test_sft_shares_the_policy(tmp_path, tiny_model_dir):
    from r1kit.sft import SFT_TYPES
    from r1kit.sft import pipeline as sft_pipeline

    rows = [{"messages": [{"role": "user", "content": f"{i}+{i}?"}, {"role": "assistant", "content": f"{2 * i}"}]}
            for i in range(16)]
    data = tmp_path / "messages.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = dict(model_name_or_path=str(tiny_model_dir), dataset_name=str(data), max_length=32,
                  per_device_train_batch_size=4, max_steps=2, save_steps=1, logging_steps=1, learning_rate=1e-3,
                  lr_scheduler_type="constant", report_to="none", bf16=False, output_dir=str(tmp_path / "out"))
    path = write_recipe(tmp_path, **recipe)
    sft_pipeline(*parse_args(["--config", str(path)], None, SFT_TYPES))
    with raises_naming("learning_rate", "0.001", "0.0005"):
        sft_pipeline(*parse_args(["--config", str(path), "--max_steps", "3", "--learning_rate", "5e-4"], None,
                                 SFT_TYPES))
    assert not (tmp_path / "out" / "checkpoint-3").exists()
