"""Tools the policy calls during a rollout: a Python interpreter in r1kit's jail, the user's own functions, or an
environment class, handed to TRL's tool loop (`GRPOTrainer(tools=..., environment_factory=...)`).

`tools: [python]` gives each rollout a `PythonInterpreter` (TRL builds one environment per rollout and resets it
between batches). Its one tool, `python(code)`, runs the code in the same jail and under the same limits as the code
rewards (`r1kit.sandbox.LocalProvider`: no network, no host files, its own PID namespace, a memory and process cap, a
per-call time limit, output cut at `tool_max_output` characters, nothing left behind) and returns what it printed.

Each call is **stateless**: a fresh interpreter, nothing carried from an earlier call of the rollout (variables,
files), so that no call can see or change another's work, a sibling rollout's least of all; the model writes each
program whole, as it does for a code reward. A rollout has a budget of calls (`tool_calls_per_rollout`) and of tool
seconds (`tool_seconds_per_rollout`): past it, a call returns an error without running, so thousands of calls cost
nothing. A program's failure is its own (an error message the model reads); the sandbox failing (no jail, a crash of
the harness) is the infrastructure's, and the rollout is marked unjudgeable (`infrastructure_failures`), so its
rewards become None rather than 0.

TRL runs a turn's tool calls one after another; the trainer runs the interpreter calls of a whole batch at once first
(`prefetch`), and each tool call then takes its result from that cache (`Prefetched`).

`tools: ['module:function']` passes the user's functions through to TRL, and `environment: 'module:Class'` the user's
environment class, wrapped so that the members of one GRPO group start from the same state (`SameStartForGroups`: the
random generators are seeded from the row before each reset, as a group's rows are one prompt repeated).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from r1kit.errors import ConfigError
from r1kit.sandbox import MEMORY_LIMIT, PASSED, RUNTIME_ERROR, SANDBOX_ERROR, TIME_LIMIT, Program

logger = logging.getLogger(__name__)

PYTHON = "python"  # the built-in tool's name in `tools:`


@dataclass
class ToolLimits:
    """Per call: `seconds` of wall time, `memory_mb`, `max_output` characters of what it prints. Per rollout:
    `calls` and `total_seconds` of tool time."""

    seconds: float = 5.0
    memory_mb: int = 512
    max_output: int = 4000
    calls: int = 8
    total_seconds: float = 30.0

    def program(self, code: str) -> Program:
        # Output bounded where it is produced: what the model reads (max_output characters, up to 4 bytes each) and
        # room to say it was cut, not the jail's megabytes per call (48 calls held 866 MB in the trainer)
        return Program(code=code, inputs=[""], time_limit=self.seconds, memory_mb=self.memory_mb,
                       max_output=4 * self.max_output + 4096)


@dataclass
class Prefetched:
    """Results computed ahead for the calls of the current turn, by code; shared by every rollout's interpreter."""

    results: dict[str, tuple[str, float, bool]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, code: str) -> tuple[str, float, bool] | None:
        with self.lock:
            return self.results.get(code)

    def put(self, results: dict[str, tuple[str, float, bool]]) -> None:
        with self.lock:
            self.results = dict(results)


def describe_result(result, limits: ToolLimits) -> tuple[str, bool]:
    """(what the model reads, whether the sandbox itself failed) for one `TestResult`."""
    out = result.stdout
    if len(out) > limits.max_output:
        out = out[: limits.max_output] + f"\n... (output cut at {limits.max_output} characters)"
    if result.status == PASSED:
        return out or "(no output)", False
    if result.status == SANDBOX_ERROR:
        return "Error: the interpreter is unavailable (infrastructure failure)", True
    if result.status == TIME_LIMIT:
        return out + f"\nError: the program ran past its time limit ({limits.seconds:g} s) and was stopped", False
    if result.status == MEMORY_LIMIT:
        return out + f"\nError: the program ran past its memory limit ({limits.memory_mb} MB)", False
    error = result.stderr.strip().splitlines()[-3:] if result.stderr.strip() else [result.status]
    kind = "Error" if result.status == RUNTIME_ERROR else f"Error ({result.status})"
    return (out + f"\n{kind}: " + " | ".join(error))[-limits.max_output:], False


