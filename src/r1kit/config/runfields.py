"""What every training run shares, GRPO and SFT: r1kit's corrections to TRL's machine defaults, the `report_to`
and `deepspeed` checks, and `RunFields`, the fields r1kit adds to both trainers' configs (split from
`r1kit.config.schema`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from r1kit.config.checks import check_chat_template, check_literal_fields, check_range
from r1kit.config.command import check_choice
from r1kit.credentials import SealedFields
from r1kit.errors import ConfigError, ConfigWarning
from r1kit.launching.sharding import apply_launch_defaults
from r1kit.machine import has_cuda, installed
from r1kit.state.contract import ResumeFields


# --------------------------------------------------------------------------------------------------------------------
# What every training run shares: machine defaults, run fields
# --------------------------------------------------------------------------------------------------------------------
def apply_machine_defaults(args: Any) -> None:
    """r1kit's corrections to TRL's training defaults, made before transformers reads them (GRPO and SFT alike).

    - `bf16`/`fp16` without a GPU become fp32 (with a warning when the recipe asked for them): TRL's default, bf16
      on, cannot even construct on a CPU-only machine.
    - `gradient_checkpointing`, which TRL sets to True by default and Open-R1 recipes use, is deprecated in
      transformers 5 in favour of `activation_checkpointing`: its value moves there, so that every start does not
      print a FutureWarning; `activation_checkpointing`, when set, wins, as in transformers. A transformers without
      `activation_checkpointing` keeps `gradient_checkpointing` as it is.
    - no pinned memory without a GPU: torch can only warn that it has nothing to pin to.
    - on several ranks without a GPU, `use_cpu` / `ddp_backend` such that accelerate forms the group and shards as
      launched (`r1kit.launching.sharding.apply_launch_defaults`; what changed is kept in `r1kit_launch_changes`).
    """
    has_gpu = has_cuda()
    if args.bf16 is None:
        args.bf16 = bool(has_gpu and not args.fp16)
    elif args.bf16 and not has_gpu and not args.use_cpu:
        warnings.warn("bf16: true needs a GPU and none was found; training in fp32 instead.", ConfigWarning, 3)
        args.bf16 = False
    if args.fp16 and not has_gpu and not args.use_cpu:
        warnings.warn("fp16: true needs a GPU and none was found; training in fp32 instead.", ConfigWarning, 3)
        args.fp16 = False
    if hasattr(args, "activation_checkpointing"):
        for old, new in (
            ("gradient_checkpointing", "activation_checkpointing"),
            ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
        ):
            if getattr(args, new) is None:
                setattr(args, new, getattr(args, old))
            setattr(args, old, None)  # transformers mirrors the new name back into the old one
    if not has_gpu:
        args.dataloader_pin_memory = False
    args.r1kit_launch_changes = apply_launch_defaults(args)  # ranks without a GPU: what accelerate needs to shard
    check_deepspeed_field(args.deepspeed)
    check_report_to(args.report_to)


# The package each `report_to` integration needs, where its name is not the integration's (transformers fails only
# when the trainer is built). The integration names themselves are transformers'.
REPORT_TO_PACKAGES = {"azure_ml": "azureml", "flyte": "flytekit", "tensorboard": "tensorboard"}


def report_to_integrations() -> tuple[str, ...]:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return tuple(INTEGRATION_TO_CALLBACK)


def check_report_to(report_to: Any) -> None:
    """Names only: whether each is installed is the pre-flight's question (`preflight.check_report_to_installed`)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for name in names:
        check_choice("report_to", name, ("none", "all", *report_to_integrations()))


def check_deepspeed_field(deepspeed: Any) -> None:
    """transformers reads the `deepspeed` config (and imports DeepSpeed) while the arguments are built: check first."""
    if not deepspeed:
        return
    if isinstance(deepspeed, str) and not deepspeed.lstrip().startswith("{") and not Path(deepspeed).is_file():
        raise ConfigError(f"deepspeed: {deepspeed} does not exist; give the path of a DeepSpeed JSON config")
    if not installed("deepspeed"):
        raise ConfigError(
            "deepspeed: DeepSpeed is not installed: pip install 'r1kit[deepspeed]', or remove `deepspeed` and launch "
            "with recipes/accelerate_configs/ddp.yaml or fsdp.yaml"
        )


