"""First contact: every bad input a user can give reaches them as one `r1kit: error: ...` line that names the field,
with exit code 2 and no traceback, before anything loads; internal errors keep their traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import r1kit.grpo
import r1kit.loading.modeling
from r1kit.cli import main
from tests.helpers import tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]


def one_error_line(err: str) -> str:
    """The single `r1kit: error:` line of a command's stderr (which may hold warnings before it)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("r1kit: error:")]
    assert len(lines) == 1, err
    assert err.rstrip().endswith(lines[0]), err  # nothing after it: the command stopped there
    return lines[0]


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """Files a user might point at, in the current folder: a good dataset, an empty one, a header-only csv, a
    one-row file, a plain file, an empty folder."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    Path("data/math.jsonl").write_text(
        "".join(json.dumps({"problem": f"{a}+{a}", "solution": str(2 * a)}) + "\n" for a in range(32))
    )
    Path("data/empty.jsonl").write_text("")
    Path("data/header.csv").write_text("problem,solution\n")
    Path("data/one.jsonl").write_text(json.dumps({"problem": "1+1", "solution": "2"}) + "\n")
    Path("a-file").write_text("not a folder")
    Path("empty-folder").mkdir()
    return tmp_path


def mixture(*members):
    return {"datasets": [{"id": m} if isinstance(m, str) else m for m in members]}


# (case, recipe keys, command-line flags, the field the one-line message must name)
GRPO_CASES = [
    # Names that look local are local
    ("missing dataset file", {"dataset_name": "./data/missing.jsonl"}, [], "dataset_name"),
    ("missing dataset, bare file name", {"dataset_name": "missing.jsonl"}, [], "dataset_name"),
    ("missing mixture member", {"dataset_name": None, "dataset_mixture": mixture("data/math.jsonl", "./nope.jsonl")},
     [], "dataset_mixture.datasets[1].id"),
    ("missing model folder", {}, ["--model_name_or_path", "./no-model"], "model_name_or_path"),
    ("folder that is not a model", {"model_name_or_path": "empty-folder"}, [], "model_name_or_path"),
    ("unknown built-in model", {"model_name_or_path": "r1kit:tiny"}, [], "model_name_or_path"),
    ("unknown built-in task", {"dataset_name": "r1kit:subtraction"}, [], "dataset_name"),
    ("Hub dataset while offline", {"dataset_name": "some-org/some-dataset"}, [], "dataset_name"),
    ("Hub model while offline", {"model_name_or_path": "some-org/some-model"}, [], "model_name_or_path"),
    ("invalid Hub id", {"model_name_or_path": "no such model"}, [], "model_name_or_path"),
    ("empty folder as dataset", {"dataset_name": "./empty-folder"}, [], "dataset_name"),
    ("unsupported data file", {"dataset_name": "a-file"}, [], "dataset_name"),
    ("missing gguf file", {"gguf_file": "model.gguf"}, [], "gguf_file"),
    ("missing DeepSpeed config", {"deepspeed": "ds_config.json"}, [], "deepspeed"),
    ("missing resume checkpoint", {"resume": "./out/checkpoint-9"}, [], "resume"),
    # The output folder
    ("output folder under a file", {"output_dir": "a-file/out"}, [], "output_dir"),
    ("output folder is a file", {"output_dir": "a-file"}, [], "output_dir"),
    # Empty data
    ("empty jsonl", {"dataset_name": "data/empty.jsonl"}, [], "dataset_name"),
    ("header-only csv", {"dataset_name": "data/header.csv"}, [], "dataset_name"),
    ("mixture weights keep no rows", {"dataset_name": None, "dataset_mixture": mixture(
        {"id": "data/one.jsonl", "weight": 0.5}, {"id": "data/math.jsonl", "weight": 0.01})}, [], "dataset_mixture"),
    ("split slice keeps no rows", {"dataset_name": None, "dataset_mixture": mixture(
        {"id": "data/math.jsonl", "split": "train[100:]"})}, [], "dataset_mixture.datasets[0]"),
    ("test split leaves no rows", {"dataset_name": None, "dataset_mixture": {**mixture("data/one.jsonl"),
                                                                          "test_split_size": 0.5}}, [],
     "dataset_mixture.test_split_size"),
    ("mixture weight as text", {"dataset_name": None, "dataset_mixture": mixture({"id": "data/math.jsonl",
                                                                                 "weight": "half"})}, [],
     "dataset_mixture.datasets[0].weight"),
    ("fewer rows than one generation batch", {"dataset_name": "data/one.jsonl"}, [], "dataset_train_split"),
    ("missing train split", {"dataset_train_split": "training"}, [], "dataset_train_split"),
    ("missing prompt column", {"dataset_prompt_column": "question"}, [], "dataset_prompt_column"),
    ("reward without its column", {"reward_funcs": ["code"]}, [], "reward 'code'"),
    # Types
    ("text for a number (flag)", {}, ["--learning_rate", "abc"], "learning_rate"),
    ("text for a number (recipe)", {"num_generations": "four"}, [], "num_generations"),
    ("list for a number", {"learning_rate": [1.0e-3, 2.0e-3]}, [], "learning_rate"),
    ("fraction for a whole number", {"max_steps": 2.5}, [], "max_steps"),
    ("not a boolean", {"bf16": "maybe"}, [], "bf16"),
    ("list for a single choice", {"lr_scheduler_type": ["cosine"]}, [], "lr_scheduler_type"),
    # Ranges
    ("zero temperature", {"temperature": 0}, [], "temperature"),
    ("top_p above 1", {}, ["--top_p", "1.5"], "top_p"),
    ("zero steps", {"max_steps": 0}, [], "max_steps"),
    ("zero batch", {"per_device_train_batch_size": 0}, [], "per_device_train_batch_size"),
    ("one generation", {"num_generations": 1}, [], "num_generations"),
    ("generations that do not divide the batch", {"num_generations": 3}, [], "num_generations"),
    ("negative beta", {"beta": -0.1}, [], "beta"),
    ("zero reward timeout", {"reward_timeout": 0}, [], "reward_timeout"),
    ("positive repetition penalty", {"reward_funcs": ["repetition_penalty"], "repetition_max_penalty": 1.0}, [],
     "repetition_max_penalty"),
    ("one weight per reward", {"reward_weights": [1.0, 2.0]}, [], "reward_weights"),
    # Enums
    ("resume typo", {"resume": "atuo"}, [], "resume"),
    ("unknown code provider", {"code_provider": "docker"}, [], "code_provider"),
    ("unknown IOI provider", {"ioi_provider": "e2b"}, [], "ioi_provider"),
    ("unknown benchmark launcher", {"benchmark_launcher": "k8s"}, [], "benchmark_launcher"),
    ("unknown loss type", {"loss_type": "grop"}, [], "loss_type"),
    ("unknown scheduler (recipe)", {"lr_scheduler_type": "cosin"}, [], "lr_scheduler_type"),
    ("unknown scheduler (flag)", {}, ["--lr_scheduler_type", "cosin"], "lr_scheduler_type"),
    ("unknown save strategy", {"save_strategy": "sometimes"}, [], "save_strategy"),
    ("unknown reward scaling", {"scale_rewards": "groups"}, [], "scale_rewards"),
    ("unknown repetition language", {"repetition_language": "fr"}, [], "repetition_language"),
    ("unknown dtype", {"dtype": "fp32"}, [], "dtype"),
    # Names
    ("reward typo", {"reward_funcs": ["accuracyy"]}, [], "reward"),
    ("callback typo", {"callbacks": ["heldout_acuracy"]}, [], "callback"),
    ("unknown benchmark", {"callbacks": ["evaluate_benchmarks"], "benchmarks": ["math500"]}, [], "benchmarks"),
    ("unknown recipe key", {"num_generation": 4}, [], "num_generation"),
    ("unknown report integration", {"report_to": "tensorbord"}, [], "report_to"),
    pytest.param("report integration not installed", {"report_to": ["swanlab"]}, [], "report_to",
                 marks=pytest.mark.skipif(importlib.util.find_spec("swanlab") is not None, reason="swanlab installed"),
                 id="report integration not installed"),
    ("unknown attention", {"attn_implementation": "sdpaa"}, [], "attn_implementation"),
    ("broken chat template", {"chat_template": "{{ bad"}, [], "chat_template"),
    ("push while the Hub is offline", {"push_to_hub": True, "hub_model_id": "me/model"}, [], "push_to_hub"),
    ("unknown flag", {}, ["--learnig_rate", "1e-4"], "learnig_rate"),
    ("missing recipe", None, [], "--config"),
    ("recipe without --config", {}, ["other.yaml"], "--config other.yaml"),
]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize(("case", "keys", "flags", "field"),
                         [pytest.param(*c, id=c[0]) if type(c) is tuple else c for c in GRPO_CASES])
@pytest.mark.slow
def test_grpo_bad_input_is_one_line_naming_the_field(inputs, tiny_model_dir, capsys, monkeypatch,
                                                     case, keys, flags, field, dry):
    def must_not_load(*args, **kwargs):
        raise AssertionError("the model loaded before the input was checked")

    monkeypatch.setattr(r1kit.loading.modeling, "get_tokenizer", must_not_load)
    monkeypatch.setattr(r1kit.loading.modeling, "get_model", must_not_load)
    monkeypatch.setattr(r1kit.grpo, "get_tokenizer", must_not_load)  # grpo imports them by name
    monkeypatch.setattr(r1kit.grpo, "get_model", must_not_load)
    if keys is None:
        config = "missing-recipe.yaml"
    else:
        recipe = tiny_recipe(tiny_model_dir, inputs / "data/math.jsonl", "out", dataset_prompt_column="problem",
                             reward_funcs=["accuracy"])
        recipe.update(keys)
        config = str(write_recipe(inputs, **{k: v for k, v in recipe.items() if v is not None}))
    assert main(["grpo", "--config", config, *flags, *(["--dry-run"] if dry else [])]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert field in line, line
    if not dry or case.startswith("output folder"):
        return
    assert not (inputs / "out").exists()  # a dry run creates nothing


def test_errors_on_paths_come_before_the_dataset_loads(inputs, tiny_model_dir, capsys, monkeypatch):
    def must_not_load(*args, **kwargs):
        raise AssertionError("the dataset loaded before the model path was checked")

    monkeypatch.setattr(r1kit.grpo, "prepare_dataset", must_not_load)
    recipe = tiny_recipe("./no-model", inputs / "data/math.jsonl", "out", dataset_prompt_column="problem")
    assert main(["grpo", "--config", str(write_recipe(inputs, **recipe))]) == 2
    assert "model_name_or_path: ./no-model does not exist" in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_unreachable_hub_says_so_in_one_line(inputs, tiny_model_dir):
    """Online mode, but the Hub does not answer (a closed local port stands in for a machine without network)."""
    recipe = tiny_recipe(tiny_model_dir, "some-org/some-dataset", "out")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
           "HF_ENDPOINT": "http://127.0.0.1:9"}
    result = subprocess.run([sys.executable, "-m", "r1kit", "grpo", "--config", str(write_recipe(inputs, **recipe)),
                             "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert "dataset_name" in line and "the Hub cannot be reached" in line


def test_offline_hub_id_names_the_variable(inputs, tiny_model_dir, capsys):
    recipe = tiny_recipe(tiny_model_dir, "some-org/some-dataset", "out")
    assert main(["grpo", "--config", str(write_recipe(inputs, **recipe)), "--dry-run"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "dataset_name" in line and "HF_HUB_OFFLINE=1" in line and "not in the local cache" in line


@pytest.mark.slow
def test_a_real_process_exits_2_with_one_line(inputs, tiny_model_dir):
    """Through the installed entry point (`python -m r1kit`), as the issue found it: a missing model used to load
    the dataset, then end in a Hub traceback."""
    recipe = tiny_recipe("./no-model", inputs / "data/math.jsonl", "out", dataset_prompt_column="problem")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "r1kit", "grpo", "--config", str(write_recipe(inputs, **recipe))],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "model_name_or_path" in one_error_line(result.stderr)
    assert not result.stdout.strip()  # nothing loaded, nothing printed


def test_an_internal_error_keeps_its_traceback(inputs, tiny_model_dir, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(r1kit.grpo, "prepare_dataset", broken)
    recipe = tiny_recipe(tiny_model_dir, inputs / "data/math.jsonl", "out", dataset_prompt_column="problem")
    with pytest.raises(KeyError, match="a bug of ours"):
        main(["grpo", "--config", str(write_recipe(inputs, **recipe))])


SFT_RECIPE = {"model_name_or_path": "r1kit:scratch", "dataset_name": "r1kit:addition", "train_size": 64,
              "max_steps": 1, "bf16": False, "report_to": "none", "output_dir": "sft-out"}
SFT_CASES = [
    ("other dataset", {"dataset_name": "some-org/data"}, [], "dataset_name"),
    ("missing model", {"model_name_or_path": "./no-model"}, [], "model_name_or_path"),
    ("unknown built-in model", {"model_name_or_path": "r1kit:big"}, [], "model_name_or_path"),
    ("output folder under a file", {"output_dir": "a-file/out"}, [], "output_dir"),
    ("publish folder under a file", {"publish_to": "a-file/model"}, [], "publish_to"),
    ("text for a number", {}, ["--learning_rate", "abc"], "learning_rate"),
    ("unknown key", {"max_lenght": 64}, [], "max_lenght"),
    ("unknown scheduler", {"lr_scheduler_type": "cosin"}, [], "lr_scheduler_type"),
    ("no training rows", {"train_size": 0}, [], "train_size"),
    ("accuracy target above 1", {"stop_at_accuracy": 40}, [], "stop_at_accuracy"),
    ("missing recipe", None, [], "--config"),
]


@pytest.mark.parametrize(("case", "keys", "flags", "field"), SFT_CASES, ids=[c[0] for c in SFT_CASES])
def test_sft_bad_input_is_one_line_naming_the_field(inputs, capsys, case, keys, flags, field):
    config = "missing.yaml" if keys is None else str(write_recipe(inputs, **{**SFT_RECIPE, **keys}))
    assert main(["sft", "--config", config, *flags]) == 2
    assert field in one_error_line(capsys.readouterr().err)
    assert not (inputs / "sft-out" / "model.safetensors").exists()


EVALUATE_CASES = [
    ("missing model", ["--model", "./no-model", "--benchmarks", "addition"], "--model"),
    ("benchmark typo", ["--benchmarks", "math500"], "--benchmarks"),
    ("missing benchmark file", ["--benchmarks", "./mine.jsonl"], "--benchmarks"),
    ("Hub benchmark while offline", ["--benchmarks", "math_500"], "--benchmarks"),
    ("no benchmarks", ["--benchmarks", ","], "--benchmarks"),
    ("text for a number", ["--benchmarks", "addition", "--num-samples", "x"], "--num-samples"),
    ("zero samples", ["--benchmarks", "addition", "--num-samples", "0"], "--num-samples"),
    ("top-p above 1", ["--benchmarks", "addition", "--top-p", "2"], "--top-p"),
    ("output folder under a file", ["--benchmarks", "addition", "--output-dir", "a-file/eval"], "--output-dir"),
    ("required option missing", [], "--benchmarks"),
]


@pytest.mark.parametrize(("case", "flags", "field"), EVALUATE_CASES, ids=[c[0] for c in EVALUATE_CASES])
def test_evaluate_bad_input_is_one_line_naming_the_option(inputs, tiny_model_dir, capsys, case, flags, field):
    model = [] if "--model" in flags else ["--model", str(tiny_model_dir)]
    assert main(["evaluate", *model, *flags]) == 2
    assert field in one_error_line(capsys.readouterr().err)


def test_report_bad_input_is_one_line(inputs, capsys):
    Path("run/checkpoint-2").mkdir(parents=True)
    Path("run/checkpoint-2/trainer_state.json").write_text('{"log_history": [')  # cut short
    for argv, words in ([[], "OUTPUT_DIR"], [["no-such-run"], "OUTPUT_DIR"], [["a-file"], "not a folder"],
                        [["empty-folder"], "no trainer_state.json"], [["run"], "cannot be read"],
                        [["run", "extra"], "one OUTPUT_DIR"]):
        assert main(["report", *argv]) == 2
        assert words in one_error_line(capsys.readouterr().err), argv


def test_unknown_command_is_one_line_with_a_suggestion(capsys):
    assert main(["grpq"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "unknown command 'grpq'" in line and "did you mean 'grpo'" in line


@pytest.mark.slow
def test_start_is_quiet_and_says_what_matters(tmp_path, tiny_model_dir, math_jsonl, capsys):
    """No warning r1kit causes (gradient_checkpointing deprecated, pin_memory without an accelerator), no progress
    bars for small local data and a small model, and one start-up block with what the run does."""
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, tmp_path / "out", max_steps=1, save_steps=1, reward_weights=[1.0, 0.5])
    del recipe["gradient_checkpointing"]  # TRL's default (on), the deprecated name r1kit used to pass on
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe))]) == 0
    messages = [str(w.message) for w in caught]
    caused = [m for m in messages if ("gradient_checkpointing" in m and "deprecated" in m) or "pin_memory" in m]
    assert caused == [], caused
    out, err = capsys.readouterr()
    for bar in ("Map", "Generating train split", "Loading weights", "Writing model shards"):
        assert bar not in out + err, bar
    assert "train metrics" not in out + err and "total_flos" not in out + err  # TRL's block: in train_results.json
    assert json.loads((tmp_path / "out" / "train_results.json").read_text())["train_samples"] == 32
    block = out[out.index("r1kit grpo") :].splitlines()[:8]
    assert block[1].startswith("  model    " + str(tiny_model_dir)) and "parameters" in block[1]
    assert block[2].startswith(f"  data     {math_jsonl}: train 32 rows")
    assert block[3] == "  rewards  accuracy x1, tests.rewards_for_tests:length_variety x0.5"
    assert block[4].startswith("  steps    1, each 2 prompts x 4 completions")
    assert block[5].startswith("  pass     the fastest of dense, bucketed, packed, measured on this cpu")
    assert "gradient checkpointing" in block[5]  # TRL's default, on here: the buckets' cache prompt stands down
    assert block[6] == f"  output   {tmp_path / 'out'}"
    assert block[7] == "  resume   starts at step 0"


def test_every_path_a_recipe_names_is_checked_before_the_heavy_imports(inputs, tiny_model_dir):
    """A missing dataset file, mixture member, model file or checkpoint is named in the first second, as a typo'd key
    is, not after half a minute of imports (torch, TRL): checked in a process that imports neither."""
    cases = {
        "dataset_name": {"dataset_name": "data/missing.jsonl"},
        "dataset_mixture.datasets[1].id": {"dataset_name": None,
                                           "dataset_mixture": mixture("data/math.jsonl", "data/gone.parquet")},
        "model_name_or_path": {"model_name_or_path": "models/tiny.gguf"},
        "resume": {"resume": "out/checkpoint-40"},
    }
    for field, keys in cases.items():
        recipe = tiny_recipe(tiny_model_dir, "data/math.jsonl", "out", dataset_prompt_column="problem")
        recipe.update(keys)
        path = write_recipe(inputs, **{k: v for k, v in recipe.items() if v is not None})
        script = ("import sys\nfrom r1kit.config.keys import precheck\nfrom r1kit.errors import ConfigError\n"
                  f"try:\n    precheck('grpo', ['--config', {str(path)!r}])\nexcept ConfigError as e:\n    print(e)\n"
                  "print('heavy:', sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=inputs, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.stdout.splitlines()[0].startswith(f"{field}: "), done.stdout
        assert "does not exist" in done.stdout or "existing checkpoint folder" in done.stdout, done.stdout
        assert done.stdout.splitlines()[-1] == "heavy: []", done.stdout
