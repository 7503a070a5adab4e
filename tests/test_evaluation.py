"""Evaluation: the demo checkpoint end to end, pass@k, what `r1kit evaluate` writes (the HumanEval scorer is proven
on the canonical solutions in tests/test_humaneval_judge.py)."""

from __future__ import annotations

import json

import pytest

from r1kit.cli import main
from r1kit.evaluation import evaluate, pass_at_k
from r1kit.loading.modeling import DEMO_MODEL


@pytest.fixture(autouse=True)
def with_transformers(monkeypatch):
    """The command's own logic, generated with transformers also where vLLM is installed (the low-end CI lane): each
    vLLM engine costs seconds to start, and `r1kit evaluate` on vLLM is proven in tests/test_vllm.py."""
    from r1kit.benchmarking import generation

    monkeypatch.setattr(generation, "vllm_available", lambda: False)


def test_evaluate_checks_its_model_and_folder_without_importing_trl():
    """`r1kit evaluate` (a process per checkpoint under the evaluate_benchmarks callback) loads a model and
    generates: what it imports before the model must not pull TRL and peft in (0.5 s of each such process)."""
    import subprocess
    import sys

    code = ("import sys, r1kit.evaluation, r1kit.records\n"
            "from r1kit.loading.modeling import DEMO_MODEL, check_source\n"
            "check_source(str(DEMO_MODEL), field='--model')\n"
            "heavy = [m for m in ('trl', 'peft', 'datasets') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_demo_checkpoint_scores_what_the_demo_reports(demo_heldout):
    reported = json.loads((DEMO_MODEL / "sft_summary.json").read_text())["heldout_accuracy"]
    result = demo_heldout  # `r1kit evaluate --benchmarks addition`, run once for the test session
    assert result["metrics"]["n"] == 200
    assert result["metrics"]["pass@1"] == pytest.approx(reported, abs=1 / 200 + 1e-9)  # other CPU kernels can flip one
    assert len(result["samples"]) == 200 and result["samples"][0]["scores"][0] in (0.0, 1.0)


def test_sampling_k_completions_gives_pass_at_1_and_pass_at_k(tmp_path, tiny_model_dir):
    bench = tmp_path / "b.jsonl"
    bench.write_text("".join(json.dumps({"problem": f"{i}+0=", "answer": str(i)}) + "\n" for i in range(4)))
    result = evaluate(str(tiny_model_dir), str(bench), num_samples=3, max_new_tokens=4, temperature=0.6)
    assert set(result["metrics"]) >= {"pass@1", "pass@3", "n"} and result["metrics"]["n"] == 4
    assert all(len(s["completions"]) == 3 for s in result["samples"])


def test_pass_at_k():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)


def test_unknown_benchmark_is_a_clear_error(capsys):
    assert main(["evaluate", "--model", str(DEMO_MODEL), "--benchmarks", "mmlu_pro"]) == 2
    assert "unknown benchmark 'mmlu_pro'" in capsys.readouterr().err


def test_evaluate_skips_and_counts_rows_it_cannot_read(tmp_path, tiny_model_dir, caplog):
    """A hostile row (a question that is not text, an answer that is a structure) is skipped and counted in
    `unreadable_rows`; the rest is evaluated (before: the first such row stopped the evaluation)."""
    bench = tmp_path / "b.jsonl"
    rows = [{"problem": "1+0=", "answer": "1"}, {"problem": {"deep": [[["x"]]]}, "answer": "1"},
            {"problem": "2+0=", "answer": ["2"]}, {"problem": "3+0=", "answer": 3}]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING"):
        result = evaluate(str(tiny_model_dir), str(bench), max_new_tokens=2, temperature=0.0)
    assert result["metrics"]["n"] == 2 and result["metrics"]["unreadable_rows"] == 2
    assert [s["problem"] for s in result["samples"]] == ["1+0=", "3+0="]
    assert "2 row(s) cannot be asked or judged" in caplog.text
