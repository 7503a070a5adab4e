"""Remote back ends against fake servers on 127.0.0.1 that speak the documented APIs, failure modes included."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from r1kit.config.schema import GRPOScriptArguments
from r1kit.rewards import get_reward_funcs
from r1kit.rewards.code import make_code_reward
from r1kit.sandbox import COMPILE_ERROR, PASSED, SANDBOX_ERROR, TIME_LIMIT, WRONG_ANSWER, Program, get_provider
from r1kit.sandbox.remote import RemoteError, post_json

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
        post_json(fake.url + "/api/v2/execute", {}, timeout=5)
    assert len(fake.requests) == 1


@pytest.mark.slow
def test_http_timeouts_bound_every_request():
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    start = time.monotonic()
    with pytest.raises(RemoteError, match="failed after 2 attempts"):
        post_json(f"http://127.0.0.1:{listener.getsockname()[1]}/x", {}, timeout=0.5, retries=1, backoff=0.01)
    assert time.monotonic() - start < 5
    listener.close()


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
    assert len(fake.requests) == 2


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
