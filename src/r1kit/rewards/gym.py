"""The `reasoning_gym` reward: each completion graded by its reasoning-gym generator's own `score_answer`.

The answer is read from the completion (`extract_answer`): the last `<answer>…</answer>` block when there is one;
otherwise, as the recipe's `reasoning_gym_answer` says, `last_number` (default): for a numeric gold the last number
in the text (a small model says "The answer is 8."), for any other gold the last non-empty line; or `reply`: the
whole reply, which reasoning-gym's scorers compare with the gold (many give partial credit to a reply that contains
it; under strict scoring, the default, only a reply they give full marks pays). The row's `reasoning_gym` column (written by the `reasoning-gym:<generator>`
source) holds the generator, its options and the entry the scorer compares against.

Every completion is hostile input, and some scorers evaluate the answer as code (countdown and puzzle24 parse it
with sympy's `parse_expr`, i.e. `eval`). So answers are scored in the local sandbox's jail (`r1kit.sandbox`: no host
files, network or privileges; the trainer's site-packages shown read-only so reasoning-gym imports), one jail per
batch, one forked process per answer where `eval` takes only arithmetic, numbers, symbols and elementary functions,
with a time limit (`reward_timeout`) and no way to touch another answer's verdict
(`r1kit/sandbox/scripts/gym_server.py`). Degenerate answers earn nothing: countdown and puzzle24 answers must be
arithmetic (integers, + - * /, brackets) on exactly the row's numbers (their scorers accept any sympy expression of
the right value, puzzle24's any numbers); an operator that does the problem (`Integral(<integrand>, x) + C`) is
refused; an answer with a positive score that is not specific to its question scores 0: it scores as much on another
question of its generator whose gold differs, or carries that question's gold and earns more there than its own
question's gold does (one answer for every row; a hedge such as "False True" that containment scorers pay on every
row). Strict (`strict`, the default; recipe `reasoning_gym_strict`): only full marks pay (1.0), everything else
scores 0: reasoning-gym's default scorer pays `len(gold) / len(answer)` to any answer that contains the gold, so a
hedge of candidates earned partial credit on 33 generators, and similarity scorers pay a copied grid or string most of
its marks; an answer copied from the question (`r1kit.judging.copies`: a premise, their conjunction, the first quoted
statement, the numbers in order, the last sentence) that is not the gold scores 0 (knights_knaves paid its first
quoted statement full marks); a conclusion one premise alone gives, or that restates several premises together,
scores 0 where the question lists its premises (propositional_logic), and a question whose premises contradict each
other cannot be judged. `strict=False` keeps the scorer's partial credit (the foil check still applies).
An answer that raises, hangs or crashes its scorer scores 0.0 (logged once per kind); the answer is cut to
`MAX_ANSWER_CHARS` first. A row that cannot be judged (no or unreadable `reasoning_gym` record, an
unknown generator, a scorer that pays another question's answer on it, reasoning-gym missing) and a jail that cannot
start score None, which TRL leaves out of the group baseline. Where no jail can run, scoring stops with what to install unless the
recipe sets `allow_unsandboxed_code_execution: true`, which runs the same scorer process without the jail.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from r1kit.credentials import without_secrets
from r1kit.errors import ConfigError
from r1kit.judging.copies import is_copy
from r1kit.rewards.text import last_answer_block, log_once, per_sample, texts
from r1kit.rewards.verify import DEFAULT_TIMEOUT
from r1kit.sandbox import jail
from r1kit.sources.gym_data import UnfaithfulRecord, decode_record, encode_value, is_gym_source, is_number

logger = logging.getLogger(__name__)

AnswerMode = Literal["last_number", "reply"]  # how an answer is read outside an <answer> block (`extract_answer`)
MAX_ANSWER_CHARS = 1000  # an answer is cut to its last 1000 characters before scoring, or twice its gold's length
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?", re.ASCII)  # ASCII digits only: see has_foreign_digits


def has_foreign_digits(text: str) -> bool:
    """Whether `text` holds digits other than ASCII 0-9 (fullwidth, Arabic-Indic, mathematical bold, ...). Python's
    `int` and `float` read them, so reasoning-gym's scorers would pay an answer in look-alike digits; where the gold
    has none, such an answer is wrong."""
    return any(ch.isdigit() and not "0" <= ch <= "9" for ch in text)


def extract_answer(completion: str, gold: str, mode: AnswerMode = "last_number") -> str:
    """The answer a completion gives, as text (empty when it gives none).

    Args:
        completion (`str`): the model's output.
        gold (`str`): the gold answer; a numeric gold makes the last number the answer when no tag is used.
        mode (`str`, defaults to `"last_number"`): without an `<answer>` block, `last_number` reads the last number
            (numeric gold) or last non-empty line; `reply` takes the whole reply, stripped.

    Returns:
        `str`: the last `<answer>` block (stripped), else what `mode` reads.

    Example:
        >>> extract_answer("5 - 9 is -4.", "-4")
        '-4'
    """
    completion = str(completion)
    limit = max(MAX_ANSWER_CHARS, 2 * len(gold))  # an ARC grid's gold alone runs to 1,800 characters
    block = last_answer_block(completion)
    if block is not None:
        return block.strip()[-limit:]
    if mode == "reply":
        return completion.strip()[-limit:]
    if is_number(gold):
        numbers = _NUMBER.findall(completion[-MAX_ANSWER_CHARS:])
        return numbers[-1].rstrip(",") if numbers else ""
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1][-limit:] if lines else ""


MAX_RECORD_CHARS = 4 << 20  # a row's record longer than this is not read (reasoning-gym's largest, ARC, is ~20 k)


def parse_record(record: Any) -> dict | None:
    """The row's `reasoning_gym` record as a dict with `generator`, `options` and `entry` (tuples and sets restored:
    `decode_record`), or None when unreadable: not JSON, too long, nested too deep, or missing a field."""
    if isinstance(record, str):
        if len(record) > MAX_RECORD_CHARS:
            return None
        try:
            record = decode_record(record)
        except (ValueError, RecursionError):
            return None
    if not isinstance(record, dict) or not isinstance(record.get("entry"), dict) or "answer" not in record["entry"]:
        return None
    if not isinstance(record.get("generator"), str) or not isinstance(record.get("options", {}), dict):
        return None
    return record


def _request(record: dict, answer: str) -> str | None:
    """One request line for the scorer process (the entry encoded as the record was), or None when the record holds
    what cannot be sent as it is."""
    try:
        return json.dumps({"generator": record["generator"], "options": encode_value(record.get("options", {})),
                           "entry": encode_value(record["entry"]), "answer": answer})
    except (UnfaithfulRecord, RecursionError):
        return None


SERVER = jail.SCRIPTS / "gym_server.py"
JAIL_SITE = "/opt/r1kit-site"
STARTUP_SECONDS = 30.0  # jail start and `import reasoning_gym` (about 2 s here), generous for a loaded machine
JAIL_MEMORY = 2 << 30  # the whole jail (scorer process, one child, its tmpfs) where cgroups can cap it
RESTARTS = 3  # fresh jails for the rest of a batch after the scorer process stopped mid-batch


def _site_folders() -> list[str]:
    """The folders reasoning-gym and its dependencies import from: this interpreter's site-packages and the one
    that holds reasoning_gym (a user or system install)."""
    folders = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    spec = importlib.util.find_spec("reasoning_gym")
    if spec is not None and spec.origin:
        folders.append(str(Path(spec.origin).parents[1]))
    seen: dict[str, None] = {}
    for folder in folders:
        if os.path.isdir(folder):
            seen.setdefault(os.path.realpath(folder), None)
    return list(seen)


def _run_server(requests: list[str], timeout: float, isolate: bool, strict: bool = True,
                foil_seed: int = 0) -> tuple[list[dict] | None, str]:
    """Runs `scripts/gym_server.py` on the request lines: in a fresh jail, or (`isolate=False`) as a plain subprocess.
    Returns (its reply lines after `ready`, or None when it never became ready; stderr's last line)."""
    folders = _site_folders()
    budget = STARTUP_SECONDS + len(requests) * (2 * timeout + 1.0)  # a score, and for a positive one the foil check
    inside = {folder: f"{JAIL_SITE}/{i}" for i, folder in enumerate(folders)} if isolate else {f: f for f in folders}
    header = {"paths": list(inside.values()), "timeout": timeout, "strict": strict, "seed": foil_seed}
    stdin = "".join(line + "\n" for line in [json.dumps(header), *requests]).encode()
    args = ["-c", SERVER.read_text()]
    max_stdout = 4096 + 512 * len(requests)  # a verdict line is under 400 bytes
    try:
        if isolate:
            done = jail.run_in_jail(args, stdin, budget, tmp_bytes=16 << 20, memory_bytes=JAIL_MEMORY, max_processes=4,
                               max_stdout=max_stdout, read_only=inside)
        else:
            proc = subprocess.Popen([sys.executable, "-I", "-S", *args], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    env=without_secrets())  # the scorer may eval an answer: no secret in its reach
            done = jail.collect(proc, stdin, budget, max_stdout)
    except (OSError, subprocess.SubprocessError) as e:  # could not start (no memory, no processes): infrastructure
        return None, f"{type(e).__name__}: {e}"
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    why = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [done.stopped or f"exit code {done.code}"])[-1]
    if not lines or lines[0] != '{"ready": true}':
        return None, why
    replies = []
    for line in lines[1:]:
        try:
            reply = json.loads(line)
        except ValueError:
            break
        replies.append(reply if isinstance(reply, dict) else {})
    return replies, why


