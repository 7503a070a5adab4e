"""r1kit's trainer: TRL's `GRPOTrainer`, and the only module that touches TRL's private API.

`R1Trainer` adds, by overriding TRL's private methods (pinned by tests/test_trl_internals.py, so that a TRL upgrade
that moves them fails in one place):

- a reward tap (`_calculate_rewards`): every scored batch goes to the `reward_listeners`, e.g. the
  `CompletionsRecorder` (`r1kit.integrity.rewardtap`) that writes `completions.jsonl`;
- dynamic sampling and the pass-rate curriculum (`_generate_and_score_completions`), whose pure logic is
  `r1kit.training.curriculum`;
- the sampling state in every checkpoint (`_save_checkpoint`, `_load_optimizer_and_scheduler`).
- the per-token log-probability pass (`_get_per_token_logps_and_entropies`: the loss, old and reference passes), on
  `r1kit.training.trainpass`: each distinct prompt computed once and no compute on padding, with TRL's dense results.

With dynamic sampling and the curriculum off it generates and trains exactly as TRL's trainer does.

A GRPO group whose completions all get the same reward has zero advantage: it costs a full generation and gives no
gradient. `R1Trainer` extends one method for them, `_generate_and_score_completions`:

    dynamic_sampling: true           after scoring, groups whose rewards are all equal are dropped and more prompts are
                                     generated, round after round, until every rank's batch is full of groups with
                                     signal or `dynamic_sampling_max_rounds` rounds have run. Places still empty then
                                     hold dropped groups masked out of the loss (their completion mask is zero), so the
                                     batch keeps its shape: whole groups, the same count on every rank, gradient
                                     accumulation and `steps_per_generation` as configured. Only when no group in the
                                     whole batch has signal does it train as TRL would (zero advantages).
    curriculum_skip_solved: k        a prompt whose every completion was right in each of its last k appearances is
    curriculum_pass_rate_window: [a, b]   replaced, and so is one whose estimated pass rate lies outside [a, b],
    curriculum_explore: p            except with probability p; a prompt never seen is always taken.

The pass rate of a prompt at one appearance is the mean of `curriculum_reward` (a reward in `reward_funcs`,
`accuracy` by default) over its group. Replacement and refill prompts come from a second, seeded walk over the training
set (`PromptPicker`), which every rank takes in the same order, each rank using its own share. The record of pass
rates and the picker's position are saved in every checkpoint (`r1kit_sampling.json`), so a resumed run draws the same
prompts as the uninterrupted one.

Logged per step: `sampling/generation_rounds`, `sampling/zero_std_groups_dropped` (groups without signal generated but
not trained), `sampling/surplus_groups_dropped` (groups with signal beyond a full batch), `sampling/groups_generated`,
`sampling/curriculum_replaced`; `frac_reward_zero_std` describes the trained batch
(masked places count as groups without signal), not everything generated.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer, SFTTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer import utils as trl_utils
from trl.trainer.utils import nanstd, use_adapter

from r1kit.errors import ConfigError
from r1kit.hub import private_files_stay
from r1kit.integrity.rewardtap import (
    RECENT_REWARD_WARNINGS,
    UnjudgedWatch,
    checked_reward,
    own_rows,
    reward_kind,
    watch_reward_warnings,
)
from r1kit.launching.sharding import ShardedAsLaunched
from r1kit.machine import vllm_is_cpu_build
from r1kit.training.curriculum import (
    SAMPLING_STATE,
    CurriculumRules,
    PromptPicker,
    join_pieces,
    prompt_key,
    slice_rows,
)
from r1kit.training.generators import (
    DEFAULT_CPU_KVCACHE_GIB,
    AsyncRolloutHooks,
    no_nccl_communicator,
    push_weights_through_files,
    reload_vllm_weights,
    walk_weights_by_layer,
)
from r1kit.training.passchoice import PASS_STATE, PassRunner
from r1kit.training.rollouts import Lookahead
from r1kit.training.tools import UNPARSED_TURNS, CountedEnvironment, PythonInterpreter, checked_response, prefetch
from r1kit.vllm_front import authenticated_client

logger = logging.getLogger(__name__)


def _restore_on_indexed_cpu(storage, location: str):
    """Loads a storage whose map location is an indexed CPU device (`cpu:0`), which torch's own CPU handler refuses
    ("don't know how to restore data location ... cpu:0"). transformers 5.17 resumes a multi-process CPU run's
    optimizer with `map_location=args.device`, and that device is `cpu:<index>` there: without this, every 2-rank
    CPU resume dies. Registered through torch's serialization extension point; it never tags anything for saving."""
    return storage if location.startswith("cpu:") else None


