"""The R1 recipe end to end, offline, as docs/r1-chain.md runs it: export worked solutions, decontaminate them against the
held-out problems, distil them (SFT) into a model built from scratch, then GRPO on top; a few steps each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.cli import main
from r1kit.sources.tasks import export_addition

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_decontaminate_then_sft_then_grpo(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    subprocess.run([sys.executable, "-m", "r1kit.sources.tasks", "addition", "--split", "train", "--size", "600", "--output",
                    "data/addition_sft.jsonl"], check=True, capture_output=True)
    export_addition("data/planted.jsonl", "test", 3)  # plant three held-out problems in the training data
    with open("data/addition_sft.jsonl", "a") as f:
        f.write(Path("data/planted.jsonl").read_text())
    assert main(["decontaminate", "--dataset", "data/addition_sft.jsonl", "--benchmarks", "addition", "--ngram", "1",
                 "--output", "data/addition-clean"]) == 0
    report = json.loads(Path("data/addition-clean/report.json").read_text())
    assert report["removed"] == 3 and report["kept"] == 600

    recipe = str(ROOT / "recipes/demo/sft_distill.yaml")
    assert main(["sft", "--config", recipe, "--max_steps", "4"]) == 0
    assert (tmp_path / "outputs/demo-distill/model.safetensors").exists()
    assert main(["grpo", "--model_name_or_path", "outputs/demo-distill", "--output_dir", "outputs/demo-chain",
                 "--max_steps", "2", "--heldout_size", "20"]) == 0
    assert json.loads((tmp_path / "outputs/demo-chain/summary.json").read_text())["steps"] == 2
