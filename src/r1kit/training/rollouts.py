"""Asynchronous rollouts: the next generation batches are generated in the background, with the newest weights the
generator has, while the trainer trains on the current one (`async_rollouts: true`).

    producer   one thread per process (`RolloutEngine`), the only user of its generator (`TransformersGenerator`: a
               copy of the policy; `ColocatedGenerator`: the colocated vLLM engine; `ServerGenerator`: this process's
               own client of the vLLM server). It runs urgent jobs first, then the jobs read ahead, in order.
    ahead      `Lookahead` reads the trainer's data `lookahead` generation batches beyond the one it trains on (the same
               batches, in the same order, as a synchronous run) and submits each as a job when it is first read.
    weights    after every `weight_sync_steps` optimizer steps the trainer copies the policy's weights into a staging
               area (`WeightStage`: on the trainer's thread, gathered as the run is sharded); the producer loads the
               newest staged weights before its next job. A vLLM server gets them pushed by the trainer instead.
    version    the weights a row was generated with are the optimizer step they were staged at. A job whose weights are
               more than `max_staleness` steps older than the trainer's is dropped, counted, and its rows generated
               again with the newest weights: it is never trained on.
    match      when the trainer asks for completions (`take`), each row is taken from the job read ahead for this
               generation batch when that job holds a row with the same prompt tokens; every other row (a dynamic
               sampling refill, a curriculum replacement, a tool call's next turn) is generated on demand, urgently.
    faults     a job that fails is tried again (`RETRIES` times, waiting `BACKOFF_SECONDS` between tries); then
               `GenerationUnavailable`: the run stops with exit code 75 and its last checkpoint intact.

The trainer's side (where TRL asks for completions, where the loss takes the sampler's log-probabilities) is in
`r1kit.training.trainer`; this module has no TRL in it, so that its logic is tested without a trainer (tests/test_rollouts.py).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from r1kit.config.checks import lookahead_batches, optimizer_steps_per_batch  # noqa: F401 (read from here too)
from r1kit.errors import GenerationUnavailable, RefusedReply, one_line

logger = logging.getLogger(__name__)

ROLLOUT_STATE = "r1kit_rollouts.json"  # in each checkpoint folder: the weights version and what was queued
READ_AHEAD_STATE = "r1kit_read_ahead_{rank}.pt"  # in each checkpoint folder, per rank: the batches generated ahead
ROLLOUT_TOTALS = "rollouts.json"  # in the output folder, when training ends: the run's totals
RETRIES = 2  # a failed job is tried this many more times before the run stops (exit 75)
BACKOFF_SECONDS = (1.0, 4.0)  # wait before each retry: a restarting server gets a moment
POLL_SECONDS = 1.0  # how often a waiting trainer checks that the producer is alive


def batch_signature(rows: list[dict], key: Callable[[dict], str]) -> tuple[str, ...]:
    """The identity of one generation batch: its prompts, in order."""
    return tuple(key(row) for row in rows)


def job_seed(*parts) -> int:
    """A sampling seed derived from what identifies a job (the run's seed, the process, the batch): the same on a
    resume, whatever ran before."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# --------------------------------------------------------------------------------------------------------------------
# Importance weights: the sampler's log-probabilities against the trainer's
# --------------------------------------------------------------------------------------------------------------------
def importance_weights(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                       clip_min: float | None, clip_max: float | None) -> tuple[torch.Tensor, dict]:
    """TRL's truncated importance-sampling correction (`vllm_importance_sampling_mode`), for samples drawn by another
    copy of the policy: the ratio trainer / sampler per token (`token_*`, shape (B, T)) or per sequence (`sequence_*`,
    (B, 1)), clamped (`*_truncate`) or zeroed outside [clip_min, clip_max] (`*_mask`). A token without a sampler
    log-probability (NaN) counts as ratio 1. Returns the weights and, over the valid tokens or sequences, the raw
    ratio's mean and the share that was clipped or masked."""
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    per_sequence = mode.startswith("sequence")
    if per_sequence:
        diff = diff.sum(dim=-1, keepdim=True)
    raw = torch.exp(diff)
    valid = mask.sum(dim=-1, keepdim=True) > 0 if per_sequence else mask.bool()
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    outside = (raw < low) | (raw > high)
    if mode.endswith("truncate"):
        weights = torch.clamp(raw, min=clip_min, max=clip_max)
    elif mode.endswith("mask"):
        weights = raw.masked_fill(outside, 0.0)
    else:
        raise ValueError(f"unknown importance sampling mode {mode!r}")
    count = valid.sum().clamp(min=1)
    stats = {"ratio_mean": float((raw * valid).sum() / count), "clipped_share": float((outside & valid).sum() / count)}
    return weights, stats


def fold_into_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The importance weights multiplied into the advantages: for a non-negative weight `w`,
    `-min(r * A * w, clip(r) * A * w) = w * -min(r * A, clip(r) * A)`, so every clipped surrogate TRL has (grpo, bnpo,
    dr_grpo, dapo, luspo, cispo, sapo) comes out multiplied by `w`, exactly as TRL multiplies vLLM's samples' loss.
    Per-sequence weights keep the advantages one value per row; per-token weights make them (B, T), which TRL's loss
    takes as they are."""
    if weights.size(-1) == 1:
        return advantages * weights.squeeze(-1).to(advantages.dtype)
    return advantages.unsqueeze(-1) * weights.to(advantages.dtype)


# --------------------------------------------------------------------------------------------------------------------
# Jobs and the weights they use
# --------------------------------------------------------------------------------------------------------------------
@dataclass(eq=False)  # a job is itself: compared by identity
class Job:
    """One call to the generator: rows of prompt token ids (each row one completion), or any callable that must run
    where the generator lives (`call`). Finished by the producer with `result` (completion ids, log-probabilities) and
    the weights `version` it used, or with `error`."""

    prompt_ids: list[list[int]]
    num_generations: int
    seed: int
    urgent: bool = False
    signature: tuple | None = None
    call: Callable[[], object] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple | None = None
    error: BaseException | None = None
    version: int | None = None
    seconds: float = 0.0
    running: bool = False

    def index(self) -> dict[tuple, collections.deque]:
        """Unused rows by prompt tokens (a group's rows share them)."""
        rows: dict[tuple, collections.deque] = {}
        completions, logprobs = self.result
        for prompt, completion, logps in zip(self.prompt_ids, completions, logprobs):
            rows.setdefault(tuple(prompt), collections.deque()).append((completion, logps))
        return rows


class WeightStage:
    """The newest weights the trainer has handed over, with their version: written on the trainer's thread, read by
    the producer before a job. Both hold `lock`, so neither reads half of the other's copy."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tensors: dict[str, torch.Tensor] = {}
        self.version: int | None = None

    def write(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        with self.lock, torch.no_grad():
            for name, tensor in weights:
                held = self.tensors.get(name)
                if held is None or held.shape != tensor.shape or held.dtype != tensor.dtype:
                    self.tensors[name] = tensor.detach().clone()
                else:
                    held.copy_(tensor)
            self.version = version


# --------------------------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------------------------
class RolloutEngine:
    """The producer thread, its queue and its bookkeeping. `generator` has `generate(prompt_ids, num_generations,
    seed) -> (completion_ids, logprobs)`, `stages_weights` (whether it takes staged weights through `load`, or has them
    pushed by the trainer) and `close()`.

    The trainer's thread calls `start` and `stop` around training, `stage` or `pushed` after weight updates,
    `submit_ahead` (through `Lookahead`), `expect` when a generation batch begins, `take` for its rows, `now` for rows
    of its own choosing, `call` for any work on the generator, and `batch_metrics` once per generation batch."""

    def __init__(self, generator, max_staleness: int = 1, weight_sync_steps: int = 1, seed: int = 0, rank: int = 0,
                 wait_limit: float = math.inf, steps_per_batch: int = 1):
        self.generator = generator
        self.wait_limit = wait_limit  # seconds the trainer waits for one job (`rollout_timeout`)
        self.max_staleness, self.weight_sync_steps = max_staleness, weight_sync_steps
        self.lookahead = lookahead_batches(max_staleness, weight_sync_steps, steps_per_batch)
        self.seed, self.rank = seed, rank
        self.stage = WeightStage() if generator.stages_weights else None
        self.loaded_version: int | None = None  # what the generator holds (staged and loaded, or pushed)
        self.totals = collections.Counter()
        self._ready = threading.Condition()
        self._urgent: collections.deque[Job] = collections.deque()  # run first
        self._todo: collections.deque[Job] = collections.deque()  # read ahead, not yet started, in data order
        self._ahead: collections.deque[Job] = collections.deque()  # read ahead, not yet expected, in data order
        self._current: Job | None = None  # the job read ahead for the generation batch being scored
        self._current_rows: dict[tuple, collections.deque] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._generation = 0  # each start() a new one: a producer left over from an earlier start ends
        self._batch = collections.Counter()  # this generation batch's figures (batch_metrics drains them)
        self._batch_staleness: list[int] = []
        self._idle = 0.0  # seconds the producer waited for work since the last batch_metrics

    # --- life -----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """A fresh queue and a running producer (a resume or a rollback regenerates whatever was queued)."""
        self.stop()
        self._urgent.clear()
        self._todo.clear()
        self._ahead.clear()
        self._current, self._current_rows = None, None
        self._kept: dict[tuple, Job] = {}  # batches a checkpoint kept (`keep_read_ahead`), taken as they are read
        # The trainer's weights may have gone back (a rollback): the generator gets them again before any job.
        self.loaded_version = None
        if self.stage is not None:
            self.stage.version = None
        self._stopping = False
        self._generation += 1
        self._thread = threading.Thread(target=self._produce, args=(self._generation,), name="r1kit-rollouts",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the producer after its current job; what was queued is dropped."""
        thread = self._thread
        if thread is None:
            return
        with self._ready:
            self._stopping = True
            dropped = list(self._urgent) + list(self._todo)
            self._urgent.clear()
            self._todo.clear()
            self._ahead.clear()
            self._ready.notify_all()
        for job in dropped:
            job.error = GenerationUnavailable("the rollout engine stopped")
            job.done.set()
        thread.join(timeout=60)
        self._thread = None

    def close(self) -> None:
        self.stop()
        self.generator.close()

    @property
    def kept(self) -> int:
        """Batches a checkpoint kept that the resumed run has not read yet."""
        return len(getattr(self, "_kept", {}))

    @property
    def queued(self) -> int:
        """Generation batches read ahead for the steps to come."""
        return len(self._ahead)

    # --- weights --------------------------------------------------------------------------------------------------
    def newest(self) -> int | None:
        """The newest weights version handed to the generator (staged or pushed) since `start`."""
        versions = [v for v in (self.loaded_version, self.stage.version if self.stage else None) if v is not None]
        return max(versions) if versions else None

    def due(self, step: int) -> bool:
        """Whether the generator should get the trainer's weights at optimizer step `step`: nothing handed over since
        `start`, or `weight_sync_steps` steps since the newest handed over."""
        newest = self.newest()
        return newest is None or step - newest >= self.weight_sync_steps

    def stage_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """The trainer's thread: hands over the policy's weights at `version` (the producer loads them before its next
        job). Every process calls it together when gathering the weights is a collective."""
        self.stage.write(weights, version)

    def pushed(self, version: int) -> None:
        """The trainer pushed its weights to the generator itself (a vLLM server) at `version`."""
        self.loaded_version = version

    def _load_staged(self) -> None:
        stage = self.stage
        if stage is None or stage.version is None or stage.version == self.loaded_version:
            return
        with stage.lock:
            self.generator.load(stage.tensors.items())
            self.loaded_version = stage.version

    # --- the producer ---------------------------------------------------------------------------------------------
    def _next(self, generation: int) -> Job | None:
        started = time.perf_counter()
        with self._ready:
            while not (self._ended(generation) or self._urgent or self._todo):
                self._ready.wait()
            self._idle += time.perf_counter() - started
            if self._ended(generation):
                return None
            job = self._urgent.popleft() if self._urgent else self._todo.popleft()
            job.running = True
            return job

    def _ended(self, generation: int) -> bool:
        return self._stopping or generation != self._generation

    def _produce(self, generation: int) -> None:
        while True:
            job = self._next(generation)
            if job is None:
                return
            started = time.perf_counter()
            try:
                self._load_staged()
                job.version = self.loaded_version
                if job.call is not None:
                    job.result = job.call()
                else:
                    job.result = self.generator.generate(job.prompt_ids, job.num_generations, job.seed)
            except BaseException as error:  # noqa: BLE001 - handed to the trainer, which retries or stops the run
                logger.warning("Rollout generation failed (%s): %s", "urgent" if job.urgent else "read ahead",
                               one_line(error))
                if isinstance(error, RefusedReply):  # a reply not to train on: generated again, counted
                    self.totals["refused_replies"] += 1
                job.error = error
            job.seconds = time.perf_counter() - started
            job.done.set()

    def _wait(self, job: Job) -> None:
        """Blocks the trainer until `job` is done, timed as the trainer's wait."""
        started = time.perf_counter()
        while not job.done.wait(POLL_SECONDS):
            if self._thread is None or not self._thread.is_alive():
                job.error = job.error or GenerationUnavailable("the rollout producer is not running")
                break
            if time.perf_counter() - started > self.wait_limit:  # a generator that never answers: the run stops
                self._batch["trainer_wait_seconds"] += time.perf_counter() - started
                # (not retried: the producer is stuck in the call, and a retry would queue behind it)
                raise GenerationUnavailable(f"the rollout generator gave no answer within rollout_timeout "
                                            f"({self.wait_limit:g} s)")
        self._batch["trainer_wait_seconds"] += time.perf_counter() - started

    def _enqueue(self, job: Job) -> Job:
        if self._thread is None or not self._thread.is_alive():
            raise GenerationUnavailable("the rollout producer is not running (start() was not called, or it died)")
        with self._ready:
            if job.urgent:
                self._urgent.append(job)
            else:
                self._todo.append(job)
                self._ahead.append(job)
            self._ready.notify_all()
        return job

    # --- what the trainer asks for --------------------------------------------------------------------------------
    def submit_ahead(self, signature: tuple, prompt_ids: list[list[int]], num_generations: int) -> None:
        """A generation batch read ahead: generated as soon as the producer is free (or, after a resume, the one the
        checkpoint kept for it: generated by the weights the uninterrupted run generated it with)."""
        kept = getattr(self, "_kept", {}).pop(signature, None)
        if kept is not None and kept.prompt_ids == prompt_ids and kept.num_generations == num_generations:
            with self._ready:
                self._ahead.append(kept)
            self.totals["batches_kept_on_resume"] += 1
            return
        seed = job_seed(self.seed, self.rank, "ahead", signature)
        self._enqueue(Job(prompt_ids, num_generations, seed, signature=signature))
        self.totals["batches_read_ahead"] += 1

    def read_ahead_state(self) -> list[dict]:
        """The batches generated ahead for the steps to come (and the one in training, which a resume inside its
        block trains again), for a checkpoint: each with the weights version that generated it. A job under way is
        waited for (`wait_limit`); one not started is left out: a resume generates it, as the uninterrupted run
        would, with the newest weights."""
        jobs = ([self._current] if self._current is not None else []) + list(self._ahead)
        kept = []
        for job in jobs:
            if job.signature is None or job.call is not None or not (job.running or job.done.is_set()):
                continue
            self._wait(job)
            if job.error is None and job.result is not None:
                kept.append({"signature": list(job.signature), "prompt_ids": job.prompt_ids,
                             "num_generations": job.num_generations, "seed": job.seed, "version": job.version,
                             "completions": job.result[0], "logprobs": job.result[1]})
        return kept

    def keep_read_ahead(self, jobs: list[dict]) -> None:
        """A resume: the batches the checkpoint kept are taken instead of generated again (`submit_ahead`)."""
        self._kept = {}
        for saved in jobs:
            job = Job([list(p) for p in saved["prompt_ids"]], int(saved["num_generations"]), int(saved["seed"]),
                      signature=tuple(saved["signature"]), version=saved["version"],
                      result=(saved["completions"], saved["logprobs"]))
            job.done.set()
            self._kept[job.signature] = job

    def expect(self, signature: tuple) -> None:
        """A generation batch begins: its job read ahead (if any) becomes the one `take` draws rows from. Jobs read
        ahead before it belong to batches that never came (rows of the last batch left over count as unused)."""
        self._retire_current()
        with self._ready:
            if not any(job.signature == signature for job in self._ahead):
                self._current = None
            else:
                while self._ahead[0].signature != signature:
                    skipped = self._ahead.popleft()
                    if skipped in self._todo:  # not started: never generated
                        self._todo.remove(skipped)
                    else:
                        self.totals["unused_rows"] += len(skipped.prompt_ids)
                self._current = self._ahead.popleft()
        if self._current is None:
            self._batch["batches_not_read_ahead"] += 1

    def _retire_current(self) -> None:
        if self._current_rows:
            self.totals["unused_rows"] += sum(len(rows) for rows in self._current_rows.values())
        self._current, self._current_rows = None, None

    def take(self, prompt_ids: list[list[int]], num_generations: int, step: int) -> tuple[list, list]:
        """Completions for `prompt_ids` (one per row) at trainer step `step`: the rows the current job read ahead
        holds, if its weights are at most `max_staleness` steps old; the rest generated now."""
        found: dict[int, tuple] = {}
        if self._current is not None and self._current_rows is None:
            self._current_rows = self._settle(self._current, step) or {}
        if self._current_rows:
            version = self._current.version
            for i, prompt in enumerate(prompt_ids):
                rows = self._current_rows.get(tuple(prompt))
                if rows:
                    found[i] = rows.popleft()
                    self._batch_staleness.append(step - version)
        missing = [i for i in range(len(prompt_ids)) if i not in found]
        self._batch["rows_read_ahead"] += len(found)
        if missing:
            completions, logprobs = self.now([prompt_ids[i] for i in missing], num_generations, step)
            found.update(zip(missing, zip(completions, logprobs)))
        ordered = [found[i] for i in range(len(prompt_ids))]
        return [c for c, _ in ordered], [lp for _, lp in ordered]

    def _settle(self, job: Job, step: int) -> dict[tuple, collections.deque] | None:
        """The job's rows once it is done; None when it failed or is too stale (its rows are generated again)."""
        self._wait(job)
        if job.error is not None:
            self.totals["failed_jobs"] += 1
            return None
        staleness = step - job.version
        if staleness > self.max_staleness:
            self._batch["stale_dropped"] += 1
            self.totals["stale_dropped"] += 1
            self.totals["stale_dropped_rows"] += len(job.prompt_ids)
            logger.info("Rollouts: a batch generated with the weights of step %d is %d steps old at step %d "
                        "(max_staleness %d): dropped and generated again", job.version, staleness, step,
                        self.max_staleness)
            return None
        return job.index()

    def now(self, prompt_ids: list[list[int]], num_generations: int, step: int) -> tuple[list, list]:
        """Rows generated urgently with the newest weights the generator has (retried, then `GenerationUnavailable`)."""
        seed = job_seed(self.seed, self.rank, "now", step, self.totals["urgent_jobs"])
        self.totals["urgent_jobs"] += 1
        self.totals["rows_on_demand"] += len(prompt_ids)
        self._batch["rows_on_demand"] += len(prompt_ids)
        job = self._run_urgent(lambda: Job(prompt_ids, num_generations, seed, urgent=True))
        self._batch_staleness.extend([step - job.version] * len(prompt_ids))
        return job.result

    def call(self, function: Callable[[], object]) -> object:
        """Runs `function` where the generator is used, with the newest staged weights loaded (what shares the
        generator with the producer: a colocated engine's held-out evaluation): on the producer's thread after any
        job in progress, or here when the producer is not running (before or after training)."""
        if self._thread is None or not self._thread.is_alive():
            self._load_staged()
            return function()
        return self._run_urgent(lambda: Job([], 0, 0, urgent=True, call=function)).result

    def _run_urgent(self, make: Callable[[], Job]) -> Job:
        errors = []
        for attempt in range(RETRIES + 1):
            if attempt:
                time.sleep(BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS)) - 1])
                self.totals["retries"] += 1
            job = self._enqueue(make())
            self._wait(job)
            if job.error is None:
                return job
            errors.append(job.error)
            if isinstance(job.error, (KeyboardInterrupt, SystemExit)):
                raise job.error
        raise GenerationUnavailable(f"the generator failed {len(errors)} times in a row ({one_line(errors[-1])})")

    # --- what is logged and saved ---------------------------------------------------------------------------------
    def batch_metrics(self) -> dict[str, float]:
        """This generation batch's figures (and the producer's idle time since the last call); resets them."""
        staleness = self._batch_staleness
        batch = self._batch
        rows = batch["rows_read_ahead"] + batch["rows_on_demand"]
        metrics = {
            "staleness": float(max(staleness)) if staleness else 0.0,
            "stale_dropped": float(batch["stale_dropped"]),
            "read_ahead_share": batch["rows_read_ahead"] / rows if rows else 0.0,
            "trainer_wait_seconds": batch["trainer_wait_seconds"],
            "generator_wait_seconds": self._idle,
        }
        self.totals["trainer_wait_seconds"] += batch["trainer_wait_seconds"]
        self.totals["generator_wait_seconds"] += self._idle
        self._batch, self._batch_staleness, self._idle = collections.Counter(), [], 0.0
        return metrics

    def state_dict(self, step: int) -> dict:
        """What a checkpoint records: the weights version it holds, the generator's, and what was queued (a resume
        drops it and generates it again)."""
        return {"weights_version": step, "generator_version": self.loaded_version, "queued_batches": self.queued,
                "totals": {k: round(v, 3) if isinstance(v, float) else v for k, v in self.totals.items()}}

    def load_state_dict(self, state: dict) -> None:
        """A resume: the totals go on from the checkpoint's; what it had queued is counted as dropped."""
        self.totals = collections.Counter(state.get("totals") or {})
        self.totals["dropped_on_resume"] += max(0, int(state.get("queued_batches") or 0) - self.kept)


