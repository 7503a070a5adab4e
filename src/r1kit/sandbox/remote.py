"""Remote back ends: Piston (HTTP), E2B and Morph (their routers over HTTP, or their SDKs).

Every request has an HTTP timeout and is retried with exponential back-off (and jitter) on connection errors, time
outs, 429 and 5xx answers; a request that still fails makes its tests `sandbox_error` (the rewards score them `None`
and count them), never a 0. E2B and Morph run r1kit's own test harness as the remote script, so their verdicts follow
the same rules as the local sandbox (whole-output comparison, a time limit per test, zero tests handled), and the SDK
calls use the keyword the SDKs accept (`language=`, not Open-R1's `languages=`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import marshal
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from itertools import cycle
from threading import Lock
from typing import Any

from r1kit.sandbox.program import (
    COMPILE_ERROR,
    MEMORY_LIMIT,
    PASSED,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    TIME_LIMIT,
    NoReply,
    Program,
    TestResult,
    harness_request,
    harness_source,
    judge,
    parse_reply,
    program_budget,
)

logger = logging.getLogger(__name__)


class RemoteError(RuntimeError):
    """A remote sandbox request that failed for good."""


def post_json(url: str, body: Any, timeout: float, retries: int = 3, backoff: float = 0.5) -> Any:
    """POSTs JSON and returns the decoded answer, retrying transient failures with exponential back-off."""
    data = json.dumps(body).encode()
    last: Exception | None = None
    for attempt in range(retries + 1):
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            if e.code < 500 and e.code != 429:  # the request itself is wrong: retrying will not help
                raise RemoteError(f"{url}: HTTP {e.code}: {e.read()[:300]!r}") from e
            last = e
        except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError, OSError) as e:
            last = e
        if attempt < retries:
            time.sleep(min(backoff * 2**attempt, 10.0) * random.uniform(0.9, 1.1))
    raise RemoteError(f"{url}: failed after {retries + 1} attempts: {last}")


def _failed(program: Program, why: str) -> list[TestResult]:
    logger.warning("Remote sandbox error: %s", why)
    return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]


# --------------------------------------------------------------------------------------------------------------------
# Piston
# --------------------------------------------------------------------------------------------------------------------
PISTON_LANGUAGES = {"python": ("python", "main.py"), "cpp": ("c++", "main.cpp")}


class PistonProvider:
    """Runs each test as one Piston `execute` request.

    Args:
        endpoints (`list[str]` or `str` or `None`): base URLs such as `http://host:2000/api/v2`; default: the
            comma-separated `PISTON_ENDPOINTS` variable.
        num_parallel (`int` or `None`, defaults to 2 per endpoint): requests in flight.
        request_timeout (`float`, defaults to `30.0`): seconds of HTTP timeout added to the test's time limit.
        retries (`int`, defaults to `3`): retries of a failed request.
    """

    def __init__(self, endpoints=None, num_parallel: int | None = None, request_timeout: float = 30.0, retries: int = 3):
        if endpoints is None:
            endpoints = os.environ.get("PISTON_ENDPOINTS", "")
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not endpoints:
            raise ValueError("the piston provider needs endpoints: set PISTON_ENDPOINTS=http://host:2000/api/v2[,...]")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._next = cycle(self.endpoints)
        self._lock = Lock()
        self.num_parallel = num_parallel or 2 * len(self.endpoints)
        self.request_timeout = request_timeout
        self.retries = retries

    def _endpoint(self) -> str:
        with self._lock:
            return next(self._next)

    def execute(self, programs: list[Program]) -> list[list[TestResult]]:
        jobs = [(p, i) for p in programs for i in range(len(p.inputs))]
        with ThreadPoolExecutor(max_workers=max(1, self.num_parallel)) as pool:
            flat = list(pool.map(lambda job: self._run_test(*job), jobs))
        out, k = [], 0
        for p in programs:
            out.append(flat[k : k + len(p.inputs)])
            k += len(p.inputs)
        return out

    def _run_test(self, program: Program, index: int) -> TestResult:
        if program.language not in PISTON_LANGUAGES:
            return TestResult(SANDBOX_ERROR, stderr=f"piston: unsupported language {program.language}")
        if program.output_file:  # Piston returns stdout only: a file-I/O program cannot be judged there
            return TestResult(SANDBOX_ERROR, stderr=f"piston: cannot read back {program.output_file} (file I/O)")
        language, filename = PISTON_LANGUAGES[program.language]
        per_test = program.test_files[index] if index < len(program.test_files) else {}
        files = {**program.files, **per_test}
        body = {
            "language": language,
            "version": "*",
            "files": [{"name": filename, "content": program.code}, *({"name": n, "content": c} for n, c in files.items())],
            "stdin": program.inputs[index],
            "args": program.argv,
            "run_timeout": int(program.time_limit * 1000),
            "compile_timeout": 60_000,
            "run_memory_limit": program.memory_mb << 20,
        }
        try:
            answer = post_json(f"{self._endpoint()}/execute", body, program.time_limit + self.request_timeout, self.retries)
            return judge(piston_result(answer), program.expected[index])
        except (RemoteError, KeyError, TypeError) as e:
            logger.warning("Piston error: %s", e)
            return TestResult(SANDBOX_ERROR, stderr=str(e))


def piston_result(answer: dict) -> TestResult:
    """A Piston `execute` answer as a test result (not yet compared with the expected output)."""
    if "message" in answer and "run" not in answer:
        raise RemoteError(f"piston: {answer['message']}")
    compiled = answer.get("compile")
    if compiled and compiled.get("code") not in (0, None):
        return TestResult(COMPILE_ERROR, stderr=compiled.get("stderr", ""))
    run = answer["run"]
    stdout, stderr = run.get("stdout", ""), run.get("stderr", "")
    if run.get("signal") in ("SIGKILL", "SIGXCPU"):  # Piston kills a program at its time limit
        return TestResult(TIME_LIMIT, stdout, stderr)
    if run.get("code") != 0:
        status = MEMORY_LIMIT if "MemoryError" in stderr or "bad_alloc" in stderr else RUNTIME_ERROR
        return TestResult(status, stdout, stderr)
    return TestResult(PASSED, stdout, stderr)


# --------------------------------------------------------------------------------------------------------------------
# E2B and Morph: r1kit's harness as the remote script
# --------------------------------------------------------------------------------------------------------------------
_GUARD = 'if __name__ == "__main__":\n    main()\n'


def remote_script(program: Program) -> str:
    """A self-contained Python script that runs `program`'s tests with r1kit's harness and prints its reply lines
    (see `scripts/harness.py`) on stdout."""
    source = harness_source()
    assert source.endswith(_GUARD), "the harness must end with its main guard"
    request = harness_request(program)
    return source[: -len(_GUARD)] + (
        f"\nserve(marshal.loads(bytes.fromhex({marshal.dumps(request).hex()!r})), "
        "lambda line: print(encode_line(line), flush=True))\n"
    )


def stdout_or_error(stdout: str, error: str | None) -> str | Exception:
    """The script's stdout when the harness got ready (an error after that, such as the sandbox's time-out, is the
    program's doing and the reply parser makes the unfinished tests wrong); else the error (infrastructure: None)."""
    if error is None or READY_LINE in stdout.splitlines():
        return stdout
    return RemoteError(error)


