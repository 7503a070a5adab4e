"""`accuracy` throughput: r1kit's reward vs a plain sequential loop over math-verify, in one run.

    OMP_NUM_THREADS=1 python benchmarks/rewards.py [--n 2000] [--batch 64] [--timeout 5]

2,000 realistic completions in GRPO groups of 8 per problem (a reasoning paragraph, then a boxed answer): correct,
wrong, no answer, unparseable gold, and a few pathological answers (towers of powers, a 50 kB expression). Both sides
judge the same completions in batches of `--batch`, as TRL calls a reward, batch by batch in turn. The plain loop is what Open-R1's `accuracy_reward` does (math-verify in
the calling thread, its own signal-based timeouts). Prints seconds, completions/s, the ratio (goal >= 1.8x on 2 cores)
and r1kit's worst single-batch latency (bounded by the time limit). Measured twice: without and with the
pathological answers.
"""

from __future__ import annotations

import argparse
import random
import time

REASONING = (
    "Let me think step by step. First, I rewrite the expression and collect like terms. Then I check the edge "
    "cases: when x = 0 the identity holds trivially, and for x > 0 the bound follows from AM-GM. "
)


def make_samples(n: int, pathological: bool, group: int = 8, seed: int = 0) -> tuple[list[str], list[str]]:
    """`n` completions in GRPO groups of `group` completions per problem (so each gold appears `group` times)."""
    rng = random.Random(seed)
    completions, golds = [], []
    for i in range(n):
        if i % group == 0:
            a, b = rng.randint(1, 99), rng.randint(2, 99)
            problem_gold = rng.choice([str(a * b), f"\\frac{{{a}}}{{{b}}}", f"{a}\\sqrt{{{b}}}", f"${a}+{b}i$"])
            problem_unparseable = rng.random() < 0.1
        kind = rng.random()
        gold = "see the editorial" if problem_unparseable else problem_gold
        if kind < 0.45:  # correct
            answer = f"\\boxed{{{gold.strip('$')}}}"
        elif kind < 0.9:  # wrong
            answer = f"\\boxed{{{a * b + rng.randint(1, 9)}}}"
        else:  # no answer at all
            answer = "I am not sure."
        if pathological and i % 100 == 0:
            answer = "\\boxed{9^{9^{9^{9^{9}}}}}" if i % 200 == 0 else "\\boxed{" + "1+" * 25_000 + "1}"
        completions.append(f"<think>{REASONING * rng.randint(1, 4)}</think><answer>{answer}</answer>")
        golds.append(gold)
    return completions, golds


def plain_accuracy(completions: list[str], golds: list[str]) -> list[float | None]:
    from math_verify import LatexExtractionConfig, parse, verify
    from math_verify.parser import NormalizationConfig

    config = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
            ),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    out: list[float | None] = []
    for text, gold in zip(completions, golds):
        gold_parsed = parse(gold, extraction_mode="first_match")
        if not gold_parsed:
            out.append(None)
            continue
        try:
            answer = parse(text, extraction_config=config, extraction_mode="first_match")
            out.append(float(verify(gold_parsed, answer)))
        except Exception:  # noqa: BLE001
            out.append(None)
    return out


def interleaved(funcs: dict, completions, golds, batch: int) -> dict[str, tuple[float, float, list]]:
    """Runs every function on each batch in turn (so machine noise hits all sides alike): total s, worst batch s,
    results."""
    total = {name: 0.0 for name in funcs}
    worst = {name: 0.0 for name in funcs}
    results: dict[str, list] = {name: [] for name in funcs}
    for i in range(0, len(completions), batch):
        for name, func in funcs.items():
            t = time.perf_counter()
            results[name] += func(completions[i : i + batch], golds[i : i + batch])
            elapsed = time.perf_counter() - t
            total[name] += elapsed
            worst[name] = max(worst[name], elapsed)
    return {name: (total[name], worst[name], results[name]) for name in funcs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=5.0)
    opts = parser.parse_args()

    from r1kit.config.schema import GRPOScriptArguments
    from r1kit.rewards import get_reward_funcs
    from r1kit.rewards.verify import get_pool

    args = GRPOScriptArguments(dataset_name="x", reward_funcs=["accuracy"], reward_timeout=opts.timeout)
    (accuracy,) = get_reward_funcs(args)
    get_pool().map([("1", r"\boxed{1}")] * 8, timeout=opts.timeout)  # workers started and warm, as after the first step

    def r1kit_accuracy(completions, golds):
        return accuracy(completions, solution=golds)

    for pathological in (False, True):
        completions, golds = make_samples(opts.n, pathological)
        runs = interleaved({"plain": plain_accuracy, "r1kit": r1kit_accuracy}, completions, golds, opts.batch)
        (plain_s, plain_worst, plain), (ours_s, ours_worst, ours) = runs["plain"], runs["r1kit"]
        agree = sum(a == b for a, b in zip(plain, ours)) / len(ours)
        label = "with pathological answers" if pathological else "realistic only"
        print(f"--- {opts.n} completions, batches of {opts.batch}, {label}")
        print(f"plain math-verify loop: {plain_s:7.2f} s  {opts.n / plain_s:7.1f}/s  worst batch {plain_worst:6.2f} s")
        print(f"r1kit accuracy        : {ours_s:7.2f} s  {opts.n / ours_s:7.1f}/s  worst batch {ours_worst:6.2f} s")
        print(f"speed-up r1kit / plain: {plain_s / ours_s:.2f}x (goal >= 1.8x); same score on {agree:.1%} of samples")
        print(f"r1kit scores: {sum(r == 1.0 for r in ours)} correct, {sum(r == 0.0 for r in ours)} wrong, "
              f"{sum(r is None for r in ours)} unjudgeable (None)")


if __name__ == "__main__":
    main()
