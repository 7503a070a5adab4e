"""Publishing checkpoints as revisions: to the Hugging Face Hub, or to a local folder (`file:///some/dir`) with the
same layout, for air-gapped clusters and for tests.

A revision of checkpoint N is `{hub_model_revision}-step-{N:09d}` (Open-R1's naming). Optimizer, scheduler and RNG
states are never published.
"""

from __future__ import annotations

import fnmatch
import logging
import shutil
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

EXCLUDED = ["optimizer.pt", "scheduler.pt", "rng_state*.pth", "*.pth", "*.pt", "global_step*", "training_args.bin"]


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
