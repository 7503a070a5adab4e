"""Math answer checking that cannot hang training.

`judge_batch(golds, answers)` scores each (gold, completion) pair with math-verify in a small pool of worker
processes. The parent enforces a wall-clock limit per sample: a worker still busy past its deadline (a
`\\boxed{9^{9^{9^{9^{9}}}}}` that sympy tries to expand, a 50 kB expression) is killed and replaced, and the sample
scores 0.0. This works from any thread and any process, unlike math-verify's own signal-based timeouts, and spreads a
batch over the cores.

The same parsing serves `accuracy`, `cosine` and `length`: gold with LaTeX + plain-expression extraction, answers with
boxed-first LaTeX extraction, and, when that finds nothing, the last `<answer>…</answer>` block read as a plain
expression (so `<answer>42</answer>` counts; a bare number elsewhere in the text does not). A gold that does not parse
makes the sample unjudgeable (`None`).
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import multiprocessing as mp
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

logger = logging.getLogger(__name__)

# Outcome of one judgement.
CORRECT, WRONG, UNPARSEABLE_GOLD, TIMEOUT = "correct", "wrong", "unparseable_gold", "timeout"
READY = "ready"  # a worker's first message: imports done, deadlines may start
MAX_ANSWER_CHARS = 20_000  # longer completions are judged on their last 20 k characters (the answer is at the end)


def _configs():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import NormalizationConfig

    gold = [LatexExtractionConfig(), ExprExtractionConfig()]
    answer_block = [ExprExtractionConfig()]
    answer = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
            ),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    return gold, answer, answer_block


_CONFIGS = None
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


_POWER_CHAIN = re.compile(r"\d+(?:\s*\^\s*\{?\s*\d+)+")
MAX_DIGITS = 100_000  # an integer power with more digits than this cannot be a contest answer


def _has_huge_power(text: str) -> bool:
    """Whether `text` holds a power of integer literals (`9^{9^{9}}`, `2^{10^{8}}`) with more than `MAX_DIGITS` digits:
    sympy would try to compute it exactly and not return."""
    for chain in _POWER_CHAIN.findall(text):
        numbers = [int(n) for n in re.findall(r"\d+", chain)[:8]]
        exponent = 1.0
        for n in reversed(numbers[1:]):  # right-associative: a^(b^(c...))
            exponent = float("inf") if n > 1 and exponent > 64 else float(n) ** exponent
            if exponent > 1e12:
                exponent = float("inf")
                break
        base = numbers[0]
        if base > 1 and exponent * math.log10(base) > MAX_DIGITS:
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, in_worker: bool) -> list:
    """Parsed gold, cached: a GRPO batch holds each gold `num_generations` times."""
    from math_verify import parse

    timeout = {"parsing_timeout": None} if in_worker else {}
    return parse(gold, extraction_config=_CONFIGS[0], extraction_mode="first_match", **timeout)


def judge(gold: str, answer: str, in_worker: bool = False) -> str:
    """CORRECT, WRONG or UNPARSEABLE_GOLD for one pair. In a worker, math-verify's signal timeouts are off (the
    parent enforces the limit); in-process they stay on as a last resort."""
    from math_verify import parse, verify

    global _CONFIGS
    if _CONFIGS is None:
        _CONFIGS = _configs()
    gold_cfg, answer_cfg, block_cfg = _CONFIGS
    timeout = {"parsing_timeout": None} if in_worker else {}
    gold_parsed = _parse_gold(str(gold), in_worker)
    if not gold_parsed:
        return UNPARSEABLE_GOLD
    answer = str(answer)[-MAX_ANSWER_CHARS:]
    if _has_huge_power(answer) and not _has_huge_power(str(gold)):
        return WRONG  # cannot equal the gold, and would hang sympy until the time limit
    answer_parsed = parse(answer, extraction_config=answer_cfg, extraction_mode="first_match", **timeout)
    blocks = _ANSWER_BLOCK.findall(answer)
    if not answer_parsed and blocks:
        # Inside an explicit <answer> block a bare "42" is the answer; outside one, plain numbers are not read
        # (any number in the reasoning would count).
        answer_parsed = parse(blocks[-1].strip(), extraction_config=block_cfg, extraction_mode="first_match", **timeout)
    if not answer_parsed:
        return WRONG
    verify_timeout = {"timeout_seconds": None} if in_worker else {}
    try:
        return CORRECT if verify(gold_parsed, answer_parsed, **verify_timeout) else WRONG
    except Exception:  # math-verify raising on an exotic expression: the answer did not verify
        return WRONG


def _worker_main(conn) -> None:
    # One thread per worker: the pool is the parallelism, and the trainer owns the cores' threads.
    os.environ["OMP_NUM_THREADS"] = "1"
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that we time out from the parent; we do
    judge("1", "$1$", in_worker=True)  # import math-verify and sympy before the first deadline starts
    conn.send(READY)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        for gold, answer in task:  # one message per sample, so the parent's deadline is per sample
            try:
                outcome = judge(gold, answer, in_worker=True)
            except Exception:  # noqa: BLE001 - a parse crash is a wrong answer, not a dead worker
                outcome = WRONG
            conn.send(outcome)


@dataclass
class _Worker:
    process: mp.Process
    conn: object
    task: deque = field(default_factory=deque)  # indices of the samples it has yet to answer
    deadline: float = 0.0
    started: bool = False  # has it said READY?


class PoolUnavailable(RuntimeError):
    """Worker processes cannot start here (e.g. a script without an `if __name__ == "__main__":` guard)."""


class VerifierPool:
    """A pool of math-verify worker processes with a hard per-sample time limit.

    Args:
        workers (`int`): number of worker processes.
        timeout (`float`): seconds one sample may take before its worker is killed and the sample scores TIMEOUT.
    """

    STARTUP_SECONDS = 120.0  # for a fresh worker to import math-verify and sympy and say READY

    def __init__(self, workers: int, timeout: float = 5.0):
        self.workers_wanted = max(1, workers)
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")  # never fork a process that holds torch's threads
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.timeouts = 0
        self.unavailable = ""  # why worker processes cannot run here, once known

    def _start_worker(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child,), daemon=True, name="r1kit-verifier")
        process.start()
        child.close()
        return _Worker(process, parent)

    def _kill(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()

    def warm_up(self) -> None:
        """Starts the workers now, so their imports overlap with whatever the caller does next."""
        with self._lock:
            while not self.unavailable and len(self._idle) < self.workers_wanted:
                self._idle.append(self._start_worker())

    def close(self) -> None:
        for worker in self._idle:
            self._kill(worker)
        self._idle.clear()

    def map(self, pairs: list[tuple[str, str]], chunk: int = 8) -> list[str]:
        """Judges every (gold, answer) pair; results in input order. Raises `PoolUnavailable` when worker
        processes cannot start here."""
        with self._lock:
            if self.unavailable:
                raise PoolUnavailable(self.unavailable)
            busy: dict[object, _Worker] = {}
            try:
                return self._map(pairs, chunk, busy)
            except PoolUnavailable as e:
                self.unavailable = str(e)
                for worker in [*busy.values(), *self._idle]:
                    self._kill(worker)
                self._idle.clear()
                raise

    def _map(self, pairs: list[tuple[str, str]], chunk: int, busy: dict) -> list[str]:
        results: list[str | None] = [None] * len(pairs)
        # Chunks amortise the pipe round trip while keeping every worker busy.
        size = max(1, min(chunk, len(pairs) // (2 * self.workers_wanted) or 1))
        pending = deque(deque(range(i, min(i + size, len(pairs)))) for i in range(0, len(pairs), size))
        while pending or busy:
            while pending and len(busy) < self.workers_wanted:
                worker = self._idle.pop() if self._idle else self._start_worker()
                worker.task = pending.popleft()
                worker.conn.send([pairs[i] for i in worker.task])
                worker.deadline = time.monotonic() + (self.timeout if worker.started else self.STARTUP_SECONDS)
                busy[worker.conn] = worker
            next_deadline = min(w.deadline for w in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic())):
                worker = busy[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the worker died
                    busy.pop(conn)
                    self._kill(worker)
                    if not worker.started:  # worker processes cannot run here
                        raise PoolUnavailable("a math-verify worker process exited at start-up") from None
                    results[worker.task.popleft()] = WRONG  # killed by its sample (out of memory, say)
                    if worker.task:
                        pending.append(worker.task)
                    continue
                worker.deadline = time.monotonic() + self.timeout
                if message == READY:
                    worker.started = True
                    continue
                results[worker.task.popleft()] = message
                if not worker.task:
                    busy.pop(conn)
                    self._idle.append(worker)
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if now >= worker.deadline and not worker.started:
                    busy.pop(conn)
                    self._kill(worker)
                    raise PoolUnavailable(f"a math-verify worker did not start within {self.STARTUP_SECONDS:.0f} s")
                if now >= worker.deadline:  # stuck on its current sample: kill it, requeue the rest of its chunk
                    busy.pop(conn)
                    self._kill(worker)
                    self._idle.append(self._start_worker())  # the replacement imports while the others work
                    self.timeouts += 1
                    results[worker.task.popleft()] = TIMEOUT
                    if worker.task:
                        pending.append(worker.task)
        return results  # type: ignore[return-value]


_POOL: VerifierPool | None = None
_POOL_LOCK = threading.Lock()


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))


def get_pool(timeout: float = 5.0, workers: int | None = None) -> VerifierPool:
    """The process-wide verifier pool (started on first use, closed at exit)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = VerifierPool(workers or default_workers(), timeout)
            atexit.register(_POOL.close)
        _POOL.timeout = timeout
        if workers:
            _POOL.workers_wanted = workers
        return _POOL


