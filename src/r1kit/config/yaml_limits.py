"""YAML read within bounds: recipes, and the mappings given as YAML text on the command line.

PyYAML's safe loader refuses Python tags, but not size. An alias (`*a`) is shared, not copied, while loading, so a
400-byte document of nested aliases (a "billion laughs") loads at once and explodes later, when anything walks it
(`str()` of the recipe's `env:` block took hours and gigabytes). So before anything is built, one pass over the
parser's events (iterative: no recursion, nothing expanded) checks the document's size, each string's size, how deep
it nests and how large it would be with every alias written out, and refuses it naming the line that went past.
"""

from __future__ import annotations

from typing import Any

import yaml

from r1kit.errors import ConfigError, one_line

MAX_DOCUMENT_CHARS = 256 << 10  # a recipe; Open-R1's largest is about 4 KB (and reading this much takes ~0.1 s)
MAX_STRING_CHARS = 64 << 10  # one value: chat templates and system prompts are a few KB
MAX_DEPTH = 32  # nested mappings and lists; recipes nest 3 or 4 deep
MAX_EXPANDED = 2 << 20  # characters plus nodes the document stands for with every alias written out
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it (about 25x faster)


def load_yaml(text: str, where: str) -> Any:
    """`yaml.safe_load(text)` after `check_bounds`; malformed YAML is a `ConfigError` too. `where` names the source
    in messages (a recipe's path, a command-line flag)."""
    check_bounds(text, where)
    try:
        return yaml.load(text, Loader=LOADER)  # a safe loader: Python tags are refused
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} is not valid YAML: {one_line(e, 10_000)}") from None


def check_bounds(text: str, where: str) -> None:
    """Raises a `ConfigError` naming the line where `text` goes past a bound (see the module's docstring)."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ConfigError(f"{where}: {len(text):,} characters, more than a recipe may hold ({MAX_DOCUMENT_CHARS:,})")
    open_nodes: list[list] = []  # [expanded size so far, anchor] per mapping or list not yet closed
    anchors: dict[str, int] = {}  # anchor -> expanded size of the node it names
    total = 0
    try:
        for event in yaml.parse(text, Loader=LOADER):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.DocumentStartEvent):
                anchors, total = {}, 0
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(open_nodes) >= MAX_DEPTH:
                    raise ConfigError(f"{where} line {line}: nested more than {MAX_DEPTH} levels deep")
                open_nodes.append([1, event.anchor])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                size, anchor = open_nodes.pop()
                total = _add(open_nodes, anchors, anchor, size, total, where, line, counted=True)
            elif isinstance(event, yaml.ScalarEvent):
                if len(event.value) > MAX_STRING_CHARS:
                    raise ConfigError(f"{where} line {line}: a value of {len(event.value):,} characters, more than "
                                      f"{MAX_STRING_CHARS:,}")
                total = _add(open_nodes, anchors, event.anchor, len(event.value) + 1, total, where, line)
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for _, anchor in open_nodes):
                    raise ConfigError(f"{where} line {line}: alias *{event.anchor} refers to a value that contains it")
                total = _add(open_nodes, anchors, None, anchors.get(event.anchor, 0), total, where, line)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} is not valid YAML: {one_line(e, 10_000)}") from None


def _add(open_nodes: list[list], anchors: dict[str, int], anchor: str | None, size: int, total: int, where: str,
         line: int, counted: bool = False) -> int:
    """Adds a finished node of expanded `size` to the node around it; returns the document's new running total.
    `counted`: a closed mapping or list, whose own parts were counted into the total as they came."""
    if anchor is not None:
        anchors[anchor] = size
    if open_nodes:
        open_nodes[-1][0] += size
    total += 1 if counted else size
    if total > MAX_EXPANDED:  # (a node's own size is part of the total)
        raise ConfigError(f"{where} line {line}: aliases here make the document stand for more than "
                          f"{MAX_EXPANDED:,} characters once expanded (an alias bomb?); write the values out instead")
    return total
