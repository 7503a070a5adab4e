"""The `local` provider: runs untrusted programs on this machine, isolated, with no account anywhere.

Each program gets one fresh interpreter (`_harness.py`, started with `python -I -S` and an environment of only PATH
and LANG) which runs all its tests, each in its own child process with CPU-time, wall-time, address-space, process,
open-file and output-size limits. Where the machine allows (root, or unprivileged user namespaces), the harness starts
in new network, PID and mount namespaces: no network at all, no view of other processes, a private /tmp, and the
trainer's working directory hidden; as root, test processes also run under an unprivileged uid of their own.
Elsewhere r1kit warns once that network isolation is off and keeps the resource limits.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from r1kit.sandbox import SANDBOX_ERROR, Program, TestResult, harness_request, results_from_reply

logger = logging.getLogger(__name__)

HARNESS = Path(__file__).with_name("_harness.py")
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_NAMESPACE_ARGS: list[str] | None = None
_NAMESPACE_LOCK = threading.Lock()


def namespace_prefix() -> list[str]:
    """The `unshare` command line that isolates a harness here, or [] (with a one-time warning) when none works."""
    global _NAMESPACE_ARGS
    with _NAMESPACE_LOCK:
        if _NAMESPACE_ARGS is not None:
            return _NAMESPACE_ARGS
        unshare = shutil.which("unshare")
        candidates = [[unshare, "--net", "--pid", "--fork", "--mount", "--kill-child"]] if unshare else []
        if unshare and os.geteuid() != 0:
            candidates = [[unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount", "--kill-child"]]
        _NAMESPACE_ARGS = []
        for args in candidates:
            try:
                if subprocess.run([*args, "true"], capture_output=True, timeout=10).returncode == 0:
                    _NAMESPACE_ARGS = args
                    break
            except (OSError, subprocess.TimeoutExpired):
                pass
        if not _NAMESPACE_ARGS:
            logger.warning(
                "The local code sandbox cannot create namespaces here (needs root or unprivileged user namespaces): "
                "network isolation is OFF; programs keep their time, memory, process and output limits."
            )
        return _NAMESPACE_ARGS


def _hidden_paths() -> list[str]:
    """Folders a program must not see: the trainer's working directory, unless the interpreter lives inside it."""
    cwd = os.path.realpath(os.getcwd())
    base = os.path.realpath(sys.base_prefix)
    if cwd == "/" or base == cwd or base.startswith(cwd + os.sep):
        return []
    return [cwd]


class LocalProvider:
    """Runs programs on this machine.

    Args:
        num_parallel (`int` or `None`, defaults to the number of cores): programs run at once (per process).
        max_output (`int`, defaults to 16 MiB): bytes of output a test may write.
        max_processes (`int`, defaults to `64`): processes a program may have at once.
        isolate (`bool`, defaults to `True`): use namespaces where possible.
    """

    def __init__(self, num_parallel: int | None = None, max_output: int = 16 << 20, max_processes: int = 64, isolate: bool = True):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.num_parallel = num_parallel or cores
        self.max_output = max_output
        self.max_processes = max_processes
        self.isolate = isolate
        self.sandbox_errors = 0

    def execute(self, programs: list[Program]) -> list[list[TestResult]]:
        if not programs:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(self.num_parallel or 1, len(programs)))) as pool:
            return list(pool.map(self._run_program, programs))

    def _command(self) -> tuple[list[str], bool]:
        prefix = namespace_prefix() if self.isolate else []
        return [*prefix, sys.executable, "-I", "-S", str(HARNESS)], bool(prefix)

    def _request(self, program: Program, namespaced: bool) -> dict:
        uid = random.randrange(200_000, 2_000_000) if os.geteuid() == 0 else 0  # a uid of its own (root only)
        if namespaced and "--user" in namespace_prefix():
            uid = 0  # inside a user namespace only root is mapped
        hide = _hidden_paths() if namespaced else []
        return harness_request(program, uid, self.max_output, self.max_processes, hide)

    def _run_program(self, program: Program) -> list[TestResult]:
        if not program.inputs:
            return []
        cmd, namespaced = self._command()
        env = {**SAFE_ENV, "R1KIT_SANDBOX_NAMESPACED": "1" if namespaced else ""}
        request = self._request(program, namespaced)
        budget = 60 + len(program.inputs) * (program.time_limit + 2)  # compile + every test at its limit
        try:
            proc = subprocess.run(
                cmd, input=json.dumps(request), capture_output=True, text=True, env=env, cwd="/", timeout=budget
            )
            return results_from_reply(program, json.loads(proc.stdout))
        except (OSError, ValueError, KeyError, TypeError, subprocess.TimeoutExpired) as e:
            stderr = getattr(e, "stderr", None) or (proc.stderr if "proc" in locals() else "")
            return self._failed(program, f"sandbox failed: {e}; {str(stderr)[-500:]}")

    def _failed(self, program: Program, why: str) -> list[TestResult]:
        self.sandbox_errors += 1
        logger.warning("Local sandbox error: %s", why)
        return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]
