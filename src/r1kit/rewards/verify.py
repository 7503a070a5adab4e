"""Math answer checking that cannot hang training.

`judge_batch(golds, answers, timeout)` scores each (gold, completion) pair with math-verify in a small pool of worker
processes. The parent enforces a wall-clock limit per sample, given with each call: a worker still busy past its
deadline (a `\\boxed{9^{9^{9^{9^{9}}}}}` that sympy tries to expand, a 50 kB expression) is killed and replaced, and
the sample scores TIMEOUT. This works from any thread and any process, unlike math-verify's own signal-based
timeouts, and spreads a batch over the cores.

Workers are fresh interpreters started with `subprocess` that import only this module: they never re-run the
caller's `__main__`, so a notebook or a script without an `if __name__ == "__main__":` guard verifies the same way a
training run does. Where no worker can start, answers are verified in-process, with the same verdicts on any thread;
math-verify's time limit then applies on the main thread only, and r1kit says once that no hard limit applies
elsewhere.

The same parsing serves `accuracy`, `cosine` and `length`: gold with LaTeX + plain-expression extraction, answers with
boxed-first LaTeX extraction, and, when that finds nothing, the last `<answer>…</answer>` block read as a plain
expression (so `<answer>42</answer>` counts; a bare number elsewhere in the text does not). A gold that does not parse
makes the sample unjudgeable (`None`); a gold the plain reading cannot take (a tuple, list, interval, matrix or an
expression such as `p - q`) or that states a complex number is read as Open-R1 reads every gold, as LaTeX between
`$`, so that no right answer fares worse than under plain math-verify. A multiple-choice letter (`A`, `(B)`) or a
yes/no/true/false gold is compared as a word with the answer's final box or <answer> block (sympy would read `yes`
as y*e*s and pay `sey`). One answer has one reading: a percentage is its number (`5\\%` is 5, never
also 0.05; `one_reading`).

An answer math-verify finds equal is still wrong when its form says otherwise (`form_differs`, read by
`r1kit.rewards.forms`): a unit other than the gold's (`5\\text{ cm}` for `5\\text{ m}`), a relation with a side missing
(`\\approx 41`), an order or `\\neq` relation where the gold states none (`x \\neq 41` for 41), or an equation whose
sides without variables differ (`42=41`, `a=42=41`; `\\approx` is read as `=`). A gold written as a bare relation
(`x \\le 3`, `y = 2x+1`) is read as that relation, not as its first number.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from r1kit.credentials import without_secrets
from r1kit.rewards.forms import (
    DELIMITERS,
    EQUALITY,
    MATH_MARKS,
    ORDER,
    anchored,
    boxed,
    boxed_decimals,
    gold_texts,
    is_complex,
    is_math,
    plain_decimal,
    plain_formula,
    reads_whole,
    relations,
    unit_after,
    units,
    units_as_text,
    value_text,
    word_answer,
    word_gold,
)
from r1kit.rewards.text import last_answer_block, log_once

logger = logging.getLogger(__name__)

# Outcome of one judgement.
CORRECT, WRONG, UNPARSEABLE_GOLD, TIMEOUT = "correct", "wrong", "unparseable_gold", "timeout"
READY = "ready"  # a worker's first message: imports done, deadlines may start
MAX_ANSWER_CHARS = 20_000  # longer completions are judged on their last 20 k characters (the answer is at the end)
DEFAULT_TIMEOUT = 5.0  # seconds per sample, as `reward_timeout` defaults


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


# Possessive quantifiers and a start only where a digit run starts: without them every position inside a long digit
# run started a match that backtracked over the rest of the run (quadratic in the run's length).
_POWER_CHAIN = re.compile(r"(?<!\d)\d++(?:\s*+\^\s*+\{?+\s*+\d++)+")
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


def one_reading(parsed: list) -> list:
    """`parsed` (math-verify's [expression, text]) with each percentage read as its number: `5\\%` is 5, as
    `5\\text{ percent}` and `5\\text{ cm}` are (the sign is a unit).

    math-verify keeps `5\\%` as 5 * (1/100) and then compares it both ways: as 5 with an integer gold, as 0.05 with
    a decimal one, so one answer matched two different golds. One reading per answer, the same for the gold."""
    from sympy import Basic, Mul, Rational, UnevaluatedExpr

    percent = UnevaluatedExpr(Rational(1, 100))

    def is_percentage(expr) -> bool:
        return isinstance(expr, Mul) and len(expr.args) == 2 and expr.args[1] == percent

    return [item.replace(is_percentage, lambda expr: expr.args[0]) if isinstance(item, Basic) else item
            for item in parsed]


# A thin-space family separator (LaTeX \, \; \: \! "\ " \thinspace ~, or U+2009/U+202F/U+00A0) between digits.
_DIGIT_SEPARATOR = r"(?:\\[,;:! ]|\\thinspace\s*|~|[\u2009\u202f\u00a0])"
_DIGIT_GROUP = re.compile(rf"(?<=\d){_DIGIT_SEPARATOR}(?=\d{{3}}(?!\d))")
_DIGITS_APART = re.compile(rf"\d{_DIGIT_SEPARATOR}\d")


def join_digit_groups(text: str) -> str:
    """`1\\,000` -> `1000`: a separator followed by exactly three digits groups thousands (math-verify reads `\\,`
    as a product, so `1\\,000` was 0). Applied to the gold and the answer alike."""
    return _DIGIT_GROUP.sub("", text)


def digits_kept_apart(text: str) -> bool:
    """Whether a thin-space separator still stands between two digits once groups are joined (`3\\,5`): no reading
    of it is safe (math-verify made `3\\,5` 8), so an answer written so is wrong."""
    return bool(_DIGITS_APART.search(text))


def final_answer_region(text: str, width: int = 200) -> str:
    """Where the answer is read from: after the last `\\boxed`, else the last <answer> block, else the text's end."""
    boxed = text.rfind("\\boxed")
    if boxed >= 0:
        return text[boxed : boxed + width]
    block = last_answer_block(text)
    return block[-width:] if block is not None else text[-width:]


def _undelimited_formula(gold: str) -> bool:
    """Whether `gold` is one formula written without math delimiters that math-verify's plain-expression reading would
    misread: a relation (`x \\le 3` read as 3, `y = 2x+1` as 2) or LaTeX (`2\\sqrt{3}` read as 2, so that `\\boxed{2}` was
    paid and `\\boxed{2\\sqrt{3}}` was not; `\\sqrt{2}`, `x^2+1`, `10^{6}` not read at all), as datasets' answer
    columns hold them. A command, a power or a brace makes it LaTeX; plain numbers keep the plain reading."""
    return ("\\boxed" not in gold and not DELIMITERS.search(gold) and is_math(gold)
            and (any(mark in gold for mark in ("\\", "^", "{")) or any(ops for _, ops in relations(gold))))


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, limit: int | None) -> list:
    """Parsed gold, cached: a GRPO batch holds each gold `num_generations` times. A gold the plain reading cannot
    take (a tuple, a list, an interval, a matrix, an expression such as `p - q`) or that states a complex number is
    read as Open-R1 reads every gold, as LaTeX between `$`, so that no right answer fares worse than under plain
    math-verify."""
    from math_verify import parse

    text = join_digit_groups(plain_decimal(gold))
    if _undelimited_formula(gold) or is_complex(gold):
        parsed = parse(f"${text}$", extraction_config=_CONFIGS[0][:1], extraction_mode="first_match",
                       parsing_timeout=limit)
        if parsed and not isinstance(parsed[0], str):
            return one_reading(parsed)
    parsed = parse(text, extraction_config=_CONFIGS[0], extraction_mode="first_match", parsing_timeout=limit)
    if not DELIMITERS.search(gold) and "\\boxed" not in gold and MATH_MARKS.search(gold) and (
            not parsed or isinstance(parsed[0], str) or (not reads_whole(parsed, text) and plain_formula(gold))):
        wrapped = parse(f"${text}$", extraction_config=_CONFIGS[0], extraction_mode="first_match", parsing_timeout=limit)
        if wrapped and not isinstance(wrapped[0], str):
            return one_reading(wrapped)
    return one_reading(parsed)


