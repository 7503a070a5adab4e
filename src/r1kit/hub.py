"""The Hugging Face Hub: whether a name is a Hub id or a local path, whether a Hub repository can be used from this
machine (`hub_problem`, asked before anything loads), and publishing checkpoints as revisions, to the Hub or to a
local folder (`file:///some/dir`) with the same layout, for air-gapped clusters and for tests.

A revision of checkpoint N is `{hub_model_revision}-step-{N:09d}` (Open-R1's naming). Optimizer, scheduler and RNG
states are never published.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from r1kit.errors import ConfigError, one_line

logger = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")
# Resume state, not the model: optimizer, schedule, RNG, DeepSpeed shards, and r1kit's own run state (the recipe's
# local paths in r1kit_checkpoint.json, the pass measurements, the sampling and rollout state)
EXCLUDED = ["optimizer.pt", "scheduler.pt", "rng_state*.pth", "*.pth", "*.pt", "global_step*", "training_args.bin",
            "r1kit_*", ".r1kit_*", "*.tmp"]  # (and a record being written: its temporary file)
# The run's own records in its output folder: this machine's paths, host and command line (r1kit_run.json,
# summary.json, the pickled training_args.bin), every completion (completions.jsonl), measurements: never uploaded
# with the model by transformers' push_to_hub either (`private_files_stay`)
# (a checkpoint pushed with hub_strategy keeps its resume state: optimizer, scheduler, RNG)
PRIVATE_RECORDS = ["r1kit_*", ".r1kit_*", "*.tmp", "training_args.bin", "summary.json", "*.jsonl", "training_pass.json", "_*", "*.lock",
                   "eval/*", "*.png"]


@contextmanager
def private_files_stay():
    """Within it, transformers' own uploads (`push_to_hub`: the output folder at the end; each checkpoint's, with its
    hub_strategy) leave out `PRIVATE_RECORDS` besides what they leave out themselves, so what reaches the Hub carries
    no path, host name or command line of this machine."""
    import transformers.trainer as trainer_module  # deferred: transformers

    original = trainer_module.hf_api

    class Filtered:
        def __init__(self, api):
            self._api = api

        def __getattr__(self, name):
            return getattr(self._api, name)

        def upload_folder(self, *args, ignore_patterns=None, **kwargs):
            given = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns or [])
            return self._api.upload_folder(*args, ignore_patterns=given + PRIVATE_RECORDS, **kwargs)

    trainer_module.hf_api = lambda *a, **k: Filtered(original(*a, **k))
    try:
        yield
    finally:
        trainer_module.hf_api = original


# --------------------------------------------------------------------------------------------------------------------
# Hub ids and local paths
# --------------------------------------------------------------------------------------------------------------------
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow", ".txt", ".tsv", ".gz", ".zst")  # a data file's
MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt")  # a model file's


def looks_local(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether `name` is meant as a path: it starts with ./, ../, / or ~, has more than one slash (a Hub id has one),
    or ends in a file extension of `suffixes`."""
    return (
        name.startswith(("./", "../", "/", "~", ".\\", "..\\"))
        or name in (".", "..")
        or name.count("/") > 1
        or name.lower().endswith(suffixes)
    )


def relative_to_cwd(path: Path) -> str:
    """" (relative to CWD)" for a relative path, for messages that name a path that does not exist."""
    return "" if path.is_absolute() else f" (relative to {Path.cwd()})"


def hub_offline(kind: str) -> str | None:
    """The environment variable that keeps `kind` ("dataset" or "model") off the Hub, or None."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if kind == "dataset" else ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return next((n for n in names if os.environ.get(n, "").strip().lower() in _TRUE), None)


def in_hub_cache(repo_id: str, kind: str, revision: str | None = None) -> bool:
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
    if in_hub_cache(repo_id, kind, revision):
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


def check_hub_push(hub_model_id: str | None, field: str = "push_to_hub") -> None:
    """A push to the Hub (`push_to_hub: true`, or a Hub name such as pass-rate's `output_dataset_name`) needs the Hub
    and a login; the trainer would otherwise fail while it is being built. The error names the key that asked."""
    asked = "push_to_hub: true" if field == "push_to_hub" else f"{field}: {hub_model_id}"
    instead = "set push_to_hub: false" if field == "push_to_hub" else f"unset {field}"
    offline = hub_offline("model")
    if offline:
        raise ConfigError(f"{asked} pushes to the Hub, but {offline}=1 keeps the Hub away; {instead}, or unset {offline}")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import LocalTokenNotFoundError

    try:
        HfApi().whoami()
    except LocalTokenNotFoundError:
        raise ConfigError(f"{asked} pushes to the Hub, but you are not logged in: run hf auth login (or set HF_TOKEN)") from None
    except Exception as e:  # noqa: BLE001 - DNS, refused connection, an expired token
        reason = one_line(e, 160)
        raise ConfigError(f"{asked} pushes to the Hub, but the Hub cannot be used ({reason}); {instead}, or fix the "
                          "network or login") from None


# --------------------------------------------------------------------------------------------------------------------
# Publishing revisions
# --------------------------------------------------------------------------------------------------------------------
def revision_name(base: str, step: int) -> str:
    return f"{base}-step-{step:09d}"


class HubClient(Protocol):
    def publish(self, folder: Path, revision: str, message: str) -> None: ...

    def revisions_with_content(self, prefix: str) -> list[str]: ...


class LocalHub:
    """`file:///dir`: revision R of the repo lives in `/dir/R/`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def publish(self, folder: Path, revision: str, message: str) -> None:
        target = self.root / revision
        tmp = self.root / f".{revision}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(folder, tmp, ignore=lambda d, names: [n for n in names if _excluded(n)])
        (tmp / "COMMIT_MESSAGE").write_text(message + "\n")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # a revision appears whole or not at all

    def revisions_with_content(self, prefix: str) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith(prefix) and any(p.iterdir()))


class HfHub:
    """The Hugging Face Hub through `huggingface_hub.HfApi` (or any object with its methods, e.g. pointed at a stub)."""

    def __init__(self, repo_id: str, api=None, private: bool = True):
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        self.api = api or HfApi()
        self.private = private
        self._created = False

    def publish(self, folder: Path, revision: str, message: str) -> None:
        if not self._created:
            self.api.create_repo(repo_id=self.repo_id, private=self.private, exist_ok=True)
            self._created = True
        self.api.create_branch(repo_id=self.repo_id, branch=revision, exist_ok=True)
        self.api.upload_folder(
            repo_id=self.repo_id, folder_path=str(folder), revision=revision, commit_message=message,
            ignore_patterns=EXCLUDED,
        )

    def revisions_with_content(self, prefix: str) -> list[str]:
        try:
            refs = self.api.list_repo_refs(repo_id=self.repo_id)
        except Exception as e:  # noqa: BLE001 - a missing repo has no revisions
            if "404" in str(e) or "not found" in str(e).lower():
                return []
            raise
        names = [b.name for b in refs.branches if b.name.startswith(prefix)]
        return [n for n in names if self.api.list_repo_files(repo_id=self.repo_id, revision=n)]


def _excluded(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED)


def get_hub_client(hub_model_id: str) -> HubClient:
    if hub_model_id.startswith("file://"):
        return LocalHub(hub_model_id[len("file://") :])
    return HfHub(hub_model_id)
