"""The run's contract: what a run records of itself (the resolved recipe, every field after defaults and secrets
sealed; the model's and the tokenizer's identity; the world size and the global batch), in `r1kit_run.json` and in
every checkpoint (`r1kit_checkpoint.json`), and the one policy for what may change between a checkpoint and the
recipe that resumes it. Shared by `r1kit grpo` and `r1kit sft`.

    safe          taken, and said in the start-up block: logging, evaluation, saving, the Hub, where and how fast
                  the same computation runs (vLLM's placement, threads, the exact training pass), the tripwires and
                  the second opinion, `max_steps` / `num_train_epochs` upward
    optimisation  refused, one line naming each field with both values, unless `resume_changes` says how to go on:
                  `recipe` takes the recipe's values (a new learning rate re-anchors the schedule where it stands),
                  `checkpoint` keeps the checkpoint's (the launch's world size cannot be kept). Every field not
                  listed as safe or identity is here: the learning rate and its schedule, beta, the group size,
                  the rewards and their weights, sampling, data, the seed, the world size and the global batch
    identity      always refused: another model (its name or revision, unless its files are the same; its
                  content), tokenizer or chat template, or another adapter layout (LoRA)

A model's content is a fingerprint of its files (config, weights, tokenizer: files under 64 MiB hashed whole,
larger ones by size and 16 sampled MiB), or for a Hub id not on disk, its revision as the Hub cache resolves it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from r1kit.credentials import redact, saved_form
from r1kit.errors import ConfigError

SAFE, OPTIMISATION, IDENTITY = "safe", "optimisation", "identity"
RESUME_CHANGES = ("refuse", "recipe", "checkpoint")


@dataclass
class ResumeFields:
    """How a run continues from a checkpoint (mixed into both trainers' configs through `RunFields`).

    Args:
        resume (`str`, defaults to `"auto"`): `auto` resumes from the newest complete checkpoint in `output_dir`,
            `never` starts fresh, a path resumes from that checkpoint (see `r1kit.state.checkpoints`).
        resume_without_optimizer (`bool`, defaults to `False`): resume from a checkpoint that holds no optimizer or
            scheduler state (`save_only_model: true` writes such checkpoints), with a fresh optimizer and a restarted
            learning-rate schedule; training then does not match an uninterrupted run. Without it, such a resume
            is an error.
        resume_changes (`str`, defaults to `"refuse"`): what a resume does when the recipe changes a field that
            changes the optimisation (`r1kit.state.contract`): `refuse` (one line naming each field, both values),
            `recipe` (take the recipe's; a new learning rate re-anchors the schedule where it stands) or
            `checkpoint` (keep the checkpoint's). Another model or tokenizer is refused whatever it says.
        resume_after_stop (`bool`, defaults to `False`): continue a run that a tripwire stopped (it stays stopped,
            exit code 3, until this is set).
    """

    resume: str = field(default="auto", metadata={"help": "auto | never | path to a checkpoint."})
    resume_without_optimizer: bool = field(
        default=False, metadata={"help": "Allow resuming from a checkpoint without optimizer/scheduler state."}
    )
    resume_changes: Literal["refuse", "recipe", "checkpoint"] = field(
        default="refuse", metadata={"help": "On resume, optimisation fields the recipe changed: refuse, recipe or "
                                            "checkpoint (whose values to train with)."})
    resume_after_stop: bool = field(default=False, metadata={"help": "Continue a run a tripwire stopped."})

    def check_resume_fields(self) -> None:
        if not isinstance(self.resume, str) or not self.resume.strip():
            raise ConfigError(f"resume must be auto, never or the path of a checkpoint folder, got {self.resume!r}")


# --------------------------------------------------------------------------------------------------------------------
# The policy: one table, per field
# --------------------------------------------------------------------------------------------------------------------
IDENTITY_FIELDS = frozenset({
    "model_files", "tokenizer_files",  # the content fingerprints (or the Hub commit)
    "model_name_or_path", "model_revision", "gguf_file", "tokenizer_name_or_path", "chat_template",
    "chat_template_path", "eos_token", "pad_token",
    "use_peft", "lora_r", "lora_alpha", "lora_target_modules", "lora_target_parameters", "lora_modules_to_save",
    "lora_task_type", "use_rslora", "use_dora", "load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type",
    "use_bnb_nested_quant", "bnb_4bit_quant_storage",
    "hidden_size", "num_layers", "num_heads", "characters",  # r1kit:scratch's model and tokenizer
})
SAFE_FIELDS = frozenset({
    "output_dir", "run_name", "project", "report_to", "callbacks", "benchmarks", "do_eval", "do_predict", "do_train",
    "per_device_eval_batch_size", "num_generations_eval", "prediction_loss_only", "batch_eval_metrics",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "disable_tqdm", "compact_progress",
    "debug", "local_rank", "skip_memory_metrics", "include_num_input_tokens_seen", "include_for_metrics",
    "num_completions_to_print", "restore_callback_states_from_checkpoint", "resume_from_checkpoint",
    "overwrite_hub_revision", "enable_jit_checkpoint", "torch_empty_cache_steps", "torch_num_threads",
    "training_pass", "trim_padding", "shared_prompt_pass", "gradient_checkpointing", "gradient_checkpointing_kwargs",
    "attn_implementation", "use_vllm", "ds3_gather_for_generation", "use_cpu", "trust_remote_code",
    "reward_workers", "reward_timeout", "parallel_code_exec_per_proc", "code_eval_test_batch_size", "code_provider",
    "e2b_router_url", "morph_router_url", "ioi_provider", "allow_unsandboxed_code_execution", "publish_to",
    "heldout_size", "heldout_eval_steps", "eval_every_steps", "stop_at_accuracy", "unjudged_share_limit",
    "dataset_num_proc",
    # the objective is the same; only how stale the samples may be (corrected for) changes
    "async_rollouts", "max_staleness", "weight_sync_steps", "rollout_timeout",
})
SAFE_PREFIXES = ("logging_", "log_", "eval_", "save_", "hub_", "push_to_hub", "wandb_", "trackio_", "benchmark_",
                 "dataloader_", "ddp_", "tripwire", "second_opinion_", "probe_", "resume", "torch_compile",
                 "activation_checkpointing")
# vLLM's placement is safe; what changes the loss or what is sampled is not (vllm_importance_sampling_*, the regex).
SAFE_VLLM = ("vllm_mode", "vllm_server_", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size",
             "vllm_enable_sleep_mode", "vllm_max_model_length", "vllm_group_port", "vllm_model_impl")
MODEL_NAMES = ("model_name_or_path", "model_revision", "gguf_file")  # safe when the files are the same
UPWARD = ("max_steps", "num_train_epochs")  # safe when raised (training goes on), optimisation when lowered
LAUNCH = ("world_size", "global_batch")  # optimisation, and a launch the checkpoint's values cannot be kept for


def classify(name: str, old: Any = None, new: Any = None) -> str:
    """The class of a change of field `name` from `old` (the checkpoint's) to `new` (the recipe's)."""
    if name in IDENTITY_FIELDS:
        return IDENTITY
    if name in UPWARD:
        numbers = isinstance(old, (int, float)) and isinstance(new, (int, float))
        raised = numbers and new > old and (name != "max_steps" or old > 0)  # (-1: counted in epochs)
        return SAFE if raised else OPTIMISATION
    if name in SAFE_FIELDS or name.startswith(SAFE_PREFIXES) or name.startswith(SAFE_VLLM):
        return SAFE
    return OPTIMISATION


# --------------------------------------------------------------------------------------------------------------------
# What a run records
# --------------------------------------------------------------------------------------------------------------------
def plain(obj: Any) -> dict:
    """A parsed recipe dataclass as JSON values: every field after defaults, each sealed secret as it would be
    saved, every known secret redacted (so that a recipe and its record compare equal)."""
    from dataclasses import asdict, fields

    data = obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
    names = {f.name for f in fields(obj)}
    data = {k: saved_form(v) for k, v in data.items() if k in names}
    return json.loads(redact(json.dumps(data, default=str, sort_keys=True)))


def describe(recipe: tuple, model: dict, tokenizer: str | None, world_size: int) -> dict:
    """The contract of a run: its resolved recipe (the dataclasses' fields, one flat mapping: their names do not
    overlap), the model's identity, the world size and the global batch (per_device_train_batch_size x world size x
    gradient_accumulation_steps: completions per optimizer step for GRPO, examples for SFT)."""
    flat: dict[str, Any] = {}
    for obj in recipe:
        for key, value in plain(obj).items():
            flat.setdefault(key, value)
    batch = flat.get("per_device_train_batch_size", 0) * world_size * flat.get("gradient_accumulation_steps", 1)
    return {"recipe": flat, "model": model, "tokenizer": tokenizer, "world_size": world_size, "global_batch": batch}


def model_identity(name: str, revision: str | None, path: str | None) -> dict:
    """The model as given (name, revision) and its content: a fingerprint of its files when `path` is a folder or
    file on disk, else the commit the Hub cache resolves `revision` to (None when it cannot be resolved offline)."""
    identity: dict[str, Any] = {"name": name, "revision": revision}
    if path and Path(path).exists():
        identity["fingerprint"] = fingerprint(Path(path), MODEL_FILES)
    elif path:
        identity["commit"] = hub_commit(path, revision)
    return identity


def tokenizer_identity(path: str | None) -> str | None:
    """A fingerprint of the tokenizer's files, or None (not on disk)."""
    return fingerprint(Path(path), TOKENIZER_FILES) if path and Path(path).is_dir() else None


MODEL_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.gguf",
               "adapter_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.*", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")
WHOLE_FILE_BYTES = 64 * 2**20
SAMPLES, SAMPLE_BYTES = 16, 2**20


def fingerprint(path: Path, patterns: tuple[str, ...]) -> str | None:
    """sha256 over the matching files of a folder (or one file): their names, sizes and contents (a large file by 16
    evenly spaced MiB: a checkpoint of another model differs within the first of them anyway)."""
    files = [path] if path.is_file() else sorted({f for pattern in patterns for f in path.glob(pattern) if f.is_file()})
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}\0{size}\0".encode())
        with file.open("rb") as f:
            if size <= WHOLE_FILE_BYTES:
                digest.update(f.read())
                continue
            for i in range(SAMPLES):
                f.seek((size - SAMPLE_BYTES) * i // (SAMPLES - 1))
                digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()[:16]


def hub_commit(repo_id: str, revision: str | None) -> str | None:
    try:
        from huggingface_hub import snapshot_download  # deferred: huggingface_hub

        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True)).name
    except Exception:  # noqa: BLE001 - not in the cache, or not a Hub id: the name and revision stand alone
        return None


