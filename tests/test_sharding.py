"""Sharded training, launched as users launch it: `accelerate launch --config_file` the shipped FSDP2, ZeRO-3 and
ZeRO-2 configs, on 2 CPU ranks (gloo; FSDP2 through accelerate's own path, DeepSpeed through its CPU accelerator).
Sharding is asserted as measured: each rank's parameter and optimizer-state bytes (OUTPUT_DIR/sharding.json), the
loss and gradient norm of the first steps against a DDP run's, a checkpoint saved sharded and resumed, LoRA, and the
final model saved whole for plain transformers. The checks that need no launch (`r1kit.launching.sharding`) come first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from r1kit.errors import ConfigError
from r1kit.launching import sharding
from tests.helpers import raises_naming, tiny_recipe, write_recipe

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "recipes" / "accelerate_configs"
TOLERANCE = {"rel": 1e-5, "abs": 1e-7}  # fp32, 2 ranks: only the reduction order differs
deepspeed = pytest.mark.skipif(not sharding.installed("deepspeed"), reason="DeepSpeed not installed (r1kit[deepspeed])")


# --- what the launch asked for, checked before the model loads ----------------------------------------------------------
def args(**fields):
    base = dict(fsdp=None, fsdp_config=None, deepspeed=None, use_cpu=False, ddp_backend=None)
    return SimpleNamespace(**{**base, **fields})


LAUNCHES = {  # what `accelerate launch --config_file X` puts in each process's environment (measured)
    "fsdp": {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_OFFLOAD_PARAMS": "false"},
    "fsdp1": {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"},
    "zero3": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
              "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none"},
    "zero2": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
}


def launched(monkeypatch, name: str | None, world: int, gpu: bool = False) -> None:
    for key in ("ACCELERATE_USE_FSDP", "FSDP_VERSION", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in LAUNCHES.get(name, {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setattr(sharding, "has_cuda", lambda: gpu)
    monkeypatch.setattr(sharding, "launching_command", lambda: None)  # (pytest's own launcher says nothing)


def test_the_launch_is_read_from_accelerates_environment_and_the_recipe(monkeypatch):
    launched(monkeypatch, "fsdp", 2)
    assert sharding.requested(args()).name == "FSDP2" and sharding.requested(args()).shards_parameters
    launched(monkeypatch, "zero2", 8)
    launch = sharding.requested(args())
    assert launch.name == "DeepSpeed ZeRO-2" and not launch.shards_parameters and launch.world == 8
    launched(monkeypatch, None, 2)
    assert sharding.requested(args(deepspeed={"zero_optimization": {"stage": 3}})).name == "DeepSpeed ZeRO-3"
    assert sharding.requested(args(fsdp="full_shard", fsdp_config={})).name == "FSDP2"  # transformers' default
    assert sharding.requested(args(fsdp="full_shard", fsdp_config={"fsdp_version": 1})).name == "FSDP1"
    assert sharding.requested(args()).name == "DDP"


def test_on_ranks_without_a_gpu_the_settings_accelerate_needs_are_set_and_said(monkeypatch):
    launched(monkeypatch, None, 2)
    ddp = args()
    assert "use_cpu: true" in sharding.apply_launch_defaults(ddp)[0] and ddp.use_cpu  # no group without it
    launched(monkeypatch, "fsdp", 2)
    fsdp = args(use_cpu=True)
    assert sharding.apply_launch_defaults(fsdp) == [] and fsdp.use_cpu
    launched(monkeypatch, "zero3", 2)
    zero = args(use_cpu=True)
    said = sharding.apply_launch_defaults(zero)
    assert not zero.use_cpu and zero.ddp_backend == "gloo" and len(said) == 2  # accelerate skips DeepSpeed with use_cpu
    launched(monkeypatch, "zero3", 2, gpu=True)
    on_gpus = args(use_cpu=False)
    assert sharding.apply_launch_defaults(on_gpus) == [] and on_gpus.ddp_backend is None  # GPUs: as launched
    launched(monkeypatch, "fsdp", 1)
    assert sharding.apply_launch_defaults(args()) == []  # one process: nothing to form


def test_what_the_launch_cannot_give_is_refused_in_one_line(monkeypatch):
    launched(monkeypatch, "fsdp1", 2)
    with raises_naming("FSDP1", "fsdp_version"):
        sharding.check_launch(args())
    launched(monkeypatch, "fsdp1", 2, gpu=True)
    sharding.check_launch(args())  # FSDP1 on GPUs is accelerate's to run
    with raises_naming("async_rollouts", "FSDP1", "fsdp_version"):  # but not with a generator to gather weights for
        sharding.check_launch(args(async_rollouts=True))
    for name in ("fsdp", "zero3"):
        launched(monkeypatch, name, 1)
        with pytest.raises(ConfigError, match="on one process shards nothing"):
            sharding.check_launch(args())
    launched(monkeypatch, "zero2", 1)
    sharding.check_launch(args())  # ZeRO-2 shards no parameters: one process is a legal (if pointless) launch
    launched(monkeypatch, "zero3", 2)
    monkeypatch.setattr(sharding, "installed", lambda module: module != "deepspeed")
    with raises_naming("DeepSpeed"):
        sharding.check_launch(args())


# --- what `accelerate launch` asked for, against what the process got ------------------------------------------------
def accelerate_command(*flags: str, cwd: Path = REPO) -> tuple[list[str], str]:
    """A worker's parent as psutil reports it: `accelerate launch FLAGS -m r1kit.grpo --config r.yaml`, its folder."""
    return ([sys.executable, str(Path(sys.executable).with_name("accelerate")), "launch", *flags, "-m", "r1kit.grpo",
             "--config", "r.yaml"], str(cwd))


