"""Open-R1's five GRPO recipes, field for field as they are in Open-R1's repository, dry-run as Open-R1 launches them
(world size from their READMEs), with each Hub model and dataset replaced by a local one of the same schema."""

from __future__ import annotations

import json

import pytest

from r1kit.cli import main
from tests.helpers import write_recipe

R1_PROMPT = ("You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first think about "
             "the reasoning process as an internal monologue and then provide the user with the answer. Respond in the "
             "following format: <think>\n...\n</think>\n<answer>\n...\n</answer>")
COMMON = {  # every Open-R1 GRPO recipe sets these
    "model_revision": "main", "torch_dtype": "bfloat16", "attn_implementation": "flash_attention_2", "bf16": True,
    "use_vllm": True, "do_eval": False, "gradient_checkpointing": True,
    "gradient_checkpointing_kwargs": {"use_reentrant": False}, "log_completions": True, "log_level": "info",
    "logging_first_step": True, "logging_steps": 1, "logging_strategy": "steps", "overwrite_output_dir": True,
    "push_to_hub": True, "report_to": ["wandb"], "seed": 42, "hub_strategy": "every_save", "system_prompt": R1_PROMPT,
    "max_prompt_length": 512, "num_train_epochs": 1, "save_strategy": "epoch", "save_total_limit": 1,
}
MATH_ROWS = [{"problem": f"What is {i} + 1?", "solution": f"${i + 1}$", "answer": str(i + 1)} for i in range(64)]
# Two tests per row: with one, printing its expected output passes every test, and the dry run's exploit probe
# rightly stops the recipe (r1kit.probes).
CODE_ROWS = [{"problem_statement": f"Print {i} plus the input.", "gold_standard_solution": f"print({i} + int(input()))",
              "verification_info": {"language": "python", "test_cases": [
                  {"input": "1\n", "output": f"{i + 1}\n", "type": "stdin_stdout"},
                  {"input": "2\n", "output": f"{i + 2}\n", "type": "stdin_stdout"}]}}
             for i in range(64)]
IOI_ROWS = [{"problem": f"Subtask {i}", "id": "nile", "year": 2024, "subtask": i, "score": 10, "score_precision": 2,
             "test_names": ["0-01"], "grader_files": [["graders/grader.cpp", "int main(){}"]], "time_limit": 2.0,
             "memory_limit": 2048, "task_type": "Batch"} for i in range(64)]
CF_ROWS = [{"prompt": f"Problem {i}", "id": f"2053/{chr(65 + i % 6)}", "contest_id": 2053, "language": "cpp",
            "official_tests": [{"input": "1\n", "output": "1\n"}], "generated_checker": None, "time_limit": 2.0,
            "memory_limit": 256, "input_mode": "stdin"} for i in range(64)]