_WARNED_IN_PROCESS = False


def _judge_in_process(pairs: list[tuple[str, str]], why: str) -> list[str]:
    """Fallback when worker processes cannot run: math-verify in this process, with its own (main-thread only)
    timeouts."""
    global _WARNED_IN_PROCESS
    if not _WARNED_IN_PROCESS:
        _WARNED_IN_PROCESS = True
        logger.warning("%s; verifying math answers in-process, without a hard time limit off the main thread.", why)
    out = []
    for gold, answer in pairs:
        try:
            out.append(judge(gold, answer))
        except Exception:  # noqa: BLE001
            out.append(WRONG)
    return out


def judge_batch(golds: list, answers: list[str], timeout: float = 5.0, workers: int | None = None) -> list[str]:
    """Judges a batch: CORRECT / WRONG / UNPARSEABLE_GOLD / TIMEOUT per pair. A missing gold is UNPARSEABLE_GOLD."""
    outcomes: list[str | None] = [UNPARSEABLE_GOLD if g is None or str(g).strip() == "" else None for g in golds]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if todo:
        pairs = [(str(golds[i]), answers[i] or "") for i in todo]
        try:
            judged = get_pool(timeout, workers).map(pairs)
        except PoolUnavailable as e:
            judged = _judge_in_process(pairs, str(e))
        for i, outcome in zip(todo, judged):
            outcomes[i] = outcome
    return outcomes  # type: ignore[return-value]
