"""Pre-flight: everything a recipe can be checked for before any weights load, in one order, for the run and
`--dry-run` alike, each failure one line that says what to change.

Each stage owns the checks of its own inputs: the data (`data.check_sources`), the model (`modeling.check_source`,
`check_attn_implementation`, `check_quantisation`), benchmark names (`benchmarks.check_names`), reward and callback
names (`rewards.check_reward_names`, `callbacks.check_names`), the resume setting (`checkpoints.check_resume`), the
code sandbox (`rewards.code.check_code_execution`, `rewards.gym.check_gym_scoring`) and Hub pushes (`hub`). A rule
on one dataclass's own fields is that dataclass's (`r1kit.config.schema`). This module calls them in order and adds
what is left: rules that span two of a recipe's objects, and the machine's side (vLLM, DeepSpeed, the output folder,
`report_to` packages, published revisions).

    check_grpo_recipe / check_sft_recipe / check_pass_rate_recipe    everything before loading, per command
    check_loaded_dataset                                             once the data is read, before the model loads
"""

from __future__ import annotations

import socket
import time
import warnings
from typing import Any
from urllib.parse import urlparse

from r1kit.benchmarking import benchmarks
from r1kit.benchmarking.callbacks import callback_names, check_hub_revision
from r1kit.benchmarking.callbacks import check_names as check_callback_names
from r1kit.config.schema import (
    REPORT_TO_PACKAGES,
    DataFields,
    GRPOConfig,
    GRPOScriptArguments,
    ModelConfig,
    PassRateArguments,
    RunFields,
    SFTConfig,
    SFTScriptArguments,
)
from r1kit.errors import ConfigError, ConfigWarning
from r1kit.hub import check_hub_push
from r1kit.launching.sharding import check_launch
from r1kit.loading import data, modeling
from r1kit.machine import has_cuda, installed, vllm_is_cpu_build
from r1kit.records import check_output_dir
from r1kit.rewards import check_reward_names, resolve_import_path
from r1kit.rewards.code import check_code_execution, check_code_rows
from r1kit.rewards.gym import check_gym_scoring
from r1kit.state import checkpoints


# --------------------------------------------------------------------------------------------------------------------
# Per command: everything before loading
# --------------------------------------------------------------------------------------------------------------------
def check_grpo_recipe(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig,
                      dry_run: bool = False) -> None:
    """Everything a GRPO recipe can be checked for without weights: its rules across objects and registries, the
    code sandbox, the inputs it points at (data, model, benchmarks, the output folder) and, for a real run on this
    machine, vLLM, DeepSpeed, quantisation and the Hub revisions it would overwrite. Raises `ConfigError`."""
    check_rules(script_args, training_args, model_args)
    if not dry_run:  # the machine's side: a dry run may check a recipe away from the machine it will run on
        check_machine(training_args, model_args)
        check_hub_revision(training_args)
    check_inputs(script_args, training_args, model_args, create_output_dir=not dry_run)


def check_sft_recipe(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig, dry_run: bool = False) -> None:
    """What an `r1kit sft` recipe is checked for before anything loads (`r1kit:scratch` is a model too)."""
    check_callback_names(training_args.callbacks, allowed=("push_to_hub_revision", "evaluate_benchmarks"))
    checkpoints.check_resume(training_args.resume)
    check_inputs(script_args, training_args, model_args, create_output_dir=not dry_run,
                 builtin_models=("scratch", *modeling.BUILTIN_MODELS))
    if script_args.publish_to:
        check_output_dir(script_args.publish_to, create=False, field="publish_to")
    if not dry_run:  # SFT generates nothing: no vLLM to check
        modeling.check_quantisation(model_args)
        check_deepspeed(training_args)
        check_hub_revision(training_args)


def check_pass_rate_recipe(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig,
                           filter_args: PassRateArguments, dry_run: bool = False) -> None:
    """What an `r1kit pass-rate` recipe is checked for before anything loads."""
    check_rules(script_args, training_args, model_args)
    check_inputs(script_args, training_args, model_args, create_output_dir=not dry_run)
    if filter_args.output_dataset_name:
        check_hub_push(filter_args.output_dataset_name, field="output_dataset_name")


