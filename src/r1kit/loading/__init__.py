"""What a run loads, each source checked before it is loaded: data (`data`: the Hub, files, folders, `r1kit:` tasks,
`reasoning-gym:` generators, Open-R1's mixtures; prompts; the rewards' columns) and models (`modeling`: built-in
models, GGUF, CPU fallbacks, tokenizers).

May import: `r1kit.config`, `r1kit.sources`, `r1kit.rewards` and the foundation modules.
"""
