"""The pure logic of dynamic sampling and the pass-rate curriculum, with no trainer in it: what the curriculum skips
(`CurriculumRules`), its record of pass rates and the seeded walk that refills and replaces prompts (`PromptPicker`,
whose whole state is JSON, saved in every checkpoint), and cutting and joining TRL's generation batches by prompt
group (`slice_rows`, `join_pieces`). `r1kit.training.trainer` drives them from inside TRL's `GRPOTrainer`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # typing only: the config imports TRL, and this module stays free of it
    from r1kit.config.schema import GRPOConfig

logger = logging.getLogger(__name__)

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
    def from_config(cls, args: GRPOConfig) -> CurriculumRules:
        """The rules a recipe's `curriculum_*` fields set (their defaults are the config's)."""
        window = args.curriculum_pass_rate_window
        return cls(
            skip_solved=args.curriculum_skip_solved or 0,  # null in a recipe: off
            window=tuple(window) if window else None,
            explore=args.curriculum_explore,
            history=max(args.curriculum_history, args.curriculum_skip_solved or 0, 1),
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
            raise ValueError("dynamic sampling and the curriculum need a non-empty training set")
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
            raise ValueError(f"dynamic sampling and the curriculum support text prompts only; the batch holds {key!r}")
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
            raise ValueError(f"dynamic sampling and the curriculum support text prompts only; the batch holds {key!r}")
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
