"""A second opinion during training: each step, a few scored completions are judged again by a path that shares no
code with the reward that scored them, and the two verdicts (correct or not) are compared.

    math (accuracy, cosine)        the last `\\boxed{}` or `<answer>` block read by a small number grammar (integers,
                                   decimals, `a/b`, `\\frac{a}{b}`), compared with the gold as exact fractions; not
                                   math-verify, not sympy
    code (code, binary_code)       a fresh jail of the local sandbox, the row's tests run in reverse order
    reasoning_gym                  the generator's scorer in a scorer process of its own, on the sampled answers alone

Any other reward (format rewards, a `module:function`) has no second opinion, said once at the start, unless the
recipe names its kind in `second_opinion_kinds` (a user's reward that claims to judge math answers can be checked as
`accuracy` is). The sample is drawn on the main process from its own rows, weighted toward high rewards (a reward that
lies pays for something, so the paid completions are where a lie shows). Logged per reward and per scored batch:
`second_opinion/<reward>/disagreement` (share of the checked rows whose verdicts differ) and `.../checked`; every
disagreeing row goes to `OUTPUT_DIR/second_opinion.jsonl` (step, reward, prompt, completion, gold, both verdicts).

A row the second path cannot judge (a gold outside the grammar, an answer it cannot read, a jail that did not start,
a row that is malformed) is unchecked, never a disagreement; a failure inside the second opinion is logged once and
leaves the batch unchecked: it never raises into training. Each check is bounded: the math grammar reads at most
`MAX_ANSWER_CHARS` of a completion and numbers of at most `MAX_DIGITS` digits; code runs under the row's own time
and memory limits in the jail; reasoning-gym answers under `reward_timeout` each.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import random
import re
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from r1kit import records
from r1kit.rewards.code import test_cases_program
from r1kit.rewards.gym import score_completions
from r1kit.rewards.text import completion_text, log_once
from r1kit.sandbox import SANDBOX_ERROR, Program, get_provider

logger = logging.getLogger(__name__)

Kind = Literal["math", "code", "reasoning_gym"]
KINDS: tuple[str, ...] = ("math", "code", "reasoning_gym")
BUILT_IN_KINDS: dict[str, str] = {"accuracy": "math", "cosine": "math", "code": "code", "binary_code": "code",
                                  "reasoning_gym": "reasoning_gym"}
RECORD = "second_opinion.jsonl"
MAX_ANSWER_CHARS = 20_000  # the answer is at the end: the math grammar reads the last 20 k characters
MAX_DIGITS = 200  # a longer number is not a contest answer: unchecked
MAX_RECORD_CHARS = 4000  # prompt and completion are cut to this in the record file
CORRECT_SHARE = 0.999  # accuracy, reasoning_gym, code: full marks is "correct"
COLLECT_SECONDS = 300.0  # the longest a step waits for a batch judged in the background

Verdict = bool | None  # correct, wrong, or None: this path cannot judge the row


# --------------------------------------------------------------------------------------------------------------------
# Math: a small grammar of numbers, compared as exact fractions
# --------------------------------------------------------------------------------------------------------------------
_INTEGER = r"\d{1,3}(?:,\d{3})+|\d+"  # 1,234,567 or 1234567
_NUMBER = re.compile(rf"([+-]?)({_INTEGER})(?:\.(\d+))?", re.ASCII)
_FRACTION = re.compile(r"([+-]?)\\d?frac\{\s*([+-]?\d+)\s*\}\{\s*([+-]?\d+)\s*\}", re.ASCII)
_SLASH = re.compile(r"([+-]?\d+)\s*/\s*([+-]?\d+)", re.ASCII)
_WRAPPERS = ("$", "\\(", "\\)", "\\[", "\\]", "\\!", "\\,", "\\;", "{", "}")


def read_number(text: str) -> Fraction | None:
    """`text` as an exact number when the whole of it is one: an integer (thousands commas allowed), a decimal,
    `a/b` or `\\frac{a}{b}`, with an optional sign, `$...$` and `x =` around it; otherwise None.

    Example:
        >>> read_number("$\\\\frac{3}{4}$"), read_number("1,024"), read_number("2^3")
        (Fraction(3, 4), Fraction(1024, 1), None)
    """
    text = str(text).strip()
    if len(text) > 4 * MAX_DIGITS:
        return None
    text = re.sub(r"^[A-Za-z]\s*=", "", text).strip().rstrip(".").strip()
    match = _FRACTION.fullmatch(text)
    if match:
        return _ratio(match[1] + match[2], match[3])
    bare = text
    for wrapper in _WRAPPERS:
        bare = bare.replace(wrapper, "")
    bare = bare.strip()
    match = _FRACTION.fullmatch(bare) or None
    if match:
        return _ratio(match[1] + match[2], match[3])
    match = _SLASH.fullmatch(bare)
    if match:
        return _ratio(match[1], match[2])
    match = _NUMBER.fullmatch(bare)
    if match is None or len(match[2]) + len(match[3] or "") > MAX_DIGITS:
        return None
    digits = match[2].replace(",", "") + (match[3] or "")
    value = Fraction(int(digits), 10 ** len(match[3] or ""))
    return -value if match[1] == "-" else value


def _ratio(numerator: str, denominator: str) -> Fraction | None:
    if len(numerator) > MAX_DIGITS or len(denominator) > MAX_DIGITS or int(denominator) == 0:
        return None
    return Fraction(int(numerator), int(denominator))


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None. Linear: one scan from the last opening."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def last_answer(text: str) -> str | None:
    """The content of the last `<answer>...</answer>` block, found from the end (no shared code with the rewards'
    reader, which scans from the start)."""
    close = text.rfind("</answer>")
    if close < 0:
        return None
    opening = text.rfind("<answer>", 0, close)
    return text[opening + len("<answer>") : close] if opening >= 0 else None


def math_verdict(completion: str, gold: Any) -> Verdict:
    """Whether `completion` answers `gold` by the small grammar: the last `\\boxed{}` (where the main verifier looks
    first), else the last `<answer>` block. None when the gold or the answer is outside the grammar."""
    expected = read_number(str(gold)) if gold is not None else None
    if expected is None:
        return None
    text = completion[-MAX_ANSWER_CHARS:]
    answer = last_boxed(text)
    if answer is None:
        answer = last_answer(text)
    if answer is None:
        return False  # no answer where either reader looks: wrong for both
    got = read_number(answer)
    return None if got is None else got == expected


# --------------------------------------------------------------------------------------------------------------------
# Code and reasoning-gym: the sandbox again, fresh
# --------------------------------------------------------------------------------------------------------------------
def code_verdicts(texts: list[str], rows: list[Any], language: str, allow_unsandboxed: bool) -> list[Verdict]:
    """Each answer's program run in a fresh jail of the local provider with its row's tests in reverse order; True
    when every test passes. A malformed row or a jail that did not start: None."""
    verdicts: list[Verdict] = [None] * len(texts)
    programs, places = [], []
    for i, (text, row) in enumerate(zip(texts, rows)):
        try:
            program = test_cases_program(row, text, language)
        except Exception:  # noqa: BLE001 - a row the reward cannot read is unchecked here too
            continue
        if not program.code.strip():
            verdicts[i] = False
            continue
        programs.append(Program(code=program.code, language=program.language, inputs=program.inputs[::-1],
                                expected=program.expected[::-1], time_limit=program.time_limit,
                                memory_mb=program.memory_mb))
        places.append(i)
    if not programs:
        return verdicts
    provider = get_provider("local", num_parallel=1, isolate=not allow_unsandboxed)
    for i, tests in zip(places, provider.execute(programs)):
        if not any(t.status == SANDBOX_ERROR for t in tests):
            verdicts[i] = bool(tests) and all(t.passed for t in tests)
    return verdicts


def gym_verdicts(texts: list[str], records_: list[Any], timeout: float, mode: str,
                 allow_unsandboxed: bool) -> list[Verdict]:
    """The sampled answers scored by their generator's scorer in one scorer process of their own (not the batch's):
    full marks is correct; a row the scorer cannot judge, or a scorer that did not start, None."""
    scores = score_completions(texts, records_, timeout, mode, allow_unsandboxed)
    return [None if s is None else s >= CORRECT_SHARE for s in scores]


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
        gym_mode (`str`, defaults to `"last_number"`), code_language (`str`, defaults to `"python"`),
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
        prompt_texts = [completion_text(p[-1:]) if isinstance(p, list) else str(p) for p in prompts]
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

    def judge(self, job: dict) -> list[tuple[str, int, int, list[str]]]:
        """Per checked reward: (name, rows checked, rows whose verdicts differ, the record lines of those rows)."""
        results = []
        for reward in job["rewards"]:
            rows = reward["rows"]
            verdicts = self.verdicts(reward["kind"], [r["text"] for r in rows], [r["input"] for r in rows])
            results.append((reward["name"], *self.compare(reward["name"], job["step"], rows, verdicts)))
        return results

    def finish(self, trainer, results: list[tuple[str, int, int, list[str]]]) -> None:
        metrics = trainer._metrics["train"]
        lines = []
        for name, checked, differ, rows in results:
            metrics[f"second_opinion/{name}/checked"].append(float(checked))
            if checked:
                metrics[f"second_opinion/{name}/disagreement"].append(differ / checked)
            lines += rows
        if lines and self.path.parent.is_dir():  # never recreate a deleted folder: the run's own check reports it
            with self.path.open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))

    def verdicts(self, kind: str, texts: list[str], rows: list[dict]) -> list[Verdict]:
        if kind == "math":
            return [math_verdict(t, r.get("solution")) for t, r in zip(texts, rows)]
        if kind == "code":
            return code_verdicts(texts, [r.get("verification_info") for r in rows], self.code_language,
                                 self.allow_unsandboxed)
        return gym_verdicts(texts, [r.get("reasoning_gym") for r in rows], self.timeout, self.gym_mode,
                            self.allow_unsandboxed)

    def compare(self, name: str, step: int, rows: list[dict], verdicts: list[Verdict]) -> tuple[int, int, list[str]]:
        """(rows checked, rows whose verdicts differ, the record lines of those rows)."""
        checked = differ = 0
        lines = []
        for row, second in zip(rows, verdicts):
            if second is None:
                continue
            checked += 1
            first = main_says_correct(name, row["score"], self.cosine_min_correct)
            if first == second:
                continue
            differ += 1
            source = row["input"] if isinstance(row["input"], dict) else {}
            gold = source.get("solution", source.get("verification_info", source.get("reasoning_gym")))
            lines.append(json.dumps({
                "step": step, "reward": name, "prompt": row["prompt"][:MAX_RECORD_CHARS],
                "completion": row["text"][-MAX_RECORD_CHARS:], "gold": str(gold)[:MAX_RECORD_CHARS],
                "main_score": row["score"], "main_correct": first, "second_correct": second,
            }, ensure_ascii=False))
        return checked, differ, lines
