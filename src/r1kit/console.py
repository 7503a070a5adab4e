"""What every r1kit command shares on the console: the one-line error (`r1kit: error: ...`, exit code 2) for
configuration and input errors, with tracebacks kept for our own bugs; argparse in that shape; r1kit's warnings as
one line; and running a command module as a script (`python -m r1kit.grpo`). Command modules import this, never
`r1kit.cli`, which only assembles them."""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from collections.abc import Callable

from r1kit.credentials import redact
from r1kit.errors import ConfigError


def error(message: str) -> int:
    """Prints the one-line error every r1kit command uses, no secret named; returns the exit code 2."""
    print(f"r1kit: error: {' '.join(redact(message).split())}", file=sys.stderr)
    return 2


def say(line: str) -> None:
    """A command's own line on stderr (what a server binds, before its own output starts)."""
    print(redact(line), file=sys.stderr, flush=True)


def one_line_errors(command):
    """Wraps a command so that a `ConfigError` becomes `error(...)`, however the command is reached (`r1kit X`,
    `python -m r1kit.grpo`, torchrun, the evaluation subprocess); other exceptions keep their traceback."""

    @functools.wraps(command)
    def run(*args, **kwargs) -> int:
        try:
            return command(*args, **kwargs)
        except ConfigError as e:  # anything else is a bug of ours and keeps its traceback
            return error(str(e))

    return run


class ArgumentParser(argparse.ArgumentParser):
    """argparse with r1kit's error shape: one line naming the option, instead of the usage and a second line."""

    def error(self, message: str):
        raise ConfigError(f"{message} (see {self.prog} --help)")


def shape_warnings() -> None:
    """What a training command shows of Python warnings. r1kit's own (`ConfigWarning`: a renamed key, bf16 without a
    GPU) print as one `r1kit: warning: ...` line. The deprecation notices a run cannot act on are hidden: TRL 1.16
    calls transformers' deprecated `is_gradient_checkpointing`, `gradient_checkpointing_disable` and
    `gradient_checkpointing_enable` around every generation. (The one r1kit caused, the `gradient_checkpointing`
    field, is fixed at the source: see `config.schema.apply_machine_defaults`.) Every other warning shows as usual."""

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




def add_pass_through_command(subparsers, name: str, help: str, run: Callable) -> argparse.ArgumentParser:
    """A sub-command whose options it reads itself (a recipe's keys, `--config`, `--dry-run`, or a report's folder):
    argparse leaves them alone and they reach the command as `args.argv` (the recipe parser is the strict one)."""
    parser = subparsers.add_parser(name, help=help, add_help=False)
    parser.set_defaults(run=run, passes_options=True)
    return parser


def parse_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parses `argv`; a pass-through command gets its options, untouched, in `args.argv`."""
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "passes_options", False):
        args.argv = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def run_module(name: str, add_parser: Callable, argv: list[str] | None = None) -> int:
    """`python -m r1kit.<module> ...`: the module's command without the `r1kit` front end."""
    parser = ArgumentParser(prog=f"python -m r1kit.{name}")
    command = add_parser(parser.add_subparsers())
    command.prog = parser.prog
    return one_line_errors(lambda: _run_parsed(command, argv))()


def _run_parsed(command: argparse.ArgumentParser, argv: list[str] | None) -> int:
    args = parse_command(command, list(sys.argv[1:] if argv is None else argv))
    return args.run(args)
