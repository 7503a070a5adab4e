"""What every sandbox shares: a `Program` and its tests, the `TestResult` of each test, and the harness protocol (the
request the harness takes, the reply lines it streams, how they are judged).

Statuses: passed, wrong answer, runtime error, time limit, memory limit, compile error (the program's doing), and
sandbox error (the back end itself failed: could not start, remote 5xx), which the rewards turn into `None`.
"""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from r1kit.sandbox.jail import SCRIPTS

PASSED = "passed"
WRONG_ANSWER = "wrong_answer"
RUNTIME_ERROR = "runtime_error"
TIME_LIMIT = "time_limit"
MEMORY_LIMIT = "memory_limit"
COMPILE_ERROR = "compile_error"
SANDBOX_ERROR = "sandbox_error"
LANGUAGES = ("python", "cpp")


@dataclass
class Program:
    """A program and its tests.

    Args:
        code (`str`): source code.
        language (`str`, defaults to `"python"`): one of `LANGUAGES` (`python`, `cpp`).
        inputs (`list[str]`): stdin of each test.
        expected (`list[str | None]`): expected stdout of each test; `None` only requires a clean exit.
        time_limit (`float`, defaults to `5.0`): seconds of wall time per test.
        memory_mb (`int`, defaults to `512`): address-space limit per test.
        argv (`list[str]`): extra command-line arguments (e.g. file names for a checker).
        files (`dict[str, str]`): extra files written next to the program (e.g. a grader, a header).
        test_files (`list[dict[str, str]]`): files written before each test, one mapping per test (e.g. a checker's
            `input.txt`, `correct_output.txt`, `solution_output.txt`).
        output_file (`str` or `None`): the program writes its answer to this file (Codeforces file I/O) instead of
            stdout; the file's content is judged.
        max_output (`int` or `None`): bytes of stdout (and of stderr) a test may write, when below the provider's
            limit: output past it ends the test (`output limit exceeded`), so what is read back stays this small
            (a tool call's reply, read by the model, needs kilobytes, not the provider's megabytes).
    """

    code: str
    language: str = "python"
    inputs: list[str] = field(default_factory=list)
    expected: list[str | None] = field(default_factory=list)
    time_limit: float = 5.0
    memory_mb: int = 512
    argv: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    test_files: list[dict[str, str]] = field(default_factory=list)
    output_file: str | None = None
    max_output: int | None = None

    def __post_init__(self):
        if not self.expected:
            self.expected = [None] * len(self.inputs)
        if len(self.expected) != len(self.inputs):
            raise ValueError("Program needs one expected output per input")
        if self.language not in LANGUAGES:
            raise ValueError(f"unknown language {self.language!r}; supported: {', '.join(LANGUAGES)}")
        if not self.time_limit > 0 or not self.memory_mb > 0:
            raise ValueError("time_limit and memory_mb must be positive")
        if self.max_output is not None and not self.max_output > 0:
            raise ValueError("max_output must be positive")

    def output_limit(self, provider_limit: int) -> int:
        """Bytes of output a test may write under a provider whose own limit is `provider_limit`."""
        return min(provider_limit, self.max_output) if self.max_output else provider_limit


@dataclass
class TestResult:
    """The outcome of one test."""

    status: str
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASSED


class Provider(Protocol):
    def execute(self, programs: list[Program]) -> list[list[TestResult]]: ...


def normalise_output(text: str) -> list[str]:
    """Lines with runs of whitespace collapsed, trailing blank lines dropped."""
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """The whole output must match line for line (a missing or extra line is wrong), whitespace-normalised."""
    return normalise_output(actual) == normalise_output(expected)


def judge(result: TestResult, expected: str | None) -> TestResult:
    """Turns a clean run into passed or wrong answer by comparing its output."""
    if result.status == PASSED and expected is not None and not outputs_match(result.stdout, expected):
        result.status = WRONG_ANSWER
    return result


HARNESS = SCRIPTS / "harness.py"  # runs a program's tests, one child each, and streams one reply line per test
HARNESS_STATUSES = (PASSED, RUNTIME_ERROR, TIME_LIMIT, MEMORY_LIMIT)


@functools.lru_cache(maxsize=1)
def harness_source() -> str:
    """The harness's source, which a sandbox runs with `python -c` (local jail) or as its script (E2B, Morph)."""
    return HARNESS.read_text()

CUT_SHORT = "the harness stopped before this test finished: the program killed, stalled or confused it"


