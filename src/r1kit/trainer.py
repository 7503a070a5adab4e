"""Deprecated: `r1kit.trainer` is `r1kit.training.trainer` now (this name goes in the next release)."""

from r1kit._moved import alias

alias(__name__)