RECIPES = {
    # name: (world size as launched, Hub dataset -> local rows, recipe keys)
    "DeepSeek-R1-Distill-Qwen-1.5B/grpo/config_demo.yaml": (8, MATH_ROWS, {
        "dataset_name": "open-r1/OpenR1-Math-220k", "dataset_prompt_column": "problem",
        "chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}",
        "reward_funcs": ["accuracy", "format", "tag_count"], "reward_weights": [1.0, 1.0, 1.0],
        "learning_rate": 1.0e-06, "lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1},
        "warmup_ratio": 0.1, "max_completion_length": 2048, "num_generations": 16, "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 4, "temperature": 0.7, "use_liger_kernel": True,
        "hub_model_id": "DeepSeek-R1-Distill-Qwen-1.5B-GRPO", "output_dir": "data/DeepSeek-R1-Distill-Qwen-1.5B-GRPO"}),
    "Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml": (8, MATH_ROWS, {
        "dataset_name": "open-r1/OpenR1-Math-220k", "dataset_prompt_column": "problem",
        "reward_funcs": ["accuracy", "format", "tag_count"], "reward_weights": [1.0, 1.0, 1.0],
        "learning_rate": 2.0e-05, "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "max_completion_length": 1024,
        "num_generations": 16, "per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "beta": 0.04,
        "temperature": 0.7, "hub_model_id": "Qwen2.5-1.5B-Open-R1-GRPO", "output_dir": "data/Qwen2.5-1.5B-Open-R1-GRPO"}),
    "Qwen2.5-1.5B-Instruct/grpo/config_demo_code.yaml": (7, CODE_ROWS, {
        "dataset_name": "open-r1/verifiable-coding-problems-python", "dataset_prompt_column": "problem_statement",
        "reward_funcs": ["code", "format"], "reward_weights": [1.0, 0.1], "learning_rate": 5.0e-06,
        "lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "warmup_ratio": 0.03,
        "max_prompt_length": 1024, "max_completion_length": 2048, "num_generations": 14, "beta": 0.01,
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "max_steps": 500, "save_steps": 50,
        "save_strategy": "steps", "temperature": 1.0, "hub_model_id": "Qwen2.5-1.5B-Open-R1-Code-GRPO",
        "output_dir": "data/Qwen2.5-1.5B-Open-R1-Code-GRPO"}),
    "Qwen2.5-1.5B-Instruct/grpo/config_demo_code_ioi.yaml": (7, IOI_ROWS, {
        "dataset_name": "open-r1/ioi", "dataset_prompt_column": "problem",
        "reward_funcs": ["ioi_code", "code_format", "format"], "reward_weights": [1.0, 0.1, 0.1],
        "code_language": "cpp", "code_eval_test_batch_size": 3, "learning_rate": 5.0e-06,
        "lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "warmup_ratio": 0.03,
        "max_prompt_length": 1024, "max_completion_length": 2048, "num_generations": 14, "beta": 0.01,
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "max_steps": 500, "save_steps": 50,
        "save_strategy": "steps", "temperature": 1.0, "hub_model_id": "Qwen2.5-1.5B-Open-R1-Code-GRPO",
        "output_dir": "data/Qwen2.5-1.5B-Open-R1-Code-GRPO"}),
    "Qwen2.5-Coder-7B-Instruct/grpo/config_codeforces.yaml": (8, CF_ROWS, {
        "dataset_name": "open-r1/codeforces", "dataset_prompt_column": "prompt", "dataset_train_split": "train",
        "reward_funcs": ["cf_code", "code_format"], "reward_weights": [1.0, 0.1], "code_eval_test_batch_size": -1,
        "code_eval_scoring_mode": "weighted_sum", "callbacks": ["push_to_hub_revision"], "benchmarks": ["lcb_v4"],
        "hub_model_revision": "v01.00", "learning_rate": 1.0e-06, "lr_scheduler_type": "constant_with_warmup",
        "warmup_ratio": 0.1, "max_grad_norm": 0.2, "max_prompt_length": 2000, "max_completion_length": 8192,
        "num_generations": 16, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 32, "beta": 0.0,
        "loss_type": "dr_grpo", "scale_rewards": False, "mask_truncated_completions": True, "num_train_epochs": 4,
        "save_steps": 0.05, "save_strategy": "steps", "temperature": 0.7, "vllm_device": "auto",
        "vllm_gpu_memory_utilization": 0.7, "hub_model_id": "open-r1/Qwen2.5-Coder-7B-Instruct-Codeforces-GRPO",
        "output_dir": "data/Qwen2.5-Coder-7B-Instruct-Codeforces-GRPO"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_open_r1_recipe_dry_runs_clean(name, tmp_path, tiny_model_dir, capsys, monkeypatch):
    world_size, rows, keys = RECIPES[name]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    recipe = {**COMMON, **keys, "model_name_or_path": str(tiny_model_dir), "dataset_name": str(data)}
    argv = ["grpo", "--config", str(write_recipe(tmp_path, **recipe)), "--dry-run", "--world-size", str(world_size)]
    # this machine has neither wandb nor the Hub: a recipe asking for them is an error here, as it should be
    argv += ["--report_to", "none", "--push_to_hub", "false"]
    if "ioi_code" in keys["reward_funcs"]:
        # its rows name their tests on the Hub (open-r1/ioi-test-cases), out of reach here: ioi_code would judge
        # nothing, so the dry run says so; with a local copy of the tests it passes
        assert main(argv) == 2
        assert "ioi_test_cases" in capsys.readouterr().err
        tests = tmp_path / "ioi-tests"
        tests.mkdir()
        (tests / "2024.jsonl").write_text(json.dumps({"id": "nile", "test_name": "0-01", "test_input": "1\n",
                                                      "test_output": "1\n"}) + "\n")
        argv += ["--ioi_test_cases", str(tests)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
