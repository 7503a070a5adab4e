"""Several training processes with r1kit's exit codes: `r1kit launch LAUNCHER [ARGS ...]`, and
`r1kit grpo|sft --world-size N` for N processes on this machine.

torchrun and accelerate launch report any worker's non-zero exit as their own failure (torchrun: 1, with a
ChildFailedError or SignalException traceback; accelerate launch: 1, or 128 + the signal it got), so a preempted run
looks like a failed one and a requeue rule on 75 never fires. `r1kit launch` runs the launcher as its child, in a
session of its own, with R1KIT_OUTCOME_DIR set: each r1kit worker writes its pid there when it starts and its exit
code when it ends (`r1kit.console.with_outcome`), and the launch exits with the outcome they agree on (0 completed,
75 interrupted and resumable, 3 stopped by a tripwire, 2 a configuration error, else the failure's code).

A SIGTERM or SIGINT to `r1kit launch` reaches each worker once, as SIGTERM: every worker stops at the same step end,
saves and exits 75 (a later SIGTERM is nothing new to them; a second SIGINT reaches them as SIGINT: stop at once,
unsaved). A scheduler that signals every process (Slurm does) reaches the launcher too, which then stops its workers
its own way; torch's agent is given the time to let them save (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 600 s unless set).

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
import time
from pathlib import Path

from r1kit.console import (
    EXIT_COMPLETED,
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    OUTCOME_DIR_ENV,
    add_pass_through_command,
    say,
)
from r1kit.errors import ConfigError

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
    """The stop signals `r1kit launch` received, and which workers have been told."""

    def __init__(self):
        self.received: list[int] = []
        self.told: dict[int, int] = {}  # worker pid -> how many of the signals it has been sent

    def on_signal(self, number: int, frame) -> None:
        self.received.append(number)

    def forward(self, workers: dict[str, int]) -> None:
        """Each worker learns of each stop once: the first as SIGTERM, a later SIGINT as SIGINT."""
        for pid in workers.values():
            for n in range(self.told.get(pid, 0), len(self.received)):
                number = signal.SIGTERM if n == 0 else self.received[n]
                if n == 0 or number == signal.SIGINT:
                    try:
                        os.kill(pid, number)
                    except OSError:  # it has ended
                        pass
            self.told[pid] = len(self.received)


def launch(command: list[str]) -> int:
    """Runs the launcher `command`; returns the workers' outcome as one exit code (`outcome`)."""
    command = resolve(command)
    stops = Stops()
    with tempfile.TemporaryDirectory(prefix="r1kit-launch-") as folder:
        env = {**os.environ, OUTCOME_DIR_ENV: folder}
        env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SHUTDOWN_GRACE)
        previous = {n: signal.signal(n, stops.on_signal) for n in (signal.SIGTERM, signal.SIGINT)}
        try:
            # A session of its own: a terminal's Ctrl-C reaches r1kit launch alone, which tells each worker once.
            child = subprocess.Popen(command, env=env, start_new_session=True)
            while child.poll() is None:
                time.sleep(0.1)
                if stops.received:
                    stops.forward(read(folder, "pid-"))
            workers, codes = read(folder, "pid-"), read(folder, "code-")
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
    returned = child.returncode if child.returncode >= 0 else 128 - child.returncode  # killed: 128 + the signal
    code = outcome(codes, len(workers), bool(stops.received), returned)
    if code != returned:
        say(f"r1kit launch: {Path(command[0]).name} exited {returned}; its {len(codes)} r1kit worker(s) exited "
            f"{sorted(set(codes.values()))}: exit code {code} ({meaning(code)})")
    return code


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
