"""Remote back ends: Piston (HTTP), E2B and Morph (their routers over HTTP, or their SDKs).

Every remote answer is untrusted input: each request is bounded by a total deadline (every attempt and back-off
included, whatever the server does: stall, trickle bytes), its answer is read in chunks and refused past a byte cap
(`ReplyTooLarge`: only a program's output can make one that large, so its tests are wrong), and the decoded answer is
checked against the shape its API documents. Connection errors, time-outs, 429 and 5xx answers are retried with
exponential back-off (and jitter) while time is left; a request that still fails, an answer of the wrong shape, or an
endpoint that ran out of time recently (`Stalls`) makes its tests `sandbox_error` (the rewards score them `None` and
count them), never a 0. E2B and Morph run r1kit's own test harness as the remote script, one program per request, so
their verdicts follow the same rules as the local sandbox (whole-output comparison, a time limit per test, zero
tests handled), and the SDK calls use the keyword the SDKs accept (`language=`, not Open-R1's `languages=`).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import marshal
import os
import random
import socket
import threading
import time
import urllib.parse
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
    """A remote sandbox request that failed for good (an infrastructure failure: its tests score None)."""


class OutOfTime(RemoteError):
    """A request that used up its whole deadline: the server stalled, trickled or answered too slowly."""


class ReplyTooLarge(RemoteError):
    """An answer that passed its byte cap while it was read. The caps leave room for every output a program may
    write, so only a program's flood fills one: its tests are wrong, not skipped."""


MAX_REPLY_BYTES = 64 << 20  # an answer's bytes, unless the caller knows better


def post_json(url: str, body: Any, deadline: float, retries: int = 3, backoff: float = 0.5,
              max_bytes: int = MAX_REPLY_BYTES) -> Any:
    """POSTs JSON and returns the decoded answer, within `deadline` seconds in all.

    Every attempt gets what is left of the deadline; a transient failure (connection, time-out, 429, 5xx, an answer
    that is not JSON) is retried after an exponential back-off while time is left; a 4xx is not. Raises
    `ReplyTooLarge` for an answer past `max_bytes` (not retried), `OutOfTime` when the deadline passed, `RemoteError`
    for anything else that failed for good."""
    data = json.dumps(body).encode()
    end = time.monotonic() + deadline
    attempts, last = 0, "no attempt"
    while attempts <= retries and end - time.monotonic() > 0:
        attempts += 1
        try:
            status, raw = _post_once(url, data, end - time.monotonic(), max_bytes)
        except (OSError, http.client.HTTPException) as e:  # TimeoutError is an OSError
            last = f"{type(e).__name__}: {e}"
        else:
            if 200 <= status < 300:
                try:
                    return json.loads(raw)
                except (ValueError, RecursionError):  # RecursionError: nested past what the parser follows
                    last = "an answer that is not JSON"
            elif status < 500 and status != 429:  # the request itself is wrong: retrying will not help
                raise RemoteError(f"{url}: HTTP {status}: {raw[:300]!r}")
            else:
                last = f"HTTP {status}"
        if attempts <= retries:
            pause = min(backoff * 2 ** (attempts - 1), 10.0) * random.uniform(0.9, 1.1)
            time.sleep(max(0.0, min(pause, end - time.monotonic())))
    if end - time.monotonic() <= 0:
        raise OutOfTime(f"{url}: no complete answer within {deadline:g} s ({attempts} attempt(s); last: {last})")
    raise RemoteError(f"{url}: failed after {attempts} attempt(s): {last}")


