"""Exploit probes: before training, what each configured reward pays for replies that deserve nothing, and whether
the gold answer earns full marks (r1kit probe-rewards, the GRPO dry run, the start of a run).

In GRPO the policy climbs whatever the reward pays for, so a reward that can be fooled is found by training, late
and expensively. The probes look for that first, on a few of the dataset's own rows (`SAMPLE_ROWS`, spread over the
training split), by calling each reward the way TRL does (conversational completions when the prompts are, every
row column as a keyword list, `completion_ids` one per character):

    generic probes     empty, prompt_echo, format_only, hedge, outside, huge, lookalike
    copy probes        premise, premises, first_quote, numbers, last_sentence: answers built from the question
                       without solving it (`r1kit.judging.copies`): each statement, their conjunction, the first quoted
                       statement, the numbers in order, the last sentence
    code probes        exit0, print_expected, always_equal, infinite_loop, read_tests   (code, binary_code)
    the other way      gold: the row's gold answer in the expected format must earn full marks

Each exploit probe has a bound, the most it deserves from that kind of reward (`bound`); a probe scoring above it on
any sampled row stops the run with a `ConfigError` naming the reward, the probe and the key that accepts it
(`probe_acknowledged: ["reward:probe"]`), or `probe_rewards: false` to skip the probes. A gold below full marks is a
verifier false negative or a row the reward cannot judge: reported in the table, never a stop. A reward loaded by
import path gets the generic probes, with the bounds of a correctness reward (0 for every probe).

Bounded: every probe reply is at most `HUGE_CHARS` characters, one reward call per reward (so a jail starts once),
code probes run on copies of the rows with at most `CODE_TESTS` tests of `CODE_TIME_LIMIT` seconds each.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from r1kit.config.recipe import DEFAULT_RECIPE, GRPO_TYPES, run_recipe_command
from r1kit.console import add_pass_through_command, run_module
from r1kit.errors import ConfigError
from r1kit.integrity.probe_replies import (
    CODE,
    COPY,
    GENERIC,
    GOLD,
    cf_probe_row,
    cf_tests,
    code_reply,
    code_tests,
    copy_replies,
    generic_reply,
    row_gold,
)
from r1kit.loading import data
from r1kit.rewards import get_reward_funcs
from r1kit.rewards.competitive import cf_score
from r1kit.rewards.gym import check_gym_scoring
from r1kit.rewards.text import probing
from r1kit.sandbox import jail

logger = logging.getLogger(__name__)

SAMPLE_ROWS = 4  # rows probed per reward: enough for a hedge over several golds, few enough to take seconds
TOLERANCE = 1e-9

PROBES = GENERIC + COPY + CODE
NEEDS_GOLD = frozenset({"hedge", "outside", "lookalike"})
# replies in the <think>/<answer> shape: the copies are written as answers too
SHAPED = frozenset({"format_only", "hedge", "outside", "lookalike", *COPY})

# What each built-in reward promises, which sets its bounds (`bound`) and its full marks (`full_marks`).
KINDS = {
    "accuracy": "answer", "reasoning_gym": "answer", "cosine": "cosine", "length": "length",
    "format": "shape", "tag_count": "shape", "code_format": "shape", "reasoning_steps": "steps",
    "repetition_penalty": "penalty", "soft_overlong_punishment": "penalty", "code": "code", "binary_code": "code",
    "ioi_code": "unprobed", "cf_code": "cf_code",
}
CODE_KINDS = ("code", "cf_code")  # the kinds the code probes run on


@dataclass(frozen=True)
class ProbeResult:
    """One line of the table.

    Args:
        reward (`str`): the name in `reward_funcs`.
        probe (`str`): a name of `PROBES`, or `gold`.
        bound (`float` or `None`): for a probe, the most it may earn; for `gold`, full marks (the least it must
            earn); None when the line was skipped.
        got (`float` or `None`): for a probe, the most it earned on a sampled row; for `gold`, the least; None when
            no row was judged.
        verdict (`str`): `ok`, `ABOVE BOUND`, `acknowledged`, `raised ...`, `not judged`, `skipped: ...`, or for
            `gold` what fell short.
        stops (`bool`): whether this line stops the run.
    """

    reward: str
    probe: str
    bound: float | None
    got: float | None
    verdict: str
    stops: bool = False


# --------------------------------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------------------------------
def kind_of(name: str) -> str:
    """A reward's kind: a registered reward's (`KINDS`); a reward loaded by import path is a correctness reward."""
    return KINDS.get(name, "answer")


def bound(kind: str, probe: str, script_args: Any) -> float:
    """The most `probe` deserves from a reward of `kind`.

    - answer (accuracy, reasoning_gym, any import path): 0. No probe holds the right answer where it is read.
    - cosine: `cosine_max_value_wrong`, the most a wrong answer of any length earns.
    - length: 0. A wrong answer earns min(0, lambda) in its group.
    - shape (format, tag_count, code_format): 1 for the probes written in the <think>/<answer> shape, 0 for the rest.
      A format reward promises the shape, not the answer: paying a well-formed wrong reply is its job (accuracy is
      what pays the answer), so the format-only probe earning 1.0 is no exploit. What it must not pay is a reply
      without the shape.
    - steps (reasoning_steps): 0. No probe writes a step.
    - penalty (repetition_penalty, soft_overlong_punishment): 0. A penalty never pays.
    - code (code, binary_code): 0, except print_expected: 0.5. A program printing one test's expected output passes
      every test sharing that output; a row where it passes more than half cannot tell a program from a memorised
      answer (binary_code pays it only when every test shares the output).
    - cf_code: 0, except print_expected: what half the tests passed earns in `code_eval_scoring_mode` (pass_fail 0,
      partial 0.5, weighted_sum 0.05), for the same reason.
    """
    if kind == "cf_code":
        return cf_score(1, 2, script_args.code_eval_scoring_mode) if probe == "print_expected" else 0.0
    if kind == "cosine":
        return float(script_args.cosine_max_value_wrong)
    if kind == "shape":
        return 1.0 if probe in SHAPED else 0.0
    if kind == "code" and probe == "print_expected":
        return 0.5
    return 0.0


def full_marks(name: str, kind: str, script_args: Any) -> float | None:
    """The least a gold reply must earn, or None where a gold is not checked: a penalty, reasoning_steps and
    code_format (a gold answer holds no steps or code), code rewards (rows carry tests, not reference programs) and
    length (relative to its group)."""
    if kind == "answer" or name in ("format", "tag_count"):
        return 1.0  # an import-path reward: 1.0 is the usual scale, assumed
    if kind == "cosine":
        return float(script_args.cosine_min_value_correct)
    return None


# --------------------------------------------------------------------------------------------------------------------
# Calling a reward as TRL does
# --------------------------------------------------------------------------------------------------------------------
def call_reward(func: Callable, rows: list[dict], replies: list[str], conversational: bool) -> list:
    """`func`'s scores for `replies`, one per row, called as TRL calls a reward: prompts, completions (chat
    messages when the prompts are), completion ids (one per character: lengths are what rewards read), every other
    column as a keyword list, and the trainer's hooks as no-ops."""
    completions = [[{"role": "assistant", "content": r}] for r in replies] if conversational else list(replies)
    columns = {key: [row.get(key) for row in rows] for key in rows[0] if key not in ("prompt", "completion",
                                                                                   "completion_ids")}
    scores = func(prompts=[row.get("prompt") for row in rows], completions=completions,
                  completion_ids=[[0] * len(r) for r in replies], trainer_state=None,
                  log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, **columns)
    if inspect.isawaitable(scores):
        scores = asyncio.run(scores)  # an `async def` reward, which TRL awaits
    scores = list(scores)
    if len(scores) != len(replies):
        raise ValueError(f"returned {len(scores)} scores for {len(replies)} completions")
    return scores


