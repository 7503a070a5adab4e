"""Deprecated: `r1kit.data` is `r1kit.loading.data` now (this name goes in the next release)."""

from r1kit._moved import alias

alias(__name__)