def run_programs(provider, codes: list[str], limits: ToolLimits) -> dict[str, tuple[str, float, bool]]:
    """Each distinct program once, all at once (the provider's pool): {code: (text, seconds, sandbox failed)}."""
    distinct = list(dict.fromkeys(codes))
    if not distinct:
        return {}
    start = time.monotonic()
    try:
        outcomes = provider.execute([limits.program(code) for code in distinct])
    except Exception as e:  # noqa: BLE001 - the sandbox's own failure: infrastructure, never the model's
        logger.warning("The python tool's sandbox failed (infrastructure; rollouts unjudged): %s", e)
        return {code: ("Error: the interpreter is unavailable (infrastructure failure)", 0.0, True) for code in distinct}
    elapsed = time.monotonic() - start
    results = {}
    for code, tests in zip(distinct, outcomes):
        text, failed = describe_result(tests[0], limits) if tests else ("(no output)", False)
        results[code] = (text, tests[0].seconds if tests else elapsed, failed)
    return results


class CountedEnvironment:
    """An environment of r1kit's whose rollouts are counted: calls, errors, tool seconds, and infrastructure failures
    (any makes the rollout's rewards None: `r1kit.integrity.rewardtap`); the trainer logs them as `tools/*`."""

    def _reset_counters(self) -> None:
        self.calls, self.errors, self.seconds, self.infrastructure_failures = 0, 0, 0.0, 0

    def _budget_spent(self) -> str | None:
        """The error a call past the rollout's budget of calls or tool seconds reads (counted), or None."""
        limits = self.limits
        if self.calls < limits.calls and self.seconds < limits.total_seconds:
            return None
        self.errors += 1
        return (f"Error: this rollout's tool budget is spent ({limits.calls} calls, {limits.total_seconds:g} s); "
                "answer without the tool")


class PythonInterpreter(CountedEnvironment):
    """One rollout's Python tool (a TRL environment: `reset` between batches, its public method `python` is the tool).
    Stateless calls in r1kit's jail; the rollout's budget of calls and seconds; what happened, for the records."""

    provider = None  # shared by every interpreter of the run (set by `python_environment`)
    limits = ToolLimits()
    prefetched: Prefetched | None = None

    def __init__(self):
        self.reset()

    def reset(self, **kwargs) -> None:
        self._reset_counters()

    def python(self, code: str) -> str:
        """Runs a Python program and returns what it prints. Each call starts fresh.

        Args:
            code: The whole program; print the result.
        """
        limits = self.limits
        if not isinstance(code, str) or not code.strip():
            self.errors += 1
            return "Error: no code given"
        spent = self._budget_spent()
        if spent:
            return spent
        self.calls += 1
        ahead = self.prefetched.take(code) if self.prefetched is not None else None
        text, seconds, failed = ahead or run_programs(self.provider, [code], limits)[code]
        self.seconds += seconds
        if failed:
            self.infrastructure_failures += 1
        elif text.startswith("Error") or "\nError" in text:
            self.errors += 1
        return text


def python_environment(limits: ToolLimits, provider=None) -> type[PythonInterpreter]:
    """The interpreter class for a run: every instance shares `provider` (the jail's pool), `limits` and the cache
    of calls run ahead."""
    if provider is None:
        from r1kit.sandbox import get_provider  # deferred: builds the jail provider (checks bubblewrap)

        provider = get_provider("local")
    return type("PythonInterpreter", (PythonInterpreter,), {
        "provider": provider, "limits": limits, "prefetched": Prefetched(), "__doc__": PythonInterpreter.__doc__})


def python_calls(messages: list) -> list[str]:
    """The code of every `python` tool call in a turn's parsed message(s)."""
    codes = []
    for message in messages if isinstance(messages, list) else [messages]:
        for call in (message or {}).get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and function.get("name") == PYTHON:
                arguments = function.get("arguments")
                code = arguments.get("code") if isinstance(arguments, dict) else None
                if isinstance(code, str) and code.strip():
                    codes.append(code)
    return codes


