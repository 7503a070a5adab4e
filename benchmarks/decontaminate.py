"""Decontamination speed: r1kit's n-gram index against the plain loop, on 100k generated rows and all five benchmarks.

    OMP_NUM_THREADS=1 python benchmarks/decontaminate.py [--rows 100000] [--planted 300] [--naive-rows 2000]

The Hub benchmarks cannot be reached offline, so the script writes local stand-ins of their size and schema (MATH-500:
500 problems, AIME 24 + 25: 60, GPQA diamond: 198 questions in GPQA's columns, LiveCodeBench v4: 700 long statements
in its columns) and 100k math-problem-like training rows. `--planted` rows get a passage of 8-16 words copied from a
benchmark question (case and spacing changed); as many get a 7-word passage, which must stay.

Timed in one run, on the same rows:
- r1kit: `NgramIndex` + `find_contaminated` over all rows (the core), and the whole command end to end (`run()`:
  reading the jsonl files, filtering, writing the output folder);
- the same check through `datasets.map(batched=True, num_proc=2)`, to justify the plain loop r1kit uses;
- the naive loop: for each row, for each benchmark question, compare the row's n-gram set with the question's
  (the questions' sets built once, beforehand). It runs on a subset (`--naive-rows`: every planted and near-miss row
  plus random others) and its rows/s is extrapolated to all rows; the two must remove exactly the same rows there.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from r1kit.decontaminate import NgramIndex, find_contaminated, load_benchmark_questions, ngrams, run

NAMES = ["Alice", "Bob", "Carla", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi", "Lena"]
THINGS = ["apples", "marbles", "coins", "tickets", "books", "pencils", "cards", "stamps", "beads", "tiles"]
SHAPES = ["triangles", "squares", "hexagons", "circles", "trapezoids", "rhombi", "pentagons", "rectangles"]
VARS = ["x", "y", "z", "a", "b", "c", "n", "m", "k", "p", "q", "r", "t"]


def _n(rng, low=2, high=99999) -> int:
    return rng.randint(low, high)


def _pick(rng: random.Random, template: str) -> str:
    """`{a|b|c}` groups -> one of their choices: wording varies the way real problems do."""
    import re

    return re.sub(r"\{([^{}]*\|[^{}]*)\}", lambda m: rng.choice(m[1].split("|")), template)


def math_sentence(rng: random.Random) -> str:
    """One sentence of a competition-style problem. At most three words without a number between two numbers (or
    formulas), as in real problems: two distinct generated problems then share almost no 8-gram by chance, as two
    distinct real ones do, so what the benchmark removes is what was planted."""
    v, w = rng.sample(VARS, 2)
    templates = [
        lambda: f"If $x^2+{_n(rng)}x-{_n(rng)}=0$ {{and|while}} ${w}={_n(rng)}$, {{find|compute}} $x+{w}^{{{_n(rng)}}}$.",
        lambda: f"{rng.choice(NAMES)} {{has|owns}} {_n(rng)} {rng.choice(THINGS)} {{and|but}} {{gives|sells}} {_n(rng)} "
                f"to {rng.choice(NAMES)} every {_n(rng)} {{days.|weeks.}}",
        lambda: f"{_n(rng)} {rng.choice(SHAPES)} {{share|have}} side {_n(rng)} {{and|with}} area "
                f"${_n(rng)}\\sqrt{{{_n(rng)}}}$.",
        lambda: f"{{Find|Compute}} ${_n(rng)}^{{{_n(rng)}}}$ modulo {_n(rng)}.",
        lambda: f"{{Among|For}} $0<{v}<{w}<{_n(rng)}$, count pairs with ${v}{w}={_n(rng)}$.",
        lambda: f"The first {_n(rng)} terms {{sum to|total}} {_n(rng)}; {{the difference|the ratio}} is {_n(rng)}.",
        lambda: f"{{Compute|Evaluate}} $\\sum_{{{v}=1}}^{{{_n(rng)}}}\\frac{{{_n(rng)}}}{{{v}+{_n(rng)}}}$.",
        lambda: f"{_n(rng)} {{red|green}} and {_n(rng)} {{blue|white}} balls; {_n(rng)} {{drawn.|taken.}}",
        lambda: f"{{Simplify|Reduce}} ${w}={_n(rng)}/{_n(rng)}$.",
        lambda: f"{_n(rng)} dice with {_n(rng)} sides {{give|make}} {{sum|product}} {_n(rng)}: probability?",
    ]
    return _pick(rng, rng.choice(templates)())


def math_problem(rng: random.Random, sentences: tuple[int, int] = (3, 7)) -> str:
    return " ".join(math_sentence(rng) for _ in range(rng.randint(*sentences)))


def science_question(rng: random.Random) -> str:
    """GPQA-like: a long science paragraph (about 60-150 words)."""
    parts = []
    for _ in range(rng.randint(6, 12)):
        parts.append(_pick(rng, rng.choice([
            f"{_n(rng)} mg of {{compound|sample}} X{_n(rng)} heated to {_n(rng)} K in {_n(rng)} L.",
            f"Rate constant {_n(rng)}.{_n(rng)} per second at {_n(rng)} K.",
            f"Electron level n={_n(rng)} (Z={_n(rng)}) emits at {_n(rng)} nm.",
            f"Gene G{_n(rng)}, knocked out in {_n(rng)}% of cells after {_n(rng)} h.",
            f"Star mass {_n(rng)} solar, distance {_n(rng)} parsecs.",
        ])))
    return " ".join(parts) + " Which of the following is correct?"


def code_statement(rng: random.Random) -> str:
    """LiveCodeBench-like: a long problem statement with AtCoder/LeetCode boilerplate (about 250-400 words)."""
    n = _n(rng, 2, 9)
    story = " ".join(math_sentence(rng) for _ in range(rng.randint(6, 10)))
    return (
        f"You are given a sequence of {n} integers A_1, A_2, ..., A_{n} and an integer K = {_n(rng)}. {story}\n\n"
        "Find the number of pairs satisfying the condition, modulo 998244353.\n\n"
        "Input\n\nThe input is given from Standard Input in the following format:\nN K\nA_1 A_2 ... A_N\n\n"
        "Output\n\nPrint the answer.\n\n"
        f"Constraints\n\n- 1 \\leq N \\leq {_n(rng, 100, 200000)}\n- 0 \\leq A_i \\leq {_n(rng, 100, 10**9)}\n"
        "- All input values are integers.\n\n"
        f"Sample Input 1\n\n{n} {_n(rng)}\n{' '.join(str(_n(rng, 0, 99)) for _ in range(n))}\n\n"
        f"Sample Output 1\n\n{_n(rng)}\n\nExplanation: {' '.join(math_sentence(rng) for _ in range(rng.randint(3, 6)))}"
    )


def write_benchmarks(folder: Path, rng: random.Random) -> list[str]:
    """Local stand-ins of the five built-in benchmarks, each in its Hub schema; returns their paths."""
    files = {
        "math_500": [{"problem": math_problem(rng), "answer": str(_n(rng))} for _ in range(500)],
        "aime24": [{"problem": math_problem(rng, (3, 6)), "answer": str(_n(rng, 0, 999))} for _ in range(30)],
        "aime25": [{"problem": math_problem(rng, (3, 6)), "answer": str(_n(rng, 0, 999))} for _ in range(30)],
        "gpqa": [{"Question": science_question(rng), "Correct Answer": f"{_n(rng)} J",
                  "Incorrect Answer 1": f"{_n(rng)} J", "Incorrect Answer 2": f"{_n(rng)} J",
                  "Incorrect Answer 3": f"{_n(rng)} J"} for _ in range(198)],
        "lcb_v4": [{"question_title": f"problem {i}", "question_content": code_statement(rng), "platform": "atcoder",
                    "public_test_cases": json.dumps([{"input": "1 2\n3\n", "output": "3\n", "testtype": "stdin"}]),
                    "private_test_cases": "", "starter_code": "", "metadata": "{}"} for i in range(700)],
    }
    paths = []
    for name, rows in files.items():
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(path))
    return paths


def garble(words: list[str], rng: random.Random) -> str:
    """A copied passage as a contaminated row would hold it: case and spacing changed."""
    out = [w.upper() if rng.random() < 0.2 else w.capitalize() if rng.random() < 0.2 else w for w in words]
    return "".join(w + rng.choice([" ", "  ", "\n", "\t "]) for w in out).strip()


def write_training(path: Path, rows: int, planted: int, questions: list[list[str]], rng: random.Random):
    """`rows` problems; `planted` of them hold an 8-16-word benchmark passage, `planted` others a 7-word one."""
    texts = [math_problem(rng) for _ in range(rows)]
    chosen = rng.sample(range(rows), 2 * planted)
    contaminated, near_misses = sorted(chosen[:planted]), sorted(chosen[planted:])
    for i, length in [(i, rng.randint(8, 16)) for i in contaminated] + [(i, 7) for i in near_misses]:
        q = rng.choice([q for q in questions if len(q) >= length])
        start = rng.randint(0, len(q) - length)
        # unique markers around the passage: no word next to it can extend a 7-word passage to a shared 8-gram
        texts[i] = f"{texts[i]} [ref-{i}a] {garble(q[start : start + length], rng)} [ref-{i}b] {math_sentence(rng)}"
    path.write_text("".join(json.dumps({"problem": t, "solution": "..."}) + "\n" for t in texts))
    return texts, set(contaminated), set(near_misses)


def naive(texts: list[str], question_sets: list[set], n: int) -> set[int]:
    """The plain way: every row against every benchmark question, one set comparison each."""
    removed = set()
    for i, text in enumerate(texts):
        grams = set(ngrams(text, n))
        for q in question_sets:
            if not grams.isdisjoint(q):
                removed.add(i)
                break
    return removed


def mapped(texts: list[str], index: NgramIndex, num_proc: int) -> set[int]:
    """The fast check through `datasets.map(batched=True, num_proc=...)`."""
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"problem": texts})
    flags = ds.map(lambda b: {"hit": [index.contaminated(t) for t in b["problem"]]}, batched=True, batch_size=5000,
                   num_proc=num_proc, remove_columns=["problem"])["hit"]
    return {i for i, hit in enumerate(flags) if hit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--planted", type=int, default=300)
    parser.add_argument("--naive-rows", type=int, default=2000)
    parser.add_argument("--ngram", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bench_files = write_benchmarks(folder, rng)
        benchmarks = [load_benchmark_questions(f) for f in bench_files]
        all_words = [q.lower().split() for b in benchmarks for q in b.questions]
        train_file = folder / "train.jsonl"
        texts, planted, near = write_training(train_file, opts.rows, opts.planted, all_words, rng)
        words = sum(len(t.split()) for t in texts) / len(texts)
        print(f"{len(texts):,} training rows ({words:.0f} words on average), {opts.planted} planted overlaps, "
              f"{len(near)} 7-word near misses; benchmarks: "
              + ", ".join(f"{Path(b.name).stem} {len(b.questions)}" for b in benchmarks))

        t0 = time.perf_counter()
        index = NgramIndex.build(benchmarks, opts.ngram)
        t1 = time.perf_counter()
        found = find_contaminated(texts, index, total=len(texts))
        t2 = time.perf_counter()
        fast_removed = set(found)
        fast_s, build_s = t2 - t1, t1 - t0

        t3 = time.perf_counter()
        mapped_removed = mapped(texts, index, num_proc=2)
        map_s = time.perf_counter() - t3

        out = folder / "out"
        t4 = time.perf_counter()
        with open(os.devnull, "w") as devnull:
            stdout, sys.stdout = sys.stdout, devnull
            try:
                run(argparse.Namespace(dataset=str(train_file), benchmarks=",".join(bench_files), output=str(out),
                                       ngram=opts.ngram, column="problem", split="train", dataset_config=None))
            finally:
                sys.stdout = stdout
        e2e_s = time.perf_counter() - t4
        report = json.loads((out / "report.json").read_text())

        others = [i for i in range(len(texts)) if i not in planted and i not in near]
        subset = sorted(planted | near | set(rng.sample(others, max(0, opts.naive_rows - len(planted) - len(near)))))
        question_sets = [set(ngrams(q, opts.ngram)) for b in benchmarks for q in b.questions]
        t5 = time.perf_counter()
        naive_removed = {subset[i] for i in naive([texts[i] for i in subset], question_sets, opts.ngram)}
        naive_s = time.perf_counter() - t5

    fast_rate, naive_rate = len(texts) / fast_s, len(subset) / naive_s
    print(f"\nbenchmark n-gram index: {len(index.masks):,} {opts.ngram}-grams of "
          f"{sum(len(b.questions) for b in benchmarks):,} questions, built in {build_s:.2f} s")
    print(f"{'method':<44} {'rows':>8} {'seconds':>8} {'rows/s':>10}")
    print(f"{'r1kit (index + isdisjoint, plain loop)':<44} {len(texts):>8,} {fast_s:>8.2f} {fast_rate:>10,.0f}")
    print(f"{'r1kit check via datasets.map num_proc=2':<44} {len(texts):>8,} {map_s:>8.2f} {len(texts) / map_s:>10,.0f}")
    print(f"{'r1kit decontaminate end to end (run())':<44} {len(texts):>8,} {e2e_s:>8.2f} {len(texts) / e2e_s:>10,.0f}")
    print(f"{'naive loop (row x question set compare)':<44} {len(subset):>8,} {naive_s:>8.2f} {naive_rate:>10,.0f}")
    print(f"naive on all {len(texts):,} rows, extrapolated: {len(texts) / naive_rate:,.0f} s; "
          f"speed-up of r1kit's check: {fast_rate / naive_rate:,.0f}x")
    fast_subset = {i for i in subset if i in fast_removed}
    print(f"removed: r1kit {len(fast_removed)} of {len(texts):,} (planted {len(planted)}; found all planted: "
          f"{planted <= fast_removed}; near misses removed: {len(near & fast_removed)}; others: "
          f"{len(fast_removed - planted)}); datasets.map agrees: {mapped_removed == fast_removed}; "
          f"run() removed {report['removed']}")
    print(f"on the naive subset of {len(subset):,} rows: naive removed {len(naive_removed)}, r1kit {len(fast_subset)}, "
          f"the same rows: {naive_removed == fast_subset}")
    for i in sorted(fast_removed - planted)[:5]:
        print(f"  removed though not planted: row {i}, shared n-gram(s): {sorted({' '.join(g) for g in found[i].values()})}")
    print("per benchmark: " + ", ".join(f"{Path(k).stem} {v['removed']}" for k, v in report["benchmarks"].items()))


if __name__ == "__main__":
    main()
