"""`slurm/train.slurm` against a real Slurm (Debian's slurm-wlm 22.05: munged, slurmctld and three slurmd as fake
nodes n1-n3 on this machine, started and stopped by the fixture; tests/slurm_cluster.py). A 2-node CPU job trains
through srun and `r1kit launch accelerate launch` (one process per node); `scancel --signal=TERM` mid-run (what
Slurm sends ahead of the time limit) makes r1kit save a checkpoint and exit 75, the script requeues the job, and the
requeued job resumes from that checkpoint and finishes. The 3-node split into training nodes and a vLLM node is
checked through the script's --dry-run here, and runs for real in tests/test_slurm_vllm.py where vLLM is installed.
Skipped where Slurm is not installed (not in CI, which installs it)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import tiny_recipe, write_recipe
from tests.slurm_cluster import SlurmCluster, free_port, require_slurm

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "train.slurm"
DDP = REPO / "recipes" / "accelerate_configs" / "ddp.yaml"
STARTUP_SECONDS = 300  # two ranks starting on a busy 2-core machine
ENDED_GRACE = 5.0  # seconds a job that looks ended is given before a wait calls it failed
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    require_slurm()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def job_env(**extra: str) -> dict[str, str]:
    """What the job needs from the submitting shell (sbatch passes its environment on): this Python first on PATH,
    the repository importable (the test rewards), one thread per process."""
    return {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1", **extra}


def wait_for(slurm: SlurmCluster, job: str, log: Path, ready, what: str, timeout: float = STARTUP_SECONDS,
             failed: str | None = None):
    """Waits for `ready()`; fails at once, with the job's output, if the job ends first (or its output shows
    `failed`: a step's task that failed while the others wait for it)."""
    def looks_ended() -> bool:
        return slurm.job(job).get("JobState") in ENDED or bool(failed and failed in tail(log, 10**6))

    def check():
        value = ready()
        if not value and looks_ended():
            # Read again a little later: between two reads the job may have reached the awaited state (COMPLETING ->
            # COMPLETED), and a job requeued as it exits shows its exit (FAILED, 75) until slurmctld, slower on a
            # busy machine, counts the restart.
            time.sleep(ENDED_GRACE)
            value = ready()
            if not value and looks_ended():
                pytest.fail(f"job {job} ({slurm.job(job)}) failed before {what}:\n{tail(log)}")
        return value
    try:
        return slurm.wait(check, timeout, what)
    except TimeoutError as e:
        pytest.fail(f"{e}; job {slurm.job(job)}:\n{tail(log)}")


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no output)"