def _number(score: Any) -> float | None:
    """A score as a float; None (cannot judge) and NaN stay None."""
    if score is None:
        return None
    value = float(score)
    return None if value != value else value


# --------------------------------------------------------------------------------------------------------------------
# Probing
# --------------------------------------------------------------------------------------------------------------------
def sample_rows(split, count: int = SAMPLE_ROWS) -> list[dict]:
    """`count` rows spread evenly over the split (the same rows every time)."""
    n = len(split)
    count = min(count, n)
    return [dict(split[i * n // count]) for i in range(count)]  # distinct: the step n / count is at least 1


def skip_reason(name: str, script_args: Any, training_args: Any) -> str | None:
    """Why a reward is not probed here, or None."""
    kind = kind_of(name)
    if kind == "unprobed":
        return ("its tests come from the Hub or a tests folder, and its programs are C++ built with each problem's "
                "graders; the code probes cover code, binary_code and cf_code")
    if kind in CODE_KINDS and script_args.code_provider != "local":
        return f"code_provider is {script_args.code_provider}: the probes do not send programs to a remote sandbox"
    if kind in CODE_KINDS:
        problem = jail.probe()  # the probes' programs loop, exit and snoop: only ever in a jail
        return f"the code probes run only in a jail, and none runs here ({problem})" if problem else None
    if name == "reasoning_gym":
        solo = copy.copy(script_args)
        solo.reward_funcs = [name]
        try:
            check_gym_scoring(solo, training_args)
        except ConfigError as e:
            return f"no sandbox here ({e})"
    return None


def probe_replies(name: str, rows: list[dict], script_args: Any) -> dict[str, list[tuple[int, str]]]:
    """Each probe's replies for `name`, as (row index, reply); a probe that fits no row is left out."""
    golds = [row_gold(row, name) for row in rows]
    gold_texts = [g[0] for g in golds if g]
    probes = list(GENERIC) + ([GOLD] if full_marks(name, kind_of(name), script_args) is not None else [])
    replies: dict[str, list[tuple[int, str]]] = {}
    for probe in probes:
        for i, row in enumerate(rows):
            reply = generic_reply(probe, row, golds[i], gold_texts)
            if reply is not None:
                replies.setdefault(probe, []).append((i, reply))
    for probe in COPY:
        for i, row in enumerate(rows):
            replies.setdefault(probe, []).extend((i, reply) for reply in copy_replies(probe, row, golds[i]))
        if not replies[probe]:
            del replies[probe]
    if kind_of(name) in CODE_KINDS:
        tests_of = cf_tests if kind_of(name) == "cf_code" else code_tests
        for i, row in enumerate(rows):
            info = tests_of(row)
            if info is None:
                continue
            for probe in CODE:
                reply = code_reply(probe, info, script_args.code_language)
                if reply is not None:
                    replies.setdefault(probe, []).append((i, reply))
    return replies


def _code_rows(rows: list[dict]) -> list[dict]:
    """Rows with their tests cut for the probes (`code_tests`)."""
    out = []
    for row in rows:
        info = code_tests(row)
        out.append({**row, "verification_info": json.dumps(info)} if info is not None else row)
    return out


def score_probes(func: Callable, name: str, rows: list[dict], replies: dict, conversational: bool) -> dict:
    """probe -> its scores (one per reply) or the error the reward raised. One call for every probe (a jail or a
    worker pool starts once); when it raises, one call per probe says which probes raise."""
    if kind_of(name) == "code":
        rows = _code_rows(rows)
    elif kind_of(name) == "cf_code":
        rows = [cf_probe_row(row) for row in rows]
    order = [(probe, i, reply) for probe, items in replies.items() for i, reply in items]
    try:
        flat = call_reward(func, [rows[i] for _, i, _ in order], [r for _, _, r in order], conversational)
    except Exception:  # noqa: BLE001 - a reward that raises on a probe is a finding, reported per probe below
        flat = None
    scores: dict[str, list | str] = {}
    for probe, items in replies.items():
        if flat is not None:
            scores[probe] = [flat[k] for k, (p, _, _) in enumerate(order) if p == probe]
            continue
        try:
            scores[probe] = call_reward(func, [rows[i] for i, _ in items], [r for _, r in items], conversational)
        except Exception as e:  # noqa: BLE001 - it would stop training at the first such reply
            scores[probe] = f"raised {type(e).__name__}: {str(e)[:80]}"
    return scores


def judge(name: str, probe: str, scores: list | str, limit: float, acknowledged: set[str]) -> ProbeResult:
    """The line of an exploit probe: its worst row against its bound."""
    if isinstance(scores, str):
        ok = f"{name}:{probe}" in acknowledged
        return ProbeResult(name, probe, limit, None, scores + (" (acknowledged)" if ok else ""), stops=not ok)
    try:
        judged = [s for s in map(_number, scores) if s is not None]
    except (TypeError, ValueError) as e:
        return ProbeResult(name, probe, limit, None, f"not a number: {e}", stops=f"{name}:{probe}" not in acknowledged)
    if not judged:
        return ProbeResult(name, probe, limit, None, "not judged")
    got = max(judged)
    if got <= limit + TOLERANCE:
        return ProbeResult(name, probe, limit, got, "ok")
    if f"{name}:{probe}" in acknowledged:
        return ProbeResult(name, probe, limit, got, "acknowledged")
    return ProbeResult(name, probe, limit, got, "ABOVE BOUND", stops=True)


def judge_gold(name: str, scores: list | str, full: float, rows: list[int]) -> ProbeResult:
    """The gold line: the least a gold earned, and which rows fell short (reported, never a stop)."""
    if isinstance(scores, str):
        return ProbeResult(name, GOLD, full, None, scores)
    numbers = [_number(s) for s in scores]
    short = [row for row, s in zip(rows, numbers) if s is not None and s < full - TOLERANCE]
    unjudged = [row for row, s in zip(rows, numbers) if s is None]
    judged = [s for s in numbers if s is not None]
    notes = []
    if short:
        notes.append(f"below full marks on sampled rows {short}: a verifier false negative or a row it cannot judge")
    if unjudged:
        notes.append(f"not judged on sampled rows {unjudged}")
    return ProbeResult(name, GOLD, full, min(judged) if judged else None, "; ".join(notes) or "ok")


def probe_reward(func: Callable, name: str, rows: list[dict], script_args: Any, conversational: bool,
                 acknowledged: set[str]) -> list[ProbeResult]:
    """Every probe of one reward, in `PROBES` order, then its gold."""
    kind = kind_of(name)
    replies = probe_replies(name, rows, script_args)
    scores = score_probes(func, name, rows, replies, conversational)
    names = list(GENERIC) + list(COPY) + (list(CODE) if kind in CODE_KINDS else [])
    results = []
    for probe in names:
        limit = bound(kind, probe, script_args)
        if probe not in scores:
            why = ("no gold answer in the sampled rows" if probe in NEEDS_GOLD
                   else "the sampled questions give none" if probe in COPY else "no sampled row fits it")
            results.append(ProbeResult(name, probe, limit, None, f"skipped: {why}"))
        else:
            results.append(judge(name, probe, scores[probe], limit, acknowledged))
    full = full_marks(name, kind, script_args)
    if full is not None:
        if GOLD in scores:
            results.append(judge_gold(name, scores[GOLD], full, [i for i, _ in replies[GOLD]]))
        else:
            results.append(ProbeResult(name, GOLD, full, None, "skipped: no gold answer in the sampled rows"))
    return results


def check_acknowledged(script_args: Any) -> set[str]:
    """The recipe's `probe_acknowledged` entries, each `reward:probe` naming a configured reward and a probe."""
    entries = set(script_args.probe_acknowledged or [])
    for entry in sorted(entries):
        reward, _, probe = str(entry).rpartition(":")
        if reward not in script_args.reward_funcs or probe not in PROBES:
            raise ConfigError(
                f"probe_acknowledged: {entry!r} is not reward:probe with a reward of reward_funcs "
                f"({', '.join(script_args.reward_funcs)}) and a probe of {', '.join(PROBES)}"
            )
    return entries


def probe_rewards(script_args: Any, training_args: Any, train_split) -> list[ProbeResult]:
    """Probes every configured reward on a sample of `train_split` (conversational prompts when the pipeline made
    them so). Each reward is built with `get_reward_funcs`, as the trainer builds it."""
    acknowledged = check_acknowledged(script_args)
    rows = sample_rows(train_split)
    if not rows:
        return []
    conversational = isinstance(rows[0].get("prompt"), list)
    results = []
    for name in script_args.reward_funcs:
        reason = skip_reason(name, script_args, training_args)
        if reason is not None:
            results.append(ProbeResult(name, "*", None, None, f"skipped: {reason}"))
            continue
        solo = copy.copy(script_args)
        solo.reward_funcs = [name]
        (func,) = get_reward_funcs(solo, training_args)
        with probing():  # what the reward warns of once per run is the probe reply's, not training's
            results += probe_reward(func, name, rows, script_args, conversational, acknowledged)
    return results


# --------------------------------------------------------------------------------------------------------------------
# The table, and the stop
# --------------------------------------------------------------------------------------------------------------------
def _cell(value: float | None, probe: str) -> str:
    if value is None:
        return "-"
    return f"{'>=' if probe == GOLD else '<='} {value:g}"


def table(results: list[ProbeResult]) -> str:
    """One line per (reward, probe): reward, probe, bound (`<=` the most a probe may earn, `>=` full marks for the
    gold), got (a probe's best row, the gold's worst), verdict."""
    rows = [("reward", "probe", "bound", "got", "verdict")]
    rows += [(r.reward, r.probe, _cell(r.bound, r.probe), "-" if r.got is None else f"{r.got:.3g}", r.verdict)
             for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows)


def raise_on_failures(results: list[ProbeResult]) -> None:
    """A `ConfigError` naming every probe that scored above its bound (or raised) and was not acknowledged."""
    failed = [r for r in results if r.stops]
    if not failed:
        return
    what = "; ".join(f"{r.reward} pays {r.got:g} for probe {r.probe} (bound {r.bound:g})" if r.got is not None
                     else f"{r.reward} {r.verdict} on probe {r.probe}" for r in failed)
    keys = ", ".join(repr(f"{r.reward}:{r.probe}") for r in failed)
    raise ConfigError(
        f"reward probes: {what}. A policy can learn that instead of the task: fix the reward, or accept it with "
        f"probe_acknowledged: [{keys}] (probe_rewards: false skips the probes; r1kit probe-rewards --config RECIPE "
        "prints the table)"
    )


def check_rewards(script_args: Any, training_args: Any, train_split,
                  show: Callable[[str], None] | None = None) -> list[ProbeResult]:
    """Probes the rewards (`probe_rewards`), shows the table (`show`), then raises for the probes that stop the run
    (`raise_on_failures`); returns the results."""
    results = probe_rewards(script_args, training_args, train_split)
    if show is not None:
        show(table(results))
    raise_on_failures(results)
    return results


def summary(results: list[ProbeResult]) -> str:
    """One line for the start of a run: what the probes checked and found."""
    rewards = len(dict.fromkeys(r.reward for r in results))
    acknowledged = sum(r.verdict == "acknowledged" for r in results)
    short = [r.reward for r in results if r.probe == GOLD and r.verdict != "ok"]
    skipped = sum(r.verdict.startswith("skipped") for r in results)
    return (f"reward probes: {len(results) - skipped} checks on {rewards} reward(s), none above its bound"
            + (f" ({acknowledged} acknowledged)" if acknowledged else "")
            + (f"; {skipped} skipped" if skipped else "")
            + (f"; the gold falls short for {', '.join(short)} (r1kit probe-rewards prints the table)" if short else ""))


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit probe-rewards [--config RECIPE] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
HELP = __doc__.strip() + """

usage: r1kit probe-rewards [--config RECIPE] [--key value ...]   (no --config: the embedded demo recipe)
Loads the recipe's data (no model), probes its rewards and prints the table; exit 2 when a probe is above its bound
and the recipe does not acknowledge it."""


def add_parser(subparsers):
    """Adds `probe-rewards` to the `r1kit` command."""
    return add_pass_through_command(subparsers, "probe-rewards", "probe a recipe's rewards for exploits", run)


def run(args) -> int:
    """`r1kit probe-rewards`: the recipe parsed strictly (as `r1kit grpo` parses it), its data loaded, the table."""
    return run_recipe_command(args.argv, HELP, GRPO_TYPES, probe_dry_run, probe_command, default_config=DEFAULT_RECIPE)


def load_train_split(script_args: Any, training_args: Any):
    """The training split as the trainer sees it: columns checked, prompts made conversations."""
    dataset = data.get_dataset(script_args)
    split = script_args.dataset_train_split
    if split not in dataset:
        raise ConfigError(f"dataset_train_split '{split}' not found; splits: {', '.join(dataset)}")
    data.check_reward_columns(script_args.reward_funcs, dataset[split].column_names, split)
    return data.to_conversations(dataset, script_args.dataset_prompt_column, training_args.system_prompt)[split]


def probe_command(script_args: Any, training_args: Any, model_args: Any) -> int:
    """Prints the table, then stops (exit 2) when a probe is above its bound and not acknowledged."""
    check_rewards(script_args, training_args, load_train_split(script_args, training_args), show=print)
    return 0


def probe_dry_run(script_args: Any, training_args: Any, model_args: Any) -> str:
    probe_command(script_args, training_args, model_args)
    return "(probe-rewards loads no model: --dry-run changes nothing)"


if __name__ == "__main__":
    sys.exit(run_module("probe-rewards", add_parser))
