"""A short run's whole time, r1kit against a plain TRL script: what a user waits for when a run is only a few steps
long, the steps where r1kit measures its training passes included.

    OMP_NUM_THREADS=1 python benchmarks/short_run.py [--steps 24] [--at 4] [--repeats 2] [--completion-length 16] [--micro-batch 16]
        [--baseline-src OTHER_CHECKOUT/src]

The runners and the settings are `benchmarks/step_profile.py`'s, on a random Llama (6 layers, 384 wide: the training
pass is most of a step) with the demo tokenizer: Open-R1's system prompt before each short addition problem, 16 completions of
`--completion-length` tokens each (`min_new_tokens`), in one micro-batch per step as Open-R1's recipes take a
group (`--micro-batch 4`: four); with 16-token completions the prompt is
most of every row ("prompt-heavy"). Each runner trains in a process of its own, alternating, `--repeats` times; per
runner the sum of its first `--at` steps' times and of all `--steps`, the median over repeats, and r1kit's time over
TRL's for each. Goal (issue 55): <= 0.75x at 4 steps, <= 0.65x at 24.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_profile import build_random_llama, in_subprocess, settings  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--at", type=int, default=4, help="also report the sum of the first AT steps")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--completion-length", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=16, help="rows per micro-batch (16: one per step)")
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--out", default="/tmp/r1kit-short-run")
    parser.add_argument("--baseline-src", help="also run r1kit from this source folder (another checkout's src/)")
    opts = parser.parse_args()
    out = Path(opts.out)
    model = out / "llama"
    build_random_llama(model, hidden=opts.hidden, intermediate=opts.hidden * 8 // 3, layers=opts.layers, heads=4,
                       kv_heads=4)
    names = ["r1kit", "trl"] + (["baseline"] if opts.baseline_src else [])
    sums: dict[str, dict[int, list[float]]] = {name: {opts.at: [], opts.steps: []} for name in names}
    for repeat in range(opts.repeats):
        order = names if repeat % 2 == 0 else list(reversed(names))
        for runner in order:
            fields = settings(out / runner, opts.steps, completions=16, generations=8,
                              length=opts.completion_length, bf16=False, micro_batch=opts.micro_batch)
            saved = os.environ.get("PYTHONPATH")
            if runner == "baseline":  # r1kit, imported from the other checkout
                os.environ["PYTHONPATH"] = opts.baseline_src
            try:
                result = in_subprocess("r1kit" if runner == "baseline" else runner, str(model), fields, warmup=0)
            finally:
                os.environ.pop("PYTHONPATH", None) if saved is None else os.environ.__setitem__("PYTHONPATH", saved)
            if result is None:
                return 1
            every = result["every_step"]
            for n in sums[runner]:
                sums[runner][n].append(sum(every[:n]))
            print(f"repeat {repeat} {runner}: steps {', '.join(f'{t:.2f}' for t in every)} s"
                  + (f"; passes {result['passes']}" if result["passes"] else ""), flush=True)
    for n in (opts.at, opts.steps):
        plain = statistics.median(sums["trl"][n])
        for name in [x for x in names if x != "trl"]:
            ours = statistics.median(sums[name][n])
            print(f"{n} steps: {name} {ours:.1f} s, plain TRL {plain:.1f} s, {ours / plain:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