def _verdict(reply: dict | None) -> float | None:
    """A reply line as a score: the scorer's score clamped to [0, 1]; 0.0 for what the answer caused; None when the
    row could not be judged."""
    if reply is None:  # the scorer process stopped answering after `ready`: the answer in flight caused it
        log_once(logger, "stopped", "The reasoning-gym scorer stopped mid-batch; the answer it was scoring scores 0 "
                 "and the rest go to a fresh jail (logged once).")
        return 0.0
    if "unjudgeable" in reply:
        log_once(logger, f"unjudgeable:{reply['unjudgeable']}",
                 "A reasoning-gym row cannot be judged (%s); such rows are skipped.", str(reply["unjudgeable"])[:300])
        return None
    if reply.get("degenerate") == "copied":
        log_once(logger, "copied", "A reasoning-gym answer was copied from its question's premises (one premise gives "
                 "it, or it restates several); it scores 0 (logged once).")
        return 0.0
    if "degenerate" in reply:
        log_once(logger, "degenerate", "A reasoning-gym answer was not specific to its question (it scored as much on "
                 "another question of its generator, or earned there more than its own gold); it scores 0 (logged once).")
        return 0.0
    if "error" in reply:
        kind = str(reply["error"])[:60]
        log_once(logger, f"error:{kind}", "A reasoning-gym answer made its scorer fail (%s); it scores 0 "
                 "(logged once).", "time limit" if kind == "time" else kind)
        return 0.0
    score = reply.get("score")
    if not isinstance(score, (int, float)) or score != score:
        return 0.0
    return min(1.0, max(0.0, float(score)))


