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
import itertools
import logging
import marshal
import os
import random
import selectors
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from r1kit.sandbox import SANDBOX_ERROR, NoReply, Program, TestResult, harness_request, parse_reply, program_budget
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
    set_memory_cap,
)

logger = logging.getLogger(__name__)

HARNESS = Path(__file__).with_name("_harness.py")
STARTUP_SECONDS = 15.0  # jail + interpreter start, generous for a loaded machine
JAIL_OVERHEAD_MB = 64
COMPILER_MB = 1024
COMPILE_SECONDS = 60.0
_UNSANDBOXED_WARNED = threading.Event()


def jail_command(tmp_bytes: int, seccomp_fd: int | None, args: list[str], cgroups: list[str] | None = None,
                 read_only: dict[str, str] | None = None) -> list[str]:
    """The command that runs the base interpreter with `args` inside a fresh jail: bwrap directly for an ordinary
    user; for root, the launcher stage first, which joins `cgroups` and drops to a host uid of the jail's own.
    `read_only` maps host folders to the paths where the jail shows them, read-only."""
    bwrap = find_bwrap()
    executable, prefix = interpreter()
    read_only = read_only or {}
    if os.geteuid() != 0:
        return [bwrap, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix, read_only=list(read_only.items())),
                executable, "-I", "-S", *args]
    exposed = {f"ro{i}": (source, target) for i, (source, target) in enumerate(read_only.items())}  # via the launcher
    bwrap_root = Path(bwrap).parents[2] if Path(bwrap).parent.name == "_bin" else Path(bwrap).parent  # binary + its libs
    bwrap_in_view = "@bwrap/" + os.path.relpath(bwrap, bwrap_root)
    uid = next_jail_uid()
    return [
        sys.executable, "-I", "-S", str(LAUNCHER), str(uid), ",".join(cgroups or []) or "-",
        f"{prefix}=python", f"{bwrap_root}=bwrap", *(f"{source}={name}" for name, (source, _) in exposed.items()), "--",
        bwrap_in_view, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix, source_prefix="@python",
                                        read_only=[(f"@{name}", target) for name, (_, target) in exposed.items()]),
        executable, "-I", "-S", *args,
    ]


_UIDS = itertools.count(random.randrange(ROOT_UID_RANGE[1] - ROOT_UID_RANGE[0]))


def next_jail_uid() -> int:
    """A host uid for the next jail started by root: consecutive in this process (jails running side by side never
    share one, so never a process limit), from a random start (other processes pick other ranges)."""
    return ROOT_UID_RANGE[0] + next(_UIDS) % (ROOT_UID_RANGE[1] - ROOT_UID_RANGE[0])


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


class Finished:
    """What came back from a jail: exit code (None when it was stopped), stdout, stderr, and why it was stopped."""

    def __init__(self, code: int | None, stdout: bytes, stderr: bytes, stopped: str | None = None):
        self.code, self.stdout, self.stderr, self.stopped = code, stdout, stderr, stopped


def collect(proc: subprocess.Popen, stdin: bytes, timeout: float, max_stdout: int, max_stderr: int = 64 << 10,
            on_compiled=None) -> Finished:
    """Feeds `stdin` and reads stdout and stderr until the process ends, at most `timeout` seconds and `max_stdout` /
    `max_stderr` bytes: past either, the whole process group is killed (a jail cannot make the trainer wait or hold
    memory beyond what its tests may legitimately print). `on_compiled()` is called once the harness reports its
    compile, before any test runs."""

    def feed():
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:  # the jail ended before reading its request
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    chunks = {proc.stdout: [], proc.stderr: []}
    sizes = {proc.stdout: 0, proc.stderr: 0}
    limits = {proc.stdout: max_stdout, proc.stderr: max_stderr}
    stopped = None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for stream in chunks:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "time"
                break
            for key, _ in selector.select(min(left, 1.0)):
                data = os.read(key.fileobj.fileno(), 1 << 16)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                sizes[key.fileobj] += len(data)
                if sizes[key.fileobj] > limits[key.fileobj]:
                    stopped = "output"
                    break
                chunks[key.fileobj].append(data)
                if on_compiled is not None and key.fileobj is proc.stdout and b'{"compile"' in b"".join(chunks[proc.stdout][-2:]):
                    on_compiled()
                    on_compiled = None
            if stopped:
                break
    if stopped:
        _kill_group(proc)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # cannot happen to a killed group; never wait for ever
        code = None
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    return Finished(None if stopped else code, b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr]), stopped)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)  # the launcher execs bwrap in a session of its own: bwrap and the harness under it
    except OSError:
        proc.kill()


def run_in_jail(args: list[str], stdin: bytes, timeout: float, tmp_bytes: int = 64 << 20,
                memory_bytes: int | None = None, max_processes: int = 64, max_stdout: int = 1 << 30,
                memory_after_compile: int | None = None, read_only: dict[str, str] | None = None) -> Finished:
    """Runs the base interpreter with `args` in a fresh jail, at most `timeout` seconds and `max_stdout` bytes of
    output. As root, where cgroups are usable, the jail's whole tree is capped at `memory_bytes` (processes and its
    tmpfs together) and `max_processes` + 8 processes. `read_only` maps host folders to jail paths (read-only)."""
    cgroups = create_cgroups(f"r1kit-{os.getpid()}-{uuid.uuid4().hex[:12]}", memory_bytes, max_processes + 8) if memory_bytes else []
    try:
        fd = _seccomp_fd()
        try:
            proc = subprocess.Popen(jail_command(tmp_bytes, fd, args, cgroups, read_only), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[fd] if fd is not None else [],
                                    cwd="/", env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
        finally:
            if fd is not None:
                os.close(fd)
        lower = None
        if cgroups and memory_after_compile:  # the compiler's allowance ends with the compile: tests get the program's
            def lower():
                set_memory_cap(cgroups, memory_after_compile)
        return collect(proc, stdin, timeout, max_stdout, on_compiled=lower)
    finally:
        remove_cgroups(cgroups)


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
        limit = reply_limit(program, self.max_output)
        try:
            if self.isolate:
                tmp_bytes = (program.memory_mb - request["memory_mb"]) << 20
                # the harness, bwrap and (for C++, until it has compiled) the compiler live in the same cap as the program
                memory = (program.memory_mb + JAIL_OVERHEAD_MB) << 20
                compile_memory = (max(program.memory_mb, COMPILER_MB) + JAIL_OVERHEAD_MB) << 20
                if program.language == "cpp":
                    done = run_in_jail(["-c", harness_source()], stdin, budget, tmp_bytes, compile_memory,
                                       self.max_processes, limit, memory_after_compile=memory)
                else:
                    done = run_in_jail(["-c", harness_source()], stdin, budget, tmp_bytes, memory, self.max_processes, limit)
            else:
                proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", harness_source()], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", start_new_session=True,
                                        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
                done = collect(proc, stdin, budget, limit)
        except OSError as e:
            return self._failed(program, f"could not start the jail: {e}")
        try:  # stopped or not: decided by whether the harness got ready
            return parse_reply(program, done.stdout.decode("utf-8", "replace").splitlines())
        except NoReply:  # the jail or the harness never started
            why = done.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {done.code}"
            return self._failed(program, f"the jail did not start: {why}")

    def _failed(self, program: Program, why: str) -> list[TestResult]:
        logger.warning("Local sandbox error (infrastructure, scored None): %s", why)
        return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]
