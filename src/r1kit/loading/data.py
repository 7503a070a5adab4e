"""Datasets: loading from the Hub, local files or folders, built-in tasks and weighted mixtures; prompt building;
the pre-flight check that every selected reward finds its columns."""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from r1kit.config.schema import DataFields, DatasetMixtureConfig
from r1kit.errors import ConfigError, one_line
from r1kit.hub import DATA_SUFFIXES, hub_problem, looks_local, relative_to_cwd  # noqa: F401 (DATA_SUFFIXES: read from here too)
from r1kit.rewards import required_columns
from r1kit.sources.gym_data import GYM_PREFIX, is_gym_source, load_gym_source
from r1kit.sources.tasks import BUILTIN_PREFIX, TASKS, load_task

logger = logging.getLogger(__name__)

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
# Below these sizes, loading and mapping take well under a second: a progress bar would only flash past.
SMALL_FILE_BYTES = 100 * 2**20
SMALL_ROWS = 100_000


@contextmanager
def progress_bars(show: bool):
    """Shows (or hides) the `datasets` progress bars inside the block, then restores the previous setting."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    if was_enabled and not show:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled and not show:
            datasets.enable_progress_bars()


def _error_text(e: BaseException) -> str:
    return one_line(e)


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists() and (path / "state.json").exists()


# --------------------------------------------------------------------------------------------------------------------
# Checks of a recipe's data sources (before anything loads)
# --------------------------------------------------------------------------------------------------------------------
def _empty_file(path: Path) -> bool:
    size = path.stat().st_size
    return size == 0 or (size < 4096 and not path.read_bytes().strip())


def check_source(name: Any, field: str, revision: str | None = None, hub: bool = True) -> None:
    """A dataset source (`dataset_name` or a mixture member's `id`): a built-in task, an existing local file or
    folder with data, or a Hub id that can be reached (asked only with `hub`). Raises a `ConfigError` naming
    `field`."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{field} must be a Hub id, a local file or folder, or r1kit:<task>; got {name!r}")
    if name.startswith(GYM_PREFIX):  # generated offline; the generator and its options are checked as it loads
        return
    if name.startswith(BUILTIN_PREFIX):
        if name[len(BUILTIN_PREFIX) :] not in TASKS:
            raise ConfigError(f"{field}: unknown built-in task '{name}'; available: {', '.join(BUILTIN_PREFIX + t for t in TASKS)}")
        return
    path = Path(os.path.expanduser(name))
    if path.is_file():
        if path.suffix.lower() not in FILE_BUILDERS:
            raise ConfigError(f"{field}: cannot read {name}; use a {', '.join(FILE_BUILDERS)} file, or a folder")
        if _empty_file(path):
            raise ConfigError(f"{field}: {name} is empty (0 rows); add rows, or point {field} at another file")
        return
    if path.is_dir():
        if not any(p.is_file() for p in path.rglob("*")):
            raise ConfigError(f"{field}: {name} is an empty folder; put data files in it, or point {field} elsewhere")
        return
    if looks_local(name, DATA_SUFFIXES):
        raise ConfigError(f"{field}: {name} does not exist{relative_to_cwd(path)}; fix the path")
    problem = hub_problem(name, "dataset", revision) if hub else None
    if problem:
        raise ConfigError(f"{field}: {problem}")


def check_sources(script_args: DataFields) -> None:
    """The dataset, or each mixture member: a path that exists, a built-in name, or a Hub id that can be reached."""
    if script_args.dataset_mixture is not None:
        for i, member in enumerate(script_args.dataset_mixture.datasets):
            check_source(member.id, f"dataset_mixture.datasets[{i}].id")
    else:
        check_source(script_args.dataset_name, "dataset_name")


def is_local(script_args: DataFields) -> bool:
    """Whether the recipe's data can be read without a hub (so a dry run may check its columns)."""

    def local(name: str) -> bool:
        return name.startswith((BUILTIN_PREFIX, GYM_PREFIX)) or Path(os.path.expanduser(name)).exists()

    if script_args.dataset_mixture is not None:
        return all(local(m.id) for m in script_args.dataset_mixture.datasets)
    return local(script_args.dataset_name)


