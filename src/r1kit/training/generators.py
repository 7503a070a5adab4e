"""Where rollouts come from, and how the policy's weights reach them.

- vLLM: TRL's weight walk replaced by r1kit's, one gathered module at a time (`walk_weights_by_layer`); on vLLM's CPU
  build, where TRL's weight sync cannot run, a colocated engine reloads through vLLM's own `reload_weights`
  (`reload_vllm_weights`) and a server reads safetensors files the trainer writes (`push_weights_through_files`).
- The generators asynchronous rollouts draw from (`r1kit.training.rollouts`), each the only user of what it wraps, with no
  collective in `generate`: `TransformersGenerator` (a copy of the policy, sampling with its own seeded random
  generator and recording each sampled token's log-probability), `ColocatedGenerator` (the colocated vLLM engine) and
  `ServerGenerator` (this process's own client of the vLLM server).

With `r1kit.training.trainer`, the only module on TRL's private API (the weight walk of TRL's `VLLMGeneration`), pinned by
tests/test_trl_internals.py.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from r1kit.errors import ConfigError, GenerationUnavailable, RefusedReply, one_line
from r1kit.training.curriculum import prompt_key
from r1kit.training.rollouts import (
    READ_AHEAD_STATE,
    ROLLOUT_STATE,
    ROLLOUT_TOTALS,
    Lookahead,
    RolloutEngine,
    batch_signature,
    fold_into_advantages,
    importance_weights,
    optimizer_steps_per_batch,
)
from r1kit.training.weightsync import Unsupported, iter_layer_weights, lora_layers
from r1kit.vllm_front import authenticated_client

logger = logging.getLogger(__name__)

# VLLM_CPU_KVCACHE_SPACE when the environment leaves it unset (where it is unset, vLLM 0.31 sizes the cache from
# gpu_memory_utilization: 0.92 of the machine's memory)
DEFAULT_CPU_KVCACHE_GIB = 1


def walk_weights_by_layer(generation) -> None:
    """TRL's weight walk for vLLM (`_iter_named_params`, which both its sync modes and r1kit's CPU paths read),
    replaced on `generation` by `r1kit.training.weightsync`'s: one module gathered at a time, a LoRA layer merged from its own
    gathered weights (TRL gathers the whole model to merge an adapter, trl#5766). FSDP1 and adapters that walk does not
    cover keep TRL's, said once."""
    original, dist = generation._iter_named_params, generation._dist
    try:
        lora_layers(generation.model)
    except Unsupported as why:
        logger.info("Weight sync to vLLM: TRL's walk (gathers the whole model to merge the adapter): %s", why)
        return
    if dist.is_fsdp and dist.fsdp_version == 1:
        return
    gather = dist.gather_params if dist.is_zero3 else None
    generation._iter_named_params = lambda: iter_layer_weights(generation.model, gather, generation._fix_param_name_to_vllm)
    generation.r1kit_original_walk = original


def policy_weights(generation) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's current weights, named as vLLM expects, one at a time (`walk_weights_by_layer`; a collective under
    ZeRO-3 and FSDP: every process walks to the end). A tied output head is listed explicitly, last: vLLM's reload
    repacks `lm_head` from its own entry, so leaving it out (as a tied model's parameter walk does) keeps a stale head
    that mixes old and new weights."""
    tied = getattr(generation.model.config, "tie_word_embeddings", False)
    embedding, head = None, False
    for name, tensor in generation._iter_named_params():
        head = head or name == "lm_head.weight"
        if tied and embedding is None and name.endswith("embed_tokens.weight"):
            embedding = tensor.detach().clone()  # gathered for this yield only (ZeRO-3): kept for the head
        yield name, tensor
    if tied and not head and embedding is not None:
        yield "lm_head.weight", embedding


def reload_vllm_weights(generation) -> None:
    """Pushes the policy's current weights into a colocated vLLM engine through vLLM's `reload_weights` (the CPU
    backend's path: it restores each layer's parameters, loads and repacks), streamed: vLLM copies each weight as it
    comes."""
    generation.llm.collective_rpc("reload_weights",
                                  kwargs={"weights_iterator": policy_weights(generation), "is_checkpoint_format": True})
    generation.llm.reset_prefix_cache()


FILE_BUCKET_BYTES = 256 * 2**20  # weights written per safetensors file by the file push: bounds what is held at once


def push_weights_through_files(generation, folder: Path) -> None:
    """Server mode without NCCL (vLLM's CPU build): every process walks the weights, the main one writes them as
    safetensors files of at most `FILE_BUCKET_BYTES` into `folder` and asks the server to reload from there
    (`POST /collective_rpc reload_weights`, one of vLLM's development endpoints, so the server runs with
    VLLM_SERVER_DEV_MODE=1), then resets its prefix cache. The server must read `folder`: it runs on this machine or
    shares the file system."""
    from safetensors.torch import save_file

    if not generation.accelerator.is_main_process:
        for _ in generation._iter_named_params():  # take part in the gathers (ZeRO-3, FSDP)
            pass
        return
    for old in folder.glob("*.safetensors"):
        old.unlink()
    bucket, size, files = {}, 0, 0
    for name, tensor in policy_weights(generation):
        bucket[name] = tensor.detach().contiguous().clone()
        size += tensor.numel() * tensor.element_size()
        if size >= FILE_BUCKET_BYTES:
            files += 1
            save_file(bucket, str(folder / f"model-{files:05d}.safetensors"))
            bucket, size = {}, 0
    if bucket:
        save_file(bucket, str(folder / f"model-{files + 1:05d}.safetensors"))
    client = generation.vllm_client
    client._post(f"{client.base_url}/collective_rpc",
                 json={"method": "reload_weights", "kwargs": {"weights_path": str(folder)}})
    client.reset_prefix_cache()


@contextlib.contextmanager
def no_nccl_communicator():
    """While TRL builds its server client: skip the NCCL communicator it opens (CUDA only). Weights then go through
    files (`push_weights_through_files`); the client's HTTP generation is TRL's, unchanged."""
    from trl.generation.vllm_client import VLLMClient

    original = VLLMClient.init_communicator
    VLLMClient.init_communicator = lambda self, device=0: None
    try:
        yield
    finally:
        VLLMClient.init_communicator = original




# --------------------------------------------------------------------------------------------------------------------
# The generators asynchronous rollouts draw from
# --------------------------------------------------------------------------------------------------------------------
class SampleWithOwnGenerator:
    """A transformers logits processor that does the sampling itself, last, with `generator` (a seeded
    `torch.Generator`, so a background thread draws the same tokens on every run without touching torch's global
    random state, which the trainer's thread uses), and records each sampled token's log-probability under the
    warped distribution (temperature, top-k, top-p, min-p, as vLLM's `processed_logprobs`). It returns a score row
    that leaves only the sampled token, so transformers' greedy step picks exactly it."""

    def __init__(self, warpers: list, generator: torch.Generator | None, greedy: bool):
        self.warpers, self.generator, self.greedy = warpers, generator, greedy
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        logps = torch.log_softmax(scores, dim=-1)
        if self.greedy:
            tokens = logps.argmax(dim=-1)
        else:
            tokens = torch.multinomial(logps.exp(), 1, generator=self.generator).squeeze(1)
        self.logprobs.append(logps.gather(1, tokens[:, None]).squeeze(1))
        only = torch.full_like(scores, -float("inf"))
        return only.scatter_(1, tokens[:, None], 0.0)


def sampling_warpers(config) -> list:
    """transformers' warpers for the sampling settings of a `GenerationConfig` (TRL's: temperature, top_k, top_p,
    min_p; 0 / 1.0 / None leave one out), in transformers' own order."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = []
    if config.temperature is not None and config.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k:
        warpers.append(TopKLogitsWarper(config.top_k))
    if config.top_p is not None and config.top_p < 1.0:
        warpers.append(TopPLogitsWarper(config.top_p))
    if config.min_p:
        warpers.append(MinPLogitsWarper(config.min_p))
    return warpers


UNSUPPORTED_SAMPLING = ("typical_p", "epsilon_cutoff", "eta_cutoff", "top_h", "num_beams", "penalty_alpha")


def check_sampling(config) -> None:
    """Sampling settings `TransformersGenerator` does not reproduce are refused (they would be silently dropped)."""
    defaults = type(config)()
    for name in UNSUPPORTED_SAMPLING:
        if getattr(config, name, None) != getattr(defaults, name, None):
            raise ConfigError(f"async_rollouts with transformers generation samples with temperature, top_k, top_p "
                              f"and min_p; generation_kwargs sets {name}: remove it, or set async_rollouts: false")


class TransformersGenerator:
    """A copy of the policy that generates on the producer's thread: the same `GenerationConfig` TRL generates with,
    sampling by `SampleWithOwnGenerator`. Loaded with staged weights (`load`), by the names `iter_layer_weights`
    gives (a LoRA adapter merged, sharded weights gathered)."""

    stages_weights = True

    def __init__(self, model: torch.nn.Module, generation_config, eos_token_ids: list[int], pad_token_id: int):
        check_sampling(generation_config)
        self.model = model.eval().requires_grad_(False)
        self.sample = bool(generation_config.do_sample)
        self.warpers = sampling_warpers(generation_config)
        config = copy.deepcopy(generation_config)
        # transformers' sampling is off: the processor samples (with its own generator) and leaves one token
        config.do_sample = False
        config.temperature = config.top_k = config.top_p = config.min_p = None
        self.config = config
        self.eos, self.pad = list(eos_token_ids), pad_token_id
        self.params = dict(self.model.named_parameters())
        self.loaded_once = False

    @classmethod
    def of_policy(cls, policy: torch.nn.Module, **kwargs) -> TransformersGenerator:
        """The generator for `policy` (the unwrapped model, perhaps a LoRA model or sharded): a new model of the base
        model's class and configuration, on the same device and in the same dtype, its weights left for `load`. Not a
        deep copy: TRL and r1kit patch the policy's instance (TRL's fused LM head wraps its `forward` around the
        policy's own; r1kit's packed pass switches its attention), and a copy would carry those patches back to the
        policy; under ZeRO-3 `from_config` would partition the copy too."""
        base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        parameter = next(base.parameters())
        with _no_init_weights():  # every weight is loaded before the first job
            model = type(base)(copy.deepcopy(base.config))
        model.tie_weights()  # (a tied output head is the embedding: loaded once, under the embedding's name)
        model.to(device=parameter.device, dtype=parameter.dtype)
        model.generation_config = copy.deepcopy(base.generation_config)
        return cls(model, **kwargs)

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        seen = set()
        with torch.no_grad():
            for name, tensor in weights:
                param = self.params.get(name)
                if param is None:
                    raise KeyError(f"the rollout generator has no weight named {name!r}")
                param.copy_(tensor)
                seen.add(name)
        missing = set(self.params) - seen
        if missing and not self.loaded_once:
            raise KeyError(f"the staged weights miss {len(missing)} of the generator's, e.g. {sorted(missing)[:3]}")
        self.loaded_once = True

    def generate(self, prompt_ids: list[list[int]], num_generations: int, seed: int) -> tuple[list, list]:
        from transformers import LogitsProcessorList

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, prompt in enumerate(prompt_ids):
            ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[i, width - len(prompt):] = 1
        generator = torch.Generator(device=device).manual_seed(seed)
        sampler = SampleWithOwnGenerator(self.warpers, generator, greedy=not self.sample)
        # synced_gpus off: this copy is whole on every rank; transformers would otherwise keep the ranks' token loops
        # in step under ZeRO-3 or FSDP with a collective per token, on this thread, racing the trainer's collectives
        output = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                     generation_config=self.config, logits_processor=LogitsProcessorList([sampler]),
                                     synced_gpus=False)
        completions = output[:, width:].tolist()
        logprobs = torch.stack(sampler.logprobs, dim=1).tolist() if sampler.logprobs else [[] for _ in prompt_ids]
        rows, row_logps = [], []
        for tokens, logps in zip(completions, logprobs):
            end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos), len(tokens))
            rows.append(tokens[:end])
            row_logps.append(logps[:end])
        return rows, row_logps

    def close(self) -> None:
        pass


def _no_init_weights():
    """transformers' context that skips weight initialisation (the generator's weights are all loaded), where it has
    one."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        return contextlib.nullcontext()
    return no_init_weights()


def top_logprob(logprobs: list | None, rows: int) -> list:
    """The sampled token's log-probability per token (vLLM returns top-k lists with it first), None where vLLM had
    none (TRL reads None as NaN: no correction for that token)."""
    if logprobs is None:
        return [None] * rows
    return [[lp[0] if lp else None for lp in seq] for seq in logprobs]


class ColocatedGenerator:
    """The colocated vLLM engine (one per process, no tensor parallelism, no sleep mode), used by the producer alone:
    staged weights are loaded through the run's own sync (`sync`: TRL's, or `reload_vllm_weights` on the CPU build)
    with the weight walk pointed at them."""

    stages_weights = True

    def __init__(self, generation, sync: Callable[[], None]):
        self.generation, self.sync = generation, sync

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        generation = self.generation
        walk = generation.__dict__.get("_iter_named_params")
        generation._iter_named_params = lambda: iter(weights)
        try:
            self.sync()
        finally:
            if walk is None:
                del generation._iter_named_params
            else:
                generation._iter_named_params = walk

    def generate(self, prompt_ids: list[list[int]], num_generations: int, seed: int) -> tuple[list, list]:
        _, completions, logprobs, _ = self.generation.generate(prompts=prompt_ids, images=None,
                                                               num_generations=num_generations)
        return [list(c) for c in completions], top_logprob(logprobs, len(completions))

    def close(self) -> None:
        pass


class ServerGenerator:
    """This process's own client of the vLLM server (TRL's `VLLMClient`, authenticated as the trainer's), with TRL's
    sampling settings; each request bounded by `timeout` seconds. The trainer pushes the weights to the server."""

    stages_weights = False

    def __init__(self, client, sampling: dict, timeout: float, vocab_size: int | None = None):
        self.client, self.sampling = client, sampling
        self.vocab_size = vocab_size
        client.session.request = functools.partial(_with_timeout, client.session.request, timeout)

    def generate(self, prompt_ids: list[list[int]], num_generations: int, seed: int) -> tuple[list, list]:
        unique = prompt_ids[::num_generations]  # rows repeat each prompt num_generations times in a row, as in TRL
        output = self.client.generate(prompts=unique, n=num_generations, **self.sampling)
        completions = output.get("completion_ids") if isinstance(output, dict) else None
        if not isinstance(completions, list) or len(completions) != len(prompt_ids):
            raise RefusedReply(f"the vLLM server returned {len(completions) if isinstance(completions, list) else 0} "
                               f"completions for {len(prompt_ids)} rows")
        logprobs = top_logprob(output.get("logprobs"), len(completions))
        problem = reply_problem(completions, logprobs, self.vocab_size, self.sampling.get("max_tokens"),
                                self.sampling.get("logprobs") is not None)
        if problem:
            raise RefusedReply(f"refused the vLLM server's reply: {problem}")
        return completions, logprobs

    def close(self) -> None:
        self.client.session.close()


def reply_problem(completions: list, logprobs: list, vocab_size: int | None, max_tokens: int | None,
                  logprobs_asked: bool) -> str | None:
    """Why a generation server's reply cannot be trained on, or None: every completion a list of token ids in the
    vocabulary and at most `max_tokens` long; when log-probabilities were asked for, one finite value <= 0 per token
    (a NaN turned the off-policy correction off without a word; an infinity made its weight infinite or zero)."""
    for row, tokens in enumerate(completions):
        if not isinstance(tokens, list) or (max_tokens and len(tokens) > max_tokens):
            return f"row {row}: not a list of at most {max_tokens} token ids"
        for token in tokens:
            if isinstance(token, bool) or not isinstance(token, int) or token < 0 or (vocab_size and token >= vocab_size):
                return f"row {row}: token id {token!r} outside the vocabulary ({vocab_size})"
        if not logprobs_asked:
            continue
        values = logprobs[row] if row < len(logprobs) else None
        if not isinstance(values, list) or len(values) != len(tokens):
            return f"row {row}: {len(values) if isinstance(values, list) else 'no'} log-probabilities for {len(tokens)} tokens"
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 1e-4:
                return f"row {row}: log-probability {value!r} (not a finite value <= 0)"
    return None


def _with_timeout(request, timeout: float, method, url, **kwargs):
    kwargs.setdefault("timeout", timeout)
    return request(method, url, **kwargs)


def server_sampling(generation) -> dict:
    """TRL's server-mode sampling settings, read off its `VLLMGeneration`."""
    return {"repetition_penalty": generation.repetition_penalty, "temperature": generation.temperature,
            "top_p": generation.top_p, "top_k": generation.top_k,
            "min_p": 0.0 if generation.min_p is None else generation.min_p,
            "max_tokens": generation.max_completion_length, "logprobs": generation.logprobs,
            "structured_outputs_regex": generation.structured_outputs_regex,
            "generation_kwargs": generation.generation_kwargs}


def server_client(generation, args):
    """A new client of the server TRL's generation talks to (one per process: the main one's is the trainer's own,
    used for weight pushes on the trainer's thread), authenticated with the shared secret, with no NCCL group."""
    from trl.generation.vllm_client import VLLMClient  # deferred: trl's vLLM client (imports requests)

    base_url = generation.server_base_url or f"http://{generation.server_host}:{generation.server_port}"
    with authenticated_client(args):
        return VLLMClient(base_url=base_url, group_port=generation.group_port,
                          connection_timeout=generation.server_timeout)


def policy_walk(model: torch.nn.Module, gather) -> Callable[[], Iterator[tuple[str, torch.Tensor]]]:
    """The policy's weights as the transformers generator names them (a LoRA adapter merged, one gathered module
    at a time): a collective under ZeRO-3 and FSDP, which every process walks to the end."""
    return lambda: iter_layer_weights(model, gather)


# --------------------------------------------------------------------------------------------------------------------
# The trainer's side of asynchronous rollouts
# --------------------------------------------------------------------------------------------------------------------
# per generation batch: (metric, how the processes' values combine)
ROLLOUT_METRICS = (("staleness", "max"), ("stale_dropped", "sum"), ("read_ahead_share", "mean"),
                   ("trainer_wait_seconds", "mean"), ("generator_wait_seconds", "mean"), ("is_ratio_mean", "mean"),
                   ("is_ratio_clipped_share", "mean"))


class AsyncRolloutHooks:
    """What `async_rollouts: true` changes in TRL's `GRPOTrainer` (a mixin of `r1kit.training.trainer.R1Trainer`, which sets
    `self.rollouts`: a `RolloutEngine`, or None when the run generates in turn): the producer runs while `train` does,
    the data is read ahead at each step start, every generation goes through the producer, and the loss corrects for
    the sampler (TRL's truncated importance weights)."""

    rollouts: RolloutEngine | None = None
    _ahead: Lookahead | None = None

    def _rollout_engine(self) -> RolloutEngine:
        """The producer for `async_rollouts`: it generates with the colocated vLLM engine, a client of the vLLM server
        of its own, or a copy of the policy (transformers)."""
        args = self.args
        if self.use_vllm and args.vllm_mode == "server":
            generator = ServerGenerator(server_client(self.vllm_generation, args), server_sampling(self.vllm_generation),
                                        args.rollout_timeout, vocab_size=self.model.config.vocab_size)
        elif self.use_vllm:
            generator = ColocatedGenerator(self.vllm_generation, self.vllm_generation.sync_weights)
            self._vllm_walk = self.vllm_generation._iter_named_params  # (the generator points it at staged weights)
        else:
            policy = self.accelerator.unwrap_model(self.model)
            generator = TransformersGenerator.of_policy(
                policy, generation_config=self.generation_config, eos_token_ids=self.eos_token_ids,
                pad_token_id=self._tokenizer.pad_token_id)
        return RolloutEngine(generator, args.max_staleness, args.weight_sync_steps, args.seed,
                             self.accelerator.process_index, wait_limit=args.rollout_timeout,
                             steps_per_batch=optimizer_steps_per_batch(args.steps_per_generation, args.num_iterations,
                                                                       args.gradient_accumulation_steps))

    def train(self, *args, **kwargs):
        if self.rollouts is None:
            return super().train(*args, **kwargs)
        self.rollouts.start()  # a fresh queue: a resume or a rollback generates what was queued again
        self._ahead = None
        try:
            return super().train(*args, **kwargs)
        finally:
            self.rollouts.stop()
            self._ahead = None
            if self.accelerator.is_main_process:  # the run's totals (this process's), beside its other records
                totals = self.rollouts.state_dict(self.state.global_step)
                Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
                (Path(self.args.output_dir) / ROLLOUT_TOTALS).write_text(json.dumps(totals, indent=1) + "\n")

    def hand_weights_to_generator(self, current: bool = False) -> None:
        """Every process, at the start of an optimizer step (and before the held-out evaluation, `current`): the
        policy's weights to the rollout generator when `weight_sync_steps` have passed (staged, or pushed to a vLLM
        server). Gathering them is a collective under ZeRO-3 and FSDP."""
        step, rollouts = self.state.global_step, self.rollouts
        if not (rollouts.newest() != step if current else rollouts.due(step)):
            return
        if rollouts.stage is None:
            try:
                self.vllm_generation.sync_weights()
            except Exception as error:  # noqa: BLE001 - the server is gone: TRL's client retried already
                raise GenerationUnavailable(f"pushing the weights of step {step} to the vLLM server failed "
                                            f"({one_line(error)})") from error
            self._last_loaded_step = step
            rollouts.pushed(step)
            return
        if self.use_vllm:
            weights = self._vllm_walk()
        else:
            gather = self._dist.gather_params if self._dist.is_zero3 else None
            weights = policy_walk(self.accelerator.unwrap_model(self.model), gather)()
        rollouts.stage_weights(weights, step)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """transformers' step start: the generator gets the weights if due, then the data is read ahead (`Lookahead`):
        each generation batch becomes a job for the producer as soon as it is read."""
        if self.rollouts is None:
            return super().get_batch_samples(epoch_iterator, num_batches, device)
        self.hand_weights_to_generator()
        if self._ahead is None or self._ahead.source is not epoch_iterator:
            self._ahead = Lookahead(epoch_iterator, self._batch_signature, self._submit_ahead)
        samples = super().get_batch_samples(self._ahead, num_batches, device)
        steps_left = self.state.max_steps - self.state.global_step - 1 if self.state.max_steps > 0 else math.inf
        self._ahead.fill(min(self.rollouts.lookahead, steps_left))  # (nothing read ahead past the last step)
        return samples

    def _batch_signature(self, rows: list[dict]) -> tuple:
        return batch_signature(rows, prompt_key)

    def _submit_ahead(self, rows: list[dict]) -> None:
        """A generation batch read ahead, tokenized as TRL will tokenize it (an environment that rewrites prompts at
        reset makes the rows differ: they are then generated when asked for)."""
        prompts = copy.deepcopy([row.get("prompt") for row in rows])
        saved = getattr(self, "_batch_environments", None)
        if self.environment_factories is not None:  # (TRL renders each row with its environment's tools)
            self._batch_environments = [row.get("environment") if self._multi_environment else None for row in rows]
        try:
            prompt_ids, images, _ = self._tokenize_prompts(prompts)
        finally:
            self._batch_environments = saved
        if images is None:
            self.rollouts.submit_ahead(self._batch_signature(rows), prompt_ids, self.num_generations)

    def _prepare_inputs(self, generation_batch):
        if self.rollouts is not None and self.model.training:
            generate_every = self.args.steps_per_generation * self.num_iterations
            if self._step % generate_every == 0 or self._buffered_inputs is None:  # (TRL's own test: it generates)
                self.rollouts.expect(self._batch_signature(generation_batch))
        return super()._prepare_inputs(generation_batch)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """With async rollouts every generation goes through the producer: in training the rows read ahead for this
        batch, the rest urgently; in evaluation urgently, with the policy's current weights."""
        if self.rollouts is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        if images is not None or multimodal_fields:
            raise ConfigError("async_rollouts generates from text prompts only and this batch has images; set "
                              "async_rollouts: false")
        step = self.state.global_step
        if self.model.training:
            return self.rollouts.take(prompt_ids, num_generations, step)
        self.hand_weights_to_generator(current=True)
        return self.rollouts.now(prompt_ids, num_generations, step)

    def _correct_for_the_sampler(self, output: dict) -> None:
        """After a generation batch is scored: the importance weights of the sampler's log-probabilities against the
        policy's (TRL's truncated correction, `vllm_importance_sampling_*`). TRL applies them to vLLM's samples
        itself. The transformers generator's are folded into the advantages (`fold_into_advantages`; for VESPO handed
        over as TRL hands vLLM's): here, when TRL computed the policy's log-probabilities at scoring (the batch is
        trained over several steps or iterations), otherwise in the loss pass (`_compute_loss`), whose
        log-probabilities are then the same values and cost no extra pass. Logs the batch's `rollouts/*` figures."""
        metrics = self.rollouts.batch_metrics()
        sampling, old = output.get("sampling_per_token_logps"), output.get("old_per_token_logps")
        if sampling is not None and old is not None:
            metrics.update(self._weigh(output, old, fold=not self.use_vllm))
        self._log_rollout_metrics(metrics)

    def _weigh(self, batch: dict, policy_logps: torch.Tensor, fold: bool) -> dict:
        """The importance weights of `batch`'s sampled tokens, folded into its advantages when `fold`; their figures."""
        args = self.args
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        weights, stats = importance_weights(policy_logps, batch["sampling_per_token_logps"], mask,
                                            args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_min,
                                            args.vllm_importance_sampling_clip_max)
        if fold:
            if self.loss_type == "vespo":
                batch["importance_sampling_ratio"] = weights
            else:
                batch["advantages"] = fold_into_advantages(batch["advantages"], weights)
        return {"is_ratio_mean": stats["ratio_mean"], "is_ratio_clipped_share": stats["clipped_share"]}

    def _compute_loss(self, model, inputs):
        """The loss; for a micro-batch of the transformers generator whose importance weights are still to come (TRL
        did not compute the policy's log-probabilities at scoring: the batch is trained in this one step, so they are
        the loss pass's own), the weights are taken from the loss pass's log-probabilities and folded into the
        advantages before TRL reads them."""
        lazy = (self.rollouts is not None and not self.use_vllm and inputs.get("old_per_token_logps") is None
                and inputs.get("sampling_per_token_logps") is not None)
        if not lazy:
            return super()._compute_loss(model, inputs)
        score, weighed = self._get_per_token_logps_and_entropies, []

        def score_then_weigh(*args, **kwargs):
            result = score(*args, **kwargs)
            if not weighed:
                weighed.append(self._weigh(inputs, result[0].detach(), fold=True))
            return result

        self._get_per_token_logps_and_entropies = score_then_weigh
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            del self._get_per_token_logps_and_entropies
        self._log_rollout_metrics(weighed[0] if weighed else {}, names=("is_ratio_mean", "is_ratio_clipped_share"))
        return loss

    def _log_rollout_metrics(self, metrics: dict, names: tuple | None = None) -> None:
        """`rollouts/<name>` for each metric (NaN: not measured here), combined over every process."""
        chosen = [(name, combine) for name, combine in ROLLOUT_METRICS if names is None or name in names]
        values = torch.tensor([[metrics.get(name, math.nan) for name, _ in chosen]], dtype=torch.float32,
                              device=self.accelerator.device)
        gathered = self.accelerator.gather(values).cpu()
        for column, (name, combine) in enumerate(chosen):
            value = gathered[:, column]
            if torch.isnan(value).all():
                continue
            value = {"max": value.max(), "sum": value.sum(), "mean": value.nanmean()}[combine]
            self._metrics["train"][f"rollouts/{name}"].append(float(value))

    def _save_rollout_state(self, trial) -> None:
        """The checkpoint's weights version and what was read ahead (`r1kit_rollouts.json`; the main process), and
        each rank's batches generated ahead, with the weights version of each (`r1kit_read_ahead_{rank}.pt`): a
        resume trains the batches the uninterrupted run trains, generated by the same weights."""
        if self.rollouts is None:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        torch.save({"jobs": self.rollouts.read_ahead_state()},
                   os.path.join(folder, READ_AHEAD_STATE.format(rank=self.accelerator.process_index)))
        if not self.args.should_save:
            return
        with open(os.path.join(folder, ROLLOUT_STATE), "w") as f:
            json.dump(self.rollouts.state_dict(self.state.global_step), f)

    def _load_rollout_state(self, checkpoint: str) -> None:
        ahead = os.path.join(checkpoint, READ_AHEAD_STATE.format(rank=self.accelerator.process_index))
        if os.path.exists(ahead):  # (plain lists and numbers: loads with weights_only)
            self.rollouts.keep_read_ahead(torch.load(ahead, weights_only=True).get("jobs") or [])
        path = os.path.join(checkpoint, ROLLOUT_STATE)
        if not os.path.exists(path):
            return
        with open(path) as f:
            state = json.load(f)
        self.rollouts.load_state_dict(state)
        if self.accelerator.is_main_process:
            logger.info("Async rollouts: %s holds the weights of step %s and %d batch(es) generated ahead (taken as "
                        "they were); of the %s read ahead at its save, the rest are generated again.", checkpoint,
                        state.get("weights_version"), self.rollouts.kept, state.get("queued_batches"))
