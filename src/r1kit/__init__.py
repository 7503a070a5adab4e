"""r1kit: train reasoning language models with GRPO from a YAML recipe, on TRL.

Importing `r1kit` is cheap: it imports neither torch nor TRL. Use the modules: `r1kit.config`, `r1kit.loading.data`,
`r1kit.loading.modeling`, `r1kit.rewards`, `r1kit.grpo`.
"""

__version__ = "0.1.0"