MAX_SIDES = 16  # sides of an answer's equations evaluated; an answer stating more is wrong


def _side_value(side: str, limit: int | None):
    """The number one side of an equation names (its unit dropped), or None where it names none (a variable, text)."""
    from math_verify import parse
    from sympy import Basic, I

    text = value_text(side)
    if not text:
        return None
    parsed = parse(f"${text}$", extraction_config=_CONFIGS[0][:1], extraction_mode="first_match", parsing_timeout=limit)
    value = one_reading(parsed)[0] if parsed else None
    if isinstance(value, Basic) and {getattr(x, "name", None) for x in value.free_symbols} == {"i"}:
        value = value.subs({x: I for x in value.free_symbols})  # a complex number (`7 = 2i` states two values)
    return value if isinstance(value, Basic) and value.is_number else None


def _sides_differ(sides: list[str], counted: list[int], limit: int | None) -> bool:
    """Whether two sides of one `=`/`\\approx` chain name different numbers; `counted` holds the sides read so far."""
    from math_verify import verify

    values = []
    for side in sides:
        counted[0] += 1
        if counted[0] > MAX_SIDES:
            return True
        if (value := _side_value(side, limit)) is not None:
            values.append(value)
    return any(not verify(values[0], other, timeout_seconds=limit) for other in values[1:])