def _connection(parts: urllib.parse.SplitResult, seconds: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for `parts` and the request target, through the proxy the environment names for its scheme
    (HTTP_PROXY / HTTPS_PROXY, unless NO_PROXY covers the host), as urllib would: plain HTTP asks the proxy for the
    absolute URL, HTTPS tunnels through it with CONNECT."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    https = parts.scheme == "https"
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if https:
            connection = kind(via.hostname, via.port or 8080, timeout=seconds)
            connection.set_tunnel(parts.hostname, parts.port or 443)
            return connection, target
        return http.client.HTTPConnection(via.hostname, via.port or 8080, timeout=seconds), parts.geturl()
    return kind(parts.hostname, parts.port, timeout=seconds), target


def _post_once(url: str, data: bytes, seconds: float, max_bytes: int) -> tuple[int, bytes]:
    """(status, body) of one POST, done within `seconds` whatever the server does: a timer shuts the connection at
    the deadline, so neither a stalled connect, nor headers or a body that trickle in, can hold it longer. The body
    is read in chunks and refused as soon as it passes `max_bytes`, before it is all in memory."""
    parts = urllib.parse.urlsplit(url)
    connection, path = _connection(parts, seconds)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        try:
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader, which then sees the end of the stream
        except OSError:
            pass

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        connection.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        declared = (response.getheader("Content-Length") or "").strip()
        if declared.isdigit() and int(declared) > max_bytes:
            raise ReplyTooLarge(f"{url}: the answer declares {int(declared)} bytes, more than {max_bytes}")
        chunks, size = [], 0
        while chunk := response.read1(1 << 16):
            size += len(chunk)
            if size > max_bytes:
                raise ReplyTooLarge(f"{url}: the answer passed {max_bytes} bytes")
            chunks.append(chunk)
        if expired.is_set():  # the stream ended because the timer shut it: the body is cut short
            raise TimeoutError(f"no complete answer within {seconds:.1f} s")
        return response.status, b"".join(chunks)
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise TimeoutError(f"no complete answer within {seconds:.1f} s") from None
        raise
    finally:
        timer.cancel()
        timer.join(1.0)  # its thread ends at once when cancelled; joined, so no timer outlives the request
        connection.close()


class Stalls:
    """Endpoints that ran out of time lately: a request to one fails at once (a sandbox error) for `cooldown` seconds,
    instead of every request of the batch waiting its whole deadline on a server that stalls or trickles."""

    def __init__(self, cooldown: float = 60.0):
        self.cooldown = cooldown
        self._until: dict[str, float] = {}
        self._lock = Lock()

    def check(self, endpoint: str) -> None:
        with self._lock:
            if time.monotonic() < self._until.get(endpoint, 0.0):
                raise RemoteError(f"{endpoint} ran out of time less than {self.cooldown:g} s ago; not asked again yet")

    def add(self, endpoint: str) -> None:
        with self._lock:
            self._until[endpoint] = time.monotonic() + self.cooldown


def _failed(program: Program, why: str) -> list[TestResult]:
    logger.warning("Remote sandbox error: %s", why)
    return [TestResult(SANDBOX_ERROR, stderr=why) for _ in program.inputs]


def _flooded(program: Program, why: str) -> list[TestResult]:
    return [TestResult(RUNTIME_ERROR, stderr=f"the program's output flooded the answer: {why}") for _ in program.inputs]


# --------------------------------------------------------------------------------------------------------------------
# Piston
# --------------------------------------------------------------------------------------------------------------------
PISTON_LANGUAGES = {"python": ("python", "main.py"), "cpp": ("c++", "main.cpp")}
PISTON_COMPILE_SECONDS = 60.0
PISTON_MAX_REPLY = 64 << 20  # one test's answer: stdout and stderr, twice (Piston adds `output`), JSON-escaped


class PistonProvider:
    """Runs each test as one Piston `execute` request.

    Args:
        endpoints (`list[str]` or `str` or `None`): base URLs such as `http://host:2000/api/v2`; default: the
            comma-separated `PISTON_ENDPOINTS` variable.
        num_parallel (`int` or `None`, defaults to 2 per endpoint): requests in flight.
        request_timeout (`float`, defaults to `30.0`): seconds added to the test's time limit (and, for C++, to the
            compile's 60 s) to make each request's total deadline, retries included.
        retries (`int`, defaults to `3`): retries of a failed request.
        max_reply_bytes (`int`, defaults to 64 MiB): an answer past it is a program's flood: the test is wrong.
    """

    def __init__(self, endpoints=None, num_parallel: int | None = None, request_timeout: float = 30.0, retries: int = 3,
                 max_reply_bytes: int = PISTON_MAX_REPLY):
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
        self.max_reply_bytes = max_reply_bytes
        self.stalls = Stalls()

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
            "compile_timeout": int(PISTON_COMPILE_SECONDS * 1000),
            "run_memory_limit": program.memory_mb << 20,
        }
        compiling = PISTON_COMPILE_SECONDS if program.language == "cpp" else 0.0
        endpoint = self._endpoint()
        try:
            self.stalls.check(endpoint)
            answer = post_json(f"{endpoint}/execute", body, compiling + program.time_limit + self.request_timeout,
                               self.retries, max_bytes=self.max_reply_bytes)
            return judge(piston_result(answer), program.expected[index])
        except ReplyTooLarge as e:
            return _flooded(program, str(e))[0]
        except RemoteError as e:
            if isinstance(e, OutOfTime):
                self.stalls.add(endpoint)
            logger.warning("Piston error: %s", e)
            return TestResult(SANDBOX_ERROR, stderr=str(e))


