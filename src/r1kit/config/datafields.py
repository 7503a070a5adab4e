"""The data fields GRPO and SFT recipes share: one dataset or an Open-R1 mixture of them (split from
`r1kit.config.schema`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from r1kit.config.yaml_limits import load_yaml
from r1kit.errors import ConfigError


# --------------------------------------------------------------------------------------------------------------------
# Dataset mixtures (Open-R1 semantics)
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class DatasetConfig:
    """One member of a dataset mixture.

    Args:
        id (`str`): Hub dataset id, local file (json/jsonl/csv/parquet) or local folder.
        config (`str` or `None`, defaults to `None`): dataset configuration (subset) name.
        split (`str`, defaults to `"train"`): split to load; slicing such as `train[:10]` works.
        columns (`list[str]` or `None`, defaults to `None`): columns to keep.
        weight (`float` or `None`, defaults to `None`): fraction of rows kept after a seeded shuffle.
    """

    id: str
    config: str | None = None
    split: str = "train"
    columns: list[str] | None = None
    weight: float | None = None


@dataclass
class DatasetMixtureConfig:
    """A weighted mixture of datasets.

    Args:
        datasets (`list[DatasetConfig]`): the members.
        seed (`int`, defaults to `0`): seed of the per-member shuffles, the final shuffle and the train/test split.
        test_split_size (`float` or `None`, defaults to `None`): if set, the mixture is split into `train` and `test`.
    """

    datasets: list[DatasetConfig]
    seed: int = 0
    test_split_size: float | None = None


def parse_dataset_mixture(mixture: Any) -> DatasetMixtureConfig:
    """Turns the raw `dataset_mixture` mapping of a recipe into a `DatasetMixtureConfig` (Open-R1's rules)."""
    if not isinstance(mixture, dict) or "datasets" not in mixture:
        raise ConfigError(
            "dataset_mixture must be a dictionary with a 'datasets' key. Expected format: {'datasets': [...], 'seed': int}"
        )
    if not isinstance(mixture["datasets"], list):
        raise ConfigError("'datasets' must be a list of dataset configurations")
    members = []
    for i, entry in enumerate(mixture["datasets"]):
        if not isinstance(entry, dict) or not entry.get("id"):
            raise ConfigError(f"dataset_mixture.datasets[{i}] needs an 'id' (a Hub dataset id or a local path)")
        unknown = set(entry) - {"id", "config", "split", "columns", "weight"}
        if unknown:
            raise ConfigError(
                f"dataset_mixture.datasets[{i}] has unknown keys {sorted(unknown)}; "
                "valid keys: id, config, split, columns, weight"
            )
        weight = entry.get("weight", 1.0)
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))):
            raise ConfigError(f"dataset_mixture.datasets[{i}].weight must be a number in [0, 1], got {weight!r}")
        for key, kind in (("id", str), ("config", str), ("split", str), ("columns", list)):
            if entry.get(key) is not None and not isinstance(entry[key], kind):
                raise ConfigError(
                    f"dataset_mixture.datasets[{i}].{key} must be a {'list of column names' if kind is list else 'string'}, "
                    f"got {entry[key]!r}"
                )
        if weight is not None and not (0.0 <= float(weight) <= 1.0):
            raise ConfigError(f"dataset_mixture.datasets[{i}].weight must be in [0, 1] (fraction of rows kept), got {weight}")
        members.append(
            DatasetConfig(
                id=entry["id"],
                config=entry.get("config"),
                split=entry.get("split", "train"),
                columns=entry.get("columns"),
                weight=weight,
            )
        )
    column_sets = [set(m.columns) for m in members if m.columns is not None]
    if column_sets and any(s != column_sets[0] for s in column_sets):
        raise ConfigError(
            "Column names must be consistent across all dataset configurations in a mixture. "
            f"Found different column sets: {[sorted(s) for s in column_sets]}"
        )
    test_split_size = mixture.get("test_split_size")
    for key, value in (("seed", mixture.get("seed", 0)), ("test_split_size", test_split_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"dataset_mixture.{key} must be a number, got {value!r}")
    if test_split_size is not None and not (0.0 < float(test_split_size) < 1.0):
        raise ConfigError(f"dataset_mixture.test_split_size must be in (0, 1), got {test_split_size}")
    return DatasetMixtureConfig(datasets=members, seed=mixture.get("seed", 0), test_split_size=test_split_size)



@dataclass
class DataFields:
    """`dataset_name` or `dataset_mixture` (Open-R1's rule), shared by the GRPO, SFT and pass-rate recipes: the
    mixture given as a mapping, or as JSON/YAML text on the command line, becomes a `DatasetMixtureConfig`;
    `dataset_options` (a generated dataset's options) are a mapping too, and go with `dataset_name` only."""

    def check_data_fields(self) -> None:
        if self.dataset_name is None and self.dataset_mixture is None:
            raise ConfigError("Either `dataset_name` or `dataset_mixture` must be provided")
        if isinstance(self.dataset_mixture, str):  # given as JSON on the command line
            self.dataset_mixture = load_yaml(self.dataset_mixture, "dataset_mixture")
        if self.dataset_mixture is not None and not isinstance(self.dataset_mixture, DatasetMixtureConfig):
            self.dataset_mixture = parse_dataset_mixture(self.dataset_mixture)
        if isinstance(self.dataset_options, str):  # given as JSON/YAML on the command line
            self.dataset_options = load_yaml(self.dataset_options, "dataset_options")
        if self.dataset_options is not None and not isinstance(self.dataset_options, dict):
            raise ConfigError(f"dataset_options must be a mapping of option: value, got {self.dataset_options!r}")
        if self.dataset_options and self.dataset_mixture is not None:
            raise ConfigError("dataset_options configure dataset_name's generated task, not a dataset_mixture")