def form_differs(gold: str, gold_parsed: list, answer: str, read: list, block: str | None,
                 limit: int | None = None) -> bool:
    """Whether an answer whose value math-verify found equal to the gold's states another form: a unit other than the
    gold's, a relation with a side missing, an order or `\\neq` relation where the gold states none, or an equation
    whose sides without variables differ.

    Args:
        gold (`str`): the gold as given; `gold_parsed`: math-verify's reading of it.
        answer (`str`): the completion; `read`: math-verify's reading of it (its text is checked too).
        block (`str` or `None`): the <answer> block math-verify read, where it found nothing in the whole text.
    """
    from math_verify.grader import is_relation

    boxes = boxed(answer)
    if boxes:
        texts = [content for content, _ in boxes]
    elif block is not None:
        texts = [block]
    else:  # read after an anchor: `answer: ...`, or inside an <answer> block anchored by the tag's name
        tag_block = last_answer_block(answer)
        texts = anchored(answer) + ([tag_block] if tag_block is not None else [])
    texts += [item for item in read if isinstance(item, str)]
    gold_relation = any(is_relation(item) for item in gold_parsed if not isinstance(item, str))
    counted = [0]
    for text in texts:
        for sides, ops in relations(text):
            if ops and not all(sides):
                return True  # `= 41`, `\\approx 41`: a relation needs two sides
            if not gold_relation and ORDER.intersection(ops):
                return True
            run = sides[:1]
            for op, side in zip(ops, sides[1:]):
                if op not in EQUALITY:
                    if _sides_differ(run, counted, limit):
                        return True
                    run = []
                run.append(side)
            if len(run) > 1 and _sides_differ(run, counted, limit):
                return True
    gold_units = set().union(*(units(text) for text in gold_texts(gold)))
    if not gold_units:
        return False  # a gold without a unit says nothing of the answer's
    stated = [units(content) or {unit_after(after)} - {None} for content, after in boxes]
    stated += [units(text) for text in texts[len(boxes):]]
    return any(found - gold_units for found in stated)


