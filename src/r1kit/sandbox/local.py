"""The `local` provider: runs untrusted programs on this machine, in a bubblewrap jail (see `jail.py`), with no
account anywhere.

Each program gets a fresh jail and, inside it, one fresh interpreter running r1kit's harness (`_harness.py`), which
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

import functools
import logging
import marshal
import os
import random
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from r1kit.sandbox import SANDBOX_ERROR, Program, TestResult, harness_request, parse_reply, program_budget
from r1kit.sandbox.jail import (
    LAUNCHER,
    ROOT_UID_RANGE,
    bwrap_arguments,
    create_cgroups,
    find_bwrap,
    interpreter,
    remove_cgroups,
    require_jail,
    seccomp_filter,
)

logger = logging.getLogger(__name__)

HARNESS = Path(__file__).with_name("_harness.py")
STARTUP_SECONDS = 15.0  # jail + interpreter start, generous for a loaded machine
JAIL_OVERHEAD_MB = 64
COMPILER_MB = 1024
COMPILE_SECONDS = 60.0
_UNSANDBOXED_WARNED = threading.Event()


def jail_command(tmp_bytes: int, seccomp_fd: int | None, args: list[str], cgroups: list[str] | None = None) -> list[str]:
    """The command that runs the base interpreter with `args` inside a fresh jail: bwrap directly for an ordinary
    user; for root, the launcher stage first, which joins `cgroups` and drops to a host uid of the jail's own."""
    bwrap = find_bwrap()
    executable, prefix = interpreter()
    if os.geteuid() != 0:
        return [bwrap, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix), executable, "-I", "-S", *args]
    bwrap_root = Path(bwrap).parents[2] if Path(bwrap).parent.name == "_bin" else Path(bwrap).parent  # binary + its libs
    bwrap_in_view = "@bwrap/" + os.path.relpath(bwrap, bwrap_root)
    uid = random.randrange(*ROOT_UID_RANGE)
    return [
        sys.executable, "-I", "-S", str(LAUNCHER), str(uid), ",".join(cgroups or []) or "-",
        f"{prefix}=python", f"{bwrap_root}=bwrap", "--",
        bwrap_in_view, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix, source_prefix="@python"),
        executable, "-I", "-S", *args,
    ]


@functools.lru_cache(maxsize=1)
def harness_source() -> str:
    return HARNESS.read_text()


def _seccomp_fd() -> int | None:
    program = seccomp_filter()
    if program is None:
        return None
    fd = os.memfd_create("r1kit-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_in_jail(args: list[str], stdin: bytes, timeout: float, tmp_bytes: int = 64 << 20,
                memory_bytes: int | None = None, max_processes: int = 64) -> tuple[int, bytes, bytes]:
    """Runs the base interpreter with `args` in a fresh jail; (exit code, stdout, stderr). Raises
    subprocess.TimeoutExpired after `timeout` seconds (the jail is killed). As root, where cgroups are usable, the
    jail's whole tree is capped at `memory_bytes` (processes and /tmp together) and `max_processes` + 8."""
    cgroups = create_cgroups(f"r1kit-{os.getpid()}-{uuid.uuid4().hex[:12]}", memory_bytes, max_processes + 8) if memory_bytes else []
    try:
        return _run_in_jail(args, stdin, timeout, tmp_bytes, cgroups)
    finally:
        remove_cgroups(cgroups)


def _run_in_jail(args, stdin, timeout, tmp_bytes, cgroups):
    fd = _seccomp_fd()
    try:
        proc = subprocess.Popen(jail_command(tmp_bytes, fd, args, cgroups), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=[fd] if fd is not None else [], cwd="/",
                                env={"PATH": "/usr/bin:/bin"})
    finally:
        if fd is not None:
            os.close(fd)
    try:
        stdout, stderr = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        e.output, e.stderr = proc.communicate()
        raise
    return proc.returncode, stdout, stderr


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
        self.sandbox_errors = 0
        if isolate:
            require_jail()
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
        try:
            if self.isolate:
                tmp_bytes = (program.memory_mb - request["memory_mb"]) << 20
                # the harness, bwrap and (for C++) the compiler live in the same cap as the program
                memory = (max(program.memory_mb, COMPILER_MB if program.language == "cpp" else 0) + JAIL_OVERHEAD_MB) << 20
                code, stdout, stderr = run_in_jail(["-c", harness_source()], stdin, budget, tmp_bytes, memory,
                                                   self.max_processes)
            else:
                proc = subprocess.run([sys.executable, "-I", "-S", "-c", harness_source()], input=stdin,
                                      capture_output=True, timeout=budget, cwd="/",
                                      env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
                code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:  # stalled: decided by whether the harness got ready
            code, stdout, stderr = None, e.output or b"", e.stderr or b""
        except OSError as e:
            return self._failed(program, f"could not start the jail: {e}")
        try:
            return parse_reply(program, stdout.decode("utf-8", "replace").splitlines())
        except ValueError:  # no `ready`: the jail or the harness never started
            why = stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {code}"
            return self._failed(program, f"the jail did not start: {why}")

    def _failed(self, program: Program, why: str) -> list[TestResult]:
        self.sandbox_errors += 1
        logger.warning("Local sandbox error (infrastructure, scored None): %s", why)
        return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]
