"""Where one GRPO step's time goes, r1kit against a plain TRL script, phase by phase, and how often each reads a
tensor back to the host (on a GPU each such read waits for the device).

    OMP_NUM_THREADS=1 python benchmarks/step_profile.py [--steps 8] [--warmup 3] [--completion-length 48]

Both runners train the same randomly initialised Llama (4 layers, 256 wide, the demo tokenizer; it rarely writes EOS,
and `min_new_tokens` makes every completion full length, so both do the same work) on the same addition prompts
behind an Open-R1 system prompt, with Open-R1-style rewards (math-verify accuracy, a format regex), the same batch,
lengths and settings; each in a process of its own. r1kit runs its whole pipeline (`r1kit.grpo.setup` and
`r1kit.run.pipeline.train`: recorder, tripwires, second opinion, progress), plain TRL a `GRPOTrainer` script.

Per step, the first `--warmup` dropped (r1kit measures its training passes there):
- generation: TRL's `_generate_and_score_completions` less the rewards and the no-gradient passes in it;
- rewards: `_calculate_rewards` (r1kit's includes its listeners: the completions record, the second opinion);
- no-grad pass: the old and reference log-probabilities (`_get_per_token_logps_and_entropies` without gradients);
- training pass: each micro-batch's loss forward and backward (`training_step` less its input preparation);
- callbacks: every trainer callback (r1kit's tripwires and progress, TRL's logging);
- other: the rest of the step (optimizer, scheduler, logging).
On CUDA every phase boundary synchronises the device, for both runners alike. Host reads: calls of `Tensor.item`,
`tolist`, `cpu` and `numpy` per step, by the package whose code made them (on CPU they cost nothing, but each is a
sync on a GPU).

`scripts/gpu_check.py` reuses the runners and the profile for its 1xH200 table.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Open-R1's system prompt (recipes/*/grpo/config_*.yaml)
SYSTEM_PROMPT = (
    "You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first think about the "
    "reasoning process as an internal monologue and then provide the user with the answer. Respond in the following "
    "format: <think>\n...\n</think>\n<answer>\n...\n</answer>"
)
PHASES = ("generation", "rewards", "no-grad pass", "training pass", "callbacks", "other")
PACKAGES = ("r1kit", "trl", "transformers", "accelerate", "datasets", "math_verify")


class StepProfile:
    """Per-step phase times and host reads of one trainer (attach it before training)."""

    def __init__(self, synchronize=None):
        self.synchronize = synchronize or (lambda: None)
        self.steps: list[dict] = []
        self.reads: list[collections.Counter] = []
        self.sites: collections.Counter = collections.Counter()  # r1kit's own host reads, by function
        self.started = None

    # --- timing -------------------------------------------------------------------------------------------------
    def attach(self, trainer) -> None:
        from transformers import TrainerCallback

        profile = self

        class Steps(TrainerCallback):  # a step runs from one step's beginning to the next (logging included)
            def on_step_begin(self, args, state, control, **kwargs):
                profile.begin_step()

            def on_train_end(self, args, state, control, **kwargs):
                profile.end_step()

        self.wrap(trainer, "_generate_and_score_completions", "generate+")
        self.wrap(trainer, "_calculate_rewards", "rewards")
        self.wrap(trainer, "_get_per_token_logps_and_entropies", "logps", only_without_grad=True)
        self.wrap(trainer, "training_step", "training_step")
        self.wrap(trainer, "_prepare_inputs", "prepare")
        self.wrap(trainer.callback_handler, "call_event", "callbacks")
        trainer.add_callback(Steps())
        self.count_host_reads()

    def wrap(self, owner, name: str, label: str, only_without_grad: bool = False) -> None:
        import torch

        original = getattr(owner, name)
        profile = self

        def timed(*args, **kwargs):
            if profile.started is None or (only_without_grad and torch.is_grad_enabled()):
                return original(*args, **kwargs)
            profile.synchronize()
            bucket, start = profile.current, time.perf_counter()  # the step it began in
            try:
                return original(*args, **kwargs)
            finally:
                profile.synchronize()
                bucket[label] += time.perf_counter() - start

        setattr(owner, name, timed)

    def begin_step(self) -> None:
        self.end_step()
        self.synchronize()
        self.current: collections.Counter = collections.Counter()
        self.current_reads: collections.Counter = collections.Counter()
        self.started = time.perf_counter()

    def end_step(self) -> None:
        if self.started is None:
            return
        self.synchronize()
        self.steps.append({"total": time.perf_counter() - self.started, "times": self.current})
        self.reads.append(self.current_reads)
        self.started = None

    @staticmethod
    def phases(step: dict) -> dict:
        t = step["times"]  # read late: a callback's time lands in the step it began in
        phases = {"generation": t["generate+"] - t["rewards"] - t["logps"], "rewards": t["rewards"],
                  "no-grad pass": t["logps"], "training pass": t["training_step"] - t["prepare"],
                  "callbacks": t["callbacks"]}
        phases["other"] = max(0.0, step["total"] - sum(phases.values()))
        return {"total": step["total"], **phases}

    # --- host reads ---------------------------------------------------------------------------------------------
    def count_host_reads(self) -> None:
        import torch

        profile = self
        for name in ("item", "tolist", "cpu", "numpy"):
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, **kwargs):
                if profile.started is not None:
                    profile.current_reads[caller_package(profile.sites)] += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counted)

    # --- results ------------------------------------------------------------------------------------------------
    def summary(self, warmup: int) -> dict:
        steps = [self.phases(step) for step in self.steps[warmup:] or self.steps]
        reads = self.reads[warmup:] or self.reads
        result = {"steps_timed": len(steps), "step_time": statistics.median(s["total"] for s in steps),
                  "every_step": [step["total"] for step in self.steps]}  # warm-up included (`short_run.py`)
        for phase in PHASES:
            result[phase] = statistics.mean(s[phase] for s in steps)
        total_reads = collections.Counter()
        for counter in reads:
            total_reads.update(counter)
        result["host_reads"] = {k: v / len(reads) for k, v in sorted(total_reads.items())}
        result["r1kit_read_sites"] = dict(self.sites.most_common())
        return result


def caller_package(sites: collections.Counter) -> str:
    """The package of the nearest caller outside torch (and this file); r1kit's call sites are counted by function."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        top = module.split(".")[0]
        if top not in ("torch", "__main__", "step_profile") and not module.endswith("step_profile"):
            if top == "r1kit":
                sites[f"{module}.{frame.f_code.co_name}"] += 1
            return top if top in PACKAGES else "other"
        frame = frame.f_back
    return "other"


