"""Several training processes with r1kit's exit codes: `r1kit launch LAUNCHER [ARGS ...]`, and
`r1kit grpo|sft --world-size N` for N processes on this machine.

torchrun and accelerate launch report any worker's non-zero exit as their own failure (torchrun: 1, with a
ChildFailedError or SignalException traceback; accelerate launch: 1, or 128 + the signal it got), so a preempted run
looks like a failed one and a requeue rule on 75 never fires. Under `r1kit launch` each r1kit worker writes its pid
when it starts and its exit code when it ends into a folder the launch names (R1KIT_OUTCOME_DIR,
`r1kit.console.with_outcome`), and the launch exits with the outcome they agree on (`outcome`: 0 completed, 75
interrupted and resumable, 3 stopped by a tripwire, 2 a configuration error, else the failure's code). torchrun and
accelerate launch run inside `r1kit launch` (their exceptions caught: no launcher traceback); any other launcher runs
as its child, in a session of its own.

Stop signals are `r1kit launch`'s, not the launcher's (TORCHELASTIC_SIGNALS_TO_HANDLE leaves SIGTERM and SIGINT
out): the first SIGTERM or SIGINT reaches each worker once, as SIGTERM (every worker stops at the same step end,
saves and exits 75; a worker still starting learns of it as soon as it has said it is there), a later SIGINT as
SIGINT (stop at once, unsaved), a later SIGTERM nothing (the workers are stopping already). A scheduler that signals
every process (Slurm does) reaches the workers directly too; a second SIGTERM is nothing new to them. Torch's agent
is given 600 s (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, unless set) before it kills a worker that has not stopped.

    r1kit launch torchrun --nproc_per_node 8 -m r1kit grpo --config RECIPE
    r1kit launch accelerate launch --config_file recipes/accelerate_configs/zero3.yaml -m r1kit grpo --config RECIPE
    r1kit grpo --world-size 2 --config RECIPE      # = r1kit launch torchrun --standalone --nproc_per_node 2 ...
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from r1kit.console import (
    EXIT_COMPLETED,
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    OUTCOME_DIR_ENV,
    add_pass_through_command,
    say,
)
from r1kit.errors import ConfigError, one_line

SHUTDOWN_GRACE = "600"  # seconds torch's agent lets signalled workers take (its own default, 30, is too short to save)
# Launchers r1kit knows how to find next to this Python when they are not on PATH.
MODULES = {"torchrun": ["-m", "torch.distributed.run"], "accelerate": ["-m", "accelerate.commands.accelerate_cli"]}


def world_size(argv: list[str]) -> tuple[int, list[str]]:
    """(N, argv without it) for `--world-size N` on a training command; (1, argv) without it or with `--dry-run`
    (which checks the recipe as launched on N processes: r1kit.config.recipe)."""
    if "--dry-run" in argv:
        return 1, argv
    for i, item in enumerate(argv):
        if item == "--world-size" or item.startswith("--world-size="):
            value = item.split("=", 1)[1] if "=" in item else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in item else 2):]
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"--world-size: a positive number of processes, got {value!r}")
            return int(value), rest
    return 1, argv


def local(command: str, argv: list[str], processes: int) -> int:
    """`r1kit COMMAND ARGV` on `processes` processes of this machine (torch's launcher, standalone rendezvous)."""
    return launch(["torchrun", "--standalone", "--nproc_per_node", str(processes), "-m", "r1kit", command, *argv])


def resolve(command: list[str]) -> list[str]:
    """`command` with its launcher found: on PATH, beside this Python, or as this Python's module."""
    name = command[0]
    if shutil.which(name):
        return command
    sibling = Path(sys.executable).with_name(name)
    if sibling.is_file():
        return [str(sibling), *command[1:]]
    if name in MODULES:
        return [sys.executable, *MODULES[name], *command[1:]]
    raise ConfigError(f"r1kit launch: {name} not found (on PATH or beside {sys.executable})")


class Stops:
    """The stop signals `r1kit launch` received, passed on to each worker that has said it is there."""

    def __init__(self, folder: str):
        self.folder = folder
        self.received: list[int] = []
        self.told: dict[int, int] = {}  # worker pid -> how many of the signals it has been sent
        self.lock = threading.Lock()
        self.done = threading.Event()

    def on_signal(self, number: int, frame) -> None:
        self.received.append(number)

    def forward(self) -> None:
        """Each worker learns of each stop once: the first as SIGTERM, a later SIGINT as SIGINT."""
        with self.lock:
            for pid in read(self.folder, "pid-").values():
                for n in range(self.told.get(pid, 0), len(self.received)):
                    if n == 0 or self.received[n] == signal.SIGINT:
                        try:
                            os.kill(pid, signal.SIGTERM if n == 0 else signal.SIGINT)
                        except OSError:  # it has ended
                            pass
                self.told[pid] = len(self.received)

    def keep_forwarding(self) -> None:
        while not self.done.wait(0.1):
            if self.received:
                self.forward()


def launch(command: list[str]) -> int:
    """Runs the launcher `command`; returns the workers' outcome as one exit code (`outcome`)."""
    with tempfile.TemporaryDirectory(prefix="r1kit-launch-") as folder:
        stops = Stops(folder)
        os.environ[OUTCOME_DIR_ENV] = folder  # (the workers inherit this process's environment)
        os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SHUTDOWN_GRACE)
        os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGHUP,SIGQUIT"  # SIGTERM and SIGINT stay ours
        previous = {n: signal.signal(n, stops.on_signal) for n in (signal.SIGTERM, signal.SIGINT)}
        forwarder = threading.Thread(target=stops.keep_forwarding, name="r1kit-launch-signals", daemon=True)
        forwarder.start()
        try:
            returned = run_launcher(command)
        finally:
            stops.done.set()
            for number, handler in previous.items():
                signal.signal(number, handler)
        workers, codes = read(folder, "pid-"), read(folder, "code-")
    code = outcome(codes, len(workers), bool(stops.received), returned)
    if code != returned and code != 2:  # (a configuration error: the worker's one line said it all)
        say(f"r1kit launch: {' '.join(command[:2])} ended with {returned}; its {len(codes)} r1kit worker(s) exited "
            f"{sorted(set(codes.values()))}: exit code {code} ({meaning(code)})")
    return code


