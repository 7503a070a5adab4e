"""Which training pass a run uses, chosen by measurement on the device it runs on.

Every candidate pass gives the same values and gradients (`r1kit.training.trainpass`, `r1kit.training.packing`); which one is fastest
depends on the device and the batch. On a few CPU cores a token is expensive and a forward call cheap, so length
buckets and a shared prompt pay; on a GPU at small sizes a call and a host sync cost more than the tokens they save,
and TRL's dense pass wins. No constant tuned on one device decides for another: for each shape class of chunk (with
or without gradients, rows, prompt and completion widths on a factor-sqrt(2) scale) the chooser runs each candidate on
real micro-batches, `RUNS` times each, interleaved, and keeps the fastest by the least of its runs: a first run's
one-time costs (allocations, a kernel's compilation) and a busy machine only ever make a run slower, so the least is
the pass's own cost. Dense is kept unless another is faster by `MARGIN`.

Measuring is paid in real work (each timed run's result is the step's), but a run on a slower pass costs its
difference. So it is kept short: the candidates that compute the fewest tokens go first (`MEASURE_ORDER`); once each
has run once, a candidate more than `CLEARLY_SLOWER` times the fastest's time is not run again (unless its one run
carried one-time costs: the chooser's first timed run, FlexAttention's first, which compiles); a loss run whose forward
alone took that long is cut before its backward (`cut_after`); and a new class next to a
decided one (one step of widths apart) whose winner led by `NEIGHBOUR_LEAD` takes that decision without measuring.
A class is measured again when the share of real tokens in its chunks
(a moving average) drifts by more than `DRIFT` from what it was when measured (the passes that skip padding read it
from the host copy they make anyway; dense makes none), and after `RECHECK_AFTER` uses.

The chooser only counts; the trainer does the timing (`clock`, with the device synchronised around a timed run only,
so a decided class costs no host sync), which the tests replace with an injected clock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from r1kit.training.packing import MAX_DENSE_MASK_TOKENS, build_layout, flex_available, score_layout
from r1kit.training.trainpass import PassPlan, call_copy_tokens, has_active_dropout, plan_for, score_chunk

logger = logging.getLogger(__name__)

RUNS = 2
CLEARLY_SLOWER = 2.0  # after one run each, a candidate this many times the fastest's time is not run again
NEIGHBOUR_LEAD = 1.25  # a decided class whose winner led every other by this factor decides its neighbours too
MARGIN = 0.03  # another pass must beat dense by this much to be taken: within noise, TRL's own pass stays
MEMORY_SLACK = 1.02  # nor may it keep more than this times dense's activation memory for backward
RECHECK_AFTER = 500
DRIFT = 1.25  # a class whose chunks' real-token share moves by this factor is measured again
SMOOTHING = 0.1  # the weight of each new chunk in that share's moving average

DENSE, BUCKETED, PACKED, PACKED_FLEX = "dense", "bucketed", "packed", "packed_flex"
PASS_RECORD = "training_pass.json"
PASS_STATE = "r1kit_training_pass.json"  # in each checkpoint: the choosers' state, so a resume chooses alike
# Model types whose forward hands a FlexAttention block mask to the attention untouched (GPT-2 reshapes its mask)
FLEX_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DESCRIPTIONS = {
    DENSE: "TRL's dense pass",
    BUCKETED: "length buckets (each distinct prompt once through a key/value cache)",
    PACKED: "one packed row, no padding, each distinct prompt once (SDPA mask)",
    PACKED_FLEX: "one packed row, no padding, each distinct prompt once (FlexAttention block mask)",
}


# The order of a class's first runs: the fewest tokens computed first (no padding and each prompt once, then no padding)
MEASURE_ORDER = (PACKED, PACKED_FLEX, BUCKETED, DENSE)
COMPILES = frozenset({PACKED_FLEX})  # a first run in each class compiles kernels: never judged on it alone

ANY_WIDTH = -1  # a class of several ranks: the widths differ by rank, the chunk sequence does not


def shape_class(grad: bool, rows: int, prompt_width: int | None, completion_width: int | None) -> tuple:
    """The class a chunk's timings stand for: read from the tensors' shapes alone (no host sync). Widths of None
    (several ranks, each padding its own batch) make one class of every width."""
    def scale(n: int | None) -> int:
        return ANY_WIDTH if n is None else round(2 * math.log2(max(1, n)))

    return (bool(grad), rows, scale(prompt_width), scale(completion_width))


def describe(key: tuple) -> str:
    grad, rows, prompt, completion = key
    kind = "loss pass" if grad else "no-gradient pass"
    if prompt == ANY_WIDTH:
        return f"{rows} rows, every width (agreed by all ranks), {kind}"
    return f"{rows} rows, prompt ~{2 ** (prompt / 2):.0f} and completion ~{2 ** (completion / 2):.0f} columns, {kind}"


@dataclass
class Calibration:
    """One shape class's measurements: runs per candidate, timed seconds per candidate, the decision."""

    runs: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    choice: str | None = None
    uses: int = 0
    shares: list[float] = field(default_factory=list)  # real-token shares of the chunks it was measured on
    recent: float | None = None  # their moving average since
    saved: dict[str, int] = field(default_factory=dict)  # per candidate, the least bytes kept for backward
    carried: list[str] = field(default_factory=list)  # candidates whose first run here carried one-time costs
    dropped: list[str] = field(default_factory=list)  # clearly slower after one run each: not run again
    pruned: bool = False  # the clearly slower were dropped (once, when each candidate had run once)
    lead: float = 1.0  # how much faster the choice was than the next candidate (decides neighbours when large)
    adopted: tuple | None = None  # the neighbouring class whose decision this one took without measuring


