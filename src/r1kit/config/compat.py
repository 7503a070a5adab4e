"""Open-R1 compatibility: recipes written for Open-R1 (and the TRL it pins) run unchanged.

- `KEY_MIGRATIONS`: keys current TRL or transformers renamed or dropped, mapped (or ignored) with one warning each.
- `OPEN_R1_DEFAULTS`: fields whose TRL default moved since the TRL Open-R1 pins; a recipe that leaves one unset is
  told once (`moved_defaults`), and `defaults: open-r1` applies Open-R1's values to all of them.
- A vLLM server address with no `vllm_mode` means server mode, as Open-R1's Slurm launcher assumes.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from r1kit.errors import ConfigError, ConfigWarning
from r1kit.machine import installed

logger = logging.getLogger(__name__)

# old key -> (new key or None to drop, why). Applied only when the old key is not a valid key of the installed stack.
KEY_MIGRATIONS: dict[str, tuple[str | None, str]] = {
    "torch_dtype": ("dtype", "renamed to `dtype` in TRL's ModelConfig"),
    "vllm_guided_decoding_regex": ("vllm_structured_outputs_regex", "renamed in TRL 1.x"),
    "wandb_log_unique_prompts": ("log_unique_prompts", "renamed in TRL 1.x"),
    "vllm_device": (None, "obsolete since TRL 0.17: vLLM placement follows `vllm_mode` (server or colocate)"),
    "max_prompt_length": (None, "removed in TRL 1.x: the trainer no longer truncates prompts"),
    "overwrite_output_dir": (None, "removed in transformers 5; r1kit's `resume` (auto | never | path) decides instead"),
    "use_liger_loss": (None, "removed in TRL 1.x"),
    "warmup_ratio": ("warmup_steps", "merged into `warmup_steps` in transformers 5 (a float in [0, 1) is a ratio)"),
    "provider_type": ("code_provider", "Open-R1's README name for `code_provider`"),
    "max_seq_length": ("max_length", "renamed to `max_length` in TRL's SFTConfig"),
    "use_liger": ("use_liger_kernel", "renamed to `use_liger_kernel` in TRL"),
    "dataset_configs": ("dataset_config", "Open-R1's early list form of `dataset_config`"),
    "low_reward_threshold": ("pass_rate_min", "Open-R1's early name in its filtering configs"),
    "high_reward_threshold": ("pass_rate_max", "Open-R1's early name in its filtering configs"),
}


def migrate_key(key: str, known: set[str], seen: set[str]) -> str | None:
    """The key to use instead of `key` (or None to drop it), warning once per key (`seen` holds those warned of)."""
    if key == "use_liger_kernel" and key in known and not installed("liger_kernel"):
        new, why = None, "liger-kernel is not installed (and TRL 1.16 deprecates this flag)"
    else:
        new, why = KEY_MIGRATIONS[key]
    if key not in seen:
        seen.add(key)
        action = f"using `{new}`" if new else "ignoring it"
        warnings.warn(f"recipe key '{key}': {why}; {action}.", ConfigWarning, 4)
    return new


def needs_migration(key: str, known: set[str], value: Any = True) -> bool:
    """Whether `key` (with `value`) is one of the renamed or dropped keys of the installed stack."""
    if key == "use_liger_kernel":
        return bool(value) and value != "false" and not installed("liger_kernel")
    return key in KEY_MIGRATIONS and key not in known


# Defaults that moved under Open-R1's recipes: Open-R1 pins TRL 0.18, whose GRPOConfig defaults differ from today's
# where the training changes (found by comparing trl 0.18.0's GRPOConfig fields with TRL 1.16's; equivalent moves are
# left out: scale_rewards True == "group", top_k None == 0; removed keys are migrations, see KEY_MIGRATIONS).
OPEN_R1_DEFAULTS: dict[str, Any] = {
    "beta": 0.04,
    "loss_type": "bnpo",
    "max_completion_length": 256,
    "vllm_mode": "server",
    "gradient_checkpointing": False,
    "bf16": False,
    "log_unique_prompts": True,  # Open-R1's own wandb_log_unique_prompts defaulted to True
}
DEFAULTS_CHOICES = ("trl", "open-r1")
VLLM_SERVER_KEYS = ("vllm_server_host", "vllm_server_port", "vllm_server_base_url")


def _defaults_that_matter(key: str, training_args: Any) -> bool:
    if key == "vllm_mode":
        return bool(training_args.use_vllm)
    if key == "log_unique_prompts":
        return "wandb" in (training_args.report_to or [])
    return True


def moved_defaults(explicit: set[str], training_args: Any) -> list[tuple[str, Any, Any]]:
    """(field, Open-R1's value, the value used now) for each field a recipe left unset whose default moved."""
    return [
        (key, old, getattr(training_args, key))
        for key, old in OPEN_R1_DEFAULTS.items()
        if key not in explicit and _defaults_that_matter(key, training_args) and getattr(training_args, key) != old
    ]


def is_main_process() -> bool:
    """Whether this is rank 0 of a launch (or no launch): the one that warns."""
    return os.environ.get("RANK", "0") in ("", "0") and os.environ.get("LOCAL_RANK", "0") in ("", "0")


def warn_moved_defaults(explicit: set[str], training_args: Any) -> None:
    """One warning naming every moved default the recipe leaves unset, with Open-R1's value and today's."""
    moved = moved_defaults(explicit, training_args)
    if moved and is_main_process():
        lines = "\n".join(f"  {key}: Open-R1 trained with {old!r}, now {new!r}" for key, old, new in moved)
        warnings.warn(
            f"the recipe leaves {len(moved)} field(s) at today's TRL defaults, which Open-R1 trained with "
            f"differently (set each to choose, or `defaults: open-r1` for all of Open-R1's, `defaults: trl` to "
            f"accept today's):\n{lines}", ConfigWarning, 3)


def apply_vllm_server_keys(explicit: set[str], training_args: Any) -> None:
    """Open-R1's Slurm launcher appends --vllm_server_host to recipes that never set vllm_mode: a server address
    means server mode; with vllm_mode: colocate set explicitly, the two contradict each other."""
    given = [k for k in VLLM_SERVER_KEYS if k in explicit]
    if not given:
        return
    if "vllm_mode" in explicit and training_args.vllm_mode == "colocate":
        raise ConfigError(f"vllm_mode: colocate contradicts {', '.join(given)} (a separate vLLM server): set "
                          "vllm_mode: server, or remove the server keys")
    if training_args.vllm_mode != "server":
        training_args.vllm_mode = "server"
        if is_main_process():
            logger.info("%s given and vllm_mode unset: using vllm_mode server", ", ".join(given))