# --------------------------------------------------------------------------------------------------------------------
# Comparing a checkpoint's contract with this launch's
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class Change:
    name: str
    old: Any
    new: Any
    kind: str


def flatten(contract: dict) -> dict:
    """The contract as one mapping of comparable items: the recipe's fields, the model's content (`model_files`: its
    fingerprint or Hub commit), the tokenizer's (`tokenizer_files`), the world size and the global batch."""
    model = contract.get("model") or {}
    items = dict(contract.get("recipe") or {})
    if model.get("fingerprint") or model.get("commit"):
        items["model_files"] = model.get("fingerprint") or model.get("commit")
    if contract.get("tokenizer"):
        items["tokenizer_files"] = contract["tokenizer"]
    for key in LAUNCH:
        if key in contract:
            items[key] = contract[key]
    return items


def compare(saved: dict, current: dict) -> list[Change]:
    """Every item the checkpoint recorded that this launch has with another value, classified. Items only one side
    has (a field another r1kit version added) are not compared."""
    old, new = flatten(saved), flatten(current)
    changes = [Change(k, old[k], new[k], classify(k, old[k], new[k])) for k in sorted(old.keys() & new.keys())
               if not same(old[k], new[k]) and not k.startswith("resume")]  # (how to resume: not what the run is)
    if old.get("model_files") and old.get("model_files") == new.get("model_files"):
        for change in changes:  # the same files found under another name (a moved folder): the same model
            if change.name in MODEL_NAMES:
                change.kind = SAFE
    return changes


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    return a == b


