"""Deprecated: `r1kit.callbacks` is `r1kit.benchmarking.callbacks` now (this name goes in the next release)."""

from r1kit._moved import alias

alias(__name__)