class PassChooser:
    """Picks a pass per shape class from `candidates` (dense among them, unless one pass alone was asked for) by the
    timings it is given.

    `pick(key)` returns `(pass, timed)`: while the class is being measured, the next candidate in an interleaved
    order and True (time this run); once decided, the choice and False. The caller times a timed run and reports it
    with `record(key, pass, seconds)`. `exclude(pass, why)` drops a candidate (one that cannot run here), said once.

    With `agree` (several ranks), one decision for all: `agree(values)` returns each value's maximum over the ranks
    (a collective), every rank picks in the same sequence (the caller's classes must not depend on the rank), a class
    is decided at a `pick` (the same call on every rank, never inside a timing that one rank alone may end early) from
    the slowest rank's timings, and no class is re-measured on a rank's own real-token share."""

    def __init__(self, candidates: list[str], timed_runs: int = RUNS, margin: float = MARGIN,
                 recheck_after: int = RECHECK_AFTER, log: bool = True,
                 agree: Callable[[list[float]], list[float]] | None = None):
        self.candidates = list(dict.fromkeys(candidates))
        self.timed_runs, self.margin, self.recheck_after = timed_runs, margin, recheck_after
        self.classes: dict[tuple, Calibration] = {}
        self.log = log
        self.agree = agree
        self.notes: list[str] = []
        self.decided = 0  # classes decided so far (the runner writes its record when this grows)
        self.timed = 0  # timed runs recorded so far (the first carries the process's one-time costs)

    @property
    def deciding(self) -> bool:
        return len(self.candidates) > 1

    def exclude(self, candidate: str, why: str) -> None:
        if candidate in self.candidates and candidate != DENSE:
            self.candidates.remove(candidate)
            self.notes.append(f"{candidate}: off ({why})")
            logger.info("training pass: %s is not a candidate any more (%s)", candidate, why)
            for calibration in self.classes.values():
                if calibration.choice == candidate:
                    calibration.choice = None  # measured again without it
                calibration.runs.pop(candidate, None)
                calibration.seconds.pop(candidate, None)

    def pick(self, key: tuple) -> tuple[str, bool]:
        if not self.deciding:
            return self.candidates[0], False
        calibration = self.classes.get(key) or self._adopt(key) or self.classes.setdefault(key, Calibration())
        if calibration.choice is not None:
            calibration.uses += 1
            if calibration.uses <= self.recheck_after:
                return calibration.choice, False
            self.classes[key] = calibration = Calibration()  # measured again: lengths may have drifted
        pending = self._pending(calibration, at_pick=True)
        if not pending:  # measured already (or the rest dropped, or a candidate excluded since): decide now
            self._decide(key, calibration)
            return calibration.choice, False
        candidate = min(pending, key=lambda c: (calibration.runs.get(c, 0), self._order(c)))
        calibration.runs[candidate] = calibration.runs.get(candidate, 0) + 1
        return candidate, True

    def _order(self, candidate: str) -> tuple[int, int]:
        known = MEASURE_ORDER.index(candidate) if candidate in MEASURE_ORDER else len(MEASURE_ORDER)
        return known, self.candidates.index(candidate)

    def _pending(self, calibration: Calibration, at_pick: bool) -> list[str]:
        """The candidates still to be timed in a class (a timing can be discarded, so timings are counted, not runs).
        Once each has one, the clearly slower are dropped, at a pick (with several ranks, on the slowest rank's
        times, agreed there: the same call on every rank)."""
        counts = {c: len(calibration.seconds.get(c, [])) for c in self.candidates}
        if not calibration.pruned and min(counts.values()) >= 1 and (at_pick or self.agree is None):
            calibration.pruned = True
            least = [min(calibration.seconds[c]) for c in self.candidates]
            if self.agree is not None:
                least = self.agree(least)
            fastest = min(least)
            calibration.dropped += [c for c, t in zip(self.candidates, least) if t > CLEARLY_SLOWER * fastest
                                    and c not in calibration.carried and c not in calibration.dropped]
        return [c for c in self.candidates if counts[c] < self.timed_runs and c not in calibration.dropped]

    def _adopt(self, key: tuple) -> Calibration | None:
        """A new class next to a decided one (the same rows and gradients, each width one step apart at most) whose
        choice led every other candidate by `NEIGHBOUR_LEAD`: it takes that choice without measuring."""
        grad, rows, prompt, completion = key
        if prompt == ANY_WIDTH:
            return None
        for other, calibration in self.classes.items():
            if (calibration.choice is not None and calibration.adopted is None and calibration.lead >= NEIGHBOUR_LEAD
                    and other[:2] == (grad, rows) and other[2] != ANY_WIDTH
                    and abs(other[2] - prompt) <= 1 and abs(other[3] - completion) <= 1):
                self.decided += 1
                self.classes[key] = adopted = Calibration(choice=calibration.choice, adopted=other,
                                                          lead=calibration.lead)
                if self.log:
                    logger.info("training pass for %s: %s, as for %s (it led by %.1fx there; not measured again)",
                                describe(key), adopted.choice, describe(other), calibration.lead)
                return adopted
        return None

    def choice(self, key: tuple) -> str | None:
        """The class's decided pass (or a clearly decided neighbour's), or None while it is measured (or never seen)."""
        calibration = self.classes.get(key) or (self._adopt(key) if self.deciding else None)
        return calibration.choice if calibration is not None else None

    def cut_after(self, key: tuple, candidate: str) -> float | None:
        """The seconds past which a timed loss run of `candidate` is clearly slower before its backward: its forward
        alone took `CLEARLY_SLOWER` times the fastest whole run (forward and backward) of another candidate, so the
        runner drops that forward and does the chunk's work by the fastest instead of paying the backward too. None
        for a run that may carry one-time costs, before another candidate has a time, and with several ranks (one rank
        cutting a forward the others finish would call fewer collectives)."""
        calibration = self.classes.get(key)
        if (self.agree is not None or calibration is None or calibration.choice is not None or self.timed == 0
                or (candidate in COMPILES and candidate not in calibration.seconds)):
            return None
        others = [min(t) for c, t in calibration.seconds.items() if c != candidate and c in self.candidates and t]
        finite = [t for t in others if t < math.inf]
        return CLEARLY_SLOWER * min(finite) if finite else None

    def fastest_so_far(self, key: tuple) -> str:
        """The least-timed candidate of a class being measured, keeping no more for backward than dense (or dense)."""
        calibration = self.classes.get(key) or Calibration()
        dense_bytes = calibration.saved.get(DENSE)
        timed = {c: min(t) for c, t in calibration.seconds.items() if t and c in self.candidates
                 and (dense_bytes is None or calibration.saved.get(c, 0) <= dense_bytes * MEMORY_SLACK)}
        return min(timed, key=timed.get) if timed and min(timed.values()) < math.inf else DENSE

    def observe(self, key: tuple, real_share: float) -> bool:
        """A chunk's share of real (unpadded) tokens, from a pass that read it anyway. True when a decided class's
        chunks drifted away from what it was measured on: it is then measured again."""
        calibration = self.classes.get(key)
        if calibration is None or not self.deciding or self.agree is not None:
            return False
        if calibration.choice is None:  # still measuring: the class stands for these chunks
            calibration.shares.append(real_share)
            return False
        reference = sum(calibration.shares) / len(calibration.shares) if calibration.shares else real_share
        # A moving average: micro-batches of one generation batch differ (shuffled rows); a drift is a trend
        recent = reference if calibration.recent is None else calibration.recent
        calibration.recent = recent = (1 - SMOOTHING) * recent + SMOOTHING * real_share
        if 1 / DRIFT <= recent / max(reference, 1e-9) <= DRIFT:
            return False
        self.classes[key] = Calibration(shares=[real_share])
        if self.log:
            logger.info("training pass for %s: real tokens are %.0f%% of the chunks lately, measured at %.0f%%: "
                        "measuring again", describe(key), 100 * recent, 100 * reference)
        return True

    def record(self, key: tuple, candidate: str, seconds: float, saved_bytes: int | None = None,
               cut: bool = False) -> bool:
        """Adds a timed run (and, for a loss pass, the bytes it kept for backward); True when it completes the class's
        measurements (the class is then decided). `cut`: the run was stopped past `cut_after` (its forward alone took
        that long), its seconds a lower bound: the candidate is not run again."""
        calibration = self.classes.get(key)
        if calibration is None or calibration.choice is not None or candidate not in self.candidates:
            return False
        if cut and candidate not in calibration.dropped:
            calibration.dropped.append(candidate)
        if (self.timed == 0 or candidate in COMPILES) and candidate not in calibration.seconds and seconds < math.inf:
            calibration.carried.append(candidate)  # this run carried one-time costs: never dropped on it alone
        self.timed += 1
        calibration.seconds.setdefault(candidate, []).append(seconds)
        if saved_bytes is not None:
            calibration.saved[candidate] = min(saved_bytes, calibration.saved.get(candidate, saved_bytes))
        if self.agree is None and not self._pending(calibration, at_pick=False):
            self._decide(key, calibration)
            return True
        return False  # with several ranks the next `pick` of the class decides, on every rank at once

    def _decide(self, key: tuple, calibration: Calibration) -> None:
        best = {c: min(calibration.seconds[c]) for c in self.candidates}
        if self.agree is not None:  # the slowest rank's times and bytes: every rank takes the same pass
            order = list(self.candidates)
            agreed = self.agree([best[c] for c in order] + [float(calibration.saved.get(c, -1)) for c in order])
            best = dict(zip(order, agreed[:len(order)]))
            calibration.saved = {c: int(b) for c, b in zip(order, agreed[len(order):]) if b >= 0}
        self.decided += 1
        # Never more memory than dense: a pass that keeps more activations for backward is not taken, however fast
        dense_bytes = calibration.saved.get(DENSE)
        lighter = [c for c in best if dense_bytes is None or calibration.saved.get(c, 0) <= dense_bytes * MEMORY_SLACK]
        fastest = min(lighter, key=best.get)
        baseline = best.get(DENSE, math.inf)
        calibration.choice = fastest if best[fastest] < baseline * (1 - self.margin) or math.isinf(baseline) else DENSE
        others = [best[c] for c in best if c != calibration.choice]
        calibration.lead = min(others) / best[calibration.choice] if others and best[calibration.choice] > 0 else 1.0
        if self.log:
            heavier = sorted(set(best) - set(lighter))
            logger.info("training pass for %s: %s (measured: %s%s)", describe(key), calibration.choice,
                        ", ".join(f"{c} {ms(best[c])}" for c in sorted(best, key=best.get)),
                        f"; {', '.join(heavier)} kept more memory than dense" if heavier else "")

    def state_dict(self) -> dict:
        """Everything a resumed run needs to take the passes the uninterrupted one takes (JSON; an unusable run's
        infinite time as null)."""
        def seconds(times: list[float]) -> list[float | None]:
            return [None if math.isinf(t) else t for t in times]

        return {"candidates": list(self.candidates), "notes": list(self.notes),
                "classes": [{"key": list(key), "runs": c.runs, "seconds": {n: seconds(t) for n, t in c.seconds.items()},
                             "choice": c.choice, "uses": c.uses, "shares": c.shares, "recent": c.recent,
                             "saved": c.saved, "carried": c.carried, "dropped": c.dropped, "pruned": c.pruned,
                             "lead": None if math.isinf(c.lead) else c.lead,
                             "adopted": None if c.adopted is None else list(c.adopted)}
                            for key, c in self.classes.items()], "timed": self.timed}

    def load_state_dict(self, state: dict) -> int:
        """The classes a checkpoint's chooser had measured and decided, for the candidates this run has (a class
        decided for a pass this launch cannot take is measured again). Returns the decided classes restored."""
        restored = 0
        for entry in state.get("classes") or []:
            choice = entry.get("choice")
            if choice is not None and choice not in self.candidates:
                continue
            keep = [c for c in self.candidates if c in (entry.get("seconds") or {})]
            calibration = Calibration(
                runs={c: int(n) for c, n in (entry.get("runs") or {}).items() if c in self.candidates},
                seconds={c: [math.inf if t is None else float(t) for t in entry["seconds"][c]] for c in keep},
                choice=choice, uses=int(entry.get("uses") or 0), shares=[float(x) for x in entry.get("shares") or []],
                recent=entry.get("recent"), saved={c: int(b) for c, b in (entry.get("saved") or {}).items()},
                carried=list(entry.get("carried") or []), dropped=list(entry.get("dropped") or []),
                pruned=bool(entry.get("pruned")), lead=math.inf if entry.get("lead", 1.0) is None else entry.get("lead", 1.0),
                adopted=None if entry.get("adopted") is None else tuple(entry["adopted"]))
            self.classes[tuple(entry["key"])] = calibration
            restored += choice is not None
        self.timed = max(self.timed, int(state.get("timed") or 0))
        return restored

    def decisions(self) -> list[dict]:
        """Each decided class: its description, the pass taken and the least measured seconds per candidate."""
        return [{"class": describe(key), "key": list(key), "pass": c.choice,
                 "seconds": {name: None if math.isinf(min(times)) else min(times)
                             for name, times in c.seconds.items() if times},
                 **({"saved_for_backward_bytes": dict(c.saved)} if c.saved else {}),
                 **({"runs": {name: len(times) for name, times in c.seconds.items()}} if c.seconds else {}),
                 **({"as_for": describe(c.adopted)} if c.adopted is not None else {})}
                for key, c in self.classes.items() if c.choice is not None]


