"""Code execution for the code rewards: one interface, several back ends.

A provider `execute`s a batch of `Program`s (code, language, per-test stdin and expected output, limits) and returns,
per program, one `TestResult` per test with a status: passed, wrong answer, runtime error, time limit, memory limit,
compile error or sandbox error. `sandbox_error` means the back end itself failed (could not start, remote 5xx): the
rewards turn it into `None`, never into a 0.

Back ends: `local` (default; a bubblewrap jail on this machine, no account), `piston` (a Piston server), `e2b` and `morph` (their
routers over HTTP, or their SDKs from `pip install r1kit[code]`).

Layout: `program.py` (the interface: Program, TestResult, statuses, the harness protocol), `jail.py` (the jail and
running a process in it), `local.py` and `remote.py` (the providers), `scripts/` (what runs inside a jail, never
imported by r1kit).
"""

from __future__ import annotations

from typing import Literal, get_args

from r1kit.sandbox.local import LocalProvider
from r1kit.sandbox.program import (
    COMPILE_ERROR,
    CUT_SHORT,
    HARNESS,
    LANGUAGES,
    MEMORY_LIMIT,
    PASSED,
    RUNTIME_ERROR,
    SANDBOX_ERROR,
    TIME_LIMIT,
    WRONG_ANSWER,
    NoReply,
    Program,
    Provider,
    ReplyReader,
    TestResult,
    harness_request,
    harness_source,
    judge,
    normalise_output,
    outputs_match,
    parse_reply,
    program_budget,
)
from r1kit.sandbox.remote import E2BProvider, MorphProvider, PistonProvider

__all__ = [
    "COMPILE_ERROR", "CUT_SHORT", "HARNESS", "LANGUAGES", "MEMORY_LIMIT", "PASSED", "PROVIDERS", "RUNTIME_ERROR",
    "SANDBOX_ERROR", "TIME_LIMIT", "WRONG_ANSWER", "NoReply", "Program", "Provider", "ProviderName", "ReplyReader", "TestResult",
    "get_provider", "harness_request", "harness_source", "judge", "normalise_output", "outputs_match", "parse_reply",
    "program_budget",
]

ProviderName = Literal["local", "piston", "e2b", "morph"]
PROVIDERS: tuple[str, ...] = get_args(ProviderName)
_CLASSES = {"local": LocalProvider, "piston": PistonProvider, "e2b": E2BProvider, "morph": MorphProvider}


def get_provider(name: ProviderName = "local", **options) -> Provider:
    """The provider `name` (`local`, `piston`, `e2b`, `morph`) built with `options`."""
    if name not in _CLASSES:
        raise ValueError(f"unknown code provider '{name}'; available: {', '.join(PROVIDERS)}")
    return _CLASSES[name](**options)