READY_LINE = '{"ready": true}'


class _ScriptProvider:
    """Shared by E2B and Morph: one remote script per program, through a router (HTTP) or the SDK."""

    name = ""

    def __init__(self, router_url: str | None = None, num_parallel: int | None = None, timeout: float = 60.0,
                 request_timeout: float = 30.0, retries: int = 3):
        self.router_url = router_url
        self.num_parallel = num_parallel or 2
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.retries = retries
        if router_url is None:
            self._check_sdk()

    def execute(self, programs: list[Program]) -> list[list[TestResult]]:
        todo = [p for p in programs if p.inputs]
        scripts = [remote_script(p) for p in todo]
        # a program with many tests needs longer than the default: it must not be cut short by our own time-out
        timeout = max([self.timeout, *(program_budget(p) for p in todo)])
        if self.router_url:
            outputs = self._via_router(scripts, timeout)
        else:
            with ThreadPoolExecutor(max_workers=self.num_parallel) as pool:
                outputs = list(pool.map(lambda script: self._via_sdk_safely(script, timeout), scripts))
        results = iter(outputs)
        out = []
        for program in programs:
            if not program.inputs:
                out.append([])
                continue
            stdout = next(results)
            if isinstance(stdout, Exception):
                out.append(_failed(program, f"{self.name}: {stdout}"))
                continue
            try:  # after the harness's `ready`, a reply cut short is the program's doing (wrong), not the sandbox's
                out.append(parse_reply(program, stdout.splitlines()))
            except NoReply as e:
                out.append(_failed(program, f"{self.name}: no reply from the harness ({e})"))
        return out

    def _via_router(self, scripts: list[str], timeout: float) -> list[str | Exception]:
        url = self.router_url if "://" in self.router_url else f"http://{self.router_url}"
        body = {"scripts": scripts, "languages": ["python"] * len(scripts), "timeout": int(timeout),
                "request_timeout": int(self.request_timeout)}
        try:
            answer = post_json(f"{url.rstrip('/')}/execute_batch", body, timeout + self.request_timeout, self.retries)
        except RemoteError as e:
            return [e] * len(scripts)
        if not isinstance(answer, list) or len(answer) != len(scripts):
            return [RemoteError("router answered with the wrong number of results")] * len(scripts)
        return [self._router_stdout(item) for item in answer]

    def _via_sdk_safely(self, script: str, timeout: float) -> str | Exception:
        try:
            return self._via_sdk(script, timeout)
        except Exception as e:  # noqa: BLE001 - an SDK failure is a sandbox error for this program only
            return e


