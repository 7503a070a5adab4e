"""`r1kit vllm-serve`: on vLLM's CPU build it starts vLLM's OpenAI server with what a training run needs (the
development endpoints the weight push uses, the checkpoint's dtype, TRL's log-probabilities), letting the command
line override each; on a CUDA build it is `trl vllm-serve`. (The server itself runs in tests/test_vllm.py.)"""

from __future__ import annotations

import json

import pytest

from r1kit import vllm_serve
from r1kit.cli import main


def option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


@pytest.fixture
def cpu_build(monkeypatch):
    monkeypatch.setattr(vllm_serve, "vllm_is_cpu_build", lambda: True)


def test_cpu_build_serves_with_the_dev_endpoints_the_checkpoint_dtype_and_trls_logprobs(tmp_path, cpu_build):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    command, env = vllm_serve.server_command(["--model", str(tmp_path), "--port", "8011"], environ={})
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert option(command, "--model") == str(tmp_path) and option(command, "--port") == "8011"
    assert option(command, "--dtype") == "float32"
    assert option(command, "--logprobs-mode") == "processed_logprobs" and option(command, "--max-logprobs") == "-1"
    assert "--enforce-eager" in command
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_the_command_line_wins_over_the_cpu_defaults(tmp_path, cpu_build):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    command, env = vllm_serve.server_command([f"--model={tmp_path}", "--dtype", "bfloat16", "--max-logprobs=5"],
                                             environ={"VLLM_CPU_KVCACHE_SPACE": "8"})
    assert command.count("--dtype") == 1 and option(command, "--dtype") == "bfloat16"
    assert "--max-logprobs" not in command and "--max-logprobs=5" in command
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "8"


def test_a_cuda_build_runs_trls_server_unchanged(monkeypatch):
    monkeypatch.setattr(vllm_serve, "vllm_is_cpu_build", lambda: False)
    command, _ = vllm_serve.server_command(["--model", "Qwen/Qwen2.5-1.5B", "--tensor_parallel_size", "2"], environ={})
    assert command == ["trl", "vllm-serve", "--model", "Qwen/Qwen2.5-1.5B", "--tensor_parallel_size", "2"]


def test_without_vllm_or_a_model_the_command_says_what_to_do(monkeypatch, capsys):
    monkeypatch.setattr(vllm_serve, "installed", lambda name: False)
    assert main(["vllm-serve", "--model", "m"]) == 2
    assert "r1kit[vllm]" in capsys.readouterr().err
    monkeypatch.setattr(vllm_serve, "installed", lambda name: True)
    assert main(["vllm-serve", "--port", "8000"]) == 2
    assert "--model" in capsys.readouterr().err