def _piston_stage(answer: dict, key: str) -> dict | None:
    """Piston's `compile` or `run` stage, checked: {code: int | null, signal, status, stdout, stderr: str | null}."""
    stage = answer.get(key)
    if stage is None:
        return None
    if not isinstance(stage, dict):
        raise RemoteError(f"piston: malformed answer: {key} is not an object")
    code = stage.get("code")
    if isinstance(code, bool) or not (code is None or isinstance(code, int)):
        raise RemoteError(f"piston: malformed answer: {key}.code is not an exit code")
    for field in ("signal", "status", "stdout", "stderr"):
        if not (stage.get(field) is None or isinstance(stage.get(field), str)):
            raise RemoteError(f"piston: malformed answer: {key}.{field} is not text")
    if stage.get("status") == "XX":  # Piston's own internal error
        message = stage.get("message")
        raise RemoteError(f"piston: internal error in {key}: {message[:300] if isinstance(message, str) else ''}")
    return stage


PISTON_TIME_SIGNALS = ("SIGKILL", "SIGXCPU")  # Piston kills a program at its time limit


def piston_result(answer: Any) -> TestResult:
    """A Piston `execute` answer as a test result (not yet compared with the expected output); `RemoteError` for an
    answer of another shape. A compile that fails or is killed (for time, for memory: exit code null) is a compile
    error, the program's doing, as Piston itself treats it (it skips the run)."""
    if not isinstance(answer, dict):
        raise RemoteError("piston: malformed answer: not a JSON object")
    compiled, run = _piston_stage(answer, "compile"), _piston_stage(answer, "run")
    if compiled is not None and compiled.get("code") != 0:
        return TestResult(COMPILE_ERROR, stderr=compiled.get("stderr") or "")
    if run is None:
        message = answer.get("message")
        raise RemoteError(f"piston: {message:.300}" if isinstance(message, str) else "piston: malformed answer: no run")
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    code, signal, status = run.get("code"), run.get("signal"), run.get("status")
    if code is None and signal is None and status is None:
        raise RemoteError("piston: malformed answer: the run has neither an exit code nor a signal")
    if status in ("OL", "EL"):  # stdout or stderr past Piston's limit
        return TestResult(RUNTIME_ERROR, stdout, stderr)
    if status == "TO" or signal in PISTON_TIME_SIGNALS:
        return TestResult(TIME_LIMIT, stdout, stderr)
    if code != 0 or signal is not None:
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


def router_reply_limit(program: Program, max_output: int = 16 << 20) -> int:
    """The most bytes read from a router for one program: the harness's reply lines with every test's report and up to
    4 x `max_output` of output in all (in base64: 4/3), what the local provider reads at most, plus room for the JSON
    around them. Past it, only the program's output can have filled it (remotely nothing stops a program writing to
    the harness's own stdout), so its tests are wrong."""
    max_output = program.output_limit(max_output)  # (a program's own, smaller limit: a tool call's)
    return (2 << 20) + len(program.inputs) * 16384 + 4 * (max_output + 4096) * 4 // 3