@dataclass
class Verdict:
    """What a resume does about the changes: `error` (one line, refused), else `notes` for the start-up block,
    `keep` (fields set back to the checkpoint's values) and `lr_factor` (the loaded schedule scaled: a new learning
    rate, re-anchored)."""

    error: str | None = None
    notes: list[str] = field(default_factory=list)
    keep: dict[str, Any] = field(default_factory=dict)
    lr_factor: float | None = None


def show(value: Any) -> str:
    """A value for the one-line message: a string whole (a path must be recognisable), anything else short."""
    text = json.dumps(value) if not isinstance(value, str) else value
    limit = 240 if isinstance(value, str) else 60
    return text if len(text) <= limit else text[:limit - 3] + "..."


def pairs(changes: list[Change]) -> str:
    return ", ".join(f"{c.name} {show(c.old)} -> {show(c.new)}" for c in changes)


def decide(changes: list[Change], resume_changes: str, checkpoint: str) -> Verdict:
    """The policy applied to `changes` (checkpoint value -> recipe value)."""
    name = Path(checkpoint).name
    identity = [c for c in changes if c.kind == IDENTITY]
    if identity:
        return Verdict(error=f"resume: {name} was trained as another model or tokenizer than this recipe names "
                       f"({pairs(identity)}, checkpoint -> recipe); a run cannot continue as another model. Set "
                       "resume: never to start over, or choose another output_dir")
    optimisation = [c for c in changes if c.kind == OPTIMISATION]
    safe = [c for c in changes if c.kind == SAFE]
    verdict = Verdict(notes=[f"changed  {pairs(safe)} (safe to change on resume: taken)"] if safe else [])
    if not optimisation:
        return verdict
    if resume_changes == "refuse":
        world = next((c for c in optimisation if c.name == "world_size"), None)
        launch = f"; launch {world.old} processes as it was (--world-size {world.old})" if world else ""
        verdict.error = (f"resume: {name} was trained with other values of fields that change the optimisation: "
                         f"{pairs(optimisation)} (checkpoint -> recipe). Set resume_changes: recipe to train on "
                         "with the recipe's (a new learning rate re-anchors the schedule), resume_changes: "
                         f"checkpoint to keep the checkpoint's, or resume: never to start over{launch}")
    elif resume_changes == "checkpoint":
        launch = [c for c in optimisation if c.name == "world_size"]
        if launch:
            verdict.error = (f"resume: {name} was trained on world_size {launch[0].old} processes, this launch has "
                             f"{launch[0].new}; resume_changes: checkpoint cannot change the launch: launch "
                             f"{launch[0].old} processes, or set resume_changes: recipe")
        verdict.keep = {c.name: c.old for c in optimisation if c.name not in LAUNCH}
        verdict.notes.append(f"kept     the checkpoint's {pairs([Change(c.name, c.new, c.old, c.kind) for c in optimisation])} (recipe -> "
                             "checkpoint; resume_changes: checkpoint)")
    else:
        verdict.notes.append(f"taken    {pairs(optimisation)} (checkpoint -> recipe; resume_changes: recipe)")
        lr = next((c for c in optimisation if c.name == "learning_rate"), None)
        if lr and isinstance(lr.old, (int, float)) and lr.old > 0:
            verdict.lr_factor = float(lr.new) / float(lr.old)
            verdict.notes[-1] += "; the schedule re-anchored to the new learning rate"
    return verdict


