"""Pre-flight checks for scaled-out runs: each catches, before any model loads, a set-up that would otherwise fail
minutes (or hours) later, and says what to change."""

from __future__ import annotations

import importlib.util
import os
import socket
import time
from typing import Any

from r1kit.configs import ConfigError


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def wait_for_server(host: str, port: int, timeout: float, interval: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(interval, max(0.1, deadline - time.monotonic()))):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def vllm_server_address(training_args: Any) -> tuple[str, int]:
    base = training_args.vllm_server_base_url
    if base:
        from urllib.parse import urlparse

        url = urlparse(base if "://" in base else f"http://{base}")
        return url.hostname or "localhost", url.port or (443 if url.scheme == "https" else 80)
    host = training_args.vllm_server_host
    return ("127.0.0.1" if host in ("0.0.0.0", "") else host), int(training_args.vllm_server_port)


def check_vllm(training_args: Any, server_wait: float | None = None) -> None:
    if not training_args.use_vllm:
        return
    if not installed("vllm"):
        raise ConfigError("use_vllm: true needs vLLM: pip install 'r1kit[vllm]' (on a CUDA machine), or set use_vllm: false")
    if not cuda_available():
        raise ConfigError("use_vllm: true needs a CUDA GPU and none was found; set use_vllm: false to generate with transformers")
    if training_args.vllm_mode == "colocate":
        utilisation = training_args.vllm_gpu_memory_utilization
        if not 0.0 < utilisation < 1.0:
            raise ConfigError(
                f"vllm_gpu_memory_utilization must be in (0, 1) in colocate mode (the rest of the GPU trains), got {utilisation}; "
                "0.2-0.5 is typical"
            )
    elif training_args.vllm_mode == "server":
        host, port = vllm_server_address(training_args)
        wait = min(float(training_args.vllm_server_timeout), 240.0) if server_wait is None else server_wait
        if not wait_for_server(host, port, wait):
            raise ConfigError(
                f"no vLLM server answered at {host}:{port} within {wait:.0f} s. Start one first (e.g. "
                "`CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model MODEL`), point vllm_server_host/port or "
                "vllm_server_base_url at it, or use vllm_mode: colocate"
            )
    else:
        raise ConfigError(f"vllm_mode must be server or colocate, got {training_args.vllm_mode!r}")


def check_deepspeed(training_args: Any) -> None:
    wants = bool(training_args.deepspeed) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    if wants and not installed("deepspeed"):
        raise ConfigError(
            "DeepSpeed was requested (deepspeed config or an accelerate DeepSpeed config) but is not installed: "
            "pip install 'r1kit[deepspeed]', or launch with recipes/accelerate_configs/ddp.yaml or fsdp.yaml"
        )


def check_quantisation(model_args: Any) -> None:
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not cuda_available():
        raise ConfigError(
            "load_in_4bit / load_in_8bit need a CUDA GPU (bitsandbytes); remove them to train in full precision on CPU"
        )


def preflight(training_args: Any, model_args: Any, server_wait: float | None = None) -> None:
    """All checks, cheapest first."""
    check_quantisation(model_args)
    check_deepspeed(training_args)
    check_vllm(training_args, server_wait)
