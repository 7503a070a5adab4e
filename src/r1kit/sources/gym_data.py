"""reasoning-gym generators as a dataset source: `dataset_name: reasoning-gym:<generator>`.

reasoning-gym (an optional extra: `pip install 'r1kit[reasoning-gym]'`) generates problems offline, each
`{question, answer, metadata}`, and grades answers with its generator's own `score_answer`. A recipe names the
generator and gives its options in `dataset_options`, next to three options of r1kit's own:

    dataset_name: reasoning-gym:chain_sum
    dataset_options: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1, train_size: 2000, test_size: 200, seed: 0}

Rows have the question in `prompt`, the gold answer in `answer`, everything the `reasoning_gym` reward needs to
call the scorer in `reasoning_gym` (a JSON text: generator, its options, the entry, with tuples, sets and
non-string-keyed dicts kept as they are: `encode_record`), and, when every answer is a number, the same answer in
`solution` (so math-verify's `accuracy` applies too).

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
from r1kit.sources.tasks import hash_split

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


TYPE_TAG = "__r1kit_type__"  # marks a JSON object that stands for a tuple, a set or a dict JSON cannot key
MAX_RECORD_DEPTH = 64  # nesting a record may have; reasoning-gym's deepest (ARC grids in metadata) is about 5


class UnfaithfulRecord(ValueError):
    """A value JSON cannot hold as it is (an object of another type), or nesting past `MAX_RECORD_DEPTH`."""


def encode_value(value: Any, depth: int = 0) -> Any:
    """`value` as JSON can hold it and `decode_value` gives it back equal, types included: tuples, sets and dicts
    whose keys are not all strings become tagged objects (`{"__r1kit_type__": "tuple", "items": [...]}`); numpy
    scalars become Python numbers. Scorers compare these values (arc_agi's grids are tuples of tuples: as lists, the
    gold itself scored 0.05). Raises `UnfaithfulRecord` for anything else."""
    if depth > MAX_RECORD_DEPTH:
        raise UnfaithfulRecord(f"nested deeper than {MAX_RECORD_DEPTH}")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if type(value) in (bool, int, float, str, type(None)) else _plain(value)
    if isinstance(value, list):
        return [encode_value(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(type(k) is str for k in value) and TYPE_TAG not in value:
        return {k: encode_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, dict):
        items = [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in value.items()]
        return {TYPE_TAG: "dict", "items": items}
    kind = {tuple: "tuple", set: "set", frozenset: "frozenset"}.get(type(value))
    if kind is not None:
        return {TYPE_TAG: kind, "items": [encode_value(v, depth + 1) for v in value]}
    if hasattr(value, "item") and type(value).__module__ == "numpy":  # a numpy scalar: its Python number
        return encode_value(value.item(), depth + 1)
    raise UnfaithfulRecord(f"a {type(value).__name__} value")


def _plain(value: Any) -> Any:
    """A subclass of a JSON type (numpy's str_, an IntEnum) as the plain value it compares equal to."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def decode_value(value: Any) -> Any:
    """`json.loads`'s `object_hook`: a tagged object back to its tuple, set, frozenset or dict (`encode_value`)."""
    if isinstance(value, dict) and value.get(TYPE_TAG) in _DECODERS and set(value) == {TYPE_TAG, "items"}:
        items = value["items"]
        if isinstance(items, list):
            try:
                return _DECODERS[value[TYPE_TAG]](items)
            except (TypeError, ValueError):  # unhashable members or malformed pairs: not a record r1kit wrote
                return value
    return value


_DECODERS = {"tuple": tuple, "set": set, "frozenset": frozenset, "dict": lambda pairs: {k: v for k, v in pairs}}


def encode_record(generator: str, options: dict, entry: dict) -> str:
    """The JSON text the `reasoning_gym` reward reads: what the scorer needs to grade one row, encoded faithfully
    (`encode_value`); `decode_record` reads it back. Raises `UnfaithfulRecord` when the entry holds a value that
    cannot be recorded."""
    return json.dumps({"generator": generator, "options": encode_value(options), "entry": encode_value(entry)})


def decode_record(text: str) -> Any:
    """A record's JSON text back to Python values: tuples, sets and non-string-keyed dicts restored. Raises
    `ValueError` for text that is not JSON and `RecursionError` for nesting past the parser's limit."""
    return json.loads(text, object_hook=decode_value)


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
    unrecordable: list[str] = []  # why each row left out could not be recorded
    for index in range(attempts):
        if all(len(rows[s]) >= wanted[s] for s in rows):
            break
        entry = items[index]
        question = str(entry["question"])
        split = hash_split(question, test_fraction)
        if question in seen or len(rows[split]) >= wanted[split]:
            continue
        seen.add(question)
        try:
            record = encode_record(generator, gym_options, entry)
        except UnfaithfulRecord as e:  # its scorer would see something else than it made: skip the row, say so
            unrecordable.append(str(e))
            continue
        rows[split].append({"prompt": question, "answer": str(entry["answer"]), "reasoning_gym": record})
    if unrecordable:
        logger.warning("reasoning-gym:%s: %d rows left out: they hold values a record cannot keep as they are "
                       "(first: %s).", generator, len(unrecordable), unrecordable[0])
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