# --------------------------------------------------------------------------------------------------------------------
# The model's turns, parsed as hostile input
# --------------------------------------------------------------------------------------------------------------------
MAX_CALLS_PER_TURN = 64
MAX_ARGUMENT_DEPTH = 16  # nesting of a call's arguments (objects and lists)
MAX_ARGUMENT_ITEMS = 10_000  # keys, items and values in a call's arguments
MAX_TURN_ARGUMENT_CHARS = 1 << 20  # characters of every string in a turn's calls, names and keys included
UNPARSED_TURNS = [0]  # turns whose calls could not be taken (the trainer logs and resets it per batch)


def checked_response(parse: Callable) -> Callable:
    """TRL's `parse_response`, total: a turn whose calls cannot be parsed or taken (arguments nested hundreds deep,
    which made the parser raise RecursionError and killed the run; arguments that are not an object; megabytes of
    arguments; strings that are not valid UTF-8; a call without a name) is the model's plain text, with no call, as
    TRL already treats a call it cannot parse. Counted in `UNPARSED_TURNS`."""
    import functools

    @functools.wraps(parse)
    def checked(tokenizer, ids, *args, **kwargs):
        try:
            parsed = parse(tokenizer, ids, *args, **kwargs)
            problem = response_problem(parsed)
        except Exception as error:  # noqa: BLE001 - RecursionError, MemoryError, anything the model's text provokes
            problem = type(error).__name__
        if problem is None:
            return parsed
        UNPARSED_TURNS[0] += 1
        logger.debug("a turn's tool calls are taken as plain text: %s", problem)
        try:
            content = tokenizer.decode(ids, skip_special_tokens=True)
        except Exception:  # noqa: BLE001
            content = ""
        return {"role": "assistant", "content": content.encode("utf-8", "replace").decode("utf-8")}

    return checked


def response_problem(parsed) -> str | None:
    """Why a parsed turn cannot be taken as it is, or None. Walks the calls' arguments without recursion."""
    if not isinstance(parsed, dict):
        return "not a message"
    if not isinstance(parsed.get("content", ""), str):
        return "content that is not text"
    calls = parsed.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list) or len(calls) > MAX_CALLS_PER_TURN:
        return f"tool_calls is not a list of at most {MAX_CALLS_PER_TURN} calls"
    chars = 0
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            return "a call without a function name"
        if not isinstance(function.get("arguments"), dict):
            return "a call whose arguments are not an object"
        stack, items = [(function["arguments"], 1), (function["name"], 1)], 0
        while stack:
            value, depth = stack.pop()
            items += 1
            if depth > MAX_ARGUMENT_DEPTH or items > MAX_ARGUMENT_ITEMS:
                return f"arguments nested deeper than {MAX_ARGUMENT_DEPTH} or larger than {MAX_ARGUMENT_ITEMS} items"
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        return "an argument name that is not text"
                    stack += [(key, depth), (item, depth + 1)]
            elif isinstance(value, list):
                stack += [(item, depth + 1) for item in value]
            elif isinstance(value, str):
                chars += len(value)
                if chars > MAX_TURN_ARGUMENT_CHARS:
                    return f"more than {MAX_TURN_ARGUMENT_CHARS} characters of arguments"
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return "text that is not valid UTF-8 (a lone surrogate)"
            elif not (value is None or isinstance(value, (bool, int, float))):
                return f"an argument of type {type(value).__name__}"
    return None


def prefetch(environment: type[PythonInterpreter], turns: list, interpreters: list | None = None) -> int:
    """Runs the python calls of this turn's messages (one per rollout) at once and leaves the results where each
    rollout's interpreter takes them; returns how many programs ran. Each rollout's calls run only as far as its
    budget left can read them (`ahead_budget`: its interpreter in `interpreters`, at the same place as its turn;
    without one, a fresh rollout's budget), so the jail's work grows with the budget, never with what the model
    asks for."""
    codes = []
    for k, turn in enumerate(turns):
        interpreter = interpreters[k] if interpreters is not None and k < len(interpreters) else None
        codes += python_calls(turn)[:ahead_budget(environment.limits, interpreter)]
    results = run_programs(environment.provider, codes, environment.limits) if codes else {}
    environment.prefetched.put(results)
    return len(results)


