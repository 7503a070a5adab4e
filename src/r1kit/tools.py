"""Deprecated: `r1kit.tools` is `r1kit.training.tools` now (this name goes in the next release)."""

from r1kit._moved import alias

alias(__name__)
