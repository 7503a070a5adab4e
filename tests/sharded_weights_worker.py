"""One rank of tests/test_weightsync.py, under `accelerate launch --num_processes 2` with a sharding config: a tiny
Llama with a LoRA adapter (non-zero, so that merging matters), prepared by accelerate (FSDP2 or ZeRO-3), walked by
`r1kit.training.weightsync.iter_layer_weights` as a weight sync walks it. Checks every yielded tensor against the same model
merged on one process, and measures how much of the model was gathered at once at each yield: ZeRO-3's parameters
marked available, FSDP2's gathered tensors still alive. Rank 0 writes the figures as JSON to argv[1]."""

from __future__ import annotations

import copy
import json
import sys
import weakref

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from r1kit.training.weightsync import iter_layer_weights


def tiny_lora_model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)
    return model


class Gathered:
    """FSDP2: the tensors `full_tensor` returned that are still alive (weak references), and their bytes."""

    def __init__(self):
        self.alive: list[weakref.ref] = []

    def install(self) -> None:
        from torch.distributed.tensor import DTensor

        original = DTensor.full_tensor
        gathered = self

        def full_tensor(tensor, *args, **kwargs):
            result = original(tensor, *args, **kwargs)
            gathered.alive.append(weakref.ref(result))
            return result

        DTensor.full_tensor = full_tensor

    def bytes_alive(self) -> int:
        return sum(t.numel() * t.element_size() for t in (ref() for ref in self.alive) if t is not None)


def cpu_accelerator() -> Accelerator:
    """The accelerator as r1kit's trainer gets it on ranks without a GPU (`r1kit.launching.sharding`)."""
    from accelerate.state import PartialState

    from r1kit.launching.sharding import enable_fsdp_on_cpu, requested, skip_deepspeed_shm_build

    if requested().engine == "deepspeed":
        skip_deepspeed_shm_build()
        PartialState(backend="gloo")  # what ddp_backend: gloo gives: DeepSpeed's CPU accelerator over gloo
        return Accelerator()
    accelerator = Accelerator(cpu=True)
    enable_fsdp_on_cpu(accelerator)
    return accelerator


def main() -> None:
    accelerator = cpu_accelerator()
    model = tiny_lora_model()
    reference = {name.removeprefix("base_model.model."): tensor.detach().clone()
                 for name, tensor in copy.deepcopy(model).merge_and_unload().state_dict().items()}
    whole = sum(t.numel() * t.element_size() for t in reference.values())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loader = torch.utils.data.DataLoader([torch.zeros(4, dtype=torch.long)] * 4, batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    bare = accelerator.unwrap_model(model)
    zero3 = accelerator.state.deepspeed_plugin is not None and accelerator.state.deepspeed_plugin.zero_stage == 3
    gathered = Gathered()
    gather = None
    if zero3:
        import deepspeed

        gather = deepspeed.zero.GatheredParameters
    else:
        gathered.install()

    def bytes_gathered_now() -> int:
        if not zero3:
            return gathered.bytes_alive()
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

        return sum(p.ds_numel * p.element_size() for p in bare.parameters() if p.ds_status == ZeroParamStatus.AVAILABLE)

    peak, worst, names = 0, 0.0, []
    for name, tensor in iter_layer_weights(bare, gather):
        peak = max(peak, bytes_gathered_now())
        names.append(name)
        worst = max(worst, (tensor.float() - reference[name].float()).abs().max().item())
        del tensor
    trl_peak = 0  # TRL's own walk of the same model, for comparison
    for _name, tensor in trl_walk(accelerator, bare):
        trl_peak = max(trl_peak, bytes_gathered_now())
        del tensor
    if accelerator.is_main_process:
        missing = sorted(set(reference) - set(names) - {"lm_head.weight"})  # tied: vLLM gets it from the embedding
        json.dump({"engine": "zero3" if zero3 else str(accelerator.distributed_type), "names": names,
                   "missing": missing, "max_difference": worst, "peak_gathered_bytes": peak, "whole_bytes": whole,
                   "trl_peak_gathered_bytes": trl_peak,
                   "largest_module_bytes": largest_module_bytes(reference)}, open(sys.argv[1], "w"))
    accelerator.wait_for_everyone()


def trl_walk(accelerator, model):
    """TRL's `VLLMGeneration._iter_named_params` on this model (the object needs no engine for its walk)."""
    from trl.generation.vllm_generation import DistributedBackend, VLLMGeneration

    generation = VLLMGeneration.__new__(VLLMGeneration)
    generation.model, generation.accelerator, generation._dist = model, accelerator, DistributedBackend(accelerator)
    return generation._iter_named_params()


def largest_module_bytes(reference: dict) -> int:
    modules: dict[str, int] = {}
    for name, tensor in reference.items():
        module = name.rsplit(".", 1)[0]
        modules[module] = modules.get(module, 0) + tensor.numel() * tensor.element_size()
    return max(modules.values())


if __name__ == "__main__":
    main()