def judge(gold: str, answer: str, limit: int | None = None) -> str:
    """CORRECT, WRONG or UNPARSEABLE_GOLD for one pair.

    Args:
        gold (`str`): the reference answer.
        answer (`str`): the completion.
        limit (`int` or `None`): math-verify's own signal-based time limit in whole seconds, which works on the main
            thread only; `None` (a worker, whose parent enforces the limit, or any other thread) runs without it.
    """
    from math_verify import parse, verify

    global _CONFIGS
    if _CONFIGS is None:
        _CONFIGS = _configs()
    _, answer_cfg, block_cfg = _CONFIGS
    word = word_gold(str(gold))
    if word is not None:  # a choice or yes/no: the answer's final word must be the same word
        return CORRECT if word_answer(str(answer)[-MAX_ANSWER_CHARS:]) == word else WRONG
    gold_parsed = _parse_gold(str(gold), limit)
    if not gold_parsed:
        return UNPARSEABLE_GOLD
    answer = boxed_decimals(units_as_text(join_digit_groups(str(answer)[-MAX_ANSWER_CHARS:]), str(gold)))
    if digits_kept_apart(final_answer_region(answer)):
        return WRONG
    if _has_huge_power(answer) and not _has_huge_power(str(gold)):
        return WRONG  # cannot equal the gold, and would hang sympy until the time limit
    answer_parsed = parse(answer, extraction_config=answer_cfg, extraction_mode="first_match", parsing_timeout=limit)
    block = last_answer_block(answer) if not answer_parsed else None
    if block is not None:
        # Inside an explicit <answer> block a bare "42" is the answer; outside one, plain numbers are not read
        # (any number in the reasoning would count). A block stating a relation is read as a box would be: the
        # plain reading keeps only a number after it (`42=41` read as 41, `x \\le 41` as 41).
        if any(ops for _, ops in relations(block)):
            answer_parsed = parse(f"\\boxed{{{block.strip()}}}", extraction_config=answer_cfg,
                                  extraction_mode="first_match", parsing_timeout=limit)
        if not answer_parsed:
            answer_parsed = parse(
                block.strip(), extraction_config=block_cfg, extraction_mode="first_match", parsing_timeout=limit
            )
    if not answer_parsed or not verify(gold_parsed, one_reading(answer_parsed), timeout_seconds=limit):
        return WRONG
    if _boxes_disagree(str(gold), gold_parsed, answer, answer_cfg, limit):
        return WRONG
    return WRONG if form_differs(str(gold), gold_parsed, answer, answer_parsed, block, limit) else CORRECT


MAX_DISTINCT_BOXES = 4  # boxes of different text judged one by one; more is a hedge


def _boxes_disagree(gold: str, gold_parsed: list, answer: str, answer_cfg, limit: int | None) -> bool:
    """Several boxes for a gold of one value, one of them not the gold: a hedge, wrong however math-verify reads them
    together (it paid `\\boxed{12 \\text{ cm}} \\boxed{13 \\text{ cm}}` for 12, reading the first)."""
    from math_verify import parse, verify

    contents = list(dict.fromkeys(content.strip() for content, _ in boxed(answer) if content.strip()))
    if len(contents) <= 1 or re.search(r",|\\pm|\\mp|\band\b|\bor\b", gold):
        return False
    if len(contents) > MAX_DISTINCT_BOXES:
        return True
    for content in contents:
        read = parse(f"\\boxed{{{content}}}", extraction_config=answer_cfg, extraction_mode="first_match",
                     parsing_timeout=limit)
        if not read or not verify(gold_parsed, one_reading(read), timeout_seconds=limit):
            return True
    return False


def _judge_reporting(gold: str, answer: str, limit: int | None) -> tuple[str, str | None]:
    """(outcome, None), or (WRONG, "ExceptionType: message") when judging raised: the sample counts as wrong and the
    caller reports the error, so that a bug cannot pass for a low reward."""
    try:
        return judge(gold, answer, limit), None
    except Exception as e:  # noqa: BLE001 - reported by the caller, once per exception type
        return WRONG, f"{type(e).__name__}: {str(e)[:300]}"


def _report_error(error: str) -> None:
    """Logs an exception that turned a sample into WRONG, once per exception type."""
    log_once(logger, "error:" + error.split(":", 1)[0],
             "Verifying a math answer raised %s; the sample counts as wrong (logged once per exception type).", error)


