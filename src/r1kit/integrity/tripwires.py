"""Tripwires: signs, over a window of training steps, that the reward is being gamed; each with a threshold and an
action (`warn`, `stop`, or `rollback` to the last checkpoint before it fired, with the learning rate cut).

    reward_vs_heldout    training reward rising while held-out accuracy falls: min(reward rise, accuracy fall)
                         over the window (needs the `heldout_accuracy` callback)
    format_vs_accuracy   format rewards rising while accuracy stays flat: format rise - max(0, accuracy rise), the
                         accuracy being the first correctness reward's mean (accuracy, cosine, reasoning_gym, code...)
    length_blowup        mean completion length at the window's end / at its start
    length_collapse      mean completion length at the window's start / at its end
    collapse             one answer taking over: (the most questions of a batch whose majority answer is one same
                         answer - 1) / (questions - 1), averaged over the window. An answer is the completion's final
                         answer, extracted and normalised (`r1kit.judging.answers`: the same constant behind varying reasoning
                         is one answer; no answer is an answer too); a question is its gold answer where rows have
                         one (questions with one gold may rightly share an answer), else its prompt
    disagreement         the reward against the independent judge (`r1kit.integrity.second_opinion`): the share of checked rows
                         whose verdicts differ, whoever is right, averaged over the window's last measurements
    drift                the reward's correct share rising away from the judge's on the same rows: the rise of
                         (reward correct - judge correct) over the window (held-out accuracy cannot show it when it
                         is graded by the reward's own scorer)
    unchecked            the share of sampled rows the independent judge could not judge, averaged over the window:
                         answers moving out of what the judge reads leave the other wires blind

A rise or fall compares the mean of the window's last quarter with the mean of its first quarter (at least one step
each). A wire is measured once the run has a window of steps behind it (after a resume or a rollback, the window
fills again), and fires when its value reaches its threshold. Every step logs `tripwire/<name>` (the value) and
`tripwire/<name>/fired` (0 or 1); each firing is written to `OUTPUT_DIR/tripwires.jsonl` (step, wire, value,
threshold, action). `warn` logs one warning when a wire starts firing; `stop` ends training at that step, and the run
stays stopped (`r1kit.state.ledger`: a stop is recorded before training stops); `rollback` records in the run's ledger the
newest checkpoint saved before the wire's window began (else the newest saved before it fired) that a resume would
accept (`r1kit.state.checkpoints.resumable_problem`: an older one when it is damaged), and ends training without saving
this step; `r1kit.run.pipeline` then moves the abandoned stretch's checkpoints aside and trains again from it with the
learning rate multiplied by `tripwire_lr_factor` and a sampling seed of its own, at most `tripwire_max_rollbacks`
times (past them, or with no checkpoint to go back to, `rollback` stops). Every decision is in the ledger before it
is acted on, so a crash cannot undo it. The decision is taken on the main process and shared, so every process stops
at the same step.
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

from transformers import TrainerCallback

from r1kit import records
from r1kit.errors import ConfigError
from r1kit.judging.answers import answer_of
from r1kit.machine import from_main
from r1kit.rewards.text import completion_text, message_text
from r1kit.state import ledger
from r1kit.state.checkpoints import resumable_problem

logger = logging.getLogger(__name__)

ACTIONS = ("warn", "stop", "rollback")
RECORD = "tripwires.jsonl"
FORMAT_REWARDS = ("format", "tag_count", "code_format")
CORRECTNESS_REWARDS = ("accuracy", "cosine", "reasoning_gym", "code", "binary_code", "ioi_code", "cf_code")
IDENTICAL_METRIC = "completions/identical_across_prompts"  # raw text, logged for reference
IDENTICAL_ANSWERS_METRIC = "completions/identical_answers"  # extracted, normalised answers: what `collapse` reads


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
    "drift": Wire(0.25, 8),
    "unchecked": Wire(0.5, 10),
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
    if name in ("disagreement", "unchecked"):
        measured = [e[name] for e in history if isinstance(e.get(name), (int, float))]
        return sum(measured[-window:]) / window if len(measured) >= window else None
    if name == "drift":
        measured = [e["gap"] for e in history if isinstance(e.get("gap"), (int, float))]
        if len(measured) < window:
            return None
        first, last = _ends(measured[-window:])
        return last - first
    raise KeyError(name)


def gold_key(row: Any) -> str | None:
    """A row's gold answer as text (`solution`, else `answer`), or None."""
    if not isinstance(row, dict):
        return None
    gold = row.get("solution", row.get("answer"))
    return None if gold is None else str(gold).strip()


