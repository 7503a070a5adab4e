"""A private Slurm cluster on this machine, for the tests that submit `slurm/train.slurm`: munged (with a key of its
own), slurmctld and one slurmd per fake node (n1, n2, ... all at 127.0.0.1: Debian's slurmd runs several on one
host under distinct node names, `slurmd -N`), each on a free port, with a generated slurm.conf and every state, spool,
socket and log file in one temporary folder. `stop` cancels what is still queued or running, stops the daemons and
checks that no process of the cluster is left. Without Slurm installed the tests skip (in CI, where .ci/run installs
it, they fail instead)."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

SBIN = "/usr/sbin:/sbin"  # where Debian puts the daemons (not on an ordinary user's PATH)
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
INSTALL = "apt-get install slurmctld slurmd slurm-client munge"


def find(program: str) -> str | None:
    return shutil.which(program, path=f"{os.environ.get('PATH', '')}:{SBIN}")


def require_slurm() -> None:
    """Skips the test where Slurm is not installed; fails it in CI, which installs Slurm (.ci/run)."""
    absent = [p for p in PROGRAMS if find(p) is None]
    if absent:
        reason = f"Slurm is not installed here ({', '.join(absent)} not found; {INSTALL})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: .ci/run installs it, so CI must run these tests")
        pytest.skip(reason)


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM): a daemon ends with the test process even if that is killed outright."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SlurmCluster:
    def __init__(self, folder: Path, nodes: int = 3):
        self.folder = Path(folder)
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.conf = self.folder / "slurm.conf"
        self.munge_socket = self.folder / "munge" / "munge.socket"
        self.daemons: list[tuple[str, subprocess.Popen]] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{os.environ.get('PATH', '')}:{SBIN}"}
        for name in list(self.env):
            if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_")) and name != "SLURM_CONF":
                del self.env[name]  # a test run inside a Slurm job must not talk to that job's cluster

    # -- starting and stopping

    def start(self) -> SlurmCluster:
        for sub in ("munge", "state", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder / "munge", 0o700)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self.write_conf()
        try:
            self.spawn("munged", [find("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                                  f"--key-file={key}", f"--pid-file={self.folder / 'munge' / 'munged.pid'}",
                                  f"--log-file={self.folder / 'log' / 'munged.log'}",
                                  f"--seed-file={self.folder / 'munge' / 'munged.seed'}"])
            self.wait(self.munge_socket.exists, 30, "munged's socket")
            self.spawn("slurmctld", [find("slurmctld"), "-D", "-f", str(self.conf)])
            self.wait(lambda: self.run("scontrol", "ping", check=False).returncode == 0, 60, "slurmctld to answer")
            for node in self.nodes:
                self.spawn(f"slurmd {node}", [find("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
            self.wait(self.all_idle, 90, f"nodes {', '.join(self.nodes)} to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def write_conf(self) -> None:
        user = pwd.getpwuid(os.getuid()).pw_name
        host = socket.gethostname().split(".")[0]
        ports = [free_port() for _ in range(1 + len(self.nodes))]
        cpus = os.cpu_count() or 1
        f = self.folder
        lines = [
            "ClusterName=r1kittest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ports[0]}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # A requeued job waits cred_expire seconds before it starts again (120 by default: too long for a test).
            f"AuthInfo=socket={self.munge_socket},cred_expire=10",
            f"StateSaveLocation={f / 'state'}",
            f"SlurmdSpoolDir={f / 'spool'}/%n",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}",
            f"SlurmdPidFile={f / 'spool'}/%n/slurmd.pid",
            f"SlurmctldLogFile={f / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={f / 'log'}/slurmd-%n.log",
            f"PlugStackConfig={f / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups: nothing of the host is changed
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=2",  # a requeued job starts when its delay ends, not up to 60 s later
            "JobRequeue=1",
            "ReturnToService=2",
            "KillWait=30",
            "MinJobAge=600",  # finished jobs stay visible to scontrol for the test's asserts
            *(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} RealMemory=1000 "
              "State=UNKNOWN" for n, port in zip(self.nodes, ports[1:])),
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        (f / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join(lines) + "\n")

    def spawn(self, name: str, command: list[str]) -> None:
        log = (self.folder / "log" / f"{name.replace(' ', '-')}.out").open("ab")
        process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True, preexec_fn=die_with_parent)
        log.close()
        self.daemons.append((name, process))

    def stop(self) -> None:
        """Cancels every job, stops the daemons (slurmd first, munged last) and checks that nothing is left."""
        ctld = dict(self.daemons).get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", "--full", *jobs, check=False)
                try:
                    self.wait(lambda: not self.run("squeue", "-h", "-o", "%i", check=False).stdout.split(), 60,
                              "the cancelled jobs to end")
                except TimeoutError:
                    pass  # the process check below reports what was left
        for _, process in reversed(self.daemons):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
        self.daemons = []
        left = self.leftovers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, f"processes of the test's Slurm cluster were left running (killed now): {left}"

    def leftovers(self) -> list[int]:
        """Processes that carry this cluster's slurm.conf in their environment (slurmstepd, job steps): none should
        outlive the cluster. Others' processes are not readable and are not ours."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    found.append(int(pid))
            except OSError:
                continue
        return [pid for pid in found if pid != os.getpid()]

    # -- talking to it

    def run(self, *command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([find(command[0]) or command[0], *command[1:]], env=self.env, capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def all_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        idle = {line.split()[0] for line in states if line.strip().endswith("idle")}
        return idle >= set(self.nodes)

    def sbatch(self, *args: str, env: dict | None = None, cwd: Path | None = None) -> str:
        """Submits; the job's id."""
        result = subprocess.run([find("sbatch"), "--parsable", *args], env={**self.env, **(env or {})}, cwd=cwd,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"sbatch exited {result.returncode}: {result.stderr.strip()}"
        return result.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """scontrol's fields of the job (JobState, Restarts, ExitCode, Reason, ...); {} once Slurm forgot it."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        return dict(re.findall(r"(\w+(?::\w+)?)=(\S*)", out))

    @staticmethod
    def wait(ready, timeout: float, what: str, interval: float = 0.25):
        """Polls `ready()` until it returns something true (returned), or raises TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            time.sleep(interval)