# --- the two runners ----------------------------------------------------------------------------------------------
def addition_rows(count: int = 2000) -> list[tuple[str, str]]:
    import random

    rng = random.Random(0)
    pairs = [(rng.randint(10, 999), rng.randint(10, 999)) for _ in range(count)]
    return [(f"What is {a} + {b}?", str(a + b)) for a, b in pairs]


def run_r1kit(model: str, fields: dict, profile: StepProfile) -> dict:
    import yaml

    from r1kit.config.recipe import parse_args
    from r1kit.grpo import setup
    from r1kit.run import pipeline as runs

    out = Path(fields["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    data = out / "addition.jsonl"
    data.write_text("".join(json.dumps({"problem": q, "solution": a}) + "\n" for q, a in addition_rows()))
    recipe = {"model_name_or_path": model, "dtype": "bfloat16" if fields["bf16"] else "float32",
              "dataset_name": str(data), "dataset_prompt_column": "problem", "system_prompt": SYSTEM_PROMPT,
              "reward_funcs": ["accuracy", "format"], "probe_rewards": False, **fields}
    path = out / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    run = setup(*parse_args(["--config", str(path), "--resume", "never"]))
    profile.attach(run.trainer)
    runs.train(run)
    record = out / "training_pass.json"
    return json.loads(record.read_text()) if record.is_file() else {}


def run_trl(model: str, fields: dict, profile: StepProfile) -> dict:
    """What a user writes with TRL alone."""
    import re

    from datasets import Dataset
    from math_verify import parse, verify
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list([
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}], "solution": a}
        for q, a in addition_rows()])

    def accuracy_reward(completions, solution, **kwargs):
        return [float(verify(parse(gold), parse(c[0]["content"]))) for c, gold in zip(completions, solution)]

    def format_reward(completions, **kwargs):
        pattern = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL)
        return [float(bool(pattern.match(c[0]["content"]))) for c in completions]

    fields = {k: v for k, v in fields.items() if k not in R1KIT_ONLY}
    config = GRPOConfig(model_init_kwargs={"dtype": "bfloat16" if fields["bf16"] else "float32"}, **fields)
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward, format_reward], args=config, train_dataset=dataset)
    profile.attach(trainer)
    trainer.train()
    return {}


R1KIT_ONLY = ("heldout_size", "log_completions_file")
RUNNERS = {"r1kit": run_r1kit, "trl": run_trl}