ONE, TWO = sharding.Launch(None, 0, 1, False), sharding.Launch(None, 0, 2, False)
FSDP = ("--config_file", "recipes/accelerate_configs/fsdp.yaml")


def test_an_accelerate_launch_that_started_less_than_its_command_asked_for_is_said(monkeypatch, tmp_path):
    import accelerate.commands.config

    monkeypatch.setattr(accelerate.commands.config, "default_config_file", str(tmp_path / "none.yaml"))  # no default
    # accelerate's simple launcher: one process, whatever --num_processes said (--cpu; no --multi_gpu and no GPU)
    said = sharding.shortfall(ONE, accelerate_command(*FSDP, "--num_processes", "2", "--cpu"))
    assert all(w in said for w in ("FSDP on 2 processes", "--cpu", "started one process", "drop --cpu")), said
    said = sharding.shortfall(ONE, accelerate_command("--num_processes", "2"))
    assert "DDP on 2 processes" in said and "--multi_gpu --num_processes 2" in said and "--world-size 2" in said
    multi_cpu = tmp_path / "cpu.yaml"  # what `accelerate config` writes for several CPU processes: mpirun's
    multi_cpu.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nmixed_precision: 'no'\n"
                         "num_machines: 1\nnum_processes: 2\nuse_cpu: true\n")
    said = sharding.shortfall(ONE, accelerate_command("--config_file", "cpu.yaml", cwd=tmp_path))  # (relative)
    assert "num_processes: 2" in said and "MULTI_CPU" in said and "mpirun" in said
    # WORLD_SIZE=2 exported by hand: the simple launcher passes it on to its one process, which would wait for a
    # second rank forever; it is what was started, one process, that counts
    said = sharding.shortfall(TWO, accelerate_command("--cpu", "--num_processes", "2"))
    assert all(w in said for w in ("DDP on 2 processes", "started one process", "WORLD_SIZE=2 came from the "
                                   "environment", "drop --cpu")), said
    # a flag silently wins over the config's sharding
    said = sharding.shortfall(TWO, accelerate_command(*FSDP, "--multi_gpu", "--num_processes", "2"))
    assert "--multi_gpu overrides" in said and "started DDP on 2 processes" in said and "drop --multi_gpu" in said
    # as asked: nothing said
    assert sharding.shortfall(sharding.Launch("fsdp", 2, 2, False), accelerate_command(*FSDP, "--num_processes", "2")) is None
    assert sharding.shortfall(ONE, accelerate_command("--cpu")) is None
    assert sharding.shortfall(TWO, accelerate_command("--multi_gpu", "--num_processes", "2")) is None
    assert sharding.shortfall(TWO, (["torchrun", "--nproc_per_node", "2", "-m", "r1kit"], "/")) is None
    # `r1kit launch accelerate launch` starts the workers itself; a flag given over accelerate's default config wins
    assert sharding.accelerate_arguments([sys.executable, "-m", "r1kit", "launch", "accelerate", "launch", "--cpu",
                                          "x.py"]) == ["--cpu", "x.py"]
    (tmp_path / "default.yaml").write_text(multi_cpu.read_text().replace("MULTI_CPU", "FSDP"))
    monkeypatch.setattr(accelerate.commands.config, "default_config_file", str(tmp_path / "default.yaml"))
    assert sharding.shortfall(TWO, accelerate_command("--multi_gpu")) is None