def test_dry_run_puts_two_training_nodes_and_a_vllm_node_on_three_nodes_with_no_secret_on_a_command_line(
        slurm, tmp_path):
    recipe = write_recipe(tmp_path, model_name_or_path="Qwen/Qwen2.5-1.5B-Instruct")
    printed = {}
    for secret in ("", "canary-secret-0123456789abcdef"):  # generated for the job; given at submission
        log = tmp_path / f"dry{len(secret)}.out"
        env = job_env(**({"R1KIT_VLLM_SECRET": secret} if secret else {}))
        job = slurm.sbatch("--nodes", "3", "--output", str(log), str(SCRIPT), "--recipe", str(recipe),
                           "--gpus-per-node", "8", "--vllm-node", "1", "--dry-run", env=env, cwd=REPO)
        wait_for(slurm, job, log, lambda j=job: slurm.job(j).get("JobState") == "COMPLETED", "the dry run", 120)
        printed[secret] = log.read_text()
    generated, given = printed[""], printed["canary-secret-0123456789abcdef"]
    assert "canary-secret" not in given
    assert "generated for this run of the job" in generated and "the submission's environment" in given
    commands = [shlex.split(line) for line in generated.splitlines() if line.startswith("srun ")]
    assert len(commands) == 2, generated
    serve, train = commands
    # The vLLM server: alone on the last node, on its address (NodeAddr), behind r1kit's front.
    assert serve[:6] == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=n3", "--export=ALL", "python"]
    assert serve[6:12] == ["-m", "r1kit", "vllm-serve", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--host"]
    assert serve[12] == "127.0.0.1" and serve[serve.index("--port") + 1] == "8000"
    assert serve[serve.index("--data_parallel_size") + 1] == "8"
    # The trainers: one launcher per node on the other two, 16 processes, rendezvous on the first node's address.
    assert train[:6] == ["srun", "--nodes=2", "--ntasks=2", "--nodelist=n1,n2", "--export=ALL", "bash"]
    launch = shlex.split(train[7])
    launch = launch[launch.index("exec"):]  # after finding the node's machine rank: its place in the training nodes
    assert launch[:8] == ["exec", "python", "-m", "r1kit", "launch", "accelerate", "launch", "--config_file"]
    for option, value in [("--num_machines", "2"), ("--num_processes", "16"), ("--machine_rank", "$rank"),
                          ("--main_process_ip", "127.0.0.1"), ("--main_process_port", "29500"),
                          ("--rdzv_backend", "static"),
                          ("--vllm_mode", "server"), ("--vllm_server_host", "127.0.0.1"),
                          ("--vllm_server_port", "8000"), ("--config", str(recipe))]:
        assert launch[launch.index(option) + 1] == value, (option, launch)
    assert not [word for command in commands for word in command if "SECRET" in word and "=" in word]


def test_a_job_preempted_mid_run_is_requeued_and_the_requeued_job_resumes_and_finishes(
        slurm, tmp_path, tiny_model_dir, math_jsonl):
    """Two training nodes, one process each (the shipped DDP accelerate config, gloo on CPU): Slurm's SIGTERM at
    step 2 (scancel --signal=TERM: every process of the job's steps, as --signal=TERM@600 ahead of the time limit)
    saves checkpoint-2 and exits 75; the script requeues the job, which Slurm starts again by itself (not held) and
    which resumes at step 3 and completes."""
    out, gate, log = tmp_path / "out", tmp_path / "gate", tmp_path / "job.out"
    gate.mkdir()
    recipe = write_recipe(tmp_path, **tiny_recipe(
        tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=100, use_cpu=True, per_device_train_batch_size=4,
        num_generations=4, reward_funcs=["accuracy", "tests.rewards_for_tests:gated_length_variety"]))
    env = job_env(R1KIT_TEST_GATE=str(gate), R1KIT_TEST_GATE_AT="2")  # step 2's rewards wait for gate/go
    job = slurm.sbatch("--nodes", "2", "--output", str(log), str(SCRIPT), "--recipe", str(recipe),
                       "--accelerate-config", str(DDP), "--gpus-per-node", "1", "--main-port", str(free_port()),
                       env=env, cwd=REPO)
    wait_for(slurm, job, log, lambda: {p.name for p in gate.iterdir()} >= {"waiting-0", "waiting-1"},
             "both ranks to reach step 2", failed="srun: error")
    slurm.run("scancel", "--signal=TERM", job)
    wait_for(slurm, job, log, lambda: "SIGTERM received" in tail(log, 10**6), "r1kit to take the SIGTERM", 120)
    (gate / "go").touch()

    requeued = wait_for(slurm, job, log, lambda: slurm.job(job).get("Restarts", "0") != "0" and slurm.job(job),
                        "the requeue", 120)
    # `scontrol requeue` (not requeuehold): pending on Slurm's restart delay (the credential's lifetime, cred_expire:
    # 10 s here, 120 s by default), not held for an administrator. Any state on the way from pending to completed:
    # on a busy machine the restarted job was seen COMPLETING by the time this read it.
    assert requeued["JobState"] in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED"}, requeued
    assert "Held" not in requeued.get("Reason", ""), requeued
    final = wait_for(slurm, job, log, lambda: slurm.job(job).get("JobState") == "COMPLETED" and slurm.job(job),
                     "the requeued job to complete")
    text = log.read_text()
    assert final["Restarts"] == "1" and final["ExitCode"] == "0:0", final
    assert f"r1kit: interrupted (exit 75); requeueing job {job}" in text, text[-4000:]
    assert f"Resuming from {out / 'checkpoint-2'}" in text, text[-4000:]
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "completed" and record["world_size"] == 2, record
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-2" / "model.safetensors").is_file()
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "loss" in e] == [1, 2, 3, 4]  # steps 1-2, then 3-4 after the requeue
