"""Remote back ends against fake servers on 127.0.0.1 that speak the documented APIs, failure modes included."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from r1kit.config.schema import GRPOScriptArguments
from r1kit.rewards import get_reward_funcs
from r1kit.rewards.code import make_code_reward
from r1kit.sandbox import (
    COMPILE_ERROR,
    PASSED,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    TIME_LIMIT,
    WRONG_ANSWER,
    Program,
    get_provider,
)
from r1kit.sandbox.remote import OutOfTime, RemoteError, post_json

SUM = Program("a, b = map(int, input().split())\nprint(a + b)", inputs=["1 2\n", "2 2\n"], expected=["3", "5"])


def run_python(code: str, stdin: str = "", timeout: float = 20) -> tuple[str, str, int]:
    proc = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, timeout=timeout)
    return proc.stdout, proc.stderr, proc.returncode


class FakeServer:
    """A threaded HTTP server whose handler is a function (path, body) -> (status, json)."""

    def __init__(self, handle):
        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                status, answer = handle(self.path, body, len(outer.requests))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    servers = []

    def start(handle):
        servers.append(FakeServer(handle))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def piston_execute(path, body, n):
    """Piston's POST /api/v2/execute: {language, version, files, stdin, run_timeout, ...} -> {run: {...}}."""
    assert path == "/api/v2/execute" and body["version"] == "*"
    if body["language"] == "c++":
        return 200, {"compile": {"code": 1, "stderr": "error: expected ';'"}, "run": {}}
    code = body["files"][0]["content"]
    if "while True" in code:
        return 200, {"run": {"stdout": "", "stderr": "", "code": None, "signal": "SIGKILL"}}
    stdout, stderr, rc = run_python(code, body["stdin"])
    return 200, {"language": "python", "version": "3.12", "run": {"stdout": stdout, "stderr": stderr, "code": rc, "signal": None}}


@pytest.mark.slow
def test_piston_runs_tests_and_maps_statuses(server):
    fake = server(piston_execute)
    provider = get_provider("piston", endpoints=fake.url + "/api/v2")
    programs = [SUM, Program("while True: pass", inputs=[""], expected=["1"], time_limit=1),
                Program("int main(", language="cpp", inputs=[""], expected=["1"])]
    results = provider.execute(programs)
    assert [r.status for r in results[0]] == [PASSED, WRONG_ANSWER]
    assert results[1][0].status == TIME_LIMIT and results[2][0].status == COMPILE_ERROR
    assert fake.requests[0][1]["run_timeout"] == 5000


@pytest.mark.slow
def test_piston_retries_5xx_then_succeeds(server):
    fake = server(lambda path, body, n: (503, {"message": "busy"}) if n <= 2 else piston_execute(path, body, n))
    provider = get_provider("piston", endpoints=[fake.url + "/api/v2"], num_parallel=1)
    results = provider.execute([Program("print(7)", inputs=[""], expected=["7"])])
    assert results[0][0].status == PASSED and len(fake.requests) == 3


@pytest.mark.slow
def test_piston_down_scores_none_through_the_reward(server, monkeypatch):
    fake = server(lambda path, body, n: (500, {"message": "internal error"}))
    monkeypatch.setenv("PISTON_ENDPOINTS", fake.url + "/api/v2")
    monkeypatch.setattr("r1kit.sandbox.remote.time.sleep", lambda s: None)  # no real back-off waits in the test
    code_reward = make_code_reward(provider="piston")
    logged = {}
    out = code_reward(["```python\nprint(1)\n```"], verification_info=[{"test_cases": [{"input": "", "output": "1"}]}],
                      log_metric=logged.__setitem__)
    assert out == [None] and logged["rewards/code/sandbox_errors"] == 1.0
    assert len(fake.requests) == 4  # 1 + 3 retries


@pytest.mark.slow
def test_client_errors_are_not_retried(server):
    fake = server(lambda path, body, n: (400, {"message": "python-9 runtime is unknown"}))
    with pytest.raises(RemoteError, match="HTTP 400"):
        post_json(fake.url + "/api/v2/execute", {}, deadline=5)
    assert len(fake.requests) == 1


