"""Tool use a model learns: the products task, held-out accuracy measured through the tool loop (with the tool calls
per problem), the shipped cold start and its recipe, and the benchmark's comparison without tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from r1kit.benchmarking import heldout
from r1kit.benchmarking.heldout import MAX_CALLS_PER_REPLY, ToolLoop, greedy_accuracy, tool_loop_replies
from r1kit.sources.tasks import hash_split, load_task, product_problems
from tests.helpers import raises_naming

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo" / "grpo_tool_learning.yaml"


def test_products_are_too_long_to_guess_and_train_and_test_never_share_one():
    train, test = product_problems("train", 500), product_problems("test", 100)
    assert {(r["a"], r["b"]) for r in train}.isdisjoint((r["a"], r["b"]) for r in test)
    for row in train + test:
        assert row["prompt"] == f"{row['a']}*{row['b']}=" and row["solution"] == str(row["a"] * row["b"])
        assert 100 <= row["a"] <= 999 and 100 <= row["b"] <= 9999
        assert hash_split(f"{row['a']}*{row['b']}", 0.1) == ("test" if row in test else "train")
    assert 0.3 < sum(r["b"] >= 1000 for r in train) / len(train) < 0.7  # 3- and 4-digit b alike
    assert product_problems("train", 50, seed=3) == product_problems("train", 50, seed=3) != product_problems("train", 50)
    loaded = load_task("products", train_size=20, test_size=5)
    assert loaded["train"].num_rows == 20 and loaded["test"][0]["prompt"].endswith("=")
    with raises_naming("r1kit:products", "min_digits"):
        load_task("products", min_digits=2)


# --------------------------------------------------------------------------------------------------------------------
# Held-out replies through the tool loop, with a scripted model
# --------------------------------------------------------------------------------------------------------------------
class Counter:
    """A TRL-style environment: `reset` with the row, public methods are tools."""

    resets: list = []
    added: list = []

    def reset(self, **row):
        Counter.resets.append(row)
        self.total = 0

    def add(self, amount: int) -> str:
        """Adds to the total.

        Args:
            amount: How much.
        """
        self.total += int(amount)
        Counter.added.append(amount)
        return str(self.total)

    def explode(self) -> str:
        """Raises."""
        raise RuntimeError("boom")


@pytest.fixture
def scripted(monkeypatch):
    """The tool-calling template's tokenizer, and a model whose turns are scripted per problem (turn by turn)."""
    from transformers import AutoTokenizer

    from r1kit.loading.modeling import TOOLS_MODEL, set_chat_template

    tokenizer = AutoTokenizer.from_pretrained(TOOLS_MODEL)
    set_chat_template(tokenizer, "r1kit-tools")  # (as a run's recipe sets it: the template and how replies parse)
    script: dict[str, list[str]] = {}
    seen: list[list[str]] = []

    def generate(model, tok, prompts, max_new_tokens, batch_size=64, should_stop=None, token_ids=False, **kw):
        assert token_ids
        seen.append(prompts)
        replies = []
        for prompt in prompts:
            problem = prompt.split("<|user|>")[1].split("<|im_end|>")[0]
            turn = prompt.count("<|assistant|>") - 1
            replies.append(tokenizer(script[problem][turn] + "<|im_end|>", add_special_tokens=False)["input_ids"])
        return replies

    monkeypatch.setattr(heldout, "generate", generate)
    return tokenizer, script, seen


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_held_out_reply_calls_tools_reads_their_results_and_is_graded_on_its_last_turn(scripted):
    tokenizer, script, seen = scripted
    script["1+2="] = [call("add", amount=1) + call("add", amount=2), "<answer>3</answer>"]
    script["5+5="] = ["<answer>10</answer>"]  # answers at once
    script["2+2="] = [call("explode"), call("nothing_here", x=1), "<answer>4</answer>"]
    script["9+9="] = [call("add", amount=9)] * 3  # keeps calling: cut at max_iterations, its last turn graded
    script["7+7="] = ['<tool_call>{"name": "add", "arguments": {"amount": </tool_call>']  # broken: plain text
    Counter.resets = []
    loop = ToolLoop([], Counter, max_iterations=2)
    problems = list(script)
    finals, calls = tool_loop_replies(None, tokenizer, problems, loop, rows=[{"prompt": p} for p in problems])
    assert finals[:3] == ["<answer>3</answer>", "<answer>10</answer>", "<answer>4</answer>"]
    assert calls == [2, 0, 2, 2, 0]
    assert [row["prompt"] for row in Counter.resets] == problems  # each problem its own environment, reset with its row
    assert [len(turn) for turn in seen] == [5, 3, 2]  # every active problem's turn generated together
    second = next(p for p in seen[1] if "1+2=" in p)  # the results of both calls are the next turn's tool turns
    assert "<|tool|>1<|im_end|>" in second and "<|tool|>3<|im_end|>" in second
    third = next(p for p in seen[2] if "2+2=" in p)
    assert "boom" in third and "Tool nothing_here not found" in third  # failures are results the model reads
    assert finals[3] == ""  # still calling after max_iterations: its last turn holds no answer to grade


