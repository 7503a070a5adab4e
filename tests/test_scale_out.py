"""The documented scale-out path on 2 CPU ranks, as a user takes it (docs/scaling-out.md): the shipped demo recipes,
not fixtures, run to their end under DDP, FSDP2 and ZeRO-3 (with held-out evaluation, the measured training pass,
async rollouts, tools and dynamic sampling), and a hung rank ends the run within its bound, exit 75, each rank
saying what it was doing.

Each launch takes both cores for ~40 s: one recipe variant per strategy, not every pair."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r1kit.console import EXIT_COMPLETED, EXIT_INTERRUPTED
from tests.helpers import descendants, tiny_recipe, write_recipe
from tests.test_launch import SLOW, STARTUP_SECONDS, Launch, workers_of

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "recipes" / "demo"
CONFIGS = REPO / "recipes" / "accelerate_configs"
SHORT = ("--max_steps", "3", "--save_steps", "2", "--heldout_size", "16", "--heldout_eval_steps", "2")


def documented_launches() -> dict[str, list[str]]:
    """The CPU launch docs/scaling-out.md gives for each strategy, as written (the words after `r1kit`), by
    strategy: ddp, zero2, zero3, fsdp2."""
    import shlex

    text = (REPO / "docs" / "scaling-out.md").read_text()
    block = text.split("tests/test_scale_out.py runs them) -->\n```bash\n", 1)[1].split("```", 1)[0]
    launches = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        config = next((w for w in words if w.startswith("recipes/accelerate_configs/")), "ddp")
        launches[{"ddp": "ddp", "zero2.yaml": "zero2", "zero3.yaml": "zero3", "fsdp.yaml": "fsdp2"}[
            Path(config).name]] = words[1:]
    return launches


def test_the_docs_give_one_cpu_launch_per_strategy_each_of_the_shipped_demo():
    launches = documented_launches()
    assert sorted(launches) == ["ddp", "fsdp2", "zero2", "zero3"]
    for words in launches.values():
        assert words[words.index("--config") + 1] == "recipes/demo/grpo.yaml"
        for word in words:
            assert not word.startswith("recipes/") or (REPO / word).exists(), word


def launch_of(strategy: str, recipe: str) -> tuple[str, ...]:
    """The documented launch for `strategy`, as written, with its recipe swapped for `recipe` (a shipped demo)."""
    words = documented_launches()[strategy]
    words[words.index("--config") + 1] = str(DEMO / recipe)
    return tuple(str(REPO / w) if w.startswith("recipes/accelerate_configs/") else w for w in words)


def logged_steps(out: Path) -> list[int]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [entry["step"] for entry in history if "loss" in entry]


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "strategy", "extra"), [
    ("grpo.yaml", "ddp", ()),  # the demo: held-out evaluation, the measured pass (bucketed stands down: DDP's buffers)
    ("grpo.yaml", "fsdp2", ()),  # held-out evaluation on sharded weights: every rank generates a share
    ("grpo.yaml", "zero3", ("--async_rollouts", "true")),  # ZeRO-3, and the async producer's own copy beside it
    ("grpo_dynamic_sampling.yaml", "zero2", ()),  # dynamic sampling's rounds, agreed, under ZeRO-2
    ("grpo_tools.yaml", "fsdp2", ("--save_strategy", "steps")),  # (the tools demo saves nothing by itself)
], ids=["demo-ddp", "demo-fsdp2", "demo-async-zero3", "dynamic-sampling-zero2", "tools-fsdp2"])
def test_a_shipped_demo_recipe_runs_to_its_end_on_two_ranks(tmp_path, recipe, strategy, extra):
    out = tmp_path / "out"
    launch = Launch(*launch_of(strategy, recipe), *SHORT, *extra, "--output_dir", str(out),
                    "--stall_timeout", "600")  # a hang fails the test in minutes, not ddp_timeout's 30
    code = launch.finish(STARTUP_SECONDS + 300)
    assert code == EXIT_COMPLETED, launch.log[-4000:]
    assert "Traceback" not in launch.log and "r1kit: rank" not in launch.log, launch.log[-4000:]
    assert logged_steps(out) == [1, 2, 3]
    assert json.loads((out / "r1kit_run.json").read_text())["status"] == "completed"
    # The measured pass's state travels with the checkpoint, the same for every rank (written once)
    checkpoint = max(out.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert "sets" in json.loads((checkpoint / "r1kit_training_pass.json").read_text())
    if strategy in ("fsdp2", "zero3"):  # sharded: one process cannot take it on, even told to take the recipe's changes
        from r1kit.config.recipe import GRPO_TYPES, parse_args
        from r1kit.grpo import pipeline
        from tests.helpers import raises_naming

        engine = {"fsdp2": "FSDP", "zero3": "DeepSpeed"}[strategy]
        with raises_naming(f"sharded by {engine} over 2 rank(s)", "resume: never"):
            pipeline(*parse_args(["--config", str(DEMO / recipe), *SHORT, "--max_steps", "5", "--output_dir", str(out),
                                  "--resume_changes", "recipe"], None, GRPO_TYPES))
    if recipe != "grpo_tools.yaml":  # (the tools demo measures no held-out accuracy)
        heldout = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
        assert [row["step"] for row in heldout] == [0, 2, 3] and all(row["n"] == 16 for row in heldout)


def hanging_recipe(tmp_path: Path, model: Path, data: Path, **overrides) -> tuple[Path, Path]:
    out = tmp_path / "out"
    fields = tiny_recipe(model, data, out, max_steps=6, save_steps=1, use_cpu=True, per_device_train_batch_size=4,
                         num_generations=4, reward_funcs=["accuracy", "tests.rewards_for_tests:"
                                                          "hangs_on_rank_1_from_its_second_batch"], **overrides)
    return out, write_recipe(tmp_path, **fields)


def assert_both_ranks_stopped_unsaved(code: int, log: str, out: Path, why: str) -> None:
    assert code == EXIT_INTERRUPTED, log[-4000:]
    said = {match.group(1): match.group(0) for match in re.finditer(r"r1kit: rank (\d): .*", log)}
    assert sorted(said) == ["0", "1"], log[-4000:]
    assert all("it was in " in line and "(exit code 75)" in line for line in said.values()), said
    # rank 1 names where it hangs (the reward's call); rank 0 the gather it waits in for rank 1, whether its own bound
    # passed first or rank 1 ended first (its collective then fails: the peer is gone)
    assert why in said["1"] and "called from checked (integrity/rewardtap.py" in said["1"], said
    assert (why in said["0"] or "another rank stopped" in said["0"]) and "all_gather" in said["0"], said
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "interrupted" and record["unsaved"] is True
    # The last checkpoint is the step before the hang, whole: the same command resumes from it
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert (out / "checkpoint-1" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_rank_hung_in_its_step_ends_the_run_after_stall_timeout_with_exit_75(tmp_path, tiny_model_dir,
                                                                                math_jsonl):
    out, recipe = hanging_recipe(tmp_path, tiny_model_dir, math_jsonl, stall_timeout=45)
    launch = Launch("grpo", "--world-size", "2", "--config", str(recipe))
    assert_both_ranks_stopped_unsaved(launch.finish(STARTUP_SECONDS + 120), launch.log, out,
                                      "step 2 did not end within stall_timeout (45 s)")


@pytest.mark.slow
def test_sigterm_wins_over_a_hung_step_within_stop_grace_seconds(tmp_path, tiny_model_dir, math_jsonl):
    """Slurm's signal comes minutes before its kill: a step that cannot end (a rank hung) must not eat them all."""
    out, recipe = hanging_recipe(tmp_path, tiny_model_dir, math_jsonl, stop_grace_seconds=5)
    launch = Launch("grpo", "--world-size", "2", "--config", str(recipe))
    launch.wait_for("{'loss'", STARTUP_SECONDS)  # step 1 logged: step 2 hangs on rank 1
    launch.signal_all(signal.SIGTERM)
    assert_both_ranks_stopped_unsaved(launch.finish(120), launch.log, out,
                                      "a stop signal (SIGTERM) came and the step did not end and save within "
                                      "stop_grace_seconds (5 s)")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie left to an init that does not reap it has ended)."""
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


@pytest.mark.slow
def test_workers_stop_when_their_launch_is_killed(tmp_path, tiny_model_dir, math_jsonl):
    """`kill -9` of `r1kit launch`'s process group: torch's agent started each worker in a session of its own, and they
    trained on to the end (recording `completed`) into a folder a rerun would race them for."""
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=200, save_steps=1000,
                                                  use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                                                  reward_funcs=SLOW))
    log = tmp_path / "launch.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MASTER_PORT", None)
    with log.open("w") as sink:
        launch = subprocess.Popen([sys.executable, "-m", "r1kit", "launch", "torchrun", "--standalone",
                                   "--nproc_per_node", "2", "-m", "r1kit", "grpo", "--config", str(recipe)],
                                  cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while "{'loss'" not in log.read_text() and time.monotonic() < deadline and launch.poll() is None:
            time.sleep(0.5)
        assert "{'loss'" in log.read_text(), log.read_text()[-4000:]
        workers = workers_of(launch.pid)
        assert sorted(workers) == [0, 1], workers
        os.killpg(launch.pid, signal.SIGKILL)  # the launch's group: the launcher, not the workers' own sessions
        launch.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in workers.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in workers.values()), log.read_text()[-4000:]
    finally:
        for pid in descendants(launch.pid) | {launch.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    said = log.read_text()
    assert "its launcher (pid" in said and "is gone: stopping now" in said, said[-4000:]
    record = json.loads((out / "r1kit_run.json").read_text())
    assert record["status"] == "interrupted" and record["unsaved"] is True
