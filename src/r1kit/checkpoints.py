"""Resume policy: which checkpoint a run continues from (`resume: auto | never | path`), and whether there is anything
left to train.

`auto` continues from the newest *complete* checkpoint in `output_dir` (a half-written one, e.g. from a crash while
saving, is skipped with a warning) and says so at the default log level; `never` starts fresh; a path continues from
that checkpoint. A run that completed records it in `r1kit_run.json`; under `auto`, rerunning it does nothing
(`completed_run`) unless the recipe asks for more steps. Shared by `r1kit grpo` and `r1kit sft`.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from pathlib import Path

from r1kit.errors import ConfigError

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
RUN_RECORD = "r1kit_run.json"  # what a run says about itself: status (running, interrupted, completed), steps, versions


# --------------------------------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------------------------------
def checkpoint_problem(path: Path) -> str | None:
    """Why `path` cannot be resumed from, or None when it holds a readable trainer state and weights."""
    state = path / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError):
        return "trainer_state.json is unreadable (half-written?)"
    if not any((path / name).is_file() for name in WEIGHT_FILES) and not any(path.glob("global_step*")):
        return "no model weights"
    return None


def check_resume(resume: str) -> None:
    """`resume` is `auto`, `never` or an existing checkpoint folder (with a did-you-mean for a near miss)."""
    if resume in ("auto", "never") or Path(resume).is_dir():
        return
    near = difflib.get_close_matches(str(resume), ["auto", "never"], n=1, cutoff=0.6)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise ConfigError(f"resume: {resume} is neither 'auto', 'never' nor an existing checkpoint folder{hint}")


def find_resume_checkpoint(output_dir: str, resume: str) -> str | None:
    """The checkpoint to resume from under the `resume` policy: `auto` (newest complete checkpoint in `output_dir`),
    `never`, or a path."""
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
        return str(path)
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    candidates = sorted(
        (int(m[1]), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT_NAME.match(p.name))
    )
    for _, path in reversed(candidates):
        problem = checkpoint_problem(path)
        if problem is None:
            step = json.loads((path / "trainer_state.json").read_text()).get("global_step", "?")
            # At the default log level too: a rerun that silently continues an old run would surprise.
            logger.warning(
                "Resuming from %s (step %s; resume: auto). To start fresh instead, set resume: never (--resume never).",
                path, step,
            )
            return str(path)
        logger.warning("Skipping incomplete checkpoint %s: %s.", path, problem)
    return None


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
