"""IOI graders share their solution's process: hostile solutions that read the hidden test again or replace what the
grader calls score as wrong, and honest ones are unaffected. Each program is bounded (one test, 2 s)."""

from __future__ import annotations

import logging
import textwrap

import pytest

from r1kit.sandbox import COMPILE_ERROR, PASSED, WRONG_ANSWER, Program, get_provider, jail, local
from r1kit.sandbox.jail import probe

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no jail here: {probe()}")

HEADER = "int solve();\n"
GRADER = textwrap.dedent(r"""
    #include <cstdio>
    #include <vector>
    #include "hid.h"
    std::vector<int> hidden;
    int main() {
        int n; if (scanf("%d", &n) != 1) return 1;
        hidden.resize(n); long long sum = 0;
        for (int& x : hidden) { if (scanf("%d", &x) != 1) return 1; sum += x; }
        puts(solve() == sum % 1000003 ? "OK" : "WRONG");
    }
""")
HONEST = textwrap.dedent(r"""
    #include <bits/stdc++.h>
    #include "hid.h"
    int solve() { std::vector<int> v = {3, 1, 2}; std::sort(v.begin(), v.end()); std::map<std::string, int> m;
                  m[std::to_string(v[0])] = 1; std::cout << std::flush; return (int) m.size() - 1; }
""")
CHEATS = {
    "re-read stdin from offset 0": r"""
        #include <unistd.h>
        #include <cstdio>
        #include <cstdlib>
        #include "hid.h"
        int solve() {
            static char buf[1 << 16]; ssize_t got = pread(0, buf, sizeof buf - 1, 0);
            if (got <= 0) return -1; buf[got] = 0; char* p = buf; long n = strtol(p, &p, 10), sum = 0;
            for (long i = 0; i < n; i++) sum += strtol(p, &p, 10);
            return (int) (sum % 1000003);
        }""",
    "its own puts": r"""
        #include <unistd.h>
        #include "hid.h"
        extern "C" int puts(const char*) { write(1, "OK\n", 3); return 0; }
        int solve() { return -1; }""",
    "a weak puts": r"""
        #include <unistd.h>
        #include "hid.h"
        extern "C" __attribute__((weak)) int puts(const char*) { write(1, "OK\n", 3); return 0; }
        int solve() { return -1; }""",
    "the grader's globals": r"""
        #include <vector>
        #include "hid.h"
        extern std::vector<int> hidden;
        int solve() { long long s = 0; for (int x : hidden) s += x; return (int) (s % 1000003); }""",
    "operator new": r"""
        #include <cstdlib>
        #include <new>
        #include "hid.h"
        void* operator new(std::size_t n) { return std::malloc(n); }
        int solve() { return -1; }""",
}


def judge(code: str, values: list[int]) -> str:
    test = f"{len(values)}\n{' '.join(map(str, values))}\n"
    program = Program(code, language="cpp", inputs=[test], expected=["OK\n"], time_limit=2, memory_mb=256,
                      files={"grader.cpp": GRADER, "hid.h": HEADER})
    ((result,),) = get_provider("local", num_parallel=1).execute([program])
    return result.status


@pytest.mark.slow
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_ioi_cheats_score_wrong(cheat):
    assert judge(textwrap.dedent(CHEATS[cheat]), [5, 7]) in (WRONG_ANSWER, COMPILE_ERROR)


@pytest.mark.slow
def test_honest_ioi_solutions_still_pass_with_large_inputs():
    """The honest solution's answer is 0: the sum of the values must be 0 mod 1000003. 400,000 values (~2.4 MB of
    stdin) go through the pipe's feeder; a few go through the pipe directly."""
    small = [1000003, 0, 2 * 1000003]
    large = [1000003] * 400_000
    assert judge(HONEST, small) == PASSED
    assert judge(HONEST, large) == PASSED


def test_an_unenforced_memory_cap_is_said_once_with_what_to_do(monkeypatch, caplog):
    monkeypatch.setattr(jail, "cgroup_parents", lambda: None)
    monkeypatch.setattr(local, "_UNCAPPED_WARNED", type(local._UNCAPPED_WARNED)())
    with caplog.at_level(logging.WARNING, logger="r1kit.sandbox.local"):
        get_provider("local", max_processes=32)
        get_provider("local")
    said = [r.getMessage() for r in caplog.records if "no cap on a program's whole memory" in r.getMessage()]
    assert len(said) == 1
    assert "32 processes" in said[0] and "MemoryMax" in said[0] and "cgroup v2" in said[0]
