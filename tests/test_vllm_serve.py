"""`r1kit vllm-serve`: on vLLM's CPU build it starts vLLM's OpenAI server with what a training run needs (the
development endpoints the weight push uses, the checkpoint's dtype, TRL's log-probabilities), letting the command
line override each; on a CUDA build it is `trl vllm-serve`. Either way it binds 127.0.0.1 unless told otherwise, runs
r1kit's authenticating front, and refuses another address without a shared secret. (The server itself runs in
tests/test_vllm.py, where an unauthenticated client is refused.)"""

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
    assert option(command, "--host") == "127.0.0.1" and option(command, "--middleware") == "r1kit.vllm_front.AuthFront"


def test_the_command_line_wins_over_the_cpu_defaults(tmp_path, cpu_build):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    command, env = vllm_serve.server_command([f"--model={tmp_path}", "--dtype", "bfloat16", "--max-logprobs=5"],
                                             environ={"VLLM_CPU_KVCACHE_SPACE": "8"})
    assert command.count("--dtype") == 1 and option(command, "--dtype") == "bfloat16"
    assert "--max-logprobs" not in command and "--max-logprobs=5" in command
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "8"


def test_a_cuda_build_runs_trls_server_on_loopback_behind_the_front(monkeypatch):
    monkeypatch.setattr(vllm_serve, "vllm_is_cpu_build", lambda: False)
    command, _ = vllm_serve.server_command(["--model", "Qwen/Qwen2.5-1.5B", "--tensor_parallel_size", "2"], environ={})
    assert command == ["trl", "vllm-serve", "--model", "Qwen/Qwen2.5-1.5B", "--tensor_parallel_size", "2",
                       "--host", "127.0.0.1", "--middleware", "r1kit.vllm_front.AuthFront"]


def test_without_vllm_or_a_model_the_command_says_what_to_do(monkeypatch, capsys):
    monkeypatch.setattr(vllm_serve, "installed", lambda name: False)
    assert main(["vllm-serve", "--model", "m"]) == 2
    assert "r1kit[vllm]" in capsys.readouterr().err
    monkeypatch.setattr(vllm_serve, "installed", lambda name: True)
    assert main(["vllm-serve", "--port", "8000"]) == 2
    assert "--model" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------------------------
# Who may drive it
# --------------------------------------------------------------------------------------------------------------------
SECRET = "a-shared-secret-of-32-characters"


@pytest.fixture
def served(monkeypatch, tmp_path):
    """`r1kit vllm-serve` up to the server's start: the command it would run, or None."""
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    monkeypatch.setattr(vllm_serve, "installed", lambda name: True)
    monkeypatch.setattr(vllm_serve, "vllm_is_cpu_build", lambda: True)
    for name in ("R1KIT_VLLM_SECRET", "R1KIT_VLLM_SECRET_FILE"):
        monkeypatch.delenv(name, raising=False)
    started = []
    monkeypatch.setattr(vllm_serve.subprocess, "call", lambda command, env: started.append((command, env)) or 0)
    return lambda *argv: (main(["vllm-serve", "--model", str(tmp_path), *argv]), started[-1][0] if started else None)


def test_another_address_needs_a_shared_secret_and_the_first_line_says_what_is_bound(served, monkeypatch, capsys):
    code, command = served()
    assert code == 0 and option(command, "--host") == "127.0.0.1"
    line = capsys.readouterr().err.splitlines()[0]
    assert "127.0.0.1" in line and "this machine only" in line and "unauthenticated" in line
    for host in ("0.0.0.0", "192.168.1.7", "my-host", ""):
        assert served("--host", host)[0] == 2
        error = capsys.readouterr().err
        assert "R1KIT_VLLM_SECRET" in error and "--host" in error and len(error.strip().splitlines()) == 1
    monkeypatch.setenv("R1KIT_VLLM_SECRET", SECRET)
    code, command = served("--host", "0.0.0.0")
    line = capsys.readouterr().err.splitlines()[0]
    assert code == 0 and option(command, "--host") == "0.0.0.0" and "needs the shared secret" in line
    assert SECRET not in " ".join(command)  # the secret travels in the environment, never on a command line (ps)


def test_the_secret_comes_from_a_file_only_its_owner_reads(served, monkeypatch, tmp_path, capsys):
    secret_file = tmp_path / "vllm-secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o644)
    monkeypatch.setenv("R1KIT_VLLM_SECRET_FILE", str(secret_file))
    assert served("--host", "0.0.0.0")[0] == 2 and "chmod 600" in capsys.readouterr().err
    secret_file.chmod(0o600)
    assert served("--host", "0.0.0.0")[0] == 0
    monkeypatch.setenv("R1KIT_VLLM_SECRET", "short")
    assert served()[0] == 2 and "16" in capsys.readouterr().err


def call(front, method: str, path: str, headers: dict[str, str] | None = None, kind: str = "http") -> tuple:
    """One request through `front`: (the status it answered, or "passed" when the app behind it was reached)."""
    import asyncio

    sent = []

    async def app(scope, receive, send):
        sent.append("passed")

    async def send(message):
        sent.append(message.get("status", message.get("type")))

    scope = {"type": kind, "method": method, "path": path, "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
    front.app = app
    asyncio.run(front(scope, None, send))
    return sent[0]


def test_the_front_refuses_every_request_without_the_secret_but_the_health_check():
    from r1kit.vllm_front import AuthFront

    front = AuthFront(None, secret=SECRET)  # (the app behind it is set by each call)
    good = {"Authorization": f"Bearer {SECRET}"}
    for method, path in [("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"), ("POST", "/update_weights"),
                         ("POST", "/sleep"), ("GET", "/server_info"), ("POST", "/v1/completions"), ("GET", "/v1/models"),
                         ("POST", "/health"), ("GET", "/health/../collective_rpc"), ("GET", "//health")]:
        assert call(front, method, path) == 401, path
        assert call(front, method, path, {"Authorization": "Bearer wrong"}) == 401, path
        assert call(front, method, path, {"Authorization": f"Basic {SECRET}"}) == 401, path
        assert call(front, method, path, good) == "passed", path
    assert call(front, "GET", "/health") == "passed" and call(front, "HEAD", "/health") == "passed"
    assert call(front, "GET", "/ws", kind="websocket") == "websocket.close"
    assert call(AuthFront(None, secret=""), "POST", "/collective_rpc") == "passed"  # no secret: loopback only
