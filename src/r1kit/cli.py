"""The `r1kit` command. Sub-commands import their heavy modules only when run, so `r1kit --help` is instant.

Every configuration or input error (a `ConfigError`, raised before anything loads wherever possible) reaches the user
as one `r1kit: error: ...` line naming the field and what to change, with exit code 2; any other exception is a bug
of ours and keeps its traceback.
"""

from __future__ import annotations

import argparse
import functools
import sys

USAGE = """usage: r1kit <command> [options]

commands:
  grpo      train with GRPO from a recipe: r1kit grpo [--config recipe.yaml] [--dry-run] [--key value ...]
            (no --config: the embedded demo recipe)
  sft       supervised fine-tuning (distillation, cold start): r1kit sft --config RECIPE [--dry-run]
  evaluate  score a model on benchmarks: r1kit evaluate --model PATH --benchmarks humaneval,addition
  decontaminate  drop training rows that share an 8-gram with a benchmark:
            r1kit decontaminate --dataset TRAIN --benchmarks math_500,aime24,... --output DIR
  rewards   list the registered reward functions and the dataset columns each needs
  report    draw a run's curves: r1kit report OUTPUT_DIR (writes OUTPUT_DIR/report.png)

Run `r1kit <command> --help` for a command's options.
"""


def error(message: str) -> int:
    """Prints the one-line error every r1kit command uses; returns the exit code 2."""
    print(f"r1kit: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def one_line_errors(command):
    """Wraps a command so that a `ConfigError` becomes `error(...)`, however the command is reached (`r1kit X`,
    `python -m r1kit.grpo`, torchrun, the evaluation subprocess); other exceptions keep their traceback."""

    @functools.wraps(command)
    def run(argv: list[str]) -> int:
        try:
            return command(argv)
        except Exception as e:
            # ConfigError lives in r1kit.configs, which imports TRL: when it was never imported, none was raised.
            configs = sys.modules.get("r1kit.configs")
            if configs is None or not isinstance(e, configs.ConfigError):
                raise  # a bug of ours: keep the traceback
            return error(str(e))

    return run


class ArgumentParser(argparse.ArgumentParser):
    """argparse with r1kit's error shape: one line naming the option, instead of the usage and a second line."""

    def error(self, message: str):
        from r1kit.configs import ConfigError

        raise ConfigError(f"{message} (see {self.prog} --help)")


def shape_warnings() -> None:
    """What a training command shows of Python warnings. r1kit's own (`ConfigWarning`: a renamed key, bf16 without a
    GPU) print as one `r1kit: warning: ...` line. The deprecation notices a run cannot act on are hidden: TRL 1.16
    calls transformers' deprecated `is_gradient_checkpointing`, `gradient_checkpointing_disable` and
    `gradient_checkpointing_enable` around every generation. (The one r1kit caused, the `gradient_checkpointing`
    field, is fixed at the source: see `configs.apply_machine_defaults`.) Every other warning shows as usual."""
    import warnings

    warnings.filterwarnings(
        "ignore",
        message=r"`(is_gradient_checkpointing|gradient_checkpointing_disable|gradient_checkpointing_enable)` is deprecated",
        category=FutureWarning,
    )
    if not getattr(warnings.formatwarning, "r1kit", False):  # r1kit's own warnings in the error's shape: one line
        upstream_format = warnings.formatwarning

        def format_warning(message, category, filename, lineno, line=None):
            if category.__name__ == "ConfigWarning":
                return f"r1kit: warning: {message}\n"
            return upstream_format(message, category, filename, lineno, line)

        format_warning.r1kit = True
        warnings.formatwarning = format_warning


@one_line_errors
def grpo_command(argv: list[str]) -> int:
    """`r1kit grpo`: parse the recipe strictly, then train (or only check, with --dry-run)."""
    if "-h" in argv or "--help" in argv:
        from r1kit import grpo

        print(grpo.__doc__.strip())
        print("\nEvery field of GRPOScriptArguments, GRPOConfig and TRL's ModelConfig is a --flag that overrides the")
        print("recipe. --dry-run validates the recipe (keys, cross-field rules, local dataset columns) and prints it;")
        print("add --world-size N to check it as launched on N processes.")
        return 0
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    world_size = None
    if "--world-size" in argv:  # check the recipe as it would be launched on N processes
        i = argv.index("--world-size")
        if not dry or i + 1 >= len(argv) or not argv[i + 1].isdigit() or int(argv[i + 1]) < 1:
            return error("--world-size N (a positive number) goes with --dry-run")
        world_size = argv[i + 1]
        del argv[i : i + 2]

    from r1kit.grpo import dry_run, main

    shape_warnings()
    script_args, training_args, model_args = _parse_for_world_size(argv, world_size)
    if dry:
        print(dry_run(script_args, training_args, model_args))
        print("recipe OK: keys, values, paths, cross-field rules and (local) dataset columns checked; no model loaded.")
        return 0
    metrics = main(script_args, training_args, model_args)
    if "summary" in metrics:
        print_summary(metrics["summary"])
    return 0


def print_summary(summary: dict) -> None:
    before, after = summary["accuracy_before"], summary["accuracy_after"]
    print(
        f"\nHeld-out accuracy {before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} points) "
        f"in {summary['steps']} GRPO steps, {summary['train_seconds']:.0f} s of training.\n"
        f"Outputs: {summary['output_dir']} (model, completions.jsonl, summary.json). "
        f"Draw the curves: r1kit report {summary['output_dir']}"
    )


def _parse_for_world_size(argv: list[str], world_size: str | None):
    import os

    from r1kit.configs import WORLD_SIZE_ENV, parse_args

    if world_size is None:
        return parse_args(argv)
    previous = os.environ.get(WORLD_SIZE_ENV)
    os.environ[WORLD_SIZE_ENV] = world_size
    try:
        return parse_args(argv)
    finally:
        if previous is None:
            del os.environ[WORLD_SIZE_ENV]
        else:
            os.environ[WORLD_SIZE_ENV] = previous


@one_line_errors
def rewards_command(argv: list[str]) -> int:
    """`r1kit rewards`: one line per registered reward."""
    from r1kit.rewards import REWARD_FUNCS_REGISTRY

    width = max(map(len, REWARD_FUNCS_REGISTRY))
    print(f"{'name'.ljust(width)}  {'columns'.ljust(28)}  description")
    for spec in REWARD_FUNCS_REGISTRY.values():
        print(f"{spec.name.ljust(width)}  {(', '.join(spec.columns) or '-').ljust(28)}  {spec.summary}")
    return 0


@one_line_errors
def sft_command(argv: list[str]) -> int:
    """`r1kit sft --config recipe.yaml`: the cold-start SFT stage."""
    from r1kit.sft import cli

    shape_warnings()
    summary = cli(argv)
    if summary is None:
        from r1kit.sft import __doc__ as doc

        print(doc.strip())
        return 0
    if isinstance(summary, str):  # --dry-run: the resolved recipe
        print(summary)
        print("recipe OK: keys, values, paths and (local) dataset columns checked; no model loaded.")
        return 0
    accuracy = "" if summary["heldout_accuracy"] is None else f", held-out accuracy {summary['heldout_accuracy']}"
    print(f"SFT done: {summary['steps']} steps, {summary['train_seconds']} s, train loss {summary['train_loss']}{accuracy}")
    return 0


@one_line_errors
def evaluate_command(argv: list[str]) -> int:
    """`r1kit evaluate --model PATH --benchmarks a,b [--num-samples K] [--output-dir DIR]`."""
    import json
    import logging

    from r1kit.evaluation import BUILTIN_BENCHMARKS, evaluate_to_files
    from r1kit.preflight import check_benchmark_names, check_model_source, check_output_dir

    parser = ArgumentParser(prog="r1kit evaluate", description="Evaluate a model on benchmarks.")
    parser.add_argument("--model", required=True, help="model folder (or a checkpoint)")
    parser.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(BUILTIN_BENCHMARKS)} or .jsonl files")
    parser.add_argument("--num-samples", type=int, default=1, help="samples per problem (pass@1 is averaged over them)")
    parser.add_argument("--output-dir", default=None, help="where <benchmark>.json go (default: MODEL/eval)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=None, help="default 0.6 (greedy for addition)")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N problems only")
    parser.add_argument("--step", type=int, default=None, help="training step of the checkpoint (for the report)")
    args = parser.parse_args(argv)
    benchmarks = [b for b in args.benchmarks.split(",") if b]
    if not benchmarks:
        return error("--benchmarks: name at least one benchmark")
    for flag, value, low in (("--num-samples", args.num_samples, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                             ("--limit", args.limit, 1), ("--temperature", args.temperature, 0)):
        if value is not None and value < low:
            return error(f"{flag} must be >= {low}, got {value}")
    if not 0 < args.top_p <= 1:
        return error(f"--top-p must be in (0, 1], got {args.top_p}")
    check_model_source(args.model, "--model", builtins=())
    check_benchmark_names(benchmarks, "--benchmarks", files_must_exist=True)
    check_output_dir(args.output_dir or f"{args.model}/eval", field="--output-dir")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
    results = evaluate_to_files(
        args.model, benchmarks, args.output_dir or f"{args.model}/eval",
        num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, system_prompt=args.system_prompt, limit=args.limit, step=args.step,
    )
    print(json.dumps(results, indent=2))
    return 0


@one_line_errors
def report_command(argv: list[str]) -> int:
    """`r1kit report OUTPUT_DIR`: curves to a PNG and a table."""
    from r1kit.report import cli

    return cli(argv)


@one_line_errors
def decontaminate_command(argv: list[str]) -> int:
    """`r1kit decontaminate --dataset TRAIN --benchmarks NAMES_OR_FILES --output DIR [--ngram 8] [--column problem]`."""
    from r1kit.decontaminate import add_parser

    subparsers = ArgumentParser(prog="r1kit").add_subparsers()
    parser = add_parser(subparsers)
    parser.prog = "r1kit decontaminate"
    args = parser.parse_args(argv)
    return args.command(args)


COMMANDS = {
    "grpo": grpo_command,
    "sft": sft_command,
    "evaluate": evaluate_command,
    "decontaminate": decontaminate_command,
    "rewards": rewards_command,
    "report": report_command,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        from r1kit import __version__

        print(f"r1kit {__version__}")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        import difflib

        near = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        return error(f"unknown command '{argv[0]}'{hint}; commands: {', '.join(COMMANDS)} (see r1kit --help)")
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
