"""A second opinion during training: each step, a few scored completions are judged again by an independent judge
(`r1kit.integrity.independent`), never the reward's scorer itself, and the two verdicts (correct or not) are compared.

    math (accuracy, cosine)        `r1kit.judging.mathjudge`: its own parser and evaluator over fractions, radicals,
                                   intervals, sets, percentages and units (not math-verify, not sympy); an answer that
                                   restates the question or hedges is wrong
    code (code, binary_code)       a fresh jail, the row's tests in reverse order; the prompt's examples where the row
                                   gives no tests
    reasoning_gym                  isomorphic re-verification: full marks on its question, not copied from it, nothing
                                   like full marks on twins of it, not given by one premise alone

Any other reward (format rewards, a `module:function`) has no second opinion, said once at the start, unless the
recipe names its kind in `second_opinion_kinds` (a user's reward that claims to judge math answers can be checked as
`accuracy` is). The sample is drawn on the main process from its own rows, weighted toward high rewards (a reward that
lies pays for something, so the paid completions are where a lie shows). Logged per reward and per scored batch:
`second_opinion/<reward>/disagreement` (share of the checked rows whose verdicts differ), `.../checked`,
`.../unchecked` (share of the sampled rows the judge could not judge), `.../judge_correct` and `.../reward_correct`
(shares of the checked rows each calls correct: the `drift` wire compares their rises); every disagreeing row goes
to `OUTPUT_DIR/second_opinion.jsonl` (step, reward, prompt, completion, gold, both verdicts).

A row the second path cannot judge (a gold outside the grammar, an answer it cannot read, a jail that did not start,
a row that is malformed) is unchecked, never a disagreement; a failure inside the second opinion is logged once and
leaves the batch unchecked: it never raises into training. Each check is bounded: the math judge reads at most the
last 20,000 characters of a completion and 2,000 of an answer; code runs under the row's own time and memory limits
in the jail; reasoning-gym answers under `reward_timeout` each.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Literal

from transformers import TrainerCallback

from r1kit import records
from r1kit.integrity.independent import Verdict, code_verdicts, gym_verdicts, math_verdict
from r1kit.rewards.text import completion_text, log_once, message_text

logger = logging.getLogger(__name__)

Kind = Literal["math", "code", "reasoning_gym"]
KINDS: tuple[str, ...] = ("math", "code", "reasoning_gym")
BUILT_IN_KINDS: dict[str, str] = {"accuracy": "math", "cosine": "math", "code": "code", "binary_code": "code",
                                  "reasoning_gym": "reasoning_gym"}
RECORD = "second_opinion.jsonl"
MAX_RECORD_CHARS = 4000  # prompt and completion are cut to this in the record file
CORRECT_SHARE = 0.999  # accuracy, reasoning_gym, code: full marks is "correct"
COLLECT_SECONDS = 300.0  # the longest a step waits for a batch judged in the background
__all__ = ["SecondOpinion", "Verdict", "compare_rows", "judge_rows", "main_says_correct", "math_verdict",
           "opinion_metrics", "pick_rows"]


# --------------------------------------------------------------------------------------------------------------------
# The listener
# --------------------------------------------------------------------------------------------------------------------
def main_says_correct(name: str, score: float, cosine_min_correct: float) -> bool:
    """The main reward's score read as a verdict: `cosine` pays a right answer at least `cosine_min_value_correct`;
    every other checked reward pays full marks (1.0) for a right one. A user's reward declared as a kind counts as
    correct from 0.5 on."""
    if name == "cosine":
        return score >= cosine_min_correct
    if name in BUILT_IN_KINDS:
        return score >= CORRECT_SHARE
    return score >= 0.5


def pick_rows(scores: list[float], count: int, rng: random.Random) -> list[int]:
    """Up to `count` distinct row indices, drawn with weights that favour high scores (the lowest score weighs 1,
    the highest 4); rows without a score (None/NaN) are never drawn."""
    judged = [i for i, s in enumerate(scores) if s is not None and math.isfinite(s)]
    if len(judged) <= count:
        return judged
    low, high = min(scores[i] for i in judged), max(scores[i] for i in judged)
    span = (high - low) or 1.0
    weights = {i: 1.0 + 3.0 * (scores[i] - low) / span for i in judged}
    chosen: list[int] = []
    while len(chosen) < count:
        pool = [i for i in judged if i not in chosen]
        chosen.append(rng.choices(pool, weights=[weights[i] for i in pool])[0])
    return sorted(chosen)


class SecondOpinion(TrainerCallback):
    """A reward listener of `R1Trainer` (`listener(trainer, prompts, completions, rewards, inputs)`), also a trainer
    callback for its record's rewind on resume. Checks `samples` rows per checked reward per training batch, on the
    main process.

    Args:
        reward_names (`list[str]`): the recipe's `reward_funcs`, in order.
        output_dir (`str`): where `second_opinion.jsonl` goes.
        samples (`int`): rows checked per reward and per scored batch.
        kinds (`dict[str, str]`, *optional*): extra rewards (by recipe name) checked as a kind: `math`, `code` or
            `reasoning_gym`.
        timeout (`float`, defaults to `5.0`): seconds per reasoning-gym answer.
        gym_mode (`str`, defaults to `"last_number"`): unused (the judge reads answers its own way), kept for
            callers; code_language (`str`, defaults to `"python"`),
        allow_unsandboxed (`bool`, defaults to `False`), cosine_min_correct (`float`, defaults to `0.5`): as the
            recipe sets them for the rewards.
        seed (`int`, defaults to `0`): the sample's seed (with the step).
        background (`bool`, defaults to `False`): judge in a worker thread while the step trains (a jail or a scorer
            process starts per batch: about 1.4 s), collected at the step's end, before its metrics are logged;
            training runs with it on.
    """

    def __init__(self, reward_names: list[str], output_dir: str, samples: int, kinds: dict[str, str] | None = None,
                 timeout: float = 5.0, gym_mode: str = "last_number", code_language: str = "python",
                 allow_unsandboxed: bool = False, cosine_min_correct: float = 0.5, seed: int = 0,
                 background: bool = False):
        declared = dict(kinds or {})
        self.kinds = {name: declared.get(name) or BUILT_IN_KINDS.get(name) for name in reward_names}
        self.reward_names = list(reward_names)
        self.path = Path(output_dir) / RECORD
        self.samples = samples
        self.timeout, self.gym_mode, self.code_language = timeout, gym_mode, code_language
        self.allow_unsandboxed, self.cosine_min_correct, self.seed = allow_unsandboxed, cosine_min_correct, seed
        self.seconds = 0.0  # time the training thread spent on it, for the cost measurement
        self.background = background
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list = []  # (trainer, future) of batches judged in the background
        checked = [f"{n} ({k})" for n, k in self.kinds.items() if k]
        unchecked = [n for n, k in self.kinds.items() if not k]
        logger.info("Second opinion on %s rows per batch: %s%s", samples, ", ".join(checked) or "no reward",
                    f"; not checked (no independent judge): {', '.join(unchecked)}" if unchecked else "")

    @property
    def active(self) -> bool:
        return self.samples > 0 and any(self.kinds.values())

    # a trainer callback too: a resumed run re-does the steps after its checkpoint, so their rows go first
    def on_train_begin(self, args, state, control, **kwargs):
        records.rewind(self.path, state.global_step)

    def __call__(self, trainer, prompts: list, completions: list, rewards, inputs: list[dict] | None = None) -> None:
        if not self.active or not trainer.model.training or not trainer.accelerator.is_main_process:
            return
        start = time.monotonic()
        try:
            job = self.sample_batch(trainer, prompts, completions, rewards, inputs or [])
            if self.background:  # judged while the step trains; `on_step_end` collects it
                self._pending.append((trainer, self._executor().submit(self.judge, job)))
            else:
                self.finish(trainer, self.judge(job))
        except Exception as e:  # noqa: BLE001 - a second opinion must never stop training
            self._failed(e)
        self.seconds += time.monotonic() - start

    def on_step_end(self, args, state, control, **kwargs):
        self.collect()

    def on_train_end(self, args, state, control, **kwargs):
        self.collect()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def collect(self) -> None:
        """Waits for the batches judged in the background (bounded: `COLLECT_SECONDS` each) and logs them, on the
        main thread, before the step's metrics are logged and the tripwires read them."""
        start = time.monotonic()
        pending, self._pending = self._pending, []
        for trainer, future in pending:
            try:
                self.finish(trainer, future.result(timeout=COLLECT_SECONDS))
            except Exception as e:  # noqa: BLE001 - a judge that failed or hung leaves its batch unchecked
                self._failed(e)
        self.seconds += time.monotonic() - start

    def _executor(self):
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="r1kit-second-opinion")
        return self._pool

    @staticmethod
    def _failed(error: Exception) -> None:
        log_once(logger, f"failed:{type(error).__name__}", "The second opinion failed (%s: %s); this batch is "
                 "unchecked (logged once per kind of failure).", type(error).__name__, str(error)[:200])

    def sample_batch(self, trainer, prompts: list, completions: list, rewards, inputs: list[dict]) -> dict:
        """What the judges need, taken on the training thread: the step, and per checked reward its sampled rows
        (index, text, row, main score)."""
        n, rank = len(completions), trainer.accelerator.process_index
        own = rewards[rank * n : (rank + 1) * n].tolist()
        step = trainer.state.global_step + 1
        rng = random.Random(f"{self.seed}-{step}")
        texts = [completion_text(c) for c in completions]
        prompt_texts = [message_text(p) if isinstance(p, list) else str(p) for p in prompts]
        sampled = []
        for column, name in enumerate(self.reward_names):
            kind = self.kinds.get(name)
            if not kind:
                continue
            scores = [row[column] for row in own]
            rows = pick_rows(scores, self.samples, rng)
            sampled.append({"name": name, "kind": kind, "rows": [
                {"text": texts[i], "prompt": prompt_texts[i], "score": scores[i],
                 "input": inputs[i] if i < len(inputs) else {}} for i in rows]})
        return {"step": step, "rewards": sampled}

    def judge(self, job: dict) -> list[dict]:
        """Per checked reward, what `compare_rows` found."""
        results = []
        for reward in job["rewards"]:
            rows = reward["rows"]
            verdicts = judge_rows(reward["kind"], rows, self.timeout, self.code_language, self.allow_unsandboxed)
            results.append(compare_rows(reward["name"], job["step"], rows, verdicts, self.cosine_min_correct))
        return results

    def finish(self, trainer, results: list[dict]) -> None:
        metrics = trainer._metrics["train"]
        lines = []
        for found in results:
            for key, value in opinion_metrics(found).items():
                metrics[key].append(value)
            lines += found["lines"]
        if lines and self.path.parent.is_dir():  # never recreate a deleted folder: the run's own check reports it
            with self.path.open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))


