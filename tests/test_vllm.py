"""Generation with a real vLLM (its CPU build here): GRPO trains with colocated vLLM, the engine generates from the
updated weights after every optimizer step (its log-probabilities of what it sampled match the trainer's), with
dynamic sampling and across a resume; `r1kit evaluate` and `r1kit pass-rate` generate with it; a trained output
folder loads in vLLM. Skipped where vLLM cannot run (not installed, or a GPU build without a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.benchmarking.generation import vllm_available
from tests.helpers import raises_naming, write_recipe
from tests.test_lifecycle import run_here

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not vllm_available(), reason="vLLM cannot run here")]
ROOT = Path(__file__).resolve().parents[1]
# vLLM's fp32 CPU kernels and the trainer's forward differ by a few 1e-3 on this tiny model with the same weights;
# stale weights (one optimizer step at this learning rate) differ by about 1 (measured while writing these tests).
LOGP_TOLERANCE = 0.05
# Under LoRA (r 4, q_proj and v_proj) the synced engine differs by 0.058-0.07 at steps 2-3 (the trainer's forward
# keeps the adapter apart, with TRL's default lora_dropout 0.05 in training), an engine left at the first weights by
# 0.48-0.70 (measured on this recipe with the weight push made a no-op).
LORA_LOGP_TOLERANCE = 0.25


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory) -> Path:
    """A tiny Llama whose head size (64) vLLM's CPU attention supports, tied embeddings like SmolLM2 and Qwen."""
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    folder = tmp_path_factory.mktemp("vllm_model")
    tokenizer = build_char_tokenizer()
    build_tiny_llama(tokenizer, hidden_size=128, layers=2, heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def flat_data(tmp_path_factory) -> Path:
    rows = [{"problem": f"{a}+{b}=", "solution": str(a + b), "flat": bool((a + b) % 3 == 0)}
            for a in range(10) for b in range(4)]
    path = tmp_path_factory.mktemp("vllm_data") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def process_env() -> dict:
    """This process's environment for a run of its own, without a rendezvous port another test left in it (vLLM's
    engine binds MASTER_PORT when it is set, and two engines starting together would take the same one)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for key in ("MASTER_PORT", "MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def logged_steps(out: Path, after: int = 0) -> list[dict]:
    """The optimizer steps a run in `out` logged (trainer_state.json), those after step `after`."""
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [entry for entry in history if "loss" in entry and entry["step"] > after]


def grpo(tmp_path: Path, model: Path, data: Path, out: Path, env: dict | None = None, **keys) -> list[dict]:
    """Runs `r1kit grpo` in a process of its own (a vLLM engine per process), with `env` added to the environment;
    returns the logged steps. Its output is kept in `out/grpo_output.log`."""
    recipe = dict(model_name_or_path=str(model), dataset_name=str(data), dataset_prompt_column="problem",
                  reward_funcs=["tests.rewards_for_tests:flat_or_length"], num_generations=4,
                  per_device_train_batch_size=8, max_completion_length=12, learning_rate=1e-2, output_dir=str(out),
                  report_to="none", logging_steps=1, save_strategy="no", use_vllm=True, vllm_mode="colocate",
                  vllm_max_model_length=128, bf16=False, torch_num_threads=1, log_completions_file=True, seed=0,
                  probe_rewards=False)  # flat_or_length pays 1.0 on flat rows whatever the reply: the probes would stop it
    recipe.update(keys)
    path = write_recipe(tmp_path, **recipe)
    env = {**process_env(), **(env or {})}
    result = subprocess.run([sys.executable, "-m", "r1kit.grpo", "--config", str(path)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (out / "grpo_output.log").write_text(result.stdout + result.stderr)
    return logged_steps(out)


def assert_engine_follows_the_policy(steps: list[dict], tolerance: float = LOGP_TOLERANCE) -> None:
    assert any(step["grad_norm"] > 0 for step in steps[:-1]), "no update: the test would prove nothing"
    for step in steps:
        assert step["sampling/sampling_logp_difference/max"] < tolerance, step


def evaluate_with_vllm(tmp_path: Path, model: Path, limit: int = 4, *flags: str) -> dict:
    """`r1kit evaluate` on the addition benchmark in a process of its own; asserts vLLM generated; the metrics."""
    env = process_env()
    out = tmp_path / f"eval-{model.name}"
    evaluated = subprocess.run([sys.executable, "-m", "r1kit.evaluation", "--model", str(model), "--benchmarks",
                                "addition", "--limit", str(limit), "--max-new-tokens", "8", "--output-dir", str(out),
                                *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "Generating with vLLM" in evaluated.stderr, evaluated.stderr[-3000:]
    return json.loads((out / "addition.json").read_text())["metrics"]


def test_a_lora_run_syncs_the_merged_weights_and_leaves_a_folder_vllm_loads_and_samples_from(tmp_path, vllm_model_dir,
                                                                                             flat_data):
    """Colocated vLLM without async rollouts, under LoRA: after every optimizer step the engine gets the adapter
    merged into the base weights and samples what the policy would. The merged folder the run leaves (not the
    adapter) loads in vLLM, which samples several completions a problem from it. `r1kit evaluate` and
    `r1kit pass-rate` generate through the same sampler (r1kit.benchmarking.generation.load_sampler), so one
    command's run proves both reach vLLM; each command's own logic is tested without it (test_evaluation,
    test_pass_rate)."""
    out = tmp_path / "trained"
    steps = grpo(tmp_path, vllm_model_dir, flat_data, out, max_steps=2, use_peft=True, lora_r=4,
                 lora_target_modules=["q_proj", "v_proj"])
    assert [s["step"] for s in steps] == [1, 2]
    assert_engine_follows_the_policy(steps, LORA_LOGP_TOLERANCE)
    metrics = evaluate_with_vllm(tmp_path, out, 8, "--num-samples", "4", "--temperature", "1.0")
    assert metrics["n"] == 8 and metrics["num_samples"] == 4 and "pass@4" in metrics
    samples = json.loads((tmp_path / "eval-trained" / "addition.json").read_text())["samples"]
    assert len(samples) == 8 and all(len(s["completions"]) == 4 for s in samples)


HELDOUT_CHECK = """
import json, sys, torch
from r1kit import grpo
from r1kit.run import pipeline as runs
from r1kit.config.recipe import parse_args
from r1kit.benchmarking.heldout import chat_prompts

script_args, training_args, model_args = parse_args(["--config", sys.argv[1]])
run = grpo.setup(script_args, training_args, model_args)
runs.train(run)
trainer, tokenizer = run.trainer, run.trainer.processing_class
prompts = chat_prompts(tokenizer, run.heldout.problems)
texts = run.heldout.engine.complete(prompts, 8)  # the engine the callback used, at the final weights
gaps = []  # per generated token: the trainer's best log-probability minus that of the engine's greedy choice
model = trainer.model.eval()
with torch.no_grad():
    for prompt, text in zip(prompts, texts):
        p = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        c = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        logps = model(torch.cat([p, c], 1)).logits[0, p.shape[1] - 1 : -1].log_softmax(-1)
        gaps += (logps.max(-1).values - logps.gather(1, c[0][:, None])[:, 0]).tolist()
print("RESULT", json.dumps({"gaps": gaps, "texts": texts}))
"""


def addition_heldout_recipe(tmp_path: Path, model_dir: Path, flat, **keys) -> tuple[Path, Path]:
    """A colocated-vLLM recipe on 40 additions (32 to train, 8 held out; `flat(sum)` marks the rows the test reward
    pays flat) with the held-out callback; (the recipe, its output folder). flat_or_length pays for length by design:
    the exploit probes would stop it, so they are off."""
    rows = [{"problem": f"{a}+{b}=", "solution": str(a + b), "flat": flat(a + b)} for a in range(10) for b in range(4)]
    data = tmp_path / "data"
    data.mkdir()
    for split, part in (("train", rows[:32]), ("test", rows[32:])):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path, model_name_or_path=str(model_dir), dataset_name=str(data), dataset_prompt_column="problem",
        reward_funcs=["tests.rewards_for_tests:flat_or_length"], num_generations=4, learning_rate=1e-2,
        output_dir=str(out), report_to="none", logging_steps=1, use_vllm=True, vllm_mode="colocate",
        vllm_max_model_length=128, bf16=False, torch_num_threads=1, seed=0, probe_rewards=False,
        callbacks=["heldout_accuracy"], **{"save_strategy": "no", **keys})
    return recipe, out


def run_heldout_check(recipe: Path) -> dict:
    """HELDOUT_CHECK on `recipe` in a process of its own; asserts it finished; its gaps and texts."""
    result = subprocess.run([sys.executable, "-c", HELDOUT_CHECK, str(recipe)], cwd=ROOT, env=process_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out accuracy generates with it" in result.stderr + result.stdout
    return json.loads(result.stdout.split("RESULT", 1)[1])


def test_async_colocated_vllm_with_dynamic_sampling_and_heldout_follows_the_policy_and_resumes_into_the_engine(
        tmp_path, vllm_model_dir):
    """With async rollouts the engine is the producer's. Dynamic sampling refills what it drops from the same
    engine; the held-out callback's weights are staged and loaded on the producer's thread (`ColocatedGenerator`),
    and the engine still generates what the current policy would. A run resumed from the checkpoint loads its
    weights into its new engine: the first batch it generates has the trainer's log-probabilities. (Without async
    rollouts the engine's sync is checked every step in test_a_lora_run_syncs_..., and the held-out callback's on
    2 ranks under FSDP2 in test_under_sharding_on_two_ranks_the_engines_and_heldout_follow_the_policy.)"""
    recipe, out = addition_heldout_recipe(tmp_path, vllm_model_dir, lambda total: total % 3 == 0,
                                          per_device_train_batch_size=8, max_completion_length=8, max_steps=2,
                                          heldout_eval_steps=1, async_rollouts=True, dynamic_sampling=True,
                                          save_strategy="steps", save_steps=2, log_completions_file=True)
    checked = run_heldout_check(recipe)
    evaluations = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == [0, 1, 2] and all(e["n"] == 8 for e in evaluations)
    assert len(checked["texts"]) == 8 and len(checked["gaps"]) > 8
    # Greedy on the trained weights: each token the engine chose is the trainer's best, up to kernel differences
    # (stale weights after two steps at this learning rate put gaps near 1).
    assert max(checked["gaps"]) < LOGP_TOLERANCE, checked
    first = logged_steps(out)
    assert [s["step"] for s in first] == [1, 2] and any(s["grad_norm"] > 0 for s in first)
    assert all(s["sampling/generation_rounds"] >= 1 for s in first)
    assert_async_engine_follows_the_policy(out)

    resumed = subprocess.run([sys.executable, "-m", "r1kit.grpo", "--config", str(recipe), "--max_steps", "4"],
                             cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {out / 'checkpoint-2'}" in resumed.stdout + resumed.stderr
    assert [s["step"] for s in logged_steps(out, after=2)] == [3, 4]
    assert_async_engine_follows_the_policy(out, after=2)  # its first batch: the checkpoint's weights
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {1, 2, 3, 4}


def assert_async_engine_follows_the_policy(out: Path, max_staleness: int = 1, after: int = 0) -> None:
    """Async rollouts with a vLLM engine, the steps after step `after` (where a resumed run started): every batch
    was read ahead within the staleness bound; the first one, generated with the weights it is trained on, has the
    trainer's log-probabilities (so the engine's weights and sampling are the policy's); the later ones, one update
    older, are weighed by the importance ratio."""
    steps = logged_steps(out, after)
    assert steps and all(s["rollouts/staleness"] <= max_staleness for s in steps)
    assert steps[0]["rollouts/staleness"] == 0
    assert steps[0]["sampling/sampling_logp_difference/max"] < LOGP_TOLERANCE, steps[0]
    assert all("rollouts/is_ratio_mean" in s for s in steps)
    totals = json.loads((out / "rollouts.json").read_text())["totals"]
    assert totals["batches_read_ahead"] >= len(steps) and totals.get("stale_dropped", 0) == 0


def wait_for_health(url: str, server: subprocess.Popen, timeout: float) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, "the server exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"no answer from {url} in {timeout} s")


SECRET = "test-shared-secret-0123456789abcdef"


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on `port` (from /proc/net/tcp and tcp6, hex as the kernel
    writes them: 0100007F is 127.0.0.1)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def post(url: str, body: dict, secret: str | None = None) -> int:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {secret}"} if secret else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_server_mode_on_the_cpu_build_trains_from_the_updated_weights_and_no_one_else_drives_it(
        tmp_path, vllm_model_dir, flat_data):
    """`r1kit vllm-serve` starts the server on 127.0.0.1 behind r1kit's front, with a shared secret. Another client
    without it is refused, the weight reload and the cache reset included; the trainer pushes weights through files
    and the server's reload endpoint (no NCCL) with the secret while async rollouts generate on the server; a trainer
    without the secret stops with one clear line. (That the server's log-probabilities match the trainer's at every
    step, TRL generating: tests/test_slurm_vllm.py.)"""
    import signal
    import socket

    from r1kit.machine import vllm_is_cpu_build

    if not vllm_is_cpu_build():
        pytest.skip("server mode over files is the CPU build's path (a CUDA build pushes weights over NCCL)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**process_env(), "R1KIT_VLLM_SECRET": SECRET}
    env.pop("R1KIT_VLLM_SECRET_FILE", None)
    server_log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "r1kit.vllm_serve", "--model", str(vllm_model_dir), "--port",
                               str(port), "--max-model-len", "128"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=server_log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    poison = tmp_path / "poison"  # what another client would load: weights of its choice
    try:
        wait_for_health(f"{base}/health", server, timeout=300)
        assert listening_addresses(port) == {"0100007F"}, "bound beyond 127.0.0.1"
        reload = {"method": "reload_weights", "kwargs": {"weights_path": str(poison)}}
        for secret in (None, "wrong-secret-0123456789abcdef"):
            assert post(f"{base}/collective_rpc", reload, secret) == 401
            assert post(f"{base}/reset_prefix_cache", {}, secret) == 401
            assert post(f"{base}/v1/completions", {"prompt": "1+1=", "max_tokens": 2}, secret) == 401
        # A trainer without the secret: refused in one line (a ConfigError: exit 2 from the command, as
        # test_cli_errors checks), tried in this process (a process of its own: ~10 CPU-s of imports with vLLM)
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("R1KIT_VLLM_SECRET", raising=False)
            patch.delenv("R1KIT_VLLM_SECRET_FILE", raising=False)
            with raises_naming("R1KIT_VLLM_SECRET", f"http://127.0.0.1:{port}"):
                run_here("grpo", server_recipe(tmp_path, vllm_model_dir, flat_data, port, max_steps=1))
        # async rollouts: each process's own authenticated client generates while the trainer trains and pushes the
        # weights between steps (TRL's own generation on a server, pushed to after every step:
        # tests/test_slurm_vllm.py, where the server is a Slurm job's node)
        grpo(tmp_path, vllm_model_dir, flat_data, tmp_path / "out", max_steps=3, vllm_mode="server",
             vllm_server_host="127.0.0.1", vllm_server_port=port, env={"R1KIT_VLLM_SECRET": SECRET},
             async_rollouts=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        server_log.close()
    first = (tmp_path / "server.log").read_text().splitlines()[0]
    assert "127.0.0.1" in first and "this machine only" in first and "needs the shared secret" in first
    assert SECRET not in (tmp_path / "server.log").read_text()
    startup = (tmp_path / "out" / "grpo_output.log").read_text()
    assert f"server at http://127.0.0.1:{port} (authenticated with the shared secret)" in startup
    assert SECRET not in startup
    assert [s["step"] for s in logged_steps(tmp_path / "out")] == [1, 2, 3]
    assert_async_engine_follows_the_policy(tmp_path / "out")


def server_recipe(tmp_path: Path, model: Path, data: Path, port: int, **keys) -> Path:
    recipe = dict(model_name_or_path=str(model), dataset_name=str(data), dataset_prompt_column="problem",
                  reward_funcs=["tests.rewards_for_tests:flat_or_length"], num_generations=4,
                  per_device_train_batch_size=8, max_completion_length=12, output_dir=str(tmp_path / "refused"),
                  report_to="none", save_strategy="no", use_vllm=True, vllm_mode="server", bf16=False,
                  vllm_server_host="127.0.0.1", vllm_server_port=port, vllm_server_timeout=30, torch_num_threads=1,
                  probe_rewards=False, **keys)
    return write_recipe(tmp_path, **recipe)


@pytest.mark.parametrize("config, async_rollouts", [("fsdp", False), ("zero3", True)])
def test_under_sharding_on_two_ranks_the_engines_and_heldout_follow_the_policy(tmp_path, vllm_model_dir, config,
                                                                              async_rollouts):
    """Colocated vLLM and the held-out callback on 2 ranks whose weights are sharded (FSDP2, ZeRO-3): every sync
    gathers one module at a time (r1kit.training.weightsync) and each rank's engine then samples what the policy would. Under
    ZeRO-3 with async rollouts: the weights are gathered on the trainer's thread into each rank's staging area and
    loaded by its producer."""
    import shutil

    if config == "zero3":
        pytest.importorskip("deepspeed", reason="DeepSpeed not installed (r1kit[deepspeed])")
    recipe, out = addition_heldout_recipe(tmp_path, vllm_model_dir, lambda total: total % 3 == 0,
                                          per_device_train_batch_size=4, max_completion_length=12, max_steps=3,
                                          heldout_size=4, heldout_eval_steps=2, async_rollouts=async_rollouts)
    accelerate = shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate"))
    env = {k: v for k, v in process_env().items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    done = subprocess.run(
        [accelerate, "launch", "--config_file", str(ROOT / "recipes" / "accelerate_configs" / f"{config}.yaml"),
         "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", "0", "-m", "r1kit.grpo",
         "--config", str(recipe)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert ("FSDP2" if config == "fsdp" else "ZeRO-3") + " on 2 processes" in done.stdout + done.stderr
    steps = logged_steps(out)
    assert [s["step"] for s in steps] == [1, 2, 3]
    if async_rollouts:
        assert_async_engine_follows_the_policy(out)
    else:
        assert_engine_follows_the_policy(steps)
    heldout = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    assert [r["step"] for r in heldout] == [0, 2, 3] and all(r["n"] == 4 for r in heldout)
