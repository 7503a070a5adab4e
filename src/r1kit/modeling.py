"""Deprecated: `r1kit.modeling` is `r1kit.loading.modeling` now (this name goes in the next release)."""

from r1kit._moved import alias

alias(__name__)