def ms(seconds: float) -> str:
    return "unusable" if math.isinf(seconds) else f"{seconds * 1000:.1f} ms"


class PassTimer:
    """Times the choosers' timed runs on the device: `start` synchronises and stamps, `stop` synchronises and reports
    to the chooser the run belongs to. `clock` and `synchronize` are injectable (tests)."""

    def __init__(self, clock=time.perf_counter, synchronize=None):
        self.clock, self.synchronize = clock, synchronize or (lambda: None)
        self.running: tuple[PassChooser, tuple, str, float] | None = None

    def start(self, chooser: PassChooser, key: tuple, candidate: str) -> None:
        self.synchronize()
        self.saved_bytes = None
        self.running = (chooser, key, candidate, self.clock())

    def elapsed(self) -> float:
        """Seconds since the running timing started (the device synchronised: it is being timed anyway)."""
        self.synchronize()
        return self.clock() - self.running[3]

    def stop(self, unusable: bool = False, cut: bool = False) -> bool:
        """Reports the running timing (infinite when `unusable`: the candidate could not take the chunk; a lower bound
        when `cut`: stopped after its forward) and the bytes its forward kept for backward; True when that decided its
        class."""
        if self.running is None:
            return False
        self.synchronize()
        chooser, key, candidate, started = self.running
        self.running = None
        return chooser.record(key, candidate, math.inf if unusable else self.clock() - started, self.saved_bytes,
                              cut=cut)

    def discard(self) -> None:
        self.running = None