def judge_rows(kind: str, rows: list[dict], timeout: float = 5.0, code_language: str = "python",
               allow_unsandboxed: bool = False) -> list[Verdict]:
    """The independent judge's verdict on each sampled row ({text, prompt, input}) of a reward of `kind`."""
    texts, inputs = [r["text"] for r in rows], [r["input"] if isinstance(r["input"], dict) else {} for r in rows]
    if kind == "math":
        return [math_verdict(t, r.get("solution"), row["prompt"]) for t, r, row in zip(texts, inputs, rows)]
    if kind == "code":
        return code_verdicts(texts, [r.get("verification_info") for r in inputs], code_language, allow_unsandboxed,
                             [row["prompt"] for row in rows])
    return gym_verdicts(texts, [r.get("reasoning_gym") for r in inputs], timeout, allow_unsandboxed)


def compare_rows(name: str, step: int, rows: list[dict], verdicts: list[Verdict],
                 cosine_min_correct: float = 0.5) -> dict:
    """The reward's verdicts (`main_says_correct`) against the judge's on the sampled rows: counts, and the record
    line of each row where they differ."""
    found = {"name": name, "sampled": len(rows), "checked": 0, "differ": 0, "judge_correct": 0, "reward_correct": 0,
             "lines": []}
    for row, second in zip(rows, verdicts):
        if second is None:
            continue
        first = main_says_correct(name, row["score"], cosine_min_correct)
        found["checked"] += 1
        found["judge_correct"] += int(second)
        found["reward_correct"] += int(first)
        if first == second:
            continue
        found["differ"] += 1
        source = row["input"] if isinstance(row["input"], dict) else {}
        gold = source.get("solution", source.get("verification_info", source.get("reasoning_gym")))
        found["lines"].append(json.dumps({
            "step": step, "reward": name, "prompt": row["prompt"][:MAX_RECORD_CHARS],
            "completion": row["text"][-MAX_RECORD_CHARS:], "gold": str(gold)[:MAX_RECORD_CHARS],
            "main_score": row["score"], "main_correct": first, "second_correct": second,
        }, ensure_ascii=False))
    return found


def opinion_metrics(found: dict) -> dict[str, float]:
    """What one reward's comparison logs: checked (rows), unchecked (share of the sampled rows the judge could not
    judge), and over the checked rows the disagreement and the shares the judge and the reward call correct."""
    name, checked = found["name"], found["checked"]
    metrics = {f"second_opinion/{name}/checked": float(checked)}
    if found["sampled"]:
        metrics[f"second_opinion/{name}/unchecked"] = 1.0 - checked / found["sampled"]
    if checked:
        metrics[f"second_opinion/{name}/disagreement"] = found["differ"] / checked
        metrics[f"second_opinion/{name}/judge_correct"] = found["judge_correct"] / checked
        metrics[f"second_opinion/{name}/reward_correct"] = found["reward_correct"] / checked
    return metrics
