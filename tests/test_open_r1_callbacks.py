"""As in Open-R1, `push_to_hub_revision` with `benchmarks` also evaluates every checkpoint, and the names are
checked before anything loads."""

from __future__ import annotations

from r1kit.cli import main
from tests.helpers import tiny_recipe, write_recipe


def test_push_to_hub_revision_with_benchmarks_evaluates_and_checks_names(tmp_path, tiny_model_dir, math_jsonl, capsys):
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", callbacks=["push_to_hub_revision"],
                         hub_model_id=f"file://{tmp_path / 'hub'}", benchmarks=["lcb_v5"])
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run"]) == 2
    assert "unknown benchmark 'lcb_v5'" in capsys.readouterr().err

    from r1kit.benchmarking.callbacks import EvaluateBenchmarksCallback, PushToHubRevisionCallback, get_callbacks
    from r1kit.config.schema import GRPOConfig, GRPOScriptArguments

    args = GRPOConfig(output_dir=str(tmp_path / "out"), callbacks=["push_to_hub_revision"], benchmarks=["addition"],
                      hub_model_id=f"file://{tmp_path / 'hub'}", bf16=False, report_to="none")
    callbacks = get_callbacks(GRPOScriptArguments(dataset_name=str(math_jsonl)), args, None, None)
    assert [type(c) for c in callbacks] == [PushToHubRevisionCallback, EvaluateBenchmarksCallback]
    args.benchmarks = []
    assert [type(c) for c in get_callbacks(GRPOScriptArguments(dataset_name=str(math_jsonl)), args, None, None)] == [
        PushToHubRevisionCallback]
