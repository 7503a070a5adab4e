"""Does a program with many busy children starve its sibling in the local sandbox? A benchmark, not a test: how much
CPU each sibling gets depends on what else the machine runs.

    python benchmarks/sandbox_fairness.py [--rounds 3]

An honest program needs 0.5 s of CPU per test (2 s limit, 2 tests). It runs next to a saboteur that forks 60 busy
children, each trying setsid() to get a scheduling group (a CPU share) of its own, and, for comparison, next to a
sibling with one busy process. Before the jail kept every process in one session, the honest program passed 2 tests
of 6 next to the saboteur; now it should pass about as many as next to the benign sibling (the test suite checks the
cause, that every child stays in the jail's group: tests/test_sandbox_containment.py).
"""

from __future__ import annotations

import argparse
import textwrap

from r1kit.sandbox import Program, get_provider

SABOTEUR = textwrap.dedent("""
    import os, time
    print("ok", flush=True)
    for _ in range(60):
        if os.fork() == 0:
            try:
                os.setsid()
            except OSError:
                pass
            end = time.time() + 1.0
            while time.time() < end:
                pass
            os._exit(0)
    time.sleep(1.1)
""")
BENIGN_BUSY = "import time\nend = time.time() + 1.0\nwhile time.time() < end:\n    pass\nprint('ok')\n"
HONEST_CPU = textwrap.dedent("""
    import time
    start = time.process_time()
    while time.process_time() - start < 0.5:
        pass
    print("ok")
""")


def honest_passes(neighbour: str, rounds: int) -> int:
    """Tests the honest program passed in `rounds` rounds of 2 tests, run in parallel beside `neighbour`."""
    provider, passes = get_provider("local", num_parallel=2), 0
    for _ in range(rounds):
        other = Program(neighbour, inputs=[""] * 2, expected=["ok\n"] * 2, time_limit=2)
        fair = Program(HONEST_CPU, inputs=[""] * 2, expected=["ok\n"] * 2, time_limit=2)
        passes += sum(r.passed for r in provider.execute([other, fair])[1])
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    print(f"honest program beside 60 busy setsid() children: {honest_passes(SABOTEUR, rounds)} of {2 * rounds} passed")
    print(f"honest program beside one busy process:          {honest_passes(BENIGN_BUSY, rounds)} of {2 * rounds} passed")


if __name__ == "__main__":
    main()
