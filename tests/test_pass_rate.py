"""`r1kit pass-rate`: Open-R1's offline pass-rate filtering, on a tiny model; a crash loses no finished prompt."""

from __future__ import annotations

import json

import pytest

from r1kit.cli import main
from r1kit.pass_rate import pass_rates
from tests.helpers import write_recipe


def test_pass_rate_is_the_mean_weighted_reward_of_a_prompts_completions():
    def right(completions, solution, **kw):
        return [float(c[0]["content"] == s) for c, s in zip(completions, solution)]

    def unjudged_second(completions, **kw):
        return [0.5, None] * (len(completions) // 2)

    rows = [{"prompt": "p1", "solution": "a"}, {"prompt": "p2", "solution": "b"}]
    out = pass_rates([right, unjudged_second], [1.0, 2.0], [["a", "x"], ["x", "x"]], rows, ["p1", "p2"])
    # p1: a -> 1 + 2 x 0.5 = 2.0; x -> 0 (the second reward left None) -> mean 1.0. p2: 1.0 and 0.0 -> 0.5
    assert [rate for rate, _ in out] == [pytest.approx(1.0), pytest.approx(0.5)]


def filtering_recipe(tmp_path, tiny_model_dir, math_jsonl, **keys):
    return write_recipe(tmp_path, **{
        "model_name_or_path": str(tiny_model_dir), "dataset_name": str(math_jsonl), "dataset_prompt_column": "problem",
        "reward_funcs": ["tests.rewards_for_tests:length_variety"], "num_generations": 4,
        "per_device_train_batch_size": 8, "max_completion_length": 6, "temperature": 1.0, "seed": 3,
        "output_dir": str(tmp_path / "out"), "report_to": "none", "bf16": False,
        "pass_rate_min": 0.0, "pass_rate_max": 1.0, "dataset_end_index": 20, **keys})


def test_scores_filters_and_continues_after_a_crash(tmp_path, tiny_model_dir, math_jsonl, monkeypatch):
    recipe = filtering_recipe(tmp_path, tiny_model_dir, math_jsonl)
    assert main(["pass-rate", "--config", str(recipe)]) == 0
    out = tmp_path / "out"
    lines = (out / "generations.jsonl").read_text().splitlines()
    assert len(lines) == 20 and all(len(json.loads(line)["completions"]) == 4 for line in lines)
    scored = [json.loads(line) for line in (out / "scored.jsonl").read_text().splitlines()]
    kept = [json.loads(line) for line in (out / "filtered.jsonl").read_text().splitlines()]
    assert len(scored) == 20 and all(0.0 <= r["pass_rate"] <= 1.0 for r in scored)
    assert kept == [r for r in scored if 0.0 < r["pass_rate"] < 1.0]

    # A crash after 3 prompts, mid-line: the rerun scores only the 17 others and keeps the 3.
    (out / "generations.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:10])
    generated = []
    import r1kit.benchmarking.generation as generation

    real = generation.generate
    monkeypatch.setattr(generation, "generate", lambda model, tok, prompts, *a, **k: generated.extend(prompts) or real(model, tok, prompts, *a, **k))
    assert main(["pass-rate", "--config", str(recipe)]) == 0
    assert len(generated) == 17 * 4
    done = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines() if line.endswith("}")]
    assert sorted(d["index"] for d in done) == list(range(20))


def test_open_r1_filtering_configs_parse_unchanged(tmp_path, tiny_model_dir, math_jsonl, capsys, recwarn):
    from r1kit.config.recipe import parse_args
    from r1kit.pass_rate import PASS_RATE_TYPES

    early = write_recipe(tmp_path, **{  # Open-R1's first filtering config named the window differently
        "model_name_or_path": str(tiny_model_dir), "dataset_name": str(math_jsonl), "dataset_prompt_column": "problem",
        "num_generations": 4, "reward_funcs": ["accuracy"], "reward_weights": [1.0], "system_prompt": "Think first.",
        "low_reward_threshold": 0.2, "high_reward_threshold": 0.8, "output_dir": str(tmp_path / "e")})
    *_, filter_args = parse_args(["--config", str(early)], dataclass_types=PASS_RATE_TYPES)
    assert (filter_args.pass_rate_min, filter_args.pass_rate_max) == (0.2, 0.8)
    assert any("'low_reward_threshold'" in str(w.message) for w in recwarn)
    recipe = write_recipe(tmp_path, **{
        "model_name_or_path": str(tiny_model_dir), "model_revision": "main", "torch_dtype": "bfloat16",
        "dataset_name": str(math_jsonl), "dataset_prompt_column": "problem", "max_completion_length": 64,
        "num_generations": 8, "temperature": 0.7, "reward_funcs": ["accuracy"], "reward_weights": [1.0],
        "pass_rate_min": 0.1, "pass_rate_max": 0.6, "output_dir": str(tmp_path / "f"), "report_to": "none"})
    capsys.readouterr()
    assert main(["pass-rate", "--config", str(recipe), "--dry-run"]) == 0
    assert "recipe OK" in capsys.readouterr().out
    bad = write_recipe(tmp_path, **{"model_name_or_path": str(tiny_model_dir), "dataset_name": str(math_jsonl),
                                    "pass_rate_min": 0.9, "pass_rate_max": 0.1, "output_dir": str(tmp_path / "g")})
    assert main(["pass-rate", "--config", str(bad), "--dry-run"]) == 2
    assert "pass_rate_min (0.9) and pass_rate_max (0.1)" in capsys.readouterr().err