def candidates_for(bare, plan, trim: bool, share: bool, requested: str, device_type: str,
                   collective_forward: str | None, training: bool) -> tuple[list[str], bool, list[str]]:
    """(the passes this model state may take, whether the packed pass shares prompts, notes on what stands down).
    `plan` is the bucketed pass's (`r1kit.training.trainpass.plan_for`); `requested` the recipe's `training_pass`;
    `collective_forward` says why every forward call is a collective of all ranks (None when it is not)."""
    config = getattr(bare, "config", None)
    notes: list[str] = []
    eligible = [DENSE]
    if plan.trim or plan.share:
        if collective_forward:  # its number of forward calls varies with each rank's lengths: the ranks would wait
            notes.append(f"bucketed: off ({collective_forward}; its number of forward calls varies by rank)")
        else:
            eligible.append(BUCKETED)
    why_not_packed = packed_refusal(config, plan, trim)
    if why_not_packed:
        notes.append(f"packed: off ({why_not_packed})")
    else:
        eligible.append(PACKED)
        attention_dropout = training and float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0
        if (device_type == "cuda" and flex_available() and not attention_dropout
                and getattr(config, "model_type", None) in FLEX_MODEL_TYPES):
            eligible.append(PACKED_FLEX)
    share_packed = share and not has_active_dropout(bare, training)
    if share and not why_not_packed and not share_packed:
        notes.append("packed: each completion keeps its own prompt (dropout is active; set disable_dropout: true)")
    if requested == "auto":
        return eligible, share_packed, notes
    if requested in eligible:
        return [requested], share_packed, notes
    notes.append(f"training_pass: {requested} cannot run for this model here; TRL's dense pass")
    return [DENSE], share_packed, notes