# --------------------------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------------------------
def load_source(
    name: str, config: str | None = None, split: str | None = None, field: str = "dataset_name",
    options: dict | None = None,
):
    """Loads one source: `r1kit:<task>`, `reasoning-gym:<generator>`, a local file (json/jsonl/csv/parquet), a local
    folder (data files or a `save_to_disk` dataset) or a Hub dataset. Returns a `DatasetDict`, or a `Dataset` when `split` is given.
    `options` configure a generated source (`dataset_options`); other sources take none.

    A source that cannot be read (missing, unreadable, offline) raises a `ConfigError` naming `field`."""
    import datasets
    from datasets.exceptions import DatasetsError

    if is_gym_source(name):
        loaded = load_gym_source(name, options)
        return _select_split(loaded, split, name, field) if split else loaded
    check_source(name, field, hub=False)  # the Hub itself answers below
    if name.startswith(BUILTIN_PREFIX):
        loaded = load_task(name[len(BUILTIN_PREFIX) :], **(options or {}))
        return _select_split(loaded, split, name, field) if split else loaded
    if options:
        raise ConfigError(f"dataset_options: {name} is not a generated dataset (r1kit:<task> or "
                          "reasoning-gym:<generator>); remove dataset_options")
    path = Path(os.path.expanduser(name))
    try:
        if path.is_file():
            builder = FILE_BUILDERS[path.suffix.lower()]
            with progress_bars(path.stat().st_size >= SMALL_FILE_BYTES):
                return datasets.load_dataset(builder, data_files=str(path), split=split or None)
        if path.is_dir():
            if _is_saved_dataset(path):
                loaded = datasets.load_from_disk(str(path))
                return _select_split(loaded, split, name, field) if split else loaded
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            with progress_bars(size >= SMALL_FILE_BYTES):
                return datasets.load_dataset(str(path), config, split=split or None)
        return datasets.load_dataset(name, config, split=split or None)
    except ConfigError:
        raise
    except (DatasetsError, ValueError, OSError, StopIteration) as e:  # unreadable rows, unknown split or config, Hub
        where = "".join(f", {key} {value!r}" for key, value in (("config", config), ("split", split)) if value)
        if "corresponds to no data" in str(e):  # a header-only csv, a slice past the end
            raise ConfigError(f"{field}: {name}{where} has 0 rows; add rows, or fix the split or slice") from None
        raise ConfigError(f"{field}: cannot load {name}{where}: {_error_text(e)}") from None


def _select_split(dataset_dict, split: str, name: str, field: str = "dataset_name"):
    """`dataset_dict[split]`, with the `train[:10]` slicing syntax, for sources that `load_dataset` does not slice."""

    match = re.fullmatch(r"(\w+)(?:\[(\d*):(\d*)\])?", split)
    if match is None or match[1] not in dataset_dict:
        raise ConfigError(f"{field}: split '{split}' not found in {name}; splits: {', '.join(dataset_dict)}")
    ds = dataset_dict[match[1]]
    if match[2] or match[3]:
        ds = ds.select(range(len(ds))[slice(int(match[2] or 0), int(match[3]) if match[3] else None)])
    return ds


