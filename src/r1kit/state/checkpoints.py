"""Resume policy: which checkpoint a run continues from (`resume: auto | never | path`), and whether there is anything
left to train.

`auto` continues from the newest *complete* checkpoint in `output_dir` (a half-written one, e.g. from a crash while
saving, is skipped with a warning) and says so at the default log level; `never` starts fresh; a path continues from
that checkpoint. The run's ledger (`r1kit.state.ledger`) is read first: a checkpoint of a stretch a tripwire rollback
abandoned is never resumed from. A tripwire's rollback target is verified the same way (`resumable_problem`). A run
that completed records it in `r1kit_run.json`; under `auto`, rerunning it does nothing (`completed_run`) unless the
recipe asks for more steps. Shared by `r1kit grpo` and `r1kit sft`.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from pathlib import Path

from r1kit.errors import ConfigError
from r1kit.state import ledger

logger = logging.getLogger(__name__)

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
RUN_RECORD = "r1kit_run.json"  # what a run says about itself: status (running, interrupted, stopped, completed), ...


# --------------------------------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------------------------------
def checkpoint_problem(path: Path) -> str | None:
    """Why `path` cannot be resumed from, or None: it must hold a readable trainer state, weights that open (a
    safetensors header that matches the file's size; a torch file that loads with `weights_only=True`), and optimizer
    and scheduler states that load the same way when they are there. A kill or a full disk leaves truncated files;
    finding them here lets the resume fall back to an older checkpoint instead of crashing in the middle of loading."""
    state = path / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError):
        return "trainer_state.json is unreadable (half-written?)"
    if any(path.glob("global_step*")):  # a DeepSpeed checkpoint: every rank's model and optimizer files
        return deepspeed_checkpoint_problem(path)
    sharded = sorted(p for p in path.glob(f"{FSDP_SHARDED_PREFIX}*") if p.is_dir())
    if sharded:  # FSDP's sharded state dict: each folder a torch.distributed.checkpoint, every rank's shard in it
        for folder in sharded + sorted(p for p in path.glob("optimizer_*") if p.is_dir()):
            problem = distributed_checkpoint_problem(folder)
            if problem:
                return problem
        return None
    weights = [path / name for name in WEIGHT_FILES if (path / name).is_file()]
    if not weights:
        return "no model weights"
    for file in weights + [path / name for name in TRAINING_STATE_FILES if (path / name).is_file()]:
        problem = file_problem(file)
        if problem:
            return problem
    return None


TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt")
FSDP_SHARDED_PREFIX = "pytorch_model_fsdp_"  # transformers' folder of an FSDP sharded state dict (and optimizer_N)


def distributed_checkpoint_problem(folder: Path) -> str | None:
    """Whether a torch.distributed.checkpoint folder is whole: its metadata reads, and every byte range it names is in
    its file."""
    from torch.distributed.checkpoint import FileSystemReader  # deferred: torch

    try:
        metadata = FileSystemReader(str(folder)).read_metadata()
        needed: dict[str, int] = {}
        for item in metadata.storage_data.values():
            needed[item.relative_path] = max(needed.get(item.relative_path, 0), item.offset + item.length)
    except Exception as e:  # noqa: BLE001 - unreadable metadata: this checkpoint cannot be resumed from
        return f"{folder.name}/.metadata is unreadable ({type(e).__name__})"
    for name, end in sorted(needed.items()):
        file = folder / name
        if not file.is_file():
            return f"{folder.name}/{name} is missing"
        if file.stat().st_size < end:
            return f"{folder.name}/{name} is truncated ({file.stat().st_size} bytes where its metadata needs {end})"
    return None


DEEPSPEED_STATE = re.compile(r"^(?:\w+_)?zero_pp_rank_(\d+)_mp_rank_\d+_(model|optim)_states\.pt$")


def deepspeed_checkpoint_problem(path: Path) -> str | None:
    """Whether a DeepSpeed checkpoint is whole: the tag `latest` names is there, with a model and an optimizer file
    for each rank 0..N-1, each a torch (zip) file whose members all lie inside it (a truncated file loses its central
    directory or its last members; read from the end, not loaded)."""
    tag = (path / "latest").read_text().strip() if (path / "latest").is_file() else None
    folders = [path / tag] if tag else sorted(p for p in path.glob("global_step*") if p.is_dir())
    if not folders or not folders[-1].is_dir():
        return f"its latest names {tag}, which is missing"
    folder = folders[-1]
    ranks: dict[str, set[int]] = {"model": set(), "optim": set()}
    for file in folder.iterdir():
        match = DEEPSPEED_STATE.match(file.name)
        if match:
            ranks[match.group(2)].add(int(match.group(1)))
            problem = zip_problem(file)
            if problem:
                return f"{folder.name}/{problem}"
    world = len(ranks["optim"])
    if not world or ranks["optim"] != set(range(world)):
        return f"{folder.name} holds optimizer states of ranks {sorted(ranks['optim'])}, not 0..N-1"
    if ranks["model"] and ranks["model"] != set(range(world)):
        return f"{folder.name} holds model states of ranks {sorted(ranks['model'])}, optimizer states of 0..{world - 1}"
    return None


def zip_problem(file: Path) -> str | None:
    """Whether a torch file (a zip archive) is whole, from its central directory: each member's data ends in the
    file."""
    import zipfile

    try:
        size = file.stat().st_size
        with zipfile.ZipFile(file) as archive:
            for member in archive.infolist():
                if member.header_offset + len(member.filename) + 30 + member.compress_size > size:
                    return f"{file.name} is truncated"
    except (OSError, zipfile.BadZipFile, ValueError):
        return f"{file.name} is truncated or not a torch file"
    return None


def sharded_state(path: Path) -> tuple[str, int] | None:
    """(the engine, the number of ranks) a checkpoint's model and optimizer are sharded over: a DeepSpeed checkpoint
    (`deepspeed`, its optimizer files), an FSDP sharded state dict (`fsdp`, its ranks' RNG files); None for whole
    weights, which any launch loads."""
    tag = (path / "latest").read_text().strip() if (path / "latest").is_file() else None
    folders = [path / tag] if tag else sorted(p for p in path.glob("global_step*") if p.is_dir())
    if folders and folders[-1].is_dir():
        return "deepspeed", sum(1 for f in folders[-1].iterdir() if (m := DEEPSPEED_STATE.match(f.name))
                                and m.group(2) == "optim")
    if any(p.is_dir() for p in path.glob(f"{FSDP_SHARDED_PREFIX}*")):
        return "fsdp", max(1, len(list(path.glob("rng_state_*.pth"))))
    return None


def sharding_refusal(path: Path, engine: str | None, world: int) -> str | None:
    """Why a launch of `engine` (`fsdp`, `deepspeed` or None) on `world` ranks cannot resume `path` exactly, or None:
    neither transformers nor r1kit reshards a sharded model and optimizer for another world size or engine (FSDP
    across sizes failed with a ValueError or "metadata is None"; ZeRO-3 on a plain process dropped Adam's state
    without a word)."""
    saved = sharded_state(path)
    if saved is None or saved == (engine, world):
        return None
    kind, ranks = saved
    name = {"deepspeed": "DeepSpeed", "fsdp": "FSDP"}[kind]
    now = {"deepspeed": "DeepSpeed", "fsdp": "FSDP"}.get(engine or "", "no sharding")
    return (f"resume: {path} holds its model and optimizer sharded by {name} over {ranks} rank(s); this launch has "
            f"{now} on {world}: nothing reshards them, so the run would not continue as it was. Launch it as it was "
            f"saved ({name} on {ranks} rank(s)), or resume: never to start over")


def file_problem(file: Path) -> str | None:
    """Why a checkpoint file cannot be loaded, or None."""
    if file.name.endswith(".index.json"):  # sharded weights: every shard the index names
        try:
            shards = sorted(set(json.loads(file.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{file.name} is unreadable"
        for shard in shards:
            problem = file_problem(file.parent / str(shard)) if (file.parent / str(shard)).is_file() else f"{shard} is missing"
            if problem:
                return problem
        return None
    if file.suffix == ".safetensors":
        return safetensors_problem(file)
    return torch_file_problem(file)


def safetensors_problem(file: Path) -> str | None:
    """Whether a safetensors file is whole: its header parses and its tensors end where the file ends."""
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            header_size = int.from_bytes(f.read(8), "little")
            if not 0 < header_size <= size - 8:
                return f"{file.name} is truncated or not a safetensors file"
            header = json.loads(f.read(header_size))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return f"{file.name} is not a readable safetensors file"
    if 8 + header_size + end != size:
        return f"{file.name} is truncated ({size} bytes where its header needs {8 + header_size + end})"
    return None


def torch_file_problem(file: Path) -> str | None:
    """Whether a torch file loads with `weights_only=True` (memory-mapped, so a large optimizer state costs little).
    The loader's own message is not quoted: for a garbage file it suggests the unsafe `weights_only=False`."""
    import torch  # deferred: torch

    try:
        torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any failure means this checkpoint cannot be resumed from
        if "mmap" in str(e):  # an old, non-zip torch file cannot be memory-mapped
            try:
                torch.load(file, map_location="cpu", weights_only=True)
                return None
            except Exception:  # noqa: BLE001
                pass
        return f"{file.name} does not load with weights_only=True (truncated or not a torch file: {type(e).__name__})"
    return None


def missing_training_state(path: Path) -> list[str]:
    """The optimizer and scheduler states a checkpoint lacks (a `save_only_model` checkpoint lacks both)."""
    if any(path.glob("global_step*")):
        return []
    return [name for name, kind in (("optimizer.pt", "optimizer*"), ("scheduler.pt", "scheduler*"))
            if not any(path.glob(kind))]


def check_training_state(path: Path, without_optimizer: bool) -> None:
    """A checkpoint without optimizer or scheduler state resumes only when the recipe says so (with a warning:
    a fresh optimizer and a restarted schedule); one without RNG states resumes with a warning (not exactly)."""
    missing = missing_training_state(path)
    if missing and not without_optimizer:
        raise ConfigError(
            f"cannot resume exactly from {path}: it holds no {' or '.join(missing)} (save_only_model: true?). "
            "Set resume_without_optimizer: true to resume with a fresh optimizer and a restarted learning-rate "
            "schedule, or resume: never to start over")
    if missing:
        logger.warning("Resuming from %s without %s (resume_without_optimizer): a fresh optimizer and a restarted "
                       "learning-rate schedule; training will not match an uninterrupted run.", path, " or ".join(missing))
    if not any(path.glob("rng_state*.pth")) and not any(path.glob("global_step*")):
        logger.warning("%s holds no RNG state: the resumed run continues, but will not reproduce an uninterrupted "
                       "one exactly.", path)


def resumable_problem(path: Path, without_optimizer: bool = False) -> str | None:
    """Why training cannot continue from `path` exactly as a resume would (`checkpoint_problem`, or no optimizer or
    scheduler state without `without_optimizer`), or None."""
    problem = checkpoint_problem(path)
    missing = missing_training_state(path) if problem is None else []
    if missing and not without_optimizer:
        return f"it holds no {' or '.join(missing)}"
    return problem


def check_resume(resume: str) -> None:
    """`resume` is `auto`, `never` or an existing checkpoint folder (with a did-you-mean for a near miss)."""
    if resume in ("auto", "never") or Path(resume).is_dir():
        return
    near = difflib.get_close_matches(str(resume), ["auto", "never"], n=1, cutoff=0.6)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise ConfigError(f"resume: {resume} is neither 'auto', 'never' nor an existing checkpoint folder{hint}")


def find_resume_checkpoint(output_dir: str, resume: str, without_optimizer: bool = False) -> str | None:
    """The checkpoint to resume from under the `resume` policy: `auto` (the newest checkpoint in `output_dir` that
    passes `checkpoint_problem`; each one skipped says why), `never`, or a path. A checkpoint without optimizer or
    scheduler state needs `without_optimizer` (`check_training_state`)."""
    check_resume(resume)
    if resume == "never":
        if list(Path(output_dir).glob("checkpoint-*")):
            logger.warning("resume: never, but %s holds checkpoints; starting fresh (they may be overwritten).", output_dir)
        return None
    if resume != "auto":
        path = Path(resume)
        problem = checkpoint_problem(path)
        if problem:
            raise ConfigError(f"cannot resume from {resume}: {problem}")
        check_training_state(path, without_optimizer)
        return str(path)
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    candidates = sorted(
        (int(m[1]), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT_NAME.match(p.name))
    )
    decisions = ledger.read(output_dir)  # first: what the tripwires decided, before any checkpoint is trusted
    for step, path in reversed(candidates):
        problem = abandoned_problem(decisions, path, step) or checkpoint_problem(path)
        if problem is None:
            step = json.loads((path / "trainer_state.json").read_text()).get("global_step", "?")
            # At the default log level too: a rerun that silently continues an old run would surprise.
            check_training_state(path, without_optimizer)
            logger.warning(
                "Resuming from %s (step %s; resume: auto). To start fresh instead, set resume: never (--resume never).",
                path, step,
            )
            return str(path)
        logger.warning("Skipping checkpoint %s: %s; trying the one before.", path, problem)
    return None


def abandoned_problem(decisions: dict, path: Path, step: int) -> str | None:
    """Why a checkpoint in OUTPUT_DIR belongs to a stretch a tripwire rollback abandoned, or None: a decided rollback
    not settled yet (a crash came between the decision and the move) abandons every checkpoint after its target,
    and a checkpoint whose own record names an older branch than its step's (copied back by hand) is one too."""
    rollback = ledger.excluded(decisions, step)
    if rollback:
        return (f"abandoned by the tripwire rollback at step {rollback['step']} (back to "
                f"{Path(rollback['checkpoint']).name})")
    branch = ledger.branch_at(decisions, step)
    try:
        saved_on = json.loads((path / CHECKPOINT_RECORD).read_text()).get("branch")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(saved_on, int) and branch and saved_on < branch["number"]:
        return f"saved before the tripwire rollback {branch['number']}, on the stretch it abandoned"
    return None


CHECKPOINT_RECORD = "r1kit_checkpoint.json"  # the run's contract at the save (r1kit.state.contract), in every checkpoint


# --------------------------------------------------------------------------------------------------------------------
# A finished run stays finished
# --------------------------------------------------------------------------------------------------------------------
def read_run_record(output_dir: str) -> dict:
    """`OUTPUT_DIR/r1kit_run.json`, or {} when there is none or it cannot be read (an older r1kit wrote none)."""
    try:
        record = json.loads((Path(output_dir) / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def completed_run(output_dir: str, max_steps: int, num_train_epochs: float) -> str | None:
    """The one line to say when `output_dir` holds a completed run that the recipe asks nothing more of, else None.

    More is asked when `max_steps` (> 0) is above the step the run reached, or, for a recipe counted in epochs
    (`max_steps` <= 0), when `num_train_epochs` is above the completed run's or the completed run was counted in steps.
    """
    record = read_run_record(output_dir)
    if record.get("status") != "completed" or not isinstance(record.get("global_step"), int):
        return None
    reached = record["global_step"]
    if max_steps > 0:
        if max_steps > reached:
            return None
        target = f"max_steps {max_steps}"
    else:
        before = record.get("num_train_epochs")
        if (record.get("max_steps") or 0) > 0 or not isinstance(before, (int, float)) or num_train_epochs > before:
            return None
        target = f"num_train_epochs {num_train_epochs:g}"
    finished = f", finished {record['finished']}" if record.get("finished") else ""
    return (f"{output_dir} holds a completed run (step {reached}{finished}); nothing to do for {target} "
            f"(resume: auto). Raise max_steps to train further, or set resume: never to start over.")