def _strict(score: float | None, strict: bool) -> float | None:
    """Under strict scoring, partial credit is wrong: full marks pay 1.0, anything less 0."""
    if score is None or not strict:
        return score
    return 1.0 if score >= FULL_MARKS else 0.0


FULL_MARKS = 1.0 - 1e-9


def _jail_problem(allow_unsandboxed: bool) -> str | None:
    """None when answers can be scored (a jail runs here, or the opt-in), else why not and what to do."""
    if allow_unsandboxed:
        return None
    reason = jail.probe()
    if reason is None:
        return None
    return (f"reasoning-gym answers cannot be scored in a jail ({reason}); some scorers evaluate answers as code. "
            f"Fix: {jail.JAIL_INSTALL_HINT}; or set allow_unsandboxed_code_execution: true to "
            "score them without isolation.")


class GymScoringFields(Protocol):
    """The recipe fields `check_gym_scoring` reads (GRPO's script arguments)."""

    reward_funcs: list[str]
    dataset_name: str | None
    allow_unsandboxed_code_execution: bool


class CallbackFields(Protocol):
    """The training field `check_gym_scoring` reads (r1kit's GRPOConfig)."""

    callbacks: list[str]


def check_gym_scoring(script_args: GymScoringFields, training_args: CallbackFields) -> None:
    """Before anything loads: a run that scores reasoning-gym answers (the `reasoning_gym` reward, or held-out
    accuracy on a reasoning-gym source) needs a jail here, or the explicit `allow_unsandboxed_code_execution`.
    Raises ConfigError saying what to do."""
    scores_answers = "reasoning_gym" in script_args.reward_funcs or (
        is_gym_source(script_args.dataset_name) and "heldout_accuracy" in training_args.callbacks)
    if not scores_answers or importlib.util.find_spec("reasoning_gym") is None:
        return  # nothing to score, or the missing extra, which the data check names
    problem = _jail_problem(script_args.allow_unsandboxed_code_execution)
    if problem:
        raise ConfigError(problem)