def ahead_budget(limits: ToolLimits, interpreter=None) -> int:
    """How many more calls a rollout can still have run for it: its calls left, and no more than its tool seconds
    left could take at each call's time limit (a call may use all of it). A rollout without an interpreter of ours
    (none given, a user's environment) gets a fresh budget."""
    calls = getattr(interpreter, "calls", 0) if isinstance(interpreter, PythonInterpreter) else 0
    seconds = getattr(interpreter, "seconds", 0.0) if isinstance(interpreter, PythonInterpreter) else 0.0
    by_time = math.ceil(max(0.0, limits.total_seconds - seconds) / limits.seconds)
    return max(0, min(limits.calls - calls, by_time))


# --------------------------------------------------------------------------------------------------------------------
# The user's tools and environments
# --------------------------------------------------------------------------------------------------------------------
def import_object(path: str, what: str):
    """`package.module:name`, imported; a `ConfigError` in one line when it cannot be."""
    import importlib

    module, _, name = path.partition(":")
    if not module or not name:
        raise ConfigError(f"{what}: {path!r} is not an import path 'package.module:name'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{what}: cannot import {path!r} ({type(e).__name__}: {e})") from e


def group_seed(kwargs: dict) -> int:
    """A seed from a row's content: a GRPO group's rows are one prompt repeated, so its members get one seed."""
    text = repr(sorted((str(k), repr(v)) for k, v in kwargs.items()))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def same_start_for_groups(environment_class: type) -> type:
    """`environment_class` whose `reset(**row)` runs with Python's and numpy's random generators seeded from the
    row, so that an environment that samples its start (a puzzle, a board) gives every member of a group the same one:
    otherwise their rewards compare different tasks. The same row always starts the same way: the row is the task."""

    class SameStartForGroups(environment_class):
        def reset(self, **kwargs):
            seed = group_seed(kwargs)
            state = (random.getstate(), _numpy_state())
            random.seed(seed)
            _seed_numpy(seed)
            try:
                return super().reset(**kwargs)
            finally:
                random.setstate(state[0])
                _restore_numpy(state[1])

    SameStartForGroups.__name__ = environment_class.__name__
    SameStartForGroups.__qualname__ = environment_class.__qualname__
    SameStartForGroups.__doc__ = environment_class.__doc__
    return SameStartForGroups


def _numpy_state():
    try:
        import numpy as np
    except ImportError:
        return None
    return np.random.get_state()


def _seed_numpy(seed: int) -> None:
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed % 2**32)


def _restore_numpy(state) -> None:
    if state is not None:
        import numpy as np

        np.random.set_state(state)


def check_tool_template(tokenizer) -> None:
    """Tools need a chat template that renders a whole tool conversation and whose tool calls TRL can parse back."""
    from trl.chat_template_utils import supports_tool_calling  # deferred: trl

    if not supports_tool_calling(tokenizer):
        raise ConfigError("tools: this model's chat template cannot render a tool conversation (assistant tool calls, "
                          "tool results); set chat_template: qwen2.5 (or qwen3, llama3.1: templates whose tool calls "
                          "TRL parses; r1kit-tools: r1kit's compact one, for small models)")


def build(names: list[str], environment: str | type | None,
          limits: ToolLimits) -> tuple[list[Callable], Callable | None]:
    """(standalone tools, environment factory) for TRL from the recipe's `tools` and `environment`: `python` is
    r1kit's interpreter environment; `module:function` a tool of the user's; `environment: module:Class` the user's
    environment class (with `SameStartForGroups`), or an environment class already made (an OpenEnv server's,
    `r1kit.training.environments`)."""
    tools, factory = [], None
    for name in names:
        if name == PYTHON:
            factory = python_environment(limits)
        else:
            function = import_object(name, "tools")
            if not callable(function):
                raise ConfigError(f"tools: {name!r} is not a function")
            tools.append(function)
    if environment:
        if factory is not None:
            raise ConfigError("tools: python and environment: are each an environment; TRL takes one of them: put "
                              "the interpreter's method on your environment, or drop one")
        if isinstance(environment, type):
            return tools, environment
        environment_class = import_object(environment, "environment")
        if not isinstance(environment_class, type):
            raise ConfigError(f"environment: {environment!r} is not a class")
        factory = same_start_for_groups(environment_class)
    return tools, factory
