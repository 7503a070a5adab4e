"""Generation: completions of chat-formatted prompts, with vLLM when it can run here, else batched `transformers`.

`generate` runs a loaded model (greedy, or sampled with a temperature); `load_sampler` loads a model once and hands
back a function from prompts to `n` sampled completions each; `sample_n` does both for one set of prompts. `r1kit
evaluate` and `r1kit pass-rate` sample through `load_sampler`, the held-out accuracy callback through `generate`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r1kit.errors import one_line
from r1kit.machine import has_cuda, installed, vllm_is_cpu_build

logger = logging.getLogger(__name__)

Sampler = Callable[[list[str]], list[list[str]]]


def vllm_available() -> bool:
    """Whether vLLM can generate here: its CPU build, or vLLM with a CUDA GPU."""
    return installed("vllm") and (vllm_is_cpu_build() or has_cuda())


def load_vllm(model_path: str):
    """A vLLM engine for `model_path`, in the checkpoint's own dtype (vLLM's CPU build would otherwise compute a
    float32 model in bfloat16, and scores would differ from transformers'). On the CPU build the engine stays in this
    process (no spawned engine core, so a script needs no `__main__` guard) and gets a 1 GiB KV cache unless
    VLLM_CPU_KVCACHE_SPACE says otherwise."""
    from vllm import LLM

    dtype = checkpoint_dtype(model_path)
    if vllm_is_cpu_build():
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        return LLM(model=model_path, enforce_eager=True, dtype=dtype)
    return LLM(model=model_path, dtype=dtype)


def checkpoint_dtype(model_path: str) -> str:
    """The dtype a local checkpoint's config.json records (`auto` when there is none to read)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return "auto"
    recorded = config.get("dtype") or config.get("torch_dtype")
    return recorded if recorded in ("float32", "bfloat16", "float16") else "auto"


class GenerationStopped(Exception):
    """`generate` gave up at a token boundary because `should_stop()` said so (a stop signal): nothing it generated
    is returned."""


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 64,
             temperature: float = 0.0, top_p: float = 1.0, should_stop: Callable[[], bool] | None = None,
             progress: str | None = None, token_ids: bool = False) -> list:
    """One completion per prompt (`prompts` already chat-formatted), batched and left-padded.

    Args:
        max_new_tokens (`int`): tokens generated per completion at most.
        batch_size (`int`, defaults to `64`): prompts generated together.
        temperature (`float`, defaults to `0.0`): greedy when 0, else sampled at this temperature.
        top_p (`float`, defaults to `1.0`): nucleus sampling (only when sampling).
        should_stop (`Callable` or `None`): asked after every generated token; when it says True, generation ends
            there and `GenerationStopped` is raised (a batch of a real model can take minutes on a CPU).
        progress (`str` or `None`): with a description, a progress bar on stderr, advanced per generated token.
        token_ids (`bool`, defaults to `False`): each completion as its token ids (up to its end of sequence, special
            tokens kept: what a tool-call parser reads) instead of its decoded text.
    """
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    was_training = model.training
    model.eval()
    completions: list[str] = []
    batches = range(0, len(prompts), batch_size)
    watch = _TokenWatch(should_stop, progress, len(batches) * max_new_tokens)
    try:
        for number, i in enumerate(batches):
            batch = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
            # no_grad, not inference_mode: under FSDP2 the gathered weights' buffers are reused by the training
            # step after, and an inference tensor cannot be written outside inference mode
            with torch.no_grad():
                out = model.generate(
                    **batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, stopping_criteria=watch.criteria(), **sampling,
                )
            if watch.stopped:
                raise GenerationStopped()
            watch.reached((number + 1) * max_new_tokens)  # a batch that ended early on EOS: its share done
            new_tokens = out[:, batch["input_ids"].shape[1] :]
            if token_ids:
                completions += [_up_to_end(row.tolist(), tokenizer.eos_token_id) for row in new_tokens]
            else:
                completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        watch.close()
        tokenizer.padding_side = side
        model.train(was_training)
    return completions


def _up_to_end(ids: list[int], eos: int | None) -> list[int]:
    """A generated row up to and including its first end of sequence (what follows is padding)."""
    return ids[: ids.index(eos) + 1] if eos is not None and eos in ids else ids


class _TokenWatch:
    """Called by `model.generate` after every token: advances the progress bar and ends generation when asked to."""

    def __init__(self, should_stop: Callable[[], bool] | None, progress: str | None, total: int):
        from tqdm.auto import tqdm

        self.should_stop, self.stopped = should_stop, False
        self.bar = tqdm(total=total, desc=progress, unit="tok", leave=False) if progress else None

    def criteria(self):
        from transformers import StoppingCriteria, StoppingCriteriaList

        watch = self

        class Watch(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                import torch

                if watch.bar is not None:
                    watch.bar.update(1)
                watch.stopped = watch.stopped or bool(watch.should_stop and watch.should_stop())
                return torch.full((input_ids.shape[0],), watch.stopped, dtype=torch.bool, device=input_ids.device)

        return StoppingCriteriaList([Watch()])

    def reached(self, done: int) -> None:
        if self.bar is not None and done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _from_pretrained(model_path: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)


def load_sampler(model_path: str, n: int, max_new_tokens: int, temperature: float, top_p: float,
                 load_model: Callable[[], tuple[Any, Any]] | None = None) -> Sampler:
    """Loads the model once; returns a function from chat-formatted prompts to `n` completions each.

    Args:
        model_path (`str`): the model folder or Hub id (what vLLM loads).
        n (`int`): completions per prompt.
        max_new_tokens (`int`): tokens generated per completion at most.
        temperature (`float`) / top_p (`float`): the sampling (greedy at temperature 0).
        load_model (`Callable[[], tuple]` or `None`, defaults to `None`): `(model, tokenizer)` for batched
            `transformers` when vLLM cannot run here; `None` loads both from `model_path`.
    """
    if vllm_available():
        from vllm import SamplingParams

        try:
            llm = load_vllm(model_path)
            llm.generate(["warm-up"], SamplingParams(max_tokens=1))  # some kernels fail only when they first run
        except Exception as e:  # noqa: BLE001 - e.g. a head size vLLM's CPU attention has no kernel for
            logger.warning("vLLM cannot run %s (%s); generating with transformers instead.", model_path, one_line(e))
        else:
            logger.info("Generating with vLLM (%s).", "its CPU build" if vllm_is_cpu_build() else "CUDA")
            params = SamplingParams(n=n, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
            return lambda prompts: [[o.text for o in out.outputs] for out in llm.generate(prompts, params)]
    logger.info("Generating with transformers.")
    model, tokenizer = load_model() if load_model else _from_pretrained(model_path)

    def sample(prompts: list[str]) -> list[list[str]]:
        flat = generate(model, tokenizer, [p for p in prompts for _ in range(n)], max_new_tokens,
                        temperature=temperature, top_p=top_p)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    return sample


def sample_n(model_path: str, prompts: list[str], n: int, max_new_tokens: int, temperature: float,
             top_p: float) -> list[list[str]]:
    """`n` completions per prompt of the model at `model_path` (see `load_sampler`)."""
    return load_sampler(model_path, n, max_new_tokens, temperature, top_p)(prompts)