# --------------------------------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------------------------------
# A worker is `python -c _WORKER_CODE FD PATH`: the parent's sys.path, then this module, then the loop. Nothing of the
# caller's __main__ is imported (multiprocessing's spawn would re-run an unguarded script's top level).
_WORKER_CODE = (
    "import json, sys; fd, path = int(sys.argv[1]), json.loads(sys.argv[2]); sys.argv[1:] = []; sys.path[:] = path; "
    "from r1kit.rewards.verify import worker_main; worker_main(fd)"
)


def _exit_with_parent() -> None:
    """A worker busy in sympy would not notice its parent's death on the socket: watch the parent id instead."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def worker_main(fd: int) -> None:
    """A verifier worker's loop over the socket `fd`: READY, then one (outcome, error) message per sample."""

    # Ctrl-C reaches the whole process group, and a preemption's SIGTERM every process of the job (Slurm): the
    # parent decides (it finishes its step and saves, and needs its verifiers for that step). The watchdog below
    # ends a worker whose parent is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, daemon=True, name="r1kit-verifier-watchdog").start()
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that the limit is the parent's; it is
    conn = Connection(fd)
    judge("1", "$1$")  # import math-verify and sympy before the first deadline starts
    conn.send(READY)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        for gold, answer in task:  # one message per sample, so the parent's deadline is per sample
            conn.send(_judge_reporting(gold, answer, None))


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection
    task: deque = field(default_factory=deque)  # indices of the samples it has yet to answer
    deadline: float = 0.0
    started: bool = False  # has it said READY?


class PoolUnavailable(RuntimeError):
    """Worker processes cannot start here (no Python executable to run, no process creation)."""


