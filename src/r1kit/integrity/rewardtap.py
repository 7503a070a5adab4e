"""What the trainer's reward tap hands on: every reward's output checked as TRL takes it, the completions record
(OUTPUT_DIR/completions.jsonl), and the rewards' latest warnings, quoted when a reward that judges nothing stops
the run. Used by `r1kit.training.trainer.R1Trainer` (whose reward listeners are called as `listener(trainer, prompts, completions,
rewards, inputs)`, `rewards` a host copy of TRL's gathered `(batch, num_rewards)` tensor); none of it touches TRL's
private API.

When unjudged rows stop a run (`unjudged_share_limit`), the way TRL's multi-task rewards allow: a reward returns
None for the rows it does not judge (TRL's documented way to mix math and code rows in one run), so a None alone is
no fault. The run stops when, in two generation batches running,

- a reward that names the rows it judges (the dataset columns it reads: `RewardSpec.columns` for the registry's
  rewards, or a function's own `r1kit_columns` attribute) leaves at least `limit` of those rows unjudged while the
  batch holds some: it can never judge (test cases out of reach, no sandbox, unparseable golds); a batch without
  any of its rows counts neither way;
- or at least `limit` of the batch's rows that some reward names as its own go unjudged by every reward.

A reward that names no rows (a plain function, as in TRL's tests) never stops a run: TRL warns and trains on."""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from trl.trainer.utils import is_async_callable

from r1kit import records
from r1kit.rewards import COLUMNS_ATTRIBUTE
from r1kit.rewards.text import completion_text, message_text


def checked_reward(func, name: str):
    """`func` with its output checked on every call (`check_reward_values`); async stays async, so that TRL still runs
    it concurrently with the others. A rollout whose tool the infrastructure failed (`unjudgeable_rollouts`) scores
    None, whatever the reward says: its outcome is not the model's."""
    if is_async_callable(func):
        async def checked(*args, **kwargs):
            return unjudged(check_reward_values(name, await func(*args, **kwargs)), kwargs.get("environments"))
    else:
        def checked(*args, **kwargs):
            return unjudged(check_reward_values(name, func(*args, **kwargs)), kwargs.get("environments"))
    return functools.wraps(func)(checked)


def unjudged(values: list[float | None], environments) -> list[float | None]:
    """`values` with None where the rollout's tool environment saw an infrastructure failure (`r1kit.training.tools`)."""
    if not environments or len(environments) != len(values):
        return values
    return [None if getattr(env, "infrastructure_failures", 0) else value for value, env in zip(values, environments)]


def check_reward_values(name: str, values) -> list[float | None]:
    """A reward's output as TRL takes it (a list of floats or None), or a `ValueError` that names the reward and the
    row: the output must be a sequence (a list, tuple, array or tensor), one entry per completion, each None
    ("cannot judge": skipped and counted) or a finite number. NaN and infinities are refused rather than passed on,
    where TRL would read NaN as None and one infinity would zero its group's advantages and write `Infinity` into
    the run's JSON."""
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()  # numpy arrays and tensors
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"reward '{name}' returned {type(values).__name__} {str(values)[:60]!r}; a reward returns a "
                         "list with one score (a number, or None when it cannot judge) per completion")
    checked: list[float | None] = []
    for row, value in enumerate(values):
        if value is None:
            checked.append(None)
            continue
        if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
            raise ValueError(f"reward '{name}' returned {type(value).__name__} {str(value)[:60]!r} for row {row}; "
                             "a score is a number, or None when the completion cannot be judged")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"reward '{name}' returned {number} for row {row}; a score must be finite (return None "
                             "when the completion cannot be judged)")
        checked.append(number)
    return checked


class RecentWarnings(logging.Handler):
    """The last few warnings the rewards and the sandbox logged (one line each), quoted when a reward that judges
    nothing stops the run: they say why (the warning itself is logged once per distinct problem)."""

    def __init__(self, size: int = 3):
        super().__init__(level=logging.WARNING)
        self.recent: collections.deque[str] = collections.deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        self.recent.append(" ".join(record.getMessage().split())[:300])


RECENT_REWARD_WARNINGS = RecentWarnings()


def watch_reward_warnings() -> None:
    for name in ("r1kit.rewards", "r1kit.sandbox"):
        watched = logging.getLogger(name)
        if RECENT_REWARD_WARNINGS not in watched.handlers:
            watched.addHandler(RECENT_REWARD_WARNINGS)