def identical_share(prompts: list, completions: list, inputs: list | None = None,
                    answers: bool = False) -> float | None:
    """How far one reply has taken over the batch's questions: (the most questions whose majority reply is one same
    reply - 1) / (questions - 1), 0 when no two questions share their majority reply, 1 when every question gets the
    same one. A question's majority reply is the reply at least half its rows gave; a reply is the completion
    (whitespace-trimmed), or with `answers` its final answer extracted and normalised (`r1kit.judging.answers.answer_of`);
    a question is its gold answer where the rows have one (two prompts with the same answer may rightly share a short
    reply: "The final answer is 7."), else its prompt. None with fewer than two questions."""
    inputs = inputs or []
    replies_of: dict[str, list[str]] = {}
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        gold = gold_key(inputs[i]) if i < len(inputs) else None
        key = gold if gold is not None else "prompt:" + (message_text(prompt) if isinstance(prompt, list)
                                                          else str(prompt))
        text = completion_text(completion)
        replies_of.setdefault(key, []).append(answer_of(text, gold) if answers else text.strip())
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
    """A reward listener of `R1Trainer`: logs, for each training batch (this process's rows), how far one reply has
    taken over its questions: `completions/identical_answers` (final answers, what the `collapse` wire reads) and
    `completions/identical_across_prompts` (raw text)."""

    def __call__(self, trainer, prompts: list, completions: list, rewards, inputs=None) -> None:
        if trainer.model.training and trainer.accelerator.is_main_process:
            for metric, answers in ((IDENTICAL_ANSWERS_METRIC, True), (IDENTICAL_METRIC, False)):
                share = identical_share(prompts, completions, inputs, answers=answers)
                if share is not None:
                    trainer._metrics["train"][metric].append(share)


# --------------------------------------------------------------------------------------------------------------------
# The callback
# --------------------------------------------------------------------------------------------------------------------
def step_measures(metrics: dict, roles: dict[str, list[str]]) -> dict[str, float]:
    """This step's measures from the trainer's pending metrics (the newest value of each): reward, format (mean of the
    format rewards), accuracy (the first correctness reward), length, identical (answers), and from the second
    opinion, each a mean over rewards: disagreement, unchecked, gap (reward correct - judge correct)."""
    def newest(key: str) -> float | None:
        values = metrics.get(key)
        return float(values[-1]) if values else None

    found = {"reward": newest("reward"), "length": newest("completions/mean_length"),
             "identical": newest(IDENTICAL_ANSWERS_METRIC)}
    formats = [v for v in (newest(f"rewards/{n}/mean") for n in roles["format"]) if v is not None]
    found["format"] = sum(formats) / len(formats) if formats else None
    accuracy = [v for v in (newest(f"rewards/{n}/mean") for n in roles["correctness"]) if v is not None]
    found["accuracy"] = accuracy[0] if accuracy else None
    found["disagreement"] = _mean_opinion(metrics, "disagreement")
    found["unchecked"] = _mean_opinion(metrics, "unchecked")
    judge, reward = _mean_opinion(metrics, "judge_correct"), _mean_opinion(metrics, "reward_correct")
    found["gap"] = None if judge is None or reward is None else reward - judge
    return {k: v for k, v in found.items() if v is not None and math.isfinite(v)}


