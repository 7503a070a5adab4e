"""The policy's weights as a generation engine takes them: whole, named as vLLM names them, one layer at a time.

Under FSDP2 and DeepSpeed ZeRO-3 each rank holds a shard of every weight, so pushing weights to vLLM gathers them.
TRL gathers one parameter at a time, except with a LoRA adapter: it gathers the whole model to merge the adapter in
place (trl#5766), so a sync needs the memory of the whole model on every rank. Here each module is gathered alone
(every rank walks the modules in the same order: gathering is a collective), and a LoRA layer is merged from its own
gathered base weight and adapter (`W + B @ A * scaling`), never in place; what is yielded is released before the next
module is gathered. Plain LoRA on linear layers only: anything else (DoRA, LoRA on embeddings or convolutions, several
active adapters, FSDP1) raises `Unsupported`, and the caller takes TRL's walk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

PEFT_PREFIX = "base_model.model."


class Unsupported(Exception):
    """A model this walk does not cover (the caller falls back to TRL's)."""


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor, for reading: a DTensor's shards gathered (a collective), anything else as it is; no graph."""
    with torch.no_grad():  # entered and left here: a generator must not leave grad mode off across its yields
        return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor.detach()


def vllm_name(name: str, fix_name: Callable[[str], str]) -> str | None:
    """A parameter's name as vLLM knows it, or None for a parameter vLLM has no place for (adapters, the original of
    a module PEFT saves)."""
    name = name.removeprefix(PEFT_PREFIX).replace(".base_layer", "")
    if ".lora_" in name or "original_module" in name:
        return None
    return fix_name(name.replace("modules_to_save.default.", ""))


def lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's LoRA layers by module name; `Unsupported` for any this walk cannot merge."""
    try:
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return {}
    layers = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        active = list(getattr(module, "active_adapters", []))
        if type(module) is not LoraLinear or len(active) != 1 or module.merged:
            raise Unsupported(f"LoRA layer {name} ({type(module).__name__}, adapters {active})")
        if getattr(module, "use_dora", {}).get(active[0]):
            raise Unsupported(f"DoRA on {name}")
        layers[name] = module
    return layers


def merged_lora_weight(layer, gather) -> Iterator[tuple[str, torch.Tensor]]:
    """('weight' | 'bias', tensor) of one LoRA linear layer with its adapter merged, gathered for the yield."""
    adapter = layer.active_adapters[0]
    base, lora_a, lora_b = layer.base_layer, layer.lora_A[adapter], layer.lora_B[adapter]
    params = [p for p in (base.weight, base.bias, lora_a.weight, lora_b.weight) if p is not None]
    with gather(params):
        weight = full(base.weight)
        delta = full(lora_b.weight).float() @ full(lora_a.weight).float()
        if layer.fan_in_fan_out:
            delta = delta.t()
        merged = weight + (delta * layer.scaling[adapter]).to(weight.dtype)
        del weight, delta
        yield "weight", merged
        if base.bias is not None:
            yield "bias", full(base.bias)


def iter_layer_weights(model: torch.nn.Module, gather: Callable[[list], contextlib.AbstractContextManager] | None = None,
                       fix_name: Callable[[str], str] = lambda name: name) -> Iterator[tuple[str, torch.Tensor]]:
    """(vLLM name, whole tensor) for every weight of `model` once (tied weights once), module by module. `gather(params)`
    is a context that makes ZeRO-3-partitioned parameters whole (None: nothing to gather; FSDP2's DTensors gather
    themselves). Every rank must walk it to the end."""
    gather = gather or (lambda params: contextlib.nullcontext())
    layers = lora_layers(model)
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        if module_name in layers:
            for suffix, tensor in merged_lora_weight(module, gather):
                name = vllm_name(f"{module_name}.{suffix}", fix_name)
                if name is not None:
                    yield name, tensor
            seen.update(id(p) for p in module.parameters())
            continue
        own = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) not in seen]
        if not own:
            continue
        seen.update(id(p) for _, p in own)
        with gather([p for _, p in own]):
            for param_name, param in own:
                name = vllm_name(f"{module_name}.{param_name}" if module_name else param_name, fix_name)
                if name is not None:
                    yield name, full(param)