def run_launcher(command: list[str]) -> int:
    """torchrun or accelerate launch in this process (their failure is an exception, caught: the workers' files
    say what happened); any other launcher as a child process. Returns the launcher's own exit code."""
    name = Path(command[0]).name  # (a path to torchrun or accelerate is the same launcher)
    if name == "torchrun":
        from torch.distributed.run import parse_args, run  # deferred: torch

        return caught(lambda: run(ours(parse_args(command[1:]), command)))
    if name == "accelerate" and command[1:2] == ["launch"]:
        from accelerate.commands.launch import launch_command, launch_command_parser  # deferred: accelerate

        return caught(lambda: launch_command(ours(launch_command_parser().parse_args(command[2:]), command)))
    child = subprocess.Popen(resolve(command), start_new_session=True)  # a terminal's Ctrl-C reaches us alone
    while True:
        try:
            returned = child.wait()
            break
        except InterruptedError:  # (a signal handler ran)
            continue
    return returned if returned >= 0 else 128 - returned  # killed: 128 + the signal, as a shell says


def ours(args, command: list[str]):
    """The launcher's parsed arguments with SIGTERM and SIGINT left to `r1kit launch` (torch's agent would otherwise
    take them: it sends its workers the signal it got, then raises), unless the command chose its own."""
    if not any(item.startswith(("--signals-to-handle", "--signals_to_handle")) for item in command):
        args.signals_to_handle = "SIGHUP,SIGQUIT"  # (accelerate launch passes it on to torch's launcher)
    return args


def caught(run) -> int:
    try:
        run()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # noqa: BLE001 - a worker's failure, as the launcher raises it (ChildFailedError): the
        # workers' own codes say more. Anything else (a rendezvous port in use, a bad flag) failed before any worker
        # ran: said in one line, or the run would end with exit 1 and nothing printed.
        # accelerate's simple launcher raises CalledProcessError for its one worker, which said why itself
        if type(e).__name__ not in ("ChildFailedError", "CalledProcessError"):
            say(f"r1kit launch: the launcher failed before its workers ran: {one_line(e)}")
        return 1
    return 0


def read(folder: str, prefix: str) -> dict[str, int]:
    found = {}
    for path in Path(folder).glob(prefix + "*"):
        if path.suffix != ".tmp":
            try:
                found[path.name[len(prefix):]] = int(path.read_text().strip())
            except (OSError, ValueError):
                continue
    return found


def outcome(codes: dict[str, int], workers: int, signalled: bool, launcher_code: int) -> int:
    """One exit code from the workers' (`codes`, per rank; `workers`: how many started): a failure's code first
    (one rank's crash is the run's), then 3 (a tripwire stopped every rank), then 75 (interrupted: also when a stop
    signal came and a worker ended without saying, killed by its launcher), then 0 when every worker completed;
    else the launcher's own code (1 when it said 0)."""
    values = list(codes.values())
    failures = [c for c in values if c not in (EXIT_COMPLETED, EXIT_INTERRUPTED, EXIT_STOPPED)]
    if failures:
        return failures[0]
    if EXIT_STOPPED in values:
        return EXIT_STOPPED
    missing = workers > len(values) or not values
    if EXIT_INTERRUPTED in values or (signalled and missing):
        return EXIT_INTERRUPTED
    if values and not missing:
        return EXIT_COMPLETED
    return launcher_code or 1


def meaning(code: int) -> str:
    return {EXIT_COMPLETED: "completed", EXIT_INTERRUPTED: "interrupted, resumable: the same command continues",
            EXIT_STOPPED: "stopped by a tripwire", 2: "a configuration error"}.get(code, "failed")


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit launch LAUNCHER [ARGS ...]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `launch` to the `r1kit` command."""
    return add_pass_through_command(subparsers, "launch", "run torchrun or accelerate launch with r1kit's exit codes",
                                    run)


def run(args) -> int:
    argv = list(args.argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: r1kit launch LAUNCHER [ARGS ...]\n\n" + __doc__.strip())
        return 0
    return launch(argv)
