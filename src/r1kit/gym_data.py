"""reasoning-gym generators as a dataset source: `dataset_name: reasoning-gym:<generator>`.

reasoning-gym (an optional extra: `pip install 'r1kit[reasoning-gym]'`) generates problems offline, each
`{question, answer, metadata}`, and grades answers with its generator's own `score_answer`. A recipe names the
generator and gives its options in `dataset_options`, next to three options of r1kit's own:

    dataset_name: reasoning-gym:chain_sum
    dataset_options: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1, train_size: 2000, test_size: 200, seed: 0}

Rows have the question in `prompt`, the gold answer in `answer`, everything the `reasoning_gym` reward needs to
call the scorer in `reasoning_gym` (a JSON text: generator, its options, the entry), and, when every answer is a
number, the same answer in `solution` (so math-verify's `accuracy` applies too).

Train and test never share a question: each distinct question belongs to one split, decided by a hash of its text
(the share of test questions is `test_size / (train_size + test_size)`), whatever the seed.
"""

from __future__ import annotations

import difflib
import json
import logging
from decimal import Decimal, InvalidOperation
from typing import Any

from r1kit.errors import ConfigError, one_line
from r1kit.tasks import hash_split

logger = logging.getLogger(__name__)

GYM_PREFIX = "reasoning-gym:"
INSTALL_HINT = "pip install 'r1kit[reasoning-gym]'"
SPLIT_OPTIONS = {"train_size": 2000, "test_size": 200, "seed": 0}  # r1kit's own options, with their defaults
ATTEMPTS_PER_ROW = 20  # generated items per wanted row before giving up (small problem spaces repeat questions)


def is_gym_source(name: Any) -> bool:
    """Whether a `dataset_name` names a reasoning-gym generator (`reasoning-gym:<generator>`)."""
    return isinstance(name, str) and name.startswith(GYM_PREFIX)


def import_reasoning_gym(field: str = "dataset_name"):
    """The `reasoning_gym` module, or a `ConfigError` naming `field` and the install command when it is missing."""
    try:
        import reasoning_gym
    except ImportError:
        raise ConfigError(f"{field}: reasoning-gym is not installed; {INSTALL_HINT}") from None
    return reasoning_gym


def check_generator(generator: str, field: str = "dataset_name") -> None:
    """Raises a `ConfigError` naming close matches when reasoning-gym has no generator `generator`."""
    from reasoning_gym.factory import DATASETS

    if generator not in DATASETS:
        close = difflib.get_close_matches(generator, list(DATASETS), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"generators: {', '.join(sorted(DATASETS))}"
        raise ConfigError(f"{field}: reasoning-gym has no generator '{generator}'; {hint}")


def build_generator(generator: str, options: dict, size: int, seed: int):
    """`reasoning_gym.create_dataset(generator, size=size, seed=seed, **options)`, with a bad option turned into a
    `ConfigError` naming `dataset_options`."""
    reasoning_gym = import_reasoning_gym()
    check_generator(generator)
    try:
        return reasoning_gym.create_dataset(generator, size=size, seed=seed, **options)
    except (TypeError, ValueError, AssertionError) as e:  # unknown option, value out of range (config.validate)
        detail = one_line(e)
        raise ConfigError(f"dataset_options: reasoning-gym:{generator} rejects its options {options}: {detail}") from None


def _split_options(options: dict) -> tuple[dict, dict]:
    """(r1kit's train_size/test_size/seed, checked, with defaults; the generator's own options)."""
    ours = {key: options.get(key, default) for key, default in SPLIT_OPTIONS.items()}
    for key, value in ours.items():
        minimum = 0 if key == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            kind = "non-negative" if key == "seed" else "positive"
            raise ConfigError(f"dataset_options.{key} must be a {kind} integer, got {value!r}")
    return ours, {key: value for key, value in options.items() if key not in SPLIT_OPTIONS}


def is_number(text: Any) -> bool:
    """Whether `text` reads as one decimal number (`-4`, `1,000`, `2.5`)."""
    try:
        return Decimal(str(text).replace(",", "").strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


def _record(generator: str, options: dict, entry: dict) -> str:
    """The JSON text the `reasoning_gym` reward reads: what the scorer needs to grade one row. Metadata values that
    JSON cannot hold become their text."""
    return json.dumps({"generator": generator, "options": options, "entry": entry}, default=str)


def generate_rows(generator: str, options: dict | None = None) -> dict[str, list[dict]]:
    """Rows of the `train` and `test` splits, each question distinct and in one split only (see `split_of`).

    Args:
        generator (`str`): a reasoning-gym generator name, e.g. `chain_sum`.
        options (`dict`, *optional*): the generator's options, plus `train_size` (default 2000), `test_size`
            (default 200) and `seed` (default 0).

    Returns:
        `dict[str, list[dict]]`: rows per split with `prompt`, `answer` and `reasoning_gym` columns.
    """
    sizes, gym_options = _split_options(dict(options or {}))
    wanted = {"train": sizes["train_size"], "test": sizes["test_size"]}
    test_fraction = wanted["test"] / (wanted["train"] + wanted["test"])
    attempts = ATTEMPTS_PER_ROW * sum(wanted.values())
    items = build_generator(generator, gym_options, size=attempts, seed=sizes["seed"])
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    seen: set[str] = set()
    for index in range(attempts):
        if all(len(rows[s]) >= wanted[s] for s in rows):
            break
        entry = items[index]
        question = str(entry["question"])
        split = hash_split(question, test_fraction)
        if question in seen or len(rows[split]) >= wanted[split]:
            continue
        seen.add(question)
        row = {"prompt": question, "answer": str(entry["answer"]), "reasoning_gym": _record(generator, gym_options, entry)}
        rows[split].append(row)
    short = {s: len(rows[s]) for s in rows if len(rows[s]) < wanted[s]}
    if any(n == 0 for n in short.values()):
        raise ConfigError(
            f"dataset_options: reasoning-gym:{generator} with {gym_options} yields only {len(seen)} distinct questions "
            f"({', '.join(f'{s} {len(r)}' for s, r in rows.items())}); widen the generator's options"
        )
    if short:
        logger.warning("reasoning-gym:%s has fewer distinct questions than asked: %s rows (asked %s).", generator,
                       short, {s: wanted[s] for s in short})
    return rows


def load_gym_source(name: str, options: dict | None = None):
    """`reasoning-gym:<generator>` as a `DatasetDict` with `train` and `test` splits; a `solution` column (the
    answer) is added when every answer is a number, for math-verify's `accuracy`."""
    from datasets import Dataset, DatasetDict

    rows = generate_rows(name[len(GYM_PREFIX) :], options)
    numeric = all(is_number(row["answer"]) for split in rows.values() for row in split)
    if numeric:
        for split in rows.values():
            for row in split:
                row["solution"] = row["answer"]
    return DatasetDict({split: Dataset.from_list(split_rows) for split, split_rows in rows.items()})