class _ScriptProvider:
    """Shared by E2B and Morph: one remote script per program, through a router (HTTP) or the SDK, `num_parallel`
    programs at a time. One program per router request, so that an answer past its byte cap is that program's
    flood (its tests are wrong) and cannot take its batch-mates with it."""

    name = ""

    def __init__(self, router_url: str | None = None, num_parallel: int | None = None, timeout: float = 60.0,
                 request_timeout: float = 30.0, retries: int = 3):
        self.router_url = router_url
        self.num_parallel = num_parallel or 2
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.retries = retries
        self.stalls = Stalls()
        if router_url is None:
            self._check_sdk()

    def execute(self, programs: list[Program]) -> list[list[TestResult]]:
        todo = [p for p in programs if p.inputs]
        with ThreadPoolExecutor(max_workers=max(1, self.num_parallel)) as pool:
            results = iter(list(pool.map(self._run_program, todo)))
        return [next(results) if program.inputs else [] for program in programs]

    def _run_program(self, program: Program) -> list[TestResult]:
        # a program with many tests needs longer than the default: it must not be cut short by our own time-out
        timeout = max(self.timeout, program_budget(program))
        script = remote_script(program)
        try:
            stdout = self._via_router(script, program, timeout) if self.router_url else self._via_sdk(script, timeout)
        except ReplyTooLarge as e:
            return _flooded(program, str(e))
        except Exception as e:  # noqa: BLE001 - whatever failed here is the sandbox's, for this program only
            return _failed(program, f"{self.name}: {e}")
        try:  # after the harness's `ready`, a reply cut short is the program's doing (wrong), not the sandbox's
            return parse_reply(program, stdout.splitlines())
        except NoReply as e:
            return _failed(program, f"{self.name}: no reply from the harness ({e})")

    def _via_router(self, script: str, program: Program, timeout: float) -> str:
        url = self.router_url if "://" in self.router_url else f"http://{self.router_url}"
        body = {"scripts": [script], "languages": ["python"], "timeout": int(timeout),
                "request_timeout": int(self.request_timeout)}
        self.stalls.check(url)
        try:
            answer = post_json(f"{url.rstrip('/')}/execute_batch", body, timeout + self.request_timeout, self.retries,
                               max_bytes=router_reply_limit(program))
        except OutOfTime:
            self.stalls.add(url)
            raise
        if not isinstance(answer, list) or len(answer) != 1:
            raise RemoteError("the router answered with the wrong number of results")
        stdout = self._router_stdout(answer[0])
        if isinstance(stdout, Exception):
            raise stdout
        return stdout


def _text_or_none(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise RemoteError(f"malformed router answer: {what} is not text")
    return value


class E2BProvider(_ScriptProvider):
    """E2B through its router (`e2b_router_url`) or `e2b-code-interpreter` with `E2B_API_KEY`."""

    name = "e2b"

    def _check_sdk(self) -> None:
        try:
            import e2b_code_interpreter  # noqa: F401
        except ImportError:
            raise ImportError("code_provider e2b needs its SDK: pip install 'r1kit[code]' (or set e2b_router_url)") from None

    @staticmethod
    def _router_stdout(item: Any) -> str | Exception:
        """The script's stdout from E2B's router result {execution: {logs: {stdout: [text]}}, exception_str}."""
        if not isinstance(item, dict):
            return RemoteError("malformed router answer: no execution")
        execution = item.get("execution") or {}
        logs = execution.get("logs") or {} if isinstance(execution, dict) else None
        chunks = logs.get("stdout") or [] if isinstance(logs, dict) else None
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            return RemoteError("malformed router answer: execution.logs.stdout is not a list of text")
        return stdout_or_error("".join(chunks), _text_or_none(item.get("exception_str"), "exception_str"))

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
    def _router_stdout(item: Any) -> str | Exception:
        """The script's stdout from Morph's router result {stdout (or text), exception_str}."""
        if not isinstance(item, dict):
            return RemoteError("malformed router answer: no execution")
        stdout = _text_or_none(item.get("stdout"), "stdout") or _text_or_none(item.get("text"), "text") or ""
        return stdout_or_error(stdout, _text_or_none(item.get("exception_str"), "exception_str"))

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