class CompletionsRecorder(TrainerCallback):
    """Writes every scored completion to `OUTPUT_DIR/completions.jsonl` with its step, prompt and the score of every
    reward: what the model wrote, without wandb. A reward listener of `R1Trainer`.

    It taps the trainer's reward calculation rather than a reward function, so each row holds every reward's score
    whatever their kinds and order (plain functions, `async def` functions that TRL runs concurrently, reward models).
    Only the main process records (its own share of the batch); rows from evaluation carry `"mode": "eval"`, and with
    dynamic sampling rows carry their generation `round` (a step may score several rounds, dropped groups included).
    A reward's `None` (NaN in TRL's tensor) stays `null`. A completion of several turns (tool use) also keeps its
    `trajectory`: each turn's role, text and tool calls.
    """

    def __init__(self, output_dir: str):
        self.path = Path(output_dir) / "completions.jsonl"

    def on_train_begin(self, args, state, control, **kwargs):
        # Also a trainer callback: a resumed run re-does the steps after its checkpoint, so their rows go first
        # (with a line torn by a kill); a fresh run starts an empty file.
        records.rewind(self.path, state.global_step)

    def __call__(self, trainer, prompts: list, completions: list, rewards,
                 inputs: list[dict] | None = None) -> None:
        # Gathered over processes, in rank order: this process's rows are its own slice.
        n, rank = len(prompts), trainer.accelerator.process_index
        training = trainer.model.training
        step = trainer.state.global_step + 1 if training else trainer.state.global_step
        names = list(trainer.reward_func_names)
        scores = rewards[rank * n : (rank + 1) * n].tolist()
        if not self.path.parent.is_dir():  # never recreate it: the run's step-end check reports the lost folder
            return
        with self.path.open("a") as f:
            for prompt, completion, row_scores in zip(prompts, completions, scores):
                row = {
                    "step": step,
                    "mode": "train" if training else "eval",
                    "prompt": message_text(prompt) if isinstance(prompt, list) else prompt,
                    "completion": completion_text(completion),
                    "rewards": {name: None if math.isnan(v) else v for name, v in zip(names, row_scores)},
                }
                if training and trainer.generation_round is not None:
                    row["round"] = trainer.generation_round
                # tool use: every turn, by role (a rollout cut off at its call is one turn that holds the call)
                if isinstance(completion, list) and (len(completion) > 1 or any(
                        isinstance(m, dict) and m.get("tool_calls") for m in completion)):
                    row["trajectory"] = trajectory(completion)
                f.write(json.dumps(row) + "\n")


def trajectory(messages: list) -> list[dict]:
    """A multi-turn completion's turns as records keep them: role, text, and the tool calls an assistant turn made."""
    turns = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        turn = {"role": message.get("role"), "content": completion_text(message)}
        if message.get("name"):
            turn["name"] = message["name"]
        calls = message.get("tool_calls")
        if calls:
            turn["tool_calls"] = [{"name": (c.get("function") or {}).get("name"),
                                   "arguments": (c.get("function") or {}).get("arguments")}
                                  for c in calls if isinstance(c, dict)]
        turns.append(turn)
    return turns


# --- when unjudged rows stop a run -----------------------------------------------------------------------------
Kind = tuple[str, ...] | None  # the columns a reward reads (() : every row is its own); None: it does not say


def reward_kind(func: Any) -> Kind:
    """The columns `func` says it judges rows by, or None when it does not say."""
    kind = getattr(func, COLUMNS_ATTRIBUTE, None)
    return tuple(kind) if isinstance(kind, (list, tuple)) else None


def own_rows(rows: Sequence[dict], kinds: Sequence[Kind]) -> list[list[bool]]:
    """[row][reward]: whether the row is the reward's to judge (it holds every column the reward reads, not empty);
    never for a reward that does not say."""
    return [[kind is not None and all(row.get(c) not in (None, "", [], {}) for c in kind) for kind in kinds]
            for row in rows]


class UnjudgedWatch:
    """Counts, per reward and for the rows no reward judged, the generation batches running that crossed the limit;
    `check` returns the stop's message, or None."""

    def __init__(self, names: Sequence[str], kinds: Sequence[Kind], limit: float | None):
        self.names, self.kinds, self.limit = list(names), list(kinds), limit
        self.streak = {i: 0 for i in range(len(self.names))}
        self.nobody_streak = 0

    @property
    def active(self) -> bool:
        """Whether any reward names its rows (otherwise there is nothing to check, as under TRL)."""
        return self.limit is not None and any(kind is not None for kind in self.kinds)

    def check(self, unjudged: Sequence[Sequence[bool]], own: Sequence[Sequence[bool]]) -> str | None:
        """`unjudged[row][reward]`: the reward returned None; `own[row][reward]`: the row is the reward's (both over
        every rank's rows of the batch)."""
        if not self.active or not unjudged:
            return None
        for i, name in enumerate(self.names):
            mine = [u[i] for u, o in zip(unjudged, own) if o[i]]
            if not mine:
                continue  # no row of its kind in this batch: a math batch in a math + code run
            share = sum(mine) / len(mine)
            self.streak[i] = self.streak[i] + 1 if share >= self.limit else 0
            if self.streak[i] >= 2:
                return (f"reward '{name}' left {share:.0%} of its rows unjudged (None) in two generation batches "
                        f"running (unjudged_share_limit {self.limit:g}), so it trains nothing")
        claimed = [all(u) for u, o in zip(unjudged, own) if any(o)]
        share = sum(claimed) / len(claimed) if claimed else 0.0
        self.nobody_streak = self.nobody_streak + 1 if claimed and share >= self.limit else 0
        if self.nobody_streak >= 2:
            return (f"no reward ({', '.join(self.names)}) judged {share:.0%} of the rows in two generation batches "
                    f"running (unjudged_share_limit {self.limit:g}), so they train nothing")
        return None
