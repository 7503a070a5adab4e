"""The `r1kit` command. Sub-commands import their heavy modules only when run, so `r1kit --help` is instant."""

from __future__ import annotations

import sys

USAGE = """usage: r1kit <command> [options]

commands:
  grpo      train with GRPO from a recipe: r1kit grpo [--config recipe.yaml] [--dry-run] [--key value ...]
            (no --config: the embedded demo recipe)
  sft       supervised cold start: r1kit sft --config recipes/demo/sft.yaml
  evaluate  score a model on benchmarks: r1kit evaluate --model PATH --benchmarks humaneval,addition
  rewards   list the registered reward functions and the dataset columns each needs
  report    draw a run's curves: r1kit report OUTPUT_DIR (writes OUTPUT_DIR/report.png)

Run `r1kit <command> --help` for a command's options.
"""


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
        if not dry or i + 1 >= len(argv) or not argv[i + 1].isdigit():
            print("r1kit: error: --world-size N goes with --dry-run", file=sys.stderr)
            return 2
        world_size = argv[i + 1]
        del argv[i : i + 2]

    from r1kit.configs import ConfigError
    from r1kit.grpo import dry_run, main

    try:
        script_args, training_args, model_args = _parse_for_world_size(argv, world_size)
        if dry:
            print(dry_run(script_args, training_args, model_args))
            print("recipe OK: keys, cross-field rules and (local) dataset columns checked; no model loaded.")
            return 0
        metrics = main(script_args, training_args, model_args)
        if "summary" in metrics:
            print_summary(metrics["summary"])
    except ConfigError as e:
        print(f"r1kit: error: {e}", file=sys.stderr)
        return 2
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


def rewards_command(argv: list[str]) -> int:
    """`r1kit rewards`: one line per registered reward."""
    from r1kit.rewards import REWARD_FUNCS_REGISTRY

    width = max(map(len, REWARD_FUNCS_REGISTRY))
    print(f"{'name'.ljust(width)}  {'columns'.ljust(28)}  description")
    for spec in REWARD_FUNCS_REGISTRY.values():
        print(f"{spec.name.ljust(width)}  {(', '.join(spec.columns) or '-').ljust(28)}  {spec.summary}")
    return 0


def sft_command(argv: list[str]) -> int:
    """`r1kit sft --config recipe.yaml`: the cold-start SFT stage."""
    from r1kit.sft import cli

    summary = cli(argv)
    if summary is None:
        from r1kit.sft import __doc__ as doc

        print(doc.strip())
        return 0
    print(f"SFT done: {summary['steps']} steps, {summary['train_seconds']} s, held-out accuracy {summary['heldout_accuracy']}")
    return 0


def evaluate_command(argv: list[str]) -> int:
    """`r1kit evaluate --model PATH --benchmarks a,b [--num-samples K] [--output-dir DIR]`."""
    import argparse
    import json
    import logging

    from r1kit.evaluation import BUILTIN_BENCHMARKS, evaluate_to_files

    parser = argparse.ArgumentParser(prog="r1kit evaluate", description="Evaluate a model on benchmarks.")
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
    try:
        results = evaluate_to_files(
            args.model, [b for b in args.benchmarks.split(",") if b], args.output_dir or f"{args.model}/eval",
            num_samples=args.num_samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
            top_p=args.top_p, system_prompt=args.system_prompt, limit=args.limit, step=args.step,
        )
    except (ValueError, ImportError, RuntimeError, OSError) as e:
        print(f"r1kit evaluate: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(results, indent=2))
    return 0


def report_command(argv: list[str]) -> int:
    """`r1kit report OUTPUT_DIR`: curves to a PNG and a table."""
    from r1kit.report import cli

    return cli(argv)


COMMANDS = {
    "grpo": grpo_command,
    "sft": sft_command,
    "evaluate": evaluate_command,
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
        print(f"r1kit: unknown command '{argv[0]}'\n\n{USAGE}", file=sys.stderr)
        return 2
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