def keep_checkpoint_values(recipe: tuple, keep: dict[str, Any]) -> None:
    """Sets each field of `keep` back to the checkpoint's value on whichever recipe dataclass has it (an enum keeps
    its type)."""
    from enum import Enum

    for name, value in keep.items():
        for obj in recipe:
            if hasattr(obj, name):
                current = getattr(obj, name)
                setattr(obj, name, type(current)(value) if isinstance(current, Enum) else value)
                break


def finished_run_refusal(saved: dict, current: dict, max_steps: int, reached: int, output_dir: str) -> str | None:
    """Why a recipe may not take a completed run's folder as its own, or None when it is that run's (then nothing is
    left to do, exit 0): a `max_steps` below the step the run reached (it would look finished at a step it is not
    at), or any change that is not safe (another model, dataset, recipe) against the run's record."""
    if max_steps > 0 and max_steps < reached:
        return (f"output_dir: {output_dir} holds a run completed at step {reached}, past this recipe's max_steps "
                f"{max_steps}; it cannot be made to have stopped earlier: choose another output_dir, or resume: never "
                "to start over there")
    if "recipe" not in saved:  # recorded by an r1kit that kept no recipe: nothing to compare
        return None
    changes = [c for c in compare(saved, current) if c.kind != SAFE and c.name != "max_steps"]
    if not changes:
        return None
    named = ", ".join(f"{c.name} {shown_value(c.old)} -> {shown_value(c.new)}" for c in changes[:4])
    more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
    return (f"output_dir: {output_dir} holds a completed run of another recipe ({named}{more}); choose another "
            "output_dir, or resume: never to start over there")


def shown_value(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."
