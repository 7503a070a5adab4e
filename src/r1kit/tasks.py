"""Deprecated: `r1kit.tasks` is `r1kit.sources.tasks` now, and `python -m r1kit.tasks` is `python -m
r1kit.sources.tasks` (this name goes in the next release)."""

from r1kit._moved import alias, run_as_command

if __name__ == "__main__":
    run_as_command("r1kit.tasks")
else:
    alias(__name__)