def _mean_opinion(metrics: dict, measure_: str) -> float | None:
    """The mean over checked rewards of this step's `second_opinion/<reward>/<measure_>` (the newest of each)."""
    values = [float(v[-1]) for k, v in metrics.items()
              if k.startswith("second_opinion/") and k.endswith("/" + measure_) and v]
    return sum(values) / len(values) if values else None


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
        self.without_optimizer = False  # the recipe's resume_without_optimizer: what a rollback target must hold

    def attach(self, trainer, reward_names: list[str], heldout=None, correctness: tuple[str, ...] = ()) -> None:
        """The trainer (its pending metrics), the recipe's reward names (which are format and correctness rewards:
        TRL logs them by function name, in the same order) and the held-out accuracy callback."""
        self.trainer, self.heldout = trainer, heldout
        names = dict(zip(reward_names, trainer.reward_func_names))
        self.roles = {"format": [names[n] for n in reward_names if n in FORMAT_REWARDS],
                      "correctness": [names[n] for n in reward_names if n in CORRECTNESS_REWARDS or n in correctness]}

    def on_train_begin(self, args, state, control, **kwargs):
        self.history, self.firing = [], set()
        self.without_optimizer = bool(getattr(args, "resume_without_optimizer", False))
        if self.is_main:
            records.rewind(Path(self.output_dir) / RECORD, state.global_step)

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
        """Logs and records a firing; a rollback or a stop goes to the run's ledger first. Returns the action taken."""
        action, note = wire.action, ""
        if action == "rollback":
            action, note = self.decide_rollback(name, value, step, wire.window)
        if action == "stop":
            ledger.decide_stop(self.output_dir, step, name, value, wire.threshold,
                               f"{name} {value:.4g} >= {wire.threshold:.4g} over {wire.window} steps{note}")
        logger.warning("Tripwire %s fired at step %d: %.4g >= threshold %.4g over %d steps (%s)%s", name, step, value,
                       wire.threshold, wire.window, wire.action, note)
        path = Path(self.output_dir) / RECORD
        if path.parent.is_dir():
            with path.open("a") as f:
                f.write(json.dumps({"step": step, "wire": name, "value": value, "threshold": wire.threshold,
                                    "window": wire.window, "action": action}) + "\n")
        return action

    def decide_rollback(self, name: str, value: float, step: int, window: int) -> tuple[str, str]:
        """("rollback", note) with the rollback in the ledger, or ("stop", why not)."""
        if len(ledger.read(self.output_dir)["rollbacks"]) >= self.max_rollbacks:
            return "stop", f"; {self.max_rollbacks} rollback(s) done already (tripwire_max_rollbacks): stopping"
        target = self.rollback_target(step, window)
        if target is None:
            return "stop", "; no checkpoint saved before it that training can go back to: stopping"
        ledger.decide_rollback(self.output_dir, str(target), step, name, value, self.lr_factor)
        return "rollback", f"; rolling back to {target} with the learning rate x{self.lr_factor:g}"

    def rollback_target(self, step: int, window: int) -> Path | None:
        """The newest checkpoint saved before the wire's window began that a resume would accept (an older one when
        it is damaged: each one passed over says why), else the newest saved before it fired when none was saved
        before the window; None when there is none."""
        folders = ledger.checkpoint_folders(self.output_dir)
        before = [f for f in folders if ledger.step_of(f.name) <= step - window]
        candidates = before or [f for f in folders if ledger.step_of(f.name) <= step - 1]
        for folder in reversed(candidates):
            problem = resumable_problem(folder, self.without_optimizer)
            if problem is None:
                return folder
            logger.warning("Tripwire rollback: cannot train again from %s (%s); trying the one before.", folder, problem)
        return None


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


def prepare_rollback(trainer) -> None:
    """Before training again from a rollback's checkpoint: a fresh optimizer and schedule (the trainer builds them,
    then loads the checkpoint's; `r1kit.run.pipeline` cuts them and moves the sampling seed on when training starts)."""
    trainer.optimizer, trainer.lr_scheduler = None, None


def firings(output_dir: str | Path) -> list[dict]:
    """Every firing of a run, for the report: the record's rows, plus the rollbacks of the ledger (a rollback rewinds
    the record past its own firing)."""
    rows = records.read(Path(output_dir) / RECORD) if (Path(output_dir) / RECORD).is_file() else []
    for done in ledger.read(output_dir)["rollbacks"]:
        if isinstance(done.get("step"), int):
            rows.append({"step": done["step"], "wire": done.get("wire"), "value": done.get("value"),
                         "action": "rollback", "checkpoint": done.get("checkpoint")})
    seen, out = set(), []
    for row in rows:
        key = (row.get("step"), row.get("wire"), row.get("action"))
        if isinstance(row.get("step"), int) and key not in seen:
            seen.add(key)
            out.append(row)
    return sorted(out, key=lambda r: r["step"])
