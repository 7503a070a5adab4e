"""Sharded training as it was launched: what the launch asked for, what r1kit checks before the model loads, what it
does on ranks without a GPU, and what each rank really holds.

accelerate, torch.distributed (FSDP2) and DeepSpeed are the engine. `accelerate launch --config_file fsdp.yaml` (or
zero2/zero3.yaml) tells each process through its environment (`ACCELERATE_USE_FSDP`, `FSDP_*`,
`ACCELERATE_USE_DEEPSPEED`, `ACCELERATE_DEEPSPEED_*`); transformers builds the accelerator from it. Where that silently
gives something else, r1kit says so or makes it right:

- On ranks without a GPU (`WORLD_SIZE` > 1, no CUDA): without `use_cpu` accelerate forms no process group, and each
  rank trains alone; with it, accelerate ignores FSDP (it shards only on GPUs) and DeepSpeed (which it starts only
  without `use_cpu`). So r1kit sets, before transformers reads them: `use_cpu: true` for DDP and FSDP (a gloo group),
  and for DeepSpeed `use_cpu: false` with `ddp_backend: gloo` (DeepSpeed's CPU accelerator over gloo). FSDP2 then
  goes through accelerate's own FSDP2 path (`fully_shard`): `enable_fsdp_on_cpu` turns the plugin accelerate built and
  dropped back on. Said in the start-up block's `sharding` line. DeepSpeed's shared-memory all-reduce, which only
  its inference engine calls, is not compiled there (`skip_deepspeed_shm_build`).
- Refused before the model loads, in one line each (`check_launch`): an `accelerate launch` that started less than
  its command asked for (`shortfall`: fewer processes than asked, from its simple launcher under `--cpu`, a
  MULTI_CPU or NO config, or no `--multi_gpu` on a machine without GPUs; a config's FSDP or DeepSpeed replaced by a
  flag), FSDP1 on CPU ranks (FSDP2 only), sharding asked for on one process without offloading (nothing to shard),
  DeepSpeed asked for and not installed.
- `ShardingRecord` writes OUTPUT_DIR/sharding.json after the first optimizer step: per rank, the bytes of parameters
  and of optimizer state it holds, so that "sharded" is a measurement, not a configuration.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from r1kit.errors import ConfigError
from r1kit.machine import has_cuda, installed

logger = logging.getLogger(__name__)

RECORD = "sharding.json"


@dataclass
class Launch:
    """What the launch asked for: `engine` (`fsdp`, `deepspeed` or None: DDP or one process), FSDP's version or
    ZeRO's stage, the processes launched, whether parameters or optimizer state are offloaded to the CPU."""

    engine: str | None
    level: int
    world: int
    offload: bool

    @property
    def name(self) -> str:
        if self.engine == "fsdp":
            return f"FSDP{self.level}"
        if self.engine == "deepspeed":
            return f"DeepSpeed ZeRO-{self.level}"
        return "DDP" if self.world > 1 else "one process"

    @property
    def shards_parameters(self) -> bool:
        return self.engine == "fsdp" or (self.engine == "deepspeed" and self.level == 3)


def flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def requested(args=None) -> Launch:
    """The sharding this process was launched with (accelerate's environment, or the recipe's `fsdp` / `deepspeed`)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    fsdp = flag("ACCELERATE_USE_FSDP") or bool(getattr(args, "fsdp", None))
    if fsdp:
        version = int(os.environ.get("FSDP_VERSION", "") or recipe_fsdp_version(args))
        return Launch("fsdp", version, world, flag("FSDP_OFFLOAD_PARAMS"))
    if flag("ACCELERATE_USE_DEEPSPEED") or getattr(args, "deepspeed", None):
        stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") or deepspeed_stage(getattr(args, "deepspeed", None))
        offload = any(os.environ.get(f"ACCELERATE_DEEPSPEED_OFFLOAD_{part}_DEVICE", "none") not in ("none", "")
                      for part in ("PARAM", "OPTIMIZER"))
        return Launch("deepspeed", int(stage or 0), world, offload)
    return Launch(None, 0, world, False)


def recipe_fsdp_version(args) -> int:
    """FSDP's version as a recipe's `fsdp_config` gives it (`version` or `fsdp_version`); transformers' default, 2,
    when it does not (it was read as 1, and a recipe's FSDP2 was refused on ranks without a GPU)."""
    config = getattr(args, "fsdp_config", None)
    config = config if isinstance(config, dict) else {}
    return int(config.get("version", config.get("fsdp_version", 2)))


def deepspeed_stage(config) -> int:
    """ZeRO's stage in a DeepSpeed config (a dict or a JSON file's path); 0 when it says none."""
    if isinstance(config, (str, os.PathLike)) and Path(config).is_file():
        config = json.loads(Path(config).read_text())
    if isinstance(config, dict):
        return int((config.get("zero_optimization") or {}).get("stage", 0) or 0)
    return 0


def apply_launch_defaults(args) -> list[str]:
    """On ranks without a GPU, the settings under which accelerate gives what the launch asked for (see the module
    docstring); returns what was changed, for the start-up block. Runs before transformers reads `args`."""
    launch = requested(args)
    if launch.engine == "deepspeed" and not has_cuda():
        skip_deepspeed_shm_build()
    if launch.world <= 1:
        # One process: a free rendezvous port for what it starts (a colocated vLLM engine), where accelerate would set
        # its fixed 29500 and two runs on one machine would both bind it
        if not os.environ.get("MASTER_PORT"):
            os.environ["MASTER_PORT"] = str(free_port())
        return []
    if has_cuda():
        return []
    changed = []
    if launch.engine == "deepspeed":
        if args.use_cpu:
            changed.append("use_cpu: false (accelerate starts DeepSpeed only without it)")
            args.use_cpu = False
        if args.ddp_backend is None:
            changed.append("ddp_backend: gloo (DeepSpeed's CPU accelerator)")
            args.ddp_backend = "gloo"
        precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if precision in ("bf16", "fp16"):  # the launch's; these ranks train in fp32 (apply_machine_defaults), and
            # DeepSpeed's config would say otherwise: transformers refused the mismatch with a traceback
            changed.append(f"mixed_precision: no (the accelerate config's {precision}: ranks without a GPU train in fp32)")
            os.environ["ACCELERATE_MIXED_PRECISION"] = "no"
    elif not args.use_cpu:
        changed.append("use_cpu: true (without it the ranks would form no group and each train alone)")
        args.use_cpu = True
    return changed


SHM_OP = "deepspeed_shm_comm"


def skip_deepspeed_shm_build() -> None:
    """Marks DeepSpeed's shared-memory all-reduce op (`deepspeed_shm_comm`) unavailable in this process. Without a GPU,
    DeepSpeed's CPU accelerator compiles that C++ op with the machine's compiler when its process group starts (about
    20 s of g++ at a machine's first launch, then cached), yet only its inference engine's `inference_all_reduce`
    calls it: training's collectives go through torch.distributed (gloo). Unavailable, it is neither built nor
    loaded, as on a machine where it cannot build. DeepSpeed keeps the ops it may build in
    `deepspeed.ops.__compatible_ops__` (0.16 to 0.19: a dict it reads at that moment)."""
    try:
        import deepspeed.ops

        compatible = deepspeed.ops.__compatible_ops__
    except Exception:  # noqa: BLE001 - not installed, or a version without it: DeepSpeed decides as it would
        return
    if isinstance(compatible, dict):
        compatible[SHM_OP] = False
        logger.debug("DeepSpeed's %s op (inference only) is not built on ranks without a GPU", SHM_OP)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_launch(args) -> None:
    """What the launch cannot give, refused before the model loads, one line each."""
    launch = requested(args)
    short = shortfall(launch)  # first: what the other checks would say of a launch that is not the one asked for
    if short:
        raise ConfigError(short)
    if launch.engine == "deepspeed" and not installed("deepspeed"):
        raise ConfigError("DeepSpeed was asked for (an accelerate DeepSpeed config, or deepspeed:) but is not installed: "
                          "pip install 'r1kit[deepspeed]', or launch with recipes/accelerate_configs/fsdp.yaml")
    if launch.engine == "fsdp" and launch.level != 2 and launch.world > 1 and not has_cuda():
        raise ConfigError(f"FSDP{launch.level} on ranks without a GPU: r1kit runs FSDP2 there; set fsdp_version: 2 in "
                          "the accelerate config (recipes/accelerate_configs/fsdp.yaml)")
    if getattr(args, "async_rollouts", False) and launch.engine == "fsdp" and launch.level == 1:
        raise ConfigError("async_rollouts under FSDP1: the generator's weights are gathered one module at a time, "
                          "which FSDP1's flattened parameters do not allow; set fsdp_version: 2 in the accelerate config")
    if launch.engine and launch.world == 1 and launch.shards_parameters and not launch.offload:
        raise ConfigError(f"{launch.name} on one process shards nothing: launch it on several (accelerate launch "
                          "--num_processes N, or r1kit grpo --world-size N), offload to the CPU, or drop the config")


# --------------------------------------------------------------------------------------------------------------------
# What `accelerate launch` was asked for, against what this process got
# --------------------------------------------------------------------------------------------------------------------
# accelerate tells its workers nothing of the processes it was asked for: its simple launcher (`--cpu`, a MULTI_CPU or
# NO config, or no --multi_gpu on a machine with fewer than 2 GPUs) starts ONE process and leaves the others to mpirun,
# and a flag (--multi_gpu, --use_fsdp, --use_deepspeed, --cpu) silently wins over the config file's distributed_type.
# The command that started this process says what was asked; WORLD_SIZE and accelerate's variables say what was got.
TYPE_FLAGS = (("cpu", "--cpu"), ("multi_gpu", "--multi_gpu"), ("use_fsdp", "--use_fsdp"),
              ("use_deepspeed", "--use_deepspeed"), ("tpu", "--tpu"), ("use_megatron_lm", "--use_megatron_lm"))
FLAG_TYPES = {"--multi_gpu": "MULTI_GPU", "--use_fsdp": "FSDP", "--use_deepspeed": "DEEPSPEED", "--tpu": "XLA",
              "--use_megatron_lm": "MEGATRON_LM", "--cpu": "one process"}
SHARDED_TYPES = {"FSDP": "FSDP", "DEEPSPEED": "DeepSpeed"}


@dataclass
class Asked:
    """What an `accelerate launch` command asked for, resolved as accelerate resolves it (its flags over its config
    file): `processes` in all (None: accelerate's default, one per GPU), the config file (`config`, its
    `distributed_type` as `config_type`; None when none was read), the flag that chose the launcher (`flag`) and
    where the number of processes came from (`processes_from`: the flag, or the config's key)."""

    processes: int | None
    config: str | None
    config_type: str | None
    flag: str | None
    processes_from: str = "--num_processes"
    named: bool = True  # the config was named (--config_file), not accelerate's default one

    def said(self) -> str:
        """What the command said, as the user wrote it: `fsdp.yaml, --cpu, --num_processes 2`."""
        number = None
        if self.processes:
            number = (f"--num_processes {self.processes}" if self.processes_from == "--num_processes"
                      else f"num_processes: {self.processes}")
        return ", ".join(filter(None, (self.config, self.flag, number)))

    @property
    def sharding(self) -> str | None:
        """The sharding the command asked for: its config's (FSDP, DeepSpeed), or its --use_fsdp/--use_deepspeed."""
        for kind in (self.config_type, FLAG_TYPES.get(self.flag or "")):
            if kind in SHARDED_TYPES:
                return SHARDED_TYPES[kind]
        return None

    @property
    def simple(self) -> bool:
        """Whether accelerate started this process with its simple launcher (one process, whatever --num_processes
        says): under --cpu, or with neither a multi-process flag nor a multi-process config on a machine without 2
        GPUs. (With GPUs and neither, accelerate may choose its multi-GPU launcher itself: not told here.)"""
        if self.flag == "--cpu":
            return True
        return self.flag is None and self.config_type in (None, "MULTI_CPU", "NO") and not has_cuda()

    @property
    def overridden(self) -> bool:
        """Whether a flag replaced the sharding the config file asked for (accelerate lets the flag win, silently)."""
        # (a flag given over accelerate's default config is taken as the user's choice)
        return (self.named and self.config_type in SHARDED_TYPES and self.flag is not None
                and FLAG_TYPES[self.flag] != self.config_type)


def accelerate_arguments(command: list[str]) -> list[str] | None:
    """The arguments of `accelerate launch` in a process's command line (`accelerate launch ...`, `accelerate-launch`,
    `python -m accelerate.commands.launch`, `r1kit launch accelerate launch ...`); None when it is not one."""
    for i, item in enumerate(command):
        name = os.path.basename(item)
        if name == "accelerate" and command[i + 1:i + 2] == ["launch"]:
            return command[i + 2:]
        if name == "accelerate-launch" or (item == "accelerate.commands.launch" and command[i - 1:i] == ["-m"]):
            return command[i + 1:]
        if item == "accelerate.commands.accelerate_cli" and command[i + 1:i + 2] == ["launch"]:
            return command[i + 2:]
    return None


def asked_of(arguments: list[str], cwd: str) -> Asked | None:
    """What `accelerate launch ARGUMENTS`, run in `cwd`, asked for; None when it cannot be told (a SageMaker config,
    a config file that cannot be read, arguments accelerate's parser refuses)."""
    from accelerate.commands.config import default_config_file, load_config_from_file  # deferred: accelerate
    from accelerate.commands.launch import launch_command_parser

    try:
        flags, _ = launch_command_parser().parse_known_args(arguments)
    except SystemExit:
        return None
    flag = next((name for attribute, name in TYPE_FLAGS if getattr(flags, attribute, False)), None)
    config = None
    # accelerate reads its default config too, except under --cpu
    if flags.config_file is not None or (os.path.isfile(default_config_file) and not flags.cpu):
        path = flags.config_file and os.path.join(cwd, os.path.expanduser(flags.config_file))
        try:
            config = load_config_from_file(path)
        except Exception:  # noqa: BLE001 - accelerate itself failed on it, or it has gone: nothing to compare
            return None
        if str(config.compute_environment).split(".")[-1] != "LOCAL_MACHINE":
            return None
    processes, processes_from = flags.num_processes, "--num_processes"
    if processes is None and config is not None and getattr(config, "num_processes", -1) > 0:
        processes, processes_from = config.num_processes, "config"
    return Asked(processes, os.path.basename(flags.config_file or default_config_file) if config else None,
                 str(config.distributed_type).split(".")[-1] if config else None, flag, processes_from,
                 named=flags.config_file is not None)


def launching_command() -> tuple[list[str], str] | None:
    """The command line and folder of the process that started this one (psutil, which accelerate requires); None
    when the system does not say."""
    try:
        import psutil

        parent = psutil.Process(os.getppid())
        return parent.cmdline(), parent.cwd()
    except Exception:  # noqa: BLE001 - no such process, access denied, an unsupported system: nothing to compare
        return None


def shortfall(launch: Launch, started_by: tuple[list[str], str] | None = None) -> str | None:
    """One line when this process was started by an `accelerate launch` that asked for more than it got: more
    processes than WORLD_SIZE, or a sharding that a flag dropped; None otherwise (or when nothing says what was
    asked: another launcher, or none)."""
    started_by = started_by or launching_command()
    arguments = accelerate_arguments(started_by[0]) if started_by else None
    asked = asked_of(arguments, started_by[1]) if arguments is not None else None
    if asked is None:
        return None
    # The simple launcher starts one process: a WORLD_SIZE above 1 there came from the environment, not from it, and
    # the process would wait for ranks nobody starts
    inherited = asked.simple and launch.world > 1
    started = 1 if inherited else launch.world
    fewer = asked.processes is not None and asked.processes > started
    if not (fewer or asked.overridden):
        return None
    n = asked.processes
    want = (asked.sharding or "DDP") + (f" on {n} process{'es' if n != 1 else ''}" if n else "")
    got = ("one process" if inherited else launch.name) + ("" if started == 1 else f" on {started} processes")
    if inherited:
        got += f" (its WORLD_SIZE={launch.world} came from the environment, which the simple launcher passes on)"
    simple = "starts one process, leaving the others to mpirun"
    if asked.overridden:
        why = f"{asked.flag} overrides the config's distributed_type: {asked.config_type}"
        why += f" and {simple}" if asked.flag == "--cpu" and fewer else ""
    else:
        chosen = asked.flag or (f"distributed_type: {asked.config_type}" if asked.config_type else
                                "neither --multi_gpu nor a config")
        why = f"accelerate's simple launcher (chosen by {chosen}) {simple}"
    if asked.flag == "--cpu" and n == 1 and asked.sharding:  # the next check would say one process shards nothing
        fix = "drop --cpu and launch on several processes (r1kit sets use_cpu itself on ranks without a GPU)"
    elif asked.flag is not None and (asked.overridden or asked.config_type in ("MULTI_GPU", *SHARDED_TYPES)):
        # the config file launches as asked once the flag that overrides it is gone
        fix = f"drop {asked.flag}" + (" (r1kit sets use_cpu itself on ranks without a GPU)" if asked.flag == "--cpu"
                                      else f" (the config launches {asked.config_type})")
    else:
        fix = (f"{'drop --cpu and ' if asked.flag == '--cpu' else ''}launch with --multi_gpu --num_processes {n} or "
               "--config_file recipes/accelerate_configs/ddp.yaml (r1kit sets use_cpu itself on ranks without a GPU), "
               f"or give the r1kit command --world-size {n} instead")
    return f"accelerate launch asked for {want} ({asked.said()}) and started {got}: {why}; {fix}"


def enable_fsdp_on_cpu(accelerator, args=None) -> bool:
    """Turns FSDP back on for a gloo group of CPU ranks, where accelerate built the FSDP plugin from the launch (or
    transformers from the recipe's `fsdp` and `fsdp_config`: `args.fsdp_plugin_args`) and then dropped it (it shards
    only on GPUs): its own FSDP2 path (`fully_shard`) then wraps the model. True when it did."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = accelerator.state
    launch = requested()
    if (launch.engine != "fsdp" or state.distributed_type != DistributedType.MULTI_CPU
            or getattr(state, "fsdp_plugin", None) is not None):
        return False
    recipe = getattr(args, "fsdp_plugin_args", None)
    # the recipe's, as transformers built it; else from the launch's FSDP_* environment, as accelerate reads it
    plugin = FullyShardedDataParallelPlugin(**recipe) if recipe else FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise ConfigError("FSDP on ranks without a GPU runs as FSDP2 only: set fsdp_version: 2 in the accelerate config")
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    # Every later AcceleratorState() copies the process state's type over its own: set it there too
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True


# --------------------------------------------------------------------------------------------------------------------
# What each rank holds
# --------------------------------------------------------------------------------------------------------------------
def local_bytes(tensor) -> int:
    """The bytes of `tensor` this rank holds: a DTensor's local shard, a ZeRO-3 parameter's partition."""
    partition = getattr(tensor, "ds_tensor", None)
    if partition is not None:
        return partition.numel() * partition.element_size()
    if hasattr(tensor, "to_local"):
        tensor = tensor.to_local()
    return tensor.numel() * tensor.element_size()


def whole_bytes(tensor) -> int:
    shape = getattr(tensor, "ds_shape", None)
    numel = 1
    for size in (shape if shape is not None else tensor.shape):
        numel *= size
    return numel * tensor.element_size()


def optimizer_state_bytes(optimizer) -> int:
    """The bytes of optimizer state this rank holds (Adam's moments, ZeRO's partitions of them), through accelerate's
    and DeepSpeed's wrappers."""
    seen, inner = set(), optimizer
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        state = getattr(inner, "state", None)
        if isinstance(state, dict) and state:
            return sum(local_bytes(value) for per_param in state.values() if isinstance(per_param, dict)
                       for value in per_param.values() if hasattr(value, "element_size") and value.dim() > 0)
        inner = getattr(inner, "optimizer", None)
    return 0


def rank_holdings(model, optimizer) -> dict:
    parameters = list(model.parameters())
    return {"parameter_bytes": sum(local_bytes(p) for p in parameters),
            "whole_parameter_bytes": sum(whole_bytes(p) for p in parameters),
            "trainable_parameter_bytes": sum(local_bytes(p) for p in parameters if p.requires_grad),
            "optimizer_state_bytes": optimizer_state_bytes(optimizer)}


def describe(accelerator, model, args) -> str:
    """The start-up block's `sharding` line: strategy, processes, and the parameter bytes each rank will hold."""
    launch = requested(args)
    world = accelerator.num_processes
    whole = sum(whole_bytes(p) for p in model.parameters())
    per_rank = whole / world if launch.shards_parameters else whole
    strategy = launch.name if world > 1 or launch.engine else "one process, no sharding"
    line = f"{strategy} on {world} process{'es' if world != 1 else ''}"
    if launch.shards_parameters:
        line += f": {mib(per_rank)} of parameters per rank ({mib(whole)} whole)"
    elif world > 1:
        line += f": every rank holds all {mib(whole)} of parameters"
        if launch.engine == "deepspeed" and launch.level >= 1:
            line += ", optimizer state sharded"
    return line


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def record_holdings(accelerator, model, optimizer, args, output_dir: str) -> dict | None:
    """Every rank's holdings, gathered; written to OUTPUT_DIR/sharding.json by the main process (a collective: every
    rank calls it)."""
    from accelerate.utils import gather_object

    mine = {"rank": accelerator.process_index, **rank_holdings(model, optimizer)}
    ranks = gather_object([mine])
    if not accelerator.is_main_process:
        return None
    launch = requested(args)
    document = {"strategy": launch.name, "world_size": accelerator.num_processes,
                "distributed_type": str(accelerator.distributed_type).split(".")[-1], "ranks": ranks}
    try:
        (Path(output_dir) / RECORD).write_text(json.dumps(document, indent=1) + "\n")
    except OSError as error:  # the output folder went away: the run's own checks report it
        logger.debug("%s not written: %s", RECORD, error)
    return document


class ShardingRecord(TrainerCallback):
    """After the first optimizer step of a multi-process run, every rank's holdings in OUTPUT_DIR/sharding.json
    (`record_holdings`, a collective: every rank records)."""

    def __init__(self, trainer):
        self.trainer, self.done = trainer, False

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        if self.done or trainer.accelerator.num_processes <= 1:
            return
        self.done = True
        record_holdings(trainer.accelerator, trainer.model, trainer.optimizer, args, args.output_dir)


class ShardedAsLaunched:
    """For a transformers trainer (GRPO's and SFT's): FSDP on ranks without a GPU, which accelerate builds from the
    launch and drops (`r1kit.launching.sharding.enable_fsdp_on_cpu`), and OUTPUT_DIR/sharding.json, what each rank holds after
    the first optimizer step (`ShardingRecord`)."""

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        if enable_fsdp_on_cpu(self.accelerator, self.args):
            self.is_fsdp_enabled = True  # what transformers derives from the plugin right after creating it

    def add_sharding_record(self) -> None:
        self.add_callback(ShardingRecord(self))

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Checkpoints as the launch says (FSDP's sharded state dict: each rank its shard); the final model always
        whole, as `from_pretrained` loads it (transformers writes no weights at all for a final save under a sharded
        FSDP state dict)."""
        if _internal_call or not (self.is_fsdp_enabled and fsdp_saves_sharded(self.accelerator)):
            return super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        state_dict = self.accelerator.get_state_dict(self.model)  # a collective: gathered whole on the main process
        if self.args.should_save:
            self._save(output_dir, state_dict=state_dict)


def fsdp_saves_sharded(accelerator) -> bool:
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    return plugin is not None and "SHARDED" in str(plugin.state_dict_type)
