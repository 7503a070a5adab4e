"""Run records. JSON files a command writes whole (`summary.json`, `trainer_state.json`, results) go through
`write_json`: a temporary file beside the target, renamed over it, so a kill leaves the old file or the new one,
never an empty or torn one. JSON Lines (`completions.jsonl`, `heldout_accuracy.jsonl`): one object per line, appended
as the run goes. Two things break them: a kill or a full disk tears the last line, and a resumed run re-does the steps
after its checkpoint, so their rows would appear twice. `rewind` repairs both when a run (re)starts; `read` is what
readers use, skipping a bad line with a warning instead of refusing the file. `check_output_dir`: the folder they go
to exists (or could) and is writable, checked before anything loads.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from r1kit.credentials import redact
from r1kit.errors import ConfigError

logger = logging.getLogger(__name__)


def write_json(path: Path, content, indent: int = 2) -> None:
    """Writes `content` as JSON to `path` atomically (a temporary file, flushed to disk, then renamed)."""
    write_text(path, json.dumps(content, indent=indent, ensure_ascii=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Writes `text` to `path` atomically (see `write_json`), every known secret redacted (`r1kit.credentials`)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as f:
            f.write(redact(text))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def rewind(path: Path, step: int) -> int:
    """Keeps the rows of `path` whose `step` is at most `step` (what the checkpoint being resumed had done; at step 0,
    a fresh start, none) and drops a torn or unreadable line; rewrites the file atomically when anything goes.
    Returns the number of lines dropped (0 when the file does not exist)."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            row = _row(line)
            if step > 0 and row is not None and line.endswith("\n") and _step(row) <= step:
                kept.append(line)
            else:
                dropped += 1
    if dropped:
        write_text(path, "".join(kept))
        logger.info("%s: dropped %d row(s) after step %d (re-done by this run, or torn)", path.name, dropped, step)
    return dropped


def read(path: Path) -> list[dict]:
    """The rows of `path`; a line that is not a JSON object (torn by a kill, edited by hand) is skipped with one
    warning that counts them."""
    rows, bad = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            row = _row(line)
            if row is None:
                bad += 1
            else:
                rows.append(row)
    if bad:
        logger.warning("%s: skipped %d unreadable line(s) (torn by a kill or a full disk?)", path, bad)
    return rows


def _row(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _step(row: dict) -> float:
    step = row.get("step")
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else float("inf")


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
            raise ConfigError(
                f"{field}: cannot create {output_dir} ({e.strerror or e}); choose a writable folder") from None
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(f"{field}: cannot create {output_dir}: {existing} is a file; choose another {field}")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: {existing} is not writable; choose a writable folder for {field}")
