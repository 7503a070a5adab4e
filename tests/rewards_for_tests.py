"""Reward functions loaded by import path in the pipeline tests."""

import time


def length_variety(completions, **kwargs):
    """Rewards longer completions: gives a random model reward variance, so every step has a gradient."""
    return [len(c[-1]["content"] if isinstance(c, list) else c) / 20 for c in completions]


def slow_length_variety(completions, **kwargs):
    """The same, slowed down so a test can kill the run between two steps."""
    time.sleep(0.4)
    return length_variety(completions)


async def async_length_variety(completions, **kwargs):
    """`length_variety` as an `async def` reward, which TRL runs concurrently after the plain ones."""
    return [-r for r in length_variety(completions)]