def check_rules(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig) -> None:
    """A GRPO recipe's rules that span its objects or need a stage's registry; no file, Hub or machine is asked,
    except whether a jail can run (the sandbox rewards need one)."""
    names = script_args.reward_funcs
    check_reward_names(names)
    for name in names:
        if ":" in name:  # a user's reward: one line now if it cannot be imported, not a traceback after the model
            resolve_import_path(name)
    weights = training_args.reward_weights
    if weights is not None and len(weights) != len(names):
        raise ConfigError(
            f"reward_weights has {len(weights)} weight(s) but reward_funcs has {len(names)} reward(s) {names}: "
            "give one weight per reward, in the same order"
        )
    if training_args.curriculum_active and training_args.curriculum_reward not in names:
        raise ConfigError(f"curriculum_reward '{training_args.curriculum_reward}' is not in reward_funcs "
                          f"({', '.join(names)}); the curriculum measures pass rates with one of the run's rewards")
    unknown = [name for name in training_args.second_opinion_kinds or {} if name not in names]
    if unknown:
        raise ConfigError(f"second_opinion_kinds names {', '.join(unknown)}, which reward_funcs does not have "
                          f"({', '.join(names)})")
    check_callback_names(training_args.callbacks)
    checkpoints.check_resume(training_args.resume)
    if "repetition_penalty" in names and script_args.repetition_language == "zh" and not installed("jieba"):
        raise ConfigError("repetition_language: zh tokenises with jieba, which is not installed: pip install 'r1kit[zh]'")
    check_code_execution(script_args)  # a local code sandbox needs a jail on this machine
    warn_unused_routers(script_args)
    check_gym_scoring(script_args, training_args)  # so do reasoning-gym's scorers (some evaluate answers as code)


ROUTED_REWARDS = ("code", "binary_code", "cf_code")  # the rewards that run programs on `code_provider`


def warn_unused_routers(script_args: GRPOScriptArguments) -> None:
    """A sandbox router (`e2b_router_url`, `morph_router_url`) that no reward of the recipe sends programs to is said
    in one warning: it used to be ignored without a word (a recipe with `code_provider: local` and Open-R1's router
    key ran everything locally)."""
    runs_code = any(name in ROUTED_REWARDS for name in script_args.reward_funcs)
    for key, provider in (("e2b_router_url", "e2b"), ("morph_router_url", "morph")):
        if getattr(script_args, key, None) and not (runs_code and script_args.code_provider == provider):
            where = (f"code_provider is {script_args.code_provider}" if runs_code
                     else f"no reward of {', '.join(script_args.reward_funcs)} runs code there")
            warnings.warn(f"{key} is set but nothing uses it ({where}); it is ignored. Set code_provider: {provider} "
                          f"to send the code rewards' programs to it.", ConfigWarning, 2)


def check_inputs(script_args: DataFields, training_args: RunFields, model_args: ModelConfig, create_output_dir: bool = True,
                 builtin_models: tuple[str, ...] | None = None) -> None:
    """Everything a recipe points at, before anything loads: the dataset (or each mixture member), the model (and
    its GGUF file), benchmark names, report_to packages, a Hub push and the output folder."""
    data.check_sources(script_args)
    modeling.check_source(model_args.model_name_or_path, "model_name_or_path", model_args.model_revision,
                          model_args.gguf_file, builtins=builtin_models)
    modeling.check_attn_implementation(model_args.attn_implementation)
    check_report_to_installed(training_args.report_to)
    if "evaluate_benchmarks" in callback_names(training_args):  # also push_to_hub_revision with benchmarks
        benchmarks.check_names(training_args.benchmarks)
    if training_args.push_to_hub:
        check_hub_push(training_args.hub_model_id)
    check_output_dir(training_args.output_dir, create=create_output_dir)


def check_loaded_dataset(script_args: GRPOScriptArguments, training_args: GRPOConfig, dataset) -> None:
    """Once the data is read, before the model loads: the training split exists and holds at least one generation
    batch of prompts, every selected reward finds its columns, and code rows are well formed."""
    split = script_args.dataset_train_split
    if split not in dataset:
        raise ConfigError(f"dataset_train_split '{split}' not found; splits: {', '.join(dataset)}")
    rows, needed = len(dataset[split]), training_args.generation_batch_size // training_args.num_generations
    if rows < needed:  # the sampler would yield no batch: the run would end at step 0
        raise ConfigError(
            f"dataset_train_split '{split}' has {rows} rows, but one generation batch takes {needed} prompts "
            f"({training_args.generation_batch_size} completions / num_generations {training_args.num_generations}); "
            "add rows, or lower per_device_train_batch_size or gradient_accumulation_steps"
        )
    data.check_reward_columns(script_args.reward_funcs, dataset[split].column_names, split)
    if "ioi_code" in script_args.reward_funcs and "test_cases" not in dataset[split].column_names:
        data.check_source(script_args.ioi_test_cases, "ioi_test_cases")  # else ioi_code judges nothing, step after step
    try:
        check_code_rows(script_args.reward_funcs, dataset[split], script_args.code_language)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# --------------------------------------------------------------------------------------------------------------------