def load_mixture(mixture: DatasetMixtureConfig):
    """Open-R1's mixture: per-member split and columns, `weight` = fraction kept after a seeded shuffle, then one
    concatenation, a final shuffle and an optional seeded train/test split."""
    from datasets import DatasetDict, concatenate_datasets

    parts, counts = [], []
    for i, member in enumerate(mixture.datasets):
        field = f"dataset_mixture.datasets[{i}]"
        logger.info("Loading mixture member %s (config=%s, split=%s)", member.id, member.config, member.split)
        ds = load_source(member.id, member.config, member.split, field=f"{field}.id")
        if len(ds) == 0:
            raise ConfigError(
                f"{field}: split '{member.split}' of {member.id} has 0 rows; fix its split (or slice), or remove the member"
            )
        if member.columns is not None:
            missing = [c for c in member.columns if c not in ds.column_names]
            if missing:
                raise ConfigError(
                    f"dataset_mixture member {member.id}: columns {missing} not found; columns present: {ds.column_names}"
                )
            ds = ds.select_columns(member.columns)
        rows = len(ds)
        if member.weight is not None:
            kept = int(len(ds) * member.weight)
            ds = ds.shuffle(seed=mixture.seed).select(range(kept))
            logger.info("Kept %d rows of %s (weight %s)", kept, member.id, member.weight)
        counts.append(f"{member.id}: {rows} rows x weight {member.weight} = {len(ds)}")
        parts.append(ds)
    if not parts:
        raise ConfigError("dataset_mixture.datasets is empty: list at least one dataset")
    if sum(len(ds) for ds in parts) == 0:
        raise ConfigError(f"dataset_mixture keeps 0 rows ({'; '.join(counts)}); raise the members' weight")
    for i, (member, ds, count) in enumerate(zip(mixture.datasets, parts, counts)):
        if len(ds) == 0 and member.weight:
            logger.warning("dataset_mixture.datasets[%d].weight keeps no rows (%s).", i, count)
    columns = {m.id: sorted(ds.column_names) for m, ds in zip(mixture.datasets, parts)}
    if len({tuple(c) for c in columns.values()}) > 1:  # datasets would fill the gaps with nulls, silently
        raise ConfigError(f"dataset_mixture members do not share one schema: {columns}; select common `columns`")
    try:
        combined = concatenate_datasets(_align_features(parts)).shuffle(seed=mixture.seed)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"dataset_mixture members do not share one schema ({e}); select common `columns`") from e
    if mixture.test_split_size is not None:
        try:
            split = combined.train_test_split(test_size=mixture.test_split_size, seed=mixture.seed)
        except ValueError as e:  # a split that would be empty
            raise ConfigError(
                f"dataset_mixture.test_split_size {mixture.test_split_size} of {len(combined)} rows leaves a split "
                f"empty ({_error_text(e)}); choose a size that keeps rows on both sides"
            ) from None
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


def get_dataset(script_args: DataFields):
    """The `DatasetDict` a recipe names: its mixture when set, else `dataset_name` (+ `dataset_config`)."""
    from datasets import DatasetDict

    if script_args.dataset_mixture is not None:
        return load_mixture(script_args.dataset_mixture)
    if script_args.dataset_name is None:
        raise ConfigError("Either `dataset_name` or `dataset_mixture` must be provided")
    logger.info("Loading dataset %s (config=%s)", script_args.dataset_name, script_args.dataset_config)
    loaded = load_source(script_args.dataset_name, script_args.dataset_config, options=script_args.dataset_options)
    dataset = loaded if isinstance(loaded, DatasetDict) else DatasetDict({"train": loaded})
    if any(len(ds) == 0 for ds in dataset.values()):
        raise ConfigError(
            f"dataset_name: {script_args.dataset_name} has an empty split (rows per split: {split_sizes(dataset)}); "
            "add rows, or point dataset_name at other data"
        )
    return dataset


def split_sizes(dataset_dict) -> str:
    """`train 2000, test 200`: the rows of each split."""
    return ", ".join(f"{split} {len(ds):,}" for split, ds in dataset_dict.items())


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
        with progress_bars(len(ds) >= SMALL_ROWS):
            ds = ds.map(make_conversation, fn_kwargs={"prompt_column": prompt_column, "system_prompt": system_prompt})
        if "messages" in ds.column_names:
            ds = ds.remove_columns("messages")
        dataset_dict[split] = ds
    return dataset_dict


def check_reward_columns(reward_names: list[str], columns: list[str], split: str = "train") -> None:
    """Fails before any model loads when a selected reward needs a column the dataset lacks."""
    for reward, needed in required_columns(reward_names).items():
        missing = [c for c in needed if c not in columns]
        if missing:
            raise ConfigError(
                f"reward '{reward}' needs column(s) {missing} but split '{split}' has only {sorted(columns)}. "
                "Rename a column (e.g. with a mixture's `columns`) or choose other rewards."
            )