torch.serialization.register_package(11, lambda obj: None, _restore_on_indexed_cpu)

TOOL_METRICS = ("tools/rollouts_using", "tools/calls_per_rollout", "tools/errors_per_rollout",
                "tools/seconds_per_rollout", "tools/infrastructure_failures")


class ColocatedEngine:
    """Greedy generation on the trainer's colocated vLLM engine at the policy's current weights: what the held-out
    accuracy callback generates with when the run has one (`R1Trainer.colocated_engine`).

    `sync()` pushes the weights when they changed since the engine last saw them (TRL's own bookkeeping, so the next
    training generation does not push them again); every process calls it, since under DeepSpeed ZeRO-3 or FSDP
    gathering the weights is a collective. `complete` runs on one process: the engine is that process's own copy.
    With async rollouts the engine is the producer's: the weights are staged for it, and `complete` runs on its thread.
    """

    def __init__(self, trainer: GRPOTrainer):
        self.trainer = trainer
        self.tokenizer = trainer.processing_class

    def sync(self) -> None:
        trainer = self.trainer
        if trainer.rollouts is not None:
            trainer.hand_weights_to_generator(current=True)
        elif trainer.state.global_step != trainer._last_loaded_step:
            trainer.vllm_generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step

    def complete(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        if self.trainer.rollouts is not None:
            return self.trainer.rollouts.call(lambda: self._complete(prompts, max_new_tokens))
        return self._complete(prompts, max_new_tokens)

    def _complete(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        from vllm import SamplingParams

        # Token ids, not text: vLLM would add the tokenizer's special tokens to a text prompt, and the chat template
        # already holds them (the transformers path tokenizes with add_special_tokens=False too).
        token_prompts = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outputs = self.trainer.vllm_generation.llm.generate(token_prompts, params, use_tqdm=False)
        return [output.outputs[0].text for output in outputs]


class StopOnNonFiniteGradients:
    """For a transformers trainer (GRPO's and SFT's): the gradient norm is computed before every optimizer step, and
    a non-finite one stops the run there, before the update, so that no checkpoint holds non-finite weights
    (transformers would apply it and log loss 0; the next step would die in sampling, and a checkpoint saved in
    between would make every resume die again)."""

    def _get_grad_norm(self, model, grad_norm=None):
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            raise ConfigError(
                f"step {self.state.global_step + 1}: the gradient norm is {float(grad_norm)}, so training diverged; "
                "the update was not applied and no checkpoint holds it. Lower learning_rate (or warm it up: warmup_ratio) "
                "and rerun; resume: auto continues from the last checkpoint")
        return grad_norm


def zero3_safe_lm_head_gather() -> None:
    """TRL's fused LM head gathers ZeRO-3's partitioned `lm_head` again in its backward, from the tensors autograd saved;
    those come back without DeepSpeed's attributes (`ds_status`: trl#7065's review), so every ZeRO-3 backward raised
    AttributeError. They hold the gathered weight already (saved while it was gathered), so they need no gather:
    passed over, the real parameters still are gathered. Not under ZeRO-3 it changes nothing."""
    original = trl_utils.maybe_gather_lm_head_ctx
    if getattr(original, "r1kit_zero3_safe", False):
        return

    @functools.wraps(original)
    def gather(*params):
        return original(*(p for p in params if p is None or hasattr(p, "ds_status") or not _zero3_enabled()))

    gather.r1kit_zero3_safe = True
    trl_utils.maybe_gather_lm_head_ctx = gather


def _zero3_enabled() -> bool:
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled  # deferred: the DeepSpeed integration

    return is_deepspeed_zero3_enabled()


zero3_safe_lm_head_gather()


def total_response_parser() -> None:
    """TRL's GRPO trainer parses every generated turn with `parse_response`; a turn whose tool-call arguments were
    nested hundreds deep made it raise RecursionError and the run died. Replaced, in TRL's trainer module, by
    `r1kit.training.tools.checked_response`: a turn whose calls cannot be parsed or taken is plain text."""
    from trl.trainer import grpo_trainer

    if not getattr(grpo_trainer.parse_response, "r1kit_checked", False):
        grpo_trainer.parse_response = checked_response(grpo_trainer.parse_response)
        grpo_trainer.parse_response.r1kit_checked = True


total_response_parser()


def checked_parse(*args, **kwargs):
    """TRL's parse_response as the trainer uses it (checked: `total_response_parser`)."""
    from trl.trainer import grpo_trainer

    return grpo_trainer.parse_response(*args, **kwargs)


class R1SFTTrainer(ShardedAsLaunched, StopOnNonFiniteGradients, SFTTrainer):
    """TRL's `SFTTrainer`, stopped before a non-finite update (`StopOnNonFiniteGradients`), sharded as launched
    (`ShardedAsLaunched`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_sharding_record()


class R1Trainer(ShardedAsLaunched, StopOnNonFiniteGradients, AsyncRolloutHooks, GRPOTrainer):
    """TRL's `GRPOTrainer` with dynamic sampling and the pass-rate curriculum (see the module docstring). With neither
    turned on, it is TRL's trainer unchanged.

    Args:
        args (`r1kit.config.schema.GRPOConfig`): r1kit's config (TRL's plus the sampling fields).
        curriculum_reward_index (`int` or `None`, defaults to `None`): position in `reward_funcs` of the reward whose
            group mean is a prompt's pass rate; required when the curriculum is on.
        reward_listeners (`list[Callable]`, defaults to `[]`): each is called as `listener(trainer, prompts,
            completions, rewards, inputs)` after every scored batch (`rewards`: a host copy of TRL's gathered
            `(batch, num_rewards)` tensor, NaN for a reward's None; `inputs`: this process's rows, gold columns included); the completions
            recorder is one.
    """

    def __init__(self, *args, curriculum_reward_index: int | None = None, reward_listeners: list | None = None,
                 **kwargs):
        config = kwargs.get("args")
        cpu_vllm = bool(config is not None and config.use_vllm and vllm_is_cpu_build())
        cpu_server = cpu_vllm and config.vllm_mode == "server"
        if cpu_vllm and not cpu_server:  # the engine must live in this process: its reload API takes tensors
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(DEFAULT_CPU_KVCACHE_GIB))
        start = time.monotonic()
        with no_nccl_communicator() if cpu_server else contextlib.nullcontext(), authenticated_client(config):
            super().__init__(*args, **kwargs)
        self.vllm_start_seconds = time.monotonic() - start if self.use_vllm else None
        if self.use_vllm:
            walk_weights_by_layer(self.vllm_generation)  # every sync gathers one module at a time
        # On the CPU build, TRL's weight sync cannot run: colocated, it calls the vLLM model's `load_weights`, which
        # the CPU backend breaks (it repacks every linear layer's weight after loading and drops the parameter's
        # loader); in server mode it broadcasts over NCCL. Both go through vLLM's own `reload_weights` instead. The
        # instance attribute replaces TRL's method for this trainer only; TRL calls it after every optimizer step.
        if cpu_server:
            self._weights_folder = tempfile.TemporaryDirectory(prefix="r1kit-vllm-weights-")  # removed with the trainer
            self.vllm_generation.sync_weights = functools.partial(
                push_weights_through_files, self.vllm_generation, Path(self._weights_folder.name))
        elif cpu_vllm:
            self.vllm_generation.sync_weights = functools.partial(reload_vllm_weights, self.vllm_generation)
        self.colocated_engine = self._colocated_engine()  # None, or the engine the held-out callback shares
        self.unjudged = UnjudgedWatch(self.reward_func_names, [reward_kind(f) for f in self.reward_funcs],
                                      self.args.unjudged_share_limit)  # (read before the wrapping below)
        self.reward_funcs = [f if isinstance(f, torch.nn.Module) else checked_reward(f, name)
                             for f, name in zip(self.reward_funcs, self.reward_func_names)]
        self.reward_listeners = list(reward_listeners or [])
        watch_reward_warnings()
        self.dynamic_sampling = self.args.dynamic_sampling
        self.max_rounds = self.args.dynamic_sampling_max_rounds if self.dynamic_sampling else 1
        rules = CurriculumRules.from_config(self.args)
        if rules.active and curriculum_reward_index is None:
            raise ValueError("the curriculum needs curriculum_reward_index (the reward that measures pass rates)")
        self.curriculum_reward_index = curriculum_reward_index
        self.picker = None
        self._round_rewards: torch.Tensor | None = None  # the last gathered rewards_per_func
        self._columns: set[str] | None = None
        self.generation_round: int | None = None  # with dynamic sampling, the round being scored (completions.jsonl)
        if self.dynamic_sampling or rules.active:
            if not hasattr(self.train_dataset, "__getitem__") or not hasattr(self.train_dataset, "__len__"):
                raise ValueError("dynamic sampling and the curriculum need a map-style training set (not streaming)")
            self.picker = PromptPicker(len(self.train_dataset), self.args.seed, rules)
        # A checkpoint can fall inside a generation block (num_iterations > 1, or steps_per_generation beyond the
        # accumulation steps); a resumed run regenerates that block, so it must find the state from before it.
        self._generate_every = self.args.steps_per_generation * self.num_iterations
        self._snapshots = self.picker is not None and self.args.gradient_accumulation_steps % self._generate_every != 0
        self._state_before_generation: dict | None = None
        self.passes = PassRunner(self.args, self.accelerator)  # the training pass: which one, measured; running it
        self.passes.policy = self.model
        self.rollouts = self._rollout_engine() if self.args.async_rollouts else None
        self._ahead: Lookahead | None = None
        self.add_sharding_record()

    def _colocated_engine(self) -> ColocatedEngine | None:
        """The engine other generation can share: colocated vLLM on one device per engine. Not with sleep mode (the
        engine holds no weights between steps), tensor parallelism (one process cannot generate alone) or server
        mode (the weight push is a collective with the server)."""
        args = self.args
        if not (self.use_vllm and args.vllm_mode == "colocate"):
            return None
        if args.vllm_enable_sleep_mode or args.vllm_tensor_parallel_size > 1:
            return None
        return ColocatedEngine(self)

    # --- transformers and TRL hooks -----------------------------------------------------------------------------------
    def push_to_hub(self, *args, **kwargs):
        with private_files_stay():  # the run's records (paths, host, command line) are not the model's
            return super().push_to_hub(*args, **kwargs)

    def _push_from_checkpoint(self, checkpoint_folder):
        with private_files_stay():
            return super()._push_from_checkpoint(checkpoint_folder)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._round_rewards = rewards  # gathered over ranks: every rank sees every group's rewards
        self._log_tool_use()
        # One copy to the host for every listener and the unjudged check (each read would wait for the device)
        host = rewards.cpu() if (self.reward_listeners or self.model.training) else None
        for listener in self.reward_listeners:
            listener(self, prompts, completions, host, inputs)
        if self.model.training:
            self._stop_if_unjudged(host, inputs)
        return rewards

    # --- tool use ---------------------------------------------------------------------------------------------------
    def _python_environment(self):
        """The run's Python interpreter environment class (`r1kit.training.tools`), or None."""
        factories = getattr(self, "environment_factories", None) or {}
        return next((f for f in factories.values() if isinstance(f, type) and issubclass(f, PythonInterpreter)), None)

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        """TRL's tool loop (its masks, its cap on turns, its truncation), with every `python` call of a turn run at
        once before TRL asks for them one by one: the first turn's from the completions, each later turn's from the
        generation that made it (parsed as TRL parses it). Each call has the jail's hard deadline, so no call can
        stall the batch beyond it."""
        environment = self._python_environment()
        if environment is None:
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images,
                                           multimodal_fields)
        started = time.monotonic()
        prefetch(environment, [completion[:1] for completion in completions], self.environments)
        self._tool_seconds = time.monotonic() - started  # wall time of the batch's programs (logged with the rewards)
        generate = self._generate_single_turn
        patched = self.__dict__.get("_generate_single_turn")  # (an instance's own, put back after)

        def generate_then_prefetch(ids, *args, **kwargs):
            post_tool_ids, post_tool_logprobs = generate(ids, *args, **kwargs)
            turns = [checked_parse(self._tokenizer, seq, prefix=prefix, tools=self.tools) if seq else {}
                     for seq, prefix in zip(post_tool_ids, ids)]
            started = time.monotonic()
            prefetch(environment, turns, self._continued_interpreters(completions, len(turns)))
            self._tool_seconds += time.monotonic() - started
            return post_tool_ids, post_tool_logprobs

        self._generate_single_turn = generate_then_prefetch
        try:
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images,
                                           multimodal_fields)
        finally:
            if patched is None:
                del self._generate_single_turn
            else:
                self._generate_single_turn = patched
            environment.prefetched.put({})

    def _continued_interpreters(self, completions: list, count: int) -> list | None:
        """The interpreters of the rollouts TRL generates a later turn for: those whose last message is the tool's
        reply (TRL appended it, and generates for them in rollout order); None when that does not account for
        `count` turns (then each turn gets a fresh rollout's budget)."""
        continued = [i for i, completion in enumerate(completions)
                     if completion and isinstance(completion[-1], dict) and completion[-1].get("role") == "tool"]
        if len(continued) != count or not self.environments:
            return None
        return [self.environments[i] for i in continued]

    def _log_tool_use(self) -> None:
        """Per batch, over every rank: the share of rollouts that called a tool of r1kit's (the interpreter, an
        OpenEnv server's), their calls, errors and seconds per rollout, and the rollouts the infrastructure failed (TRL logs its own call frequency)."""
        if self.tools:  # turns whose calls were taken as plain text (hostile or broken calls), on this process
            self._metrics["train" if self.model.training else "eval"]["tools/unparsed_turns"].append(
                float(UNPARSED_TURNS[0]))
            UNPARSED_TURNS[0] = 0
        environments = [e for e in (self.environments or []) if isinstance(e, CountedEnvironment)]
        if not environments or not self.tools:
            return
        local = torch.tensor([[float(e.calls > 0), e.calls, e.errors, e.seconds, float(e.infrastructure_failures > 0)]
                              for e in environments], device=self.accelerator.device)
        means = self.accelerator.gather(local).float().mean(dim=0).tolist()
        metrics = self._metrics["train" if self.model.training else "eval"]
        for name, value in zip(TOOL_METRICS, means):
            metrics[name].append(value)
        metrics["tools/batch_seconds"].append(getattr(self, "_tool_seconds", 0.0))

    def _stop_if_unjudged(self, rewards: torch.Tensor, inputs: list[dict]) -> None:
        """Stops the run when a reward leaves `unjudged_share_limit` of the rows it names as its own unjudged (NaN in
        TRL's gathered tensor: the reward returned None), or no reward judges that share of the rows some reward
        names, in two generation batches running (`r1kit.integrity.rewardtap`: a reward that names no rows, as TRL's multi-task
        rewards, is left to TRL). Every rank sees the same gathered rows, so every rank stops together."""
        if not self.unjudged.active or rewards.numel() == 0:
            return
        own = torch.tensor(own_rows(inputs, self.unjudged.kinds), dtype=torch.bool, device=self.accelerator.device)
        own = self.accelerator.gather(own).cpu()  # in the order TRL gathered the rewards: rank by rank
        stop = self.unjudged.check(torch.isnan(rewards).tolist(), own.tolist())
        if stop is not None:
            recent = "; ".join(RECENT_REWARD_WARNINGS.recent) or "none logged"
            raise ConfigError(f"{stop}. Its latest warnings: {recent}. Fix the cause (test cases out of reach, the "
                              "sandbox, the rows), or set unjudged_share_limit: null to train anyway")

    def _generate_and_score_completions(self, inputs):
        output = self._sample_and_score(inputs)
        if self.rollouts is not None and self.model.training:
            self._correct_for_the_sampler(output)
        return output

    def _sample_and_score(self, inputs):
        if self.picker is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if self._snapshots:
            self._state_before_generation = json.loads(json.dumps(self.picker.state_dict()))
        groups = self._local_groups(inputs)
        replaced = 0
        if self.picker.rules.active:
            groups, replaced = self._apply_curriculum(groups)
        if not self.dynamic_sampling:
            output = super()._generate_and_score_completions(self._rows(groups))
            self._record_round(groups)
            self._log_sampling(rounds=1, generated=len(groups) * self.accelerator.num_processes, dropped=0,
                               replaced=replaced)
            return output
        return self._generate_until_full(groups, replaced)

    def _save_checkpoint(self, model, trial):
        self._save_rollout_state(trial)
        # Written before the trainer's own files: a checkpoint complete by their standard has them too.
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, PASS_STATE), "w") as f:  # the passes measured: a resume takes them too
                json.dump(self.passes.state_dict(), f)
        if self.picker is not None and self.args.should_save:
            state = self.picker.state_dict()
            if self._step % self._generate_every and self._state_before_generation is not None:
                state = self._state_before_generation  # inside a generation block, which a resume regenerates
            with open(os.path.join(folder, SAMPLING_STATE), "w") as f:
                json.dump(state, f)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and os.path.isfile(os.path.join(checkpoint, PASS_STATE)):
            with open(os.path.join(checkpoint, PASS_STATE)) as f:  # every rank reads it: the same decisions everywhere
                self.passes.load_state_dict(json.load(f))
        if self.rollouts is not None and checkpoint is not None:
            self._load_rollout_state(checkpoint)
        if self.picker is None or checkpoint is None:
            return
        path = os.path.join(checkpoint, SAMPLING_STATE)
        if os.path.exists(path):
            with open(path) as f:
                self.picker.load_state_dict(json.load(f))
            logger.info("Resumed the sampling state (%d prompts with a pass-rate record) from %s",
                        len(self.picker.rates), path)
        else:
            logger.warning("%s has no %s (saved without dynamic sampling or the curriculum): the pass-rate record "
                           "starts empty.", checkpoint, SAMPLING_STATE)

    # --- the training pass ---------------------------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **multimodal):
        """TRL's per-token log-probabilities (the loss pass, and the old and reference passes), by the pass measured
        fastest for the chunk's shape on this device (`r1kit.training.passchoice`): TRL's dense pass, length buckets
        (`r1kit.training.trainpass`) or one packed row (`r1kit.training.packing`), all with the same values and gradients. Batches none
        of them keeps exact (images, token types, MoE auxiliary losses) take TRL's dense pass, said once."""
        dense = super()._get_per_token_logps_and_entropies
        passes = self.passes.passes_for(model, compute_aux_loss, multimodal)
        if passes is None:
            return dense(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                         compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal)
        size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), size):
            chunk = slice(start, start + size)
            lp, ent = self.passes.score(model, passes, dense, input_ids[chunk], attention_mask[chunk],
                                        logits_to_keep, compute_entropy)
            logps.append(lp)
            entropies.append(ent)
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def training_step(self, *args, **kwargs):
        try:
            output = super().training_step(*args, **kwargs)
        except BaseException:
            self.passes.timer.discard()
            raise
        self.passes.step_done()  # a timed loss pass is timed through its backward
        return output

    def training_pass_summary(self) -> str:
        """One line for the start-up block: which passes the run chooses among, and what stands down."""
        return self.passes.summary(self.model, self.args.gradient_checkpointing)

    # --- dynamic sampling -----------------------------------------------------------------------------------------
    def _generate_until_full(self, groups: list[dict], replaced: int) -> dict:
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        target = len(groups)  # groups per rank in the batch TRL trains on
        zero_std_log = self._metrics["train"]["frac_reward_zero_std"]
        logged_before = len(zero_std_log)
        kept, spare = [], []  # this rank's groups with signal, and without
        kept_per_rank = [0] * world
        generated = rounds = 0
        while True:
            rounds += 1
            self.generation_round = rounds
            output = super()._generate_and_score_completions(self._rows(groups))
            signal = self._group_signal()
            self._record_round(groups)
            n = len(groups)
            for r in range(world):
                kept_per_rank[r] += sum(signal[r * n : (r + 1) * n])
            for j in range(n):
                piece = slice_rows(output, j * self.num_generations, (j + 1) * self.num_generations)
                (kept if signal[rank * n + j] else spare).append(piece)
            generated += n * world
            if min(kept_per_rank) >= target or rounds >= self.max_rounds:
                break
            # Every rank computes the same request from the same gathered counts, so ranks stay in step.
            missing = target - min(kept_per_rank)
            keep_rate = max(sum(kept_per_rank) / generated, 1 / target)
            groups = self._draw_groups(min(target, math.ceil(missing / keep_rate)))

        any_signal = sum(kept_per_rank) > 0
        shortfall = [max(0, target - k) for k in kept_per_rank]
        fillers = spare[len(spare) - shortfall[rank] :] if shortfall[rank] else []
        pieces = kept[:target] + fillers
        batch = join_pieces(pieces, self._tokenizer.pad_token_id, self.pad_to_multiple_of)
        if fillers and any_signal:  # empty places hold groups without signal, kept out of the loss
            batch["completion_mask"][target * self.num_generations - len(fillers) * self.num_generations :] = 0
        self._finish_batch(batch, repadded=len({piece["prompt_ids"].size(1) for piece in pieces}) > 1)
        trained_zero_std = sum(shortfall)
        zero_std_generated = generated - sum(kept_per_rank)
        dropped = zero_std_generated - (trained_zero_std if not any_signal else 0)
        surplus = sum(max(0, k - target) for k in kept_per_rank)  # groups with signal beyond a full batch
        del zero_std_log[logged_before:]  # TRL logged each round; the trained batch is what this metric describes
        zero_std_log.append(trained_zero_std / (target * world))
        self._log_sampling(rounds=rounds, generated=generated, dropped=dropped, replaced=replaced, surplus=surplus)
        if trained_zero_std and self.accelerator.is_main_process:
            logger.warning(
                "Dynamic sampling: after %d generation round(s) (dynamic_sampling_max_rounds), %d of %d groups have "
                "signal; %s",
                rounds, target * world - trained_zero_std, target * world,
                "the other places are masked out of the loss." if any_signal
                else "none has, so this batch trains as without dynamic sampling (zero advantages).",
            )
        return batch

    def _finish_batch(self, batch: dict, repadded: bool) -> None:
        """What joining rounds changes: the token count the loss divides by, and (when some prompts' left padding
        grew) the per-token log-probabilities TRL computed with the narrower padding."""
        loss_mask = batch["completion_mask"] if "tool_mask" not in batch else batch["completion_mask"] * batch["tool_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        if "old_per_token_logps" in batch or "ref_per_token_logps" in batch:
            # Decided together: under ZeRO-3 or FSDP a forward pass on some ranks only would wait forever.
            anywhere = self.accelerator.gather(torch.tensor([int(repadded)], device=loss_mask.device)).max().item()
            if anywhere:
                self._recompute_logps(batch)

    def _recompute_logps(self, batch: dict) -> None:
        """Per-token log-probabilities of the joined batch, as TRL computes them at generation. TRL passes no position
        ids: a model with absolute positions (GPT-2) sees a token's position shift with the left padding, so values
        computed under a round's narrower padding would not match the loss's forward pass (rotary models, whose
        attention depends only on relative positions, are unaffected). The vLLM importance-sampling ratio, computed
        per round, is kept."""

        if "old_per_token_logps" in batch:
            batch["old_per_token_logps"] = self._policy_logps(batch, self.model)
        if "ref_per_token_logps" in batch:
            if self.ref_model is not None:
                batch["ref_per_token_logps"] = self._policy_logps(batch, self.ref_model)
            else:  # a PEFT adapter: the base model (or the saved "ref" adapter) is the reference, as in TRL
                model = self.accelerator.unwrap_model(self.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    batch["ref_per_token_logps"] = self._policy_logps(batch, self.model)

    def _policy_logps(self, batch: dict, model) -> torch.Tensor:
        """Per-token log-probabilities of the batch's completions under `model` as it is now, without gradients."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            return self._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].size(1),
                                                           batch_size=self.args.per_device_train_batch_size)[0]

    def _group_signal(self) -> list[bool]:
        """For every group of the last round, on every rank (rank-major order): whether its weighted rewards differ,
        i.e. whether it has an advantage to learn from. Follows TRL's `sum_then_normalize` aggregation."""

        per_func = self._round_rewards  # (preflight allows dynamic sampling with sum_then_normalize only)
        grouped = per_func.view(-1, self.num_generations, per_func.size(1))
        weights = self.reward_weights.to(per_func.device)
        rewards = (grouped * weights).nansum(dim=2)
        rewards[torch.isnan(grouped).all(dim=2)] = torch.nan  # unscorable completions, as TRL treats them
        std = nanstd(rewards, dim=1)
        return (~torch.isnan(std) & ~torch.isclose(std, torch.zeros_like(std))).tolist()

    # --- the curriculum -------------------------------------------------------------------------------------------
    def _record_round(self, groups: list[dict]) -> None:
        """Adds every group of the round just scored (all ranks) to the pass-rate record."""
        if self.curriculum_reward_index is None:
            return

        keys = gather_object([prompt_key(g) for g in groups])
        values = self._round_rewards[:, self.curriculum_reward_index].view(-1, self.num_generations)
        rates = [None if torch.isnan(v).all() else torch.nanmean(v).item() for v in values]
        self.picker.record(keys, rates)

    def _apply_curriculum(self, groups: list[dict]) -> tuple[list[dict], int]:
        """Replaces the proposed prompts the curriculum skips; decided over all ranks' proposals at once, so that the
        walk advances the same way everywhere. Returns the groups and how many were replaced (all ranks)."""

        keys = gather_object([prompt_key(g) for g in groups])
        choices = self.picker.replacements(keys, self._key_of)
        n, rank = len(groups), self.accelerator.process_index
        mine = choices[rank * n : (rank + 1) * n]
        groups = [group if index is None else self._dataset_row(index) for group, index in zip(groups, mine)]
        return groups, sum(index is not None for index in choices)

    # --- rows -----------------------------------------------------------------------------------------------------
    def _local_groups(self, inputs: list[dict]) -> list[dict]:
        """One row per prompt group of this rank's generation batch (TRL's sampler repeats each prompt
        `num_generations` times in a row; dynamic sampling needs whole groups on each rank)."""
        size = self.num_generations
        if len(inputs) % size:
            raise RuntimeError(
                f"dynamic sampling and the curriculum need whole prompt groups on each process: the per-process "
                f"generation batch ({len(inputs)}) must be a multiple of num_generations ({size})"
            )
        groups = [inputs[i] for i in range(0, len(inputs), size)]
        for i, group in enumerate(groups):
            if any(prompt_key(row) != prompt_key(group) for row in inputs[i * size : (i + 1) * size]):
                raise RuntimeError("dynamic sampling: a generation batch whose prompt groups are not consecutive rows")
        if self._columns is None:
            self._columns = set(inputs[0])
        return groups

    def _rows(self, groups: list[dict]) -> list[dict]:
        return [dict(group) for group in groups for _ in range(self.num_generations)]

    def _dataset_row(self, index: int) -> dict:
        row = self.train_dataset[int(index)]
        return {key: value for key, value in row.items() if self._columns is None or key in self._columns}

    def _key_of(self, index: int) -> str:
        return prompt_key(self.train_dataset[int(index)])

    def _draw_groups(self, count: int) -> list[dict]:
        """`count` new prompts for this rank: the walk draws for all ranks, in rank order."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        indices = self.picker.draw(count * world, self._key_of)
        return [self._dataset_row(i) for i in indices[rank * count : (rank + 1) * count]]

    def _log_sampling(self, rounds: int, generated: int, dropped: int, replaced: int, surplus: int = 0) -> None:
        metrics = self._metrics["train"]
        metrics["sampling/generation_rounds"].append(float(rounds))
        metrics["sampling/groups_generated"].append(float(generated))
        if self.dynamic_sampling:
            metrics["sampling/zero_std_groups_dropped"].append(float(dropped))
            metrics["sampling/surplus_groups_dropped"].append(float(surplus))
        if self.picker.rules.active:
            metrics["sampling/curriculum_replaced"].append(float(replaced))