# The machine: vLLM, DeepSpeed, quantisation, packages, the output folder
# --------------------------------------------------------------------------------------------------------------------
def check_machine(training_args: GRPOConfig, model_args: ModelConfig, server_wait: float | None = None) -> None:
    """What this machine must have for the run: a GPU for quantisation, DeepSpeed when asked for, vLLM (and its
    server) when asked for. Cheapest first."""
    modeling.check_quantisation(model_args)
    check_deepspeed(training_args)
    check_vllm(training_args, server_wait)


def wait_for_server(host: str, port: int, timeout: float, interval: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(interval, max(0.1, deadline - time.monotonic()))):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def vllm_server_address(training_args: GRPOConfig) -> tuple[str, int]:
    base = training_args.vllm_server_base_url
    if base:
        url = urlparse(base if "://" in base else f"http://{base}")
        return url.hostname or "localhost", url.port or (443 if url.scheme == "https" else 80)
    host = training_args.vllm_server_host
    return ("127.0.0.1" if host in ("0.0.0.0", "") else host), int(training_args.vllm_server_port)


def check_vllm(training_args: GRPOConfig, server_wait: float | None = None) -> None:
    if not training_args.use_vllm:
        return
    if not installed("vllm"):
        raise ConfigError("use_vllm: true needs vLLM: pip install 'r1kit[vllm]' (on a CUDA machine; on a CPU machine "
                          "the vLLM CPU build, see the README), or set use_vllm: false")
    if vllm_is_cpu_build():
        if training_args.vllm_mode == "colocate":
            return  # r1kit's trainer reloads the weights through vLLM's own API (r1kit.training.trainer)
        # server mode: the weights go through files and the server's reload endpoint (r1kit.training.trainer); check it answers
    elif not has_cuda():
        raise ConfigError("use_vllm: true needs a CUDA GPU and none was found (or the vLLM CPU build); set "
                          "use_vllm: false to generate with transformers")
    if training_args.vllm_mode == "colocate":
        utilisation = training_args.vllm_gpu_memory_utilization
        if not 0.0 < utilisation < 1.0:
            raise ConfigError(
                f"vllm_gpu_memory_utilization must be in (0, 1) in colocate mode (the rest of the GPU trains), got {utilisation}; "
                "0.2-0.5 is typical"
            )
        return
    host, port = vllm_server_address(training_args)  # server mode (the schema allows no other)
    wait = min(float(training_args.vllm_server_timeout), 240.0) if server_wait is None else server_wait
    if not wait_for_server(host, port, wait):
        raise ConfigError(
            f"no vLLM server answered at {host}:{port} within {wait:.0f} s. Start one first (`r1kit vllm-serve "
            "--model MODEL`, which runs `trl vllm-serve` on a CUDA build), point vllm_server_host/port or "
            "vllm_server_base_url at it, or use vllm_mode: colocate"
        )


def check_deepspeed(training_args: RunFields) -> None:
    """The launch's sharding, as far as it can be checked before the model loads (`r1kit.launching.sharding.check_launch`):
    DeepSpeed installed when asked for, FSDP2 on ranks without a GPU, sharding on more than one process."""
    check_launch(training_args)


def check_report_to_installed(report_to: Any) -> None:
    """Each `report_to` integration needs its package; transformers finds out only when the trainer is built."""
    for name in [report_to] if isinstance(report_to, str) else list(report_to or []):
        if name in ("none", "all"):
            continue
        module = REPORT_TO_PACKAGES.get(name, name)
        if not installed(module) and not (name == "tensorboard" and installed("tensorboardX")):
            raise ConfigError(f"report_to: {name} is not installed: pip install {module}, or set report_to: none")
