"""Tripwires: signs, over a window of training steps, that the reward is being gamed; each with a threshold and an
action (`warn`, `stop`, or `rollback` to the last checkpoint before it fired, with the learning rate cut).

    reward_vs_heldout    training reward rising while held-out accuracy falls: min(reward rise, accuracy fall)
                         over the window (needs the `heldout_accuracy` callback)
    format_vs_accuracy   format rewards rising while accuracy stays flat: format rise - max(0, accuracy rise), the
                         accuracy being the first correctness reward's mean (accuracy, cosine, reasoning_gym, code...)
    length_blowup        mean completion length at the window's end / at its start
    length_collapse      mean completion length at the window's start / at its end
    collapse             one completion taking over: (the most questions of a batch whose majority reply is one same
                         completion - 1) / (questions - 1), averaged over the window; a question is its gold answer
                         where rows have one (same answers may rightly share a short reply), else its prompt
    disagreement         the second opinion's disagreement share, averaged over the window's last measurements

A rise or fall compares the mean of the window's last quarter with the mean of its first quarter (at least one step
each). A wire is measured once the run has a window of steps behind it (after a resume or a rollback, the window
fills again), and fires when its value reaches its threshold. Every step logs `tripwire/<name>` (the value) and
`tripwire/<name>/fired` (0 or 1); each firing is written to `OUTPUT_DIR/tripwires.jsonl` (step, wire, value,
threshold, action). `warn` logs one warning when a wire starts firing; `stop` ends training at that step; `rollback`
names in `OUTPUT_DIR/tripwire_rollbacks.json` the newest checkpoint saved before the wire's window began (else the
newest saved before it fired) and ends training without saving this step, and `r1kit.run` continues from that
checkpoint with the learning rate multiplied by `tripwire_lr_factor`, at most `tripwire_max_rollbacks` times (past
them, or with no checkpoint to go back to, `rollback` stops). The decision is taken on the main process and shared,
so every process stops at the same step.
"""

from __future__ import annotations

import collections
import difflib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, set_seed

from r1kit import records
from r1kit.errors import ConfigError
from r1kit.machine import from_main
from r1kit.rewards.text import completion_text

logger = logging.getLogger(__name__)

ACTIONS = ("warn", "stop", "rollback")
RECORD = "tripwires.jsonl"
LEDGER = "tripwire_rollbacks.json"
FORMAT_REWARDS = ("format", "tag_count", "code_format")
CORRECTNESS_REWARDS = ("accuracy", "cosine", "reasoning_gym", "code", "binary_code", "ioi_code", "cf_code")
IDENTICAL_METRIC = "completions/identical_across_prompts"


@dataclass(frozen=True)
class Wire:
    """One tripwire's setting: it fires when its value reaches `threshold` over `window` steps, then does `action`."""

    threshold: float
    window: int
    action: str = "warn"


# Defaults: no false alarm on the honest demo (3 seeds) or the SmolLM2 chain_sum recipe (README, "Tripwires").
DEFAULT_WIRES: dict[str, Wire] = {
    "reward_vs_heldout": Wire(0.1, 20),
    "format_vs_accuracy": Wire(0.3, 20),
    "length_blowup": Wire(3.0, 10),
    "length_collapse": Wire(3.0, 10),
    "collapse": Wire(0.5, 3),
    "disagreement": Wire(0.25, 5),
}
SETTINGS = ("threshold", "window", "action")


def _nearest(name: str, names) -> str:
    near = difflib.get_close_matches(str(name), list(names), n=1, cutoff=0.5)
    return f"; did you mean '{near[0]}'?" if near else f"; valid: {', '.join(names)}"