class E2BProvider(_ScriptProvider):
    """E2B through its router (`e2b_router_url`) or `e2b-code-interpreter` with `E2B_API_KEY`."""

    name = "e2b"

    def _check_sdk(self) -> None:
        try:
            import e2b_code_interpreter  # noqa: F401
        except ImportError:
            raise ImportError("code_provider e2b needs its SDK: pip install 'r1kit[code]' (or set e2b_router_url)") from None

    @staticmethod
    def _router_stdout(item: dict) -> str | Exception:
        if not isinstance(item, dict):
            return RemoteError("no execution")
        execution = item.get("execution") or {}
        stdout = "".join((execution.get("logs") or {}).get("stdout") or [])
        return stdout_or_error(stdout, item.get("exception_str"))

    def _via_sdk(self, script: str, timeout: float) -> str:
        from e2b_code_interpreter import AsyncSandbox

        async def run() -> str:
            sandbox = await AsyncSandbox.create(timeout=int(timeout + self.request_timeout),
                                                request_timeout=self.request_timeout)
            try:
                execution = await asyncio.wait_for(
                    sandbox.run_code(script, language="python", timeout=timeout), timeout + self.request_timeout
                )
                stdout = "".join(execution.logs.stdout)
                error = None if execution.error is None else f"{execution.error.name}: {execution.error.value}"
                result = stdout_or_error(stdout, error)
                if isinstance(result, Exception):
                    raise result
                return result
            finally:
                await sandbox.kill()

        return asyncio.run(run())


class MorphProvider(_ScriptProvider):
    """Morph through its router (`morph_router_url`) or `morphcloud` with `MORPH_API_KEY`."""

    name = "morph"

    def _check_sdk(self) -> None:
        try:
            import morphcloud  # noqa: F401
        except ImportError:
            raise ImportError("code_provider morph needs its SDK: pip install 'r1kit[code]' (or set morph_router_url)") from None
        if not os.environ.get("MORPH_API_KEY"):
            raise ValueError("code_provider morph needs MORPH_API_KEY (or set morph_router_url)")

    @staticmethod
    def _router_stdout(item: dict) -> str | Exception:
        if not isinstance(item, dict):
            return RemoteError("no execution")
        return stdout_or_error(item.get("stdout") or item.get("text") or "", item.get("exception_str"))

    def _via_sdk(self, script: str, timeout: float) -> str:
        from morphcloud.sandbox import Sandbox

        sandbox = Sandbox.new(ttl_seconds=int(timeout + self.request_timeout))
        try:
            result = sandbox.run_code(script, language="python", timeout=timeout)
            stdout = getattr(result, "stdout", None) or getattr(result, "text", None) or ""
            outcome = stdout_or_error(stdout, getattr(result, "exception_str", None))
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        finally:
            sandbox.close()
            sandbox.shutdown()