def test_the_shortfall_is_refused_before_the_other_launch_checks(monkeypatch):
    launched(monkeypatch, None, 1)
    monkeypatch.setattr(sharding, "launching_command", lambda: accelerate_command(*FSDP, "--num_processes", "2", "--cpu"))
    with raises_naming("FSDP", "--cpu", "--num_processes"):
        sharding.check_launch(args())


# --- launched for real ------------------------------------------------------------------------------------------------
def accelerate_launch(config: str, recipe: Path, *flags: str, command: str = "grpo") -> tuple[int, str]:
    """`accelerate launch --config_file recipes/accelerate_configs/<config> --num_processes 2 -m r1kit.<command>`, as
    users launch (fp32: no bf16 on CPU); (exit code, log)."""
    accelerate = shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    for key in list(env):
        if key.startswith(("ACCELERATE_", "FSDP_")) or key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
            env.pop(key)
    done = subprocess.run(
        [accelerate, "launch", "--config_file", str(CONFIGS / config), "--num_processes", "2", "--mixed_precision",
         "no", "--main_process_port", "0", "-m", f"r1kit.{command}", "--config", str(recipe), *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


# Launches that trained as one process, or unsharded, without a word (measured before r1kit refused), one per way a
# worker is started: by accelerate's simple launcher (the worker's parent is `accelerate launch`; `--num_processes 2`
# without --multi_gpu starts the same way) and by its multi-process launcher inside `r1kit launch`. Which flags ask
# for what: test_an_accelerate_launch_that_started_less_than_its_command_asked_for_is_said.
LESS_THAN_ASKED = {
    "cpu over fsdp.yaml": (["accelerate", "launch", *FSDP, "--num_processes", "2", "--num_machines", "1", "--cpu"],
                           ("FSDP on 2 processes", "--cpu", "started one process")),
    "multi_gpu over fsdp.yaml": (["r1kit", "launch", "accelerate", "launch", *FSDP, "--multi_gpu", "--num_processes", "2",
                                  "--main_process_port", "0"], ("--multi_gpu overrides", "started DDP on 2 processes")),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(LESS_THAN_ASKED))
def test_a_launch_that_starts_less_than_it_asked_for_is_refused_before_the_model_loads(tmp_path, case):
    launcher, named = LESS_THAN_ASKED[case]
    recipe = write_recipe(tmp_path, model_name_or_path="r1kit:demo", dataset_name="r1kit:addition",
                          dataset_prompt_column="prompt", reward_funcs=["accuracy"], num_generations=4,
                          per_device_train_batch_size=4, max_completion_length=8, max_steps=1, report_to="none",
                          output_dir=str(tmp_path / "out"), probe_rewards=False)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ACCELERATE_", "FSDP_")) and key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    command = ([sys.executable, "-m", "r1kit", *launcher[1:]] if launcher[0] == "r1kit"
               else [shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate")), *launcher[1:]])
    done = subprocess.run([*command, "-m", "r1kit.grpo", "--config", str(recipe)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    log = done.stdout + done.stderr
    errors = {line for line in log.splitlines() if line.startswith("r1kit: error:")}  # (accelerate repeats it)
    assert done.returncode != 0 and len(errors) == 1, log[-4000:]
    error = errors.pop()
    assert all(word in error for word in named), error
    assert "  model    " not in log and not (tmp_path / "out" / "trainer_state.json").exists()  # no start-up block
    if launcher[0] == "r1kit":
        assert done.returncode == 2 and "Traceback" not in log  # r1kit's exit code for a configuration error


def history(out: Path) -> dict[int, dict]:
    state = json.loads((out / "trainer_state.json").read_text())
    return {e["step"]: e for e in state["log_history"] if "loss" in e}


def holdings(out: Path) -> dict:
    return json.loads((out / "sharding.json").read_text())


def grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, config: str, **overrides) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp(config.split(".")[0])
    out = folder / "out"
    recipe = tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=1, per_device_train_batch_size=4,
                         num_generations=4, **overrides)
    code, log = accelerate_launch(config, write_recipe(folder, **recipe))
    assert code == 0, log[-4000:]
    return out, log


@pytest.fixture(scope="module")
def ddp(tmp_path_factory, tiny_model_dir, math_jsonl):
    return grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, "ddp.yaml")[0]


def assert_trains_as_ddp(out: Path, ddp: Path) -> None:
    ours, reference = history(out), history(ddp)
    assert sorted(ours) == sorted(reference) == [1, 2]
    for step in reference:
        for key in ("loss", "grad_norm", "reward"):
            assert ours[step][key] == pytest.approx(reference[step][key], **TOLERANCE), (step, key)


def assert_final_model_is_whole(out: Path, ddp: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    ours, reference = (AutoModelForCausalLM.from_pretrained(p).state_dict() for p in (out, ddp))
    assert ours.keys() == reference.keys()
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_ddp_trains_two_ranks_together_writes_once_and_holds_everything_on_every_rank(ddp):
    record = holdings(ddp)
    assert record["strategy"] == "DDP" and record["world_size"] == 2
    whole = record["ranks"][0]["whole_parameter_bytes"]
    assert all(r["parameter_bytes"] == whole and r["optimizer_state_bytes"] == 2 * whole for r in record["ranks"])
    assert json.loads((ddp / "r1kit_run.json").read_text())["world_size"] == 2
    state = json.loads((ddp / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert sorted(p.name for p in ddp.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert all((ddp / f"checkpoint-{step}" / "model.safetensors").is_file() for step in (1, 2))
    # 2 ranks x 4 completions a step: each rank scores its own; only the main process writes them down (its 4 a step)
    assert next(e for e in state["log_history"] if e.get("step") == 1 and "num_tokens" in e)["num_tokens"] > 0
    assert len((ddp / "completions.jsonl").read_text().splitlines()) == 2 * 4


@pytest.mark.slow
def test_fsdp2_shards_parameters_and_optimizer_trains_as_ddp_and_resumes_from_its_sharded_checkpoint(
        tmp_path_factory, tiny_model_dir, math_jsonl, ddp):
    out, log = grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, "fsdp.yaml")
    assert "sharding FSDP2 on 2 processes" in log and "per rank" in log and "use_cpu: true" in log
    record = holdings(out)
    assert record["distributed_type"] == "FSDP"
    whole = record["ranks"][0]["whole_parameter_bytes"]
    assert sum(r["parameter_bytes"] for r in record["ranks"]) == whole  # each rank its shard, together the model
    assert all(0.4 * whole < r["parameter_bytes"] < 0.6 * whole for r in record["ranks"])
    assert sum(r["optimizer_state_bytes"] for r in record["ranks"]) == 2 * whole  # Adam's two moments, sharded
    assert_trains_as_ddp(out, ddp)
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / "pytorch_model_fsdp_0" / ".metadata").is_file() and not (checkpoint / "model.safetensors").exists()
    assert_final_model_is_whole(out, ddp)

    code, log = accelerate_launch("fsdp.yaml", out.parent / "recipe.yaml", "--max_steps", "3")  # the same command
    assert code == 0, log[-4000:]
    assert f"continues {checkpoint}" in log and "Skipping checkpoint" not in log
    assert sorted(history(out)) == [1, 2, 3]


@pytest.mark.slow
@deepspeed
def test_zero3_shards_parameters_and_optimizer_trains_as_ddp_and_resumes(tmp_path_factory, tiny_model_dir, math_jsonl,
                                                                        ddp):
    out, log = grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, "zero3.yaml")
    assert "sharding DeepSpeed ZeRO-3 on 2 processes" in log and "ddp_backend: gloo" in log
    # its shared-memory all-reduce (inference only) is not compiled: ~20 s of g++ at a machine's first launch
    assert "deepspeed_shm_comm" not in log
    record = holdings(out)
    assert record["distributed_type"] == "DEEPSPEED"
    whole = record["ranks"][0]["whole_parameter_bytes"]
    assert all(0.4 * whole < r["parameter_bytes"] < 0.6 * whole for r in record["ranks"])  # ZeRO-3's partitions
    assert all(0.8 * whole < r["optimizer_state_bytes"] < 1.2 * whole for r in record["ranks"])  # half of 2 x whole
    assert_trains_as_ddp(out, ddp)
    assert_final_model_is_whole(out, ddp)
    code, log = accelerate_launch("zero3.yaml", out.parent / "recipe.yaml", "--max_steps", "3")
    assert code == 0, log[-4000:]
    assert f"continues {out / 'checkpoint-2'}" in log and sorted(history(out)) == [1, 2, 3]


@pytest.mark.slow
@deepspeed
def test_zero2_shards_the_optimizer_state_not_the_parameters(tmp_path_factory, tiny_model_dir, math_jsonl, ddp):
    out, _ = grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, "zero2.yaml")
    record = holdings(out)
    whole = record["ranks"][0]["whole_parameter_bytes"]
    assert all(r["parameter_bytes"] == whole for r in record["ranks"])
    assert all(0.8 * whole < r["optimizer_state_bytes"] < 1.2 * whole for r in record["ranks"])
    assert_trains_as_ddp(out, ddp)


def world_size_run(tmp_path_factory, tiny_model_dir, math_jsonl, **overrides) -> Path:
    """`r1kit grpo --world-size 2 --config RECIPE`: the recipe's own launch (no accelerate config); its output."""
    folder = tmp_path_factory.mktemp("world_size")
    out = folder / "out"
    recipe = write_recipe(folder, **tiny_recipe(tiny_model_dir, math_jsonl, out, max_steps=2, save_steps=100,
                                                per_device_train_batch_size=4, num_generations=4, **overrides))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "r1kit", "grpo", "--world-size", "2", "--config", str(recipe)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("launch", ["the recipe's fsdp", pytest.param("zero3.yaml", marks=deepspeed)])
def test_lora_under_sharding_saves_a_merged_model_equal_to_base_plus_adapter(tmp_path_factory, tiny_model_dir,
                                                                          math_jsonl, launch):
    """Under ZeRO-3 as `accelerate launch --config_file zero3.yaml` starts it, and under FSDP2 as a recipe's own
    `fsdp:` asks for it (transformers' way, no accelerate config: it was refused once the model had loaded, as FSDP1
    ("set fsdp_version: 2 in the accelerate config") though the recipe said version 2). Every rank joins the gather,
    only the main process writes: a plain model at the top, the adapter beside it (under DDP a rank writes as one
    process does: tests/test_outputs.py)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lora = dict(use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"])
    if launch == "zero3.yaml":
        out, _ = grpo_run(tmp_path_factory, tiny_model_dir, math_jsonl, launch, **lora)
    else:
        out = world_size_run(tmp_path_factory, tiny_model_dir, math_jsonl, fsdp="full_shard",
                             fsdp_config={"version": 2}, **lora)
        record = holdings(out)
        assert record["strategy"] == "FSDP2" and record["distributed_type"] == "FSDP"
        assert sum(r["parameter_bytes"] for r in record["ranks"]) == record["ranks"][0]["whole_parameter_bytes"]
    assert not (out / "adapter_config.json").exists() and (out / "adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(out)
    rebuilt = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out / "adapter")
    ids = torch.randint(3, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, rebuilt.merge_and_unload()(ids).logits, rtol=1e-5, atol=1e-5)
        assert (merged(ids).logits - AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits).abs().max() > 0
    assert holdings(out)["ranks"][0]["trainable_parameter_bytes"] < holdings(out)["ranks"][0]["parameter_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["fsdp.yaml", pytest.param("zero3.yaml", marks=deepspeed)])
def test_sft_trains_sharded_and_saves_the_model_whole(tmp_path, tiny_model_dir, config):
    from transformers import AutoModelForCausalLM

    data = tmp_path / "distill.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                                     {"role": "assistant", "content": f"<answer>{2 * i}</answer>"}]})
                            + "\n" for i in range(32)))
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, model_name_or_path=str(tiny_model_dir), dataset_name=str(data), max_length=64,
                          per_device_train_batch_size=4, max_steps=2, save_steps=1, logging_steps=1,
                          learning_rate=1.0e-3, report_to="none", bf16=False, output_dir=str(out), seed=3)
    code, log = accelerate_launch(config, recipe, command="sft")
    assert code == 0, log[-4000:]
    record = holdings(out)
    whole = record["ranks"][0]["whole_parameter_bytes"]
    assert all(r["parameter_bytes"] < 0.6 * whole for r in record["ranks"])
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() * 4 == whole
