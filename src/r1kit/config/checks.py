"""The rules a recipe dataclass checks on its own fields: ranges, closed sets (r1kit's `Literal`s, TRL's documented
values), chat templates, and whole prompt groups in the generation batch (split from `r1kit.config.schema`)."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from typing import Any, Literal

import trl

from r1kit.config.command import check_choice
from r1kit.errors import ConfigError


# --------------------------------------------------------------------------------------------------------------------
# Checks a dataclass runs on its own fields
# --------------------------------------------------------------------------------------------------------------------
def check_range(obj: Any, rules: list[tuple[str, str, Any]]) -> None:
    """Checks numeric fields: each rule is (field, comparison, bound), comparisons `>=`, `>` and `<=`; a `None` value
    (meaning "default") passes."""
    compare = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b}
    for name, op, bound in rules:
        value = getattr(obj, name)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        if not compare[op](value, bound):
            raise ConfigError(f"{name} must be {op} {bound}, got {value}")


def check_literal_fields(obj: Any) -> None:
    """Every `Literal`-typed field of `obj` holds one of its choices (the parser checks recipes and flags; this also
    covers a dataclass built in Python)."""
    for name, choices in literal_fields(type(obj)).items():
        if getattr(obj, name, None) is not None:
            check_choice(name, getattr(obj, name), choices)


@functools.cache
def literal_fields(kind: type) -> dict[str, tuple]:
    """The fields of `kind` whose type is a closed set of `Literal` values (None allowed), with their choices; read
    once per class (resolving the type hints of TRL's 200 fields is not free)."""
    fields_ = {}
    for name, hint in typing.get_type_hints(kind).items():
        members = [hint] if typing.get_origin(hint) is Literal else list(typing.get_args(hint))
        members = [m for m in members if m is not type(None)]
        # Only a closed set: a field that also takes free values (transformers' `str | None | Literal[False]`) is not.
        if members and all(typing.get_origin(m) is Literal for m in members):
            fields_[name] = tuple(c for m in members for c in typing.get_args(m))
    return fields_


@functools.cache
def trl_choices(name: str, config: type = trl.GRPOConfig) -> tuple[str, ...]:
    """The values TRL documents for its string field `name` (TRL checks several of them only at the first training
    step): the quoted values that open the bullets under the field in the class docstring, else the quoted values of
    its first sentence. Empty when TRL's docstring no longer says (then TRL's own check is the only one);
    tests/test_trl_internals.py pins what r1kit reads here."""
    doc = inspect.getdoc(config) or ""
    block = re.search(rf"^(\s*){name} \(.*?\):\n(.*?)(?=^\1\S|\Z)", doc, re.S | re.M)
    if block is None:
        return ()
    bullets = re.findall(r"^\s*- (.*?):", block[2], re.M)
    values = [v for bullet in bullets for v in re.findall(r'`"(\w+)"`', bullet)]
    if not values:
        first_sentence = re.split(r"\.\s", " ".join(block[2].split()), maxsplit=1)[0]
        values = re.findall(r'`"(\w+)"`', first_sentence)
    return tuple(dict.fromkeys(values))


def check_trl_choice(obj: Any, name: str, also: str = "") -> None:
    """`obj.<name>` is one of the values TRL's `GRPOConfig` documents for it (no check when TRL no longer says)."""
    choices = trl_choices(name)
    if choices:
        check_choice(name, getattr(obj, name), choices, also)


def check_chat_template(template: Any, field_name: str = "chat_template") -> None:
    """A chat template must be Jinja that compiles (transformers would fail at the first prompt, mid-start)."""
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    if not isinstance(template, str):
        raise ConfigError(f"{field_name} must be a Jinja template string, got {template!r}")
    try:
        jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols]).parse(template)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{field_name}: not a valid Jinja template (line {e.lineno}: {e.message})") from None


def check_generation_batch(args: Any, world_size: int) -> None:
    """Raises a `ConfigError` that lists the valid `num_generations` when the global generation batch of `args` (a
    GRPO config, or the mapping of its fields) launched on `world_size` processes is not made of whole prompt
    groups. TRL checks the same for the processes it sees; this says it in r1kit's words, and for any world size."""
    get = args.get if isinstance(args, dict) else functools.partial(getattr, args)
    per_device, accumulation = get("per_device_train_batch_size"), get("gradient_accumulation_steps")
    num_generations = get("num_generations")
    generation_batch_size, steps_per_generation = get("generation_batch_size"), get("steps_per_generation")
    for name, value in (("num_generations", num_generations), ("per_device_train_batch_size", per_device),
                        ("gradient_accumulation_steps", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int):  # (checked before the dataclass's own ranges)
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if generation_batch_size is not None and steps_per_generation is not None:
        raise ConfigError("'generation_batch_size' and 'steps_per_generation' cannot both be set; keep one of them")
    if generation_batch_size is not None:
        batch, how = generation_batch_size, f"generation_batch_size {generation_batch_size}"
    else:
        steps = steps_per_generation or accumulation
        batch = per_device * world_size * steps
        how = (
            f"per_device_train_batch_size {per_device} x world size {world_size} x "
            f"{'steps_per_generation' if steps_per_generation else 'gradient_accumulation_steps'} {steps}"
        )
    if num_generations < 2:
        raise ConfigError(f"num_generations must be at least 2 (GRPO compares completions of one prompt), got {num_generations}")
    if batch % num_generations:
        valid = [g for g in range(2, batch + 1) if batch % g == 0]
        raise ConfigError(
            f"num_generations ({num_generations}) must divide the global generation batch ({how} = {batch}). "
            f"Valid num_generations for this world size: {', '.join(map(str, valid)) or 'none (batch < 2)'}; "
            "or change per_device_train_batch_size / gradient_accumulation_steps."
        )


# The async read-ahead's arithmetic: a recipe is checked with it, the producer sized by it (r1kit.training.rollouts)
def lookahead_batches(max_staleness: int, weight_sync_steps: int, steps_per_batch: int = 1) -> int:
    """Generation batches read ahead so that no row is ever older than `max_staleness` optimizer steps when its batch
    starts training: a batch read `d` batches ahead, just before weights that are synchronised every `k` steps
    change, is `d x steps_per_batch + k - 1` steps old at its turn (a generation batch spans `steps_per_batch`
    optimizer steps: `steps_per_generation x num_iterations / gradient_accumulation_steps`; the rows of its later
    steps lag as they do in TRL's synchronous trainer, which is not the async producer's doing)."""
    return max(0, (max_staleness - weight_sync_steps + 1) // max(1, steps_per_batch))


def optimizer_steps_per_batch(steps_per_generation: int, num_iterations: int, accumulation: int) -> int:
    """Optimizer steps one generation batch is trained over."""
    return max(1, -(-steps_per_generation * num_iterations // max(1, accumulation)))