class VerifierPool:
    """A pool of math-verify worker processes with a hard per-sample time limit.

    Args:
        workers (`int`): number of worker processes.
        timeout (`float`): default seconds one sample may take before its worker is killed and the sample scores
            TIMEOUT; `map(..., timeout=...)` overrides it for one call.
    """

    STARTUP_SECONDS = 120.0  # for a fresh worker to import math-verify and sympy and say READY

    def __init__(self, workers: int, timeout: float = DEFAULT_TIMEOUT):
        self.workers_wanted = max(1, workers)
        self.timeout = timeout
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.timeouts = 0
        self.unavailable = ""  # why worker processes cannot run here, once known

    def _start_worker(self) -> _Worker:
        parent, child = socket.socketpair()
        try:
            # The pool is the parallelism (the trainer owns the cores); no secret of the trainer's reaches a worker,
            # whose parser (sympy's parse_expr) evals what it parses of an answer.
            env = {**without_secrets(), "OMP_NUM_THREADS": "1"}
            command = [sys.executable, "-c", _WORKER_CODE, str(child.fileno()), json.dumps(sys.path)]
            process = subprocess.Popen(command, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=env)
        except (OSError, ValueError) as e:  # no executable (embedded Python), no process creation
            parent.close()
            raise PoolUnavailable(f"cannot start a math-verify worker process ({e})") from None
        finally:
            child.close()
        return _Worker(process, Connection(parent.detach()))

    def _kill(self, worker: _Worker) -> None:
        worker.process.kill()
        try:
            worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        worker.conn.close()

    def warm_up(self) -> None:
        """Starts the workers now, so their imports overlap with whatever the caller does next."""
        with self._lock:
            try:
                while not self.unavailable and len(self._idle) < self.workers_wanted:
                    self._idle.append(self._start_worker())
            except PoolUnavailable as e:
                self.unavailable = str(e)

    def close(self) -> None:
        for worker in self._idle:  # no lock: at exit, a daemon thread may hold it forever
            self._kill(worker)
        self._idle.clear()

    def map(self, pairs: list[tuple[str, str]], timeout: float | None = None, chunk: int = 8) -> list[str]:
        """Judges every (gold, answer) pair, each within `timeout` seconds (default: the pool's); results in input
        order. Raises `PoolUnavailable` when worker processes cannot start here."""
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            if self.unavailable:
                raise PoolUnavailable(self.unavailable)
            busy: dict[object, _Worker] = {}
            try:
                return self._map(pairs, limit, chunk, busy)
            except PoolUnavailable as e:
                self.unavailable = str(e)
                for worker in [*busy.values(), *self._idle]:
                    self._kill(worker)
                self._idle.clear()
                raise

    def _map(self, pairs: list[tuple[str, str]], limit: float, chunk: int, busy: dict) -> list[str]:
        results: list[str | None] = [None] * len(pairs)
        # Chunks amortise the pipe round trip while keeping every worker busy.
        size = max(1, min(chunk, len(pairs) // (2 * self.workers_wanted) or 1))
        pending = deque(deque(range(i, min(i + size, len(pairs)))) for i in range(0, len(pairs), size))
        while pending or busy:
            while pending and len(busy) < self.workers_wanted:
                worker = self._idle.pop() if self._idle else self._start_worker()
                worker.task = pending.popleft()
                worker.conn.send([pairs[i] for i in worker.task])
                worker.deadline = time.monotonic() + (limit if worker.started else self.STARTUP_SECONDS)
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
                        raise PoolUnavailable(
                            f"a math-verify worker process exited at start-up (exit code {worker.process.returncode})"
                        ) from None
                    _report_error("WorkerDied: a math-verify worker process died on a sample (out of memory?)")
                    results[worker.task.popleft()] = WRONG
                    if worker.task:
                        pending.append(worker.task)
                    continue
                worker.deadline = time.monotonic() + limit
                if message == READY:
                    worker.started = True
                    continue
                outcome, error = message
                if error:
                    _report_error(error)
                results[worker.task.popleft()] = outcome
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


def get_pool(workers: int | None = None) -> VerifierPool:
    """The process-wide verifier pool (started on first use, closed at exit). Its time limit is given per call."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = VerifierPool(workers or default_workers())
            atexit.register(_POOL.close)
        if workers:
            _POOL.workers_wanted = workers
        return _POOL


def _silence_math_verify_timeout_notice() -> None:
    """math-verify warns, once, that a disabled limit is the caller's business: r1kit has just said so itself."""
    import math_verify.grader
    import math_verify.parser

    for module in (math_verify.grader, math_verify.parser):
        if hasattr(module, "TIMEOUT_WARNING_SHOWN"):
            module.TIMEOUT_WARNING_SHOWN = True


def _judge_in_process(pairs: list[tuple[str, str]], why: str, timeout: float) -> list[str]:
    """Fallback when worker processes cannot run: math-verify in this process. Its signal-based time limit (rounded up
    to whole seconds) works on the main thread only; elsewhere the same verdicts come without a hard limit."""
    log_once(logger, "in-process", "%s; verifying math answers in-process.", why)
    if threading.current_thread() is threading.main_thread():
        limit = max(1, math.ceil(timeout))
    else:
        limit = None
        log_once(
            logger,
            "no-limit",
            "Verifying math answers in-process off the main thread: no hard time limit applies there "
            "(math-verify's limit needs the main thread's signals).",
        )
        _silence_math_verify_timeout_notice()
    out = []
    for gold, answer in pairs:
        outcome, error = _judge_reporting(gold, answer, limit)
        if error:
            _report_error(error)
        out.append(outcome)
    return out


def judge_batch(
    golds: list, answers: list[str], timeout: float = DEFAULT_TIMEOUT, workers: int | None = None
) -> list[str]:
    """Judges a batch: CORRECT / WRONG / UNPARSEABLE_GOLD / TIMEOUT per pair, each within `timeout` seconds. A missing
    gold is UNPARSEABLE_GOLD."""
    outcomes: list[str | None] = [UNPARSEABLE_GOLD if g is None or str(g).strip() == "" else None for g in golds]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if todo:
        pairs = [(str(golds[i]), answers[i] or "") for i in todo]
        try:
            judged = get_pool(workers).map(pairs, timeout=timeout)
        except PoolUnavailable as e:
            judged = _judge_in_process(pairs, str(e), timeout)
        for i, outcome in zip(todo, judged):
            outcomes[i] = outcome
    return outcomes  # type: ignore[return-value]
