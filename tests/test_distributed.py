"""Real 2-process data-parallel GRPO on CPU (gloo), launched with torchrun, as users launch on GPUs. (Two ranks
training together and writing once: tests/test_sharding.py's DDP run, the reference of its sharded ones.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]


def train_on_two_ranks(tmp_path, recipe: dict, *launcher: str) -> tuple[subprocess.CompletedProcess, str]:
    """`torchrun --nproc_per_node 2 -m r1kit.grpo` on the recipe, as users launch (behind `launcher`: e.g.
    `r1kit launch`); (the result, its whole log)."""
    path = write_recipe(tmp_path, **recipe)
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("MASTER_PORT", None)
    # --standalone: a rendezvous on a free local port, so runs side by side (or a busy port) cannot collide.
    result = subprocess.run(
        [*launcher, torchrun, "--standalone", "--nproc_per_node", "2", "-m", "r1kit.grpo", "--config", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    return result, result.stdout + result.stderr


@pytest.mark.slow
def test_two_ranks_roll_back_and_stop_together_when_a_tripwire_fires(tmp_path, tiny_model_dir, math_jsonl):
    """The main process decides a tripwire's action and every rank follows: a rollback trains both ranks again from
    the same checkpoint, and the stop after it ends both (a rank left behind would wait forever in a collective).
    With async rollouts: each rank's producer generates ahead, and the rollback empties its queue (what was read
    ahead with the abandoned weights is never trained)."""
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=4, save_steps=1, use_cpu=True,
                         per_device_train_batch_size=4, num_generations=4, tripwire_max_rollbacks=1,
                         tripwires={"length_blowup": {"threshold": 0.0, "window": 2, "action": "rollback"}},
                         async_rollouts=True)
    result, log = train_on_two_ranks(tmp_path, recipe, sys.executable, "-m", "r1kit", "launch")
    assert result.returncode == 3, log[-4000:]  # stopped by a tripwire (torchrun alone says 1)
    assert "Process rank 1 / world size 2" in log
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "stopped"
    assert not (out / "model.safetensors").exists()
    # Fires at step 2 (the window is full): back to checkpoint-1; fires again at step 3: no rollback left, so stop.
    ledger = json.loads((out / "tripwire_rollbacks.json").read_text())
    assert [(d["step"], Path(d["checkpoint"]).name, d["applied"]) for d in ledger["rollbacks"]] == [
        (2, "checkpoint-1", True)]
    assert ledger["stop"]["step"] == 3  # written before both ranks stopped
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    fired = [json.loads(line) for line in (out / "tripwires.jsonl").read_text().splitlines()]
    assert [(f["step"], f["action"]) for f in fired][-1] == (3, "stop")
    # steps 1, 2 (rolled back), then 2, 3 again from checkpoint-1: one batch read ahead each, within the bound
    steps = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in e]
    assert [e["step"] for e in steps][-2:] == [2, 3] and all(e["rollouts/staleness"] <= 1 for e in steps)
    assert json.loads((out / "checkpoint-1" / "r1kit_rollouts.json").read_text())["weights_version"] == 1


RELEASE_WORKER = """
import sys, torch.distributed as dist
from r1kit.console import with_outcome
dist.init_process_group("gloo")
code = with_outcome(lambda: 0)
print(f"rank {dist.get_rank() if dist.is_initialized() else '-'} initialized {dist.is_initialized()}", flush=True)
sys.exit(code)
"""


@pytest.mark.slow
def test_a_command_of_a_multi_process_launch_lets_its_process_group_go(tmp_path):
    """A gloo group left to the interpreter's exit could abort a rank after its run ended well (SIGABRT turned a
    finished 2-rank run's 0 into -6): each worker's command destroys the group as it ends."""
    script = tmp_path / "worker.py"
    script.write_text(RELEASE_WORKER)
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("MASTER_PORT", None)
    result = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", str(script)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("initialized False") == 2, result.stdout