def settings(out: Path, steps: int, completions: int, generations: int, length: int, bf16: bool,
             micro_batch: int) -> dict:
    """The GRPOConfig fields both runners use: every completion `length` tokens (min_new_tokens)."""
    return {
        "output_dir": str(out), "max_steps": steps, "per_device_train_batch_size": micro_batch,
        "gradient_accumulation_steps": completions // micro_batch, "num_generations": generations,
        "max_completion_length": length, "generation_kwargs": {"min_new_tokens": length},
        "bf16": bf16, "learning_rate": 1e-6, "beta": 0.0, "temperature": 1.0, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "gradient_checkpointing": False, "seed": 42, "use_cpu": not bf16,
    }


def one_run(runner: str, model: str, fields: dict, warmup: int) -> dict:
    """In this process: train, profile; the figures as a dict."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    profile = StepProfile(synchronize=torch.cuda.synchronize if cuda else None)
    passes = RUNNERS[runner](model, fields, profile)
    result = profile.summary(warmup)
    result["tokens_per_s"] = fields["max_completion_length"] * fields["per_device_train_batch_size"] * fields[
        "gradient_accumulation_steps"] / result["step_time"]
    result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    result["passes"] = [(d["class"], d["pass"]) for d in passes.get("decisions", [])]
    return result


def in_subprocess(runner: str, model: str, fields: dict, warmup: int, timeout: float | None = None) -> dict | None:
    """`one_run` in a process of its own (a fair peak memory, no state shared); None when it failed."""
    command = [sys.executable, __file__, "--one", runner, model, json.dumps(fields), str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        print(f"{runner} on {model}: FAILED (exit {done.returncode})\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(line[len("RESULT "):])


def build_random_model(folder: Path, model_type: str = "llama", **shape) -> int:
    """A randomly initialised model of `model_type` (llama, qwen2) with the given layer shapes (`hidden_size`,
    `intermediate_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`) and the demo tokenizer (no
    download); its parameter count."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from r1kit.loading.modeling import DEMO_MODEL

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), max_position_embeddings=4096,
                                  tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                                  pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **shape)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def build_random_llama(folder: Path, hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> int:
    return build_random_model(folder, "llama", hidden_size=hidden, intermediate_size=intermediate,
                              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads)


def print_row(label: str, ours: dict, plain: dict) -> None:
    def shares(r: dict) -> str:
        return " / ".join(f"{100 * r[p] / r['step_time']:.0f}" for p in ("generation", "training pass", "rewards"))

    print(f"| {label} | {ours['step_time']:.3f} / {plain['step_time']:.3f} s | "
          f"{ours['tokens_per_s']:,.0f} / {plain['tokens_per_s']:,.0f} | {shares(ours)} % / {shares(plain)} % | "
          f"{3600 / ours['step_time']:,.0f} / {3600 / plain['step_time']:,.0f} | "
          f"{ours['peak_gib']:.2f} / {plain['peak_gib']:.2f} GiB | {ours['step_time'] / plain['step_time']:.2f} |",
          flush=True)


TABLE_HEAD = ("| run | step r1kit / TRL | generated tok/s | generation / pass / rewards | steps per hour | "
              "peak memory | r1kit / TRL |\n|---|---:|---:|---:|---:|---:|---:|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--completion-length", type=int, default=48)
    parser.add_argument("--out", default="/tmp/r1kit-step-profile")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one:
        runner, model, fields, warmup = opts.one
        print("RESULT " + json.dumps(one_run(runner, model, json.loads(fields), int(warmup))))
        return 0
    out = Path(opts.out)
    model = out / "llama"
    build_random_llama(model, hidden=256, intermediate=688, layers=4, heads=4, kv_heads=4)
    results = {}
    for runner in RUNNERS:
        fields = settings(out / runner, opts.steps, completions=16, generations=8, length=opts.completion_length,
                          bf16=False, micro_batch=4)
        results[runner] = in_subprocess(runner, str(model), fields, opts.warmup)
        if results[runner] is None:
            return 1
    for runner, r in results.items():
        print(f"{runner}: step {r['step_time']:.3f} s over {r['steps_timed']} steps; "
              + ", ".join(f"{p} {r[p]:.3f} s" for p in PHASES))
        print(f"  host reads per step: {r['host_reads']}")
        if r.get("r1kit_read_sites"):
            print(f"  r1kit's, by function (all steps): {r['r1kit_read_sites']}")
        if r["passes"]:
            print(f"  training passes: {r['passes']}")
    print(TABLE_HEAD)
    print_row(f"random Llama (4 x 256), 16 completions of {opts.completion_length} tokens, CPU",
              results["r1kit"], results["trl"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