@dataclass
class RunFields(ResumeFields, SealedFields):  # (to_dict never writes a sealed secret: r1kit.credentials)
    """The fields r1kit adds to both trainers' configs (`GRPOConfig`, `SFTConfig`), held once.

    Args:
        benchmarks (`list[str]`, defaults to `[]`): benchmarks evaluated on each checkpoint by `evaluate_benchmarks`.
        callbacks (`list[str]`, defaults to `[]`): callback names (see `r1kit.benchmarking.callbacks`).
        chat_template (`str` or `None`, defaults to `None`): Jinja template replacing the tokenizer's (SFT: ChatML
            when the tokenizer has none, as Open-R1's sft.py does).
        system_prompt (`str` or `None`, defaults to `None`): system message prepended to every GRPO prompt and to
            the benchmarks' prompts (SFT training data keeps its own messages).
        hub_model_revision (`str`, defaults to `"main"`): base branch of checkpoint pushes.
        push_to_hub_revision (`bool`, defaults to `False`): refuse to start if the revision already has content.
        overwrite_hub_revision (`bool`, defaults to `False`): allow overwriting an existing revision.
        wandb_entity / wandb_project / wandb_run_group (`str` or `None`): exported as `WANDB_*` variables.
        resume, resume_without_optimizer, resume_changes, resume_after_stop: see `r1kit.state.contract.ResumeFields`.
        benchmark_num_samples (`int`, defaults to `1`): `evaluate_benchmarks` samples per problem (pass@1 averages).
        benchmark_max_new_tokens (`int` or `None`, defaults to `None`): `evaluate_benchmarks` generation length
            (default: `max_completion_length` for GRPO, 512 for SFT).
        benchmark_launcher (`str`, defaults to `"local"`): `local` runs evaluations as subprocesses, `slurm` submits
            `slurm/evaluate.slurm` with sbatch.
        torch_num_threads (`int` or `None`, defaults to `None`): CPU threads for torch; tiny models run fastest and
            steadiest on 1 (on small VMs, 2 threads can stall).
        stall_timeout (`float` or `None`, defaults to `None`): seconds a training step (generation, rewards, tools,
            the update, its evaluations and save) may take; a process whose step has not ended by then is hung (a
            collective another rank never joined, a generator or tool that never answers): it says in one line what
            it was doing and exits 75, the last checkpoint intact. `None`: twice `ddp_timeout` (3600 s): a rank
            waiting in a collective stops at `ddp_timeout` already; this bounds the waits no collective covers.
        stop_grace_seconds (`float`, defaults to `300.0`): after SIGTERM/SIGINT, seconds the current step may take to
            end and save; then the process exits 75 unsaved (the last checkpoint intact). Slurm's `--signal=TERM@600`
            comes 600 s before its kill.
    """

    benchmarks: list[str] = field(default_factory=list, metadata={"help": "Benchmarks evaluated on each checkpoint."})
    callbacks: list[str] = field(default_factory=list, metadata={"help": "Callbacks to run during training."})
    chat_template: str | None = field(default=None, metadata={"help": "Chat template overriding the tokenizer's."})
    system_prompt: str | None = field(default=None, metadata={"help": "System prompt prepended to every prompt."})
    hub_model_revision: str | None = field(default="main", metadata={"help": "Base branch of checkpoint pushes."})
    push_to_hub_revision: bool = field(default=False, metadata={"help": "Push each checkpoint to its own branch."})
    overwrite_hub_revision: bool = field(default=False, metadata={"help": "Allow overwriting an existing revision."})
    wandb_entity: str | None = field(default=None, metadata={"help": "W&B entity."})
    wandb_project: str | None = field(default=None, metadata={"help": "W&B project."})
    wandb_run_group: str | None = field(default=None, metadata={"help": "W&B run group."})
    benchmark_num_samples: int = field(default=1, metadata={"help": "evaluate_benchmarks: samples per problem."})
    benchmark_max_new_tokens: int | None = field(
        default=None, metadata={"help": "evaluate_benchmarks: new tokens (default: max_completion_length; SFT 512)."}
    )
    benchmark_launcher: Literal["local", "slurm"] = field(
        default="local", metadata={"help": "evaluate_benchmarks: local or slurm."}
    )
    torch_num_threads: int | None = field(
        default=None, metadata={"help": "CPU threads torch uses (default: torch's choice); 1 suits tiny models."}
    )
    stall_timeout: float | None = field(
        default=None, metadata={"help": "Seconds a step may take before the run stops as hung (exit 75); default 2 x ddp_timeout."}
    )
    stop_grace_seconds: float = field(
        default=300.0, metadata={"help": "Seconds after SIGTERM/SIGINT for the step to end and save; then exit 75 unsaved."}
    )

    def check_run_fields(self) -> None:
        """The shared fields' own rules, and the trainer fields that transformers checks late or never."""
        check_literal_fields(self)
        if self.chat_template is not None:
            check_chat_template(self.chat_template)
        self.check_resume_fields()
        check_range(self, [("benchmark_num_samples", ">=", 1), ("benchmark_max_new_tokens", ">=", 1),
                           ("torch_num_threads", ">=", 1), ("learning_rate", ">=", 0),
                           ("per_device_train_batch_size", ">=", 1), ("gradient_accumulation_steps", ">=", 1),
                           ("warmup_steps", ">=", 0), ("logging_steps", ">", 0), ("save_steps", ">", 0),
                           ("stall_timeout", ">", 0), ("stop_grace_seconds", ">", 0)])
        if self.max_steps == 0 or self.max_steps < -1:
            raise ConfigError(f"max_steps must be a positive number of steps (or -1 to train num_train_epochs), got {self.max_steps}")
        if self.max_steps == -1 and not self.num_train_epochs > 0:
            raise ConfigError(f"num_train_epochs must be > 0 when max_steps is -1, got {self.num_train_epochs}")
        names = list(self.callbacks)
        if "push_to_hub_revision" in names and not self.hub_model_id:
            raise ConfigError("callback push_to_hub_revision needs hub_model_id (a Hub repo id or file:///some/dir)")
        if "evaluate_benchmarks" in names and not self.benchmarks:
            raise ConfigError("callback evaluate_benchmarks needs `benchmarks` (e.g. [addition, humaneval, math_500])")

    def benchmark_generation_length(self) -> int:
        """Tokens `evaluate_benchmarks` generates: `benchmark_max_new_tokens`, else 512 (GRPO: its completion length)."""
        return self.benchmark_max_new_tokens or 512
