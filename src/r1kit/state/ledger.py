"""The run's ledger (`OUTPUT_DIR/tripwire_rollbacks.json`): every tripwire decision, written *before* it is acted
on, so that a crash at any moment leaves a run that the same command continues the way the decision said.

    decide_rollback     a rollback: its target checkpoint, its learning-rate cut, its number (the sampling seed
                        of the branch it starts: seed + 7919 x number); written at the step end that fired
    settle              a decided rollback acted on: the checkpoints of the stretch it abandons (every checkpoint
                        in OUTPUT_DIR saved after its target) moved to OUTPUT_DIR/abandoned/rollback-N/, never deleted
    decide_stop         a stop: the run stays stopped (`active_stop`) until `release_stop` (`resume_after_stop`)
    excluded, resume_shift      what a resume reads first: which checkpoints are of an abandoned stretch, and what
                        a checkpoint saved before the newest rollback needs (its cut, its seed) to continue that branch

A rollback trains again from checkpoint T at the learning-rate scale T was saved with times `lr_factor`. A checkpoint
at step K in OUTPUT_DIR was saved on the newest rollback whose target is below K (`branch_at`), or before any:
the newer rollbacks that went back further moved it aside. So its scale and seed follow from the ledger alone, also
for a checkpoint whose own record a crash cut short.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from r1kit import records

LEDGER = "tripwire_rollbacks.json"
ABANDONED = "abandoned"  # OUTPUT_DIR/abandoned/rollback-N/checkpoint-K: what a rollback left behind
RESEED_STRIDE = 7919  # rollback N samples with seed + 7919 N: the checkpoint's random state would replay the hack
CHECKPOINT_STEP = re.compile(r"checkpoint-(\d+)$")


def empty() -> dict:
    return {"rollbacks": [], "stop": None}


def read(output_dir: str | Path) -> dict:
    """The ledger, or an empty one. A ledger of an older r1kit (`pending`/`done`) reads as rollbacks: done ones
    applied, a pending one not."""
    try:
        ledger = json.loads((Path(output_dir) / LEDGER).read_text())
    except (OSError, ValueError):
        return empty()
    if not isinstance(ledger, dict):
        return empty()
    if "rollbacks" not in ledger:  # the older shape
        old = [dict(d, applied=True) for d in ledger.get("done") or [] if isinstance(d, dict)]
        if isinstance(ledger.get("pending"), dict):
            old.append(dict(ledger["pending"], applied=False))
        ledger = {"rollbacks": old, "stop": None}
    rollbacks = [r for r in ledger.get("rollbacks") or [] if isinstance(r, dict) and step_of(r.get("checkpoint")) is not None]
    for number, rollback in enumerate(rollbacks, start=1):
        rollback.setdefault("number", number)
        rollback.setdefault("target_step", step_of(rollback["checkpoint"]))
        rollback.setdefault("lr_scale", rollback.get("lr_factor", 1.0))
    stop = ledger.get("stop") if isinstance(ledger.get("stop"), dict) else None
    return {"rollbacks": rollbacks, "stop": stop}


def write(output_dir: str | Path, ledger: dict) -> None:
    records.write_json(Path(output_dir) / LEDGER, ledger)


def step_of(checkpoint) -> int | None:
    match = CHECKPOINT_STEP.search(str(checkpoint or ""))
    return int(match[1]) if match else None


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


# --------------------------------------------------------------------------------------------------------------------
# Branches: which rollback a checkpoint was saved on, its learning-rate scale
# --------------------------------------------------------------------------------------------------------------------
def branch_at(ledger: dict, step: int) -> dict | None:
    """The rollback a checkpoint at `step` in OUTPUT_DIR was saved on (the newest whose target is below `step`), or
    None (saved before any rollback)."""
    found = None
    for rollback in ledger["rollbacks"]:
        if rollback["target_step"] < step:
            found = rollback
    return found


def lr_scale_at(ledger: dict, step: int) -> float:
    """The learning-rate scale (the product of the cuts) a checkpoint at `step` was saved with."""
    branch = branch_at(ledger, step)
    return float(branch["lr_scale"]) if branch else 1.0


def excluded(ledger: dict, step: int) -> dict | None:
    """The decided, not yet settled rollback that abandons a checkpoint at `step` (its target is below it), or None.
    (A settled rollback has moved its stretch aside already.)"""
    for rollback in ledger["rollbacks"]:
        if not rollback.get("applied") and rollback["target_step"] < step:
            return rollback
    return None


def resume_shift(ledger: dict, step: int) -> tuple[float, int] | None:
    """(learning-rate factor, rollback number to reseed with) for resuming from a checkpoint at `step` that was saved
    before the newest rollback (its target or older): the branch's cut and seed, which the checkpoint cannot hold.
    None for a checkpoint of the newest branch (its optimizer and random state are the branch's)."""
    if not ledger["rollbacks"]:
        return None
    newest = ledger["rollbacks"][-1]
    if step > newest["target_step"]:
        return None
    return float(newest["lr_scale"]) / lr_scale_at(ledger, step), int(newest["number"])


# --------------------------------------------------------------------------------------------------------------------
# Decisions, written before they are acted on
# --------------------------------------------------------------------------------------------------------------------
def decide_rollback(output_dir: str, checkpoint: str, step: int, wire: str, value: float, lr_factor: float) -> dict:
    """Records a rollback to `checkpoint` decided at `step`; returns it (with its number and the scale its branch
    trains at). Training then stops without saving; `settle` acts on it."""
    ledger = read(output_dir)
    target = step_of(checkpoint)
    stretch = sorted(p.name for p in checkpoint_folders(output_dir) if step_of(p.name) > target)
    rollback = {"number": len(ledger["rollbacks"]) + 1, "checkpoint": str(checkpoint), "target_step": target,
                "step": step, "wire": wire, "value": value, "lr_factor": lr_factor,
                "lr_scale": lr_scale_at(ledger, target) * lr_factor, "abandons": stretch, "applied": False,
                "decided": now()}
    ledger["rollbacks"].append(rollback)
    write(output_dir, ledger)
    return rollback


def decide_stop(output_dir: str, step: int, wire: str, value: float, threshold: float, reason: str) -> dict:
    """Records that a tripwire stops the run at `step` (before training stops)."""
    ledger = read(output_dir)
    ledger["stop"] = {"step": step, "wire": wire, "value": value, "threshold": threshold, "reason": reason,
                      "decided": now(), "released": None}
    write(output_dir, ledger)
    return ledger["stop"]


def settle(output_dir: str) -> dict | None:
    """Acts on every decided rollback not acted on yet: the checkpoints saved after its target move to
    OUTPUT_DIR/abandoned/rollback-N/ (a name taken there gets a suffix), then it is marked applied. Safe to repeat
    after a crash at any point (nothing trains on a branch before its rollback is applied). Returns the newest
    rollback settled, or None. Main process only."""
    ledger = read(output_dir)
    settled = None
    for rollback in ledger["rollbacks"]:
        if rollback.get("applied"):
            continue
        aside = Path(output_dir) / ABANDONED / f"rollback-{rollback['number']}"
        for folder in checkpoint_folders(output_dir):
            if step_of(folder.name) > rollback["target_step"]:
                aside.mkdir(parents=True, exist_ok=True)
                destination, n = aside / folder.name, 1
                while destination.exists():
                    destination, n = aside / f"{folder.name}.{n}", n + 1
                folder.rename(destination)
        rollback["applied"] = True
        write(output_dir, ledger)
        settled = rollback
    return settled


def active_stop(output_dir: str | Path) -> dict | None:
    """The tripwire stop the run is held by (decided and not released), or None."""
    stop = read(output_dir)["stop"]
    return stop if stop and not stop.get("released") else None


def release_stop(output_dir: str) -> None:
    ledger = read(output_dir)
    if ledger["stop"]:
        ledger["stop"]["released"] = now()
        write(output_dir, ledger)


def archive(output_dir: str) -> Path | None:
    """A run starting over at step 0 owes nothing to the decisions of the run before it: its ledger moves to
    OUTPUT_DIR/abandoned/ (kept, not deleted). Returns where it went, or None when there was none."""
    path = Path(output_dir) / LEDGER
    if not path.is_file():
        return None
    target = Path(output_dir) / ABANDONED / f"{LEDGER.removesuffix('.json')}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    path.rename(target)
    return target


def checkpoint_folders(output_dir: str | Path) -> list[Path]:
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"checkpoint-\d+", p.name)),
                  key=lambda p: step_of(p.name))
