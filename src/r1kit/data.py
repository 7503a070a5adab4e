"""Datasets: loading from the Hub, local files or folders, built-in tasks and weighted mixtures; prompt building;
the pre-flight check that every selected reward finds its columns."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from r1kit.configs import ConfigError, DatasetMixtureConfig

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "r1kit:"
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists() and (path / "state.json").exists()


def load_source(name: str, config: str | None = None, split: str | None = None):
    """Loads one source: `r1kit:<task>`, a local file (json/jsonl/csv/parquet), a local folder (data files or a
    `save_to_disk` dataset) or a Hub dataset. Returns a `DatasetDict`, or a `Dataset` when `split` is given."""
    import datasets

    if name.startswith(BUILTIN_PREFIX):
        from r1kit.tasks import load_task

        loaded = load_task(name[len(BUILTIN_PREFIX) :])
        return _select_split(loaded, split, name) if split else loaded
    path = Path(os.path.expanduser(name))
    if path.is_file():
        builder = FILE_BUILDERS.get("".join(path.suffixes[-1:]).lower())
        if builder is None:
            raise ConfigError(f"cannot read {name}: use a .json, .jsonl, .csv or .parquet file")
        return datasets.load_dataset(builder, data_files=str(path), split=split or None)
    if path.is_dir():
        if _is_saved_dataset(path):
            loaded = datasets.load_from_disk(str(path))
            return _select_split(loaded, split, name) if split else loaded
        return datasets.load_dataset(str(path), config, split=split or None)
    return datasets.load_dataset(name, config, split=split or None)


def _select_split(dataset_dict, split: str, name: str):
    """`dataset_dict[split]`, with the `train[:10]` slicing syntax, for sources that `load_dataset` does not slice."""
    import re

    match = re.fullmatch(r"(\w+)(?:\[(\d*):(\d*)\])?", split)
    if match is None or match[1] not in dataset_dict:
        raise ConfigError(f"split '{split}' not found in {name}; splits: {', '.join(dataset_dict)}")
    ds = dataset_dict[match[1]]
    if match[2] or match[3]:
        ds = ds.select(range(len(ds))[slice(int(match[2] or 0), int(match[3]) if match[3] else None)])
    return ds


def load_mixture(mixture: DatasetMixtureConfig):
    """Open-R1's mixture: per-member split and columns, `weight` = fraction kept after a seeded shuffle, then one
    concatenation, a final shuffle and an optional seeded train/test split."""
    from datasets import DatasetDict, concatenate_datasets

    parts = []
    for member in mixture.datasets:
        logger.info("Loading mixture member %s (config=%s, split=%s)", member.id, member.config, member.split)
        ds = load_source(member.id, member.config, member.split)
        if member.columns is not None:
            missing = [c for c in member.columns if c not in ds.column_names]
            if missing:
                raise ConfigError(
                    f"dataset_mixture member {member.id}: columns {missing} not found; columns present: {ds.column_names}"
                )
            ds = ds.select_columns(member.columns)
        if member.weight is not None:
            kept = int(len(ds) * member.weight)
            ds = ds.shuffle(seed=mixture.seed).select(range(kept))
            logger.info("Kept %d rows of %s (weight %s)", kept, member.id, member.weight)
        parts.append(ds)
    if not parts:
        raise ConfigError("No datasets were loaded from the mixture configuration")
    columns = {m.id: sorted(ds.column_names) for m, ds in zip(mixture.datasets, parts)}
    if len({tuple(c) for c in columns.values()}) > 1:  # datasets would fill the gaps with nulls, silently
        raise ConfigError(f"dataset_mixture members do not share one schema: {columns}; select common `columns`")
    try:
        combined = concatenate_datasets(_align_features(parts)).shuffle(seed=mixture.seed)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"dataset_mixture members do not share one schema ({e}); select common `columns`") from e
    if mixture.test_split_size is not None:
        split = combined.train_test_split(test_size=mixture.test_split_size, seed=mixture.seed)
        logger.info("Split the mixture into %d train / %d test rows", len(split["train"]), len(split["test"]))
        return split
    return DatasetDict({"train": combined})


def _align_features(parts: list) -> list:
    """Casts members with the same columns to the first member's types (json gives `large_string` where csv gives
    `string` or `int64`), so that equivalent sources concatenate."""
    first = parts[0]
    aligned = [first]
    for ds in parts[1:]:
        if set(ds.column_names) == set(first.column_names) and ds.features != first.features:
            ds = ds.select_columns(first.column_names).cast(first.features)
        aligned.append(ds)
    return aligned


def get_dataset(script_args: Any):
    """The `DatasetDict` a recipe names: its mixture when set, else `dataset_name` (+ `dataset_config`)."""
    from datasets import DatasetDict

    if script_args.dataset_mixture is not None:
        return load_mixture(script_args.dataset_mixture)
    if script_args.dataset_name is None:
        raise ConfigError("Either `dataset_name` or `dataset_mixture` must be provided")
    logger.info("Loading dataset %s (config=%s)", script_args.dataset_name, script_args.dataset_config)
    loaded = load_source(script_args.dataset_name, script_args.dataset_config)
    return loaded if isinstance(loaded, DatasetDict) else DatasetDict({"train": loaded})


def make_conversation(example: dict, prompt_column: str = "prompt", system_prompt: str | None = None) -> dict:
    """`{"prompt": [system?, user]}` from `example[prompt_column]`; the other columns stay for the rewards."""
    if prompt_column not in example:
        raise ConfigError(f"dataset_prompt_column '{prompt_column}' not found; columns present: {sorted(example)}")
    prompt = [{"role": "system", "content": system_prompt}] if system_prompt else []
    prompt.append({"role": "user", "content": example[prompt_column]})
    return {"prompt": prompt}


def to_conversations(dataset_dict, prompt_column: str, system_prompt: str | None):
    """Applies `make_conversation` to every split and drops `messages` columns (they would clash with the prompt)."""
    for split in list(dataset_dict):
        ds = dataset_dict[split]
        if prompt_column not in ds.column_names:
            raise ConfigError(
                f"dataset_prompt_column '{prompt_column}' not found in split '{split}'; columns present: {ds.column_names}"
            )
        ds = ds.map(make_conversation, fn_kwargs={"prompt_column": prompt_column, "system_prompt": system_prompt})
        if "messages" in ds.column_names:
            ds = ds.remove_columns("messages")
        dataset_dict[split] = ds
    return dataset_dict


def check_reward_columns(reward_names: list[str], columns: list[str], split: str = "train") -> None:
    """Fails before any model loads when a selected reward needs a column the dataset lacks."""
    from r1kit.rewards import required_columns

    for reward, needed in required_columns(reward_names).items():
        missing = [c for c in needed if c not in columns]
        if missing:
            raise ConfigError(
                f"reward '{reward}' needs column(s) {missing} but split '{split}' has only {sorted(columns)}. "
                "Rename a column (e.g. with a mixture's `columns`) or choose other rewards."
            )