def score_completions(
    completions: list[str], records: list[Any], timeout: float = DEFAULT_TIMEOUT, mode: AnswerMode = "last_number",
    allow_unsandboxed: bool = False, strict: bool = True, foil_seed: int = 0,
) -> list[float | None]:
    """Each completion's score (0.0 to 1.0) by its row's reasoning-gym generator, or None when it cannot be judged.

    Args:
        completions (`list[str]`): the model's outputs.
        records (`list`): the rows' `reasoning_gym` columns (JSON text or dicts: generator, options, entry).
        timeout (`float`, defaults to `DEFAULT_TIMEOUT`, 5 s): seconds one answer's scorer may take before the answer
            scores 0.
        mode (`str`, defaults to `"last_number"`): how the answer is read without an `<answer>` block (`extract_answer`).
        allow_unsandboxed (`bool`, defaults to `False`): score without the jail where none can run.
        strict (`bool`, defaults to `True`): full marks or 0, copied answers 0 (see the module's docstring).
        foil_seed (`int`, defaults to `0`): the seed of the generator's questions the foils are drawn from (the
            independent judge draws its twins from another).

    Returns:
        `list[float | None]`: one score per completion.

    Example:
        >>> record = {"generator": "chain_sum", "options": {}, "entry": {"question": "1 + 2 =", "answer": "3", "metadata": {}}}
        >>> score_completions(["The answer is 3.", "4"], [record, record])
        [1.0, 0.0]
    """
    scores: list[float | None] = [None] * len(completions)
    requests, places = [], []
    for i, (completion, record) in enumerate(zip(completions, records)):
        parsed = parse_record(record)
        if parsed is None:
            continue
        gold = str(parsed["entry"]["answer"])
        answer = extract_answer(completion, gold, mode)
        if has_foreign_digits(answer) and not has_foreign_digits(gold):
            scores[i] = 0.0  # look-alike digits: the scorer would read them as the gold's
            continue
        if strict and is_copy(answer, str(parsed["entry"].get("question", "")), parsed["entry"].get("answer")):
            scores[i] = 0.0  # built from the question without solving it
            log_once(logger, "copied-text", "A reasoning-gym answer was copied from its question (a premise, a quoted "
                     "statement, its numbers or last sentence); it scores 0 (logged once).")
            continue
        request = _request(parsed, answer)
        if request is not None:
            requests.append(request)
            places.append(i)
    if not requests:
        return scores
    if importlib.util.find_spec("reasoning_gym") is None:
        log_once(logger, "import", "reasoning-gym is not installed: reasoning_gym rewards are None (skipped).")
        return scores
    problem = _jail_problem(allow_unsandboxed)
    if problem:
        log_once(logger, "jail", "%s Rows skipped.", problem)
        return scores
    isolate = not allow_unsandboxed or jail.probe() is None  # with the opt-in, still the jail wherever one runs
    if not isolate:
        log_once(logger, "unjailed", "No jail here: reasoning-gym answers are scored WITHOUT isolation "
                 "(allow_unsandboxed_code_execution: true).")
    done, starts = 0, 0  # answers with a verdict; scorer processes started for this batch
    while done < len(requests):
        if starts > RESTARTS:
            log_once(logger, "restarts", "The reasoning-gym scorer stopped %d times in one batch; its last %d answers "
                     "are skipped (logged once).", starts, len(requests) - done)
            break
        starts += 1
        replies, why = _run_server(requests[done:], timeout, isolate, strict, foil_seed)
        if replies is None:  # never ready: infrastructure, not the answers
            log_once(logger, "start", "The reasoning-gym scorer could not start (%s); rows skipped (logged once).",
                     why)
            break
        for reply in replies[: len(requests) - done]:
            scores[places[done]] = _strict(_verdict(reply), strict)
            done += 1
        if done < len(requests):  # it stopped mid-batch: the answer it was scoring caused that
            scores[places[done]] = _verdict(None)
            done += 1
    return scores


