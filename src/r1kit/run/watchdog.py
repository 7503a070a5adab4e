"""Every wait has a bound, and a stop signal always wins.

A training process can wait forever in places no timeout of its own covers: a collective another rank never joins,
a generator or a tool call that never answers, a step that never ends after SIGTERM. `Watchdog` is a thread of each
process that watches its training from outside the wait: every step end beats it (`beat`), and a process whose step
has not ended within `stall_timeout` seconds, or within `stop_grace_seconds` of a stop signal, is stopped there. It
writes one line naming its rank, the step and what its main thread was doing (read from the thread's stack: the
innermost call and the innermost r1kit call, e.g. `all_reduce` from `passchoice.py`), records the interruption, and
ends the process with exit code 75 without saving anything more: the last checkpoint stays as it was, and the same
command resumes from it. Every rank has its own watchdog, so each says what it was doing.

A save under way when the bound passes (a checkpoint being written) gets one more grace period: a checkpoint cut in
half is refused by the resume anyway, but one nearly written is worth the wait.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from r1kit.console import EXIT_INTERRUPTED, STARTED_BY, exit_now

POLL_SECONDS = 0.5
PACKAGE = str(Path(__file__).resolve().parents[1])  # r1kit's own source folder


class Watchdog:
    """The bound on one process's training. `clock` and `exit` are injectable (tests)."""

    def __init__(self, stall_seconds: float, grace_seconds: float, rank: int,
                 record: Callable[..., None] = lambda **fields: None, clock: Callable[[], float] = time.monotonic,
                 exit: Callable[[int], None] = exit_now):
        self.stall_seconds, self.grace_seconds, self.rank = stall_seconds, grace_seconds, rank
        self.record, self.clock, self.exit = record, clock, exit
        self.step = 0
        self.stall_deadline = math.inf  # the current step's bound (`beat`)
        self.grace_deadline = math.inf  # a stop signal's bound (`stopping`): no later beat moves it
        self.signal_name = ""
        self.saving = False  # a checkpoint is being written (set by the run between its step end and its save)
        self.fired = False
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def deadline(self) -> float:
        return min(self.stall_deadline, self.grace_deadline)

    @property
    def why(self) -> str:
        if self.grace_deadline <= self.stall_deadline:
            return (f"a stop signal ({self.signal_name}) came and the step did not end and save within "
                    f"stop_grace_seconds ({self.grace_seconds:g} s)")
        return f"step {self.step + 1} did not end within stall_timeout ({self.stall_seconds:g} s)"

    # --- what the run tells it ------------------------------------------------------------------------------------
    def start(self, step: int = 0) -> None:
        self.beat(step)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="r1kit-watchdog", daemon=True)
            self._thread.start()

    def beat(self, step: int) -> None:
        """A step ended (or training began at `step`): the next has `stall_timeout` seconds (a stop signal's grace
        still bounds it)."""
        self.step = step
        self.stall_deadline = self.clock() + self.stall_seconds

    def stopping(self, signal_name: str) -> None:
        """A stop signal arrived: the step has `stop_grace_seconds` to end and save, whatever steps end meanwhile."""
        if math.isinf(self.grace_deadline):
            self.grace_deadline, self.signal_name = self.clock() + self.grace_seconds, signal_name

    def training_ended(self) -> None:
        """No step to wait for any more: only a stop signal's grace bounds what follows (the final model)."""
        self.stall_deadline = math.inf

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    # --- the watch ------------------------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self.clock() < self.deadline:
                continue
            if self.saving and not self.fired:  # one more grace period for a checkpoint being written
                self.fired = True
                extended = self.clock() + self.grace_seconds  # (a bound not set stays unset: max with infinity)
                self.stall_deadline = max(self.stall_deadline, extended)
                self.grace_deadline = max(self.grace_deadline, extended)
                continue
            self.expire()
            return

    def expire(self) -> None:
        doing = activity(self._main)
        line = (f"r1kit: rank {self.rank}: {self.why}: stopping now, unsaved, after step {self.step}; it was "
                f"{doing}. The last checkpoint is intact: the same command resumes from it (exit code "
                f"{EXIT_INTERRUPTED}).")
        try:
            os.write(2, ("\n" + line + "\n").encode())  # (a new line: a progress bar may hold the current one)
        except OSError:
            pass
        try:
            self.record(status="interrupted", unsaved=True, hung=doing, reason=self.why)
        finally:
            self.exit(EXIT_INTERRUPTED)


def activity(thread_id: int | None) -> str:
    """What a thread is doing, from its stack: its innermost call, and the innermost call in r1kit's own code."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return "not running"
    stack = []
    while frame is not None:
        stack.append((frame, frame.f_lineno))
        frame = frame.f_back
    return described(stack)


def failed_in(error: BaseException) -> str:
    """Where `error` was raised, as `activity` says it: the innermost call and the innermost r1kit call."""
    return described(list(reversed(list(traceback.walk_tb(error.__traceback__))))) or "unknown"


def described(stack: list) -> str:
    """`stack`: (frame, line) pairs, innermost first."""
    if not stack:
        return ""
    innermost = where(*stack[0])
    own = next((where(frame, line) for frame, line in stack
                if frame.f_code.co_filename.startswith(PACKAGE) and frame.f_code.co_filename != __file__), None)
    return f"in {innermost}" + (f", called from {own}" if own and own != innermost else "")


def where(frame, line: int) -> str:
    short = "/".join(Path(frame.f_code.co_filename).parts[-2:])
    return f"{frame.f_code.co_name} ({short}:{line})"


def lost_a_peer(error: BaseException, world_size: int) -> bool:
    """Whether `error` is a collective that failed because another rank is gone or never came (its process ended, a
    timeout of `ddp_timeout`): the run is interrupted, not failed; the rank that ended first says why."""
    if world_size <= 1:
        return False
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and isinstance(error, getattr(distributed, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        sign in text for sign in ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                                  "Timed out waiting", "timed out", "NCCL communicator was aborted"))


def watch_launcher(rank: int, launcher: int = STARTED_BY, exit: Callable[[int], None] = exit_now,
                   poll_seconds: float = 1.0, record: Callable[..., None] = lambda **fields: None
                   ) -> threading.Thread | None:
    """A worker of a multi-process launch stops at once when its launcher is gone (`kill -9` of `r1kit launch`'s
    process group: torch's agent starts each worker in a session of its own, so nothing else reaches them, and they
    trained on to the end, racing any rerun on the same folder). Checked from a thread, every `poll_seconds`: the
    worker's parent is no longer the process that started it. Exit 75 unsaved: the last checkpoint stays intact."""
    if launcher <= 1:
        return None

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != launcher:
                line = (f"r1kit: rank {rank}: its launcher (pid {launcher}) is gone: stopping now, unsaved; the last "
                        f"checkpoint is intact and the same command resumes from it (exit code {EXIT_INTERRUPTED}).")
                try:
                    os.write(2, ("\n" + line + "\n").encode())
                except OSError:
                    pass
                try:
                    record(status="interrupted", unsaved=True, reason="its launcher is gone")
                finally:
                    exit(EXIT_INTERRUPTED)
                return

    thread = threading.Thread(target=watch, name="r1kit-launcher-watch", daemon=True)
    thread.start()
    return thread
