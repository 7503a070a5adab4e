"""Spend generation where the signal is: dynamic sampling and an online pass-rate curriculum on TRL's `GRPOTrainer`.

A GRPO group whose completions all get the same reward has zero advantage: it costs a full generation and gives no
gradient. `SamplingGRPOTrainer` is TRL's trainer with one method extended, `_generate_and_score_completions`:

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

import hashlib
import json
import logging
import math
import os
import random
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer

from r1kit.errors import ConfigError

logger = logging.getLogger("r1kit")

SAMPLING_STATE = "r1kit_sampling.json"  # in each checkpoint folder
STATE_VERSION = 1
MAX_TRIES_PER_PLACE = 32  # curriculum: candidates looked at per place before one is taken whatever its record

# How each per-sample tensor of TRL's generation output is padded when groups from different rounds are joined:
# (side, pad value; None = the tokenizer's pad token). Any other 2-D tensor (images, token types) is refused.
PADDING = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 1.0),
}


def prompt_key(row: dict) -> str:
    """A short, stable identity of a row's prompt: the curriculum's record is kept per prompt, whatever its index."""
    text = json.dumps(row.get("prompt"), sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass
class CurriculumRules:
    """What the curriculum skips. `skip_solved` (int, 0 = off), `window` ([low, high] or None), `explore` (float),
    `history` (int: appearances the estimate averages)."""

    skip_solved: int = 0
    window: tuple[float, float] | None = None
    explore: float = 0.1
    history: int = 4

    @classmethod
    def from_args(cls, args: Any) -> CurriculumRules:
        window = getattr(args, "curriculum_pass_rate_window", None)
        return cls(
            skip_solved=getattr(args, "curriculum_skip_solved", 0) or 0,
            window=tuple(window) if window else None,
            explore=getattr(args, "curriculum_explore", 0.1),
            history=max(getattr(args, "curriculum_history", 4), getattr(args, "curriculum_skip_solved", 0) or 0, 1),
        )

    @property
    def active(self) -> bool:
        return bool(self.skip_solved) or self.window is not None

    def would_skip(self, rates: list[float]) -> bool:
        """Whether a prompt with these pass rates (oldest first) is one the curriculum skips."""
        if not rates:
            return False  # never seen: always taken
        if self.skip_solved and len(rates) >= self.skip_solved and all(r >= 1.0 for r in rates[-self.skip_solved :]):
            return True
        if self.window is not None:
            estimate = sum(rates) / len(rates)
            return not self.window[0] <= estimate <= self.window[1]
        return False


class PromptPicker:
    """The curriculum's record and the seeded walk over the training set that refills and replaces prompts.

    Its whole state is JSON (`state_dict`): the pass rates per prompt, the walk's epoch and position, and the number of
    exploration draws made; every random choice is derived from the seed and those counters, so a run restored from
    the state makes the same choices. Every rank holds the same picker and feeds it the same (gathered) inputs.
    """

    def __init__(self, dataset_size: int, seed: int, rules: CurriculumRules):
        if dataset_size < 1:
            raise ConfigError("dynamic sampling and the curriculum need a non-empty training set")
        self.size, self.seed, self.rules = dataset_size, seed, rules
        self.rates: dict[str, list[float]] = {}
        self.epoch, self.position, self.explorations = 0, 0, 0
        self._order: list[int] | None = None

    # --- the record -----------------------------------------------------------------------------------------------
    def record(self, keys: list[str], rates: list[float | None]) -> None:
        """Adds one appearance per prompt; `None` (a group nobody could judge) adds nothing."""
        for key, rate in zip(keys, rates, strict=True):
            if rate is None:
                continue
            history = self.rates.setdefault(key, [])
            history.append(round(float(rate), 6))
            del history[: -self.rules.history]

    def accepts(self, key: str) -> bool:
        """Whether the curriculum takes this prompt now (a skipped one is still taken with probability `explore`)."""
        if not self.rules.active or not self.rules.would_skip(self.rates.get(key, [])):
            return True
        self.explorations += 1
        return random.Random(f"{self.seed}-explore-{self.explorations}").random() < self.rules.explore

    # --- the walk -------------------------------------------------------------------------------------------------
    def next_index(self) -> int:
        """The next training-set index of the seeded walk (a new shuffled order each epoch)."""
        if self.position >= self.size:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None
        if self._order is None:
            self._order = list(range(self.size))
            random.Random(f"{self.seed}-walk-{self.epoch}").shuffle(self._order)
        index = self._order[self.position]
        self.position += 1
        return index

    def draw(self, count: int, key_of) -> list[int]:
        """`count` indices from the walk, each one the curriculum accepts (after `MAX_TRIES_PER_PLACE` refusals in a
        row the next candidate is taken anyway, so that a fully solved training set cannot stall a run)."""
        picked = []
        for _ in range(count):
            for _ in range(MAX_TRIES_PER_PLACE - 1):
                index = self.next_index()
                if self.accepts(key_of(index)):
                    break
            else:
                index = self.next_index()
            picked.append(index)
        return picked

    def replacements(self, keys: list[str], key_of) -> list[int | None]:
        """For each proposed prompt: `None` to keep it, or the training-set index that replaces it."""
        return [None if self.accepts(key) else self.draw(1, key_of)[0] for key in keys]

    # --- checkpoints ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, "epoch": self.epoch, "position": self.position,
                "explorations": self.explorations, "dataset_size": self.size, "rates": self.rates}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown {SAMPLING_STATE} version {state.get('version')!r}")
        if state.get("dataset_size") != self.size:
            logger.warning("%s was saved for a training set of %s rows, this one has %s: the walk restarts, the "
                           "record of pass rates is kept.", SAMPLING_STATE, state.get("dataset_size"), self.size)
        else:
            self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.explorations = int(state.get("explorations", 0))
        self.rates = {key: [float(r) for r in rates] for key, rates in state.get("rates", {}).items()}
        self._order = None


def slice_rows(output: dict, start: int, stop: int) -> dict:
    """Rows `start:stop` of every per-sample tensor of TRL's generation output (`num_items_in_batch` is left out: it
    is recomputed for the joined batch)."""
    batch = output["prompt_ids"].size(0)
    piece = {}
    for key, value in output.items():
        if key == "num_items_in_batch":
            continue
        if not (torch.is_tensor(value) and value.dim() >= 1 and value.size(0) == batch):
            raise ConfigError(f"dynamic sampling and the curriculum support text prompts only; the batch holds {key!r}")
        piece[key] = value[start:stop]
    return piece


def join_pieces(pieces: list[dict], pad_token_id: int, pad_to_multiple_of: int | None = None) -> dict:
    """Concatenates groups from different generation rounds, padding each 2-D tensor to the widest (rounded up to
    `pad_to_multiple_of`; prompts on the left, completions and per-token values on the right, as TRL pads them)."""
    joined = {}
    for key in pieces[0]:
        values = [piece[key] for piece in pieces]
        if values[0].dim() == 1:
            joined[key] = torch.cat(values)
            continue
        if key not in PADDING or values[0].dim() != 2:
            raise ConfigError(f"dynamic sampling and the curriculum support text prompts only; the batch holds {key!r}")
        side, fill = PADDING[key]
        fill = pad_token_id if fill is None else fill
        width = max(v.size(1) for v in values)
        if pad_to_multiple_of and key != "importance_sampling_ratio":  # (a per-sequence ratio stays 1 wide)
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        padded = []
        for v in values:
            extra = v.new_full((v.size(0), width - v.size(1)), fill)
            padded.append(torch.cat([extra, v] if side == "left" else [v, extra], dim=1))
        joined[key] = torch.cat(padded)
    return joined


class SamplingGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` with dynamic sampling and the pass-rate curriculum (see the module docstring). With neither
    turned on, it is TRL's trainer unchanged.

    Args:
        curriculum_reward_index (`int` or `None`, defaults to `None`): position in `reward_funcs` of the reward whose
            group mean is a prompt's pass rate; required when the curriculum is on.
    """

    def __init__(self, *args, curriculum_reward_index: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dynamic_sampling = bool(getattr(self.args, "dynamic_sampling", False))
        self.max_rounds = getattr(self.args, "dynamic_sampling_max_rounds", 4) if self.dynamic_sampling else 1
        rules = CurriculumRules.from_args(self.args)
        if rules.active and curriculum_reward_index is None:
            raise ConfigError("the curriculum needs curriculum_reward_index (the reward that measures pass rates)")
        self.curriculum_reward_index = curriculum_reward_index
        self.picker = None
        self._round_rewards: torch.Tensor | None = None  # the last gathered rewards_per_func
        self._columns: set[str] | None = None
        self.generation_round: int | None = None  # with dynamic sampling, the round being scored (completions.jsonl)
        if self.dynamic_sampling or rules.active:
            if not hasattr(self.train_dataset, "__getitem__") or not hasattr(self.train_dataset, "__len__"):
                raise ConfigError("dynamic sampling and the curriculum need a map-style training set (not streaming)")
            self.picker = PromptPicker(len(self.train_dataset), self.args.seed, rules)
        # A checkpoint can fall inside a generation block (num_iterations > 1, or steps_per_generation beyond the
        # accumulation steps); a resumed run regenerates that block, so it must find the state from before it.
        self._generate_every = self.args.steps_per_generation * self.num_iterations
        self._snapshots = self.picker is not None and self.args.gradient_accumulation_steps % self._generate_every != 0
        self._state_before_generation: dict | None = None

    # --- TRL hooks ------------------------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._round_rewards = rewards  # gathered over ranks: every rank sees every group's rewards
        return rewards

    def _generate_and_score_completions(self, inputs):
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
        if self.picker is not None and self.args.should_save:
            # Written before the trainer's own files: a checkpoint complete by their standard has it too.
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            state = self.picker.state_dict()
            if self._step % self._generate_every and self._state_before_generation is not None:
                state = self._state_before_generation  # inside a generation block, which a resume regenerates
            with open(os.path.join(folder, SAMPLING_STATE), "w") as f:
                json.dump(state, f)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
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
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import use_adapter

        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        size = self.args.per_device_train_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if "old_per_token_logps" in batch:
                batch["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, ids, mask, keep, batch_size=size)[0]
            if "ref_per_token_logps" in batch:
                if self.ref_model is not None:
                    ref = self._get_per_token_logps_and_entropies(self.ref_model, ids, mask, keep, batch_size=size)[0]
                else:  # a PEFT adapter: the base model (or the saved "ref" adapter) is the reference, as in TRL
                    model = self.accelerator.unwrap_model(self.model)
                    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                        ref = self._get_per_token_logps_and_entropies(self.model, ids, mask, keep, batch_size=size)[0]
                batch["ref_per_token_logps"] = ref

    def _group_signal(self) -> list[bool]:
        """For every group of the last round, on every rank (rank-major order): whether its weighted rewards differ,
        i.e. whether it has an advantage to learn from. Follows TRL's `sum_then_normalize` aggregation."""
        from trl.trainer.utils import nanstd

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
        from accelerate.utils import gather_object

        keys = gather_object([prompt_key(g) for g in groups])
        values = self._round_rewards[:, self.curriculum_reward_index].view(-1, self.num_generations)
        rates = [None if torch.isnan(v).all() else torch.nanmean(v).item() for v in values]
        self.picker.record(keys, rates)

    def _apply_curriculum(self, groups: list[dict]) -> tuple[list[dict], int]:
        """Replaces the proposed prompts the curriculum skips; decided over all ranks' proposals at once, so that the
        walk advances the same way everywhere. Returns the groups and how many were replaced (all ranks)."""
        from accelerate.utils import gather_object

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
            raise ConfigError(
                f"dynamic sampling and the curriculum need whole prompt groups on each process: the per-process "
                f"generation batch ({len(inputs)}) must be a multiple of num_generations ({size})"
            )
        groups = [inputs[i] for i in range(0, len(inputs), size)]
        for i, group in enumerate(groups):
            if any(prompt_key(row) != prompt_key(group) for row in inputs[i * size : (i + 1) * size]):
                raise ConfigError("dynamic sampling: a generation batch whose prompt groups are not consecutive rows")
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


def curriculum_reward_index(reward_funcs: list[str], args: Any) -> int | None:
    """Where `curriculum_reward` sits in the recipe's `reward_funcs`, when the curriculum is on."""
    if not CurriculumRules.from_args(args).active:
        return None
    name = getattr(args, "curriculum_reward", "accuracy")
    if name not in reward_funcs:
        raise ConfigError(f"curriculum_reward '{name}' is not in reward_funcs ({', '.join(reward_funcs)}); the "
                          "curriculum measures pass rates with one of the run's rewards")
    return reward_funcs.index(name)
