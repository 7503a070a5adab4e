"""The `r1kit` command: it only assembles the commands. Each command module says how to add its parser
(`add_parser(subparsers)`) and how to run (`run(args)`); the module is imported only when its command runs, so
`r1kit --help` is instant. Errors take one shape everywhere (`r1kit.console`): a configuration or input error is one
`r1kit: error: ...` line with exit code 2; any other exception is a bug of ours and keeps its traceback.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from r1kit import __version__
from r1kit.config.keys import precheck  # no TRL: r1kit --help stays instant
from r1kit.console import (
    TRAINING_COMMANDS,
    ArgumentParser,
    error,
    hold_command_signals,
    one_line_errors,
    parse_command,
    with_outcome,
)

COMMANDS = {  # name: (module, one line for the usage)
    "grpo": ("r1kit.grpo", "train with GRPO from a recipe: r1kit grpo [--config recipe.yaml] [--dry-run] [--key value ...]\n"
                           "                 (no --config: the embedded demo recipe)"),
    "sft": ("r1kit.sft", "supervised fine-tuning (distillation, cold start): r1kit sft --config RECIPE [--dry-run]"),
    "evaluate": ("r1kit.evaluation", "score a model on benchmarks: r1kit evaluate --model PATH --benchmarks humaneval,addition"),
    "decontaminate": ("r1kit.decontaminate", "drop training rows that share an 8-gram with a benchmark:\n"
                      "                 r1kit decontaminate --dataset TRAIN --benchmarks math_500,aime24,... --output DIR"),
    "pass-rate": ("r1kit.pass_rate", "score prompts' pass rates and keep the informative ones (Open-R1's filtering):\n"
                  "                 r1kit pass-rate --config FILTER.yaml"),
    "rewards": ("r1kit.rewards", "list the registered reward functions and the dataset columns each needs"),
    "probe-rewards": ("r1kit.probes", "score replies that deserve nothing with a recipe's rewards, and the gold:\n"
                      "                 r1kit probe-rewards --config RECIPE"),
    "vllm-serve": ("r1kit.vllm_serve", "a vLLM server for vllm_mode: server, on CPU too: r1kit vllm-serve --model MODEL"),
    "launch": ("r1kit.launching.launch", "several processes with r1kit's exit codes: r1kit launch torchrun --nproc_per_node 8 "
               "-m r1kit grpo ...\n                 (or r1kit grpo --world-size N on this machine)"),
    "keys": ("r1kit.config.keys", "every recipe key with its type, default and one line: r1kit keys [grpo|sft] [WORD]"),
    "report": ("r1kit.report", "draw a run's curves: r1kit report OUTPUT_DIR (writes OUTPUT_DIR/report.png)"),
}
USAGE = "usage: r1kit <command> [options]\n\ncommands:\n" + "\n".join(
    f"  {name.ljust(13)}  {summary}" for name, (_, summary) in COMMANDS.items()
) + "\n\nRun `r1kit <command> --help` for a command's options."


def main(argv: list[str] | None = None) -> int:
    """The `r1kit` entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"r1kit {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        near = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        return error(f"unknown command '{argv[0]}'{hint}; commands: {', '.join(COMMANDS)} (see r1kit --help)")
    if argv[0] in TRAINING_COMMANDS:
        hold_command_signals()  # before the command's (long) import: a stop signal from here on exits 75
    return with_outcome(lambda: one_line_errors(_run)(argv))


def _run(argv: list[str]) -> int:
    if argv[0] in TRAINING_COMMANDS:  # -h and the mistakes that need no TRL answer before its import (30-50 s loaded)
        if precheck(argv[0], argv[1:]):
            return 0
    module = importlib.import_module(COMMANDS[argv[0]][0])
    parser = ArgumentParser(prog="r1kit")
    module.add_parser(parser.add_subparsers())
    args = parse_command(parser, argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
