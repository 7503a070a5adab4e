"""Math answer checking that cannot hang training.

`judge_batch(golds, answers)` scores each (gold, completion) pair with math-verify in a small pool of worker
processes. The parent enforces a wall-clock limit per sample: a worker still busy past its deadline (a
`\\boxed{9^{9^{9^{9^{9}}}}}` that sympy tries to expand, a 50 kB expression) is killed and replaced, and the sample
scores 0.0. This works from any thread and any process, unlike math-verify's own signal-based timeouts, and spreads a
batch over the cores.

The same parsing serves `accuracy`, `cosine` and `length`: gold with LaTeX + plain-expression extraction, answers with
boxed-first LaTeX extraction. A gold that does not parse makes the sample unjudgeable (`None`).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

logger = logging.getLogger(__name__)

# Outcome of one judgement.
CORRECT, WRONG, UNPARSEABLE_GOLD, TIMEOUT = "correct", "wrong", "unparseable_gold", "timeout"
MAX_ANSWER_CHARS = 20_000  # longer completions are judged on their last 20 k characters (the answer is at the end)


def _configs():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import NormalizationConfig

    gold = [LatexExtractionConfig(), ExprExtractionConfig()]
    answer = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed="all", units=True
            ),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    return gold, answer


_CONFIGS = None


def judge(gold: str, answer: str, in_worker: bool = False) -> str:
    """CORRECT, WRONG or UNPARSEABLE_GOLD for one pair. In a worker, math-verify's signal timeouts are off (the
    parent enforces the limit); in-process they stay on as a last resort."""
    from math_verify import parse, verify

    global _CONFIGS
    if _CONFIGS is None:
        _CONFIGS = _configs()
    gold_cfg, answer_cfg = _CONFIGS
    timeout = {"parsing_timeout": None} if in_worker else {}
    gold_parsed = parse(str(gold), extraction_config=gold_cfg, extraction_mode="first_match", **timeout)
    if not gold_parsed:
        return UNPARSEABLE_GOLD
    answer = str(answer)[-MAX_ANSWER_CHARS:]
    answer_parsed = parse(answer, extraction_config=answer_cfg, extraction_mode="first_match", **timeout)
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


class VerifierPool:
    """A pool of math-verify worker processes with a hard per-sample time limit.

    Args:
        workers (`int`): number of worker processes.
        timeout (`float`): seconds one sample may take before its worker is killed and the sample scores TIMEOUT.
    """

    STARTUP_SECONDS = 60.0  # a fresh worker's first sample also pays for importing math-verify and sympy

    def __init__(self, workers: int, timeout: float = 5.0):
        self.workers_wanted = max(1, workers)
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")  # never fork a process that holds torch's threads
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.timeouts = 0

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

    def close(self) -> None:
        for worker in self._idle:
            self._kill(worker)
        self._idle.clear()

    def map(self, pairs: list[tuple[str, str]], chunk: int = 8) -> list[str]:
        """Judges every (gold, answer) pair; results in input order."""
        with self._lock:
            return self._map(pairs, chunk)

    def _map(self, pairs: list[tuple[str, str]], chunk: int) -> list[str]:
        results: list[str | None] = [None] * len(pairs)
        # Chunks amortise the pipe round trip while keeping every worker busy.
        size = max(1, min(chunk, len(pairs) // (2 * self.workers_wanted) or 1))
        pending = deque(deque(range(i, min(i + size, len(pairs)))) for i in range(0, len(pairs), size))
        busy: dict[object, _Worker] = {}
        while pending or busy:
            while pending and len(busy) < self.workers_wanted:
                fresh = not self._idle
                worker = self._start_worker() if fresh else self._idle.pop()
                worker.task = pending.popleft()
                worker.conn.send([pairs[i] for i in worker.task])
                worker.deadline = time.monotonic() + self.timeout + (self.STARTUP_SECONDS if fresh else 0.0)
                busy[worker.conn] = worker
            next_deadline = min(w.deadline for w in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic())):
                worker = busy[conn]
                try:
                    results[worker.task.popleft()] = conn.recv()
                except (EOFError, OSError):  # the worker died (out of memory, say): its sample did not verify
                    results[worker.task.popleft()] = WRONG
                    busy.pop(conn)
                    self._kill(worker)
                    if worker.task:
                        pending.append(worker.task)
                    continue
                worker.deadline = time.monotonic() + self.timeout
                if not worker.task:
                    busy.pop(conn)
                    self._idle.append(worker)
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if now >= worker.deadline:  # stuck on its current sample: kill it, requeue the rest of its chunk
                    busy.pop(conn)
                    self._kill(worker)
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


def judge_batch(golds: list, answers: list[str], timeout: float = 5.0, workers: int | None = None) -> list[str]:
    """Judges a batch: CORRECT / WRONG / UNPARSEABLE_GOLD / TIMEOUT per pair. A missing gold is UNPARSEABLE_GOLD."""
    outcomes: list[str | None] = [UNPARSEABLE_GOLD if g is None or str(g).strip() == "" else None for g in golds]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if todo:
        judged = get_pool(timeout, workers).map([(str(golds[i]), answers[i] or "") for i in todo])
        for i, outcome in zip(todo, judged):
            outcomes[i] = outcome
    return outcomes  # type: ignore[return-value]