def parse_tripwires(value: Any) -> dict[str, Wire]:
    """The recipe's `tripwires` mapping (`{length_blowup: {threshold: 3.0, window: 5, action: warn}, ...}`, each
    setting optional) merged over `DEFAULT_WIRES`; `None` gives the defaults. Raises a ConfigError naming the wire or
    setting and the nearest valid name, for an unknown name, a threshold that is not a finite number, a window that is
    not a whole number of at least 1 step, or an action other than warn, stop, rollback."""
    wires = dict(DEFAULT_WIRES)
    if value is None:
        return wires
    if not isinstance(value, dict):
        raise ConfigError(f"tripwires must be a mapping of wire: {{threshold, window, action}}, got {value!r}")
    for name, settings in value.items():
        if name not in DEFAULT_WIRES:
            raise ConfigError(f"tripwires: unknown wire '{name}'{_nearest(name, DEFAULT_WIRES)}")
        if not isinstance(settings, dict):
            raise ConfigError(f"tripwires.{name} must be a mapping of threshold, window, action; got {settings!r}")
        for key in settings:
            if key not in SETTINGS:
                raise ConfigError(f"tripwires.{name}: unknown setting '{key}'{_nearest(key, SETTINGS)}")
        wire = wires[name]
        threshold, window = settings.get("threshold", wire.threshold), settings.get("window", wire.window)
        action = settings.get("action", wire.action)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
            raise ConfigError(f"tripwires.{name}.threshold must be a finite number, got {threshold!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"tripwires.{name}.window must be a whole number of steps >= 1, got {window!r}")
        if action not in ACTIONS:
            raise ConfigError(f"tripwires.{name}.action: {action!r} is not valid; use one of {', '.join(ACTIONS)}"
                              f"{_nearest(action, ACTIONS) if isinstance(action, str) else ''}")
        wires[name] = Wire(float(threshold), window, action)
    return wires


# --------------------------------------------------------------------------------------------------------------------
# The measures: pure functions of the per-step history (a list of {"step": n, measure: value})
# --------------------------------------------------------------------------------------------------------------------
def _recent(history: list[dict], key: str, window: int) -> list[float] | None:
    """The values of `key` over the last `window` steps of `history`, or None while the history is shorter than the
    window or a step in it lacks the value."""
    if len(history) < window:
        return None
    values = [entry.get(key) for entry in history[-window:]]
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    return values


def _ends(values: list[float]) -> tuple[float, float]:
    """(mean of the first quarter, mean of the last quarter) of `values`: at least one value each."""
    k = max(1, len(values) // 4)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def change(history: list[dict], key: str, window: int) -> float | None:
    """How much `key` rose over the window (negative: fell)."""
    values = _recent(history, key, window)
    if values is None:
        return None
    first, last = _ends(values)
    return last - first


def heldout_fall(heldout: list[tuple[int, float]], step: int, window: int) -> float | None:
    """How much held-out accuracy fell from the last evaluation at or before the window's start to the latest one."""
    before = [a for s, a in heldout if s <= step - window]
    latest = [(s, a) for s, a in heldout if s <= step]
    if not before or not latest or latest[-1][0] <= step - window:
        return None
    return before[-1] - latest[-1][1]


def measure(name: str, history: list[dict], heldout: list[tuple[int, float]], window: int) -> float | None:
    """The value of wire `name` at the last step of `history` (None: not measurable yet, or not on this run)."""
    step = history[-1]["step"] if history else 0
    if name == "reward_vs_heldout":
        rise, fall = change(history, "reward", window), heldout_fall(heldout, step, window)
        return None if rise is None or fall is None else min(rise, fall)
    if name == "format_vs_accuracy":
        rise, accuracy = change(history, "format", window), change(history, "accuracy", window)
        return None if rise is None or accuracy is None else rise - max(0.0, accuracy)
    if name in ("length_blowup", "length_collapse"):
        values = _recent(history, "length", window)
        if values is None:
            return None
        first, last = _ends(values)
        high, low = (last, first) if name == "length_blowup" else (first, last)
        return high / max(low, 1e-9)
    if name == "collapse":
        values = _recent(history, "identical", window)
        return None if values is None else sum(values) / len(values)
    if name == "disagreement":
        measured = [e["disagreement"] for e in history if isinstance(e.get("disagreement"), (int, float))]
        return sum(measured[-window:]) / window if len(measured) >= window else None
    raise KeyError(name)


def gold_key(row: Any) -> str | None:
    """A row's gold answer as text (`solution`, else `answer`), or None."""
    if not isinstance(row, dict):
        return None
    gold = row.get("solution", row.get("answer"))
    return None if gold is None else str(gold).strip()


def identical_share(prompts: list, completions: list, inputs: list | None = None) -> float | None:
    """How far one completion has taken over the batch's questions: (the most questions whose majority reply is one
    same completion - 1) / (questions - 1), 0 when no two questions share their majority reply, 1 when every question
    gets the same one. A question's majority reply is the completion (whitespace-trimmed) at least half its rows got;
    a question is its gold answer where the rows have one (two prompts with the same answer may rightly share a short
    reply: "The final answer is 7."), else its prompt. None with fewer than two questions."""
    inputs = inputs or []
    replies_of: dict[str, list[str]] = {}
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        gold = gold_key(inputs[i]) if i < len(inputs) else None
        key = gold if gold is not None else "prompt:" + (completion_text(prompt) if isinstance(prompt, list)
                                                          else str(prompt))
        replies_of.setdefault(key, []).append(completion_text(completion).strip())
    if len(replies_of) < 2:
        return None
    questions_of: dict[str, int] = {}
    for replies in replies_of.values():
        reply, count = max(sorted(collections.Counter(replies).items()), key=lambda item: item[1])
        if 2 * count >= len(replies):
            questions_of[reply] = questions_of.get(reply, 0) + 1
    most = max(questions_of.values(), default=1)
    return (most - 1) / (len(replies_of) - 1)


class IdenticalCompletions(TrainerCallback):
    """A reward listener of `R1Trainer`: logs `completions/identical_across_prompts` for each training batch (this
    process's rows), the measure the `collapse` wire reads."""

    def __call__(self, trainer, prompts: list, completions: list, rewards, inputs=None) -> None:
        if trainer.model.training and trainer.accelerator.is_main_process:
            share = identical_share(prompts, completions, inputs)
            if share is not None:
                trainer._metrics["train"][IDENTICAL_METRIC].append(share)


# --------------------------------------------------------------------------------------------------------------------
# The callback
# --------------------------------------------------------------------------------------------------------------------
def step_measures(metrics: dict, roles: dict[str, list[str]]) -> dict[str, float]:
    """This step's measures from the trainer's pending metrics (the newest value of each): reward, format (mean of the
    format rewards), accuracy (the first correctness reward), length, identical, disagreement (mean over rewards)."""
    def newest(key: str) -> float | None:
        values = metrics.get(key)
        return float(values[-1]) if values else None

    found = {"reward": newest("reward"), "length": newest("completions/mean_length"),
             "identical": newest(IDENTICAL_METRIC)}
    formats = [v for v in (newest(f"rewards/{n}/mean") for n in roles["format"]) if v is not None]
    found["format"] = sum(formats) / len(formats) if formats else None
    accuracy = [v for v in (newest(f"rewards/{n}/mean") for n in roles["correctness"]) if v is not None]
    found["accuracy"] = accuracy[0] if accuracy else None
    disagreements = [v for k in metrics if k.startswith("second_opinion/") and k.endswith("/disagreement")
                     for v in [newest(k)] if v is not None]
    found["disagreement"] = sum(disagreements) / len(disagreements) if disagreements else None
    return {k: v for k, v in found.items() if v is not None and math.isfinite(v)}


def checkpoint_before(output_dir: str, step: int) -> str | None:
    """The newest complete checkpoint folder (`checkpoint-N` with its trainer_state.json) saved at a step <= `step`."""
    found = []
    for folder in Path(output_dir).glob("checkpoint-*"):
        suffix = folder.name.rsplit("-", 1)[-1]
        if suffix.isdigit() and int(suffix) <= step and (folder / "trainer_state.json").is_file():
            found.append((int(suffix), folder))
    return str(max(found)[1]) if found else None


def read_ledger(output_dir: str) -> dict:
    path = Path(output_dir) / LEDGER
    try:
        ledger = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"pending": None, "done": []}
    if not isinstance(ledger, dict) or not isinstance(ledger.get("done"), list):
        return {"pending": None, "done": []}
    return ledger


def take_rollback(output_dir: str) -> dict | None:
    """The rollback a tripwire asked for (checkpoint, step, wire, lr_factor), moved to the ledger's done list; None
    when none is pending. Called by `r1kit.run` after training stopped."""
    ledger = read_ledger(output_dir)
    pending = ledger.get("pending")
    if not isinstance(pending, dict):
        return None
    ledger["done"].append(pending)
    ledger["pending"] = None
    records.write_json(Path(output_dir) / LEDGER, ledger)
    return pending


class Tripwires(TrainerCallback):
    """Measures the wires at every step end (main process), logs them and acts (every process, as the main decided).

    Args:
        wires (`dict[str, Wire]`): the recipe's `tripwires`, parsed.
        output_dir (`str`): where the record and the rollback ledger go.
        lr_factor (`float`): the learning rate multiplier of each rollback.
        max_rollbacks (`int`): rollbacks allowed in the run; past them `rollback` stops.
        is_main_process (`bool`, defaults to `True`).
    """

    def __init__(self, wires: dict[str, Wire], output_dir: str, lr_factor: float, max_rollbacks: int,
                 is_main_process: bool = True):
        self.wires, self.output_dir = wires, output_dir
        self.lr_factor, self.max_rollbacks, self.is_main = lr_factor, max_rollbacks, is_main_process
        self.trainer = None
        self.roles: dict[str, list[str]] = {"format": [], "correctness": []}
        self.heldout = None  # the heldout_accuracy callback, when the run has one (its history)
        self.history: list[dict] = []
        self.firing: set[str] = set()  # wires above threshold at the last step (a warning on the rising edge only)
        self.lr_cut: float | None = None  # set by `prepare_rollback`, applied when training starts again
        self.reseed: int | None = None  # set by `prepare_rollback`: the rollback's number, for a new sampling seed

    def attach(self, trainer, reward_names: list[str], heldout=None, correctness: tuple[str, ...] = ()) -> None:
        """The trainer (its pending metrics), the recipe's reward names (which are format and correctness rewards:
        TRL logs them by function name, in the same order) and the held-out accuracy callback."""
        self.trainer, self.heldout = trainer, heldout
        names = dict(zip(reward_names, trainer.reward_func_names))
        self.roles = {"format": [names[n] for n in reward_names if n in FORMAT_REWARDS],
                      "correctness": [names[n] for n in reward_names if n in CORRECTNESS_REWARDS or n in correctness]}

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        self.history, self.firing = [], set()
        if self.is_main:
            records.rewind(Path(self.output_dir) / RECORD, state.global_step)
        if self.lr_cut is not None:  # after a rollback: the checkpoint's optimizer and schedule, loaded, then cut
            cut_learning_rate(optimizer, lr_scheduler, self.lr_cut)
            self.lr_cut = None
        elif self.is_main and read_ledger(self.output_dir).get("pending"):  # asked for by a run that was killed
            ledger = read_ledger(self.output_dir)
            ledger["pending"] = None
            records.write_json(Path(self.output_dir) / LEDGER, ledger)

    def on_step_begin(self, args, state, control, **kwargs):
        # After a rollback the checkpoint's random state is restored (by now), so the same prompts would draw the
        # same completions and replay the hack step for step: the sampling seed moves on, by the rollback's number.
        if self.reseed is not None:
            set_seed(args.seed + 7919 * self.reseed)
            self.reseed = None

    def on_step_end(self, args, state, control, **kwargs):
        decision = self.check(state.global_step) if self.is_main and self.trainer is not None else None
        decision = from_main(decision, args.world_size)
        if decision in ("stop", "rollback"):
            control.should_training_stop = True
            if decision == "rollback":
                control.should_save = False  # a checkpoint of this step would rotate out the one to go back to
        return control

    def check(self, step: int) -> str | None:
        """Measures every wire at `step`, logs the values, records and acts on firings; returns the strongest action
        taken (`stop`, `rollback`) or None."""
        metrics = self.trainer._metrics["train"]
        self.history.append({"step": step, **step_measures(metrics, self.roles)})
        heldout = sorted((r["step"], r["accuracy"]) for r in (self.heldout.history if self.heldout else [])
                         if isinstance(r.get("step"), int) and isinstance(r.get("accuracy"), (int, float)))
        firing, decision = set(), None
        for name, wire in self.wires.items():
            value = measure(name, self.history, heldout, wire.window)
            if value is None:
                continue
            fired = value >= wire.threshold
            metrics[f"tripwire/{name}"].append(value)
            metrics[f"tripwire/{name}/fired"].append(float(fired))
            if not fired:
                continue
            firing.add(name)
            if wire.action == "warn" and name in self.firing:
                continue  # still firing: warned already
            action = self.act(name, wire, value, step)
            if action == "rollback" or (action == "stop" and decision is None):
                decision = action
        self.firing = firing
        return decision

    def act(self, name: str, wire: Wire, value: float, step: int) -> str:
        """Logs and records a firing; for `rollback`, names the checkpoint in the ledger. Returns the action taken."""
        action, note = wire.action, ""
        if action == "rollback":
            ledger = read_ledger(self.output_dir)
            checkpoint = checkpoint_before(self.output_dir, step - wire.window) or checkpoint_before(self.output_dir, step - 1)
            if len(ledger["done"]) >= self.max_rollbacks:
                action, note = "stop", f"; {self.max_rollbacks} rollback(s) done already (tripwire_max_rollbacks): stopping"
            elif checkpoint is None:
                action, note = "stop", "; no checkpoint saved before it to go back to: stopping"
            else:
                ledger["pending"] = {"checkpoint": checkpoint, "step": step, "wire": name, "value": value,
                                     "lr_factor": self.lr_factor}
                records.write_json(Path(self.output_dir) / LEDGER, ledger)
                note = f"; rolling back to {checkpoint} with the learning rate x{self.lr_factor:g}"
        logger.warning("Tripwire %s fired at step %d: %.4g >= threshold %.4g over %d steps (%s)%s", name, step, value,
                       wire.threshold, wire.window, wire.action, note)
        path = Path(self.output_dir) / RECORD
        if path.parent.is_dir():
            with path.open("a") as f:
                f.write(json.dumps({"step": step, "wire": name, "value": value, "threshold": wire.threshold,
                                    "window": wire.window, "action": action}) + "\n")
        return action


def cut_learning_rate(optimizer, lr_scheduler, factor: float) -> None:
    """Multiplies the learning rate of every parameter group, and the schedule's base rates, by `factor`."""
    if optimizer is not None:
        for group in optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
    if lr_scheduler is not None and hasattr(lr_scheduler, "base_lrs"):
        lr_scheduler.base_lrs = [lr * factor for lr in lr_scheduler.base_lrs]
        if hasattr(lr_scheduler, "_last_lr"):
            lr_scheduler._last_lr = [lr * factor for lr in lr_scheduler._last_lr]


def prepare_rollback(trainer, rollback: dict, number: int = 1) -> None:
    """Before training again from `rollback["checkpoint"]`: a fresh optimizer and schedule (the trainer builds them,
    then loads the checkpoint's), cut by the rollback's factor when training starts, and a sampling seed of its own
    (`number`: this run's rollback count) from the first step on."""
    trainer.optimizer, trainer.lr_scheduler = None, None
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, Tripwires):
            callback.lr_cut = float(rollback.get("lr_factor", callback.lr_factor))
            callback.reseed = number


def firings(output_dir: str | Path) -> list[dict]:
    """Every firing of a run, for the report: the record's rows, plus the rollbacks of the ledger (a rollback rewinds
    the record past its own firing)."""
    rows = records.read(Path(output_dir) / RECORD) if (Path(output_dir) / RECORD).is_file() else []
    for done in read_ledger(str(output_dir))["done"]:
        if isinstance(done, dict) and isinstance(done.get("step"), int):
            rows.append({"step": done["step"], "wire": done.get("wire"), "value": done.get("value"),
                         "action": "rollback", "checkpoint": done.get("checkpoint")})
    seen, out = set(), []
    for row in rows:
        key = (row.get("step"), row.get("wire"), row.get("action"))
        if isinstance(row.get("step"), int) and key not in seen:
            seen.add(key)
            out.append(row)
    return sorted(out, key=lambda r: r["step"])
