"""The embedded demo: the shipped checkpoint, a shortened GRPO demo end to end, the report, the cold-start SFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r1kit.cli import main
from r1kit.loading.modeling import DEMO_MODEL
from r1kit.sources.tasks import worked_solution


def test_worked_solution_adds_digit_by_digit_with_carries():
    assert worked_solution(347, 178) == "<think>7+8+0=15,4+7+1=12,3+1+1=5</think><answer>525</answer>"
    assert worked_solution(999, 10).endswith("<answer>1009</answer>")


def test_shipped_checkpoint_is_small_and_loads_offline():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    files = {p.name for p in DEMO_MODEL.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= files
    assert sum(p.stat().st_size for p in DEMO_MODEL.iterdir()) < 10 << 20
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    assert 0.3e6 < sum(p.numel() for p in model.parameters()) < 2e6
    assert tokenizer.decode(tokenizer("12+34=")["input_ids"]) == "12+34="


@pytest.mark.slow
def test_shipped_checkpoint_scores_what_its_cold_start_reported(demo_heldout):
    reported = json.loads((DEMO_MODEL / "sft_summary.json").read_text())["heldout_accuracy"]
    accuracy = demo_heldout["metrics"]["pass@1"]
    assert accuracy == pytest.approx(reported, abs=1 / 200 + 1e-9)  # other CPU kernels can flip one problem
    assert 0.2 <= accuracy <= 0.6  # modest on purpose: GRPO has room to improve it
    assert demo_heldout["samples"][0]["completions"][0].startswith("<think>")


@pytest.mark.slow
def test_shortened_demo_runs_end_to_end_and_reports(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ["grpo", "--output_dir", str(out), "--max_steps", "4", "--heldout_eval_steps", "2", "--heldout_size", "24",
            "--per_device_train_batch_size", "32", "--save_steps", "2"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "Held-out accuracy" in captured.out and "r1kit report" in captured.out
    assert "'loss':" not in captured.out + captured.err  # compact progress: no dict printed per step

    summary = json.loads((out / "summary.json").read_text())
    assert {"accuracy_before", "accuracy_after", "train_seconds", "steps"} <= set(summary) and summary["steps"] == 4
    assert [r["step"] for r in map(json.loads, (out / "heldout_accuracy.jsonl").read_text().splitlines())] == [0, 2, 4]
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 32 and {r["step"] for r in rows} == {1, 2, 3, 4}
    assert set(rows[0]["rewards"]) == {"accuracy_reward", "format_reward", "tag_count_reward"}
    assert rows[0]["prompt"].endswith("=") and "<answer>" in "".join(r["completion"] for r in rows)

    assert main(["report", str(out)]) == 0
    table = capsys.readouterr().out
    assert "accuracy_reward" in table and "held-out acc" in table and "frac_reward_zero_std" in table
    png = out / "report.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_report_of_a_folder_without_a_run_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no trainer_state.json" in capsys.readouterr().err


@pytest.mark.slow
def test_cold_start_sft_builds_from_scratch_stops_at_target_and_publishes(tmp_path):
    published = tmp_path / "published"
    args = ["sft", "--model_name_or_path", "r1kit:scratch", "--characters", "0123456789+=,", "--hidden_size", "32",
            "--num_layers", "1", "--num_heads", "2", "--train_size", "256", "--heldout_size", "8",
            "--eval_every_steps", "2", "--stop_at_accuracy", "0.0", "--max_steps", "50", "--per_device_train_batch_size",
            "16", "--bf16", "false", "--report_to", "none", "--save_strategy", "no", "--max_length", "96",
            "--output_dir", str(tmp_path / "sft"), "--publish_to", str(published)]
    assert main(args) == 0
    summary = json.loads((published / "sft_summary.json").read_text())
    assert summary["steps"] == 2  # stopped at the first accuracy check that met the (trivial) target
    assert (published / "model.safetensors").is_file() and not (published / "optimizer.pt").exists()
    assert Path(published / "tokenizer.json").is_file()
