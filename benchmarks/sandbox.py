"""Local sandbox throughput: r1kit's jailed provider vs a naive, unisolated one-subprocess-per-test loop, in one run.

    python benchmarks/sandbox.py [--programs 64] [--tests 5] [--cpp-programs 8]

64 small Python programs x 5 tests each (a realistic mix: most correct, some wrong, a few crashing). The naive loop is
what Open-R1's evaluation script does inside its sandbox: `python3 -c CODE` per test with a timeout, sequentially, with
no isolation at all. r1kit starts one bubblewrap jail per program (namespaces, seccomp, unprivileged uid, cgroups as
root) whose harness runs each test in a forked child, with programs in parallel over the cores. Prints test
executions per second for both and the ratio (goal >= 1.2x the naive loop). Then C++: seconds per program (compile +
5 tests) for both.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time

from r1kit.sandbox import Program, get_provider, outputs_match

SOLUTIONS = [
    ("a, b = map(int, input().split())\nprint(a + b)", lambda a, b: a + b),
    ("a, b = map(int, input().split())\nprint(a * b)", lambda a, b: a * b),
    ("a, b = map(int, input().split())\nprint(max(a, b))", lambda a, b: max(a, b)),
    ("a, b = map(int, input().split())\nprint(a - b + 1)", lambda a, b: a - b),  # wrong
    ("a, b = map(int, input().split())\nprint(a // 0)", lambda a, b: a),  # crashes
]


def make_programs(n: int, tests: int, seed: int = 0) -> list[Program]:
    rng = random.Random(seed)
    programs = []
    for i in range(n):
        code, truth = SOLUTIONS[i % len(SOLUTIONS)]
        pairs = [(rng.randint(1, 999), rng.randint(1, 999)) for _ in range(tests)]
        programs.append(Program(code, inputs=[f"{a} {b}\n" for a, b in pairs], expected=[f"{truth(a, b)}\n" for a, b in pairs], time_limit=5))
    return programs


CPP = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}"


def naive_cpp(programs: list[Program]) -> list[list[bool]]:
    import os
    import tempfile

    results = []
    for program in programs:
        with tempfile.TemporaryDirectory() as folder:
            source, binary = os.path.join(folder, "s.cpp"), os.path.join(folder, "s")
            with open(source, "w") as f:
                f.write(program.code)
            built = subprocess.run(["g++", "-O2", "-std=c++17", "-o", binary, source], capture_output=True).returncode == 0
            passed = []
            for stdin, expected in zip(program.inputs, program.expected):
                proc = subprocess.run([binary], input=stdin, capture_output=True, text=True, timeout=5) if built else None
                passed.append(bool(proc) and proc.returncode == 0 and outputs_match(proc.stdout, expected))
            results.append(passed)
    return results


def naive(programs: list[Program]) -> list[list[bool]]:
    results = []
    for program in programs:
        passed = []
        for stdin, expected in zip(program.inputs, program.expected):
            try:
                proc = subprocess.run([sys.executable, "-c", program.code], input=stdin, capture_output=True, text=True, timeout=5)
                passed.append(proc.returncode == 0 and outputs_match(proc.stdout, expected))
            except subprocess.TimeoutExpired:
                passed.append(False)
        results.append(passed)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--cpp-programs", type=int, default=8)
    opts = parser.parse_args()
    programs = make_programs(opts.programs, opts.tests)
    executions = opts.programs * opts.tests
    provider = get_provider("local")
    provider.execute(programs[:2])  # namespace detection, warm caches

    timings = {"naive": [], "r1kit": []}
    outcomes = {}
    for _ in range(2):  # interleaved: naive, r1kit, naive, r1kit
        start = time.perf_counter()
        outcomes["naive"] = naive(programs)
        timings["naive"].append(time.perf_counter() - start)
        start = time.perf_counter()
        outcomes["r1kit"] = [[t.passed for t in r] for r in provider.execute(programs)]
        timings["r1kit"].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in timings.items()}
    print(f"{opts.programs} programs x {opts.tests} tests = {executions} executions (best of 2 interleaved runs)")
    print(f"naive subprocess per test: {best['naive']:.2f} s  {executions / best['naive']:6.1f} exec/s")
    print(f"r1kit local provider     : {best['r1kit']:.2f} s  {executions / best['r1kit']:6.1f} exec/s (jailed)")
    print(f"ratio r1kit / naive = {best['naive'] / best['r1kit']:.2f}x; goal >= 1.2x")
    print(f"same verdicts on every test: {outcomes['naive'] == outcomes['r1kit']}")

    rng = random.Random(1)
    cpp = []
    for _ in range(opts.cpp_programs):
        pairs = [(rng.randint(1, 999), rng.randint(1, 999)) for _ in range(opts.tests)]
        cpp.append(Program(CPP, language="cpp", inputs=[f"{a} {b}\n" for a, b in pairs],
                           expected=[f"{a + b}\n" for a, b in pairs], time_limit=5))
    start = time.perf_counter()
    naive_verdicts = naive_cpp(cpp)
    naive_s = time.perf_counter() - start
    start = time.perf_counter()
    r1kit_verdicts = [[t.passed for t in r] for r in provider.execute(cpp)]
    r1kit_s = time.perf_counter() - start
    print(f"C++, {opts.cpp_programs} programs (compile + {opts.tests} tests each): naive {naive_s / len(cpp):.2f} s/program, "
          f"r1kit {r1kit_s / len(cpp):.2f} s/program ({len(cpp) / r1kit_s:.2f} programs/s); "
          f"same verdicts: {naive_verdicts == r1kit_verdicts}")


if __name__ == "__main__":
    main()