# --------------------------------------------------------------------------------------------------------------------
# Reading ahead
# --------------------------------------------------------------------------------------------------------------------
class Lookahead:
    """The trainer's epoch iterator, read ahead: `fill(n)` reads items until `n` generation batches beyond the one
    being trained are known, calling `submit(rows)` once for each batch as it is first read (TRL's sampler repeats a
    generation batch for every step that trains on it; a batch is new when its prompts differ from the last one's).
    The trainer gets the same items in the same order."""

    def __init__(self, source: Iterator, signature: Callable[[list[dict]], tuple], submit: Callable[[list[dict]], None]):
        self.source, self.signature, self.submit = source, signature, submit
        self.buffer: collections.deque = collections.deque()  # (item, signature), read but not yet handed out
        self.last_read: tuple | None = None
        self.last_given: tuple | None = None
        self.exhausted = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self.buffer:
            self._read()
        if not self.buffer:
            raise StopIteration
        item, signature = self.buffer.popleft()
        self.last_given = signature
        return item

    def _read(self) -> bool:
        if self.exhausted:
            return False
        try:
            item = next(self.source)
        except StopIteration:
            self.exhausted = True
            return False
        signature = self.signature(item)
        if signature != self.last_read:
            self.submit(item)
        self.last_read = signature
        self.buffer.append((item, signature))
        return True

    def fill(self, batches: int) -> None:
        """Reads until `batches` generation batches after the last one handed out are known (or the epoch ends)."""
        while self._batches_ahead() < batches and self._read():
            pass

    def _batches_ahead(self) -> int:
        count, previous = 0, self.last_given
        for _, signature in self.buffer:
            if signature != previous:
                count += 1
            previous = signature
        return count