@pytest.mark.slow
def test_the_deadline_bounds_every_request_retries_included(monkeypatch):
    """Each attempt gets what is left of one deadline, not a deadline of its own: the time each was given is recorded
    against the clock the code reads (an assertion on how long the test took would depend on the machine's load)."""
    import socket

    import r1kit.sandbox.remote as remote

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    given, real = [], remote._post_once
    monkeypatch.setattr(remote, "_post_once", lambda url, data, seconds, max_bytes: (
        given.append((remote.time.monotonic(), seconds)), real(url, data, seconds, max_bytes))[1])
    with pytest.raises(OutOfTime, match="within 0.5 s"):
        post_json(f"http://127.0.0.1:{listener.getsockname()[1]}/x", {}, deadline=0.5, retries=3, backoff=0.01)
    listener.close()
    first = given[0][0]
    assert given and all(seconds <= 0.5 - (when - first) + 1e-6 for when, seconds in given)


def test_piston_needs_endpoints(monkeypatch):
    monkeypatch.delenv("PISTON_ENDPOINTS", raising=False)
    with pytest.raises(ValueError, match="PISTON_ENDPOINTS"):
        get_provider("piston")


def router(kind):
    """The Open-R1 routers' POST /execute_batch {scripts, languages, timeout, request_timeout}."""

    def handle(path, body, n):
        assert path == "/execute_batch" and body["languages"] == ["python"] * len(body["scripts"])
        out = []
        for script in body["scripts"]:
            stdout, stderr, rc = run_python(script)
            if kind == "e2b":
                out.append({"execution": {"results": [], "logs": {"stdout": [stdout], "stderr": [stderr]},
                                          "error": None, "execution_count": 1}, "exception_str": None})
            else:
                out.append({"text": stdout, "exception_str": None})
        return 200, out

    return handle


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
def test_router_url_from_the_config_reaches_the_provider(server, kind):
    fake = server(router(kind))
    args = GRPOScriptArguments(dataset_name="x", reward_funcs=["code", "binary_code"], code_provider=kind,
                               **{f"{kind}_router_url": fake.url.removeprefix("http://")})
    code_reward, binary = get_reward_funcs(args)
    info = {"test_cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "11\n"}]}
    text = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert code_reward([text, text], verification_info=[info, info]) == [0.5, 0.5]
    assert binary([text], verification_info=[info]) == [0.0]
    assert len(fake.requests) == 3  # one program per request: a flood past its byte cap is that program's alone


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
def test_router_failure_is_a_sandbox_error(server, kind, monkeypatch):
    monkeypatch.setattr("r1kit.sandbox.remote.time.sleep", lambda s: None)
    fake = server(lambda path, body, n: (502, {"detail": "bad gateway"}))
    provider = get_provider(kind, router_url=fake.url)
    assert [r.status for r in provider.execute([SUM])[0]] == [SANDBOX_ERROR, SANDBOX_ERROR]


def test_e2b_sdk_is_called_with_the_keyword_it_accepts(monkeypatch):
    calls = []

    class Logs:
        def __init__(self, stdout):
            self.stdout = [stdout]

    class Execution:
        def __init__(self, stdout):
            self.logs, self.error = Logs(stdout), None

    class AsyncSandbox:
        @classmethod
        async def create(cls, timeout=None, request_timeout=None):
            return cls()

        async def run_code(self, code, language=None, timeout=None):  # no **kwargs: `languages=` would raise
            calls.append(language)
            return Execution(run_python(code)[0])

        async def kill(self):
            calls.append("killed")

    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", types.SimpleNamespace(AsyncSandbox=AsyncSandbox))
    results = get_provider("e2b").execute([SUM])
    assert [r.status for r in results[0]] == [PASSED, WRONG_ANSWER]
    assert calls == ["python", "killed"]


def test_missing_sdk_is_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", None)
    with pytest.raises(ImportError, match=r"pip install 'r1kit\[code\]'"):
        get_provider("e2b")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
def test_a_remote_time_out_after_the_harness_started_is_wrong_not_none(server, kind):
    """The program stalls its second test past the remote time-out: the sandbox answers with an error, but the
    harness had started, so the finished test is judged and the rest is wrong (never a skipped None)."""

    def handle(path, body, n):
        assert body["timeout"] >= 15 + 2 * 3  # our time-out covers start-up and every test at its limit
        stdout, _, _ = run_python(body["scripts"][0])
        cut = "\n".join(stdout.splitlines()[:2]) + "\n"  # ready + the first result, then the sandbox gave up
        item = ({"execution": {"logs": {"stdout": [cut]}}, "exception_str": "TimeoutError"} if kind == "e2b"
                else {"stdout": cut, "exception_str": "timeout"})
        return 200, [item]

    fake = server(handle)
    program = Program("print(input())", inputs=["a\n", "b\n"], expected=["a\n", "b\n"], time_limit=2)
    results = get_provider(kind, router_url=fake.url).execute([program])[0]
    assert [r.status for r in results] == [PASSED, "runtime_error"]


@pytest.mark.slow
def test_piston_sends_each_tests_files_and_cannot_judge_file_output(server):
    """A file-I/O program (it writes output.txt) cannot be judged by Piston, which returns stdout only: that is the
    back end's limit, so None (sandbox error), never a wrong answer the program did not earn."""
    fake = server(piston_execute)
    provider = get_provider("piston", endpoints=fake.url + "/api/v2")
    checker_like = Program("print(1)", inputs=["", ""], expected=["1", "1"],
                           test_files=[{"input.txt": "a"}, {"input.txt": "b"}])
    file_io = Program("open('output.txt', 'w').write('1')", inputs=[""], expected=["1"], output_file="output.txt")
    per_test, writes_file = provider.execute([checker_like, file_io])
    assert [r.status for r in per_test] == [PASSED, PASSED]
    assert sorted(f["content"] for _, body in fake.requests for f in body["files"] if f["name"] == "input.txt") == ["a", "b"]
    assert [r.status for r in writes_file] == [SANDBOX_ERROR] and len(fake.requests) == 2  # never sent


# --------------------------------------------------------------------------------------------------------------------
# Hostile servers: every answer is untrusted. Each case is bounded (bytes, seconds) and checks that the call returns
# in time, scores as the failure policy says (the server's fault: None; a program's flood: wrong) and leaves no timer
# thread or memory behind.
# --------------------------------------------------------------------------------------------------------------------
class RawServer:
    """A TCP server on 127.0.0.1 that reads each HTTP request and hands the connection to `behave(conn)`, which may
    do what no honest server does: stall, trickle, flood, garble, hang up half way."""

    def __init__(self, behave):
        self.behave, self.requests, self.sent = behave, [], 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 1 << 16:
                data += conn.recv(4096) or b"\r\n\r\n"
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next((h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0))
            while len(body) < length:
                body += conn.recv(1 << 16) or b"x" * length
            self.requests.append(json.loads(body[:length]))
            try:
                self.behave(conn, self)
            except OSError:  # the client hung up: what a bounded client does
                pass

    def send(self, conn, data: bytes):
        conn.sendall(data)
        self.sent += len(data)

    def close(self):
        self.listener.close()


@pytest.fixture()
def raw_server():
    servers = []

    def start(behave):
        servers.append(RawServer(behave))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def answer(body, status: str = "200 OK"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def behave(conn, server):
        server.send(conn, f"HTTP/1.1 {status}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)

    return behave


def trickle(head: bytes, seconds: float = 30.0):
    """Sends `head` and then one byte every 50 ms, for `seconds` at most (the test's own bound)."""

    def behave(conn, server):
        server.send(conn, head)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            server.send(conn, b" ")
            time.sleep(0.05)

    return behave


def flood(declared: int | None, total: int = 256 << 20):
    """Streams up to `total` bytes (the test's bound); `declared` is the Content-Length it claims, if any."""

    def behave(conn, server):
        length = f"Content-Length: {declared}\r\n" if declared is not None else ""
        server.send(conn, f"HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n[\"".encode())
        chunk = b"A" * (1 << 16)
        while server.sent < total:
            server.send(conn, chunk)

    return behave


def hang_up_half_way(conn, server):
    server.send(conn, b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"run": {"std')


def no_timer_left() -> bool:
    return not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]


PISTON_GARBLED = [
    [], "passed", 7, {"run": []}, {"run": {"code": "0"}}, {"run": {"code": True}}, {"run": {"code": 0, "stdout": 5}},
    {"run": {"code": 0, "signal": ["SIGKILL"]}}, {"run": {}}, {"compile": "failed", "run": {"code": 0}},
    {"message": ["not", "text"]}, {"language": "python"}, {"run": {"code": 1, "status": "XX", "message": 3}},
    b"<html>502 Bad Gateway</html>", b"[" * 100_000 + b"]" * 100_000, b'{"run": {"code": 0, "stdout": "\xff\xfe"}}',
]


@pytest.mark.slow
@pytest.mark.parametrize("garbled", PISTON_GARBLED, ids=range(len(PISTON_GARBLED)))
def test_piston_garbled_answers_are_sandbox_errors_never_exceptions(raw_server, garbled, monkeypatch):
    monkeypatch.setattr("r1kit.sandbox.remote.time.sleep", lambda s: None)
    fake = raw_server(answer(garbled))
    (result,) = get_provider("piston", endpoints=fake.url).execute([Program("print(1)", inputs=[""])])[0]
    assert result.status == SANDBOX_ERROR
    assert len(fake.requests) == (4 if isinstance(garbled, bytes) else 1)  # what is not JSON is retried (a proxy's page)


@pytest.mark.slow
def test_piston_killed_compile_is_a_compile_error_and_pays_the_penalty(raw_server, monkeypatch):
    """Piston skips the run of a compile that failed or was killed (exit code null): the program's doing, so
    cf_code's -0.1 applies, never None."""
    from r1kit.rewards.competitive import make_cf_code_reward

    killed = {"language": "c++", "version": "10.2.0",
              "compile": {"stdout": "", "stderr": "", "code": None, "signal": "SIGKILL", "status": "TO"}}
    fake = raw_server(answer(killed))
    monkeypatch.setenv("PISTON_ENDPOINTS", fake.url)
    reward = make_cf_code_reward(provider="piston", test_batch_size=-1)
    row = {"id": "1/A", "language": "cpp", "official_tests": [{"input": "1", "output": "1"}]}
    assert reward(["```cpp\ntemplate bomb\n```"], **{k: [v] for k, v in row.items()}) == [-0.1]


@pytest.mark.slow
@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"HTTP/1.1 200 OK\r\nX-Slow:"],
                         ids=["body", "headers"])
def test_a_trickling_piston_is_cut_at_its_deadline_and_not_asked_again(raw_server, head):
    fake = raw_server(trickle(head))
    provider = get_provider("piston", endpoints=fake.url, request_timeout=1.0, num_parallel=2)
    program = Program("print(1)", inputs=[""] * 6, expected=["1"] * 6, time_limit=1)
    results = provider.execute([program])[0]
    assert [r.status for r in results] == [SANDBOX_ERROR] * 6
    # One deadline, not 6 tests x 4 attempts of it (before: no bound at all): the two in flight were cut, none was
    # asked again, the rest refused while it is stalled (counted, not timed).
    assert len(fake.requests) <= 2 and no_timer_left()


@pytest.mark.slow
@pytest.mark.parametrize("declared", [None, 10**12], ids=["streamed", "declared"])
def test_a_piston_flood_is_cut_while_reading_and_is_the_programs_fault(raw_server, declared):
    import tracemalloc

    fake = raw_server(flood(declared))
    provider = get_provider("piston", endpoints=fake.url, max_reply_bytes=1 << 20)
    tracemalloc.start()
    try:
        (result,) = provider.execute([Program("print('A' * 10**9)", inputs=[""], expected=["1"])])[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.status == RUNTIME_ERROR and "flooded" in result.stderr  # wrong, not a skipped None
    assert peak < 8 << 20  # read up to the 1 MiB cap and dropped (before: the whole answer, +981 MB for a router)
    assert len(fake.requests) == 1 and no_timer_left()  # a flood is not retried


@pytest.mark.slow
def test_a_piston_that_hangs_up_half_way_is_retried_then_none(raw_server, monkeypatch):
    monkeypatch.setattr("r1kit.sandbox.remote.time.sleep", lambda s: None)
    fake = raw_server(hang_up_half_way)
    (result,) = get_provider("piston", endpoints=fake.url).execute([Program("print(1)", inputs=[""])])[0]
    assert result.status == SANDBOX_ERROR and len(fake.requests) == 4 and no_timer_left()


ROUTER_GARBLED = {
    "e2b": ["x", {"execution": "x"}, {"execution": {"logs": "x"}}, {"execution": {"logs": {"stdout": "ready"}}},
            {"execution": {"logs": {"stdout": [1, 2]}}}, {"execution": None, "exception_str": ["x"]}],
    "morph": ["x", {"stdout": ["x"]}, {"text": 5}, {"stdout": None, "exception_str": {"a": 1}}, {"stdout": 3.5}],
}


@pytest.mark.slow
@pytest.mark.parametrize("kind,item", [(k, i) for k, items in ROUTER_GARBLED.items() for i in items])
def test_router_garbled_answers_are_sandbox_errors_never_exceptions(raw_server, kind, item):
    fake = raw_server(answer([item]))
    results = get_provider(kind, router_url=fake.url).execute([SUM])[0]
    assert [r.status for r in results] == [SANDBOX_ERROR, SANDBOX_ERROR]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
@pytest.mark.parametrize("reply", [[], [{}, {}], {"results": []}, "ok"], ids=["none", "two", "object", "text"])
def test_router_answers_of_the_wrong_size_are_sandbox_errors(raw_server, kind, reply):
    fake = raw_server(answer(reply))
    assert [r.status for r in get_provider(kind, router_url=fake.url).execute([SUM])[0]] == [SANDBOX_ERROR] * 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
def test_a_trickling_router_is_cut_at_its_deadline(raw_server, kind, monkeypatch):
    monkeypatch.setattr("r1kit.sandbox.remote.program_budget", lambda program: 1.0)  # the test's 2 s deadline
    fake = raw_server(trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"))
    provider = get_provider(kind, router_url=fake.url, timeout=1.0, request_timeout=1.0)
    results = provider.execute([SUM, SUM, SUM])
    assert [r.status for tests in results for r in tests] == [SANDBOX_ERROR] * 6 and no_timer_left()
    assert len(fake.requests) <= 3  # each cut at its deadline, none retried (before: more than 150 s of retries)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["e2b", "morph"])
def test_a_router_flood_is_that_programs_wrong_answer_and_spares_its_batch_mates(server, kind, monkeypatch):
    """One program floods the router's stdout (remotely nothing stops it writing to the harness's own stdout): its
    answer passes its byte cap while read, so its tests are wrong; the honest program next to it is judged as usual."""
    monkeypatch.setattr("r1kit.sandbox.remote.router_reply_limit", lambda program: 1 << 20)
    honest = router(kind)

    def handle(path, body, n):
        if b"FLOOD".hex() in body["scripts"][0]:  # the request travels marshalled, in hex
            stdout = "A" * (3 << 20)
            item = ({"execution": {"logs": {"stdout": [stdout]}}, "exception_str": None} if kind == "e2b"
                    else {"stdout": stdout, "exception_str": None})
            return 200, [item]
        return honest(path, body, n)

    fake = server(handle)
    flooder = Program("print('FLOOD')", inputs=[""], expected=["x"])
    flooded, summed = get_provider(kind, router_url=fake.url).execute([flooder, SUM])
    assert [r.status for r in flooded] == [RUNTIME_ERROR] and "flooded" in flooded[0].stderr
    assert [r.status for r in summed] == [PASSED, WRONG_ANSWER]


def test_requests_go_through_the_proxy_the_environment_names_unless_no_proxy_covers_the_host(monkeypatch):
    """A router behind a corporate proxy: HTTP_PROXY is honoured as urllib honours it (the absolute URL asked of the
    proxy), and NO_PROXY sends a host around it."""
    import http.server
    import json as json_module
    import threading

    from r1kit.sandbox.remote import RemoteError, post_json

    seen = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the standard library's name
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json_module.dumps({"via": "proxy"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert post_json("http://router.invalid:8000/execute_batch", {"x": 1}, deadline=10) == {"via": "proxy"}
        assert seen == ["http://router.invalid:8000/execute_batch"]
        monkeypatch.setenv("NO_PROXY", "router.invalid")
        monkeypatch.setenv("no_proxy", "router.invalid")
        with pytest.raises(RemoteError):  # straight to the (unresolvable) host, not the proxy
            post_json("http://router.invalid:8000/execute_batch", {"x": 1}, deadline=3, retries=0)
        assert len(seen) == 1
    finally:
        server.shutdown()
        server.server_close()