def packed_refusal(config, plan, trim: bool) -> str | None:
    """Why the packed pass cannot be exact for the model with `config`, or None."""
    if not trim:
        return "trim_padding: false"
    if not plan.by_column:
        return f"model type {getattr(config, 'model_type', None)!r} is not known to number positions by column"
    if not plan.trim:  # `plan_for` stood the trimmed passes down (a rotary embedding that depends on length)
        return "this model's positions depend on the forward's length"
    layer_types = getattr(config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types) or (
            getattr(config, "model_type", None) == "mistral" and getattr(config, "sliding_window", None)):
        return "sliding-window attention"
    return None


@dataclass
class PassSet:
    """The passes one model state may take: the bucketed pass's plan, whether the packed pass shares prompts, the
    chooser among them, the bare model's config (the packed call switches its attention function)."""

    plan: PassPlan
    share_packed: bool
    chooser: PassChooser
    config: object
    flex_checked: bool = False
    name: str = ""  # the model's role and state, under which a checkpoint keeps the chooser (`PassRunner.state_dict`)


@contextlib.contextmanager
def counted_saved_bytes(active: bool):
    """Inside, with `active`, the bytes autograd keeps for backward are summed into the yielded list's one entry: a
    pass's activation memory, the same on every device (the allocator's peak is global, and a run's own)."""
    total = [0]
    if not active:
        yield total
        return

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield total


