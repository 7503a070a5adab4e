"""The `local` provider: runs untrusted programs on this machine, in a bubblewrap jail (see `jail.py`, which also starts each jail), with no
account anywhere.

Each program gets a fresh jail and, inside it, one fresh interpreter running r1kit's harness (`scripts/harness.py`), which
runs every test in its own child with per-test limits and streams one reply line per test. The trainer reads the
reply and judges the outputs; expected outputs never enter the jail.

Failure policy, by cause: a jail that cannot start (no harness `ready` line) is an infrastructure failure, scored
`sandbox_error` (the rewards make it `None`, count it and warn). Once the harness said `ready`, only the program can
make anything fail: a harness it killed, stalled or confused, a reply cut short or malformed, all make the remaining
tests `runtime_error`, i.e. wrong.

Where no jail can run, the provider refuses to start (`jail.require_jail`), unless it was built with
`isolate=False` (the recipe key `allow_unsandboxed_code_execution: true`), which runs the harness directly with only
its resource limits and says so loudly.
"""

from __future__ import annotations

import logging
import marshal
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from r1kit.sandbox.jail import cap_warning, collect, require_jail, run_in_jail
from r1kit.sandbox.program import (
    SANDBOX_ERROR,
    NoReply,
    Program,
    ReplyReader,
    TestResult,
    harness_request,
    harness_source,
    program_budget,
)

logger = logging.getLogger(__name__)

STARTUP_SECONDS = 15.0  # jail + interpreter start, generous for a loaded machine
JAIL_OVERHEAD_MB = 64
COMPILER_MB = 1024
COMPILE_SECONDS = 60.0
_UNSANDBOXED_WARNED = threading.Event()
_UNCAPPED_WARNED = threading.Event()

OUTPUT_TESTS = 4  # a program's tests may print 4 x max_output in all (stdout and stderr of every test together)


def reply_limit(program: Program, max_output: int) -> int:
    """The most the trainer reads from a program's harness: every test's report, plus output (base64) up to
    OUTPUT_TESTS x `max_output` for the whole program. The trainer holds a few copies of what it reads while it
    judges, so this bounds its memory per program; past it the remaining tests are cut short (wrong)."""
    return (1 << 20) + len(program.inputs) * 8192 + OUTPUT_TESTS * (max_output + 4096) * 4 // 3


class LocalProvider:
    """Runs programs on this machine, each in its own jail.

    Args:
        num_parallel (`int` or `None`, defaults to the number of cores): programs run at once (per process).
        max_output (`int`, defaults to 16 MiB): bytes of stdout (and of stderr) a test may write.
        max_processes (`int`, defaults to `64`): processes a program may have at once.
        tmp_mb (`int`, defaults to `64`): size of the jail's writable /tmp, in MiB; taken out of the program's
            `memory_mb`, so memory plus files stay within it.
        isolate (`bool`, defaults to `True`): `False` runs programs without a jail (only resource limits). Never do
            this with model-written code on a machine you care about.
    """

    def __init__(self, num_parallel: int | None = None, max_output: int = 16 << 20, max_processes: int = 64,
                 tmp_mb: int = 64, isolate: bool = True):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.num_parallel = num_parallel or cores
        self.max_output = max_output
        self.max_processes = max_processes
        self.tmp_mb = tmp_mb
        self.isolate = isolate
        if isolate:
            require_jail()
            warning = cap_warning(max_processes)
            if warning and not _UNCAPPED_WARNED.is_set():
                _UNCAPPED_WARNED.set()
                logger.warning(warning)
        elif not _UNSANDBOXED_WARNED.is_set():
            _UNSANDBOXED_WARNED.set()
            logger.warning("allow_unsandboxed_code_execution is set: model-written programs run WITHOUT a jail, with "
                           "your user's access to files, network and processes. Only resource limits apply.")

    def execute(self, programs: list[Program]) -> list[list[TestResult]]:
        if not programs:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(self.num_parallel or 1, len(programs)))) as pool:
            return list(pool.map(self._run_program, programs))

    def _request(self, program: Program) -> dict:
        tmp_mb = min(self.tmp_mb, max(8, program.memory_mb // 4))
        request = harness_request(program, self.max_output, self.max_processes)
        request["memory_mb"] = max(16, program.memory_mb - tmp_mb) if self.isolate else program.memory_mb
        request["contained"] = self.isolate
        return request

    def _run_program(self, program: Program) -> list[TestResult]:
        if not program.inputs:
            return []
        request = self._request(program)
        budget = program_budget(program, STARTUP_SECONDS, COMPILE_SECONDS)
        stdin = marshal.dumps(request)
        limit = reply_limit(program, program.output_limit(self.max_output))
        reader = ReplyReader(program)  # judges each line as it arrives: the trainer never holds the whole reply
        try:
            if self.isolate:
                tmp_bytes = (program.memory_mb - request["memory_mb"]) << 20
                # the harness, bwrap and (for C++, until it has compiled) the compiler live in the same cap as the program
                memory = (program.memory_mb + JAIL_OVERHEAD_MB) << 20
                compile_memory = (max(program.memory_mb, COMPILER_MB) + JAIL_OVERHEAD_MB) << 20
                cpp = program.language == "cpp"
                done = run_in_jail(["-c", harness_source()], stdin, budget, tmp_bytes, compile_memory if cpp else memory,
                                   self.max_processes, limit, memory_after_compile=memory if cpp else None,
                                   on_line=reader.feed)
            else:
                proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", harness_source()], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", start_new_session=True,
                                        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
                done = collect(proc, stdin, budget, limit, on_line=reader.feed)
        except OSError as e:
            return self._failed(program, f"could not start the jail: {e}")
        if done.stdout:  # an unfinished last line: malformed, so the program's doing once the harness was ready
            reader.feed(done.stdout)
        try:  # stopped or not: decided by whether the harness got ready
            return reader.results()
        except NoReply:  # the jail or the harness never started
            why = done.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {done.code}"
            return self._failed(program, f"the jail did not start: {why}")

    def _failed(self, program: Program, why: str) -> list[TestResult]:
        logger.warning("Local sandbox error (infrastructure, scored None): %s", why)
        return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]