def test_a_flood_of_calls_in_one_reply_runs_no_more_than_the_cap(scripted):
    tokenizer, script, _ = scripted
    script["1+1="] = ["".join(call("add", amount=1) for _ in range(3 * MAX_CALLS_PER_REPLY)), "<answer>8</answer>"]
    Counter.added = []
    finals, calls = tool_loop_replies(None, tokenizer, ["1+1="], ToolLoop([], Counter, 1))
    assert finals == ["<answer>8</answer>"] and calls == [3 * MAX_CALLS_PER_REPLY]
    assert len(Counter.added) == MAX_CALLS_PER_REPLY  # the rest were answered without running


def test_held_out_accuracy_through_the_tool_loop_counts_the_calls(scripted):
    tokenizer, script, _ = scripted
    script["3+4="] = [call("add", amount=7), "<answer>7</answer>"]
    script["5+6="] = ["<answer>12</answer>"]
    accuracy, details = greedy_accuracy(None, tokenizer, ["3+4=", "5+6="], ["7", "11"],
                                        tool_loop=ToolLoop([], Counter, 1))
    assert accuracy == 0.5 and [d["tool_calls"] for d in details] == [1, 0]


def test_the_held_out_callback_records_tool_use_beside_the_accuracy(scripted, tmp_path):
    from r1kit.benchmarking.callbacks import HeldOutAccuracyCallback

    tokenizer, script, _ = scripted
    script["3+4="] = [call("add", amount=7), "<answer>7</answer>"]
    script["5+6="] = ["<answer>11</answer>"]
    callback = HeldOutAccuracyCallback(tokenizer, ["3+4=", "5+6="], ["7", "11"], str(tmp_path))
    callback.progress = False
    callback.tool_loop = ToolLoop([], Counter, 1)
    assert callback.evaluate(None, 0) == 1.0
    record = json.loads((tmp_path / "heldout_accuracy.jsonl").read_text())
    assert record["tool_calls"] == 0.5 and record["tool_use"] == 0.5


# --------------------------------------------------------------------------------------------------------------------
# The shipped cold start, its recipe, the benchmark
# --------------------------------------------------------------------------------------------------------------------
def test_the_shipped_cold_start_is_small_offline_and_seldom_chooses_the_tool():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from r1kit.loading.modeling import TOOL_LEARNER, resolve_model_path

    assert resolve_model_path("r1kit:tool-learner") == str(TOOL_LEARNER)
    assert sum(p.stat().st_size for p in TOOL_LEARNER.iterdir()) < 8 << 20
    assert AutoModelForCausalLM.from_pretrained(TOOL_LEARNER).num_parameters() < 2e6
    assert supports_tool_calling(AutoTokenizer.from_pretrained(TOOL_LEARNER))
    built = json.loads((TOOL_LEARNER / "build_summary.json").read_text())
    assert built["task"] == "products" and built["tool_share"] < 0.5
    assert built["heldout_100_greedy"]["accuracy"] <= 0.2  # it guesses: there is something to learn


def test_the_comparison_without_tools_takes_every_tool_key_out_and_nothing_else():
    import dataclasses

    import yaml

    from r1kit.config.toolfields import ToolFields

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import tool_learning
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    recipe = yaml.safe_load(RECIPE.read_text())
    stripped = tool_learning.without_tools(recipe)
    tool_keys = {f.name for f in dataclasses.fields(ToolFields)} | {"max_tool_calling_iterations"}
    assert set(tool_learning.TOOL_KEYS) <= tool_keys
    assert not set(stripped) & tool_keys
    assert {k: v for k, v in recipe.items() if k not in tool_keys} == stripped


@pytest.mark.slow
def test_the_tool_learning_recipe_dry_runs_and_measures_held_out_tool_use_as_it_trains(tmp_path, capsys):
    from r1kit.cli import main

    assert main(["grpo", "--config", str(RECIPE), "--dry-run"]) == 0
    assert "recipe OK" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["grpo", "--config", str(RECIPE), "--max_steps", "2", "--heldout_eval_steps", "1", "--heldout_size", "8",
                 "--output_dir", str(out), "--save_strategy", "no"]) == 0
    records = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    printed = capsys.readouterr().out  # each held-out measurement, a line as it is measured
    assert all(f"held-out accuracy at step {s}: " in printed for s in (0, 1, 2)) and "tool calls per problem" in printed
    assert all(r["n"] == 8 and 0 <= r["tool_use"] <= 1 and r["tool_calls"] >= r["tool_use"] for r in records)
    logged = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "tools/calls_per_rollout" in e]
    assert [e["step"] for e in logged] == [1, 2] and all(e["tools/infrastructure_failures"] == 0 for e in logged)