def device_synchronizer(device: torch.device):
    """What waits for the device's queued work: CUDA's synchronize; nothing on CPU (synchronous)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


class PassRunner:
    """The training pass of an `R1Trainer`: per model state, the candidates and their chooser (`PassSet`); per
    chunk, the chosen pass, timed while its shape class is being measured. `dense` is TRL's own pass, handed in by
    the trainer (the only module on TRL's private API). Writes OUTPUT_DIR/training_pass.json as classes are decided.
    """

    def __init__(self, args, accelerator, clock=time.perf_counter):
        self.args, self.accelerator = args, accelerator
        self.timer = PassTimer(clock=clock, synchronize=device_synchronizer(accelerator.device))
        self.sets: dict[tuple, PassSet | None] = {}
        self.said: set[str] = set()
        self.policy = None  # the trained model (set by the trainer): its passes and the reference model's are apart
        self.restored: dict[str, dict] = {}  # a checkpoint's choosers by set name, taken up as each set is planned

    # --- which passes -------------------------------------------------------------------------------------------
    def enabled(self) -> bool:
        args = self.args
        return (args.trim_padding or args.shared_prompt_pass) and args.training_pass != DENSE

    def passes_for(self, model, compute_aux_loss: bool, multimodal: dict) -> PassSet | None:
        """The passes this call may take, or None for TRL's dense pass."""
        if not self.enabled():
            return None
        extra = sorted(key for key, value in multimodal.items() if value is not None)
        if extra or compute_aux_loss:
            self.say_once(f"training pass: batches with {', '.join(extra) or 'an MoE auxiliary loss'} take TRL's "
                          "dense pass (no other pass keeps them exact)")
            return None
        bare = self.bare_model(model)
        # Planned once per model and state (it walks the modules and parameters), not on every micro-batch.
        args = self.args
        key = (id(bare), bare.training, bool(getattr(bare, "is_gradient_checkpointing", False)), args.trim_padding,
               args.shared_prompt_pass, args.training_pass)
        if key not in self.sets:
            role = "policy" if self.policy is None or bare is self.bare_model(self.policy) else "reference"
            self.sets[key] = self.plan(bare, "/".join(map(str, (role, *key[1:]))))
        return self.sets[key]

    def plan(self, bare, name: str = "") -> PassSet | None:
        plan, candidates, share_packed, notes = self.candidates(bare, bare.training, None)
        for note in notes:  # the start-up block says these already (`summary`)
            self.say_once(note, logging.INFO)
        if candidates == [DENSE]:
            return None
        agree = self.agreed_max if self.several_ranks() else None
        chooser = PassChooser(candidates, log=self.accelerator.is_main_process, agree=agree)
        if name in self.restored:
            decided = chooser.load_state_dict(self.restored.pop(name))
            if decided:
                self.say_once(f"training pass: {decided} shape class(es) keep the passes the checkpoint measured "
                              "(a resume computes as the uninterrupted run)", logging.INFO)
        return PassSet(plan=plan, share_packed=share_packed, chooser=chooser, config=bare.config, name=name)

    # --- one decision for every rank, and for every resume ----------------------------------------------------------
    def several_ranks(self) -> bool:
        import torch.distributed as dist

        return self.accelerator.num_processes > 1 and dist.is_available() and dist.is_initialized()

    def agreed_max(self, values: list[float]) -> list[float]:
        """Each value's maximum over the ranks (a collective: every rank calls it at the same point)."""
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.accelerator.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    def state_dict(self) -> dict:
        """Every chooser's measurements and decisions, by set name: saved with each checkpoint, so that a resumed run
        takes the passes the uninterrupted one takes instead of measuring (and perhaps choosing) again."""
        return {"sets": {s.name: s.chooser.state_dict() for s in self.sets.values() if s is not None and s.name}}

    def load_state_dict(self, state: dict) -> None:
        self.restored = dict(state.get("sets") or {})

    def candidates(self, bare, training: bool, gradient_checkpointing: bool | None):
        args = self.args
        plan, notes = plan_for(bare, args.trim_padding, args.shared_prompt_pass, training=training,
                               gradient_checkpointing=gradient_checkpointing)
        plan.copy_tokens = call_copy_tokens(bare, self.autocast_dtype())
        candidates, share_packed, more = candidates_for(
            bare, plan, args.trim_padding, args.shared_prompt_pass, args.training_pass,
            self.accelerator.device.type, self.collective_forward(bare), training)
        return plan, candidates, share_packed, notes + more

    def summary(self, model, gradient_checkpointing: bool) -> str:
        """One line for the start-up block: which passes the run chooses among, and what stands down."""
        if not self.enabled():
            return DESCRIPTIONS[DENSE] + ", exact"
        _, candidates, _, notes = self.candidates(self.bare_model(model), True, gradient_checkpointing)
        if len(candidates) == 1:
            head = DESCRIPTIONS[candidates[0]]
        else:
            head = (f"the fastest of {', '.join(candidates)}, measured on this {self.accelerator.device.type} per "
                    "batch shape in the first steps (training_pass.json)")
        return head + (f" ({'; '.join(notes)})" if notes else "") + ", exact"

    # --- running one chunk --------------------------------------------------------------------------------------
    def score(self, model, passes: PassSet, dense, ids, mask, width: int, compute_entropy: bool):
        """The chunk's `(log-probabilities, entropies)` by the pass its shape class takes (or is measuring)."""
        grad = torch.is_grad_enabled()
        if passes.chooser.agree is None:
            key = shape_class(grad, ids.size(0), ids.size(1) - width, width)
        else:  # each rank pads its own batch: classes by widths would differ by rank, and so would the decisions
            key = shape_class(grad, ids.size(0), None, None)
        decided = passes.chooser.decided
        # Without gradients (the old and reference log-probabilities) a chunk takes its loss-pass twin's pass once
        # that is decided: under bf16 two passes round differently, and the importance ratio of the first update
        # (num_iterations > 1) must be 1, as in TRL
        twin = passes.chooser.choice((True, *key[1:])) if not grad else None
        choice, timed = (twin, False) if twin is not None else passes.chooser.pick(key)
        if passes.chooser.decided != decided:  # decided at this pick (several ranks)
            self.save_record()
        if timed and self.timer.running is not None:
            self.timer.discard()  # two loss passes in one training step: neither timing stands for one pass
            timed = False
        if timed:
            self.timer.start(passes.chooser, key, choice)
        cut_after = passes.chooser.cut_after(key, choice) if timed and grad else None
        with counted_saved_bytes(timed and grad) as saved:
            result = self.run(model, passes, dense, choice, ids, mask, width, compute_entropy, key)
        if timed and grad:
            self.timer.saved_bytes = saved[0]
        if result is not None and cut_after is not None and self.timer.elapsed() > cut_after:
            # Clearly slower by its forward alone: its backward is not paid; the fastest so far does the chunk's work
            del result
            if self.timer.stop(cut=True):
                self.save_record()
            faster = passes.chooser.fastest_so_far(key)
            result = self.run(model, passes, dense, faster, ids, mask, width, compute_entropy)
            timed = False
        if result is None:  # the packed row is too long for a dense mask: this chunk takes the dense pass
            if timed:
                self.timer.stop(unusable=True)
            timed = False
            result = self.run(model, passes, dense, DENSE, ids, mask, width, compute_entropy)
        if timed and not grad:
            self.step_done()
        return result

    def step_done(self) -> None:
        """Ends a running timing (the trainer calls it after each training step's backward)."""
        if self.timer.stop():
            self.save_record()

    def run(self, model, passes: PassSet, dense, choice: str, ids, mask, width: int, compute_entropy: bool,
            key: tuple | None = None):
        if choice == DENSE:
            logps, entropies, _ = dense(model, ids, mask, width, compute_entropy=compute_entropy)
            return logps, entropies
        autocast = self.accelerator.autocast
        if choice == BUCKETED:
            result = score_chunk(model, passes.plan, ids, mask, width, compute_entropy, autocast)
            if key is not None:  # the buckets read the lengths to the host already: the device is idle here
                passes.chooser.observe(key, float(mask.sum()) / mask.numel())
            return result
        flex = choice == PACKED_FLEX
        layout = build_layout(ids, mask, width, passes.share_packed, flex)
        if key is not None:
            passes.chooser.observe(key, layout.real_share)
        if not flex and layout.length > MAX_DENSE_MASK_TOKENS:
            return None
        if flex and not passes.flex_checked:
            passes.flex_checked = True
            if not self.flex_agrees(model, passes, dense, layout, ids, mask, width):
                return self.run(model, passes, dense, DENSE, ids, mask, width, compute_entropy)
        return score_layout(model, passes.config, layout, ids, compute_entropy, autocast)

    def flex_agrees(self, model, passes: PassSet, dense, layout, ids, mask, width: int) -> bool:
        """The flex path's first chunk of the run, checked against the dense pass (no gradients): the compiled kernel
        must give the same log-probabilities, or the run stops using it."""
        with torch.no_grad():
            flex = score_layout(model, passes.config, layout, ids, False, self.accelerator.autocast)[0]
            reference = dense(model, ids, mask, width)[0]
        scored = mask[:, -width:].bool()
        gap = (flex[scored].float() - reference[scored].float()).abs().max().item() if scored.any() else 0.0
        if passes.chooser.agree is not None:  # one rank's failed check turns the pass off on all of them
            gap = passes.chooser.agree([gap])[0]
        tolerance = 1e-3 if self.autocast_dtype() is None else 5e-2
        if gap <= tolerance:
            return True
        passes.chooser.exclude(PACKED_FLEX, f"its first chunk differed from the dense pass by {gap:.2g}")
        self.say_once(f"training pass: FlexAttention's packed pass differed from the dense pass by {gap:.2g} "
                      f"(tolerance {tolerance:g}) on this device; it is off for this run")
        return False

    # --- the machine --------------------------------------------------------------------------------------------
    def sharded(self) -> bool:
        """Whether the weights are sharded across ranks (FSDP, DeepSpeed ZeRO-3): each forward call is a collective."""
        from accelerate.utils import DistributedType

        state = self.accelerator.state
        if state.distributed_type == DistributedType.FSDP:
            return True
        plugin = getattr(state, "deepspeed_plugin", None)
        return state.distributed_type == DistributedType.DEEPSPEED and getattr(plugin, "zero_stage", 0) == 3

    def collective_forward(self, bare) -> str | None:
        """Why each forward call of the model is a collective of all ranks (their counts must match), or None: sharded
        weights are gathered in it; DDP broadcasts the model's buffers (rotary tables) at its start."""
        if self.sharded():
            return "under sharded weights (FSDP, ZeRO-3)"
        if self.accelerator.num_processes <= 1 or self.args.ddp_broadcast_buffers is False:
            return None
        if next(bare.buffers(), None) is not None:
            return f"on {self.accelerator.num_processes} ranks: DDP broadcasts the model's buffers at every forward call"
        return None

    def bare_model(self, model) -> torch.nn.Module:
        """`model` without its DDP/DeepSpeed wrapper and its PEFT adapter wrapper: the transformers model."""
        bare = self.accelerator.unwrap_model(model)
        return bare.get_base_model() if hasattr(bare, "get_base_model") else bare

    def autocast_dtype(self) -> torch.dtype | None:
        """The low-precision type accelerate's autocast computes in, or None without mixed precision."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(self.accelerator.mixed_precision))

    def say_once(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self.said:
            self.said.add(message)
            if self.accelerator.is_main_process:
                logger.log(level, message)

    def save_record(self) -> None:
        """OUTPUT_DIR/training_pass.json: every decided shape class, the pass taken and the measured times (main
        process; `r1kit report` reads it)."""
        if not self.accelerator.is_main_process:
            return
        sets = [s for s in self.sets.values() if s is not None]
        document = {"device": self.accelerator.device.type,
                    "candidates": sorted({c for s in sets for c in s.chooser.candidates}),
                    "notes": sorted({n for s in sets for n in s.chooser.notes}),
                    "decisions": [d for s in sets for d in s.chooser.decisions()]}
        try:
            (Path(self.args.output_dir) / PASS_RECORD).write_text(json.dumps(document, indent=1) + "\n")
        except OSError as error:  # the output folder went away: the run's own checks report it
            logger.debug("%s not written: %s", PASS_RECORD, error)
