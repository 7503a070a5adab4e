"""Deprecated module names, kept for one release after the package was grouped by concern (issue 45): importing an
old name warns once (`DeprecationWarning`) and gives the module at its new place, the same object, so that a user's
script or a recipe's import path keeps working while it is updated."""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings

from r1kit.console import say

MOVED = {  # old name -> new place (the modules a user's script or recipe is likely to import)
    "r1kit.trainer": "r1kit.training.trainer",
    "r1kit.tools": "r1kit.training.tools",
    "r1kit.callbacks": "r1kit.benchmarking.callbacks",
    "r1kit.data": "r1kit.loading.data",
    "r1kit.modeling": "r1kit.loading.modeling",
    "r1kit.tasks": "r1kit.sources.tasks",  # also a command: python -m r1kit.tasks (see `run_as_command`)
}


def alias(old: str) -> None:
    """Makes `old` (the module being imported) the module at its new place, with a warning."""
    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}: import it from there ({old} is removed in the next release)",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


def run_as_command(old: str) -> None:
    """`python -m <old>`, a command the docs gave before the move: says where it went (stderr, one line) and runs the
    module at its new place as the command, with the same arguments."""
    new = MOVED[old]
    say(f"python -m {old} moved to python -m {new} ({old} is removed in the next release)")
    runpy.run_module(new, run_name="__main__", alter_sys=True)
