"""Data r1kit generates rather than downloads: the built-in tasks (`tasks`: `r1kit:addition`, hash splits, export)
and reasoning-gym's generators as data (`gym_data`: `reasoning-gym:<generator>`).

May import: `r1kit.errors` only. The rewards read the generated rows' metadata; `r1kit.loading.data` loads them.
"""