def _text64(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("malformed text")
    return base64.b64decode(value, validate=True).decode("utf-8", "replace")


def _result_line(line: dict) -> TestResult:
    r = line["result"]
    if r["status"] not in HARNESS_STATUSES:
        raise TypeError("malformed result")
    seconds = float(r["seconds"])
    if not 0.0 <= seconds < 1e6:
        raise ValueError("malformed seconds")
    return TestResult(r["status"], _text64(r["stdout64"]), _text64(r["stderr64"]), seconds)


class NoReply(ValueError):
    """The harness never said `ready`: the sandbox itself failed (an infrastructure failure)."""


def _load_line(line: str | bytes) -> Any:
    if len(line) > MAX_REPLY_LINE:
        return None
    try:
        return json.loads(line)
    except Exception:  # noqa: BLE001 - whatever a line does (too deep, not JSON), it is not a valid reply
        return None


MAX_REPLY_LINE = 96 << 20  # a test's stdout and stderr at their limits, in base64


JUDGED_STDOUT_KEPT = 4096  # chars of a test's stdout kept once judged against an expected output (for reports)


class ReplyReader:
    """Reads the harness's reply line by line as it arrives (see `scripts/harness.py`) and judges each test at once,
    so that the trainer holds one line at a time, not the whole reply: a test's stdout is cut to
    `JUDGED_STDOUT_KEPT` once judged against an expected output, and kept whole only where a checker needs it.

    `feed(line)` returns False once nothing more is wanted (every test has its result, or the reply went wrong).
    `results()` raises NoReply when the harness never said `ready` (the sandbox itself failed: an infrastructure
    failure). After `ready`, a reply that is cut short or malformed in any way is the program's doing: the tests
    without a valid result are runtime errors, never a sandbox error, and nothing in a line can make this raise."""

    def __init__(self, program: Program):
        self.program = program
        self.ready = False
        self.awaiting_compile = program.language == "cpp"  # C++: the compile line comes first
        self.compiled: TestResult | None = None  # a compile error, which every test gets
        self.judged: list[TestResult] = []
        self.broken = False

    def feed(self, line: str | bytes) -> bool:
        item = _load_line(line)
        if not self.ready:
            self.ready = isinstance(item, dict) and item.get("ready") is True
            return True
        if self.broken or self.compiled is not None or len(self.judged) == len(self.program.inputs):
            return False
        if self.awaiting_compile:
            self.awaiting_compile = False
            return self._compile_line(item)
        try:
            result = _result_line(item)
        except Exception:  # noqa: BLE001 - malformed: the program's doing
            self.broken = True
            return False
        expected = self.program.expected[len(self.judged)]
        result = judge(result, expected)
        if expected is not None:
            result.stdout = result.stdout[:JUDGED_STDOUT_KEPT]
        self.judged.append(result)
        return len(self.judged) < len(self.program.inputs)

    def _compile_line(self, item: Any) -> bool:
        try:
            if item["compile"]["ok"] is True:
                return True
            self.compiled = TestResult(COMPILE_ERROR, stderr=_text64(item["compile"]["stderr64"]))
        except Exception:  # noqa: BLE001 - malformed: the program's doing
            self.broken = True
        return False

    def results(self) -> list[TestResult]:
        if not self.ready:
            raise NoReply("no ready line from the sandbox harness")
        if self.compiled is not None:
            return [TestResult(COMPILE_ERROR, stderr=self.compiled.stderr) for _ in self.program.inputs]
        missing = len(self.program.inputs) - len(self.judged)
        return self.judged + [TestResult(RUNTIME_ERROR, stderr=CUT_SHORT) for _ in range(missing)]


def parse_reply(program: Program, lines: list[str]) -> list[TestResult]:
    """Judged results from the harness's reply lines, all at hand (see `ReplyReader`, which reads them as they
    come). Raises NoReply when the harness never said `ready`."""
    reader = ReplyReader(program)
    for line in lines:
        if not reader.feed(line):
            break
    return reader.results()


def program_budget(program: Program, startup: float = 15.0, compile_seconds: float = 60.0) -> float:
    """Wall seconds a sandbox may take for `program` before it is stopped: start-up, the compile, every test at its
    limit. Past it, a program that got its harness ready is judged on what finished (the rest is wrong)."""
    compiling = compile_seconds if program.language == "cpp" else 0.0
    return startup + compiling + len(program.inputs) * (program.time_limit + 1.0)


def harness_request(program: Program, max_output: int = 16 << 20, max_processes: int = 64) -> dict:
    """The request the harness's `serve` takes for `program` (never the expected outputs)."""
    return {
        "language": program.language,
        "code": program.code,
        "inputs": program.inputs,
        "time_limit": program.time_limit,
        "memory_mb": program.memory_mb,
        "max_output": program.output_limit(max_output),
        "nproc": max_processes,
        "argv": program.argv,
        "files": program.files,
        "test_files": program.test_files,
        "output_file": program.output_file,
        "contained": False,
    }