def make_reasoning_gym_reward(timeout: float = DEFAULT_TIMEOUT, answer_mode: AnswerMode = "last_number",
                              allow_unsandboxed: bool = False, strict: bool = True) -> Callable:
    """Builds the `reasoning_gym` reward.

    Args:
        timeout (`float`, defaults to `DEFAULT_TIMEOUT`, 5 s): seconds one answer's scorer may take before the answer
            scores 0 (recipe: `reward_timeout`).
        answer_mode (`str`, defaults to `"last_number"`): how an answer is read without an `<answer>` block:
            `last_number` or `reply` (`extract_answer`; recipe: `reasoning_gym_answer`).
        allow_unsandboxed (`bool`, defaults to `False`): where no jail can run, score without one (recipe:
            `allow_unsandboxed_code_execution`).
        strict (`bool`, defaults to `True`): full marks or nothing, copied answers nothing (recipe:
            `reasoning_gym_strict`; `false` keeps the scorers' partial credit).

    Returns:
        `Callable`: `reasoning_gym_reward(completions, reasoning_gym, log_metric=None, **kwargs)`.
    """

    def reasoning_gym_reward(completions, reasoning_gym=None, log_metric=None, **kwargs) -> list[float | None]:
        """Each completion's score by its reasoning-gym generator's `score_answer` (see `extract_answer`).

        Args:
            completions (`list[str]` or `list[list[dict]]`): completions, plain or conversational.
            reasoning_gym (`list[str]`): the rows' `reasoning_gym` records (JSON: generator, options, entry).
            log_metric (`Callable`, *optional*): TRL's metric logger; receives the count of unjudgeable rows.

        Returns:
            `list[float | None]`: 0.0 to 1.0 per completion; None for a row that cannot be judged (skipped).

        Example:
            >>> record = '{"generator": "chain_sum", "options": {}, "entry": {"question": "4 - 1 =", "answer": "3"}}'
            >>> reasoning_gym_reward(["It is 3.", "It is 4."], reasoning_gym=[record, record])
            [1.0, 0.0]
        """
        records = per_sample(reasoning_gym, len(completions))
        scores = score_completions(texts(completions), records, timeout, answer_mode, allow_unsandboxed, strict)
        if log_metric is not None:
            log_metric("rewards/reasoning_gym/unjudgeable", float(sum(s is None for s in scores)))
        return scores

    return reasoning_gym_reward
