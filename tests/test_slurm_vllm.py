"""`slurm/train.slurm --vllm-node 1` against a real Slurm with a real vLLM (its CPU build): the job's last node serves
generations with `r1kit vllm-serve` on its address, behind r1kit's front, with a shared secret the script generates
for the job, and the training node trains against it, pushing its weights to the server after every step. The secret
reaches both steps in their environment, the same one, and no command line (what `ps` shows) nor the job's output
holds it. Skipped where vLLM cannot run, or Slurm is not installed (tests/slurm_cluster.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from r1kit.benchmarking.generation import vllm_available
from tests.helpers import write_recipe
from tests.slurm_cluster import SlurmCluster, free_port, require_slurm
from tests.test_slurm import DDP, REPO, SCRIPT, job_env, tail, wait_for
from tests.test_vllm import assert_engine_follows_the_policy

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not vllm_available(), reason="vLLM cannot run here")]
SECRET = "R1KIT_VLLM_SECRET"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    require_slurm()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class Secrets:
    """What the job's processes show of the shared secret, read from /proc while it runs: the values in their
    environments (by the step they belong to) and whether any command line holds one."""

    def __init__(self, conf: Path):
        self.marker = f"SLURM_CONF={conf}".encode()
        self.seen: dict[str, set[str]] = {"server": set(), "trainer": set()}
        self.cmdlines: list[bytes] = []

    def look(self) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            self.cmdlines.append(cmdline)
            if self.marker not in environ:
                continue
            values = {v.split(b"=", 1)[1].decode() for v in environ if v.startswith(f"{SECRET}=".encode())}
            if b"vllm-serve" in cmdline or b"api_server" in cmdline:
                self.seen["server"] |= values
            elif b"grpo" in cmdline:
                self.seen["trainer"] |= values


def test_the_vllm_node_serves_the_training_node_behind_a_secret_generated_for_the_job(slurm, tmp_path,
                                                                                     tmp_path_factory):
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    model = tmp_path_factory.mktemp("vllm_model")  # head size 64: what vLLM's CPU attention supports
    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer, hidden_size=128, layers=2, heads=2).save_pretrained(model)
    tokenizer.save_pretrained(model)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{b}=", "solution": str(a + b)}) + "\n"
                            for a in range(10) for b in range(4)))
    out, log = tmp_path / "out", tmp_path / "job.out"
    recipe = write_recipe(tmp_path, model_name_or_path=str(model), dataset_name=str(data),
                          dataset_prompt_column="problem", reward_funcs=["tests.rewards_for_tests:length_variety"],
                          num_generations=4, per_device_train_batch_size=8, max_completion_length=12,
                          learning_rate=1e-2, max_steps=2, save_strategy="no", output_dir=str(out), report_to="none",
                          logging_steps=1, use_vllm=True, vllm_max_model_length=128, vllm_server_timeout=300,
                          bf16=False, use_cpu=True, torch_num_threads=1, seed=0, probe_rewards=False)
    env = job_env()
    job = slurm.sbatch("--nodes", "2", "--output", str(log), str(SCRIPT), "--recipe", str(recipe),
                       "--accelerate-config", str(DDP), "--gpus-per-node", "1", "--vllm-node", "1",
                       "--vllm-port", str(free_port()), "--main-port", str(free_port()),
                       env={**env, SECRET: "", f"{SECRET}_FILE": ""}, cwd=REPO)
    secrets = Secrets(slurm.conf)

    def done():
        secrets.look()
        return slurm.job(job).get("JobState") == "COMPLETED"

    wait_for(slurm, job, log, done, "the job to complete", timeout=600, failed="srun: error: n1")
    text = log.read_text()
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "completed", text[-4000:]
    steps = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]
    # The trainer's weights reached the server after every step (pushed through files to its reload endpoint, with
    # the secret): the server's log-probabilities of what it sampled are the trainer's.
    assert_engine_follows_the_policy(steps)
    # Both ends authenticated, with one secret generated for the job, found in both steps' environments only.
    assert "needs the shared secret" in text and "authenticated with the shared secret" in text, text[-4000:]
    assert len(secrets.seen["server"]) == 1 and secrets.seen["server"] == secrets.seen["trainer"], secrets.seen
    secret = secrets.seen["server"].pop()
    assert len(secret) >= 32
    assert not [c for c in secrets.cmdlines if secret.encode() in c]
    assert secret not in text and secret not in tail(out / "r1kit_run.json", 10**6)
