"""What every r1kit command shares on the console: the one-line error (`r1kit: error: ...`, exit code 2) for
configuration and input errors, with tracebacks kept for our own bugs; argparse in that shape; r1kit's warnings as
one line; and running a command module as a script (`python -m r1kit.grpo`). Command modules import this, never
`r1kit.cli`, which only assembles them.

Exit codes, the same on every launch path (`r1kit grpo`, `python -m r1kit.grpo`, `r1kit launch`, `--world-size`):
0 completed (or nothing left to do), 75 interrupted and resumable (EX_TEMPFAIL: the same command continues), 3
stopped by a tripwire (stays stopped until `resume_after_stop`), 2 a configuration or input error (one line), 130 a
second Ctrl-C (stopped at once, unsaved), 1 anything else (a bug of ours, with its traceback). A worker started by
`r1kit launch` writes its code where the launch reads it (`R1KIT_OUTCOME_DIR`, `record_outcome`)."""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable

from r1kit.credentials import redact
from r1kit.errors import ConfigError

EXIT_COMPLETED = 0
EXIT_STOPPED = 3  # a tripwire stopped the run: not resumable as it is (r1kit_run.json: "stopped")
EXIT_INTERRUPTED = 75  # sysexits.h EX_TEMPFAIL: interrupted, resumable; the same command continues the run
OUTCOME_DIR_ENV = "R1KIT_OUTCOME_DIR"  # set by `r1kit launch` for its workers
STARTED_BY = os.getppid()  # the process that started this one: a worker's launcher (`r1kit.run.watchdog.watch_launcher`)
TRAINING_COMMANDS = ("grpo", "sft")



def error(message: str) -> int:
    """Prints the one-line error every r1kit command uses, no secret named; returns the exit code 2."""
    print(f"r1kit: error: {' '.join(redact(message).split())}", file=sys.stderr)
    return 2


def show(text: str) -> None:
    """A command's own output on stdout (a usage, a table), no secret named."""
    print(redact(text))


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
    if name in TRAINING_COMMANDS:
        hold_command_signals()
    return leave_as_worker(with_outcome(one_line_errors(lambda: _run_parsed(command, argv))))


def leave_as_worker(code: int) -> int:
    """`code`, for `sys.exit`; but a worker of a multi-process launch (`python -m r1kit ...` under torchrun or
    accelerate, WORLD_SIZE > 1), its command ended and its group released, runs Python's exit handlers, flushes and
    exits at once: the interpreter's own teardown can still abort it afterwards ("terminate called without an active
    exception", SIGABRT from a native thread a distributed back end left: the ZeRO-3 SFT run on 2 CPU ranks, once in
    two full test runs under load, after `release_process_group`), turning its 0, 3 or 75 into -6."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1 or "torch" not in sys.modules:
        return code
    import atexit

    atexit._run_exitfuncs()  # logging's shutdown, trackers' finish: everything Python would have run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def hold_command_signals() -> None:
    """A training command's own SIGTERM/SIGINT handling, around the run's (`r1kit.run.lifecycle.Lifecycle`, which takes
    them from `begin` until the run ends, then hands them back: `after_run`). Before the run: stop at once, exit 75
    (nothing trained, nothing to save). After it: ignored, so that a second SIGTERM arriving while the process exits
    (a launcher passing Slurm's on, just after the save) cannot turn its code (75, 3 or 0) into -15."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, _command_signal)


def after_run(handler):
    """The handler a run hands its stop signals back to: in a training command's process (its own handler), SIG_IGN:
    the run has said how it ended and the process is on its way out with that code. (Ignored by the kernel, not by
    a Python handler, which the interpreter resets to the default while it shuts down: a late SIGTERM would then
    kill the process and turn its 75, 3 or 0 into -15.)"""
    return signal.SIG_IGN if handler is _command_signal else handler


def quiet_after_run() -> None:
    """The command has its exit code (a refused resume, an error, a stop before the run held the signals): from here
    on a stop signal is ignored too (`after_run`)."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, after_run(signal.getsignal(number)))


def _command_signal(number: int, frame) -> None:
    name = signal.Signals(number).name
    _say_raw(f"r1kit: {name} before the run started: stopping; nothing to save (exit code {EXIT_INTERRUPTED}).")
    raise SystemExit(EXIT_INTERRUPTED)


def _say_raw(line: str) -> None:
    """One line on stderr from a signal handler (no lock taken: the handler may interrupt a print)."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def with_outcome(command: Callable[[], int]) -> int:
    """Runs a command; under `r1kit launch` (`R1KIT_OUTCOME_DIR` set) this worker's pid is written there first (so
    that a stop signal reaches it) and its exit code last, whatever ends it: a launcher reports every worker's
    non-zero exit as its own failure, so the launch reads the outcome from these files."""
    folder = os.environ.get(OUTCOME_DIR_ENV)
    if not folder:
        try:
            return command()
        finally:
            quiet_after_run()
            release_process_group()
    rank = os.environ.get("RANK", str(os.getpid()))
    _write_outcome(folder, f"pid-{rank}", str(os.getpid()))
    code = 1
    try:
        code = command()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        raise
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        quiet_after_run()
        release_process_group()
        _write_outcome(folder, f"code-{rank}", str(code))
    return code


def exit_now(code: int) -> None:
    """Ends this process at once with `code` (no cleanup: a thread that found the run hung calls it), its code first
    written for its launch as `with_outcome` would have written it."""
    folder = os.environ.get(OUTCOME_DIR_ENV)
    if folder:
        _write_outcome(folder, f"code-{os.environ.get('RANK', str(os.getpid()))}", str(code))
    os._exit(code)


def release_process_group() -> None:
    """Destroys the launch's process group when the command ends, in a worker of a multi-process launch: a gloo group
    left to the interpreter's exit can abort the process after the run has ended well ("terminate called without an
    active exception", SIGABRT, seen on a 2-rank CPU run), turning its exit code 0 or 75 into -6. Not collective: a
    rank that ends first does not wait for the others. A one-process command (tests calling r1kit in-process, a
    notebook) keeps its group: accelerate's state outlives the command there."""
    torch = sys.modules.get("torch")
    if torch is None or int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001 - the run has its outcome; a failed teardown must not change it
        pass


def _write_outcome(folder: str, name: str, text: str) -> None:
    try:
        path = os.path.join(folder, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    except OSError:  # the launch's folder is gone: nobody reads it any more
        pass


def _run_parsed(command: argparse.ArgumentParser, argv: list[str] | None) -> int:
    args = parse_command(command, list(sys.argv[1:] if argv is None else argv))
    return args.run(args)
